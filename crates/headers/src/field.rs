//! The `RateLimit-Policy` and `RateLimit` fields of draft-11: typed values, parsing, serializing.
//!
//! Syntax is delegated to the `sfv` crate (RFC 9651 Structured Field Values); everything `sfv` lets
//! through but the draft forbids is checked here: item types (the policy identifier MUST be a String),
//! required parameters, parameter types and ranges (`sfv` happily parses `r=-1`, `r=1.5` and an empty
//! list). A field that fails any check is rejected *as a whole* ([`FieldError`]); callers that read
//! responses ([`RateLimitPolicy::from_headers`], [`RateLimit::from_headers`]) then treat it as absent,
//! as draft-11 Section 7 requires ("Malformed RateLimit header fields MUST be ignored").
//!
//! Promises:
//! - parsing never panics, whatever the bytes (a proptest and a cargo-fuzz target check it);
//! - every value this module serializes parses back to the same value ([`RateLimitPolicy::serialize`]
//!   refuses values it could not represent instead of altering them);
//! - a field split over several field lines is parsed as the lines joined with `", "` (RFC 9110
//!   Section 5.3, RFC 9651 Section 4.2); empty lines contribute nothing.
//! - unknown parameters are comments: accepted and dropped (draft-11 Sections 3.1 and 4.1).

use std::fmt;

use http::{HeaderMap, HeaderValue};
use sfv::{BareItem, Integer, ListEntry, Parameters, Parser};

use crate::profile::Profile;

/// The largest Integer a Structured Field can carry: 999,999,999,999,999 (RFC 9651 Section 3.3.1).
pub const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Why a field value was rejected. A rejected field is ignored as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// Not a valid Structured Field List (RFC 9651 parse failure), or not ASCII.
    #[error("not a structured field list: {0}")]
    Syntax(String),
    /// The list has no members. `RateLimit-Policy` MUST be non-empty (draft-11 Section 3); an empty
    /// `RateLimit` carries nothing, which is the same as no field.
    #[error("the field is empty")]
    Empty,
    /// A member is an Inner List; both fields are Lists of Items.
    #[error("member {index} is an inner list, not an item")]
    InnerList {
        /// Position of the member in the combined list.
        index: usize,
    },
    /// The policy identifier is not a String (draft-11 Section 3: "MUST be a String").
    #[error("member {index}: the policy identifier is not a String")]
    NotAString {
        /// Position of the member in the combined list.
        index: usize,
    },
    /// A required parameter (`q` for a policy, `r` for a limit) is missing.
    #[error("member {index}: required parameter `{param}` is missing")]
    MissingParameter {
        /// Position of the member in the combined list.
        index: usize,
        /// The parameter name.
        param: &'static str,
    },
    /// A defined parameter has the wrong type (`r=1.5`, `w="60"`, `pk=abc`, ...).
    #[error("member {index}: parameter `{param}` has the wrong type")]
    WrongType {
        /// Position of the member in the combined list.
        index: usize,
        /// The parameter name.
        param: &'static str,
    },
    /// A defined parameter is out of its range (`r=-1`, `q=-5`, `w=0`).
    #[error("member {index}: parameter `{param}` is out of range")]
    OutOfRange {
        /// Position of the member in the combined list.
        index: usize,
        /// The parameter name.
        param: &'static str,
    },
    /// A policy name that a String cannot carry (only printable ASCII, 0x20..=0x7E).
    #[error("policy name is not printable ASCII: {0:?}")]
    InvalidName(String),
    /// A value to serialize exceeds [`SF_INTEGER_MAX`] or violates the draft (`w = 0`).
    #[error("cannot serialize `{param}` = {value}: out of range")]
    Unrepresentable {
        /// The parameter name.
        param: &'static str,
        /// The offending value.
        value: u64,
    },
}

/// A quota policy identifier: the String that names an item in both fields.
///
/// Servers should keep names stable and versioned ([`PolicyName::versioned`]), so a client can tell a
/// changed policy from a changed counter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyName(String);

