//! The sequential mutants: each one a [`Mistake`] that overrides exactly one hook of the exact
//! transition. The doc comment of each says what the mistake is and where it was seen; the
//! catalogue ([`crate::catalogue`]) repeats that in one line for the report.

use bucketproof_limiter::internal::state_from_parts;
use bucketproof_limiter::{BucketState, Config, Nanos, Wait};

use bucketproof_trace::boundary::PACKED_LIMIT;

use crate::keyed::{Mistake, exact_wait, wait_from};

/// The exact refill before its clamp: the time refilled to, `max(now, last_refill)`, and the units
/// earned since the cursor (`u64 * u64` fits `u128`). The mutants that get the clamp or the rounding
/// wrong start from here.
fn credit(config: &Config, state: BucketState, now: Nanos) -> (Nanos, u128) {
    let refill_to = now.max(state.last_refill());
    let elapsed = refill_to - state.last_refill();
    (
        refill_to,
        elapsed as u128 * config.units_per_nanosecond() as u128,
    )
}

/// 1. Elapsed time from a wall clock with no clamp: `elapsed = now - last` may be negative, which
///    debits the bucket (floored at empty), and the cursor follows the clock back; when the clock
///    recovers, the same interval is credited again.
///
/// Seen: varnish/libvmod-vsthrottle#4 (a clock set two days back drove the tokens far negative and
/// blocked clients), sethvargo/go-limiter#41, and every `time.time()` / `Date.now()` bucket.
#[derive(Clone, Copy, Debug, Default)]
pub struct WallClockElapsed;

impl Mistake for WallClockElapsed {
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        let p = config.units_per_nanosecond() as u128;
        let balance = if now >= state.last_refill() {
            let credit = (now - state.last_refill()) as u128 * p;
            state.balance().saturating_add(credit)
        } else {
            let debit = (state.last_refill() - now) as u128 * p;
            state.balance().saturating_sub(debit)
        };
        state_from_parts(balance.min(config.capacity_units()), now)
    }
}

/// 2. A backwards clock credits nothing (elapsed clamped to 0) but the cursor is still set to the
///    earlier time, so the next call at the later time credits the same interval again.
///
/// Seen: Go's `golang.org/x/time/rate` (`advance` takes `last = min(last, now)` and `AllowN` stores
/// `last = now`): golang/go#56287, "alternating AllowN before last and after last can create new
/// tokens".
#[derive(Clone, Copy, Debug, Default)]
pub struct BackwardsCursor;

impl Mistake for BackwardsCursor {
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        state_from_parts(state.refilled(config, now).balance(), now)
    }
}

/// 3. No capacity clamp: an idle bucket keeps accumulating past its capacity, so a long pause buys
///    an arbitrarily large burst.
///
/// Seen: udoprog/leaky-bucket#30 ("Idle bucket should not overflow": after a long enough pause any
/// number of tokens could be acquired).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCapacityClamp;

impl Mistake for NoCapacityClamp {
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        let (refill_to, credit) = credit(config, state, now);
        state_from_parts(state.balance().saturating_add(credit), refill_to)
    }
}

/// 4. Denied requests are charged: the cost is taken (down to empty) whether or not the request is
///    admitted, so a client that keeps retrying starves itself.
///
/// Seen: counters that `INCR` before comparing, rejected requests included (e.g. the Redis store of
/// `@fastify/rate-limit`, whose Lua script increments on every call), carried over to buckets as
/// "take, then check".
#[derive(Clone, Copy, Debug, Default)]
pub struct ChargeDenied;

impl Mistake for ChargeDenied {
    fn charge(&self, balance: u128, cost_units: u128, _allowed: bool) -> u128 {
        balance.saturating_sub(cost_units)
    }
}

/// 5. `cost > capacity` is accepted as an ordinary request: it can never be admitted (the balance is
///    clamped below it), yet it is reported as a denial with a finite, bogus retry time, so a client
///    waits forever.
///
/// Seen: emqx/emqx#2508 (requests above the burst blocked the process for good); rwz/redis-gcra#6
/// (`cost > burst` treated as an ordinary limited request). Go's `x/time/rate` guards it
/// explicitly in `WaitN` ("exceeds limiter's burst").
#[derive(Clone, Copy, Debug, Default)]
pub struct OversizedCost;

impl Mistake for OversizedCost {
    fn cost_units(&self, config: &Config, cost: u64) -> Option<u128> {
        (cost != 0).then(|| cost as u128 * config.units_per_token())
    }
}

/// 7. `retry_after` rounded down to the nanosecond instead of up: a client that waits exactly that
///    long is denied again.
///
/// Seen: Go's `x/time/rate` `durationFromTokens` truncates to whole nanoseconds, so
/// `Reservation.Delay()` can be 1 ns short (transcribed in `crates/float/src/go.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryFloor;

