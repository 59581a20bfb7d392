//! The PostgreSQL subject: the harness against `bucketproof-postgres`'s one-statement transition, in
//! injected-time mode, so every decision can be compared with the reference model.
//!
//! Needs a database at `DATABASE_URL` in which it may create the namespace `bucketproof_harness`.
//! Each instance keys its rows under a prefix of its own and deletes them when dropped, so runs never
//! see each other's buckets. Rows never expire (the crate has no expiry yet), so `sweep` is a no-op
//! and the runner follows the creations the statement reports. What the crate does not do yet is
//! unsupported, so a trace that needs it is skipped visibly: request ids, reconfigure (the trait's
//! default), several bandwidths per key, a key bound.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use bucketproof_postgres::{PgAcquireError, PgLimiter};

use crate::subject::{Observed, Subject, SubjectError};
use crate::subjects::core::{observe_acquired, subject_error};
use crate::trace::{Acquire, Setup};

/// Distinguishes subjects made by one process; the process id distinguishes processes.
static INSTANCE: AtomicU64 = AtomicU64::new(0);

/// The namespace of the harness's rows.
const NAMESPACE: &str = "bucketproof_harness";

/// The PostgreSQL limiter behind the subject interface.
pub struct PostgresSubject {
    runtime: tokio::runtime::Runtime,
    limiter: PgLimiter,
    prefix: String,
    /// Keys acquired on, deleted on drop.
    touched: BTreeSet<u64>,
}

fn store(error: PgAcquireError) -> SubjectError {
    match error {
        PgAcquireError::Invalid(error) => subject_error(error),
        other => SubjectError::Store(other.to_string()),
    }
}

impl PostgresSubject {
    /// Connects to `DATABASE_URL` with the setup's config.
    pub fn new(setup: &Setup) -> Result<PostgresSubject, SubjectError> {
        if setup.max_keys < bucketproof_limiter::defaults::MAX_KEYS {
            return Err(SubjectError::Unsupported(
                "a key bound below the default (a table on PostgreSQL has none)",
            ));
        }
        let config = crate::subjects::one_bandwidth(&setup.config)?;
        let url = std::env::var("DATABASE_URL").map_err(|_| {
            SubjectError::Build("the postgres subject needs DATABASE_URL (a database URL)".into())
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SubjectError::Build(e.to_string()))?;
        let limiter = runtime
            .block_on(PgLimiter::connect(&url, NAMESPACE, config))
            .map_err(|e| SubjectError::Build(format!("postgres subject at DATABASE_URL: {e}")))?;
        Ok(PostgresSubject {
            runtime,
            limiter,
            prefix: format!(
                "{}-{}:",
                std::process::id(),
                INSTANCE.fetch_add(1, Ordering::Relaxed)
            ),
            touched: BTreeSet::new(),
        })
    }

    fn key(&self, key: u64) -> String {
        format!("{}{key}", self.prefix)
    }
}

impl Subject for PostgresSubject {
    fn name(&self) -> String {
        "postgres".into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if acquire.request_id.is_some() {
            return Err(SubjectError::Unsupported("request ids on PostgreSQL"));
        }
        self.touched.insert(acquire.key);
        let key = self.key(acquire.key);
        let outcome = self
            .runtime
            .block_on(self.limiter.acquire_at(&key, acquire.cost, acquire.now))
            .map_err(store)?;
        Ok(observe_acquired(&outcome.acquired))
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        let key = self.key(key);
        self.runtime
            .block_on(self.limiter.forget(&key))
            .map(drop)
            .map_err(store)
    }

    fn sweep(&mut self, _now: u64) -> Result<(), SubjectError> {
        Ok(())
    }

    fn may_evict(&self) -> bool {
        true
    }
}

impl Drop for PostgresSubject {
    fn drop(&mut self) {
        for key in std::mem::take(&mut self.touched) {
            let key = self.key(key);
            // Best effort: a database gone by now leaves rows under this instance's prefix only.
            let _ = self.runtime.block_on(self.limiter.forget(&key));
        }
    }
}
