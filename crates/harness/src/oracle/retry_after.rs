//! Retry-after tightness: with no other traffic, the denied request succeeds at `now + retry_after`
//! and fails 1 ns earlier. Asked of the subject itself through its side-effect-free
//! [`Subject::would_allow`], so it holds for any subject that can answer without changing state (and
//! is skipped for one that cannot).

use super::{OracleKind, Violation};
use crate::subject::Subject;

/// Checks a denial of `cost` on `key` at `at` that said "retry after `wait` ns".
pub fn check(
    subject: &mut dyn Subject,
    key: u64,
    at: u64,
    cost: u64,
    wait: u64,
) -> Option<Violation> {
    let Some(retry_at) = at.checked_add(wait) else {
        return Some(Violation::new(
            OracleKind::RetryAfter,
            "retry_after points past the end of the clock",
            "never",
            format!("{wait}ns"),
        ));
    };
    if subject.would_allow(key, retry_at, cost) == Some(false) {
        return Some(Violation::new(
            OracleKind::RetryAfter,
            "retrying at now + retry_after is denied",
            format!("allowed at {retry_at}"),
            "denied",
        ));
    }
    if wait > 0 && subject.would_allow(key, retry_at - 1, cost) == Some(true) {
        return Some(Violation::new(
            OracleKind::RetryAfter,
            "retry_after is not tight: 1 ns earlier is already allowed",
            format!("denied at {}", retry_at - 1),
            "allowed",
        ));
    }
    None
}
