//! The single-bucket transition, with no keys: refill, decide, peek, reconfigure.
//!
//! Owns docs/semantics.md "acquire" steps 1 and 3-5, "peek", and "reconfigure" steps 1-3, for one bucket.
//! The set transition ([`crate::ModelSetBucket`]) applies exactly these functions to each bandwidth, and the
//! keyed [`crate::Model`] calls that (one transition, reused), adding only the per-key parts (dedupe records,
//! overrides, versions, expiry).
//!
//! Promises: every function is pure (it returns a new bucket, never mutates one); all arithmetic is in big
//! rationals, so nothing overflows or rounds except where the spec says to round (`ceil` of waits, `floor` of
//! reconfiguration); no function panics on any input. A bucket only ever holds `0 <= tokens`; after any refill
//! `tokens <= capacity` of the config used; `last_refill` never decreases.

use std::cmp::{Ordering, max};

use crate::Integer;
use crate::Rational;

use crate::config::{ModelConfig, ModelError};

/// A duration in nanoseconds from the decision's `now`, or `Never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelWait {
    /// After this many nanoseconds from `now`.
    After(u64),
    /// "`Never` if `rate == 0`", and "also when `now + value` would exceed `u64::MAX` (the clock cannot get there)".
    Never,
}

/// The decision of one acquire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelDecision {
    /// Step 4: "If `tokens >= cost`: allowed, `tokens -= cost`."
    Allowed {
        /// "The decision carries `remaining = tokens` (exact)", after the charge.
        remaining: Rational,
        /// "ns from `now` until the bucket is full again with no traffic".
        reset_after: ModelWait,
    },
    /// Step 4: "Otherwise denied, tokens unchanged."
    Denied {
        /// `remaining = tokens` (exact): the refilled balance, nothing charged.
        remaining: Rational,
        /// "ns from `now` until this same request would be allowed with no other traffic".
        retry_after: ModelWait,
        /// "ns from `now` until the bucket is full again with no traffic".
        reset_after: ModelWait,
    },
}

impl ModelDecision {
    /// Whether the request was allowed.
    pub fn is_allowed(&self) -> bool {
        matches!(self, ModelDecision::Allowed { .. })
    }

    /// The exact remaining tokens carried by the decision.
    pub fn remaining(&self) -> &Rational {
        match self {
            ModelDecision::Allowed { remaining, .. } | ModelDecision::Denied { remaining, .. } => {
                remaining
            }
        }
    }

    /// "remaining tokens: exact `balance / (q * 10^9)`; whole tokens are its floor" (design.md section 2).
    pub fn remaining_whole(&self) -> Integer {
        self.remaining().floor()
    }

    /// The decision's `reset_after`.
    pub fn reset_after(&self) -> ModelWait {
        match self {
            ModelDecision::Allowed { reset_after, .. }
            | ModelDecision::Denied { reset_after, .. } => *reset_after,
        }
    }

    /// The decision's `retry_after`: `Some` for a denial only.
    pub fn retry_after(&self) -> Option<ModelWait> {
        match self {
            ModelDecision::Allowed { .. } => None,
            ModelDecision::Denied { retry_after, .. } => Some(*retry_after),
        }
    }
}

/// What `peek` reports: "what step 3 would compute (remaining, reset_after), without writing anything".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelPeek {
    /// The refilled balance at `max(now, last_refill)`, exact.
    pub remaining: Rational,
    /// As in step 5: `0` if full, else `(t - now) + ceil((capacity - tokens) / rate_per_ns)`, or `Never`.
    pub reset_after: ModelWait,
}

/// One bucket's state: "`tokens` (a rational in `[0, capacity]`) and `last_refill` (ns)".
///
/// Fields are private: a bucket is only made by [`ModelBucket::fresh`] and the transitions, so every bucket is a
/// reachable state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelBucket {
    /// "`tokens` (a rational in `[0, capacity]`)".
    tokens: Rational,
    /// "`last_refill` (ns)": the time up to which refill has been credited.
    last_refill: u64,
}

/// A `u64` (a time, a cost, a capacity) as an exact rational.
fn rat(x: u64) -> Rational {
    Rational::from(x)
}

