//! The client side: a pacing helper that reads what the server advertises and decides when to send.
//!
//! [`Pacer`] is a pure state machine over a caller-supplied monotonic time in nanoseconds (no clock is
//! read here, so simulations and tests are deterministic). Feed it every response with
//! [`Pacer::observe`]; ask [`Pacer::ready_for`] before each request. Its rules, from draft-11 Section 7:
//!
//! - `Retry-After` takes precedence over the fields (delay-seconds, or an HTTP-date measured against
//!   the response's own `Date`, so no wall clock is needed); the effective window is then ignored;
//! - fields on a response with a positive `Age` came from a cache and are ignored (Section 7.3);
//!   a `Retry-After` on such a response is still honoured, because waiting longer is always safe;
//! - malformed fields are ignored as a whole; fields in trailers are never read;
//! - with several service limits, every item is a constraint of its own and a request waits until
//!   *every* item allows it (see "Several service limits" below); all items and policies of the last
//!   fresh response are kept for the caller ([`Pacer::limits`], [`Pacer::policies`],
//!   [`Pacer::constraints`]);
//! - hints are not promises (Section 8.3): a 429 after a healthy hint is handled like any 429;
//! - every wait is capped at [`PacerConfig::max_wait`], so a hostile or broken `t` / `Retry-After` of
//!   a million seconds cannot park the client forever (Section 8.5.1);
//! - a 429 or 503 without usable timing falls back to capped exponential backoff with full jitter
//!   from a seedable ChaCha RNG ([`Backoff`]).
//!
//! [`RetryPolicy`] says which requests may be retried at all: idempotent methods, or any request that
//! carries an `Idempotency-Key`; and never past a deadline or an attempt budget.
//!
//! # Several service limits
//!
//! A response may carry several items: "more than one quota policy can affect a given request"
//! (draft-11 Section 2), and a bucketproof key of several bandwidths sends one item per bandwidth,
//! all of which must cover a request for it to be admitted. Section 7 asks the client not to
//! "exceed the available quota within the time expressed in the effective window parameter", and
//! that holds for each item. So each item becomes a [`Constraint`] (its `r` as a budget until its
//! window ends), a request of `cost` may go at the latest of the times at which each constraint
//! allows it, and the constraint that allows it last is the binding one ([`Pacer::binding_for`]).
//!
//! "Pacing on the item that frees first" would be wrong here: at the moment the first item frees,
//! another may still be exhausted, and the request would earn the very 429 the hints were sent to
//! avoid. Keeping every item and waiting for the binding one is the same thing as pacing on the
//! single item when there is one, and it is what makes the no-429 argument below hold per item.
//! Items are never merged or dropped because they look alike: two items with the same name and
//! another `pk` or `t` are two constraints (waiting longer than either alone says is always safe).
//!
//! Why a single sequential pacing client never sees a 429 from the exact limiter: a response with
//! `r >= cost` means the balance was at least `cost` when the server answered, and with no other
//! client it can only have grown; with `r < cost` the client waits `t` (at which point at least `r + 1`
//! whole tokens exist) plus `(cost - r - 1) * w / q` seconds, and `q / w` never exceeds the true rate
//! because `w` is rounded up. With several bandwidths the argument holds for each item on its own, and
//! the client waits for all of them. The simulation in [`crate::sim`] checks exactly this.

use http::header::{AGE, DATE, RETRY_AFTER};
use http::{HeaderMap, Method, StatusCode};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::field::{QuotaPolicy, RateLimit, RateLimitPolicy, ServiceLimit};
use crate::profile::Profile;

use bucketproof_limiter::NANOS_PER_SECOND;
/// Nanoseconds on the caller's monotonic clock: the limiter's own time type.
pub use bucketproof_limiter::Nanos;

/// Capped exponential backoff with full jitter: attempt `n` (from 1) waits a uniformly random
/// duration in `[0, min(cap, base * 2^(n-1))]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first ceiling, in ns.
    pub base: Nanos,
    /// The largest ceiling, in ns.
    pub cap: Nanos,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: 100_000_000,          // 100 ms
            cap: 30 * NANOS_PER_SECOND, // 30 s
        }
    }
}

