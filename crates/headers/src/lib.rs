//! # bucketproof-headers: the HTTP contract of bucketproof
//!
//! Servers tell clients about their limits with the `RateLimit-Policy` and `RateLimit` fields of
//! **draft-ietf-httpapi-ratelimit-headers-11** (23 May 2026). That document is an active
//! **Internet-Draft, not an RFC**: it can still change. Every wire operation therefore names a
//! versioned [`Profile`] (today only [`Profile::Draft11`]) so a later draft can be added without
//! changing what existing users send.
//!
//! What lives here:
//! - [`field`]: the two fields as typed values, parsed and serialized with the `sfv` crate, with the
//!   draft's type and range rules checked on top (a malformed field is ignored as a whole);
//! - [`legacy`]: a clearly separated reader for the draft-07 Dictionary form and `X-RateLimit-*`;
//! - [`mapping`]: limiter decisions to field values, every rounding chosen so the advertised picture
//!   is never more permissive than the limiter;
//! - [`key`]: limiter keys from a client's header, checked (visible ASCII, at most
//!   [`key::MAX_KEY_LEN`] bytes, refused with a 4xx problem otherwise, never pooled) and reduced to
//!   a fixed-size keyed digest, so a key costs the limiter the same bytes whatever its length;
//! - [`pk`]: partition keys as a keyed hash (HMAC-SHA256) of the limiter key, never the raw id;
//! - [`merge`]: how an intermediary combines an origin's fields with its own stricter limiter;
//! - [`source`] and [`layer`]: a tower `Layer` that limits requests with a keyed limiter (in
//!   memory, or shared by every instance in Redis or PostgreSQL), and can reserve an estimated cost
//!   at admission and settle it on the response ([`layer::RateLimitLayer::settle`]), on any of them;
//!   `layer_metrics` (feature `metrics`): the layer's numbers per response through the `metrics`
//!   facade (responses by status, fallback-decided ones, advertised next to enforced limits);
//! - [`set`]: a key of several bandwidths on the wire: one item per bandwidth in each field, named
//!   after it (unnamed ones get a generated key no bandwidth name can equal), `Retry-After` from the
//!   combined wait; a key of one unnamed bandwidth is sent exactly as before;
//! - [`client`]: a pacing helper that reads the fields, `Retry-After` and `Age`, and with several
//!   items waits until every one of them allows the request;
//! - [`sim`]: a deterministic simulation of pacing and naive clients against the exact limiter.
//!
//! ```
//! use bucketproof_headers::{PolicyName, Profile, RateLimit, ServiceLimit};
//!
//! // Parsing checks what sfv lets through but the draft forbids: `r=-1`, `r=1.5`, Tokens as names.
//! let field = RateLimit::parse(Profile::Draft11, br#""default";r=50;t=30"#).unwrap();
//! assert_eq!(field.limits[0].remaining, 50);
//! assert!(RateLimit::parse(Profile::Draft11, br#""default";r=-1"#).is_err());
//!
//! // Serializing refuses what it cannot represent instead of altering it.
//! let ours = RateLimit {
//!     limits: vec![ServiceLimit {
//!         name: PolicyName::versioned("api", 1).unwrap(),
//!         remaining: 7,
//!         reset: Some(2),
//!         partition_key: None,
//!     }],
//! };
//! assert_eq!(ours.serialize(Profile::Draft11).unwrap(), r#""api.v1";r=7;t=2"#);
//! ```

// On docs.rs (`--cfg docsrs`, nightly), items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod client;
pub mod field;
pub mod key;
pub mod layer;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod layer_metrics;
pub mod legacy;
pub mod mapping;
pub mod merge;
mod outcome;
pub mod pk;
pub mod problem;
pub mod profile;
pub mod set;
pub mod sim;
pub mod source;

pub use field::{
    FieldError, PolicyName, QuotaPolicy, QuotaUnit, RateLimit, RateLimitPolicy, ServiceLimit,
};
pub use profile::Profile;
