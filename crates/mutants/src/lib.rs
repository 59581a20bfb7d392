//! # bucketproof-mutants: broken token buckets the harness must kill
//!
//! A verification harness earns trust by catching real bugs. This crate keeps a catalogue of the
//! classic token-bucket mistakes, each one a [`bucketproof_trace::Subject`] that deviates
//! from the exact transition in exactly one place, and a kill runner ([`kill`]) that proves the
//! harness catches every one: which oracle fires, how fast, and how small the shrunk counterexample
//! is.
//!
//! - [`keyed`]: the one keyed wrapper all sequential mutants share, with the exact transition split
//!   into hooks ([`keyed::Mistake`]); each mutant overrides one hook ([`mistakes`], and the
//!   expiry mutants 14 and 15 beside the wrapper's horizon in [`keyed`], which sweeps before
//!   every acquire so that a drop meets every rollback);
//! - [`race`]: mutant 6, the read-modify-write split in two critical sections (this crate's own
//!   wrapper around the limiter's transition), killed by two real threads and the arrival-curve
//!   oracle;
//! - mutant 13 is the harness's own `float-textbook` subject, reused as is;
//! - [`sets`]: mutants 22 to 24, the classic multi-limit mistakes, on the real limiter's pieces;
//! - mutants 25 to 27, the classic refund mistakes of reserve-and-settle (refund twice, above
//!   capacity, another key's request), are hooks of the keyed wrapper's settle like the rest;
//! - [`traces`]: deterministic trace families (rollbacks, boundaries, idle, reconfigure, request ids,
//!   key bounds, invalid costs, the lines of the arithmetic);
//! - [`kill`]: the kill runner and `reports/mutants.md`.
//!
//! [`MutantSubjects`] builds every mutant by its stable name `mutant:<slug>`; the harness does not
//! depend on this crate, the CLI registers the factory (`Registry::default().with(MutantSubjects)`).
#![warn(missing_docs)]

pub mod keyed;
pub mod kill;
pub mod mistakes;
pub mod race;
pub mod sets;
pub mod traces;

use bucketproof_check::subjects::FloatTextbookSubject;
use bucketproof_trace::{Setup, Subject, SubjectError, SubjectFactory};

use crate::keyed::{Keyed, Mistake};
use crate::mistakes::*;

/// How a mutant is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillBy {
    /// Generated traces through the lockstep runner and its oracles.
    Traces,
    /// Two real threads and the arrival-curve oracle ([`race::hunt_race`]): sequentially the
    /// mutant is indistinguishable from the real limiter.
    Threads,
}

/// One entry of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mutant {
    /// The mutant's number in the catalogue.
    pub number: u8,
    /// Stable slug; the subject is named `mutant:<slug>`.
    pub slug: &'static str,
    /// The mistake, in one line.
    pub mistake: &'static str,
    /// Where it was seen.
    pub seen: &'static str,
    /// How the kill runner goes after it.
    pub kill_by: KillBy,
}

impl Mutant {
    /// The subject name, `mutant:<slug>`.
    pub fn name(&self) -> String {
        format!("mutant:{}", self.slug)
    }
}

