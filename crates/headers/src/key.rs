//! Limiter keys from what a client sends: checked against a documented rule, then reduced to a
//! fixed-size keyed digest, so what a key costs the limiter does not depend on what the client
//! sent.
//!
//! **What it owns:** the rule a client's key must follow, the typed refusal of a key that does not
//! ([`KeyRejection`], answered by the layer with a 4xx `application/problem+json`, never with a
//! shared bucket), the digest the limiter is keyed by ([`KeyDigest`]) and the library's header
//! extractor ([`HeaderKey`]), which applies all of it by default.
//!
//! **The rule.** A key is the value of exactly one field line of the named header, 1 to
//! [`HeaderKey::max_len`] bytes (default [`MAX_KEY_LEN`]), every byte visible ASCII (`0x21..=0x7E`,
//! the `VCHAR` of RFC 5234: no space, no control, no byte above `0x7E`, so no UTF-8 beyond ASCII).
//! HTTP has already trimmed the value's surrounding whitespace. Refused, each with its own
//! [`KeyRejection`]:
//! - a value longer than the maximum: `431 Request Header Fields Too Large`, checked before any
//!   byte of the value is read, so an over-long value costs nothing beyond what the HTTP server
//!   already spent receiving it;
//! - an empty value, a byte outside visible ASCII, or the header repeated: `400 Bad Request`;
//! - no header at all: `400`, unless [`HeaderKey::anonymous`] is on (below).
//!
//! The problem body says which rule failed and never echoes the key.
//!
//! **The digest.** An accepted key is `HMAC-SHA256(secret, domain || header name || 0x00 || 0x01 ||
//! key)` truncated to 128 bits ([`KEY_DIGEST_LEN`] bytes): a plain 16-byte value the limiter stores
//! inline in its table slot, with nothing on the heap, so a key of 256 bytes costs the limiter
//! exactly what a key of 1 byte costs, and `bucketproof_state_bytes{part="table"}` counts it
//! whole. On a shared store (Redis, PostgreSQL) the digest is its 32 lower-case hex digits, the
//! same on every instance keyed with the same secret. Two distinct keys share a bucket only if
//! their digests collide: among `n` distinct keys that has probability at most `n^2 / 2^129`
//! (about `2^-89` for a million keys, `2^-65` for four billion); and since the hash is keyed by the
//! server's secret, a client cannot search offline for a key that lands in someone else's bucket:
//! each guess succeeds with probability `2^-128`. The raw key is dropped once digested; `pk`
//! ([`crate::pk`]) is derived from the digest, under its own domain, so sharing one secret between
//! the two is safe.
//!
//! **A missing header is not a malformed one.** A malformed key is refused so that no one key can
//! spend another's quota. A request that sends no key at all is a client that did not identify
//! itself; whether such clients are served is the server's choice, so [`HeaderKey::anonymous`]
//! puts them all in one bucket of their own (a digest no header value can have: its input has `0x00 0x00`
//! after the header name where every key's has `0x00 0x01`). Off by default: that bucket is shared by every client
//! without a key, and one of them can spend it for all.

use std::fmt;

use hmac::Hmac;
use http::{HeaderName, StatusCode};
use sha2::Sha256;

use crate::layer::PartitionBytes;
use crate::pk::{self, WeakSecret};
use crate::problem;

/// The default longest key [`HeaderKey`] accepts, in bytes: room for any API key or opaque token
/// id, far below what an HTTP server lets through in one header (hyper: about 100 KB).
pub const MAX_KEY_LEN: usize = 256;

/// Bytes of a [`KeyDigest`].
pub const KEY_DIGEST_LEN: usize = pk::PK_LEN;

/// Domain separation for the limiter key digest; changes if the construction ever does.
const DOMAIN: &[u8] = b"bucketproof-key/v1\x00";

/// The tag after the header name of a key's digest input, and of the anonymous bucket's.
const KEYED: &[u8] = &[0, 1];
const ANONYMOUS: &[u8] = &[0, 0];

/// The fixed-size keyed digest of a client's key ([`HeaderKey`]): what the limiter is keyed by.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyDigest([u8; KEY_DIGEST_LEN]);

// The promise of the module: a key costs the limiter these bytes inline, and nothing elsewhere.
const _: () = assert!(size_of::<KeyDigest>() == KEY_DIGEST_LEN);

impl KeyDigest {
    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_DIGEST_LEN] {
        &self.0
    }

    /// The digest as 32 lower-case hex digits: how a shared store names the key.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyDigest({self})")
    }
}

impl PartitionBytes for KeyDigest {
    fn partition_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.0)
    }
}