impl Backoff {
    /// The ceiling for attempt `attempt` (1-based): `min(cap, base * 2^(attempt-1))`.
    pub fn ceiling(&self, attempt: u32) -> Nanos {
        let shift = attempt.saturating_sub(1).min(63);
        self.base.saturating_mul(1u64 << shift).min(self.cap)
    }

    /// A full-jitter delay for `attempt`, drawn from `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut ChaCha8Rng) -> Nanos {
        uniform_inclusive(rng, self.ceiling(attempt))
    }
}

/// A uniform integer in `[0, max]` by rejection sampling: our own function, not a library
/// distribution, so a seed replays identically across dependency versions.
pub fn uniform_inclusive(rng: &mut ChaCha8Rng, max: u64) -> u64 {
    if max == u64::MAX {
        return rng.next_u64();
    }
    let span = max + 1;
    // Largest multiple of span that fits: reject draws above it to avoid modulo bias.
    let zone = u64::MAX - (u64::MAX % span) - 1;
    loop {
        let x = rng.next_u64();
        if x <= zone {
            return x % span;
        }
    }
}

/// Settings of a [`Pacer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacerConfig {
    /// The wire profile to read.
    pub profile: Profile,
    /// Longest wait any single hint may impose (default 10 minutes, the threshold draft-11 Section
    /// 8.5.1 gives as an example).
    pub max_wait: Nanos,
    /// Backoff for failures: alone when a 429 / 503 carries no timing, and on top of `Retry-After`
    /// after a throttled response, so clients denied together do not all come back at the same
    /// instant (draft-11 Section 8.5).
    pub backoff: Backoff,
    /// Extra uniform jitter in `[0, window_jitter]` ns added when waiting for an effective window to
    /// end, for the same reason. Waiting longer than a hint says is always safe.
    pub window_jitter: Nanos,
}

impl Default for PacerConfig {
    fn default() -> Self {
        PacerConfig {
            profile: Profile::Draft11,
            max_wait: 600 * NANOS_PER_SECOND,
            backoff: Backoff::default(),
            window_jitter: 50_000_000, // 50 ms
        }
    }
}

/// What one response told the pacer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The response was throttled (429) or the service was unavailable (503).
    pub throttled: bool,
    /// `Retry-After`, in ns from the observation, when present and understood.
    pub retry_after: Option<Nanos>,
    /// The fields were present but ignored because the response came from a cache (`Age > 0`).
    pub ignored_stale: bool,
    /// The service limit the pacer now paces on: the binding constraint for a cost of 1
    /// ([`Pacer::binding_for`]), or with no constraint (after a `Retry-After`) the fresh limit that
    /// runs out first ([`binding_limit`]).
    pub binding: Option<ServiceLimit>,
    /// The earliest time the pacer will now allow the next request.
    pub next_at: Nanos,
}

/// What one service limit of the last fresh response still allows: no more than `budget` quota
/// units before `window_end` (draft-11 Section 7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint {
    /// The item as received.
    pub limit: ServiceLimit,
    /// Quota units this item still allows before `window_end`: its `r`, less what was sent since.
    pub budget: u64,
    /// When its effective window ends (observation time + `t`, capped, plus jitter); `None` when the
    /// item has no `t`.
    pub window_end: Option<Nanos>,
    /// `(q, w)` of its policy (the slowest, should several match its name and `pk`), for the wait
    /// beyond the window when a cost exceeds `r + 1`.
    pub policy_rate: Option<(u64, u64)>,
}

