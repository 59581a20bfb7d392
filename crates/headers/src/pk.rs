//! Partition keys (`pk`) as an opaque keyed hash of the limiter key.
//!
//! Draft-11 Section 6.1 says servers "should avoid returning partition keys that contain sensitive
//! information". The limiter key is usually a user id, an API key or an email: it must never reach the
//! wire. `pk` is therefore `HMAC-SHA256(secret, domain || policy || 0x00 || key)`, truncated to 16 bytes:
//! - keyed with a server secret, so a client cannot confirm a guess of someone else's id offline;
//! - bound to the policy name, so the same user gets unrelated keys under unrelated policies;
//! - stable for the same (secret, policy, key), so a client can correlate its own responses;
//! - 128 bits, enough to make collisions between partitions negligible and short on the wire.
//!
//! The secret is redacted from `Debug` output.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::field::PolicyName;

/// Domain separation for this construction; changes if the construction ever does.
const DOMAIN: &[u8] = b"bucketproof-pk/v1\x00";

/// Bytes of the HMAC output kept on the wire.
pub const PK_LEN: usize = 16;

/// The shortest secret accepted: 16 bytes (128 bits).
pub const MIN_SECRET_LEN: usize = 16;

/// A secret that is too short to key the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("partition key secret must be at least {MIN_SECRET_LEN} bytes, got {0}")]
pub struct WeakSecret(pub usize);

/// Derives `pk` values from limiter keys with a server secret.
#[derive(Clone)]
pub struct PartitionKeyHasher {
    mac: Hmac<Sha256>,
}

impl fmt::Debug for PartitionKeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PartitionKeyHasher { secret: <redacted> }")
    }
}

impl PartitionKeyHasher {
    /// A hasher keyed by `secret` (at least [`MIN_SECRET_LEN`] bytes, e.g. 32 random bytes loaded from
    /// the server's secret store).
    pub fn new(secret: &[u8]) -> Result<PartitionKeyHasher, WeakSecret> {
        Ok(PartitionKeyHasher {
            mac: keyed_mac(secret)?,
        })
    }

    /// The partition key for `key` under `policy`.
    pub fn partition_key(&self, policy: &PolicyName, key: &[u8]) -> Vec<u8> {
        digest(&self.mac, &[DOMAIN, policy.as_str().as_bytes(), &[0], key]).to_vec()
    }
}

/// HMAC-SHA256 keyed by `secret`, refused below [`MIN_SECRET_LEN`] bytes: the one keying of every
/// keyed hash of this crate (`pk` here, the limiter keys of [`crate::key`]).
pub(crate) fn keyed_mac(secret: &[u8]) -> Result<Hmac<Sha256>, WeakSecret> {
    if secret.len() < MIN_SECRET_LEN {
        return Err(WeakSecret(secret.len()));
    }
    // HMAC accepts keys of any length; the error arm is unreachable for HMAC, mapped anyway.
    Hmac::<Sha256>::new_from_slice(secret).map_err(|_| WeakSecret(secret.len()))
}

/// The first [`PK_LEN`] bytes of `mac` over the concatenation of `pieces`. Each caller starts its
/// pieces with its own domain string, so two constructions never hash the same input.
pub(crate) fn digest(mac: &Hmac<Sha256>, pieces: &[&[u8]]) -> [u8; PK_LEN] {
    let mut mac = mac.clone();
    for piece in pieces {
        mac.update(piece);
    }
    let out = mac.finalize().into_bytes();
    let mut kept = [0; PK_LEN];
    kept.copy_from_slice(&out[..PK_LEN]);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_keyed_and_policy_bound() {
        let p = PolicyName::new("api.v1").unwrap();
        let q = PolicyName::new("api.v2").unwrap();
        let a = PartitionKeyHasher::new(&[7; 32]).unwrap();
        let b = PartitionKeyHasher::new(&[8; 32]).unwrap();
        let k = b"alice@example.com";
        assert_eq!(a.partition_key(&p, k), a.partition_key(&p, k));
        assert_eq!(a.partition_key(&p, k).len(), PK_LEN);
        assert_ne!(a.partition_key(&p, k), b.partition_key(&p, k));
        assert_ne!(a.partition_key(&p, k), a.partition_key(&q, k));
        assert_ne!(
            a.partition_key(&p, k),
            a.partition_key(&p, b"bob@example.com")
        );
    }

    #[test]
    fn short_secrets_are_refused_and_secrets_never_printed() {
        assert_eq!(
            PartitionKeyHasher::new(b"short").unwrap_err(),
            WeakSecret(5)
        );
        let h = PartitionKeyHasher::new(b"0123456789abcdef-secret").unwrap();
        assert!(!format!("{h:?}").contains("0123456789"));
    }
}
