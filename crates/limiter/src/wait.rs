//! Waiting until allowed: pacing a caller by the exact retry-after.
//!
//! **What it owns:** [`Pacing`] (how a waiting acquire behaves: an optional deadline and an optional
//! seeded jitter), [`WaitError`], the [`Verdict`] trait every front end's decision implements, and
//! the one retry rule ([`Waiter`]), which the blocking loop ([`blocking`]) and the async loop
//! ([`pace`], and `until_ready` on tokio's timer, feature `tokio`) both follow, whatever limiter they
//! drive: the in-memory ones here, the Redis and PostgreSQL limiters in their crates.
//!
//! **What it promises:**
//! - an attempt is an ordinary acquire: a denial consumes nothing, so waiting holds no reservation and
//!   takes nothing from anyone until the attempt that is allowed;
//! - after a denial it waits exactly the reported `retry_after` (plus the jitter, if any) and tries
//!   again. Another caller may take the tokens meanwhile, and then it waits again: there is no queue and
//!   **no fairness guarantee** among waiters of one key (the first to retry after a refill wins; the
//!   jitter spreads retries that would otherwise land on the same instant);
//! - it never waits forever: a request no refill can help (a cost above capacity is an error already;
//!   a rate of zero, or a wait beyond the clock, is [`Wait::Never`]) is [`WaitError::Never`] at once,
//!   and with a deadline, a wait that would end after it is [`WaitError::Deadline`] at once, holding
//!   the denial (nothing is slept in vain);
//! - an invalid request ([`crate::AcquireError`], or a store's error) is returned as it is, at once;
//! - the async form is cancellation safe for an in-memory limiter: it awaits only while sleeping, and
//!   an attempt is synchronous, so dropping the future loses nothing and charges nothing. A front end
//!   whose attempt is itself a round trip (Redis) can be dropped during the attempt: the store may have
//!   charged an admission the caller never sees (tokens lost to that caller, never an over-admission);
//!   such a front end says so where it offers the wait.
//!
//! The time the waiter sleeps is real (`std::thread::sleep`, `tokio::time::sleep`), and the waits are in
//! the limiter's clock: the limiter's clock must move with the sleeper's. [`crate::MonotonicClock`] does
//! with the thread's sleep, and `TokioClock` (feature `tokio`) with tokio's, a paused test clock
//! included. With a [`crate::ManualClock`], drive [`blocking`] with a sleep that moves the clock.

use std::time::Duration;

use crate::{Decision, Decisions, Nanos, Wait};

/// What a waiting acquire needs of a decision.
pub trait Verdict {
    /// True if the request was admitted.
    fn is_allowed(&self) -> bool;
    /// For a denial, how long until the same request would be allowed with no other traffic.
    fn retry_after(&self) -> Option<Wait>;
}

impl Verdict for Decision {
    fn is_allowed(&self) -> bool {
        Decision::is_allowed(self)
    }

    fn retry_after(&self) -> Option<Wait> {
        Decision::retry_after(self)
    }
}

impl Verdict for Decisions {
    fn is_allowed(&self) -> bool {
        Decisions::is_allowed(self)
    }

    fn retry_after(&self) -> Option<Wait> {
        Decisions::retry_after(self)
    }
}

/// A jitter added to every wait: uniform in `0..=max` nanoseconds, from a seeded generator, so a
/// test replays the same waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jitter {
    /// The largest extra wait.
    pub max: Duration,
    /// The generator's seed.
    pub seed: u64,
}

/// How a waiting acquire behaves. The default waits as long as needed, with no jitter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacing {
    deadline: Option<Duration>,
    jitter: Option<Jitter>,
}

impl Pacing {
    /// Waits as long as needed, with no jitter.
    pub fn new() -> Pacing {
        Pacing::default()
    }

    /// Gives up, with the denial, when the total wait would pass `max_wait` from the first attempt
    /// (counted as the sum of the waits, in the limiter's time).
    pub fn deadline(mut self, max_wait: Duration) -> Pacing {
        self.deadline = Some(max_wait);
        self
    }

