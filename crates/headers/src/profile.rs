//! Versioned wire profiles.
//!
//! The RateLimit fields are defined by an *Internet-Draft*
//! (draft-ietf-httpapi-ratelimit-headers-11, 23 May 2026), not an RFC. Drafts change their syntax
//! between revisions (draft-07 used a Dictionary, draft-08 moved to Lists of named Items), so every
//! parse and serialize call names the profile it speaks. Adopting a later draft means adding a variant
//! here; code pinned to [`Profile::Draft11`] keeps its exact wire format.

use http::HeaderName;

/// The wire format a parse or serialize call follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Profile {
    /// draft-ietf-httpapi-ratelimit-headers-11 (Internet-Draft, 23 May 2026): `RateLimit-Policy` is a
    /// non-empty List of String-named Items with `q`, `qu`, `w`, `pk`; `RateLimit` is a List of Items
    /// with `r`, `t`, `pk`. Structured Field Values per RFC 9651.
    #[default]
    Draft11,
}

impl Profile {
    /// The draft this profile implements, for documentation and logs.
    pub const fn draft(self) -> &'static str {
        match self {
            Profile::Draft11 => "draft-ietf-httpapi-ratelimit-headers-11",
        }
    }

    /// The name of the field carrying the quota policies.
    pub fn policy_field(self) -> HeaderName {
        match self {
            Profile::Draft11 => HeaderName::from_static("ratelimit-policy"),
        }
    }

    /// The name of the field carrying the current service limits.
    pub fn limit_field(self) -> HeaderName {
        match self {
            Profile::Draft11 => HeaderName::from_static("ratelimit"),
        }
    }
}

/// The problem type of a denial (draft-11 Section 5.1), for `application/problem+json` bodies.
pub const PROBLEM_QUOTA_EXCEEDED: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The problem type of a capacity shortfall (draft-11 Section 5.2), used when the limiter's store is
/// unavailable and the outage policy fails closed.
pub const PROBLEM_TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";