/// Why a request's key was refused: the layer answers [`KeyRejection::status`] with the problem
/// body [`KeyRejection::problem`], and neither decides nor calls the inner service.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyRejection {
    /// No field line of the header (and no anonymous bucket).
    #[error("the request has no {header} header")]
    Missing {
        /// The key's header.
        header: HeaderName,
    },
    /// More than one field line of the header: which is the key is ambiguous.
    #[error("the request has {count} {header} headers; exactly one is accepted")]
    Repeated {
        /// The key's header.
        header: HeaderName,
        /// How many field lines it has.
        count: usize,
    },
    /// The header's value is empty.
    #[error("the {header} header is empty")]
    Empty {
        /// The key's header.
        header: HeaderName,
    },
    /// The header's value is longer than the maximum.
    #[error("the {header} header is {len} bytes; at most {max} are accepted")]
    TooLong {
        /// The key's header.
        header: HeaderName,
        /// The value's length in bytes.
        len: usize,
        /// The longest key accepted ([`HeaderKey::max_len`]).
        max: usize,
    },
    /// A byte of the value is not visible ASCII.
    #[error("byte {at} of the {header} header is not visible ASCII (0x21 to 0x7E)")]
    Malformed {
        /// The key's header.
        header: HeaderName,
        /// The offset of the first such byte.
        at: usize,
    },
}

impl KeyRejection {
    /// `431 Request Header Fields Too Large` for a value over the maximum, `400 Bad Request` for
    /// every other refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            KeyRejection::TooLong { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The `application/problem+json` body: which rule the key broke, never the key itself.
    pub fn problem(&self) -> String {
        problem::key_refused(self.status(), &format!("Rejected key: {self}."))
    }
}

/// Where the layer finds a request's limiter key ([`crate::layer::RateLimitLayer::keyed`]): the
/// key, or why the request is refused before any decision.
pub trait KeyExtractor<K>: Send + Sync + 'static {
    /// The limiter key of the request whose head is `head`.
    fn extract(&self, head: &http::request::Parts) -> Result<K, KeyRejection>;
}

impl<K, F> KeyExtractor<K> for F
where
    F: Fn(&http::request::Parts) -> Result<K, KeyRejection> + Send + Sync + 'static,
{
    fn extract(&self, head: &http::request::Parts) -> Result<K, KeyRejection> {
        self(head)
    }
}

/// The library's key extractor: the value of one header, checked against the module's rule and
/// keyed by its [`KeyDigest`].
///
/// ```
/// use bucketproof_headers::key::{HeaderKey, KeyRejection, MAX_KEY_LEN};
/// use http::HeaderName;
///
/// let key = HeaderKey::new(HeaderName::from_static("x-api-key"), b"a secret of 16 bytes or more")?;
/// assert_eq!(key.digest(b"alice")?, key.digest(b"alice")?);
/// assert_ne!(key.digest(b"alice")?, key.digest(b"bob")?);
/// assert!(matches!(key.digest("café".as_bytes()), Err(KeyRejection::Malformed { at: 3, .. })));
/// assert!(matches!(key.digest(&[b'k'; MAX_KEY_LEN + 1]), Err(KeyRejection::TooLong { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct HeaderKey {
    header: HeaderName,
    max_len: usize,
    mac: Hmac<Sha256>,
    anonymous: Option<KeyDigest>,
}

impl fmt::Debug for HeaderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (f.debug_struct("HeaderKey"))
            .field("header", &self.header)
            .field("max_len", &self.max_len)
            .field("anonymous", &self.anonymous.is_some())
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl HeaderKey {
    /// Keys from `header`, digested under `secret` (at least [`pk::MIN_SECRET_LEN`] bytes; the
    /// same on every instance sharing a store), at most [`MAX_KEY_LEN`] bytes, no anonymous bucket.
    pub fn new(header: HeaderName, secret: &[u8]) -> Result<HeaderKey, WeakSecret> {
        Ok(HeaderKey {
            header,
            max_len: MAX_KEY_LEN,
            mac: pk::keyed_mac(secret)?,
            anonymous: None,
        })
    }

    /// The longest key accepted, in bytes (at least 1: a maximum of 0 is taken as 1). Longer
    /// values are refused with 431. The digest is fixed-size whatever the maximum; a larger one
    /// only makes the server hash more bytes per request.
    pub fn max_len(mut self, bytes: usize) -> HeaderKey {
        self.max_len = bytes.max(1);
        self
    }

    /// Requests without the header share one bucket instead of being refused (see the module
    /// docs). A malformed or repeated header is still refused.
    pub fn anonymous(mut self) -> HeaderKey {
        let bucket = pk::digest(
            &self.mac,
            &[DOMAIN, self.header.as_str().as_bytes(), ANONYMOUS],
        );
        self.anonymous = Some(KeyDigest(bucket));
        self
    }

    /// The header the key is read from.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// The digest of the key `value`, or why the module's rule refuses it: for a key found
    /// somewhere other than one header (a cookie, a path segment), by the caller's own extractor.
    pub fn digest(&self, value: &[u8]) -> Result<KeyDigest, KeyRejection> {
        let header = || self.header.clone();
        // The length first: an over-long value is refused without reading it.
        if value.len() > self.max_len {
            return Err(KeyRejection::TooLong {
                header: header(),
                len: value.len(),
                max: self.max_len,
            });
        }
        if value.is_empty() {
            return Err(KeyRejection::Empty { header: header() });
        }
        if let Some(at) = value.iter().position(|b| !(0x21..=0x7e).contains(b)) {
            return Err(KeyRejection::Malformed {
                header: header(),
                at,
            });
        }
        let name = self.header.as_str().as_bytes();
        Ok(KeyDigest(pk::digest(
            &self.mac,
            &[DOMAIN, name, KEYED, value],
        )))
    }
}

