//! The sequential mutants: each one a [`Mistake`] that overrides exactly one hook of the exact
//! transition. The doc comment of each says what the mistake is and where it was seen; the
//! catalogue ([`crate::catalogue`]) repeats that in one line for the report.

use bucketproof_limiter::internal::state_from_parts;
use bucketproof_limiter::{BucketState, Config, Nanos, Wait};

use crate::keyed::{Mistake, wait_from};

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
