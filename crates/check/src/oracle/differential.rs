//! The differential oracle: a subject's answer against the reference model's, exactly.
//!
//! Decisions must agree on admit/deny, on the remaining balance (as rationals: a float subject's value
//! is converted bit for bit, so any rounding shows), on `retry_after` and `reset_after` to the
//! nanosecond, on replays, and on the kind of error. A subject that reports no wait is not judged on
//! it, nor one that reports no balance ([`bucketproof_trace::subject::Amount::UNREPORTED`]) on the balance: its
//! decisions, waits, replays and errors still are.
//!
//! For a key of several bandwidths the whole decision is judged as above (its binding part, its
//! largest wait), and then, when the subject reports them, every bandwidth's part the same way: a
//! subject that charges the bandwidths that covered a denied request, or refills one at another's
//! rate, shows it there first.

use bucketproof_limiter::Wait;
use bucketproof_model::{ModelError, Outcome};

use super::{OracleKind, Violation};
use crate::subjects::model::{observe as observe_model, subject_error_of, wait as model_wait};
use bucketproof_trace::subject::{BandwidthObserved, Observed, SubjectError};

/// Which way a decision differs from the model's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The subject admitted what the model denied: overselling.
    Over,
    /// The subject denied what the model admitted.
    Under,
}

/// The verdict on one acquire.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// The first mismatch found, if any.
    pub violation: Option<Violation>,
    /// Set when admit/deny differ.
    pub admission: Option<Admission>,
    /// `|subject remaining - model remaining|` in tokens, when both decided.
    pub token_error: Option<f64>,
}

fn fmt_wait(wait: Option<Wait>) -> String {
    match wait {
        None => "none".into(),
        Some(Wait::Never) => "never".into(),
        Some(Wait::After(ns)) => format!("{ns}ns"),
    }
}

fn fmt_result(result: &Result<Observed, SubjectError>) -> String {
    match result {
        Ok(observed) => format!(
            "{} remaining={} retry_after={} reset_after={}{}{}",
            if observed.allowed {
                "allowed"
            } else {
                "denied"
            },
            observed.remaining,
            fmt_wait(observed.retry_after),
            fmt_wait(observed.reset_after),
            fmt_parts(&observed.bandwidths),
            if observed.replayed { " (replayed)" } else { "" }
        ),
        Err(error) => format!("error: {error}"),
    }
}

/// Each bandwidth's part, ` [remaining/retry_after/reset_after, ...]`; nothing for a decision of one.
fn fmt_parts(parts: &[BandwidthObserved]) -> String {
    if parts.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = (parts.iter())
        .map(|part| {
            format!(
                "{}/{}/{}",
                part.remaining,
                fmt_wait(part.retry_after),
                fmt_wait(part.reset_after)
            )
        })
        .collect();
    format!(" bandwidths=[{}]", parts.join(", "))
}

/// The first bandwidth whose part differs from the model's, as a mismatch line; `None` when all agree
/// or the subject reports no parts.
fn compare_parts(outcome: &Outcome, got: &[BandwidthObserved]) -> Option<String> {
    if got.is_empty() {
        return None;
    }
    let expected = outcome.decisions.bandwidths();
    if got.len() != expected.len() {
        return Some(format!(
            "bandwidth count differs: {} reported for a set of {}",
            got.len(),
            expected.len()
        ));
    }
    expected
        .iter()
        .zip(got)
        .enumerate()
        .find_map(|(position, (want, part))| {
            let what = if !part.remaining.equals(want.remaining()) {
                "remaining tokens"
            } else if part.retry_after.is_some()
                && part.retry_after != want.retry_after().map(model_wait)
            {
                "retry_after"
            } else if part.reset_after.is_some()
                && part.reset_after != Some(model_wait(want.reset_after()))
            {
                "reset_after"
            } else {
                return None;
            };
            Some(format!("bandwidth {position}: {what} differ"))
        })
}

/// Compares one acquire, or one settle (the same shape of answer). `expected` is the model's
/// result for the same call.
pub fn compare_acquire(
    expected: &Result<Outcome, ModelError>,
    got: &Result<Observed, SubjectError>,
) -> Comparison {
    let mismatch = |what: &str| {
        let expected_observed = expected
            .as_ref()
            .map(observe_model)
            .map_err(subject_error_of);
        Some(Violation::new(
            OracleKind::Model,
            what,
            fmt_result(&expected_observed),
            fmt_result(got),
        ))
    };
    let (outcome, observed) = match (expected, got) {
        (Ok(outcome), Ok(observed)) => (outcome, observed),
        (Err(error), Err(got)) if subject_error_of(error) == *got => {
            return Comparison::default();
        }
        (Err(error), Ok(observed)) => {
            return Comparison {
                violation: mismatch(match error {
                    ModelError::InvalidCost { .. } => {
                        "decision where the model reports an invalid cost"
                    }
                    _ => "decision where the model refuses the settle",
                }),
                admission: observed.allowed.then_some(Admission::Over),
                token_error: None,
            };
        }
        (Ok(_), Err(_)) | (Err(_), Err(_)) => {
            return Comparison {
                violation: mismatch("error where the model decides"),
                admission: None,
                token_error: None,
            };
        }
    };
    let decision = &outcome.decision;
    let expected_remaining = decision.remaining();
    // An unreported balance is not compared (so it is no mismatch), and its error is not measured.
    let reported = observed.remaining.is_reported();
    let remaining_equal = !reported || observed.remaining.equals(expected_remaining);
    let token_error = if !reported {
        None
    } else if remaining_equal {
        Some(0.0)
    } else {
        (observed.remaining.to_rational())
            .map(|value| (value - expected_remaining).to_f64().value().abs())
    };
    let admission = match (decision.is_allowed(), observed.allowed) {
        (false, true) => Some(Admission::Over),
        (true, false) => Some(Admission::Under),
        _ => None,
    };
    let violation = if admission.is_some() {
        mismatch(if observed.allowed {
            "admitted what the model denies"
        } else {
            "denied what the model admits"
        })
    } else if outcome.replayed != observed.replayed {
        mismatch("request-id replay differs")
    } else if !remaining_equal {
        mismatch("remaining tokens differ")
    } else if observed.retry_after.is_some()
        && observed.retry_after != outcome.decisions.retry_after().map(model_wait)
    {
        mismatch("retry_after differs")
    } else if observed.reset_after.is_some()
        && observed.reset_after != Some(model_wait(decision.reset_after()))
    {
        mismatch("reset_after differs")
    } else {
        compare_parts(outcome, &observed.bandwidths).map(|what| mismatch(&what).expect("some"))
    };
    Comparison {
        violation,
        admission,
        token_error,
    }
}
