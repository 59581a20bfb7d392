//! The transition of one key's state under a bandwidth set, with no keys: fresh, refill, decide, peek,
//! reconfigure, full.
//!
//! Owns docs/semantics.md, "Several bandwidths per key", for one key's state:
//! > State per key: one `tokens_i` per bandwidth and one `last_refill`. Every operation refills every bandwidth
//! > to the same effective time, so one cursor serves them all.
//!
//! and the rules of acquire (steps 1, 3-5), peek, reconfigure and "evictable" for a set. It holds no arithmetic
//! of its own: where a rule is the one-bandwidth rule applied to each bandwidth, it is [`ModelBucket`]'s function
//! on that bandwidth (its balance and the one cursor); this file adds only what ties the bandwidths together
//! (allowed iff every one covers, charge all or none, identities across a reconfiguration).
//!
//! Promises: as [`ModelBucket`]'s, per bandwidth; every function is pure; the cursor is one for all bandwidths.

use crate::Rational;
use crate::bandwidths::{ModelBandwidths, PerBandwidth};
use crate::bucket::{ModelBucket, ModelPeek, check_cost, covers, on_grid};
use crate::config::{ModelConfig, ModelError};
use crate::decisions::ModelDecisions;

/// One key's state under a bandwidth set: "one `tokens_i` per bandwidth and one `last_refill`".
///
/// Fields are private: a state is only made by [`ModelSetBucket::fresh`] and the transitions, so every state is
/// a reachable one. A state is read against the set it was made for; should a caller pass another, a bandwidth
/// it holds no balance for reads as full (as a fresh bandwidth would) and a balance beyond the set is ignored,
/// so no input panics.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelSetBucket {
    /// `tokens_i`, in the set's order.
    tokens: PerBandwidth<Rational>,
    /// The one `last_refill` of every bandwidth.
    last_refill: u64,
}

impl ModelSetBucket {
    /// "A key with no state behaves as a *fresh* bucket": every bandwidth at its capacity, `last_refill = now`.
    pub fn fresh(set: &ModelBandwidths, now: u64) -> Self {
        ModelSetBucket {
            tokens: set.configs().map(ModelConfig::capacity_tokens).collect(),
            last_refill: now,
        }
    }

    /// A state of `tokens` (in the set's order) and one cursor, as given: for following an
    /// implementation's legal choice (the caller checks it).
    pub fn from_balances(tokens: Vec<Rational>, last_refill: u64) -> Self {
        ModelSetBucket {
            tokens: tokens.into_iter().collect(),
            last_refill,
        }
    }

    /// The exact balances `tokens_i`, in the set's order.
    pub fn tokens(&self) -> &[Rational] {
        &self.tokens
    }

    /// The one `last_refill` (ns) of every bandwidth.
    pub fn last_refill(&self) -> u64 {
        self.last_refill
    }

    /// The bandwidth at `position` as a single bucket: its balance and the one cursor, if the state holds one.
    pub fn bandwidth(&self, position: usize) -> Option<ModelBucket> {
        let tokens = self.tokens.get(position)?.clone();
        Some(ModelBucket::from_parts(tokens, self.last_refill))
    }

