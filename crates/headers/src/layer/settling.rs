//! Reserve, then settle, inside the layer: what a settle became ([`SettleReport`], given to
//! [`RateLimitLayer::on_settle`](crate::layer::RateLimitLayer::on_settle)), and the layer's
//! settling source with its type erased (`Settles`, `Settling`), so the layer keeps one type with
//! or without settling.
//!
//! Promises: a report's `unpaid` is the extra of a denied settle and nothing else; the erased
//! source forwards to its [`SettleSource`] unchanged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bucketproof_limiter::{Decisions, RequestId, Settle, Settled};

use crate::set::SetOutcome;
use crate::source::{SettleFailure, SettleSource, SourceError};

/// How the layer reads a response's actual cost ([`RateLimitLayer::settle`](crate::layer::RateLimitLayer::settle)).
pub(super) type ActualFn = dyn Fn(&http::response::Parts) -> Option<u64> + Send + Sync;

/// What became of one admitted request's settle ([`RateLimitLayer::settle`](crate::layer::RateLimitLayer::settle)), given to
/// [`RateLimitLayer::on_settle`](crate::layer::RateLimitLayer::on_settle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleReport {
    /// The estimate the request reserved: its [`RateLimitLayer::cost`](crate::layer::RateLimitLayer::cost).
    pub reserved: u64,
    /// The actual cost computed from its response.
    pub actual: u64,
    /// The source's answer: an allowed settlement (the refund given, or the extra charged), a
    /// denied one (the extra was not covered: nothing charged, see [`SettleReport::unpaid`]), or
    /// why it could not settle ([`SettleFailure`]: refused by the rule, or the store unavailable or
    /// failing; the estimate stays charged).
    pub result: Result<Settled<Decisions>, SettleFailure>,
}

impl SettleReport {
    /// What the request used beyond what its key was charged: the extra of a denied settle, 0
    /// otherwise (a failed settle leaves the estimate charged: its shortfall, if any, is not
    /// known to be an extra the limiter refused).
    pub fn unpaid(&self) -> u64 {
        match &self.result {
            Ok(settled) if !settled.decision.is_allowed() => {
                self.actual.saturating_sub(self.reserved)
            }
            _ => 0,
        }
    }
}

type RefFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A [`SettleSource`] with its type erased, so the layer keeps one type with or without settling.
pub(super) trait Settles<K>: Send + Sync {
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> RefFuture<'a, Result<SetOutcome, SourceError>>;

    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> RefFuture<'a, Result<Settled<Decisions>, SettleFailure>>;
}

impl<K, T: SettleSource<K>> Settles<K> for T {
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> RefFuture<'a, Result<SetOutcome, SourceError>> {
        Box::pin(SettleSource::reserve_set(self, key, cost, request_id))
    }

    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> RefFuture<'a, Result<Settled<Decisions>, SettleFailure>> {
        Box::pin(SettleSource::settle_set(self, key, settle))
    }
}

/// The layer's settling: the source as a [`SettleSource`], and how to read the actual cost.
pub(super) struct Settling<K> {
    pub(super) source: Arc<dyn Settles<K>>,
    pub(super) actual: Arc<ActualFn>,
}

impl<K> Clone for Settling<K> {
    fn clone(&self) -> Self {
        Settling {
            source: Arc::clone(&self.source),
            actual: Arc::clone(&self.actual),
        }
    }
}
