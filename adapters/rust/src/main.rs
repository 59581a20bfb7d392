//! `bucketproof-rust-subject`: bucketproof's keyed limiter as a subject of `bucketproof check`,
//! speaking the subject protocol, version 1 (docs/subject-protocol.md), on stdin and stdout.
//!
//! Map: `values` (the protocol's value types), `request` and `reply` (its messages), `parse` (a line into a request), `subject`
//! (the trait a limiter implements), `core` (bucketproof's limiter behind it), `session` (the
//! conversation), `transport` (batched lines), `error` (why it stops). To serve another limiter,
//! implement `Subject` for it in place of `core::Core`.
//!
//! Promises: it takes no arguments and never reads a clock; stdout carries replies only, stderr
//! the reason it stopped; exit status 0 when stdin ends, 2 on a malformed conversation, 1 when
//! stdin or stdout fails.

mod core;
mod error;
mod parse;
mod reply;
mod request;
mod session;
mod subject;
mod transport;
mod values;

use std::io;
use std::process::ExitCode;

fn main() -> ExitCode {
    let name = env!("CARGO_PKG_NAME");
    if std::env::args_os().len() > 1 {
        eprintln!("usage: {name} (no arguments; speaks the subject protocol on stdin/stdout)");
        return ExitCode::from(2);
    }
    match transport::serve::<core::Core>(io::stdin().lock(), io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{name}: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
