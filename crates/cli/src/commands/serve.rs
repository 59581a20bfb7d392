//! `bucketproof serve SUBJECT`: a subject of this binary behind the subject protocol on stdin and
//! stdout (the harness's `serve`); stdout carries replies only, so nothing else is printed there.

use std::io::{BufReader, BufWriter};

use bucketproof_protocol::serve::serve as serve_protocol;

use crate::fatal::Fatal;
use crate::project;

/// Serves `subject` until stdin ends.
pub fn serve(subject: &str) -> Result<u8, Fatal> {
    let registry = project::registry()?;
    let input = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let output = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    serve_protocol(&registry, subject, input, output)?;
    Ok(0)
}
