//! Retry-after tightness: with no other traffic, the denied request succeeds at `now + retry_after`
//! and fails 1 ns earlier. Asked of the subject itself through its side-effect-free
//! [`Subject::would_allow`], so it holds for any subject that can answer without changing state (and
//! is skipped for one that cannot).

use super::{OracleKind, Violation};
use crate::subject::Subject;
use crate::trace::Acquire;

/// Checks a denial of `denied` that said "retry after `wait` ns": the same acquire, moved to
/// `denied.now + wait`, is asked of [`Subject::would_allow`].
pub fn check(subject: &mut dyn Subject, denied: Acquire, wait: u64) -> Option<Violation> {
    let at = |now: u64| Acquire { now, ..denied };
    let Some(retry_at) = denied.now.checked_add(wait) else {
        return Some(Violation::new(
            OracleKind::RetryAfter,
            "retry_after points past the end of the clock",
            "never",
            format!("{wait}ns"),
        ));
    };
    if subject.would_allow(at(retry_at)) == Some(false) {
        return Some(Violation::new(
            OracleKind::RetryAfter,
            "retrying at now + retry_after is denied",
            format!("allowed at {retry_at}"),
            "denied",
        ));
    }
    if wait > 0 && subject.would_allow(at(retry_at - 1)) == Some(true) {
        return Some(Violation::new(
            OracleKind::RetryAfter,
            "retry_after is not tight: 1 ns earlier is already allowed",
            format!("denied at {}", retry_at - 1),
            "allowed",
        ));
    }
    None
}

/// The safety profile's form: the retry-after is never earlier than the subject's own next success,
/// so the same acquire succeeds at `denied.now + wait + slack` (`slack`: one step of the subject's
/// time resolution when it does not round its retry-after up). Tightness is not asked.
pub fn check_not_early(
    subject: &mut dyn Subject,
    denied: Acquire,
    wait: u64,
    slack: u64,
) -> Option<Violation> {
    let retry_at = denied.now.checked_add(wait)?.saturating_add(slack);
    (subject.would_allow(Acquire {
        now: retry_at,
        ..denied
    }) == Some(false))
    .then(|| {
        Violation::new(
            OracleKind::RetryAfter,
            "retrying at now + retry_after is denied: the retry-after is earlier than the next success",
            format!("allowed at {retry_at}"),
            "denied",
        )
    })
}