/// `value` compared with the whole number `whole`, exactly.
///
/// Nearly every comparison in the rules is of a balance against a whole number (capacity, cost, 0). With
/// `value = a/b`, `b > 0`, it is `a <=> whole * b`, and both sides fit u128 for every balance the model holds
/// (`a <= capacity * q * 10^9 < 2^126`); anything else takes the general comparison.
pub fn cmp_whole(value: &Rational, whole: u64) -> Ordering {
    match (
        u128::try_from(value.numerator()),
        u64::try_from(value.denominator()),
    ) {
        (Ok(a), Ok(b)) => a.cmp(&(u128::from(whole) * u128::from(b))),
        _ => value.cmp(&rat(whole)),
    }
}

/// `min(whole, value)`, the clamp of refill and reconfigure, by [`cmp_whole`].
fn min_whole(whole: u64, value: Rational) -> Rational {
    if cmp_whole(&value, whole).is_gt() {
        rat(whole)
    } else {
        value
    }
}

/// acquire step 1: "`cost == 0` or `cost > capacity` -> `Err(InvalidCost)`. Nothing changes (no refill, no
/// request-id record)." For a bandwidth set `capacity` is the smallest of its capacities.
pub(crate) fn check_cost(capacity: u64, cost: u64) -> Result<(), ModelError> {
    if cost == 0 || cost > capacity {
        return Err(ModelError::InvalidCost { cost, capacity });
    }
    Ok(())
}

/// acquire step 5, the shared shape of both waits: "`(t - now) + ceil(deficit / rate_per_ns)`; `Never` if
/// `rate == 0`"; "Both are `Never` also when `now + value` would exceed `u64::MAX` (the clock cannot get there)."
///
/// `deficit = whole - tokens`: `cost - tokens` (retry_after) or `capacity - tokens` (reset_after), `> 0` here.
fn wait_for(config: &ModelConfig, now: u64, t: u64, whole: u64, tokens: &Rational) -> ModelWait {
    debug_assert!(
        cmp_whole(tokens, whole).is_lt(),
        "waits are only computed for a positive deficit"
    );
    debug_assert!(t >= now, "t = max(now, last_refill) >= now");
    if !config.refills() {
        return ModelWait::Never;
    }
    // "`Never` also when `now + value` would exceed `u64::MAX`": a ceiling past u64 certainly does, and
    // every other sum is checked, so `value` below is exact.
    let Some(ceil) = ceil_deficit_over_rate(whole, tokens, config.rate_per_ns()) else {
        return ModelWait::Never;
    };
    match (t - now).checked_add(ceil) {
        Some(value) if now.checked_add(value).is_some() => ModelWait::After(value),
        _ => ModelWait::Never,
    }
}

/// `ceil((whole - tokens) / rate)`, or `None` past `u64::MAX`.
///
/// With `tokens = a/b` and `rate = c/d` in lowest terms, `whole - a/b = (whole * b - a) / b` and the quotient
/// is `((whole * b - a) * d) / (b * c)`: the same number taken in integers, so no intermediate fraction is
/// reduced. In u128 when every product fits (nearly always), else in big integers.
fn ceil_deficit_over_rate(whole: u64, tokens: &Rational, rate: &Rational) -> Option<u64> {
    ceil_deficit_over_rate_u128(whole, tokens, rate)
        .unwrap_or_else(|| ceil_deficit_over_rate_big(whole, tokens, rate))
}

/// [`ceil_deficit_over_rate`] in u128: `None` when a part or a product does not fit (then the big-integer
/// form decides), else the answer.
fn ceil_deficit_over_rate_u128(
    whole: u64,
    tokens: &Rational,
    rate: &Rational,
) -> Option<Option<u64>> {
    let a = u128::try_from(tokens.numerator()).ok()?;
    let b = u128::try_from(tokens.denominator()).ok()?;
    let c = u128::try_from(rate.numerator()).ok()?;
    let d = u128::try_from(rate.denominator()).ok()?;
    let deficit = u128::from(whole).checked_mul(b)?.checked_sub(a)?;
    let dividend = deficit.checked_mul(d)?;
    let divisor = b.checked_mul(c)?;
    Some(u64::try_from(dividend.div_ceil(divisor)).ok())
}

/// [`ceil_deficit_over_rate`] in big integers: any size.
fn ceil_deficit_over_rate_big(whole: u64, tokens: &Rational, rate: &Rational) -> Option<u64> {
    let deficit = Integer::from(whole) * tokens.denominator() - tokens.numerator();
    let dividend = deficit * rate.denominator();
    let divisor = rate.numerator() * tokens.denominator();
    u64::try_from(&((dividend + &divisor - Integer::ONE) / divisor)).ok()
}