impl KeyExtractor<KeyDigest> for HeaderKey {
    fn extract(&self, head: &http::request::Parts) -> Result<KeyDigest, KeyRejection> {
        let mut values = head.headers.get_all(&self.header).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => self.digest(value.as_bytes()),
            (None, _) => self.anonymous.ok_or_else(|| KeyRejection::Missing {
                header: self.header.clone(),
            }),
            (Some(_), Some(_)) => Err(KeyRejection::Repeated {
                header: self.header.clone(),
                count: head.headers.get_all(&self.header).iter().count(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> HeaderKey {
        HeaderKey::new(HeaderName::from_static("x-api-key"), &[7; 32]).unwrap()
    }

    fn head(values: &[&[u8]]) -> http::request::Parts {
        let mut builder = http::Request::builder();
        for v in values {
            builder = builder.header("x-api-key", http::HeaderValue::from_bytes(v).unwrap());
        }
        builder.body(()).unwrap().into_parts().0
    }

    /// Every byte outside visible ASCII is refused at its offset; every visible ASCII byte is
    /// accepted, alone or at the maximum length.
    #[test]
    fn the_rule_is_visible_ascii_of_one_to_max_bytes() {
        let k = key().max_len(4);
        for b in 0..=255u8 {
            let got = k.digest(&[b'a', b]);
            if (0x21..=0x7e).contains(&b) {
                assert!(got.is_ok(), "{b:#x}");
            } else {
                assert!(
                    matches!(got, Err(KeyRejection::Malformed { at: 1, .. })),
                    "{b:#x}"
                );
            }
        }
        assert!(k.digest(b"abcd").is_ok());
        let long = k.digest(b"abcde").unwrap_err();
        assert!(matches!(long, KeyRejection::TooLong { len: 5, max: 4, .. }));
        assert_eq!(long.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let empty = k.digest(b"").unwrap_err();
        assert!(matches!(empty, KeyRejection::Empty { .. }));
        assert_eq!(empty.status(), StatusCode::BAD_REQUEST);
        assert_eq!(key().max_len(0).digest(b"a"), key().digest(b"a"));
    }

    /// The digest is keyed (another secret, another digest) and bound to the header; a missing
    /// header is refused unless anonymous is on, and the anonymous bucket is no key's.
    #[test]
    fn digests_are_keyed_and_the_anonymous_bucket_is_apart() {
        let other = HeaderKey::new(HeaderName::from_static("x-api-key"), &[8; 32]).unwrap();
        let renamed = HeaderKey::new(HeaderName::from_static("x-user"), &[7; 32]).unwrap();
        assert_ne!(key().digest(b"alice"), other.digest(b"alice"));
        assert_ne!(key().digest(b"alice"), renamed.digest(b"alice"));
        assert_eq!(
            key().digest(b"alice").unwrap().to_hex().len(),
            2 * KEY_DIGEST_LEN
        );

        assert!(matches!(
            key().extract(&head(&[])),
            Err(KeyRejection::Missing { .. })
        ));
        let anonymous = key().anonymous().extract(&head(&[])).unwrap();
        assert_ne!(Ok(anonymous), key().digest(b"anonymous"));
        assert_eq!(
            key().anonymous().extract(&head(&[b"alice"])),
            key().digest(b"alice")
        );
        let twice = key().anonymous().extract(&head(&[b"alice", b"bob"]));
        assert!(matches!(
            twice,
            Err(KeyRejection::Repeated { count: 2, .. })
        ));
        let blank = key().anonymous().extract(&head(&[b""]));
        assert!(matches!(blank, Err(KeyRejection::Empty { .. })));
    }

    /// The problem body names the rule, never the key.
    #[test]
    fn problems_never_echo_the_key() {
        let refused = key().digest(b"secret key").unwrap_err();
        let body: serde_json::Value = serde_json::from_str(&refused.problem()).unwrap();
        assert_eq!(body["status"], 400);
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains("byte 6") && !detail.contains("secret"),
            "{detail}"
        );
        assert!(!format!("{:?}", key()).contains("7, 7"));
    }
}