impl PolicyName {
    /// A name made of printable ASCII (what an SF String can carry).
    pub fn new(name: impl Into<String>) -> Result<PolicyName, FieldError> {
        let name = name.into();
        if name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            Ok(PolicyName(name))
        } else {
            Err(FieldError::InvalidName(name))
        }
    }

    /// `"{base}.v{version}"`: a stable name that changes when the policy's meaning changes.
    pub fn versioned(base: &str, version: u32) -> Result<PolicyName, FieldError> {
        PolicyName::new(format!("{base}.v{version}"))
    }

    /// The name as sent on the wire (without quotes).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a quota counts (draft-11 Section 3.1.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum QuotaUnit {
    /// `"requests"`, the default when `qu` is absent. Section 3.1 spells it "requests" and the registry
    /// (Section 10.3) "request"; both are read as this unit, and it is written by omitting `qu`.
    #[default]
    Requests,
    /// `"content-bytes"`.
    ContentBytes,
    /// `"concurrent-requests"`.
    ConcurrentRequests,
    /// Any other registered or private unit, kept verbatim.
    Other(String),
}

impl QuotaUnit {
    fn from_wire(s: &str) -> QuotaUnit {
        match s {
            "requests" | "request" => QuotaUnit::Requests,
            "content-bytes" => QuotaUnit::ContentBytes,
            "concurrent-requests" => QuotaUnit::ConcurrentRequests,
            other => QuotaUnit::Other(other.to_owned()),
        }
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ContentBytes => "content-bytes",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
            QuotaUnit::Other(s) => s,
        }
    }
}

/// One member of `RateLimit-Policy` (draft-11 Section 3.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QuotaPolicy {
    /// The policy identifier.
    pub name: PolicyName,
    /// `q`: the quota, in quota units (required, `0..=SF_INTEGER_MAX`).
    pub quota: u64,
    /// `qu`: the quota unit (default requests).
    pub unit: QuotaUnit,
    /// `w`: the time window in whole seconds (`>= 1`), if advertised.
    pub window: Option<u64>,
    /// `pk`: the partition key (opaque bytes), if advertised.
    pub partition_key: Option<Vec<u8>>,
}

/// One member of `RateLimit` (draft-11 Section 4.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceLimit {
    /// The identifier of the policy this limit reports on.
    pub name: PolicyName,
    /// `r`: the available quota in quota units (required, `0..=SF_INTEGER_MAX`).
    pub remaining: u64,
    /// `t`: the effective window in whole seconds, if advertised.
    pub reset: Option<u64>,
    /// `pk`: the partition key (opaque bytes), if advertised.
    pub partition_key: Option<Vec<u8>>,
}

/// The `RateLimit-Policy` field: a non-empty list of quota policies.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateLimitPolicy {
    /// The policies, in wire order.
    pub policies: Vec<QuotaPolicy>,
}

/// The `RateLimit` field: the current service limits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// The limits, in wire order.
    pub limits: Vec<ServiceLimit>,
}

/// Joins several field lines into one list value, per RFC 9110 Section 5.3: `", "` between lines,
/// blank lines skipped (they would otherwise produce a stray comma and reject a good field).
pub fn combine_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        let blank = line.iter().all(|b| *b == b' ' || *b == b'\t');
        if blank {
            continue;
        }
        if !out.is_empty() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(line);
    }
    out
}

fn parse_list(bytes: &[u8]) -> Result<Vec<(usize, sfv::Item)>, FieldError> {
    // RFC 9651 Section 4.2: an empty input is an empty list; sfv agrees. We reject both below.
    let list: sfv::List = Parser::new(bytes)
        .parse()
        .map_err(|e| FieldError::Syntax(e.to_string()))?;
    if list.is_empty() {
        return Err(FieldError::Empty);
    }
    list.into_iter()
        .enumerate()
        .map(|(index, entry)| match entry {
            ListEntry::Item(item) => Ok((index, item)),
            ListEntry::InnerList(_) => Err(FieldError::InnerList { index }),
        })
        .collect()
}

fn name_of(index: usize, bare: &BareItem) -> Result<PolicyName, FieldError> {
    match bare.as_string() {
        // An SF String is printable ASCII by construction, so this cannot fail; map defensively.
        Some(s) => PolicyName::new(s.as_str()).map_err(|_| FieldError::NotAString { index }),
        None => Err(FieldError::NotAString { index }),
    }
}

