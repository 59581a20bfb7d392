//! The sequential spec of one key, for the linearizability checker: the reference model's bucket
//! (`bucketproof_model::ModelBucket`, docs/semantics.md in big rationals) plus the per-key bookkeeping of
//! docs/semantics.md (request-id records, override config and its version, eviction).
//!
//! The bookkeeping follows `bucketproof_model::Model` rule for rule (records keyed by id, stamped and
//! judged at the key's effective time, newest kept FIFO, a window of 0 disables ids, an override pins the key, eviction keeps the override); it is
//! restated here for one key so that the checker can also start a bucket at a cursor later than the
//! op's `now` (implementations may start new buckets at an eviction horizon), which `Model`'s committed
//! API cannot express, and so that a state hashes cheaply for memoization. All arithmetic (refill,
//! decision, waits, reconfiguration) is the model's.

use std::collections::VecDeque;

use bucketproof_model::{ModelBucket, ModelConfig, ModelDecision, ModelError, ModelPeek};

/// One acquire's result on the spec.
pub struct Outcome {
    pub decision: ModelDecision,
    pub replayed: bool,
    pub created: bool,
}

/// Everything the spec holds for one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeySpec {
    default_config: ModelConfig,
    dedupe_window: u64,
    dedupe_per_key: usize,
    bucket: Option<ModelBucket>,
    override_config: Option<ModelConfig>,
    version: u64,
    /// `(request id, decision, recorded at)`, oldest first.
    records: VecDeque<(u64, ModelDecision, u64)>,
}

/// "A record stamped at `r` is live at a later operation whose effective time `t' = max(now',
/// last_refill)` satisfies `t' < r + window`"; `r` is the effective time of the acquire that made it,
/// so `t' >= r` and a window of 0 keeps nothing live.
fn is_live(stamped_at: u64, window: u64, at: u64) -> bool {
    (at as u128) < stamped_at as u128 + window as u128
}

impl KeySpec {
    /// A key with no state (it behaves as a fresh bucket).
    pub fn new(default_config: ModelConfig, dedupe_window: u64, dedupe_per_key: usize) -> KeySpec {
        KeySpec {
            default_config,
            dedupe_window,
            dedupe_per_key,
            bucket: None,
            override_config: None,
            version: 0,
            records: VecDeque::new(),
        }
    }

    /// The override, else the default config.
    pub fn config(&self) -> ModelConfig {
        (self.override_config.as_ref())
            .unwrap_or(&self.default_config)
            .clone()
    }

    /// How many times the key was reconfigured (since it was last forgotten).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The key holds a bucket.
    pub fn held(&self) -> bool {
        self.bucket.is_some()
    }

    /// The bucket as `(tokens, last_refill)`, for messages.
    pub fn describe(&self) -> String {
        match &self.bucket {
            Some(bucket) => format!(
                "{} tokens at cursor {}",
                bucket.tokens(),
                bucket.last_refill()
            ),
            None => "no bucket".to_string(),
        }
    }

    /// acquire steps 1-6 of docs/semantics.md.
    pub fn acquire(
        &mut self,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Outcome, ModelError> {
        let config = self.config();
        if cost == 0 || cost > config.capacity() {
            return Err(ModelError::InvalidCost {
                cost,
                capacity: config.capacity(),
            });
        }
        if let (Some(id), Some(bucket)) = (request_id, &self.bucket) {
            let window = self.dedupe_window;
            let at = now.max(bucket.last_refill());
            if let Some((_, decision, _)) = self
                .records
                .iter()
                .find(|(rid, _, stamped)| *rid == id && is_live(*stamped, window, at))
            {
                return Ok(Outcome {
                    decision: decision.clone(),
                    replayed: true,
                    created: false,
                });
            }
        }
        let created = self.bucket.is_none();
        let before = self
            .bucket
            .take()
            .unwrap_or_else(|| ModelBucket::fresh(&config, now));
        let (after, decision) = before.decide(&config, now, cost)?;
        let after_refill = after.last_refill();
        self.bucket = Some(after);
        if let Some(id) = request_id.filter(|_| self.dedupe_window > 0) {
            self.records.retain(|(rid, _, _)| *rid != id);
            self.records.push_back((id, decision.clone(), after_refill));
            while self.records.len() > self.dedupe_per_key {
                self.records.pop_front();
            }
        }
        Ok(Outcome {
            decision,
            replayed: false,
            created,
        })
    }

    /// peek: what a refill at `now` would show, writing nothing.
    pub fn peek(&self, now: u64) -> ModelPeek {
        let config = self.config();
        match &self.bucket {
            Some(bucket) => bucket.peek(&config, now),
            None => ModelBucket::fresh(&config, now).peek(&config, now),
        }
    }

    /// reconfigure: refill under the old config, round down onto the new grid, clamp; the new config
    /// becomes the override and the version increases. Returns the new version.
    pub fn reconfigure(&mut self, new_config: ModelConfig, now: u64) -> u64 {
        let old = self.config();
        let before = self
            .bucket
            .take()
            .unwrap_or_else(|| ModelBucket::fresh(&old, now));
        self.bucket = Some(before.reconfigured(&old, &new_config, now));
        self.override_config = Some(new_config);
        self.version += 1;
        self.version
    }

    /// Evictable at `s`: judged at `j = max(s, last_refill)`, full, no request-id record live at `j`,
    /// no override. A key without a bucket is vacuously evictable.
    pub fn is_evictable_at(&self, s: u64) -> bool {
        let Some(bucket) = &self.bucket else {
            return true;
        };
        let judged_at = s.max(bucket.last_refill());
        self.override_config.is_none()
            && bucket.is_full_at(&self.config(), judged_at)
            && !self
                .records
                .iter()
                .any(|(_, _, stamped)| is_live(*stamped, self.dedupe_window, judged_at))
    }

    /// Drops the bucket and its records (the override and version stay).
    pub fn evict(&mut self) {
        self.bucket = None;
        self.records.clear();
    }

    /// Drops the bucket and starts a fresh one (full) with its cursor at `cursor`.
    pub fn recreate(&mut self, cursor: u64) {
        self.evict();
        self.bucket = Some(ModelBucket::fresh(&self.config(), cursor));
    }
}
