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
//! - with several service limits, it paces on the one that runs out first (lowest `r`, then longest
//!   `t`) and keeps all of them, and the policies, for observability ([`Pacer::limits`]);
//! - hints are not promises (Section 8.3): a 429 after a healthy hint is handled like any 429;
//! - every wait is capped at [`PacerConfig::max_wait`], so a hostile or broken `t` / `Retry-After` of
//!   a million seconds cannot park the client forever (Section 8.5.1);
//! - a 429 or 503 without usable timing falls back to capped exponential backoff with full jitter
//!   from a seedable ChaCha RNG ([`Backoff`]).
//!
//! [`RetryPolicy`] says which requests may be retried at all: idempotent methods, or any request that
//! carries an `Idempotency-Key`; and never past a deadline or an attempt budget.
//!
//! Why a single sequential pacing client never sees a 429 from the exact limiter: a response with
//! `r >= cost` means the balance was at least `cost` when the server answered, and with no other
//! client it can only have grown; with `r < cost` the client waits `t` (at which point at least `r + 1`
//! whole tokens exist) plus `(cost - r - 1) * w / q` seconds, and `q / w` never exceeds the true rate
//! because `w` is rounded up. The simulation in [`crate::sim`] checks exactly this.

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
    /// The service limit the pacer now paces on.
    pub binding: Option<ServiceLimit>,
    /// The earliest time the pacer will now allow the next request.
    pub next_at: Nanos,
}

/// The pacing state for one server (or one partition).
#[derive(Clone, Debug)]
pub struct Pacer {
    config: PacerConfig,
    rng: ChaCha8Rng,
    /// No request before this time (Retry-After, backoff, or an exhausted window).
    blocked_until: Nanos,
    /// Quota units the binding limit still allows before `window_end`, if known.
    budget: Option<u64>,
    /// When the binding limit's effective window ends (observation time + `t`).
    window_end: Option<Nanos>,
    /// `(q, w)` of the binding policy, for the extra wait when a cost exceeds `r + 1`.
    policy_rate: Option<(u64, u64)>,
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
            budget: None,
            window_end: None,
            policy_rate: None,
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
        self.policy_rate = binding.as_ref().and_then(|b| {
            policy.as_ref().and_then(|p| {
                p.policies
                    .iter()
                    .find(|q| q.name == b.name && q.partition_key == b.partition_key)
                    .and_then(|q| q.window.map(|w| (q.quota, w)))
            })
        });
        if let Some(ra) = retry_after {
            // Retry-After wins; the effective window may be ignored (Section 7).
            let jitter = if throttled {
                self.config.backoff.delay(self.failures, &mut self.rng)
            } else {
                0
            };
            self.blocked_until = now.saturating_add(self.capped(ra)).saturating_add(jitter);
            self.window_end = None;
            self.budget = None;
        } else if let Some(b) = &binding {
            self.budget = Some(b.remaining);
            let jitter = uniform_inclusive(&mut self.rng, self.config.window_jitter);
            self.window_end = b.reset.map(|t| {
                now.saturating_add(self.capped(t.saturating_mul(NANOS_PER_SECOND)))
                    .saturating_add(jitter)
            });
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
            self.budget = None;
            self.window_end = None;
        } else {
            self.budget = None;
            self.window_end = None;
        }
        if throttled && retry_after.is_none() && binding.as_ref().is_some_and(|b| b.remaining > 0) {
            // A 429 although the hint said there was quota: the hint was not a promise. Trust the
            // status, not the number.
            self.budget = Some(0);
            if self.window_end.is_none() {
                let d = self.config.backoff.delay(self.failures, &mut self.rng);
                self.blocked_until = now.saturating_add(d);
            }
        }
        Observation {
            throttled,
            retry_after,
            ignored_stale: stale && had_fields,
            binding,
            next_at: self.ready_for(1, now),
        }
    }

    /// The earliest time (>= `now`) at which a request costing `cost` quota units may be sent.
    ///
    /// When `cost` exceeds `r + 1`, the wait beyond `t` is derived from the policy's `q / w`; without
    /// a matching policy it is unknown and not added, and the next response corrects the estimate.
    pub fn ready_for(&self, cost: u64, now: Nanos) -> Nanos {
        let mut at = self.blocked_until.max(now);
        if let Some(budget) = self.budget
            && budget < cost
        {
            match self.window_end {
                Some(end) => {
                    // At `end`, at least budget + 1 units exist; each further unit takes at most
                    // w / q seconds, as the policy rate q / w never exceeds the true rate.
                    let short = cost - budget - 1;
                    let extra = match self.policy_rate {
                        Some((q, w)) if q > 0 && short > 0 => {
                            let ns = (short as u128 * w as u128 * NANOS_PER_SECOND as u128)
                                .div_ceil(q as u128);
                            u64::try_from(ns).unwrap_or(u64::MAX)
                        }
                        _ => 0,
                    };
                    at = at.max(end.saturating_add(self.capped(extra)));
                }
                None => {
                    // Exhausted and no window: wait the cap; a new response will tell more.
                    at = at.max(now.saturating_add(self.config.max_wait));
                }
            }
        }
        at
    }

    /// Records that a request costing `cost` was sent at `now`.
    pub fn record_send(&mut self, cost: u64, now: Nanos) {
        if let Some(end) = self.window_end
            && now >= end
        {
            // The window passed: the old budget is stale, the next response will bring a new one.
            self.budget = None;
            self.window_end = None;
        }
        if let Some(b) = self.budget.as_mut() {
            *b = b.saturating_sub(cost);
        }
    }
}

/// The limit that runs out first: the lowest `r`, and among equals the longest `t` (no `t` counts
/// as longest).
pub fn binding_limit(limits: &[ServiceLimit]) -> Option<&ServiceLimit> {
    limits.iter().min_by(|a, b| {
        a.remaining.cmp(&b.remaining).then_with(|| {
            let ta = a.reset.unwrap_or(u64::MAX);
            let tb = b.reset.unwrap_or(u64::MAX);
            tb.cmp(&ta)
        })
    })
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
