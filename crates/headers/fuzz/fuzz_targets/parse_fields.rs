//! Every reader of rate-limit information, fed arbitrary bytes: none may panic, and whatever parses
//! must serialize and parse back to the same value.
#![no_main]

use bucketproof_headers::client::{Pacer, PacerConfig};
use bucketproof_headers::legacy::{self, ResetFormat};
use bucketproof_headers::{Profile, RateLimit, RateLimitPolicy};
use http::{HeaderMap, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;

const P: Profile = Profile::Draft11;

fuzz_target!(|data: &[u8]| {
    // Split the input into up to three field lines at 0xFF bytes (never valid in a field value).
    let lines: Vec<&[u8]> = data.split(|b| *b == 0xff).take(3).collect();

    if let Ok(policy) = RateLimitPolicy::parse_lines(P, lines.iter().copied()) {
        let wire = policy.serialize(P).expect("a parsed policy serializes");
        assert_eq!(RateLimitPolicy::parse(P, wire.as_bytes()).as_ref(), Ok(&policy));
    }
    if let Ok(limit) = RateLimit::parse_lines(P, lines.iter().copied()) {
        let wire = limit.serialize(P).expect("a parsed limit serializes");
        assert_eq!(RateLimit::parse(P, wire.as_bytes()).as_ref(), Ok(&limit));
    }

    let mut headers = HeaderMap::new();
    let names = ["ratelimit", "ratelimit-policy", "retry-after", "age", "date", "x-ratelimit-reset"];
    for (name, line) in names.iter().zip(lines.iter().cycle()) {
        if let Ok(v) = HeaderValue::from_bytes(line) {
            headers.append(*name, v);
        }
    }
    let _ = legacy::read_any(&headers, ResetFormat::Heuristic { now_unix: Some(1_700_000_000) });
    let mut pacer = Pacer::new(PacerConfig::default(), 0);
    let obs = pacer.observe(1, StatusCode::TOO_MANY_REQUESTS, &headers);
    assert!(obs.next_at >= 1);
});
