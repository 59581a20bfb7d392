//! Building a [`RedisLimiter`]: its settings, their defaults, and connecting.
//!
//! Owns: [`RedisBuilder`] with every default (the dedupe defaults are the in-memory limiter's
//! [`defaults`]), [`MAX_RECORDS_PER_KEY`], and [`RedisBuilder::connect`].
//!
//! Promises: a limiter exists only for settings the script runs exactly (config in the exact range,
//! a prefix that keeps the hash tag, records within the script's bound, at least one attempt), with
//! the script loaded and the connection up.

use std::time::Duration;

use bucketproof_limiter::{Bandwidths, Config, Nanos, defaults};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};

use super::error::BuildError;
use super::peek::{PEEK_SET_SOURCE, PEEK_SOURCE};
use super::stats::Counters;
use super::{RedisLimiter, SetWire};
use crate::epoch::Recovery;
use crate::range::check_exact;
use crate::script::{limbs, packed_config, script};
use crate::set::{set_fingerprint, set_script};
use crate::settle::settle_script;
use bucketproof_limiter::outage::{Fallback, Unavailable};

/// Upper bound on request-id records per key (each acquire may evict a few; keeps the script short).
pub const MAX_RECORDS_PER_KEY: usize = 1024;

/// Settings of a [`RedisLimiter`]; build one with [`RedisLimiter::builder`].
#[derive(Clone, Debug)]
pub struct RedisBuilder {
    /// Every key's bandwidths (one, or several: then `set.lua` decides).
    pub(super) bandwidths: Bandwidths,
    /// The first bandwidth's config: the whole config of a limiter of one bandwidth.
    pub(super) config: Config,
    pub(super) prefix: String,
    pub(super) recovery: Recovery,
    pub(super) dedupe_window: Nanos,
    pub(super) dedupe_per_key: usize,
    pub(super) injected_ttl_floor: Duration,
    pub(super) unavailable: Unavailable,
    pub(super) attempts: u32,
    pub(super) response_timeout: Duration,
    pub(super) retry_backoff: Duration,
}

impl RedisBuilder {
    /// Keys are `PREFIX{user}`; give each application (and each test) its own prefix. Default `bp:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Request-id records: live `window` long, at most `per_key` per key. Default: the in-memory
    /// limiter's, [`defaults::DEDUPE_WINDOW`] and [`defaults::DEDUPE_PER_KEY`].
    pub fn dedupe(mut self, window: Duration, per_key: usize) -> Self {
        self.dedupe_window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self.dedupe_per_key = per_key;
        self
    }

    /// Extra TTL for keys written with an injected `now`: how far the injected clock may fall behind
    /// the Redis server's before an expiry could cost anything. Default 1 h.
    ///
    /// Redis expires a key by its own clock; the script computes the time until the key is full (and
    /// its newest request-id record dead) in injected time and adds this floor. An expired key is
    /// gone, cursor and all, and a later call starts it fresh at its own `now`. That is lossless
    /// exactly when that `now` is no earlier than the time the key would have been full with no live
    /// record: guaranteed while, between any write of a key and the next call on it, Redis's clock
    /// advances at most `floor` more than the injected clock (a rollback of the injected clock counts
    /// as falling behind by its size). Beyond that, a key can be found expired and fresh while it was
    /// not yet full in injected time, and the difference is admitted again. No script can tell: the
    /// one hash per user is the only place its cursor lives, and keeping it past the TTL (a
    /// tombstone per user forever) would make memory unbounded. With server time there is one clock
    /// and no floor is needed.
    pub fn injected_ttl_floor(mut self, floor: Duration) -> Self {
        self.injected_ttl_floor = floor;
        self
    }

    /// The policy when Redis is unavailable. Default [`Unavailable::FailClosed`].
    pub fn on_unavailable(mut self, policy: Unavailable) -> Self {
        self.unavailable = policy;
        self
    }

    /// What a bucket created after its slot's state was lost starts with (crate `epoch`). Default
    /// [`Recovery::Conservative`], which keeps the no-overselling bound across a loss: run
    /// [`RedisLimiter::provision`] once on a new Redis, or its first buckets start as after a loss
    /// (below full for one refill period, flagged). [`Recovery::Trusting`] starts them full (a second
    /// burst after a loss, flagged) and needs no provisioning.
    pub fn recovery(mut self, policy: Recovery) -> Self {
        self.recovery = policy;
        self
    }

    /// Attempts per acquire (retries only when safe, see the module docs). Default 3.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// How long to wait for one reply. Default 500 ms.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Pause before a retry (doubled each time, at most 100 ms). Default 10 ms.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// Validates the settings, connects, and loads the script.
    ///
    /// Every bandwidth must be in the exact range on its own ([`check_exact`]): the script computes
    /// each bandwidth's numbers apart, so the bound is per bandwidth, not on their sum.
    pub async fn connect(self, url: &str) -> Result<RedisLimiter, BuildError> {
        for bandwidth in self.bandwidths.as_slice() {
            check_exact(bandwidth.config())?;
        }
        if self.prefix.contains(['{', '}']) {
            return Err(BuildError::Prefix(self.prefix));
        }
        if self.dedupe_per_key > MAX_RECORDS_PER_KEY {
            return Err(BuildError::TooManyRecords(self.dedupe_per_key));
        }
        if self.attempts == 0 {
            return Err(BuildError::NoAttempts);
        }
        let client = Client::open(url).map_err(BuildError::Connect)?;
        let client_for_admin = client.clone();
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.response_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let mut conn = ConnectionManager::new_with_config(client, manager_config)
            .await
            .map_err(BuildError::Connect)?;
        let script = script();
        script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .map_err(BuildError::Connect)?;
        let set = if self.bandwidths.len() > 1 {
            let set_script = set_script();
            set_script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .map_err(BuildError::Connect)?;
            Some(SetWire {
                script: set_script,
                peek: Script::new(PEEK_SET_SOURCE),
                fingerprint: set_fingerprint(&self.bandwidths),
                bandwidths: self
                    .bandwidths
                    .as_slice()
                    .iter()
                    .map(|b| {
                        let config = b.config();
                        (
                            config.capacity_units().to_string(),
                            config.units_per_nanosecond(),
                            config.units_per_token().to_string(),
                        )
                    })
                    .collect(),
            })
        } else {
            None
        };
        Ok(RedisLimiter {
            set,
            conf: packed_config(&self.config),
            client: client_for_admin,
            window_arg: limbs(self.dedupe_window),
            peek: Script::new(PEEK_SOURCE),
            settle: settle_script(),
            fallback: Fallback::new(self.unavailable),
            settings: self,
            conn,
            script,
            counters: Counters::default(),
        })
    }
}

impl RedisLimiter {
    /// Settings for a limiter with `config` for every key; see [`RedisBuilder`]. `config` is a
    /// [`Config`] or a [`Bandwidths`] set: with several bandwidths, every key holds all of them in its
    /// one hash and one script call decides on all (a set of one is exactly its [`Config`]).
    pub fn builder(config: impl Into<Bandwidths>) -> RedisBuilder {
        let bandwidths = config.into();
        RedisBuilder {
            config: *bandwidths.first(),
            bandwidths,
            prefix: "bp:".to_string(),
            dedupe_window: defaults::DEDUPE_WINDOW,
            dedupe_per_key: defaults::DEDUPE_PER_KEY,
            injected_ttl_floor: Duration::from_secs(3600),
            unavailable: Unavailable::FailClosed,
            recovery: Recovery::default(),
            attempts: 3,
            response_timeout: Duration::from_millis(500),
            retry_backoff: Duration::from_millis(10),
        }
    }
}