impl Constraint {
    /// The earliest time (>= `now`) at which this item allows a request costing `cost`; no wait is
    /// longer than `max_wait` past its window's end (or past `now` without a window).
    pub fn ready_for(&self, cost: u64, now: Nanos, max_wait: Nanos) -> Nanos {
        if self.budget >= cost {
            return now;
        }
        match self.window_end {
            Some(end) => {
                // At `end`, at least budget + 1 units exist; each further unit takes at most w / q
                // seconds, as the policy rate q / w never exceeds the true rate.
                let short = cost - self.budget - 1;
                let extra = match self.policy_rate {
                    Some((q, w)) if q > 0 && short > 0 => {
                        let ns = (short as u128 * w as u128 * NANOS_PER_SECOND as u128)
                            .div_ceil(q as u128);
                        u64::try_from(ns).unwrap_or(u64::MAX)
                    }
                    _ => 0,
                };
                now.max(end.saturating_add(extra.min(max_wait)))
            }
            // Exhausted and no window: wait the cap; a new response will tell more.
            None => now.saturating_add(max_wait),
        }
    }
}

/// The pacing state for one server (or one partition).
#[derive(Clone, Debug)]
pub struct Pacer {
    config: PacerConfig,
    rng: ChaCha8Rng,
    /// No request before this time (Retry-After, backoff, or an exhausted window).
    blocked_until: Nanos,
    /// One per item of the last fresh response that still binds; a request waits for all of them.
    constraints: Vec<Constraint>,
    failures: u32,
    limits: Vec<ServiceLimit>,
    policies: Vec<QuotaPolicy>,
}

/// Parses `Retry-After` into ns from the response: delay-seconds, or an HTTP-date minus the
/// response's `Date` (RFC 9110 Section 10.2.3). `None` if absent, malformed, or a date without `Date`.
pub fn retry_after_nanos(headers: &HeaderMap) -> Option<Nanos> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = value.parse().unwrap_or(u64::MAX);
        return Some(secs.saturating_mul(NANOS_PER_SECOND));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let date = httpdate::parse_http_date(headers.get(DATE)?.to_str().ok()?.trim()).ok()?;
    let delta = at.duration_since(date).unwrap_or_default();
    Some(u64::try_from(delta.as_nanos()).unwrap_or(u64::MAX))
}

/// `Age` in seconds, if present and valid (RFC 9111 Section 5.1: delta-seconds).
pub fn age_secs(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(AGE)?.to_str().ok()?.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(value.parse().unwrap_or(u64::MAX))
}

impl Pacer {
    /// A pacer with `config`, its jitter drawn from a ChaCha8 stream seeded with `seed`.
    pub fn new(config: PacerConfig, seed: u64) -> Pacer {
        Pacer {
            config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            blocked_until: 0,
            constraints: Vec::new(),
            failures: 0,
            limits: Vec::new(),
            policies: Vec::new(),
        }
    }

    /// Every service limit of the last fresh response (for observability).
    pub fn limits(&self) -> &[ServiceLimit] {
        &self.limits
    }

    /// Every policy of the last fresh response (for observability).
    pub fn policies(&self) -> &[QuotaPolicy] {
        &self.policies
    }

    /// What each item of the last fresh response still allows, in wire order; an item leaves when
    /// its window has passed at a send, and all leave on a `Retry-After`.
    pub fn constraints(&self) -> &[Constraint] {
        &self.constraints
    }

    /// The item a request costing `cost` waits for at `now`: the constraint that allows it last,
    /// and among equals the one that runs out first ([`binding_limit`]'s order). `None` without
    /// constraints.
    pub fn binding_for(&self, cost: u64, now: Nanos) -> Option<&ServiceLimit> {
        let max_wait = self.config.max_wait;
        self.constraints
            .iter()
            .enumerate()
            .max_by(|(i, a), (j, b)| {
                let (ra, rb) = (
                    a.ready_for(cost, now, max_wait),
                    b.ready_for(cost, now, max_wait),
                );
                // The later wins; then the one that runs out first; then the earlier item.
                ra.cmp(&rb)
                    .then_with(|| runs_out_first(&b.limit, &a.limit))
                    .then_with(|| j.cmp(i))
            })
            .map(|(_, c)| &c.limit)
    }