/// A non-negative Integer parameter, `None` when absent.
fn uint_param(
    index: usize,
    params: &Parameters,
    param: &'static str,
) -> Result<Option<u64>, FieldError> {
    match params.get(param) {
        None => Ok(None),
        Some(BareItem::Integer(i)) => {
            let v = i64::from(*i);
            u64::try_from(v)
                .map(Some)
                .map_err(|_| FieldError::OutOfRange { index, param })
        }
        Some(_) => Err(FieldError::WrongType { index, param }),
    }
}

fn bytes_param(
    index: usize,
    params: &Parameters,
    param: &'static str,
) -> Result<Option<Vec<u8>>, FieldError> {
    match params.get(param) {
        None => Ok(None),
        Some(BareItem::ByteSequence(b)) => Ok(Some(b.clone())),
        Some(_) => Err(FieldError::WrongType { index, param }),
    }
}

fn int(param: &'static str, value: u64) -> Result<Integer, FieldError> {
    if value > SF_INTEGER_MAX {
        return Err(FieldError::Unrepresentable { param, value });
    }
    Integer::try_from(value).map_err(|_| FieldError::Unrepresentable { param, value })
}

fn sf_string(name: &PolicyName) -> Result<sfv::String, FieldError> {
    sfv::String::try_from(name.as_str().to_owned())
        .map_err(|_| FieldError::InvalidName(name.as_str().to_owned()))
}

fn key(k: &'static str) -> sfv::Key {
    // The keys used here are fixed lowercase ASCII literals, valid by construction.
    sfv::Key::from_string(k.to_owned()).unwrap_or_else(|_| unreachable!("static key {k} is valid"))
}

fn header_value(s: String) -> HeaderValue {
    // Serialized SF values are visible ASCII only, always a valid header value.
    HeaderValue::from_str(&s).unwrap_or_else(|_| unreachable!("sfv output is a valid header value"))
}

fn finish_list(list: sfv::List) -> String {
    use sfv::FieldType;
    // sfv returns None only for an empty list, which callers rule out.
    list.serialize().unwrap_or_default()
}

impl QuotaPolicy {
    fn from_item(index: usize, item: &sfv::Item) -> Result<QuotaPolicy, FieldError> {
        let name = name_of(index, &item.bare_item)?;
        let quota = uint_param(index, &item.params, "q")?
            .ok_or(FieldError::MissingParameter { index, param: "q" })?;
        let unit = match item.params.get("qu") {
            None => QuotaUnit::Requests,
            Some(BareItem::String(s)) => QuotaUnit::from_wire(s.as_str()),
            Some(_) => return Err(FieldError::WrongType { index, param: "qu" }),
        };
        let window = uint_param(index, &item.params, "w")?;
        if window == Some(0) {
            // Section 3.1.3: "MUST be a non-negative, non-zero, Integer".
            return Err(FieldError::OutOfRange { index, param: "w" });
        }
        let partition_key = bytes_param(index, &item.params, "pk")?;
        Ok(QuotaPolicy {
            name,
            quota,
            unit,
            window,
            partition_key,
        })
    }

    fn to_item(&self) -> Result<sfv::Item, FieldError> {
        let mut params = Parameters::new();
        params.insert(key("q"), BareItem::Integer(int("q", self.quota)?));
        if self.unit != QuotaUnit::Requests {
            let unit = sfv::String::try_from(self.unit.as_str().to_owned())
                .map_err(|_| FieldError::InvalidName(self.unit.as_str().to_owned()))?;
            params.insert(key("qu"), BareItem::String(unit));
        }
        if let Some(w) = self.window {
            if w == 0 {
                return Err(FieldError::Unrepresentable {
                    param: "w",
                    value: 0,
                });
            }
            params.insert(key("w"), BareItem::Integer(int("w", w)?));
        }
        if let Some(pk) = &self.partition_key {
            params.insert(key("pk"), BareItem::ByteSequence(pk.clone()));
        }
        Ok(sfv::Item::with_params(
            BareItem::String(sf_string(&self.name)?),
            params,
        ))
    }
}

impl ServiceLimit {
    fn from_item(index: usize, item: &sfv::Item) -> Result<ServiceLimit, FieldError> {
        let name = name_of(index, &item.bare_item)?;
        let remaining = uint_param(index, &item.params, "r")?
            .ok_or(FieldError::MissingParameter { index, param: "r" })?;
        let reset = uint_param(index, &item.params, "t")?;
        let partition_key = bytes_param(index, &item.params, "pk")?;
        Ok(ServiceLimit {
            name,
            remaining,
            reset,
            partition_key,
        })
    }