    /// Adds a seeded uniform jitter of up to `max` to every wait (not counted against the
    /// deadline's check of the exact wait, but counted once slept).
    pub fn jitter(mut self, max: Duration, seed: u64) -> Pacing {
        self.jitter = Some(Jitter { max, seed });
        self
    }
}

/// Why a waiting acquire returned without an admission.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitError<D, E> {
    /// The request is invalid (or the store failed): the limiter's own error, returned at once.
    #[error(transparent)]
    Acquire(E),
    /// No refill can ever allow this request (a rate of zero, or a wait beyond the clock): the denial.
    #[error("the request can never be allowed: no refill reaches its cost")]
    Never(D),
    /// The next wait would end after the deadline: the denial, and the time already waited.
    #[error("the request would be allowed only after the deadline (waited {waited:?} so far)")]
    Deadline {
        /// The last denial.
        denial: D,
        /// The time slept before giving up.
        waited: Duration,
    },
}

/// The retry rule, shared by every loop: after each attempt, admit, fail, or sleep how long.
#[derive(Clone, Debug)]
pub struct Waiter {
    pacing: Pacing,
    waited: Duration,
    rng: Option<fastrand::Rng>,
}

/// What to do after one attempt.
#[derive(Debug)]
pub enum Next<D, E> {
    /// Done: the admission, or why there is none.
    Return(Result<D, WaitError<D, E>>),
    /// Sleep this long, then attempt again.
    Sleep(Duration),
}

impl Waiter {
    /// A waiter that has not waited yet.
    pub fn new(pacing: Pacing) -> Waiter {
        Waiter {
            pacing,
            waited: Duration::ZERO,
            rng: pacing
                .jitter
                .map(|jitter| fastrand::Rng::with_seed(jitter.seed)),
        }
    }

    /// The time slept so far.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// What follows `attempt`: the admission, an error, or a sleep (counted as slept).
    pub fn next<D: Verdict, E>(&mut self, attempt: Result<D, E>) -> Next<D, E> {
        let decision = match attempt {
            Ok(decision) => decision,
            Err(error) => return Next::Return(Err(WaitError::Acquire(error))),
        };
        if decision.is_allowed() {
            return Next::Return(Ok(decision));
        }
        let exact: Nanos = match decision.retry_after() {
            Some(Wait::After(nanos)) => nanos,
            // A denial always has a wait; `None` would be a front end's bug: treat it as never.
            Some(Wait::Never) | None => return Next::Return(Err(WaitError::Never(decision))),
        };
        let exact = Duration::from_nanos(exact);
        if let Some(max_wait) = self.pacing.deadline
            && self.waited.saturating_add(exact) > max_wait
        {
            let waited = self.waited;
            return Next::Return(Err(WaitError::Deadline {
                denial: decision,
                waited,
            }));
        }
        let extra = match (self.pacing.jitter, &mut self.rng) {
            (Some(jitter), Some(rng)) => {
                let max = u64::try_from(jitter.max.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rng.u64(0..=max))
            }
            _ => Duration::ZERO,
        };
        let sleep = exact.saturating_add(extra);
        self.waited = self.waited.saturating_add(sleep);
        Next::Sleep(sleep)
    }
}

/// Attempts until allowed, sleeping with `sleep` between attempts by the retry rule.
///
/// The building block of every blocking form; pass `std::thread::sleep`, or in a test a sleep that
/// moves a [`crate::ManualClock`].
pub fn blocking<D: Verdict, E>(
    pacing: Pacing,
    mut attempt: impl FnMut() -> Result<D, E>,
    mut sleep: impl FnMut(Duration),
) -> Result<D, WaitError<D, E>> {
    let mut waiter = Waiter::new(pacing);
    loop {
        match waiter.next(attempt()) {
            Next::Return(result) => return result,
            Next::Sleep(duration) => sleep(duration),
        }
    }
}