    /// Consecutive throttled responses so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    fn capped(&self, wait: Nanos) -> Nanos {
        wait.min(self.config.max_wait)
    }

    /// Learns from a response received at `now`.
    pub fn observe(&mut self, now: Nanos, status: StatusCode, headers: &HeaderMap) -> Observation {
        let profile = self.config.profile;
        let stale = age_secs(headers).is_some_and(|a| a > 0);
        let retry_after = retry_after_nanos(headers);
        let (limit, policy) = if stale {
            (None, None)
        } else {
            (
                RateLimit::from_headers(profile, headers),
                RateLimitPolicy::from_headers(profile, headers),
            )
        };
        let had_fields = headers.contains_key(profile.limit_field())
            || headers.contains_key(profile.policy_field());
        if let Some(l) = &limit {
            self.limits = l.limits.clone();
        }
        if let Some(p) = &policy {
            self.policies = p.policies.clone();
        }
        let binding = limit
            .as_ref()
            .and_then(|l| binding_limit(&l.limits))
            .cloned();
        let throttled =
            status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE;
        if throttled {
            self.failures = self.failures.saturating_add(1);
        } else {
            self.failures = 0;
        }

        // Fresh timing information, in precedence order.
        if let Some(ra) = retry_after {
            // Retry-After wins; the effective window may be ignored (Section 7).
            let jitter = if throttled {
                self.config.backoff.delay(self.failures, &mut self.rng)
            } else {
                0
            };
            self.blocked_until = now.saturating_add(self.capped(ra)).saturating_add(jitter);
            self.constraints.clear();
        } else if let (Some(l), Some(b)) = (&limit, &binding) {
            // One draw for the whole response: every window it reports ends later by the same jitter.
            let jitter = uniform_inclusive(&mut self.rng, self.config.window_jitter);
            self.constraints = l
                .limits
                .iter()
                .map(|item| Constraint {
                    limit: item.clone(),
                    budget: item.remaining,
                    window_end: item.reset.map(|t| {
                        now.saturating_add(self.capped(t.saturating_mul(NANOS_PER_SECOND)))
                            .saturating_add(jitter)
                    }),
                    policy_rate: policy_rate(item, policy.as_ref()),
                })
                .collect();
            // An earlier block (Retry-After, backoff) stands: with requests in flight, responses
            // can arrive out of order, and waiting longer is always safe.
            if throttled && b.remaining == 0 && b.reset.is_none() {
                // Throttled with no timing at all: back off.
                let d = self.config.backoff.delay(self.failures, &mut self.rng);
                self.blocked_until = now.saturating_add(d);
            }
        } else if throttled {
            let d = self.config.backoff.delay(self.failures, &mut self.rng);
            self.blocked_until = now.saturating_add(d);
            self.constraints.clear();
        } else {
            self.constraints.clear();
        }
        if throttled && retry_after.is_none() && binding.as_ref().is_some_and(|b| b.remaining > 0) {
            // A 429 although every item said there was quota: the hint was not a promise. Trust the
            // status, not the number, for the item that runs out first.
            let first = limit.as_ref().and_then(|l| binding_index(&l.limits));
            let windowless = match first.and_then(|i| self.constraints.get_mut(i)) {
                Some(c) => {
                    c.budget = 0;
                    c.window_end.is_none()
                }
                None => true,
            };
            if windowless {
                let d = self.config.backoff.delay(self.failures, &mut self.rng);
                self.blocked_until = now.saturating_add(d);
            }
        }
        let next_at = self.ready_for(1, now);
        let binding = self.binding_for(1, now).cloned().or(binding);
        Observation {
            throttled,
            retry_after,
            ignored_stale: stale && had_fields,
            binding,
            next_at,
        }
    }

    /// The earliest time (>= `now`) at which a request costing `cost` quota units may be sent: the
    /// latest of any block and of every constraint's own time ([`Constraint::ready_for`]).
    ///
    /// When `cost` exceeds an item's `r + 1`, the wait beyond its `t` is derived from its policy's
    /// `q / w`; without a matching policy it is unknown and not added, and the next response
    /// corrects the estimate.
    pub fn ready_for(&self, cost: u64, now: Nanos) -> Nanos {
        let max_wait = self.config.max_wait;
        self.constraints
            .iter()
            .map(|c| c.ready_for(cost, now, max_wait))
            .fold(self.blocked_until.max(now), Nanos::max)
    }

    /// Records that a request costing `cost` was sent at `now`: it spends from every item.
    pub fn record_send(&mut self, cost: u64, now: Nanos) {
        // An item whose window passed is stale: the next response will bring a new one.
        self.constraints
            .retain(|c| c.window_end.is_none_or(|end| now < end));
        for c in &mut self.constraints {
            c.budget = c.budget.saturating_sub(cost);
        }
    }
}

