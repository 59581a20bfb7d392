//! Writes `reports/mutants.md` (or the path given as the first argument) and prints the kill table.
//! Exits 1 if any mutant survives. The CLI's `bucketproof mutants` will call the same function.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("reports/mutants.md"));
    match bucketproof_mutants::kill::write_report(&path) {
        Ok(kills) => {
            for kill in &kills {
                println!(
                    "{:<32} {:<14} shrunk {:>2} ops  {:>10.3} ms",
                    kill.mutant.name(),
                    kill.violation
                        .as_ref()
                        .map_or("SURVIVED", |v| v.oracle.name()),
                    kill.shrunk_ops.unwrap_or(0),
                    kill.time_to_kill
                        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
                );
            }
            println!("wrote {}", path.display());
            if kills.iter().all(|k| k.killed()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("cannot write {}: {error}", path.display());
            ExitCode::FAILURE
        }
    }
}
