//! LEGACY reader: fields from *before* draft-11, read only, never written.
//!
//! **These formats are not the contract.** They exist because deployed servers still send them:
//! - draft-ietf-httpapi-ratelimit-headers-07 (expired): `RateLimit` as a Dictionary
//!   `limit=100, remaining=50, reset=5` and `RateLimit-Policy` as a List of Integers `100;w=60`;
//! - the de facto `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` triple, whose reset
//!   is sometimes delay seconds and sometimes a Unix timestamp (draft-11, "RateLimit header fields
//!   currently used on the web"). What we assume is explicit: [`ResetFormat`].
//!
//! Everything returned is tagged with its [`LegacySource`] so a caller can never mistake it for a
//! draft-11 field. Like the draft-11 reader, a malformed value is ignored as a whole and nothing here
//! panics on any input.

use http::HeaderMap;
use sfv::{BareItem, ListEntry, Parser};

/// Where a legacy hint came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegacySource {
    /// draft-07 `RateLimit` Dictionary (and optionally its `RateLimit-Policy` Integer list).
    Draft07,
    /// `X-RateLimit-Limit` / `-Remaining` / `-Reset`.
    XRateLimit,
}

/// How to read an `X-RateLimit-Reset` value. Servers disagree; the reader cannot know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetFormat {
    /// Delay seconds from the response (GitHub-style servers send epochs instead: do not use this
    /// for them).
    DeltaSeconds,
    /// A Unix timestamp in seconds; the delay is `reset - now_unix` (0 if already past). `now_unix`
    /// is the reader's idea of the current time, passed in so this crate never reads a wall clock.
    UnixEpoch {
        /// Seconds since 1970-01-01T00:00:00Z at the time the response was received.
        now_unix: u64,
    },
    /// The default guess: a value of at least 1,000,000,000 (2001-09-09, i.e. a delay above 31
    /// years, which no real limiter means) is an epoch, anything smaller is delay seconds. An epoch
    /// without `now_unix` cannot be converted and yields no reset.
    Heuristic {
        /// As in [`ResetFormat::UnixEpoch`]; `None` when the caller has no trustworthy clock.
        now_unix: Option<u64>,
    },
}

/// The threshold of [`ResetFormat::Heuristic`].
pub const EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// A hint read from a legacy format. Flagged by `source`; never produced from draft-11 fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyHint {
    /// The format it was read from.
    pub source: LegacySource,
    /// The limit (draft-07 `limit`, `X-RateLimit-Limit`).
    pub limit: Option<u64>,
    /// Remaining quota units.
    pub remaining: Option<u64>,
    /// Delay seconds until the reset, after interpreting the reset format.
    pub reset_after_secs: Option<u64>,
    /// draft-07 `RateLimit-Policy` windows, `(limit, w seconds)` per policy, when present.
    pub policies: Vec<(u64, u64)>,
}

fn non_negative(item: &BareItem) -> Option<u64> {
    match item {
        BareItem::Integer(i) => u64::try_from(i64::from(*i)).ok(),
        _ => None,
    }
}

/// Reads a draft-07 `RateLimit` Dictionary (`limit` and `reset` required, `remaining` optional;
/// parameters ignored, as draft-07 Section 3.1 says) and, when it parses, the draft-07
/// `RateLimit-Policy` Integer list. `None` if the `RateLimit` value is not a valid draft-07 dictionary.
pub fn read_draft07(headers: &HeaderMap) -> Option<LegacyHint> {
    let lines = headers.get_all("ratelimit");
    let combined = crate::field::combine_lines(lines.iter().map(|v| v.as_bytes()));
    if combined.is_empty() {
        return None;
    }
    let dict: sfv::Dictionary = Parser::new(&combined).parse().ok()?;
    let get = |k: &str| -> Result<Option<u64>, ()> {
        match dict.get(k) {
            None => Ok(None),
            Some(ListEntry::Item(item)) => non_negative(&item.bare_item).map(Some).ok_or(()),
            Some(ListEntry::InnerList(_)) => Err(()),
        }
    };
    let limit = get("limit").ok()??;
    let reset = get("reset").ok()??;
    let remaining = get("remaining").ok()?;
    let policies = read_draft07_policy(headers).unwrap_or_default();
    Some(LegacyHint {
        source: LegacySource::Draft07,
        limit: Some(limit),
        remaining,
        reset_after_secs: Some(reset),
        policies,
    })
}

/// draft-07 `RateLimit-Policy`: a non-empty List of Integer items, each with a required `w`.
fn read_draft07_policy(headers: &HeaderMap) -> Option<Vec<(u64, u64)>> {
    let lines = headers.get_all("ratelimit-policy");
    let combined = crate::field::combine_lines(lines.iter().map(|v| v.as_bytes()));
    let list: sfv::List = Parser::new(&combined).parse().ok()?;
    if list.is_empty() {
        return None;
    }
    list.iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => {
                let limit = non_negative(&item.bare_item)?;
                let w = non_negative(item.params.get("w")?)?;
                Some((limit, w))
            }
            ListEntry::InnerList(_) => None,
        })
        .collect()
}