/// `(q, w)` of the policy `item` reports on (same name and `pk`, with a window); the slowest
/// `q / w` should several match, as it makes the longest wait.
fn policy_rate(item: &ServiceLimit, policy: Option<&RateLimitPolicy>) -> Option<(u64, u64)> {
    policy?
        .policies
        .iter()
        .filter(|q| q.name == item.name && q.partition_key == item.partition_key)
        .filter_map(|q| q.window.map(|w| (q.quota, w)))
        // q1 / w1 < q2 / w2 exactly when q1 * w2 < q2 * w1.
        .min_by(|(q1, w1), (q2, w2)| (*q1 as u128 * *w2 as u128).cmp(&(*q2 as u128 * *w1 as u128)))
}

/// `Less` when `a` runs out before `b`: the lower `r`, and among equals the longer `t` (no `t`
/// counts as longest).
fn runs_out_first(a: &ServiceLimit, b: &ServiceLimit) -> std::cmp::Ordering {
    a.remaining.cmp(&b.remaining).then_with(|| {
        let ta = a.reset.unwrap_or(u64::MAX);
        let tb = b.reset.unwrap_or(u64::MAX);
        tb.cmp(&ta)
    })
}

/// The position of [`binding_limit`]'s answer.
fn binding_index(limits: &[ServiceLimit]) -> Option<usize> {
    (0..limits.len()).min_by(|&a, &b| runs_out_first(&limits[a], &limits[b]))
}

/// The limit that runs out first: the lowest `r`, and among equals the longest `t` (no `t` counts
/// as longest).
pub fn binding_limit(limits: &[ServiceLimit]) -> Option<&ServiceLimit> {
    binding_index(limits).map(|i| &limits[i])
}

/// Which requests may be retried, how often and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first one included.
    pub max_attempts: u32,
    /// No attempt starts later than this long after the first one, in ns.
    pub deadline: Nanos,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            deadline: 60 * NANOS_PER_SECOND,
        }
    }
}

/// Idempotent methods (RFC 9110 Section 9.2.2), or any request carrying an `Idempotency-Key`.
pub fn is_retryable(method: &Method, headers: &HeaderMap) -> bool {
    let idempotent = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    );
    idempotent || headers.contains_key("idempotency-key")
}

impl RetryPolicy {
    /// Whether attempt number `next_attempt` (1-based) may start at `at`, for a request first sent
    /// at `started`.
    pub fn allows(&self, next_attempt: u32, started: Nanos, at: Nanos) -> bool {
        next_attempt <= self.max_attempts && at.saturating_sub(started) <= self.deadline
    }
}

/// Why [`send_paced`] gave up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PacedError<E> {
    /// The transport failed.
    #[error("transport error: {0}")]
    Transport(E),
    /// The request is not idempotent and carries no `Idempotency-Key`, and was throttled.
    #[error("throttled, and the request may not be retried")]
    NotRetryable,
    /// The attempt budget or the deadline ran out; the last throttled status is included.
    #[error("gave up after {attempts} attempts (last status {last_status})")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last status seen.
        last_status: StatusCode,
    },
}

/// What [`send_paced`] needs to know about the request to decide on retries.
#[derive(Clone, Copy, Debug)]
pub struct RequestInfo<'a> {
    /// The method (idempotent methods may be retried).
    pub method: &'a Method,
    /// The request's headers (an `Idempotency-Key` makes any method retryable).
    pub headers: &'a HeaderMap,
    /// Its cost in quota units (1 for a request-counting policy).
    pub cost: u64,
}