impl ModelBucket {
    /// State: "A key with no state behaves as a *fresh* bucket: `tokens = capacity`, `last_refill = now` of the
    /// operation that creates it."
    pub fn fresh(config: &ModelConfig, now: u64) -> Self {
        ModelBucket {
            tokens: config.capacity_tokens(),
            last_refill: now,
        }
    }

    /// One bandwidth of a set's state as a bucket: its balance and the set's one cursor. Only the set
    /// transition calls it, with a balance it holds (so the bucket is a reachable state).
    pub(crate) fn from_parts(tokens: Rational, last_refill: u64) -> Self {
        ModelBucket {
            tokens,
            last_refill,
        }
    }

    /// The bucket's balance, given up (the set transition keeps only the balances of its bandwidths).
    pub(crate) fn into_tokens(self) -> Rational {
        self.tokens
    }

    /// The exact token balance.
    pub fn tokens(&self) -> &Rational {
        &self.tokens
    }

    /// The time of the last refill, in ns.
    pub fn last_refill(&self) -> u64 {
        self.last_refill
    }

    /// acquire step 3: "Refill: `t = max(now, last_refill)`; `tokens = min(capacity, tokens + (t - last_refill) *
    /// rate)`; `last_refill = t`."
    ///
    /// `rate` is per second and times are ns, so the product is `(t - last_refill) * rate_per_ns` with
    /// `rate_per_ns = p / (q * 10^9)`.
    pub fn refilled(&self, config: &ModelConfig, now: u64) -> ModelBucket {
        let t = max(now, self.last_refill);
        // `t >= last_refill`, so the difference of the two times is exact in u64.
        let elapsed = t - self.last_refill;
        // Two exact shortcuts of the same sum, taken often (frozen clocks, rollbacks, idle keys): no time
        // adds `0 * rate`, and a bucket at capacity stays there since the credit is never negative.
        let sum = if elapsed == 0 || cmp_whole(&self.tokens, config.capacity()).is_ge() {
            self.tokens.clone()
        } else {
            // `a/b + elapsed * c/d = (a*d + elapsed*c*b) / (b*d)`, reduced once.
            let rate = config.rate_per_ns();
            let (a, b) = (self.tokens.numerator(), self.tokens.denominator());
            let (c, d) = (rate.numerator(), rate.denominator());
            let numerator = a * d + Integer::from(elapsed) * c * b;
            Rational::from_parts(numerator, b * d)
        };
        let tokens = min_whole(config.capacity(), sum);
        let next = ModelBucket {
            tokens,
            last_refill: t,
        };
        assert!(
            next.last_refill >= self.last_refill,
            "last_refill is monotone"
        );
        assert!(cmp_whole(&next.tokens, 0).is_ge(), "tokens >= 0");
        // The `min` above is this very comparison; in release builds the keyed model's own check after
        // each operation (`Model::check_invariants`) re-states it once per step instead of twice.
        debug_assert!(
            next.tokens <= config.capacity_tokens(),
            "tokens <= capacity after refill"
        );
        next
    }

    /// step 5, `reset_after`: "ns from `now` until the bucket is full again with no traffic: `(t - now) +
    /// ceil((capacity - tokens) / rate_per_ns)`, `0` if full; `Never` if it is not full and `rate == 0`."
    ///
    /// Decision pinned here: "`0` if full" wins over the `(t - now)` term, so a full bucket reports `After(0)` even
    /// when `now` is behind `last_refill` (a rollback): it is full at `now` already.
    fn reset_after(&self, config: &ModelConfig, now: u64) -> ModelWait {
        if cmp_whole(&self.tokens, config.capacity()).is_ge() {
            return ModelWait::After(0);
        }
        wait_for(
            config,
            now,
            self.last_refill,
            config.capacity(),
            &self.tokens,
        )
    }

