//! Bounded line reading for both ends of the subject protocol: a line never costs more memory than
//! its cap, whatever the other side sends.
//!
//! Owns the one reader of newline-terminated lines from a pipe ([`LineReader`]). Promises: a line
//! longer than the cap is reported ([`Line::TooLong`]) after reading at most `cap + 1` of its bytes,
//! or, when clipping ([`Overflow::Clip`], for stderr), kept to its first `cap` bytes with the rest
//! skipped unbuffered; a line that is not UTF-8 is reported with the offset of its first bad byte;
//! the bytes of a line not yet ended are counted where another thread can read them (to say "sent a
//! line without its newline" instead of "said nothing").

use std::io::{self, BufRead};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What to do with the part of a line past the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Stop: the line is [`Line::TooLong`] and nothing after it is read.
    Stop,
    /// Keep the first `cap` bytes and skip the rest of the line (for diagnostics such as stderr).
    Clip,
}

/// One read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line, without its `\n` (and `\r`).
    Text(String),
    /// A line longer than the cap (with [`Overflow::Stop`]).
    TooLong {
        /// The cap it passed.
        cap: usize,
    },
    /// A line that is not UTF-8.
    NotUtf8 {
        /// The offset of its first invalid byte.
        at: usize,
        /// Its first bytes, lossily decoded, for the message.
        start: String,
    },
    /// The pipe ended (a last line without a newline is returned as [`Line::Text`] first).
    End,
}

/// Reads capped lines from `inner`.
pub struct LineReader<R> {
    inner: R,
    cap: usize,
    overflow: Overflow,
    line: Vec<u8>,
    partial: Arc<AtomicUsize>,
}

impl<R: BufRead> LineReader<R> {
    /// A reader of lines of at most `cap` bytes (at least 1).
    pub fn new(inner: R, cap: usize, overflow: Overflow) -> LineReader<R> {
        LineReader {
            inner,
            cap: cap.max(1),
            overflow,
            line: Vec::new(),
            partial: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The bytes of the line being read that arrived without their newline yet (0 between lines).
    pub fn partial(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.partial)
    }

    /// The reader underneath (to see what it has buffered).
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The next line.
    pub fn read(&mut self) -> io::Result<Line> {
        self.line.clear();
        self.partial.store(0, Ordering::Relaxed);
        let mut clipped = false;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                self.partial.store(0, Ordering::Relaxed);
                return Ok(if self.line.is_empty() && !clipped {
                    Line::End
                } else {
                    self.finish()
                });
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            let room = self.cap - self.line.len().min(self.cap);
            let kept = if chunk.len() > room {
                match self.overflow {
                    // At most `cap + 1` bytes were looked at: enough to know it is too long.
                    Overflow::Stop => return Ok(Line::TooLong { cap: self.cap }),
                    Overflow::Clip => {
                        clipped = true;
                        &chunk[..room]
                    }
                }
            } else {
                chunk
            };
            self.line.extend_from_slice(kept);
            let length = chunk.len();
            self.inner.consume(length + usize::from(newline.is_some()));
            if newline.is_some() {
                self.partial.store(0, Ordering::Relaxed);
                return Ok(self.finish());
            }
            self.partial.fetch_add(length, Ordering::Relaxed);
        }
    }

    fn finish(&mut self) -> Line {
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        let line = std::mem::take(&mut self.line);
        match String::from_utf8(line) {
            Ok(text) => Line::Text(text),
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                let bytes = e.into_bytes();
                let start = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
                Line::NotUtf8 { at, start }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], cap: usize, overflow: Overflow) -> Vec<Line> {
        let mut reader = LineReader::new(io::BufReader::with_capacity(3, input), cap, overflow);
        let mut lines = Vec::new();
        loop {
            let line = reader.read().unwrap();
            let end = matches!(line, Line::End | Line::TooLong { .. });
            lines.push(line);
            if end {
                return lines;
            }
        }
    }

    fn text(s: &str) -> Line {
        Line::Text(s.to_owned())
    }

    #[test]
    fn lines_within_the_cap_read_whole_whatever_the_buffer() {
        assert_eq!(
            all(b"ab\r\ncdef\n\nlast", 4, Overflow::Stop),
            [text("ab"), text("cdef"), text(""), text("last"), Line::End]
        );
    }

    #[test]
    fn a_line_past_the_cap_stops_or_is_clipped() {
        assert_eq!(
            all(b"abcd\nabcde\nx\n", 4, Overflow::Stop),
            [text("abcd"), Line::TooLong { cap: 4 }]
        );
        assert_eq!(
            all(b"abcdefghij\nx\n", 4, Overflow::Clip),
            [text("abcd"), text("x"), Line::End]
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_names_its_first_bad_byte() {
        let lines = all(b"ok\nab\xff\xfe\n", 64, Overflow::Stop);
        assert_eq!(lines[0], text("ok"));
        assert!(
            matches!(&lines[1], Line::NotUtf8 { at: 2, .. }),
            "{lines:?}"
        );
    }

    #[test]
    fn bytes_without_a_newline_are_counted_as_partial() {
        let mut reader = LineReader::new(&b"abc"[..], 64, Overflow::Stop);
        let partial = reader.partial();
        assert_eq!(reader.read().unwrap(), text("abc"));
        assert_eq!(partial.load(Ordering::Relaxed), 0);
    }
}