impl Mistake for RetryFloor {
    fn retry_after(&self, short_units: u128, units_per_ns: u64, lag: Nanos, now: Nanos) -> Wait {
        if units_per_ns == 0 {
            return Wait::Never;
        }
        // `/` where the exact rule has `div_ceil`.
        wait_from(short_units / units_per_ns as u128, lag, now)
    }
}

/// 8. Refill remainder dropped: each refill credits only whole tokens and still moves the cursor to
///    `now`, so the fraction earned since the last call is lost; polling finely starves the client.
///
/// Seen: firecracker-microvm/firecracker#3370 (`auto_replenish` discarded the fractional tokens and
/// fast-forwarded `last_update`); any `tokens += int(elapsed * rate); last = now`.
#[derive(Clone, Copy, Debug, Default)]
pub struct WholeTokenRefill;

impl Mistake for WholeTokenRefill {
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        let (refill_to, credit) = credit(config, state, now);
        let whole = credit - credit % config.units_per_token();
        let balance = state
            .balance()
            .saturating_add(whole)
            .min(config.capacity_units());
        state_from_parts(balance, refill_to)
    }
}

/// 9. `>` instead of `>=` in the allow test: the last token (and `cost == capacity` on a full
///    bucket) is never admitted.
///
/// Seen: tj/node-ratelimiter#8 (the documented check admitted `max - 1` requests); the mirror-image
/// off-by-one in api7/aisix#950.
#[derive(Clone, Copy, Debug, Default)]
pub struct StrictGreater;

impl Mistake for StrictGreater {
    fn allows(&self, balance: u128, cost_units: u128) -> bool {
        balance > cost_units
    }
}

/// How long a bucket may idle before [`IdleTtl`] drops it: a fixed minute, as a store's `EXPIRE`.
pub const IDLE_TTL_NS: Nanos = 60_000_000_000;

/// 10. A non-full bucket evicted and recreated full: any bucket idle for longer than a fixed TTL is
///     dropped whatever its balance, and comes back full (a burst after eviction).
///
/// Seen: cristipufu/aspnetcore-redis-rate-limiting#46 (a TTL shorter than the time to refill: "a
/// bucket which is filled early"); infinigence/octollm#33 (a fixed `2 * window` TTL replaced by the
/// time until full).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdleTtl;

impl Mistake for IdleTtl {
    fn idle_ttl(&self) -> Option<Nanos> {
        Some(IDLE_TTL_NS)
    }
}

/// 11. A repeated request id charged twice: the limiter ignores request ids, so a client library's
///     retry of a call whose answer was lost pays again.
///
/// Seen: every limiter without idempotency keys behind a retrying client (an HTTP client retrying a
/// timed-out call whose first attempt was charged).
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestIdTwice;

impl Mistake for RequestIdTwice {
    fn honours_request_ids(&self) -> bool {
        false
    }
}

/// 12. Reconfiguration applied retroactively: the new config is installed without first refilling
///     up to `now` under the old one, so the interval since the last refill is re-priced at the new
///     rate (and a faster rate mints tokens for time already past).
///
/// Seen: OpenZeppelin/contracts-sui#350 (audit note N-02: "reconfiguring a bucket to a faster rate
/// while preserving the anchor mints retroactive credit"); redisson/redisson#6499 (`setRate` that
/// only rewrites the rate fields).
#[derive(Clone, Copy, Debug, Default)]
pub struct RetroactiveReconfig;

impl Mistake for RetroactiveReconfig {
    fn reconfigure(
        &self,
        old: &Config,
        new: &Config,
        state: BucketState,
        _now: Nanos,
    ) -> BucketState {
        // Converting at the old cursor refills nothing: the elapsed interval is left for the new rate.
        state.reconfigured(old, new, state.last_refill())
    }
}

/// 14. The refill credit `elapsed * p` computed in `u64`, wrapping: once an idle gap passes
///     `2^64 / p` ns the credit wraps to almost nothing, and a bucket that should be full stays as
///     empty as it was. Random gaps miss it (the wrapped credit is almost always above any small
///     capacity, and the clamp hides it); the gap of exactly `ceil(2^64 / p)` ns does not.
///
/// Seen: every `tokens += elapsed_ns * rate` in 64-bit integers (nanosecond clocks make the product
/// large quickly: at 10^9 units per ns it wraps after 18 s of idling).
#[derive(Clone, Copy, Debug, Default)]
pub struct WrappingCredit;

impl Mistake for WrappingCredit {
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        let refill_to = now.max(state.last_refill());
        let elapsed = refill_to - state.last_refill();
        // `u64 * u64` kept in `u64`, where the exact rule widens to `u128`.
        let credit = elapsed.wrapping_mul(config.units_per_nanosecond()) as u128;
        let balance = state
            .balance()
            .saturating_add(credit)
            .min(config.capacity_units());
        state_from_parts(balance, refill_to)
    }
}

