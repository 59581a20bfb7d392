//! A keyed wrapper over any float bucket, for the harness: one bucket per `u64` key, created
//! fresh (a clone of a template) on first use. No expiry and no key bound: a baseline, not a product.

use std::collections::BTreeMap;

use crate::{FloatBucket, FloatDecision, FloatError};

/// Float buckets keyed by `u64`; a new key starts as a clone of the template bucket.
#[derive(Debug, Clone)]
pub struct FloatKeyed<B> {
    template: B,
    buckets: BTreeMap<u64, B>,
}

impl<B: FloatBucket> FloatKeyed<B> {
    /// An empty keyed limiter whose new keys start as clones of `template` (normally a fresh bucket).
    pub fn new(template: B) -> Self {
        Self {
            template,
            buckets: BTreeMap::new(),
        }
    }

    /// `acquire` on `key`'s bucket, creating it from the template if absent. An invalid cost is an
    /// error and creates nothing.
    pub fn acquire(
        &mut self,
        key: u64,
        now_ns: u64,
        cost: u64,
    ) -> Result<FloatDecision, FloatError> {
        if let Some(b) = self.buckets.get_mut(&key) {
            return b.acquire(now_ns, cost);
        }
        let mut b = self.template.clone();
        let d = b.acquire(now_ns, cost)?;
        self.buckets.insert(key, b);
        Ok(d)
    }

    /// `peek` on `key`'s bucket (a fresh template bucket if absent); writes nothing.
    pub fn peek(&self, key: u64, now_ns: u64) -> FloatDecision {
        self.buckets
            .get(&key)
            .unwrap_or(&self.template)
            .peek(now_ns)
    }

    /// The bucket of `key`, if it exists.
    pub fn get(&self, key: u64) -> Option<&B> {
        self.buckets.get(&key)
    }

    /// Drops `key`'s bucket; the next access is fresh. Returns whether it existed.
    pub fn forget(&mut self, key: u64) -> bool {
        self.buckets.remove(&key).is_some()
    }

    /// Number of keys holding a bucket.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no key holds a bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}
