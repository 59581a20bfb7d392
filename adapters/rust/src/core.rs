//! bucketproof's keyed limiter (`bucketproof_limiter::Limiter<u64>`) as a [`Subject`].
//!
//! Promises: only the limiter's public API is used; every call passes the harness's time, so the
//! limiter never reads a clock; the hasher seed and shard count are fixed (those of the harness's
//! in-process `core` subject), so which buckets the amortized sweep visits, and so every `created`,
//! is the same on every run; a config the limiter cannot hold is refused as `unsupported`.

use std::time::Duration;

use bucketproof_limiter::{
    AcquireError, Config, Decision, EvictionPolicy, Limiter, Rate, Request, Settle, SettleError,
    Wait as Waited,
};

use crate::reply::{Capabilities, ErrorKind, Profile, Refusal};
use crate::request::Setup;
use crate::subject::{Outcome, Subject};
use crate::values::{Bandwidth, Policy, Ratio, State, Wait};

/// The hasher seed of the harness's in-process core subject: the same key lands in the same shard.
const HASHER_SEED: u64 = 0x6275_636b_6574_7072;

/// The in-process core subject's shard count: the key bound is enforced per shard.
const SHARDS: usize = 4;

/// The keyed limiter of one trace.
pub struct Core {
    limiter: Limiter<u64>,
}

impl Subject for Core {
    const NAME: &'static str = "bucketproof-limiter";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: Capabilities = Capabilities {
        reconfigure: true,
        forget: true,
        sweep: true,
        inspect: true,
        would_allow: true,
        request_ids: true,
        // The amortized sweep drops evictable buckets on its own, and the key bound's policy too.
        evicts: true,
        batch: 1024,
        bandwidths: 1,
        settle: true,
    };
    // Integer units of `1 / (q * 10^9)` token: no decision rounds.
    const PROFILE: Profile = Profile { name: "exact" };

    fn setup(setup: &Setup) -> Result<Core, Refusal> {
        let config = config_of(&setup.config)?;
        let policy = match setup.policy {
            Policy::RejectNewKeys => EvictionPolicy::RejectNewKeys,
            Policy::EvictFull => EvictionPolicy::EvictFull,
            Policy::EvictLeastRecent => EvictionPolicy::EvictLeastRecent,
            Policy::EvictKeepingDeficit => EvictionPolicy::EvictKeepingDeficit,
        };
        // On a 64-bit target these never saturate; on a smaller one a bound past `usize::MAX` is
        // no bound, which is what it asked for.
        let max_keys = usize::try_from(setup.max_keys).unwrap_or(usize::MAX);
        let sweep_per_op = usize::try_from(setup.sweep_per_op).unwrap_or(usize::MAX);
        let per_key = usize::try_from(setup.dedupe_per_key).unwrap_or(usize::MAX);
        let limiter = Limiter::builder(config)
            .max_keys(max_keys, policy)
            .sweep_per_op(sweep_per_op)
            .dedupe(Duration::from_nanos(setup.dedupe_window_ns), per_key)
            .shards(SHARDS)
            .hasher_seed(HASHER_SEED)
            .build();
        Ok(Core { limiter })
    }

    fn acquire(
        &mut self,
        key: u64,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Outcome, Refusal> {
        let mut request = Request::cost(cost).at(now);
        request.request_id = request_id.map(Into::into);
        let acquired = self.limiter.acquire_with(&key, request).map_err(refusal)?;
        Ok(Outcome {
            created: Some(acquired.created),
            ..outcome(&acquired.decision, acquired.replayed)
        })
    }

    fn settle(
        &mut self,
        key: u64,
        now: u64,
        request_id: u64,
        actual: u64,
    ) -> Result<Outcome, Refusal> {
        let settle = Settle::new(request_id, actual).at(now);
        let settled = self.limiter.settle(&key, settle).map_err(settle_refusal)?;
        Ok(outcome(&settled.decision, settled.replayed))
    }

    fn reconfigure(&mut self, key: u64, now: u64, config: &[Bandwidth]) -> Result<(), Refusal> {
        let config = config_of(config)?;
        self.limiter
            .reconfigure_at(&key, config, now)
            .map(drop)
            .map_err(refusal)
    }

    fn forget(&mut self, key: u64) {
        self.limiter.forget(&key);
    }

    fn sweep(&mut self, now: u64) {
        self.limiter.sweep_at(now);
    }

    fn inspect(&self, key: u64) -> Option<State> {
        let (state, config) = self.limiter.inspect(&key)?;
        Some(State {
            tokens: Ratio {
                numer: state.balance(),
                denom: config.units_per_token(),
            },
            last_refill_ns: state.last_refill(),
            capacity: config.capacity(),
        })
    }

    fn would_allow(&self, key: u64, now: u64, cost: u64) -> bool {
        self.limiter.would_allow_at(&key, cost, now)
    }
}

