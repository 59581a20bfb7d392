//! The PostgreSQL subject: the harness against `bucketproof-postgres`'s one-statement transition, in
//! injected-time mode, so every decision can be compared with the reference model.
//!
//! Needs a database at `DATABASE_URL` in which it may create namespaces: each instance makes one of
//! its own (so its cleanup's horizon is its own, as a run's clock is) and drops it when dropped.
//! `sweep` is the crate's cleanup over the whole table, judged at the sweep's `now`; the runner
//! follows the creations the statement reports. A setup's key bound is the crate's (`max_keys`, per
//! part) under the lossless policies it has, `RejectNewKeys` and `EvictFull`. What the crate does not
//! do is unsupported, so a trace that needs it is skipped visibly: a key bound under the other
//! policies (declared, so the engine skips the setup), and reconfigure of a key of several
//! bandwidths.

use std::sync::atomic::{AtomicU64, Ordering};

use bucketproof_limiter::{Request, defaults};
use bucketproof_postgres::{PgAcquireError, PgLimiter};

use bucketproof_check::subjects::core::{
    observe_acquired, observe_set, settle_error, settle_request, subject_error,
};
use bucketproof_trace::subject::{Amount, Inspected, Inspection, Observed, Subject, SubjectError};
use bucketproof_trace::trace::{Acquire, ConfigSpec, PolicySpec, Settle, Setup};

/// Distinguishes subjects made by one process; the process id distinguishes processes.
static INSTANCE: AtomicU64 = AtomicU64::new(0);

/// Rows the cleanup examines per statement when the runner sweeps.
const SWEEP_BATCH: u32 = 10_000;

/// The PostgreSQL limiter behind the subject interface.
pub struct PostgresSubject {
    runtime: tokio::runtime::Runtime,
    /// `None` once dropped.
    limiter: Option<PgLimiter>,
    /// A key has several bandwidths: every part is observed.
    several: bool,
    /// The setup's key bound is enforced (a bound below the default, under a policy the crate has).
    bounded: bool,
}

fn store(error: PgAcquireError) -> SubjectError {
    match error {
        PgAcquireError::Invalid(error) => subject_error(error),
        PgAcquireError::Settle(error) => settle_error(error),
        PgAcquireError::KeyLimitReached { .. } => SubjectError::KeyLimitReached,
        other => SubjectError::Store(other.to_string()),
    }
}

impl PostgresSubject {
    /// Connects to `DATABASE_URL` with the setup's config.
    pub fn new(setup: &Setup) -> Result<PostgresSubject, SubjectError> {
        let config =
            (setup.config.to_bandwidths()).map_err(|e| SubjectError::Build(e.to_string()))?;
        let several = config.len() > 1;
        let url = std::env::var("DATABASE_URL").map_err(|_| {
            SubjectError::Build("the postgres subject needs DATABASE_URL (a database URL)".into())
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SubjectError::Build(e.to_string()))?;
        let namespace = format!(
            "bucketproof_harness_{}_{}",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let window = std::time::Duration::from_nanos(setup.dedupe_window_ns);
        let mut builder = PgLimiter::builder(config)
            .namespace(namespace)
            .dedupe(window, setup.dedupe_per_key)
            .pool_size(1);
        let bounded = setup.max_keys < defaults::MAX_KEYS
            && matches!(
                setup.policy,
                PolicySpec::RejectNewKeys | PolicySpec::EvictFull
            );
        if bounded {
            builder = builder.max_keys(setup.max_keys, setup.policy.into());
        }
        let limiter = runtime
            .block_on(builder.connect(&url))
            .map_err(|e| SubjectError::Build(format!("postgres subject at DATABASE_URL: {e}")))?;
        Ok(PostgresSubject {
            runtime,
            limiter: Some(limiter),
            several,
            bounded,
        })
    }

    fn limiter(&self) -> &PgLimiter {
        self.limiter.as_ref().expect("present until dropped")
    }
}

impl Subject for PostgresSubject {
    fn name(&self) -> String {
        "postgres".into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let mut request = Request::cost(acquire.cost).at(acquire.now);
        if let Some(id) = acquire.request_id {
            request = request.id(id);
        }
        let key = acquire.key.to_string();
        let outcome = self
            .runtime
            .block_on(self.limiter().acquire_set_with(&key, request))
            .map_err(store)?;
        let acquired = &outcome.acquired;
        if self.several {
            return Ok(observe_set(
                &acquired.decision,
                acquired.created,
                acquired.replayed,
            ));
        }
        Ok(observe_acquired(&outcome.binding().acquired))
    }

    fn settle(&mut self, settle: Settle) -> Result<Observed, SubjectError> {
        let key = settle.key.to_string();
        let settled = self
            .runtime
            .block_on(self.limiter().settle_set(&key, settle_request(settle)))
            .map_err(store)?;
        Ok(observe_set(&settled.decision, false, settled.replayed))
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.runtime
            .block_on(self.limiter().forget(&key.to_string()))
            .map(drop)
            .map_err(store)
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        // Once round the whole table, from wherever the last sweep stopped.
        loop {
            let step = self
                .runtime
                .block_on(self.limiter().cleanup_at(SWEEP_BATCH, now))
                .map_err(store)?;
            if step.wrapped {
                return Ok(());
            }
        }
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        if self.several {
            return Err(SubjectError::Unsupported(
                "reconfigure of a key of several bandwidths on PostgreSQL",
            ));
        }
        let config = bucketproof_trace::subject::one_bandwidth(config)?;
        self.runtime
            .block_on(
                self.limiter()
                    .reconfigure(&key.to_string(), config, Some(now)),
            )
            .map(drop)
            .map_err(store)
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        match self
            .runtime
            .block_on(self.limiter().inspect(&key.to_string()))
        {
            Ok(held) => held
                .and_then(|(state, set)| Some((state.bandwidth(0)?, *set.as_slice()[0].config())))
                .map(|(state, config)| Inspected {
                    tokens: Amount::Exact {
                        numer: state.balance(),
                        denom: config.units_per_token(),
                    },
                    last_refill: state.last_refill(),
                    capacity: config.capacity(),
                })
                .into(),
            Err(_) => Inspection::Unsupported,
        }
    }

    fn may_evict(&self) -> bool {
        true
    }

    /// The crate's key bound under `RejectNewKeys` and `EvictFull`; under the other policies none
    /// (the engine then skips a bounded setup).
    fn has_key_bound(&self) -> bool {
        self.bounded
    }
}

impl Drop for PostgresSubject {
    fn drop(&mut self) {
        if let Some(limiter) = self.limiter.take() {
            // Best effort: a database gone by now leaves this instance's namespace behind.
            let _ = self.runtime.block_on(limiter.drop_namespace());
        }
    }
}