/// Sends a request through `pacer`, retrying throttled responses while `policy` allows.
///
/// Runtime-agnostic: `now` reads the caller's monotonic clock in ns, `sleep` waits, `send` performs
/// one attempt and returns the status, headers and whatever else the caller wants back.
pub async fn send_paced<T, E, Send, SendFut, Sleep, SleepFut>(
    pacer: &mut Pacer,
    policy: RetryPolicy,
    request: RequestInfo<'_>,
    now: impl Fn() -> Nanos,
    mut sleep: Sleep,
    mut send: Send,
) -> Result<(StatusCode, HeaderMap, T), PacedError<E>>
where
    Send: FnMut() -> SendFut,
    SendFut: Future<Output = Result<(StatusCode, HeaderMap, T), E>>,
    Sleep: FnMut(Nanos) -> SleepFut,
    SleepFut: Future<Output = ()>,
{
    let started = now();
    let retryable = is_retryable(request.method, request.headers);
    let cost = request.cost;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let t = now();
        let at = pacer.ready_for(cost, t);
        if attempt > 1 && !policy.allows(attempt, started, at) {
            return Err(PacedError::GaveUp {
                attempts: attempt - 1,
                last_status: StatusCode::TOO_MANY_REQUESTS,
            });
        }
        if at > t {
            sleep(at - t).await;
        }
        pacer.record_send(cost, now());
        let (status, headers, body) = send().await.map_err(PacedError::Transport)?;
        let obs = pacer.observe(now(), status, &headers);
        if !obs.throttled {
            return Ok((status, headers, body));
        }
        if !retryable {
            return Err(PacedError::NotRetryable);
        }
        let next = pacer.ready_for(cost, now());
        if !policy.allows(attempt + 1, started, next) {
            return Err(PacedError::GaveUp {
                attempts: attempt,
                last_status: status,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const S: Nanos = NANOS_PER_SECOND;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn backoff_is_capped_and_jittered_deterministically() {
        let b = Backoff {
            base: 100,
            cap: 1000,
        };
        assert_eq!(b.ceiling(1), 100);
        assert_eq!(b.ceiling(4), 800);
        assert_eq!(b.ceiling(5), 1000);
        assert_eq!(b.ceiling(200), 1000);
        let mut r1 = ChaCha8Rng::seed_from_u64(7);
        let mut r2 = ChaCha8Rng::seed_from_u64(7);
        let d1: Vec<_> = (1..20).map(|a| b.delay(a, &mut r1)).collect();
        let d2: Vec<_> = (1..20).map(|a| b.delay(a, &mut r2)).collect();
        assert_eq!(d1, d2);
        assert!(d1.iter().all(|d| *d <= 1000));
        assert!(d1.iter().any(|d| *d != d1[0]), "jitter varies");
    }

    #[test]
    fn paces_on_the_limit_that_runs_out_first() {
        let config = PacerConfig {
            window_jitter: 0,
            ..PacerConfig::default()
        };
        let mut p = Pacer::new(config, 1);
        let obs = p.observe(
            0,
            StatusCode::OK,
            &h(&[("ratelimit", r#""hour";r=100;t=3600, "sec";r=0;t=2"#)]),
        );
        assert_eq!(obs.binding.unwrap().name.as_str(), "sec");
        assert_eq!(p.limits().len(), 2);
        assert_eq!(p.ready_for(1, 0), 2 * S);
    }

    #[test]
    fn uniform_inclusive_covers_small_ranges() {
        let mut r = ChaCha8Rng::seed_from_u64(3);
        let mut seen = [false; 3];
        for _ in 0..100 {
            seen[uniform_inclusive(&mut r, 2) as usize] = true;
        }
        assert_eq!(seen, [true; 3]);
        assert_eq!(uniform_inclusive(&mut r, 0), 0);
    }
}