/// The limiter's config for a protocol config, or `unsupported` for one it cannot hold.
fn config_of(config: &[Bandwidth]) -> Result<Config, Refusal> {
    let [bandwidth] = config else {
        return Err(Refusal::new(
            ErrorKind::Unsupported,
            format!(
                "{} bandwidths per key; this limiter holds exactly 1",
                config.len()
            ),
        ));
    };
    let unsupported = |reason: String| {
        Refusal::new(
            ErrorKind::Unsupported,
            format!(
                "capacity {} at {} ({}/{} per second): {reason}",
                bandwidth.capacity,
                bandwidth.rate,
                bandwidth.rate_per_s.numer,
                bandwidth.rate_per_s.denom
            ),
        )
    };
    let (Ok(numer), Ok(denom)) = (
        u64::try_from(bandwidth.rate_per_s.numer),
        u64::try_from(bandwidth.rate_per_s.denom),
    ) else {
        return Err(unsupported("the rate's terms do not fit 64 bits".into()));
    };
    let rate = Rate::new(numer, denom).map_err(|e| unsupported(e.to_string()))?;
    Config::new(bandwidth.capacity, rate).map_err(|e| unsupported(e.to_string()))
}

/// The protocol's error for the limiter's.
fn refusal(error: AcquireError) -> Refusal {
    let kind = match error {
        AcquireError::InvalidCost { .. } => ErrorKind::InvalidCost,
        AcquireError::KeyLimitReached { .. } => ErrorKind::KeyLimit,
        // A refusal this adapter does not know yet: the subject's failure, never a denial.
        _ => ErrorKind::Store,
    };
    Refusal::new(kind, error.to_string())
}

/// The protocol's error for a refused settle.
fn settle_refusal(error: SettleError) -> Refusal {
    let kind = match error {
        SettleError::InvalidActual { .. } => ErrorKind::InvalidCost,
        SettleError::UnknownRequest => ErrorKind::UnknownRequest,
        SettleError::NotAdmitted => ErrorKind::NotAdmitted,
        SettleError::AlreadySettled { .. } => ErrorKind::AlreadySettled,
        // A refusal this adapter does not know yet: the subject's failure, never a denial.
        _ => ErrorKind::Store,
    };
    Refusal::new(kind, error.to_string())
}

/// A decision as the protocol reports it (`created` unknown).
fn outcome(decision: &Decision, replayed: bool) -> Outcome {
    let (numer, denom) = decision.remaining().as_ratio();
    Outcome {
        allowed: decision.is_allowed(),
        remaining: Ratio { numer, denom },
        retry_after: decision.retry_after().map(wait),
        reset_after: Some(wait(decision.reset_after())),
        created: None,
        replayed,
    }
}

fn wait(waited: Waited) -> Wait {
    match waited {
        Waited::After(ns) => Wait::After(ns),
        Waited::Never => Wait::Never,
    }
}