    fn to_item(&self) -> Result<sfv::Item, FieldError> {
        let mut params = Parameters::new();
        params.insert(key("r"), BareItem::Integer(int("r", self.remaining)?));
        if let Some(t) = self.reset {
            params.insert(key("t"), BareItem::Integer(int("t", t)?));
        }
        if let Some(pk) = &self.partition_key {
            params.insert(key("pk"), BareItem::ByteSequence(pk.clone()));
        }
        Ok(sfv::Item::with_params(
            BareItem::String(sf_string(&self.name)?),
            params,
        ))
    }
}

impl RateLimitPolicy {
    /// Parses one combined field value (see [`combine_lines`]).
    pub fn parse(profile: Profile, value: &[u8]) -> Result<RateLimitPolicy, FieldError> {
        match profile {
            Profile::Draft11 => {
                let policies = parse_list(value)?
                    .iter()
                    .map(|(i, item)| QuotaPolicy::from_item(*i, item))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(RateLimitPolicy { policies })
            }
        }
    }

    /// Parses every field line of a message's header section as one field.
    pub fn parse_lines<'a>(
        profile: Profile,
        lines: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<RateLimitPolicy, FieldError> {
        RateLimitPolicy::parse(profile, &combine_lines(lines))
    }

    /// Reads the field from a header section: `None` when absent *or malformed* (a malformed field is
    /// ignored as a whole, draft-11 Section 7). Use [`RateLimitPolicy::parse_lines`] to see the error.
    pub fn from_headers(profile: Profile, headers: &HeaderMap) -> Option<RateLimitPolicy> {
        let lines = headers.get_all(profile.policy_field());
        let mut lines = lines.iter().peekable();
        lines.peek()?;
        RateLimitPolicy::parse_lines(profile, lines.map(HeaderValue::as_bytes)).ok()
    }

    /// The field value. Errors (never alters) when a value cannot be represented: an empty list, an
    /// integer above [`SF_INTEGER_MAX`], `w = 0`.
    pub fn serialize(&self, profile: Profile) -> Result<String, FieldError> {
        match profile {
            Profile::Draft11 => {
                if self.policies.is_empty() {
                    return Err(FieldError::Empty);
                }
                let list = self
                    .policies
                    .iter()
                    .map(|p| p.to_item().map(ListEntry::Item))
                    .collect::<Result<sfv::List, _>>()?;
                Ok(finish_list(list))
            }
        }
    }

    /// [`RateLimitPolicy::serialize`] as a header value.
    pub fn to_header_value(&self, profile: Profile) -> Result<HeaderValue, FieldError> {
        self.serialize(profile).map(header_value)
    }
}

impl RateLimit {
    /// Parses one combined field value (see [`combine_lines`]).
    pub fn parse(profile: Profile, value: &[u8]) -> Result<RateLimit, FieldError> {
        match profile {
            Profile::Draft11 => {
                let limits = parse_list(value)?
                    .iter()
                    .map(|(i, item)| ServiceLimit::from_item(*i, item))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(RateLimit { limits })
            }
        }
    }

    /// Parses every field line of a message's header section as one field.
    pub fn parse_lines<'a>(
        profile: Profile,
        lines: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<RateLimit, FieldError> {
        RateLimit::parse(profile, &combine_lines(lines))
    }

    /// Reads the field from a header section: `None` when absent or malformed (ignored as a whole).
    pub fn from_headers(profile: Profile, headers: &HeaderMap) -> Option<RateLimit> {
        let lines = headers.get_all(profile.limit_field());
        let mut lines = lines.iter().peekable();
        lines.peek()?;
        RateLimit::parse_lines(profile, lines.map(HeaderValue::as_bytes)).ok()
    }

    /// The field value. Errors (never alters) when a value cannot be represented.
    pub fn serialize(&self, profile: Profile) -> Result<String, FieldError> {
        match profile {
            Profile::Draft11 => {
                if self.limits.is_empty() {
                    return Err(FieldError::Empty);
                }
                let list = self
                    .limits
                    .iter()
                    .map(|l| l.to_item().map(ListEntry::Item))
                    .collect::<Result<sfv::List, _>>()?;
                Ok(finish_list(list))
            }
        }
    }

