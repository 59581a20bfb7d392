//! Why the subject stops: a broken conversation (exit 2) or a broken pipe (exit 1).
//!
//! Promises: every way a request line can be wrong has its own variant naming the request, so the
//! message on stderr (which the harness shows when the child breaks) says what was wrong and where.
//! A refusal the protocol defines (`invalid_cost`, `key_limit`, ...) is a reply, never one of these.

/// The harness broke the protocol: the subject prints this to stderr and exits with status 2.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The line is not one of the requests of version 1.
    #[error("request {id}: not a valid request: {source}")]
    Malformed {
        /// The id the line should have carried.
        id: u64,
        /// What the parser found.
        source: serde_json::Error,
    },
    /// Input ended in the middle of a line.
    #[error("request {id}: the input ends without the line's newline")]
    Unterminated {
        /// The id the line should have carried.
        id: u64,
    },
    /// Ids count up from 0 over the life of the process.
    #[error("request id {got}: expected {expected} (ids count up from 0)")]
    WrongId {
        /// The next id.
        expected: u64,
        /// The line's.
        got: u64,
    },
    /// The conversation starts with `hello`, once.
    #[error("request {id}: {op} {when}")]
    OutOfOrder {
        /// The request's id.
        id: u64,
        /// The request's op.
        op: &'static str,
        /// What should have come first.
        when: &'static str,
    },
}

/// Why [`crate::transport::serve`] returned early.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A malformed conversation.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// Reading stdin or writing stdout failed (the harness went away).
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl ServeError {
    /// The process's exit status: 2 for a protocol error, 1 for an I/O failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Protocol(_) => 2,
            ServeError::Io(_) => 1,
        }
    }
}
