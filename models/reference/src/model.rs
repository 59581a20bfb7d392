//! The keyed reference limiter over `u64` keys.
//!
//! Owns the per-key rules of docs/semantics.md: acquire steps 1-6 (error vs denial, the dedupe window and its
//! per-key FIFO), peek, reconfigure (with the per-key config version), forget, and the expiry rules (evictable,
//! sweep, and following an implementation's eviction: `expiry`). Every key's config is a bandwidth set
//! ([`ModelBandwidths`]; a [`ModelConfig`] is the set of one), and its state is a [`ModelSetBucket`], whose
//! transition is [`ModelBucket`](crate::ModelBucket)'s per bandwidth: the arithmetic lives there.
//!
//! Promises: deterministic (a `BTreeMap`, no hashing, no clock, no randomness); errors change nothing; after every
//! operation, for each held key and each of its bandwidths `0 <= tokens_i <= capacity_i`, `tokens_i` lies on that
//! bandwidth's unit grid `1/(q_i * 10^9)`, and `last_refill` never moved back while the bucket was held
//! (asserted). For a key of one bandwidth every answer is the one of the single-bucket rules.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use crate::Integer;
use crate::Rational;

use crate::bandwidths::ModelBandwidths;
use crate::bucket::{ModelDecision, ModelPeek, check_cost, cmp_whole};
use crate::config::{ModelConfig, ModelError};
use crate::decisions::ModelDecisions;
use crate::set::ModelSetBucket;

mod expiry;

/// The result of a successful acquire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Outcome {
    /// The decision's binding part ([`ModelDecisions::binding`]): for a key of one bandwidth, its decision.
    pub decision: ModelDecision,
    /// The whole decision, every bandwidth's part: a fresh one, or the recorded one when `replayed`.
    pub decisions: ModelDecisions,
    /// Step 2: "return the recorded decision unchanged (`replayed`). Nothing changes, nothing is charged."
    pub replayed: bool,
    /// Whether this acquire created the key's bucket ("`tokens = capacity`, `last_refill = now` of the operation
    /// that creates it"). Always `false` when `replayed`.
    pub created: bool,
}

impl Outcome {
    /// The outcome carrying `decisions`, with its binding part as the single `decision`.
    fn of(decisions: ModelDecisions, replayed: bool, created: bool) -> Self {
        Outcome {
            decision: decisions.binding().clone(),
            decisions,
            replayed,
            created,
        }
    }
}

/// One request-id record: "(id -> decision, t)".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Record {
    /// The caller's request id.
    request_id: u64,
    /// The decision returned the first time, returned unchanged on a replay: "A request-id record holds the whole
    /// decision (every bandwidth's part)".
    decisions: ModelDecisions,
    /// "stamped with the effective time `t` of the acquire that made it (not the caller's `now`)".
    stamped_at: u64,
    /// The acquire's cost: "`charged` is the cost of the acquire the record was made for".
    cost: u64,
    /// settle step 6: "An allowed settlement marks the record settled with `(actual, settlement)`".
    settled: Option<(u64, ModelDecisions)>,
}

/// Everything the model holds for one key. An entry exists while it holds a bucket or an override config.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// The bucket; `None` behaves as fresh ("A key with no state behaves as a *fresh* bucket").
    bucket: Option<ModelSetBucket>,
    /// "a per-key override set by `reconfigure`"; `None` means the default config.
    override_config: Option<ModelBandwidths>,
    /// "the key's config version": bumped by each reconfigure, kept across sweep/evict, dropped by forget.
    version: u64,
    /// Oldest first. Non-empty only while `bucket` is `Some`.
    records: VecDeque<Record>,
    /// The time `j` at which [`Model::sweep`] judged the key's bucket evictable and dropped it: the key
    /// continues from there ("a fresh bucket's cursor is `max(now, j)`"). `None` while it holds a
    /// bucket, and for a key never swept.
    dropped_at: Option<u64>,
}