const CATALOGUE: [Mutant; 27] = [
    Mutant {
        number: 1,
        slug: "wall-clock-elapsed",
        mistake: "elapsed from wall-clock time with no clamp: a rollback debits, the recovery re-credits",
        seen: "varnish/libvmod-vsthrottle#4; sethvargo/go-limiter#41",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 2,
        slug: "backwards-cursor",
        mistake: "backwards clock: elapsed clamped to 0 but the cursor set to the earlier time",
        seen: "Go x/time/rate, golang/go#56287",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 3,
        slug: "no-capacity-clamp",
        mistake: "no capacity clamp: an idle bucket accumulates past capacity",
        seen: "udoprog/leaky-bucket#30",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 4,
        slug: "charge-denied",
        mistake: "denied requests are charged",
        seen: "INCR-then-compare stores, e.g. @fastify/rate-limit's Redis store",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 5,
        slug: "oversized-cost",
        mistake: "cost > capacity accepted: denied forever with a bogus retry time",
        seen: "emqx/emqx#2508; rwz/redis-gcra#6",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 6,
        slug: "racy-rmw",
        mistake: "read-modify-write split across two critical sections (a double spend under a race)",
        seen: "GET-compute-SET limiters without a script or lock; the limiter's own racy-variant",
        kill_by: KillBy::Threads,
    },
    Mutant {
        number: 7,
        slug: "retry-floor",
        mistake: "retry-after rounded down: waiting exactly that long is denied again",
        seen: "Go x/time/rate durationFromTokens truncation (crates/float/src/go.rs)",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 8,
        slug: "whole-token-refill",
        mistake: "refill remainder dropped: only whole tokens credited, cursor still moved to now",
        seen: "firecracker-microvm/firecracker#3370",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 9,
        slug: "strict-greater",
        mistake: "`>` instead of `>=` in the allow test",
        seen: "tj/node-ratelimiter#8",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 10,
        slug: "idle-ttl",
        mistake: "a bucket idle past a fixed 60 s TTL is dropped whatever its balance (burst after eviction)",
        seen: "cristipufu/aspnetcore-redis-rate-limiting#46; infinigence/octollm#33",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 11,
        slug: "request-id-twice",
        mistake: "a repeated request id is charged twice",
        seen: "any limiter without idempotency keys behind a retrying client",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 12,
        slug: "retroactive-reconfig",
        mistake: "reconfiguration applied retroactively to the elapsed interval",
        seen: "OpenZeppelin/contracts-sui#350 (audit N-02); redisson/redisson#6499",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 13,
        slug: "float-drift",
        mistake: "float drift: the textbook f64 bucket (the harness's float-textbook subject)",
        seen: "crates/float tests: textbook over-admission after many small refills",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 14,
        slug: "horizon-stored-cursor",
        mistake: "a dropped bucket raises the eviction horizon to its stored cursor, not to the time it was judged full",
        seen: "an eviction horizon kept as the evicted buckets' last cursor (lossless only under a monotone clock)",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 15,
        slug: "no-horizon",
        mistake: "no eviction horizon: a dropped bucket comes back at the caller's now after a rollback",
        seen: "TTL-expired Redis buckets under a lagging client clock (\"recreate full at now\")",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 16,
        slug: "wrapping-credit",
        mistake: "refill credit `elapsed * rate` computed in u64, wrapping once the gap passes 2^64 / rate",
        seen: "`tokens += elapsed_ns * rate` in 64-bit integers",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 17,
        slug: "capacity-units-u64",
        mistake: "capacity in units (`capacity * q * 10^9`) computed in u64, wrapping for large capacities",
        seen: "64-bit scaled-integer buckets (tokens times a fixed precision)",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 18,
        slug: "packed-line-off-by-one",
        mistake: "a balance of exactly 2^62 units stored in the 62-bit packed slot (top bit lost)",
        seen: "the keyed limiter's packed/wide balance split; bit-packed counters with a spill-over",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 19,
        slug: "clock-end-exclusive",
        mistake: "a wait ending exactly at u64::MAX reported as Never (`<` where the rule is `<=`)",
        seen: "deadline overflow guards written as `now + wait < MAX`",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 20,
        slug: "wrapping-refill-sum",
        mistake: "refill sum `balance + credit` wrapping in u128 instead of saturating",
        seen: "`wrapping_add` (or unchecked `+` in release) on a sum assumed to fit",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 21,
        slug: "caller-time-records",
        mistake: "request-id records stamped and judged in the caller's now (a rollback counts as inside the window)",
        seen: "idempotency keys expired by the client's timestamp, not the limiter's",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 22,
        slug: "charge-in-order",
        mistake: "several bandwidths as separate limiters consumed in order: a denial by a later one leaves the earlier ones charged",
        seen: "animir/node-rate-limiter-flexible#280 (\"points are consumed needlessly\"); limiters chained per limit",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 23,
        slug: "smallest-wait",
        mistake: "several bandwidths: a denial reports the wait of the bandwidth that frees first, not the largest",
        seen: "pacing on the limit that frees first while another is still empty",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 24,
        slug: "one-rate",
        mistake: "several bandwidths refilled at one rate (the first's), each keeping its capacity",
        seen: "one refill timestamp and rate per key shared by a key's limits",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 25,
        slug: "refund-twice",
        mistake: "settle refunds every time it is called: a retried settle gives the difference back again",
        seen: "hand-written refunds restoring the same usage twice (hackerai #1221)",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 26,
        slug: "refund-above-capacity",
        mistake: "a refund added with no clamp: a bucket that refilled since the acquire goes above capacity",
        seen: "compensation code beside a clamped refill (bucket4j #19)",
        kill_by: KillBy::Traces,
    },
    Mutant {
        number: 27,
        slug: "refund-other-keys-request",
        mistake: "settle finds the request id on any key: another key's request is refunded to this one",
        seen: "refund tables keyed by request id alone, shared across tenants",
        kill_by: KillBy::Traces,
    },
];

