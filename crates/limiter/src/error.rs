//! Typed errors. An error is never a denial: it means the request or the configuration was invalid,
//! and the operation that returned it changed no state.

/// A configuration (rate or capacity) that the limiter refuses, with what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `capacity` must be at least one token.
    #[error("capacity must be at least 1 token, got 0")]
    ZeroCapacity,
    /// A rate `p/0`.
    #[error("rate denominator must be positive")]
    ZeroRateDenominator,
    /// `Rate::per(n, Duration::ZERO)`.
    #[error("rate period must be positive")]
    ZeroRatePeriod,
    /// The reduced rate does not fit the exact unit grid.
    #[error(
        "rate {numer}/{denom} tokens per second is outside the exact range \
         (reduced numerator <= 2^64-1, denominator <= {max_denom})"
    )]
    RateOutOfRange {
        /// Reduced numerator.
        numer: u128,
        /// Reduced denominator.
        denom: u128,
        /// [`crate::MAX_RATE_DENOMINATOR`].
        max_denom: u64,
    },
    /// A bandwidth set with no bandwidth.
    #[error("a bandwidth set holds at least one bandwidth, got none")]
    NoBandwidths,
    /// A bandwidth set with more than [`crate::MAX_BANDWIDTHS`].
    #[error("a bandwidth set holds at most {max} bandwidths, got {count}")]
    TooManyBandwidths {
        /// How many were given (at least).
        count: usize,
        /// [`crate::MAX_BANDWIDTHS`].
        max: usize,
    },
    /// A bandwidth name that is not one, or that two bandwidths of a set share.
    #[error("bandwidth name {name:?}: {reason}")]
    BandwidthName {
        /// The name given.
        name: String,
        /// What was wrong.
        reason: &'static str,
    },
    /// A rate string that does not parse.
    #[error("cannot parse rate {input:?}: {reason}")]
    ParseRate {
        /// The text given.
        input: String,
        /// What was expected.
        reason: &'static str,
    },
}

/// Why an acquire was refused as invalid (not denied). State is untouched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// `cost == 0` or `cost > capacity`: no amount of waiting would make it valid.
    #[error("invalid cost {cost}: must be between 1 and the capacity {capacity}")]
    InvalidCost {
        /// The cost asked for.
        cost: u64,
        /// The key's capacity.
        capacity: u64,
    },
    /// The key is new, the key table is at its bound and the eviction policy found no room.
    #[error("key table full: {live_keys} live keys in this shard (bound {max_keys} in total)")]
    KeyLimitReached {
        /// The configured bound for the whole limiter.
        max_keys: usize,
        /// Keys live in the shard that refused.
        live_keys: usize,
    },
}

/// Why a settle was refused (docs/semantics.md, "settle"). State is untouched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// `actual > capacity` (the smallest capacity of a set): no acquire could have charged it.
    #[error("invalid actual cost {actual}: must be at most the capacity {capacity}")]
    InvalidActual {
        /// The actual cost given.
        actual: u64,
        /// The key's capacity (its smallest, for a set).
        capacity: u64,
    },
    /// The key holds no live record of this request id: it was never acquired with it, or its
    /// record left the dedupe window or the per-key FIFO, or the key was forgotten or expired.
    #[error("no live record of this request id on this key (never acquired with it, or expired)")]
    UnknownRequest,
    /// The request's acquire was denied: it charged nothing, so there is nothing to settle.
    #[error("the request was denied: nothing was charged, nothing to settle")]
    NotAdmitted,
    /// The request was settled already with another actual cost; a request settles once.
    #[error("the request was settled already, with actual cost {actual}")]
    AlreadySettled {
        /// The actual cost it was settled with.
        actual: u64,
    },
}

impl SettleError {
    /// The error of a settle whose step refused its `actual` (the only error the settle step has).
    pub(crate) fn from_step(error: AcquireError) -> SettleError {
        match error {
            AcquireError::InvalidCost { cost, capacity } => SettleError::InvalidActual {
                actual: cost,
                capacity,
            },
            // The settle step makes no room and creates no key.
            AcquireError::KeyLimitReached { .. } => SettleError::UnknownRequest,
        }
    }
}