    /// acquire steps 1 and 3-5 on one bucket: returns the state to write back and the decision.
    ///
    /// 1. "`cost == 0` or `cost > capacity` -> `Err(InvalidCost)`. Nothing changes."
    /// 3. Refill (see [`ModelBucket::refilled`]). "This is written back even when the request is denied."
    /// 4. "If `tokens >= cost`: allowed, `tokens -= cost`. Otherwise denied, tokens unchanged."
    /// 5. "The decision carries `remaining = tokens` (exact) and `reset_after` ... denied only, `retry_after`: ns
    ///    from `now` until this same request would be allowed with no other traffic: `(t - now) + ceil((cost -
    ///    tokens) / rate_per_ns)`; `Never` if `rate == 0`."
    pub fn decide(
        &self,
        config: &ModelConfig,
        now: u64,
        cost: u64,
    ) -> Result<(ModelBucket, ModelDecision), ModelError> {
        check_cost(config.capacity(), cost)?;
        let refilled = self.refilled(config, now);
        if refilled.covers(cost) {
            Ok(refilled.charged(config, now, cost))
        } else {
            let decision = refilled.refused(config, now, cost);
            Ok((refilled, decision))
        }
    }

    /// step 4's test on a refilled bucket: "`tokens >= cost`".
    pub(crate) fn covers(&self, cost: u64) -> bool {
        covers(&self.tokens, cost)
    }

    /// steps 4 and 5 of an allowed request on a bucket refilled to `t` that [covers](Self::covers) `cost`:
    /// "allowed, `tokens -= cost`", and the decision carries the charged balance and its `reset_after`.
    pub(crate) fn charged(
        &self,
        config: &ModelConfig,
        now: u64,
        cost: u64,
    ) -> (ModelBucket, ModelDecision) {
        let next = ModelBucket {
            // `a/b - cost = (a - cost * b) / b`, already in lowest terms: dashu's rational minus
            // integer builds it without a gcd.
            tokens: &self.tokens - Integer::from(cost),
            last_refill: self.last_refill,
        };
        assert!(
            cmp_whole(&next.tokens, 0).is_ge(),
            "tokens >= 0 after a charge"
        );
        let decision = ModelDecision::Allowed {
            remaining: next.tokens.clone(),
            reset_after: next.reset_after(config, now),
        };
        (next, decision)
    }

    /// settle step 5 of a refund on a bucket refilled to `t`: "`tokens_i = min(capacity_i, tokens_i + charged -
    /// actual)`, and the settlement is allowed"; it reports as acquire step 5.
    pub(crate) fn refunded(
        &self,
        config: &ModelConfig,
        now: u64,
        refund: u64,
    ) -> (ModelBucket, ModelDecision) {
        let next = ModelBucket {
            tokens: min_whole(config.capacity(), &self.tokens + Integer::from(refund)),
            last_refill: self.last_refill,
        };
        let decision = ModelDecision::Allowed {
            remaining: next.tokens.clone(),
            reset_after: next.reset_after(config, now),
        };
        (next, decision)
    }

    /// steps 4 and 5 of a denied request on a bucket refilled to `t`: "denied, tokens unchanged", and its
    /// wait "`(t - now) + ceil((cost - tokens) / rate_per_ns)`; `Never` if `rate == 0`". A bucket that covers
    /// `cost` is denied only as one bandwidth of a set another bandwidth of which does not: then "`wait_i = 0`
    /// if `tokens_i >= cost`".
    pub(crate) fn refused(&self, config: &ModelConfig, now: u64, cost: u64) -> ModelDecision {
        let retry_after = if self.covers(cost) {
            ModelWait::After(0)
        } else {
            wait_for(config, now, self.last_refill, cost, &self.tokens)
        };
        ModelDecision::Denied {
            remaining: self.tokens.clone(),
            retry_after,
            reset_after: self.reset_after(config, now),
        }
    }

    /// peek: "Read-only: what step 3 would compute (remaining, reset_after), without writing anything."
    pub fn peek(&self, config: &ModelConfig, now: u64) -> ModelPeek {
        let refilled = self.refilled(config, now);
        ModelPeek {
            reset_after: refilled.reset_after(config, now),
            remaining: refilled.tokens,
        }
    }

    /// reconfigure steps 1-3 on one bucket:
    /// 1. "Refill the key to `t = max(now, last_refill)` under its old config."
    /// 2. "Convert to the new unit grid, rounding DOWN: with the new rate `p'/q'`, one unit is `1/(q' * 10^9)` token;
    ///    `tokens = floor(tokens * q' * 10^9) / (q' * 10^9)`. This never creates tokens."
    /// 3. "Clamp to the new capacity; `last_refill = t`." (The version bump is the keyed model's.)
    pub fn reconfigured(&self, old: &ModelConfig, new: &ModelConfig, now: u64) -> ModelBucket {
        let refilled = self.refilled(old, now);
        let scale = Rational::from(new.units_per_token());
        let on_grid = (&refilled.tokens * &scale).floor() / &scale;
        let next = ModelBucket {
            tokens: min_whole(new.capacity(), on_grid),
            last_refill: refilled.last_refill,
        };
        assert!(
            next.tokens <= refilled.tokens,
            "reconfigure never creates tokens"
        );
        assert!(cmp_whole(&next.tokens, 0).is_ge(), "tokens >= 0");
        assert!(
            next.last_refill >= self.last_refill,
            "last_refill is monotone"
        );
        next
    }

