//! The two output streams. Results go to stdout through [`Out`]; progress, notes and errors go to
//! stderr through [`note`].
//!
//! Promise: a closed stream never panics and never changes the exit code. When the reader of stdout
//! goes away (`bucketproof run x | head -1`), the rest of the output is dropped and the command
//! finishes its work (files it writes are still written) and exits with the code it would have had.
//! A closed stderr drops notes silently: there is nowhere left to report anything.

use std::fmt::Display;
use std::io::{ErrorKind, Write};

use crate::fatal::Fatal;

/// Standard output for a command's results.
#[derive(Default)]
pub struct Out {
    /// The reader went away: drop the rest.
    closed: bool,
}

impl Out {
    /// Writes `text` and flushes it (so a closed pipe shows up here, not in a panic at exit).
    pub fn print(&mut self, text: &str) -> Result<(), Fatal> {
        if self.closed {
            return Ok(());
        }
        let mut stdout = std::io::stdout().lock();
        match stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
        {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(error) => Err(Fatal(format!("cannot write to stdout: {error}"))),
        }
    }

    /// Writes `text` and a newline.
    pub fn line(&mut self, text: impl Display) -> Result<(), Fatal> {
        self.print(&format!("{text}\n"))
    }
}

/// One line on stderr; dropped if stderr is closed.
pub fn note(line: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
