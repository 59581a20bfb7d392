//! Retry-after tightness: with no other traffic, the denied request succeeds at `now + retry_after`
//! and fails 1 ns earlier. Asked of the subject itself through its side-effect-free
//! [`Subject::would_allow`], so it holds for any subject that can answer without changing state (and
//! is skipped for one that cannot).

use super::{OracleKind, Violation};
use bucketproof_trace::subject::Subject;
use bucketproof_trace::trace::Acquire;

/// What one retry-after check came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probed {
    /// The subject could not be asked (no `would_allow`): nothing was judged.
    NotAsked,
    /// Asked, and the wait held.
    Held,
    /// Asked, and the wait was wrong.
    Violated(Violation),
}

impl Probed {
    /// From the answers to the asks (`None`: not answered) and the violation they showed.
    fn of(answered: bool, violation: Option<Violation>) -> Probed {
        match (answered, violation) {
            (_, Some(violation)) => Probed::Violated(violation),
            (true, None) => Probed::Held,
            (false, None) => Probed::NotAsked,
        }
    }

    /// The violation, if any.
    pub fn violation(self) -> Option<Violation> {
        match self {
            Probed::Violated(violation) => Some(violation),
            _ => None,
        }
    }
}

/// Checks a denial of `denied` that said "retry after `wait` ns": the same acquire, moved to
/// `denied.now + wait`, is asked of [`Subject::would_allow`].
pub fn check(subject: &mut dyn Subject, denied: Acquire, wait: u64) -> Probed {
    let at = |now: u64| Acquire { now, ..denied };
    let Some(retry_at) = denied.now.checked_add(wait) else {
        return Probed::Violated(Violation::new(
            OracleKind::RetryAfter,
            "retry_after points past the end of the clock",
            "never",
            format!("{wait}ns"),
        ));
    };
    let at_retry = subject.would_allow(at(retry_at));
    if at_retry == Some(false) {
        return Probed::Violated(Violation::new(
            OracleKind::RetryAfter,
            "retrying at now + retry_after is denied",
            format!("allowed at {retry_at}"),
            "denied",
        ));
    }
    if wait > 0 && subject.would_allow(at(retry_at - 1)) == Some(true) {
        return Probed::Violated(Violation::new(
            OracleKind::RetryAfter,
            "retry_after is not tight: 1 ns earlier is already allowed",
            format!("denied at {}", retry_at - 1),
            "allowed",
        ));
    }
    Probed::of(at_retry.is_some(), None)
}

/// The safety profile's form: the retry-after is never earlier than the subject's own next success,
/// so the same acquire succeeds at `denied.now + wait + slack` (`slack`: one step of the subject's
/// time resolution when it does not round its retry-after up). Tightness is not asked.
pub fn check_not_early(
    subject: &mut dyn Subject,
    denied: Acquire,
    wait: u64,
    slack: u64,
) -> Probed {
    let Some(retry_at) = denied.now.checked_add(wait) else {
        return Probed::NotAsked;
    };
    let retry_at = retry_at.saturating_add(slack);
    let answer = subject.would_allow(Acquire {
        now: retry_at,
        ..denied
    });
    let violation = (answer == Some(false)).then(|| {
        Violation::new(
            OracleKind::RetryAfter,
            "retrying at now + retry_after is denied: the retry-after is earlier than the next success",
            format!("allowed at {retry_at}"),
            "denied",
        )
    });
    Probed::of(answer.is_some(), violation)
}