    /// Each bandwidth of `set` with its state as a single bucket.
    fn parts<'a>(
        &'a self,
        set: &'a ModelBandwidths,
    ) -> impl ExactSizeIterator<Item = (&'a ModelConfig, ModelBucket)> + 'a {
        set.configs().enumerate().map(|(position, config)| {
            let bucket = (self.bandwidth(position))
                .unwrap_or_else(|| ModelBucket::fresh(config, self.last_refill));
            (config, bucket)
        })
    }

    /// The state of bandwidths that share one cursor, `last_refill`, from each bandwidth's bucket.
    fn from_buckets(buckets: impl Iterator<Item = ModelBucket>, last_refill: u64) -> Self {
        let tokens = buckets
            .map(|bucket| {
                assert!(
                    bucket.last_refill() == last_refill,
                    "one cursor serves every bandwidth"
                );
                bucket.into_tokens()
            })
            .collect();
        ModelSetBucket {
            tokens,
            last_refill,
        }
    }

    /// "Step 3 refills each bandwidth by its own rate and capacity to `t`": [`ModelBucket::refilled`] per
    /// bandwidth, all to `t = max(now, last_refill)`.
    pub fn refilled(&self, set: &ModelBandwidths, now: u64) -> Self {
        let t = now.max(self.last_refill);
        Self::from_buckets(self.parts(set).map(|(c, b)| b.refilled(c, now)), t)
    }

    /// acquire steps 1 and 3-5 on a set: returns the state to write back and the decision.
    ///
    /// 1. "`cost == 0` or `cost` above the *smallest* capacity -> `Err(InvalidCost)`; nothing changes."
    /// 3. "refills each bandwidth by its own rate and capacity to `t`".
    /// 4. "allowed iff *every* `tokens_i >= cost`; then each is charged `cost`. Otherwise denied and no
    ///    bandwidth is charged, not even those that cover."
    /// 5. "per bandwidth `i`: `remaining_i = tokens_i` and `reset_after_i` as for one bandwidth. Denied only:
    ///    `wait_i = 0` if `tokens_i >= cost`, else `(t - now) + ceil((cost - tokens_i) / rate_i_per_ns)`"; the
    ///    maximum is [`ModelDecisions::retry_after`].
    pub fn decide(
        &self,
        set: &ModelBandwidths,
        now: u64,
        cost: u64,
    ) -> Result<(Self, ModelDecisions), ModelError> {
        check_cost(set.smallest_capacity(), cost)?;
        let mut next = self.refilled(set, now);
        let allowed = next.tokens.iter().all(|tokens| covers(tokens, cost));
        let mut decisions = PerBandwidth::with_capacity(set.len());
        for (tokens, config) in next.tokens.iter_mut().zip(set.configs()) {
            let bucket = ModelBucket::from_parts(std::mem::take(tokens), next.last_refill);
            let (bucket, decision) = if allowed {
                bucket.charged(config, now, cost)
            } else {
                let decision = bucket.refused(config, now, cost);
                (bucket, decision)
            };
            *tokens = bucket.into_tokens();
            decisions.push(decision);
        }
        Ok((next, ModelDecisions::from_parts(decisions)))
    }

    /// settle steps 1 and 4-6 on a set, for a record whose acquire charged `charged`:
    ///
    /// 1. "`actual > capacity` (the smallest capacity for a set) -> `Err(InvalidActual)`". "`actual == 0` is valid".
    /// 4. "Refill as acquire step 3 (written back even when the extra is denied)."
    /// 5. "`actual <= charged`: refund `charged - actual` to every bandwidth, `tokens_i = min(capacity_i, tokens_i
    ///    + charged - actual)`, and the settlement is allowed. ... `actual > charged`: the extra `actual - charged`
    ///    is decided as acquire step 4 with that cost" (so [`ModelSetBucket::decide`] of the extra).
    /// 6. "The settlement reports as acquire step 5".
    pub fn settle(
        &self,
        set: &ModelBandwidths,
        now: u64,
        charged: u64,
        actual: u64,
    ) -> Result<(Self, ModelDecisions), ModelError> {
        if actual > set.smallest_capacity() {
            return Err(ModelError::InvalidActual {
                actual,
                capacity: set.smallest_capacity(),
            });
        }
        if actual > charged {
            return self.decide(set, now, actual - charged);
        }
        let mut next = self.refilled(set, now);
        let mut decisions = PerBandwidth::with_capacity(set.len());
        for (tokens, config) in next.tokens.iter_mut().zip(set.configs()) {
            let bucket = ModelBucket::from_parts(std::mem::take(tokens), next.last_refill);
            let (bucket, decision) = bucket.refunded(config, now, charged - actual);
            *tokens = bucket.into_tokens();
            decisions.push(decision);
        }
        Ok((next, ModelDecisions::from_parts(decisions)))
    }

    /// "peek reports every bandwidth's `remaining_i` and `reset_after_i`": [`ModelBucket::peek`] per bandwidth,
    /// in the set's order.
    pub fn peek<'a>(
        &'a self,
        set: &'a ModelBandwidths,
        now: u64,
    ) -> impl ExactSizeIterator<Item = ModelPeek> + 'a {
        self.parts(set).map(move |(c, b)| b.peek(c, now))
    }

    /// "reconfigure to a new set: refill every old bandwidth to `t` under the old set. Each new bandwidth
    /// continues the old bandwidth with the same identity, converted and clamped as in steps 2 and 3 of
    /// reconfigure; a new bandwidth with no old one of its identity starts full (as a fresh key would), and an
    /// old bandwidth with no new one of its identity is dropped."
    ///
    /// The continuing bandwidth is [`ModelBucket::reconfigured`] (refill under its old config, convert, clamp);
    /// a dropped one's refill would change nothing that is kept, so it is not computed.
    pub fn reconfigured(&self, old: &ModelBandwidths, new: &ModelBandwidths, now: u64) -> Self {
        let t = now.max(self.last_refill);
        let olds: PerBandwidth<(&ModelConfig, ModelBucket)> = self.parts(old).collect();
        let buckets = (new.configs().enumerate()).map(|(position, config)| {
            match old.position_of(&new.identity(position)) {
                Some(was) => {
                    let (old_config, bucket) = &olds[was];
                    bucket.reconfigured(old_config, config, now)
                }
                None => ModelBucket::fresh(config, t),
            }
        });
        Self::from_buckets(buckets, t)
    }

    /// "Evictable: every bandwidth full at the judgment time": [`ModelBucket::is_full_at`] for each.
    pub fn is_full_at(&self, set: &ModelBandwidths, s: u64) -> bool {
        self.parts(set).all(|(c, b)| b.is_full_at(c, s))
    }

    /// Whether each balance lies on its own bandwidth's unit grid `1/(q_i * 10^9)` ([`ModelBucket::is_on_grid`])
    /// and the state holds exactly one balance per bandwidth of `set`.
    pub fn is_on_grid(&self, set: &ModelBandwidths) -> bool {
        self.tokens.len() == set.len()
            && (self.tokens.iter().zip(set.configs())).all(|(tokens, c)| on_grid(tokens, c))
    }
}
