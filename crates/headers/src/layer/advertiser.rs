//! What the layer writes on a response: the [`Advertiser`] turns one decision into header values
//! (an [`Advertisement`]: `RateLimit-Policy`, `RateLimit`, `Retry-After`) and writes them, with
//! [`DEGRADED_HEADER`] when a fallback decided; [`PartitionBytes`] is what a limiter key
//! contributes to its `pk`.
//!
//! Promises: every number is [`crate::mapping`]'s (never more permissive than the limiter); one
//! item per bandwidth, in the set's order, all under one `pk`; `Retry-After` never earlier than
//! the `t` of an item whose `r` does not cover the cost (draft-11 Section 6); a value that would
//! not serialize is left out rather than sent wrong.

use std::borrow::Cow;

use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::field::{PolicyName, QuotaPolicy, QuotaUnit, RateLimit, RateLimitPolicy, ServiceLimit};
use crate::mapping::{self, AdvertiseOptions};
use crate::outcome::Outcome;
use crate::pk::PartitionKeyHasher;
use crate::profile::Profile;
use crate::set::{Part, SetOutcome};

/// Set to `?1` (a Structured Field Boolean) on every response decided while the limiter's store was
/// unavailable and a fallback (local budget, fail-open) decided instead, or while the store recovered
/// from a detected loss of its state (a shared-state source's recovery policy).
pub const DEGRADED_HEADER: HeaderName = HeaderName::from_static("bucketproof-degraded");

/// The bytes a limiter key contributes to its partition key hash.
pub trait PartitionBytes {
    /// A stable byte encoding of the key.
    fn partition_bytes(&self) -> Cow<'_, [u8]>;
}

impl PartitionBytes for String {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}
impl PartitionBytes for &str {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}
impl PartitionBytes for Vec<u8> {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self)
    }
}
impl PartitionBytes for u64 {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.to_be_bytes().to_vec())
    }
}
impl PartitionBytes for std::net::IpAddr {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            std::net::IpAddr::V4(v4) => Cow::Owned(v4.octets().to_vec()),
            std::net::IpAddr::V6(v6) => Cow::Owned(v6.octets().to_vec()),
        }
    }
}

/// Turns one [`Outcome`] into header values: the policy, the limit and `Retry-After`.
///
/// The layer uses it for every response; simulations use it to put exactly the same bytes in front
/// of a client without a socket.
#[derive(Clone, Debug)]
pub struct Advertiser {
    /// The wire profile.
    pub profile: Profile,
    /// The advertised policy name (stable, versioned): the one item of a key of one unnamed
    /// bandwidth, and what `pk` is bound to.
    pub policy: PolicyName,
    /// `qu`.
    pub unit: QuotaUnit,
    /// DoS ratio cap and friends.
    pub options: AdvertiseOptions,
    /// Partition key hashing; `None` sends no `pk`.
    pub pk: Option<PartitionKeyHasher>,
}

impl Advertiser {
    /// Draft-11, requests, no ratio cap, no `pk`.
    pub fn new(policy: PolicyName) -> Advertiser {
        Advertiser {
            profile: Profile::Draft11,
            policy,
            unit: QuotaUnit::Requests,
            options: AdvertiseOptions::default(),
            pk: None,
        }
    }

    /// The values for `outcome`, decided for a key whose partition bytes are `key`: one item under
    /// [`Advertiser::policy`].
    pub fn advertisement(&self, key: &[u8], outcome: &Outcome) -> Advertisement {
        self.set_advertisement(key, &SetOutcome::single(*outcome))
    }

    /// The values for a decision over a key's bandwidths: one `RateLimit-Policy` item and one
    /// `RateLimit` item per part, in order, each named by [`Advertiser::item_name`], and
    /// `Retry-After` from the combined wait.
    pub fn set_advertisement(&self, key: &[u8], outcome: &SetOutcome) -> Advertisement {
        // One partition key for every item: all of a key's bandwidths limit the same requests, so
        // they are one partition under several policies, and a client can tell so from `pk`.
        let pk = self.pk.as_ref().map(|h| h.partition_key(&self.policy, key));
        let advertised = outcome.advertised(self.options);
        let mut policies = Vec::with_capacity(advertised.len());
        let mut limits = Vec::with_capacity(advertised.len());
        let mut window_floor = 0;
        for (part, adv) in outcome.parts().iter().zip(&advertised) {
            let name = self.item_name(part);
            let config = part.config();
            let rate = config.rate();
            policies.push(QuotaPolicy {
                name: name.clone(),
                quota: mapping::policy_quota(config.capacity()),
                unit: self.unit.clone(),
                window: mapping::policy_window_secs(config.capacity(), rate.numer(), rate.denom()),
                partition_key: pk.clone(),
            });
            limits.push(ServiceLimit {
                name: name.clone(),
                remaining: adv.remaining,
                reset: adv.reset,
                partition_key: pk.clone(),
            });
            if adv.remaining < outcome.cost() {
                window_floor = window_floor.max(adv.reset.unwrap_or(0));
            }
        }
        // Section 6: Retry-After SHOULD NOT be earlier than the end of the effective window. Of the
        // items whose `r` does not cover the cost, that is: an item that still covers it does not
        // forbid the retry, so its window need not delay it.
        let retry_after = outcome.retry_after_secs().map(|ra| ra.max(window_floor));
        Advertisement {
            policy: RateLimitPolicy { policies },
            limit: RateLimit { limits },
            retry_after,
        }
    }

    /// The name `part`'s items carry: its bandwidth's ([`crate::set`], "Names on the wire"), or
    /// [`Advertiser::policy`] for the one part of a key of one unnamed bandwidth.
    pub fn item_name<'a>(&'a self, part: &'a Part) -> &'a PolicyName {
        part.name().unwrap_or(&self.policy)
    }

    /// The policies a denial names as violated (draft-11 Section 5.1): the items of the bandwidths
    /// that did not cover the cost. Empty when allowed.
    pub fn violated<'a>(&'a self, outcome: &'a SetOutcome) -> Vec<&'a PolicyName> {
        outcome
            .parts()
            .iter()
            .filter(|p| p.violated())
            .map(|p| self.item_name(p))
            .collect()
    }

    /// Writes the fields (and `Retry-After`, and the degraded flag) into a header section.
    pub fn write(&self, headers: &mut HeaderMap, adv: &Advertisement, degraded: bool) {
        // Values built here always serialize; if one ever did not, sending no hint is safer than
        // sending a wrong one.
        if let Ok(v) = adv.policy.to_header_value(self.profile) {
            headers.insert(self.profile.policy_field(), v);
        }
        if let Ok(v) = adv.limit.to_header_value(self.profile) {
            headers.insert(self.profile.limit_field(), v);
        }
        if let Some(ra) = adv.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(ra));
        }
        if degraded {
            headers.insert(DEGRADED_HEADER, HeaderValue::from_static("?1"));
        }
    }
}

/// The header values computed for one decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advertisement {
    /// `RateLimit-Policy`.
    pub policy: RateLimitPolicy,
    /// `RateLimit`.
    pub limit: RateLimit,
    /// `Retry-After` delay seconds (denials that will ever be allowed only).
    pub retry_after: Option<u64>,
}