impl Entry {
    /// Step 2: "If `request_id` is given and the key holds a record for it that is still in the dedupe window",
    /// judged at the key's effective time `max(now, last_refill)`. The newest such record (see [`Model::acquire`]).
    fn live_record(&self, request_id: u64, window: u64, now: u64) -> Option<&Record> {
        let at = self.effective_time(now);
        (self.records.iter().rev())
            .find(|r| r.request_id == request_id && is_live(r.stamped_at, window, at))
    }

    /// The key's effective time at `now`: "`t = max(now, last_refill)`, the key's own clock, which never moves
    /// back". A key without a bucket is fresh at `max(now, j)` when a sweep dropped it at `j`, else at `now`.
    fn effective_time(&self, now: u64) -> u64 {
        match &self.bucket {
            Some(bucket) => now.max(bucket.last_refill()),
            None => now.max(self.dropped_at.unwrap_or(0)),
        }
    }

    /// The bucket an operation at `now` works on: the held one, else a fresh one ("`tokens = capacity`") at the
    /// key's effective time.
    ///
    /// Borrowed when held: the transitions are pure, so the held state is read, never copied.
    fn bucket_at(&self, set: &ModelBandwidths, now: u64) -> Cow<'_, ModelSetBucket> {
        match &self.bucket {
            Some(bucket) => Cow::Borrowed(bucket),
            None => Cow::Owned(ModelSetBucket::fresh(set, self.effective_time(now))),
        }
    }

    /// The invariants, asserted after every mutation: "`tokens` (a rational in `[0, capacity]`)" per bandwidth,
    /// each bandwidth's tokens on its unit grid `1/(q_i * 10^9)` (one balance per bandwidth), at most
    /// `dedupe_per_key` records, and records only with a bucket. `set` is the key's (its override, else the
    /// default).
    fn check_invariants(&self, set: &ModelBandwidths, dedupe_per_key: usize) {
        assert!(
            self.records.len() <= dedupe_per_key,
            "FIFO bound on records"
        );
        match self.bucket.as_ref() {
            Some(bucket) => {
                for (tokens, config) in bucket.tokens().iter().zip(set.configs()) {
                    assert!(cmp_whole(tokens, 0).is_ge(), "tokens >= 0");
                    assert!(
                        cmp_whole(tokens, config.capacity()).is_le(),
                        "tokens <= capacity"
                    );
                }
                assert!(bucket.is_on_grid(set), "tokens lie on the unit grid");
            }
            None => assert!(self.records.is_empty(), "records only live with a bucket"),
        }
    }

    /// Holds nothing that distinguishes the key from an unknown one (the entry can go).
    fn is_empty(&self) -> bool {
        self.bucket.is_none() && self.override_config.is_none() && self.dropped_at.is_none()
    }
}

/// The keyed reference limiter.
#[derive(Debug, Clone)]
pub struct Model {
    /// "else the default config".
    default_config: ModelBandwidths,
    /// The dedupe window: a record stamped at `r` is live while the key's effective time is before `r + window`.
    dedupe_window_ns: u64,
    /// "only the newest `dedupe_per_key` records of a key are kept (FIFO)".
    dedupe_per_key: usize,
    /// Per-key state, ordered by key for determinism.
    entries: BTreeMap<u64, Entry>,
    /// How many entries hold an override config ([`Model::holds_pinned`] without walking every entry: the
    /// harness asks at each key-bound refusal, and attack scenarios refuse thousands of keys among thousands).
    pinned: usize,
}

/// Step 2: a record stamped at `r` "is live at a later operation iff that operation's effective time `t' =
/// max(now', last_refill)` satisfies `t' < r + window`". Computed without overflow. `t' >= r` always (a key's
/// effective time never moves back), so "a window of 0 turns request ids off": no record is ever live.
fn is_live(stamped_at: u64, window: u64, at: u64) -> bool {
    Integer::from(at) < Integer::from(stamped_at) + Integer::from(window)
}

