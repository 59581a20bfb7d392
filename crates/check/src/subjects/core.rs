//! The exact core: `bucketproof_limiter::Limiter<u64>` with injected time and a fixed hasher seed, so
//! which entries the amortized sweep visits is the same on every run.

use bucketproof_limiter::{
    AcquireError, Acquired, Bandwidths, Decision, Decisions, Limiter, Request, SettleError,
};

use bucketproof_trace::subject::{
    Amount, BandwidthObserved, Inspected, Inspection, Observed, Subject, SubjectError,
};
use bucketproof_trace::trace::{Acquire, ConfigSpec, Settle, Setup};

use bucketproof_trace::pressure::SHARDS;

/// The product under test.
pub struct CoreSubject {
    limiter: Limiter<u64>,
}

fn build_error(e: impl std::fmt::Display) -> SubjectError {
    SubjectError::Build(e.to_string())
}

impl CoreSubject {
    /// A limiter configured as `setup` says.
    pub fn new(setup: &Setup) -> Result<CoreSubject, SubjectError> {
        let config = setup.config.to_bandwidths().map_err(build_error)?;
        if config.len() > 1
            && setup.policy == bucketproof_trace::trace::PolicySpec::EvictKeepingDeficit
        {
            // The oracles follow a bucket that came back owing from the state the subject shows,
            // which is its first bandwidth's only.
            return Err(SubjectError::Unsupported(
                "several bandwidths under evict_keeping_deficit (the harness sees one bandwidth's state)",
            ));
        }
        Ok(CoreSubject {
            limiter: Self::builder(config, setup).build(),
        })
    }

    /// The builder the core subject uses, for adapters that wrap the same limiter differently.
    pub fn builder(
        config: impl Into<Bandwidths>,
        setup: &Setup,
    ) -> bucketproof_limiter::Builder<u64> {
        Limiter::builder(config)
            .max_keys(setup.max_keys, setup.policy.into())
            .sweep_per_op(setup.sweep_per_op)
            .dedupe(
                std::time::Duration::from_nanos(setup.dedupe_window_ns),
                setup.dedupe_per_key,
            )
            .shards(SHARDS)
            .hasher_seed(0x6275_636b_6574_7072)
    }

    /// The wrapped limiter.
    pub fn limiter(&self) -> &Limiter<u64> {
        &self.limiter
    }
}

fn amount(decision: &Decision) -> Amount {
    let (numer, denom) = decision.remaining().as_ratio();
    Amount::Exact { numer, denom }
}

/// Maps a core decision to what the oracles compare.
pub fn observe(decision: &Decision, created: bool, replayed: bool) -> Observed {
    Observed {
        allowed: decision.is_allowed(),
        remaining: amount(decision),
        retry_after: decision.retry_after(),
        reset_after: Some(decision.reset_after()),
        bandwidths: Vec::new(),
        created: Some(created),
        replayed,
    }
}

/// Maps a core decision over a bandwidth set to what the oracles compare: the binding part as the
/// whole decision, the largest wait as its retry-after, and (for several bandwidths) every part.
pub fn observe_set(decisions: &Decisions, created: bool, replayed: bool) -> Observed {
    let mut observed = observe(decisions.binding(), created, replayed);
    observed.retry_after = decisions.retry_after();
    if let [_, _, ..] = decisions.bandwidths() {
        observed.bandwidths = (decisions.bandwidths().iter())
            .map(|part| BandwidthObserved {
                remaining: amount(part),
                retry_after: part.retry_after(),
                reset_after: Some(part.reset_after()),
            })
            .collect();
    }
    observed
}

/// An acquire as the limiter's front ends take it, next to `acquire.key` (the in-memory and the Redis
/// limiter share it).
pub fn request(acquire: Acquire) -> Request {
    let mut request = Request::cost(acquire.cost).at(acquire.now);
    request.request_id = acquire.request_id.map(Into::into);
    request
}

/// Maps what the limiter's front ends return for an acquire to what the oracles compare.
pub fn observe_acquired(acquired: &Acquired) -> Observed {
    observe(&acquired.decision, acquired.created, acquired.replayed)
}