/// Attempts until allowed, awaiting `sleep` between attempts by the retry rule: the building block of
/// every async form, whatever its timer. The shared-state front ends' `until_ready` pass tokio's sleep;
/// a caller with an injected clock passes a sleep that moves it (and attempts at that clock's time).
pub async fn pace<D: Verdict, E, F, S>(
    pacing: Pacing,
    mut attempt: impl FnMut() -> F,
    mut sleep: impl FnMut(Duration) -> S,
) -> Result<D, WaitError<D, E>>
where
    F: std::future::Future<Output = Result<D, E>>,
    S: std::future::Future<Output = ()>,
{
    let mut waiter = Waiter::new(pacing);
    loop {
        match waiter.next(attempt().await) {
            Next::Return(result) => return result,
            Next::Sleep(duration) => sleep(duration).await,
        }
    }
}

/// Attempts until allowed, sleeping on tokio's timer between attempts by the retry rule. Cancellation
/// safe as long as `attempt` is (see the module doc).
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub async fn until_ready<D: Verdict, E, F>(
    pacing: Pacing,
    attempt: impl FnMut() -> F,
) -> Result<D, WaitError<D, E>>
where
    F: std::future::Future<Output = Result<D, E>>,
{
    pace(pacing, attempt, tokio::time::sleep).await
}

/// A [`crate::Clock`] that reads tokio's clock (nanoseconds since this clock was made), so that a
/// limiter's time moves with `tokio::time::sleep`, a paused test clock included.
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock reading 0 now.
    pub fn new() -> TokioClock {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> TokioClock {
        TokioClock::new()
    }
}

#[cfg(feature = "tokio")]
impl crate::Clock for TokioClock {
    fn now(&self) -> Nanos {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl<C: crate::Clock> crate::DirectLimiter<C> {
    /// Takes `cost` tokens, sleeping the thread by the retry rule until allowed (see [`crate::wait`]).
    /// The clock must move with the thread's sleep ([`crate::MonotonicClock`], the default).
    pub fn acquire_blocking(
        &self,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Decision, WaitError<Decision, crate::AcquireError>> {
        blocking(pacing, || self.acquire(cost), std::thread::sleep)
    }

    /// Takes `cost` tokens, sleeping on tokio's timer by the retry rule until allowed. Cancellation
    /// safe: dropping the future charges nothing. The clock must move with tokio's ([`TokioClock`]
    /// under a paused test clock; [`crate::MonotonicClock`] otherwise).
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready(
        &self,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Decision, WaitError<Decision, crate::AcquireError>> {
        until_ready(pacing, || std::future::ready(self.acquire(cost))).await
    }
}

impl<K, C> crate::Limiter<K, C>
where
    K: std::hash::Hash + Eq + Clone,
    C: crate::Clock,
{
    /// Takes `cost` tokens for `key`, sleeping the thread by the retry rule until allowed (see
    /// [`crate::wait`]). The clock must move with the thread's sleep.
    pub fn acquire_blocking(
        &self,
        key: &K,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Decision, WaitError<Decision, crate::AcquireError>> {
        blocking(pacing, || self.acquire(key, cost), std::thread::sleep)
    }

    /// Takes `cost` tokens for `key`, sleeping on tokio's timer by the retry rule until allowed.
    /// Cancellation safe: dropping the future charges nothing.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready(
        &self,
        key: &K,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Decision, WaitError<Decision, crate::AcquireError>> {
        until_ready(pacing, || std::future::ready(self.acquire(key, cost))).await
    }

    /// [`crate::Limiter::until_ready`] for every bandwidth of a key's set: waits the largest
    /// retry-after, after which every bandwidth covers the cost.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready_set(
        &self,
        key: &K,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Decisions, WaitError<Decisions, crate::AcquireError>> {
        let attempt = || {
            let result = self.acquire_set_with(key, crate::Request::cost(cost));
            std::future::ready(result.map(|acquired| acquired.decision))
        };
        until_ready(pacing, attempt).await
    }
}