impl Model {
    /// A model with no keys. Keys without an override use `default_config` ("else the default config"; the
    /// resolver is modelled by calling [`Model::reconfigure`] for the keys it would configure): a
    /// [`ModelBandwidths`] set, or a [`ModelConfig`] (a set of one).
    /// `dedupe_window_ns` and `dedupe_per_key` bound the request-id records "(count and time)".
    pub fn new(
        default_config: impl Into<ModelBandwidths>,
        dedupe_window_ns: u64,
        dedupe_per_key: usize,
    ) -> Self {
        Model {
            default_config: default_config.into(),
            dedupe_window_ns,
            dedupe_per_key,
            entries: BTreeMap::new(),
            pinned: 0,
        }
    }

    /// The default config: the first bandwidth of the default set ([`Model::default_bandwidths`]), which is the
    /// whole config of a set of one.
    pub fn default_config(&self) -> &ModelConfig {
        self.default_config.first()
    }

    /// The default bandwidth set.
    pub fn default_bandwidths(&self) -> &ModelBandwidths {
        &self.default_config
    }

    /// The dedupe window in ns.
    pub fn dedupe_window_ns(&self) -> u64 {
        self.dedupe_window_ns
    }

    /// The number of request-id records kept per key.
    pub fn dedupe_per_key(&self) -> usize {
        self.dedupe_per_key
    }

    /// The first bandwidth of the key's set ([`Model::bandwidths_of`]): the whole config of a key of one
    /// bandwidth.
    pub fn config_of(&self, key: u64) -> &ModelConfig {
        self.bandwidths_of(key).first()
    }

    /// "Each key may have its own config (a per-key override set by `reconfigure`, else the resolver's answer,
    /// else the default config)", a bandwidth set.
    pub fn bandwidths_of(&self, key: u64) -> &ModelBandwidths {
        self.entries
            .get(&key)
            .and_then(|e| e.override_config.as_ref())
            .unwrap_or(&self.default_config)
    }

    /// reconfigure step 3: "the key's config version increases by one". 0 for a key never reconfigured (or
    /// forgotten since). Sweeping or evicting the bucket keeps the override and its version.
    pub fn config_version(&self, key: u64) -> u64 {
        self.entries.get(&key).map_or(0, |e| e.version)
    }