/// Maps a core error to the harness's.
pub fn subject_error(error: AcquireError) -> SubjectError {
    match error {
        AcquireError::InvalidCost { .. } => SubjectError::InvalidCost,
        AcquireError::KeyLimitReached { .. } => SubjectError::KeyLimitReached,
        // A refusal this harness does not know yet: reported as the subject's error, never a denial.
        other => SubjectError::Store(other.to_string()),
    }
}

/// A settle as the limiter's front ends take it, next to `settle.key` (the in-memory limiter and
/// the stores share it).
pub fn settle_request(settle: Settle) -> bucketproof_limiter::Settle {
    bucketproof_limiter::Settle::new(settle.request_id, settle.actual).at(settle.now)
}

/// Maps a settle's refusal to the harness's.
pub fn settle_error(error: SettleError) -> SubjectError {
    match error {
        SettleError::InvalidActual { .. } => SubjectError::InvalidCost,
        SettleError::UnknownRequest => SubjectError::UnknownRequest,
        SettleError::NotAdmitted => SubjectError::NotAdmitted,
        SettleError::AlreadySettled { .. } => SubjectError::AlreadySettled,
        other => SubjectError::Store(other.to_string()),
    }
}

impl Subject for CoreSubject {
    fn name(&self) -> String {
        "core".into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let acquired = self
            .limiter
            .acquire_set_with(&acquire.key, request(acquire))
            .map_err(subject_error)?;
        Ok(observe_set(
            &acquired.decision,
            acquired.created,
            acquired.replayed,
        ))
    }

    fn settle(&mut self, settle: Settle) -> Result<Observed, SubjectError> {
        let settled = self
            .limiter
            .settle_set(&settle.key, settle_request(settle))
            .map_err(settle_error)?;
        Ok(observe_set(&settled.decision, false, settled.replayed))
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        let config = config.to_bandwidths().map_err(build_error)?;
        self.limiter
            .reconfigure_at(&key, config, now)
            .map(drop)
            .map_err(subject_error)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.limiter.forget(&key);
        Ok(())
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.limiter.sweep_at(now);
        Ok(())
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        Some(
            self.limiter
                .would_allow_at(&acquire.key, acquire.cost, acquire.now),
        )
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        let held = self.limiter.inspect(&key);
        held.map(|(state, config)| Inspected {
            tokens: Amount::Exact {
                numer: state.balance(),
                denom: config.units_per_token(),
            },
            last_refill: state.last_refill(),
            capacity: config.capacity(),
        })
        .into()
    }

    /// Keys land in shards by the fixed-seed hash, so which shard each pinned key fills is known
    /// before the run: no shard may need more pinned keys than its share of the key bound.
    fn check_pinned(&self, tiers: &[[u64; 2]]) -> Result<(), SubjectError> {
        let bound = self.limiter.shard_key_bound();
        let shards = self.limiter.key_bound() / bound;
        let mut pinned = vec![0usize; shards];
        for (index, &[first, last]) in tiers.iter().enumerate() {
            let earlier = &tiers[..index];
            for key in first..=last {
                if earlier.iter().any(|&[a, b]| (a..=b).contains(&key)) {
                    continue; // pinned by an earlier tier already
                }
                let shard = self.limiter.shard_of(&key);
                pinned[shard] += 1;
                if pinned[shard] > bound {
                    return Err(SubjectError::Build(format!(
                        "tiers[{index}] (keys {first}..={last}) cannot fit the key bound: key {key} \
                         is pinned key {} of shard {shard}, which holds at most {bound} (key bound \
                         {} over {shards} shards); keys with their own config are never evicted",
                        pinned[shard],
                        self.limiter.key_bound(),
                    )));
                }
            }
        }
        Ok(())
    }

    fn may_evict(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_trace::pressure::summary_slots;

    /// Pressure's formula for the summary's slots is the core's own array: 12 bytes a slot (an
    /// instant and a tag).
    #[test]
    fn the_summary_slots_are_the_cores_deficit_arrays() {
        for max_keys in [1, 2, 5, 8, 100] {
            let setup = Setup {
                max_keys,
                policy: bucketproof_trace::trace::PolicySpec::EvictKeepingDeficit,
                ..Setup::new(ConfigSpec::new(3, "3/s"))
            };
            let core = CoreSubject::new(&setup).unwrap();
            let bytes = core.limiter().deficit_bytes() as u64;
            assert_eq!(summary_slots(&setup) * 12, bytes, "max_keys {max_keys}");
        }
    }
}
