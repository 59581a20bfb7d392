//! The in-memory [`Limiter`] as a source: it decides at once (a ready future) and never fails for a
//! store reason.
//!
//! Promises: a key of one unnamed bandwidth takes the limiter's one-bandwidth path, exactly as
//! [`DecisionSource::decide`]; a key of several is labelled with the names of the set its decision
//! was made under, or, if a concurrent reconfiguration changed it, advertised as its binding part
//! alone ([`decide_set_at`]).

use std::future::Future;
use std::hash::Hash;

use bucketproof_limiter::{Clock, Decisions, Limiter, Nanos, Request, RequestId, Settle, Settled};

use super::error::{SettleFailure, SourceError};
use super::traits::{DecisionSource, SettleSource};
use crate::outcome::Outcome;
use crate::set::SetOutcome;

impl<K, C> DecisionSource<K> for Limiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    C: Clock,
    Limiter<K, C>: Send + Sync,
{
    fn decide<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<Outcome, SourceError>> + Send + 'a {
        std::future::ready(
            self.acquire(key, cost)
                .map(|decision| Outcome::of(decision, cost, false))
                .map_err(SourceError::from),
        )
    }

    fn decide_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
        std::future::ready(decide_set_at(self, key, cost, self.clock().now()))
    }
}

impl<K, C> SettleSource<K> for Limiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    C: Clock,
    Limiter<K, C>: Send + Sync,
{
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
        let request = Request::cost(cost).at(self.clock().now()).id(request_id);
        std::future::ready(decide_request(self, key, request))
    }

    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> impl Future<Output = Result<Settled<Decisions>, SettleFailure>> + Send + 'a {
        std::future::ready(Limiter::settle_set(self, key, settle).map_err(SettleFailure::from))
    }
}

/// The in-memory limiter's answer to [`DecisionSource::decide_set`] at `now` (the simulation in
/// [`crate::sim`] calls it at virtual time).
///
/// A key of one unnamed bandwidth takes the one-bandwidth path ([`Limiter::acquire_with`]), as
/// [`DecisionSource::decide`] does. Any other key takes the set path
/// ([`Limiter::acquire_set_with`]) and is labelled with the names of its set, read beside the
/// decision. The limiter does not hand out the set a decision was made under, so the names are
/// checked against the decision's own configs ([`SetOutcome::of_set`]); when a concurrent
/// reconfiguration changed them, the set is read again, and if that does not match either, the
/// response carries the decision's binding part alone under the layer's policy name: the one
/// number the limiter itself reports for such a key ([`bucketproof_limiter::Decisions::binding`]).
/// A reconfiguration that only renames bandwidths, racing with the decision, can label one
/// response's numbers with the names of the set before or after it; the numbers are the decision's.
pub fn decide_set_at<K, C>(
    limiter: &Limiter<K, C>,
    key: &K,
    cost: u64,
    now: Nanos,
) -> Result<SetOutcome, SourceError>
where
    K: Hash + Eq + Clone,
    C: Clock,
{
    decide_request(limiter, key, Request::cost(cost).at(now))
}

/// [`decide_set_at`] for a whole [`Request`]: with a request id, the decision is recorded under it
/// ([`SettleSource::reserve_set`]).
fn decide_request<K, C>(
    limiter: &Limiter<K, C>,
    key: &K,
    request: Request,
) -> Result<SetOutcome, SourceError>
where
    K: Hash + Eq + Clone,
    C: Clock,
{
    let cost = request.cost;
    let set = limiter.bandwidths_for(key);
    if set.single().is_some() {
        let decision = limiter.acquire_with(key, request)?.decision;
        return Ok(SetOutcome::single(Outcome::of(decision, cost, false)));
    }
    let decisions = limiter.acquire_set_with(key, request)?.decision;
    if let Some(outcome) = SetOutcome::of_set(&set, &decisions, cost, false) {
        return Ok(outcome);
    }
    let after = limiter.bandwidths_for(key);
    Ok(SetOutcome::of_set(&after, &decisions, cost, false)
        .unwrap_or_else(|| SetOutcome::single(Outcome::of(*decisions.binding(), cost, false))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::AdvertiseOptions;
    use bucketproof_limiter::{Config, ManualClock, Rate, Wait};

    fn limiter(capacity: u64, rate: Rate) -> Limiter<&'static str, ManualClock> {
        Limiter::builder(Config::new(capacity, rate).unwrap())
            .clock(ManualClock::new(1_000_000_000))
            .build()
    }

    #[tokio::test]
    async fn allowed_decision_advertises_floor_and_next_token() {
        let l = limiter(10, Rate::per_second(2));
        let o = l.decide(&"k", 3).await.unwrap();
        assert!(o.decision.is_allowed());
        assert_eq!(o.lag_ns(), Some(0));
        // 7 left, next token after 0.5 s -> t = 1.
        let a = o.advertised(AdvertiseOptions::default());
        assert_eq!((a.remaining, a.reset), (7, Some(1)));
        assert_eq!(o.retry_after_secs(), None);
    }

    #[tokio::test]
    async fn denial_rounds_retry_after_up() {
        let l = limiter(2, Rate::new(2, 3).unwrap()); // 2/3 token per second: 1 token every 1.5 s
        l.decide(&"k", 2).await.unwrap();
        let o = l.decide(&"k", 1).await.unwrap();
        assert!(!o.decision.is_allowed());
        assert_eq!(o.decision.retry_after(), Some(Wait::After(1_500_000_000)));
        assert_eq!(o.retry_after_secs(), Some(2));
        assert_eq!(o.advertised(AdvertiseOptions::default()).reset, Some(2));
    }

    #[tokio::test]
    async fn zero_rate_has_no_window_and_no_retry_after() {
        let l = limiter(1, Rate::ZERO);
        l.decide(&"k", 1).await.unwrap();
        let o = l.decide(&"k", 1).await.unwrap();
        assert!(!o.decision.is_allowed());
        assert_eq!(o.retry_after_secs(), None);
        assert_eq!(o.advertised(AdvertiseOptions::default()).reset, None);
    }

    #[tokio::test]
    async fn errors_are_not_denials() {
        let l = limiter(5, Rate::per_second(1));
        assert_eq!(
            l.decide(&"k", 6).await.unwrap_err(),
            SourceError::InvalidCost {
                cost: 6,
                capacity: 5
            }
        );
    }
}
