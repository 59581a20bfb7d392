//! What the client tests share: a response's header map from literal pairs, and a pacer whose
//! times are exact (no window jitter).

use bucketproof_headers::client::{Pacer, PacerConfig};
use http::{HeaderMap, HeaderValue};

/// A header map with every `(name, value)` pair appended in order (a name may repeat).
pub fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

/// A pacer without window jitter, seeded with `seed` (its retry jitter), so every time is exact.
pub fn exact_pacer(seed: u64) -> Pacer {
    Pacer::new(
        PacerConfig {
            window_jitter: 0,
            ..PacerConfig::default()
        },
        seed,
    )
}
