//! The `governor` crate (0.10) as a peer subject, so the comparison can show where its GCRA differs
//! from exact arithmetic.
//!
//! What this adapter owns and promises:
//! - **Config.** A rate `p/q` per second becomes `Quota::with_period(floor(q * 10^9 / p) ns)
//!   .allow_burst(capacity)`. governor stores its emission interval `t` as whole nanoseconds, so the
//!   truncation is governor's own, not the adapter's: at 7,000,000/s, `1e9 / 7e6 = 142.857 ns`
//!   becomes `142 ns`, and governor refills about 0.6% faster than configured. Configs governor
//!   cannot express are refused with [`SubjectError::Build`]: rate 0 (no refill), an interval of
//!   0 ns (more than 10^9 per second), or above `u64` ns, a capacity above `u32::MAX`.
//! - **Keys and time.** One direct limiter per key, each with its own `FakeRelativeClock`
//!   (origin 0 = trace time 0), advanced to the op's `now`. governor's clock cannot go backwards:
//!   an earlier `now` leaves the key's clock where it is, which is the spec's own clamp
//!   `t = max(now, last_refill)` per key (so rollbacks are *not* a source of divergence). Times
//!   beyond [`MAX_TIME_NS`] are refused as [`SubjectError::Unsupported`], because governor adds
//!   nanoseconds without overflow checks.
//! - **Decisions.** `check_n(cost)`; `InsufficientCapacity` (cost above the burst) is
//!   [`SubjectError::InvalidCost`], like the core's `cost > capacity`.
//! - **Remaining tokens.** governor reports only whole cells (`remaining_burst_capacity`). The
//!   exact value of its state is still observable without changing it: a `check_n(capacity)`
//!   right after the decision is denied whenever the bucket is not full (so governor writes
//!   nothing) and its `NotUntil::wait_time_from(now)` is the time `w` until the bucket is full. In
//!   governor's arithmetic the balance is then `capacity - w / t` tokens, reported as
//!   [`Amount::Exact`] with denominator `t`; that probe's wait is also the reported `reset_after`.
//!   This is governor's own balance, in its own (truncated) units, not a rounding by the adapter.
//! - **Waits.** `retry_after` is `NotUntil::wait_time_from(clock)` plus the rollback distance
//!   `clock - now`, measured from the op's `now` like the spec's.
//! - Not offered: reconfigure, sweep, request ids (Unsupported), and the side-effect-free probes
//!   the retry-after and invariant oracles need (`would_allow` returns `None`, `inspect`
//!   `Unsupported`), because a probe at a later time would move the key's clock forward for good.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, FakeRelativeClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{NotUntil, Quota, RateLimiter};

use bucketproof_limiter::Wait;

use bucketproof_trace::subject::{Amount, Observed, Subject, SubjectError};
use bucketproof_trace::trace::{Acquire, Setup};

/// The latest `now` this adapter accepts (2^62 ns, about 146 years). governor's `Nanos` additions do
/// not check for overflow; with this bound and [`MAX_BURST_SPAN_NS`] they cannot overflow.
pub const MAX_TIME_NS: u64 = 1 << 62;

/// The largest `interval * capacity` accepted (2^61 ns, about 73 years to refill a whole bucket).
pub const MAX_BURST_SPAN_NS: u64 = 1 << 61;

type Direct = RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, StateInformationMiddleware>;

/// One key: its limiter and the handle of its clock.
struct Key {
    clock: FakeRelativeClock,
    limiter: Direct,
}

/// `governor` 0.10 behind the [`Subject`] interface.
pub struct GovernorSubject {
    quota: Quota,
    burst: NonZeroU32,
    /// governor's emission interval `t` in ns (the configured one, truncated).
    interval_ns: u64,
    keys: BTreeMap<u64, Key>,
}