    /// The key has an override config ("an override is explicit state, kept until `forget`"): no key-bound
    /// policy drops it, lossy or not, so it counts against the bound until it is forgotten.
    pub fn is_pinned(&self, key: u64) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|e| e.override_config.is_some())
    }

    /// Whether any key is pinned ([`Model::is_pinned`]). Only then may the lossy `EvictLeastRecent` refuse a
    /// new key: it drops any other key to make room, so it rejects only when the keys it sees are all pinned.
    pub fn holds_pinned(&self) -> bool {
        self.pinned > 0
    }

    /// The key's state "`tokens` ... and `last_refill`", or `None` if the key holds no bucket (it then behaves as
    /// fresh). For a key of several bandwidths, its first bandwidth's balance ([`Model::state_set`] gives all).
    pub fn state(&self, key: u64) -> Option<(&Rational, u64)> {
        self.state_set(key)
            .and_then(|(tokens, last_refill)| Some((tokens.first()?, last_refill)))
    }

    /// The key's state "one `tokens_i` per bandwidth and one `last_refill`", in the set's order, or `None` if the
    /// key holds no bucket (it then behaves as fresh).
    pub fn state_set(&self, key: u64) -> Option<(&[Rational], u64)> {
        self.entries
            .get(&key)
            .and_then(|e| e.bucket.as_ref())
            .map(|b| (b.tokens(), b.last_refill()))
    }

    /// The keys that hold a bucket, ascending.
    pub fn keys(&self) -> Vec<u64> {
        self.held_keys().collect()
    }

    /// Whether any key holds a bucket (what `keys().is_empty()` says, without collecting them).
    pub fn holds_any(&self) -> bool {
        self.held_keys().next().is_some()
    }

    fn held_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries
            .iter()
            .filter(|(_, e)| e.bucket.is_some())
            .map(|(k, _)| *k)
    }

    /// Whether the key holds a record of `request_id` that is live at `now` (acquire and settle step 2, judged at
    /// the key's effective time): what a settle of that id would find (inspection only).
    pub fn holds_live_record(&self, key: u64, request_id: u64, now: u64) -> bool {
        (self.entries.get(&key)).is_some_and(|e| {
            e.live_record(request_id, self.dedupe_window_ns, now)
                .is_some()
        })
    }

    /// The key's request-id records as `(request_id, stamped_at)`, oldest first (inspection only).
    pub fn records(&self, key: u64) -> Vec<(u64, u64)> {
        self.entries.get(&key).map_or_else(Vec::new, |e| {
            e.records
                .iter()
                .map(|r| (r.request_id, r.stamped_at))
                .collect()
        })
    }

    /// acquire(key, now, cost, request_id?):
    /// 1. "`cost == 0` or `cost > capacity` -> `Err(InvalidCost)`. Nothing changes (no refill, no request-id
    ///    record)." For a set: "`cost` above the *smallest* capacity".
    /// 2. "If `request_id` is given and the key holds a record for it that is still in the dedupe window, return the
    ///    recorded decision unchanged (`replayed`). Nothing changes, nothing is charged." "A request-id record
    ///    holds the whole decision (every bandwidth's part); a replay returns it unchanged."
    /// 3. - 5. Refill, decide, report: [`ModelSetBucket::decide`] (a key with no state is fresh at this `now`, or
    ///         at the time a sweep dropped it if that is later).
    /// 6. "If `request_id` was given, record (id -> decision, t) on the key (evicting its oldest record beyond
    ///    `dedupe_per_key`)", stamped with the effective time `t`; with a window of 0 (ids off) nothing is kept.
    ///
    /// Step 6 replaces an older (necessarily no longer live) record of the same id rather than appending beside it:
    /// a dead record holding a FIFO slot could push out another id's live record, and that request would then be
    /// charged twice (found by the linearizability checker under lagging concurrent clocks).
    pub fn acquire(
        &mut self,
        key: u64,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Outcome, ModelError> {
        // One lookup for the reads of steps 1-5 and one for the write of step 6: the model keeps up with
        // attack scenarios that hold thousands of keys.
        let held_entry = self.entries.get(&key);
        let set = held_entry
            .and_then(|e| e.override_config.as_ref())
            .unwrap_or(&self.default_config);
        // Step 1.
        check_cost(set.smallest_capacity(), cost)?;
        // Step 2.
        if let Some(id) = request_id
            && let Some(record) =
                held_entry.and_then(|e| e.live_record(id, self.dedupe_window_ns, now))
        {
            return Ok(Outcome::of(record.decisions.clone(), true, false));
        }
        // Steps 3-5.
        let held = held_entry.and_then(|e| e.bucket.as_ref());
        let created = held.is_none();
        let before = match held_entry {
            Some(entry) => entry.bucket_at(set, now),
            None => Cow::Owned(ModelSetBucket::fresh(set, now)),
        };
        let (after, decisions) = before.decide(set, now, cost)?;
        let before_refill = before.last_refill();
        assert!(
            after.last_refill() >= before_refill,
            "last_refill is monotone per key"
        );
        let entry = self.entries.entry(key).or_default();
        let set = entry
            .override_config
            .as_ref()
            .unwrap_or(&self.default_config);
        let stamped_at = after.last_refill();
        entry.bucket = Some(after);
        entry.dropped_at = None;
        // Step 6: "replacing any older record of the same id".
        if let Some(id) = request_id.filter(|_| self.dedupe_window_ns > 0) {
            entry.records.retain(|record| record.request_id != id);
            entry.records.push_back(Record {
                request_id: id,
                decisions: decisions.clone(),
                stamped_at,
                cost,
                settled: None,
            });
            while entry.records.len() > self.dedupe_per_key {
                entry.records.pop_front();
            }
        }
        entry.check_invariants(set, self.dedupe_per_key);
        Ok(Outcome::of(decisions, false, created))
    }

    /// settle(key, request_id, actual, now), docs/semantics.md "settle":
    /// 1. "`actual > capacity` (the smallest capacity for a set) -> `Err(InvalidActual)`, judged against the key's
    ///    config whether or not it holds state, before anything else."
    /// 2. "The key's live record of `request_id`, judged as in acquire step 2 at `t = max(now, last_refill)`. None
    ///    ... -> `Err(UnknownRequest)`. A record of a denied acquire -> `Err(NotAdmitted)`."
    /// 3. "A record already settled with `actual'`: `actual' == actual` returns the recorded settlement unchanged
    ///    (`replayed`), nothing changes; otherwise `Err(AlreadySettled { actual' })`."
    /// 4. - 6. [`ModelSetBucket::settle`]; "An allowed settlement marks the record settled with `(actual,
    ///         settlement)`; its stamp does not change ..., nor does its place in the FIFO. A denied extra leaves
    ///         the record open." "Settle never creates a key."
    pub fn settle(
        &mut self,
        key: u64,
        now: u64,
        request_id: u64,
        actual: u64,
    ) -> Result<Outcome, ModelError> {
        let window = self.dedupe_window_ns;
        // Step 1, against the key's config whether or not it holds state.
        let smallest = self.bandwidths_of(key).smallest_capacity();
        if actual > smallest {
            return Err(ModelError::InvalidActual {
                actual,
                capacity: smallest,
            });
        }
        let default_config = &self.default_config;
        let entry = self
            .entries
            .get_mut(&key)
            .ok_or(ModelError::UnknownRequest)?;
        let set = entry.override_config.as_ref().unwrap_or(default_config);
        // Step 2 (a key with no bucket holds no record).
        let at = entry.effective_time(now);
        let bucket = entry.bucket.as_ref().ok_or(ModelError::UnknownRequest)?;
        let record = (entry.records.iter_mut().rev())
            .find(|r| r.request_id == request_id && is_live(r.stamped_at, window, at))
            .ok_or(ModelError::UnknownRequest)?;
        if !record.decisions.is_allowed() {
            return Err(ModelError::NotAdmitted);
        }
        // Step 3.
        if let Some((settled_actual, settlement)) = &record.settled {
            return if *settled_actual == actual {
                Ok(Outcome::of(settlement.clone(), true, false))
            } else {
                Err(ModelError::AlreadySettled {
                    actual: *settled_actual,
                })
            };
        }
        // Steps 4-6.
        let (after, decisions) = bucket.settle(set, now, record.cost, actual)?;
        assert!(
            after.last_refill() >= bucket.last_refill(),
            "last_refill is monotone per key"
        );
        if decisions.is_allowed() {
            record.settled = Some((actual, decisions.clone()));
        }
        entry.bucket = Some(after);
        entry.check_invariants(set, self.dedupe_per_key);
        Ok(Outcome::of(decisions, false, false))
    }

    /// peek(key, now): "Read-only: what step 3 would compute (remaining, reset_after), without writing anything."
    /// A key with no state is peeked as a fresh bucket at its effective time. For a key of several bandwidths,
    /// the bandwidth with the fewest whole tokens, the first of equals ([`Model::peek_set`] gives all).
    pub fn peek(&self, key: u64, now: u64) -> ModelPeek {
        self.with_peeks(key, now, |peeks| {
            // Strictly fewer: a later bandwidth with as many whole tokens leaves the earlier one.
            peeks.reduce(|fewest, peek| {
                if peek.remaining.floor() < fewest.remaining.floor() {
                    peek
                } else {
                    fewest
                }
            })
        })
        .expect("a bandwidth set has at least one bandwidth, so a peek has a part")
    }

    /// "peek reports every bandwidth's `remaining_i` and `reset_after_i`", in the set's order; read-only.
    pub fn peek_set(&self, key: u64, now: u64) -> Vec<ModelPeek> {
        self.with_peeks(key, now, |peeks| peeks.collect())
    }

    /// `f` of every bandwidth's peek of `key` at `now` ([`ModelSetBucket::peek`]), a key with no state peeked
    /// as a fresh bucket at its effective time.
    fn with_peeks<T>(
        &self,
        key: u64,
        now: u64,
        f: impl FnOnce(&mut dyn Iterator<Item = ModelPeek>) -> T,
    ) -> T {
        let set = self.bandwidths_of(key);
        let bucket = match self.entries.get(&key) {
            Some(entry) => entry.bucket_at(set, now),
            None => Cow::Owned(ModelSetBucket::fresh(set, now)),
        };
        f(&mut bucket.peek(set, now))
    }

    /// reconfigure(key, new_config, now):
    /// 1. "Refill the key to `t = max(now, last_refill)` under its old config (an absent key is fresh: full, at
    ///    `now`)."
    /// 2. "Convert to the new unit grid, rounding DOWN ... This never creates tokens."
    /// 3. "Clamp to the new capacity; `last_refill = t`; the key's config version increases by one."
    /// 4. "Invalid new config -> error, nothing changes." A [`ModelConfig`] is valid by construction, so this step
    ///    is [`ModelConfig::new`]'s error: the model is never touched by an invalid config.
    /// 5. "A reconfigure of a key with no state creates it ... if no room can be made ->
    ///    `Err(KeyLimitReached)`, nothing changes." The model has no key bound, so here it always creates; the
    ///    harness judges an implementation's refusal and makes the model follow it (nothing to do but drop a
    ///    bucket the implementation may have dropped already).
    ///
    /// For a set ([`ModelSetBucket::reconfigured`]): every old bandwidth refilled to `t`; a new bandwidth continues
    /// the old one of its identity (name, else position), converted and clamped; one with no old counterpart
    /// starts full; an old one with no new counterpart is dropped. "The key's config version increases by one,
    /// whatever changed."
    ///
    /// The new config (a [`ModelBandwidths`] set, or a [`ModelConfig`]: a set of one) becomes the key's
    /// override. Request-id records are kept. Returns the new config version.
    pub fn reconfigure(
        &mut self,
        key: u64,
        new_config: impl Into<ModelBandwidths>,
        now: u64,
    ) -> u64 {
        let new_config = new_config.into();
        let old_config = self.bandwidths_of(key).clone();
        let entry = self.entries.entry(key).or_default();
        let before = entry.bucket_at(&old_config, now);
        let after = before.reconfigured(&old_config, &new_config, now);
        assert!(
            after.last_refill() >= before.last_refill(),
            "last_refill is monotone per key"
        );
        entry.dropped_at = None;
        entry.bucket = Some(after);
        if entry.override_config.replace(new_config).is_none() {
            self.pinned += 1;
        }
        entry.version = entry.version.saturating_add(1);
        let version = entry.version;
        self.check_invariants(key);
        version
    }

    /// The balances [`Model::reconfigure`] would leave `key` with (every bandwidth of `new_config`, in
    /// order), read-only: the same transition, written nowhere.
    pub fn reconfigured_set(
        &self,
        key: u64,
        new_config: &ModelBandwidths,
        now: u64,
    ) -> Vec<Rational> {
        let old_config = self.bandwidths_of(key);
        let before = match self.entries.get(&key) {
            Some(entry) => entry.bucket_at(old_config, now),
            None => Cow::Owned(ModelSetBucket::fresh(old_config, now)),
        };
        before
            .reconfigured(old_config, new_config, now)
            .tokens()
            .to_vec()
    }

    /// forget(key): "Drops the key's bucket, its override config and its request-id records. The next access is
    /// fresh." The config version goes with the override (back to 0). Returns whether anything was held.
    pub fn forget(&mut self, key: u64) -> bool {
        let removed = self.entries.remove(&key);
        if removed
            .as_ref()
            .is_some_and(|e| e.override_config.is_some())
        {
            self.pinned -= 1;
        }
        removed.is_some()
    }

    /// [`Entry::check_invariants`] for `key`, after a mutation.
    fn check_invariants(&self, key: u64) {
        if let Some(entry) = self.entries.get(&key) {
            entry.check_invariants(self.bandwidths_of(key), self.dedupe_per_key);
        }
    }
}
