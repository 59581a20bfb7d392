//! Intermediaries: combining an origin's fields with a gateway's own, stricter limiter.
//!
//! Draft-11 Section 7.2: an intermediary "SHOULD NOT alter the RateLimit header fields' values in such
//! a way as to communicate a more permissive quota policy; this includes removing the RateLimit header
//! fields", and MAY make them more restrictive when it enforces a stricter policy itself. [`merge`]
//! implements exactly that, and its result is never more permissive than *either* input:
//!
//! - nothing is removed: every `(name, pk)` limit and every `(name, pk, unit)` policy of either side
//!   appears in the result;
//! - the same limit reported by both sides keeps the **minimum** `r` and the **longest** `t`; a missing
//!   `t` ("no window", i.e. no promise of replenishment) wins over any number;
//! - the same policy on both sides keeps the **minimum** `q` and the **longest** `w` (again a missing `w`
//!   wins);
//! - `Retry-After` keeps the later of the two moments ([`merge_retry_after`]).
//!
//! A malformed origin field is ignored as a whole by every conforming client, so for the client it is
//! already absent; [`merge_headers`] replaces it with the gateway's field rather than appending to it
//! (appending would make the combined field malformed and hide the gateway's stricter limit too).

use http::HeaderMap;

use crate::field::{PolicyName, QuotaPolicy, QuotaUnit, RateLimit, RateLimitPolicy, ServiceLimit};
use crate::profile::Profile;

/// Both fields of one response (either may be absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// `RateLimit-Policy`.
    pub policy: Option<RateLimitPolicy>,
    /// `RateLimit`.
    pub limit: Option<RateLimit>,
}

impl Fields {
    /// Reads both fields; a malformed one counts as absent.
    pub fn from_headers(profile: Profile, headers: &HeaderMap) -> Fields {
        Fields {
            policy: RateLimitPolicy::from_headers(profile, headers),
            limit: RateLimit::from_headers(profile, headers),
        }
    }
}

/// The longer of two windows, where `None` (no window at all) is the longest.
fn longer(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    }
}

type LimitKey = (PolicyName, Option<Vec<u8>>);
type PolicyKey = (PolicyName, Option<Vec<u8>>, QuotaUnit);

fn limit_key(l: &ServiceLimit) -> LimitKey {
    (l.name.clone(), l.partition_key.clone())
}

fn policy_key(p: &QuotaPolicy) -> PolicyKey {
    (p.name.clone(), p.partition_key.clone(), p.unit.clone())
}

/// Merges `origin` and `gateway` so that the result is no more permissive than either.
pub fn merge(origin: &Fields, gateway: &Fields) -> Fields {
    let limits = merge_by(
        origin.limit.iter().flat_map(|f| f.limits.iter()),
        gateway.limit.iter().flat_map(|f| f.limits.iter()),
        limit_key,
        |acc, other| {
            acc.remaining = acc.remaining.min(other.remaining);
            acc.reset = longer(acc.reset, other.reset);
        },
    );
    let policies = merge_by(
        origin.policy.iter().flat_map(|f| f.policies.iter()),
        gateway.policy.iter().flat_map(|f| f.policies.iter()),
        policy_key,
        |acc, other| {
            acc.quota = acc.quota.min(other.quota);
            acc.window = longer(acc.window, other.window);
        },
    );
    Fields {
        policy: (!policies.is_empty()).then_some(RateLimitPolicy { policies }),
        limit: (!limits.is_empty()).then_some(RateLimit { limits }),
    }
}

/// Keeps the first occurrence's position; folds every later item with the same key into it.
fn merge_by<'a, T: Clone + 'a, K: PartialEq>(
    first: impl Iterator<Item = &'a T>,
    second: impl Iterator<Item = &'a T>,
    key: impl Fn(&T) -> K,
    fold: impl Fn(&mut T, &T),
) -> Vec<T> {
    let mut out: Vec<(K, T)> = Vec::new();
    for item in first.chain(second) {
        let k = key(item);
        match out.iter_mut().find(|(ok, _)| *ok == k) {
            Some((_, acc)) => fold(acc, item),
            None => out.push((k, item.clone())),
        }
    }
    out.into_iter().map(|(_, t)| t).collect()
}

/// The later of two `Retry-After` delays (seconds from the same response).
pub fn merge_retry_after(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Rewrites the origin's fields in `headers` to `merge(origin, gateway)`, and `Retry-After` to the later
/// of the two delays when both are delay-seconds. Lines of other fields are untouched.
pub fn merge_headers(
    profile: Profile,
    headers: &mut HeaderMap,
    gateway: &Fields,
    gateway_retry_after: Option<u64>,
) {
    let origin = Fields::from_headers(profile, headers);
    let merged = merge(&origin, gateway);
    if let Some(policy) = merged.policy.and_then(|p| p.to_header_value(profile).ok()) {
        headers.insert(profile.policy_field(), policy);
    }
    if let Some(limit) = merged.limit.and_then(|l| l.to_header_value(profile).ok()) {
        headers.insert(profile.limit_field(), limit);
    }
    if let Some(gw) = gateway_retry_after {
        let origin_ra = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().parse::<u64>());
        let value = match origin_ra {
            Some(Ok(o)) => Some(o.max(gw)),
            // An HTTP-date (or junk): comparing it with delay seconds needs a clock this function
            // does not read, so the origin's value is left exactly as it was.
            Some(Err(_)) => None,
            None => Some(gw),
        };
        if let Some(v) = value {
            headers.insert(http::header::RETRY_AFTER, v.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(name: &str, r: u64, t: Option<u64>) -> ServiceLimit {
        ServiceLimit {
            name: PolicyName::new(name).unwrap(),
            remaining: r,
            reset: t,
            partition_key: None,
        }
    }

    #[test]
    fn same_limit_keeps_min_r_and_max_t_and_nothing_is_removed() {
        let origin = Fields {
            policy: None,
            limit: Some(RateLimit {
                limits: vec![limit("a", 10, Some(5)), limit("o", 3, Some(1))],
            }),
        };
        let gw = Fields {
            policy: None,
            limit: Some(RateLimit {
                limits: vec![limit("a", 4, Some(2)), limit("g", 1, None)],
            }),
        };
        let m = merge(&origin, &gw).limit.unwrap().limits;
        assert_eq!(
            m,
            vec![
                limit("a", 4, Some(5)),
                limit("o", 3, Some(1)),
                limit("g", 1, None)
            ]
        );
    }

    #[test]
    fn retry_after_takes_the_later() {
        assert_eq!(merge_retry_after(Some(3), Some(9)), Some(9));
        assert_eq!(merge_retry_after(None, Some(9)), Some(9));
        assert_eq!(merge_retry_after(None, None), None);
    }
}
