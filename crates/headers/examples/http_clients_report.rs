//! Regenerates `reports/http-clients.md`: pacing vs naive clients against the exact limiter.
//!
//! Deterministic (virtual time, seeded streams): running it twice writes the same bytes.
//! `cargo run -p bucketproof-headers --example http_clients_report [-- OUTPUT_PATH]`

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../reports/http-clients.md");
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or(default);
    let report =
        bucketproof_headers::sim::render_report(&bucketproof_headers::sim::report_scenarios())?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, report)?;
    println!("wrote {}", path.display());
    Ok(())
}