    /// [`RateLimit::serialize`] as a header value.
    pub fn to_header_value(&self, profile: Profile) -> Result<HeaderValue, FieldError> {
        self.serialize(profile).map(header_value)
    }
}

/// Removes the RateLimit fields from a *trailer* section and says how many lines were dropped.
///
/// Draft-11 Sections 3.1 and 4.1: both fields "MUST NOT appear in a trailer section". A client or
/// intermediary that merges trailers into headers calls this first, so a trailer can never override
/// (or inject) a limit.
pub fn strip_from_trailers(profile: Profile, trailers: &mut HeaderMap) -> usize {
    let mut dropped = 0;
    for name in [profile.policy_field(), profile.limit_field()] {
        if let http::header::Entry::Occupied(e) = trailers.entry(name) {
            dropped += e.iter().count();
            e.remove_entry_mult().1.for_each(drop);
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Profile = Profile::Draft11;

    #[test]
    fn parses_the_drafts_own_policy_example() {
        let p = RateLimitPolicy::parse(
            P,
            br#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#,
        )
        .unwrap();
        assert_eq!(p.policies.len(), 1);
        let q = &p.policies[0];
        assert_eq!(q.name.as_str(), "peruser");
        assert_eq!(q.quota, 65535);
        assert_eq!(q.unit, QuotaUnit::ContentBytes);
        assert_eq!(q.window, Some(10));
        assert!(q.partition_key.is_some());
    }

    #[test]
    fn rejects_what_sfv_accepts_but_the_draft_forbids() {
        for bad in [
            &br#""a";r=-1"#[..],
            br#""a";r=1.5"#,
            br#""a";r="1""#,
            br#""a";t=1"#,
            br#"a;r=1"#,
            br#"("a");r=1"#,
            b"",
            b"   ",
            br#""a";r=1;pk=abc"#,
        ] {
            assert!(
                RateLimit::parse(P, bad).is_err(),
                "{:?} should be rejected",
                String::from_utf8_lossy(bad)
            );
        }
        for bad in [
            &br#""a";q=-1"#[..],
            br#""a";q=1;w=0"#,
            br#""a";q=1;w=1.0"#,
            br#""a";q=1;qu=requests"#,
            br#""a";w=1"#,
        ] {
            assert!(RateLimitPolicy::parse(P, bad).is_err());
        }
    }

    #[test]
    fn serializes_defaults_compactly() {
        let f = RateLimit {
            limits: vec![ServiceLimit {
                name: PolicyName::new("default").unwrap(),
                remaining: 50,
                reset: Some(30),
                partition_key: None,
            }],
        };
        assert_eq!(f.serialize(P).unwrap(), r#""default";r=50;t=30"#);
    }

    #[test]
    fn policy_names_are_versioned_and_printable_ascii() {
        assert_eq!(PolicyName::versioned("api", 2).unwrap().as_str(), "api.v2");
        assert!(PolicyName::new("caf\u{e9}").is_err());
        assert!(PolicyName::new("tab\there").is_err());
        // Quotes and backslashes are fine: sfv escapes them.
        let odd = PolicyName::new(r#"a"b\c"#).unwrap();
        let f = RateLimit {
            limits: vec![ServiceLimit {
                name: odd.clone(),
                remaining: 1,
                reset: None,
                partition_key: None,
            }],
        };
        let wire = f.serialize(P).unwrap();
        assert_eq!(wire, r#""a\"b\\c";r=1"#);
        assert_eq!(RateLimit::parse(P, wire.as_bytes()).unwrap(), f);
    }

    #[test]
    fn strip_from_trailers_removes_every_line() {
        let mut t = HeaderMap::new();
        t.append("ratelimit", HeaderValue::from_static(r#""a";r=1"#));
        t.append("ratelimit", HeaderValue::from_static(r#""b";r=1"#));
        t.append("ratelimit-policy", HeaderValue::from_static(r#""a";q=1"#));
        t.append("x-other", HeaderValue::from_static("1"));
        assert_eq!(strip_from_trailers(P, &mut t), 3);
        assert_eq!(t.len(), 1);
    }
}