fn plain_integer(headers: &HeaderMap, name: &str) -> Result<Option<u64>, ()> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        // Two different values for one counter: ambiguous, ignore the whole legacy hint.
        return Err(());
    }
    let s = first.to_str().map_err(|_| ())?.trim();
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    s.parse::<u64>().map(Some).map_err(|_| ())
}

/// Reads `X-RateLimit-Limit` / `-Remaining` / `-Reset` (each a plain non-negative decimal integer).
/// `None` if none is present or any present one is malformed.
pub fn read_x_ratelimit(headers: &HeaderMap, reset_format: ResetFormat) -> Option<LegacyHint> {
    let limit = plain_integer(headers, "x-ratelimit-limit").ok()?;
    let remaining = plain_integer(headers, "x-ratelimit-remaining").ok()?;
    let reset_raw = plain_integer(headers, "x-ratelimit-reset").ok()?;
    if limit.is_none() && remaining.is_none() && reset_raw.is_none() {
        return None;
    }
    let epoch = |value: u64, now: u64| value.saturating_sub(now);
    let reset_after_secs = reset_raw.and_then(|v| match reset_format {
        ResetFormat::DeltaSeconds => Some(v),
        ResetFormat::UnixEpoch { now_unix } => Some(epoch(v, now_unix)),
        ResetFormat::Heuristic { now_unix } => {
            if v >= EPOCH_THRESHOLD {
                now_unix.map(|now| epoch(v, now))
            } else {
                Some(v)
            }
        }
    });
    Some(LegacyHint {
        source: LegacySource::XRateLimit,
        limit,
        remaining,
        reset_after_secs,
        policies: Vec::new(),
    })
}

/// draft-07 first, then `X-RateLimit-*`. Call this only when no draft-11 field was present.
pub fn read_any(headers: &HeaderMap, reset_format: ResetFormat) -> Option<LegacyHint> {
    read_draft07(headers).or_else(|| read_x_ratelimit(headers, reset_format))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn draft07_dictionary_and_policy() {
        let h = headers(&[
            ("ratelimit", "limit=100, remaining=50, reset=5"),
            ("ratelimit-policy", "100;w=10, 1000;w=3600"),
        ]);
        let hint = read_draft07(&h).unwrap();
        assert_eq!(hint.source, LegacySource::Draft07);
        assert_eq!(
            (hint.limit, hint.remaining, hint.reset_after_secs),
            (Some(100), Some(50), Some(5))
        );
        assert_eq!(hint.policies, vec![(100, 10), (1000, 3600)]);
    }

    #[test]
    fn draft07_requires_limit_and_reset() {
        assert!(read_draft07(&headers(&[("ratelimit", "remaining=5, reset=5")])).is_none());
        assert!(read_draft07(&headers(&[("ratelimit", "limit=5, remaining=5")])).is_none());
        assert!(read_draft07(&headers(&[("ratelimit", "limit=-5, reset=1")])).is_none());
        // A draft-11 value is not a draft-07 dictionary.
        assert!(read_draft07(&headers(&[("ratelimit", r#""default";r=5;t=1"#)])).is_none());
    }

    #[test]
    fn x_ratelimit_reset_interpretations() {
        let h = headers(&[
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000030"),
        ]);
        let now = Some(1_700_000_000);
        let auto = read_x_ratelimit(&h, ResetFormat::Heuristic { now_unix: now }).unwrap();
        assert_eq!(auto.reset_after_secs, Some(30));
        let no_clock = read_x_ratelimit(&h, ResetFormat::Heuristic { now_unix: None }).unwrap();
        assert_eq!(no_clock.reset_after_secs, None);
        let delta = read_x_ratelimit(&h, ResetFormat::DeltaSeconds).unwrap();
        assert_eq!(delta.reset_after_secs, Some(1_700_000_030));
        let small = headers(&[("x-ratelimit-reset", "42")]);
        let s = read_x_ratelimit(&small, ResetFormat::Heuristic { now_unix: None }).unwrap();
        assert_eq!(s.reset_after_secs, Some(42));
    }

    #[test]
    fn x_ratelimit_malformed_is_ignored_whole() {
        for bad in ["-1", "1.5", "", "12abc", "99999999999999999999999"] {
            let mut h = headers(&[("x-ratelimit-limit", "10")]);
            h.insert("x-ratelimit-remaining", HeaderValue::from_str(bad).unwrap());
            assert!(
                read_x_ratelimit(&h, ResetFormat::DeltaSeconds).is_none(),
                "{bad}"
            );
        }
    }
}