impl GovernorSubject {
    /// Built from the setup's default config (see the module doc for what is refused).
    pub fn new(setup: &Setup) -> Result<GovernorSubject, SubjectError> {
        let build = |why: String| SubjectError::Build(format!("governor: {why}"));
        let config = bucketproof_trace::subject::one_bandwidth(&setup.config)?;
        let (numer, denom) = (config.rate().numer(), config.rate().denom());
        if numer == 0 {
            return Err(build("a zero rate (no refill) has no GCRA interval".into()));
        }
        // floor(q * 1e9 / p): governor keeps the interval as whole nanoseconds.
        let interval = u128::from(denom) * u128::from(bucketproof_limiter::NANOS_PER_SECOND)
            / u128::from(numer);
        let interval_ns = u64::try_from(interval)
            .ok()
            .filter(|&ns| ns > 0)
            .ok_or_else(|| build(format!("emission interval {interval} ns is not in 1..2^64")))?;
        let burst = u32::try_from(config.capacity())
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| build("capacity must be in 1..=u32::MAX".into()))?;
        if interval_ns
            .checked_mul(u64::from(burst.get()))
            .is_none_or(|span| span > MAX_BURST_SPAN_NS)
        {
            return Err(build("interval * capacity exceeds 2^61 ns".into()));
        }
        let quota = Quota::with_period(Duration::from_nanos(interval_ns))
            .ok_or_else(|| build("zero period".into()))?
            .allow_burst(burst);
        Ok(GovernorSubject {
            quota,
            burst,
            interval_ns,
            keys: BTreeMap::new(),
        })
    }

    /// governor's emission interval in ns (the configured interval truncated to whole ns).
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Subject for GovernorSubject {
    fn name(&self) -> String {
        "governor".into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if acquire.request_id.is_some() {
            return Err(SubjectError::Unsupported("request ids"));
        }
        let Acquire { key, cost, now, .. } = acquire;
        if now > MAX_TIME_NS {
            return Err(SubjectError::Unsupported("governor: times beyond 2^62 ns"));
        }
        let n = u32::try_from(cost)
            .ok()
            .and_then(NonZeroU32::new)
            .filter(|n| *n <= self.burst)
            .ok_or(SubjectError::InvalidCost)?;
        let created = !self.keys.contains_key(&key);
        let quota = self.quota;
        let entry = self.keys.entry(key).or_insert_with(|| {
            let clock = FakeRelativeClock::default();
            let limiter = RateLimiter::direct_with_clock(quota, clock.clone())
                .with_middleware::<StateInformationMiddleware>();
            Key { clock, limiter }
        });
        // Never backwards: an earlier `now` keeps the key's clock (the spec's per-key clamp).
        let clock_now = entry.clock.now().as_u64();
        if now > clock_now {
            entry.clock.advance(Duration::from_nanos(now - clock_now));
        }
        let t = entry.clock.now().as_u64();
        let behind = t - now.min(t);
        let from_now = |wait: u64| Wait::After(wait.saturating_add(behind));
        let at_clock = entry.clock.now();
        let outcome = entry
            .limiter
            .check_n(n)
            .map_err(|_| SubjectError::InvalidCost)?;
        let retry_after = match &outcome {
            Ok(_) => None,
            Err(not_until) => Some(from_now(nanos(NotUntil::wait_time_from(
                not_until, at_clock,
            )))),
        };
        // The full-bucket probe: denied unless the bucket is full, and a denial writes nothing.
        let until_full = match entry.limiter.check_n(self.burst) {
            Ok(Err(not_until)) => nanos(not_until.wait_time_from(at_clock)),
            // Admitted: the bucket was full. Unreachable after this acquire (an admission leaves at
            // most `burst - 1`, a denial means fewer than `cost <= burst`), but if it happens the
            // probe's charge is undone by a fresh limiter, which is a full bucket: the same state.
            Ok(Ok(_)) => {
                let clock = entry.clock.clone();
                entry.limiter = RateLimiter::direct_with_clock(quota, clock)
                    .with_middleware::<StateInformationMiddleware>();
                0
            }
            Err(_) => return Err(SubjectError::InvalidCost),
        };
        let interval = u128::from(self.interval_ns);
        let full = u128::from(self.burst.get()) * interval;
        let remaining = Amount::Exact {
            numer: full.saturating_sub(u128::from(until_full)),
            denom: interval,
        };
        Ok(Observed {
            allowed: outcome.is_ok(),
            remaining,
            retry_after,
            reset_after: Some(from_now(until_full)),
            bandwidths: Vec::new(),
            created: Some(created),
            replayed: false,
        })
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.keys.remove(&key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_check::runner::{RunOptions, run_trace};
    use bucketproof_model::Rational;
    use bucketproof_trace::trace::{Acquire, ConfigSpec, Op};

    fn subject(capacity: u64, rate: &str) -> GovernorSubject {
        GovernorSubject::new(&Setup::new(ConfigSpec::new(capacity, rate))).unwrap()
    }

    fn tokens(observed: &Observed) -> Rational {
        observed.remaining.to_rational().unwrap()
    }

    #[test]
    fn the_interval_is_truncated_to_whole_nanoseconds_and_oversells() {
        let mut g = subject(1, "7000000/s");
        assert_eq!(g.interval_ns(), 142, "1e9 / 7e6 = 142.857 ns, truncated");
        assert!(g.acquire(Acquire::on_key_0(1, 0)).unwrap().allowed);
        // Exact arithmetic needs 142.857 ns for the next token; governor has it after 142.
        let second = g.acquire(Acquire::on_key_0(1, 142)).unwrap();
        assert!(second.allowed, "governor admits what the model denies");
        let mut exact = subject(1, "1000/s");
        assert_eq!(exact.interval_ns(), 1_000_000);
        assert!(exact.acquire(Acquire::on_key_0(1, 0)).unwrap().allowed);
        assert!(
            !exact
                .acquire(Acquire::on_key_0(1, 999_999))
                .unwrap()
                .allowed
        );
        assert!(
            exact
                .acquire(Acquire::on_key_0(1, 1_000_000))
                .unwrap()
                .allowed
        );
    }

    #[test]
    fn remaining_and_waits_are_governors_exact_state() {
        let mut g = subject(10, "1000/s");
        let d = g.acquire(Acquire::on_key_0(3, 0)).unwrap();
        assert_eq!(tokens(&d), Rational::from(7u32));
        assert_eq!(d.reset_after, Some(Wait::After(3_000_000)));
        // Half a token later: 7.5, take 1.
        let d = g.acquire(Acquire::on_key_0(1, 500_000)).unwrap();
        assert!(d.allowed);
        assert_eq!(tokens(&d), Rational::from_parts(13.into(), 2u32.into()));
        // Ask for 10 with 6.5: wait 3.5 tokens = 3.5 ms; a denial changes nothing.
        let d = g.acquire(Acquire::on_key_0(10, 500_000)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Wait::After(3_500_000)));
        assert_eq!(tokens(&d), Rational::from_parts(13.into(), 2u32.into()));
        assert_eq!(d.created, Some(false));
    }

    #[test]
    fn a_rollback_is_clamped_per_key_and_waits_count_from_now() {
        let mut g = subject(1, "1/s");
        assert!(
            g.acquire(Acquire::on_key_0(1, 10_000_000_000))
                .unwrap()
                .allowed
        );
        let d = g.acquire(Acquire::on_key_0(1, 9_000_000_000)).unwrap();
        assert!(!d.allowed);
        // Clock stays at 10 s: 1 s to the next token, plus the 1 s the call is behind.
        assert_eq!(d.retry_after, Some(Wait::After(2_000_000_000)));
        // Another key has its own clock.
        assert!(
            g.acquire(Acquire {
                key: 1,
                cost: 1,
                now: 1_000,
                request_id: None
            })
            .unwrap()
            .allowed
        );
    }

    #[test]
    fn what_governor_cannot_do_is_an_error_not_a_panic() {
        let setup = |c: u64, r: &str| Setup::new(ConfigSpec::new(c, r));
        assert!(matches!(
            GovernorSubject::new(&setup(1, "0/s")),
            Err(SubjectError::Build(_))
        ));
        assert!(matches!(
            GovernorSubject::new(&setup(1, "2000000000/s")),
            Err(SubjectError::Build(_))
        ));
        assert!(matches!(
            GovernorSubject::new(&setup(u64::from(u32::MAX) + 1, "1/s")),
            Err(SubjectError::Build(_))
        ));
        let mut g = subject(3, "1/s");
        assert_eq!(
            g.acquire(Acquire::on_key_0(4, 0)),
            Err(SubjectError::InvalidCost)
        );
        assert_eq!(
            g.acquire(Acquire::on_key_0(0, 0)),
            Err(SubjectError::InvalidCost)
        );
        assert!(matches!(
            g.acquire(Acquire::on_key_0(1, MAX_TIME_NS + 1)),
            Err(SubjectError::Unsupported(_))
        ));
        assert!(matches!(
            g.acquire(Acquire {
                key: 0,
                cost: 1,
                now: 0,
                request_id: Some(7)
            }),
            Err(SubjectError::Unsupported(_))
        ));
    }

    #[test]
    fn with_a_whole_nanosecond_interval_it_agrees_with_the_model_in_lockstep() {
        let setup = Setup::new(ConfigSpec::new(5, "1000/s"));
        let mut now = 0u64;
        let ops: Vec<Op> = (0..400u64)
            .map(|i| {
                now += [0, 1, 999_999, 1_000_000, 3_333_333][(i % 5) as usize];
                Op::Acquire(Acquire {
                    key: i % 3,
                    cost: 1 + i % 5,
                    now,
                    request_id: None,
                })
            })
            .collect();
        let mut g = GovernorSubject::new(&setup).unwrap();
        let report = run_trace(&setup, ops, &mut g, &RunOptions::default()).unwrap();
        assert!(report.verdict.passed(), "{:?}", report.verdict);
        assert!(report.events.get("denied").copied().unwrap_or(0) > 0);
    }
}