    /// Expiry: "its refilled balance at `max(s, last_refill)` equals capacity" (the bucket half of "evictable").
    pub fn is_full_at(&self, config: &ModelConfig, s: u64) -> bool {
        self.refilled(config, s).tokens == config.capacity_tokens()
    }

    /// Whether `tokens` is a whole number of units `1/(q * 10^9)` of `config`'s grid. Every state the keyed model
    /// holds satisfies this for the key's current config (the integer-unit limiter relies on it).
    ///
    /// `tokens = a/b` in lowest terms, so `tokens * U` is whole exactly when `b` divides `U`: one integer
    /// remainder instead of a rational product.
    pub fn is_on_grid(&self, config: &ModelConfig) -> bool {
        on_grid(&self.tokens, config)
    }
}

/// step 4's test, "`tokens >= cost`", on a balance: [`ModelBucket::covers`] for a balance the set transition
/// holds, read in place.
pub(crate) fn covers(tokens: &Rational, cost: u64) -> bool {
    cmp_whole(tokens, cost).is_ge()
}

/// [`ModelBucket::is_on_grid`] on a balance, read in place.
pub(crate) fn on_grid(tokens: &Rational, config: &ModelConfig) -> bool {
    // `q * 10^9 <= 2^32 * 10^9 < 2^64`; a denominator wider than that cannot divide it.
    let units_per_token = config.rate_denom() * crate::NANOS_PER_SECOND;
    u64::try_from(tokens.denominator()).is_ok_and(|b| units_per_token.is_multiple_of(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ceil_deficit_over_rate` against its definition in reduced rationals, and each of its two forms
    /// on its own: the u128 one wherever it applies (small values), the big-integer one on every case
    /// (including the values whose products pass 2^128), with the `u64::MAX` cut-off.
    #[test]
    fn the_wait_quotient_is_the_ceiling_of_the_rational_quotient_on_both_paths() {
        let definition = |whole: u64, tokens: &Rational, rate: &Rational| -> Option<u64> {
            let quotient = (rat(whole) - tokens) / rate;
            u64::try_from(&quotient.ceil()).ok()
        };
        let fraction = |n: u128, d: u128| Rational::from_parts(Integer::from(n), d.into());
        let mut state: u64 = 7;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state
        };
        let (mut narrow, mut wide) = (0, 0);
        for round in 0..20_000 {
            let wide_round = round % 2 == 1;
            let pick = |x: u64, small: u64| if wide_round { x } else { x % small };
            // q <= 2^32, as every config's (the model never sees a wider grid).
            let q = if wide_round {
                next() % (1 << 32)
            } else {
                next() % (1 << 20)
            };
            let denominator = u128::from(q.max(1)) * 1_000_000_000;
            let whole = pick(next(), 1_000).max(1);
            let numerator = u128::from(next()) % (u128::from(whole) * denominator);
            let tokens = fraction(numerator, denominator);
            let rate = fraction(u128::from(pick(next(), 1 << 20).max(1)), denominator);
            let expected = definition(whole, &tokens, &rate);
            let context = format!("whole {whole}, tokens {tokens}, rate {rate}");
            // Both forms on every case where they apply: the big-integer one always does.
            match ceil_deficit_over_rate_u128(whole, &tokens, &rate) {
                Some(answer) => {
                    narrow += 1;
                    assert_eq!(answer, expected, "u128 form, {context}");
                }
                None => wide += 1,
            }
            assert_eq!(
                ceil_deficit_over_rate_big(whole, &tokens, &rate),
                expected,
                "big-integer form, {context}"
            );
            assert_eq!(
                ceil_deficit_over_rate(whole, &tokens, &rate),
                expected,
                "{context}"
            );
        }
        assert!(
            narrow > 1_000 && wide > 1_000,
            "both paths taken: {narrow} / {wide}"
        );
    }
}