/// Every mutant, in issue order.
pub fn catalogue() -> &'static [Mutant] {
    &CATALOGUE
}

/// Builds every mutant by name (`mutant:<slug>`).
#[derive(Clone, Copy, Debug, Default)]
pub struct MutantSubjects;

fn keyed<M: Mistake>(
    name: &str,
    mistake: M,
    setup: &Setup,
) -> Result<Box<dyn Subject>, SubjectError> {
    Keyed::new(name, mistake, setup).map(|subject| Box::new(subject) as Box<dyn Subject>)
}

/// An expiry mutant: the keyed wrapper sweeping before every acquire, so its mistake in what a drop
/// leaves behind meets every rollback.
fn expiring<M: Mistake>(
    name: &str,
    mistake: M,
    setup: &Setup,
) -> Result<Box<dyn Subject>, SubjectError> {
    Keyed::new(name, mistake, setup)
        .map(|subject| Box::new(subject.sweeping_before_every_acquire()) as Box<dyn Subject>)
}

impl SubjectFactory for MutantSubjects {
    fn names(&self) -> Vec<String> {
        CATALOGUE.iter().map(Mutant::name).collect()
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        let slug = name.strip_prefix("mutant:")?;
        Some(match slug {
            "wall-clock-elapsed" => keyed(name, WallClockElapsed, setup),
            "backwards-cursor" => keyed(name, BackwardsCursor, setup),
            "no-capacity-clamp" => keyed(name, NoCapacityClamp, setup),
            "charge-denied" => keyed(name, ChargeDenied, setup),
            "oversized-cost" => keyed(name, OversizedCost, setup),
            "racy-rmw" => race::RacySubject::new(setup).map(|s| Box::new(s) as Box<dyn Subject>),
            "retry-floor" => keyed(name, RetryFloor, setup),
            "whole-token-refill" => keyed(name, WholeTokenRefill, setup),
            "strict-greater" => keyed(name, StrictGreater, setup),
            "idle-ttl" => keyed(name, IdleTtl, setup),
            "request-id-twice" => keyed(name, RequestIdTwice, setup),
            "retroactive-reconfig" => keyed(name, RetroactiveReconfig, setup),
            // Reused, not copied: the harness's textbook f64 subject (its name stays `float-textbook`).
            "float-drift" => {
                FloatTextbookSubject::new(setup).map(|s| Box::new(s) as Box<dyn Subject>)
            }
            "horizon-stored-cursor" => expiring(name, keyed::HorizonAtStoredCursor, setup),
            "no-horizon" => expiring(name, keyed::NoHorizon, setup),
            "caller-time-records" => keyed(name, keyed::CallerTimeRecords, setup),
            "wrapping-credit" => keyed(name, WrappingCredit, setup),
            "capacity-units-u64" => keyed(name, CapacityUnitsU64, setup),
            "packed-line-off-by-one" => keyed(name, PackedLineOffByOne, setup),
            "clock-end-exclusive" => keyed(name, ClockEndExclusive, setup),
            "wrapping-refill-sum" => keyed(name, WrappingRefillSum, setup),
            "charge-in-order" => {
                sets::ChargeInOrder::new(name, setup).map(|s| Box::new(s) as Box<dyn Subject>)
            }
            "smallest-wait" => {
                sets::smallest_wait(name, setup).map(|s| Box::new(s) as Box<dyn Subject>)
            }
            "one-rate" => sets::one_rate(name, setup).map(|s| Box::new(s) as Box<dyn Subject>),
            "refund-twice" => keyed(name, RefundTwice, setup),
            "refund-above-capacity" => keyed(name, RefundAboveCapacity, setup),
            "refund-other-keys-request" => keyed(name, RefundOtherKeysRequest, setup),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_trace::ConfigSpec;

    #[test]
    fn every_catalogue_name_builds_and_unknown_names_are_not_ours() {
        let setup = Setup::new(ConfigSpec::new(3, "3/2s"));
        let factory = MutantSubjects;
        assert_eq!(factory.names().len(), catalogue().len());
        for name in factory.names() {
            assert!(
                factory.build(&name, &setup).is_some_and(|b| b.is_ok()),
                "{name}"
            );
        }
        assert!(factory.build("core", &setup).is_none());
        assert!(factory.build("mutant:nope", &setup).is_none());
        let numbers: Vec<u8> = catalogue().iter().map(|m| m.number).collect();
        assert_eq!(numbers, (1..=catalogue().len() as u8).collect::<Vec<_>>());
    }
}