/// 15. The capacity in units, `capacity * q * 10^9`, computed in `u64`, wrapping: for a config whose
///     capacity units pass `2^64` the clamp uses the wrapped (much smaller) capacity, so a full bucket
///     holds a fraction of what it should. The small configs random generators pick never pass `2^64`.
///
/// Seen: 64-bit "scaled integer" buckets (tokens times a fixed precision) that overflow for large
/// capacities or fine rate grids.
#[derive(Clone, Copy, Debug, Default)]
pub struct CapacityUnitsU64;

impl Mistake for CapacityUnitsU64 {
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        let (refill_to, credit) = credit(config, state, now);
        let capacity_units = config
            .capacity()
            .wrapping_mul(config.units_per_token() as u64) as u128;
        let balance = state.balance().saturating_add(credit).min(capacity_units);
        state_from_parts(balance, refill_to)
    }
}

/// 16. The packed/wide line off by one: a balance of exactly `2^62` units is stored in the packed
///     slot (`<=` where the rule is `<`), whose 62 bits drop the top one, so the bucket reads back
///     empty. Only a balance of exactly `2^62` units shows it: capacity units above `2^62` and a
///     refill or charge landing on the line exactly.
///
/// Seen: the keyed limiter's own `PackedBucket` / side-map split (`keyed/shard.rs`), where the line is
/// `balance < 2^62`; every bit-packed counter with a spill-over representation.
#[derive(Clone, Copy, Debug, Default)]
pub struct PackedLineOffByOne;

impl Mistake for PackedLineOffByOne {
    fn charge(&self, balance: u128, cost_units: u128, allowed: bool) -> u128 {
        let stored = if allowed {
            balance.saturating_sub(cost_units)
        } else {
            balance
        };
        if stored <= PACKED_LIMIT {
            stored & (PACKED_LIMIT - 1)
        } else {
            stored
        }
    }
}

/// 17. The end of the clock taken as exclusive: a wait that ends exactly at `u64::MAX` is reported as
///     `Never` (`now + wait < u64::MAX` where the rule is `<=`). Only a denial whose wait ends on the
///     clock's last nanosecond shows it: `now = u64::MAX - wait` exactly.
///
/// Seen: overflow guards written as `now + wait < MAX` (or `checked_add(..).filter(|t| *t < MAX)`)
/// around deadline arithmetic.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockEndExclusive;

impl Mistake for ClockEndExclusive {
    fn retry_after(&self, short_units: u128, units_per_ns: u64, lag: Nanos, now: Nanos) -> Wait {
        match exact_wait(short_units, units_per_ns, lag, now) {
            Wait::After(wait) if wait > 0 && wait == u64::MAX - now => Wait::Never,
            wait => wait,
        }
    }
}

/// 18. The refill sum `balance + credit` wrapping in `u128` instead of saturating: a nearly full
///     bucket of the largest configs (capacity units near `2^126`, `p` near `2^64`) idle for about
///     440 years wraps past `2^128` and comes back nearly empty. No small config can reach it.
///
/// Seen: `wrapping_add` (or unchecked `+` in release builds) where the sum of two bounded terms was
/// assumed to fit.
#[derive(Clone, Copy, Debug, Default)]
pub struct WrappingRefillSum;

impl Mistake for WrappingRefillSum {
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        let (refill_to, credit) = credit(config, state, now);
        let balance = state
            .balance()
            .wrapping_add(credit)
            .min(config.capacity_units());
        state_from_parts(balance, refill_to)
    }
}

/// 25. A settle that refunds every time it is called: the record is never marked settled, so a
///     retried settle (a client retry, a duplicated callback) gives the difference back again.
///
/// Seen: hand-written refunds that restore the same usage twice (hackerai #1221); refunds keyed by
/// nothing but the caller's good behaviour.
#[derive(Clone, Copy, Debug, Default)]
pub struct RefundTwice;

impl Mistake for RefundTwice {
    fn settles_once(&self) -> bool {
        false
    }
}

/// 26. A refund added to the balance with no clamp: a request settled after its bucket refilled
///     lifts the bucket above capacity, a burst larger than the contract.
///
/// Seen: `tokens += refund` in compensation code written beside a clamped refill (bucket4j #19's
/// "compensation" discussion; the refill clamps, the refund was new code).
#[derive(Clone, Copy, Debug, Default)]
pub struct RefundAboveCapacity;

impl Mistake for RefundAboveCapacity {
    fn refund(&self, config: &Config, balance: u128, refund_units: u128) -> u128 {
        let _ = config;
        balance.saturating_add(refund_units)
    }
}

/// 27. A settle that finds the request id on any key: request ids are scoped to the key they were
///     used with, and a refund of another key's request credits a key that was never charged.
///
/// Seen: idempotency and refund tables keyed by the request id alone, shared across tenants.
#[derive(Clone, Copy, Debug, Default)]
pub struct RefundOtherKeysRequest;

impl Mistake for RefundOtherKeysRequest {
    fn settles_any_keys_record(&self) -> bool {
        true
    }
}
