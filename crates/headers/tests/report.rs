//! `reports/http-clients.md` is generated, deterministic and current, and says what we claim.

use bucketproof_headers::sim::{self, Population};

#[test]
fn committed_report_is_current() {
    let generated = sim::render_report(&sim::report_scenarios()).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../reports/http-clients.md");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "reports/http-clients.md is stale: run `cargo run -p bucketproof-headers --example http_clients_report`"
    );
}

#[test]
fn pacing_beats_naive_on_every_scenario() {
    for s in sim::report_scenarios() {
        let pacing = sim::run(&s, Population::Pacing).unwrap();
        let naive = sim::run(&s, Population::Naive).unwrap();
        // Fewer 429s per attempt, less retry amplification, at least as many requests served.
        assert!(
            pacing.throttled * naive.attempts < naive.throttled * pacing.attempts,
            "{}: pacing {:?} naive {:?}",
            s.name,
            (pacing.throttled, pacing.attempts),
            (naive.throttled, naive.attempts)
        );
        assert!(
            pacing.attempts * naive.logical < naive.attempts * pacing.logical,
            "{}",
            s.name
        );
        assert!(
            pacing.succeeded * naive.logical >= naive.succeeded * pacing.logical,
            "{}",
            s.name
        );
        if s.clients == 1 || !s.shared_bucket {
            assert_eq!(
                pacing.throttled, 0,
                "{}: a lone pacing client never sees a 429",
                s.name
            );
        }
    }
}
