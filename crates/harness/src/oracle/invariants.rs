//! State invariants, judged only from what a subject shows through [`crate::Subject::inspect`]:
//! `0 <= tokens <= capacity`; the cursor never moves back while the bucket lives; an error changes
//! nothing; a denial leaves exactly the refilled balance (which is at least the balance before).

use bucketproof_model::Rational;

use super::{OracleKind, Violation};
use crate::subject::{Inspected, Observed, SubjectError};

fn violation(what: &str, expected: String, got: String) -> Option<Violation> {
    Some(Violation::new(OracleKind::Invariant, what, expected, got))
}

fn tokens(state: &Inspected) -> Option<Rational> {
    state.tokens.to_rational()
}

/// Checks the state after one acquire against the state before it.
///
/// `restarted`: the bucket was (re)created by this call, so "before" says nothing about "after".
pub fn check_acquire(
    before: Option<&Inspected>,
    after: Option<&Inspected>,
    result: &Result<Observed, SubjectError>,
    restarted: bool,
) -> Option<Violation> {
    if let Err(_error) = result {
        return (before != after).then(|| {
            Violation::new(
                OracleKind::Invariant,
                "an error changed the state",
                format!("{before:?}"),
                format!("{after:?}"),
            )
        });
    }
    let after = after?;
    let Some(after_tokens) = tokens(after) else {
        return violation(
            "tokens are not a number",
            "a finite amount".into(),
            format!("{:?}", after.tokens),
        );
    };
    let capacity = Rational::from(after.capacity);
    if after_tokens < Rational::ZERO {
        return violation(
            "tokens below zero",
            ">= 0".into(),
            format!("{after_tokens}"),
        );
    }
    if after_tokens > capacity {
        return violation(
            "tokens above capacity",
            format!("<= {capacity}"),
            format!("{after_tokens}"),
        );
    }
    let observed = result.as_ref().ok()?;
    if let (Some(before), false) = (before, restarted) {
        if after.last_refill < before.last_refill {
            return violation(
                "the refill cursor moved back",
                format!(">= {}", before.last_refill),
                format!("{}", after.last_refill),
            );
        }
        if !observed.allowed && !observed.replayed {
            let before_tokens = tokens(before)?;
            if after_tokens < before_tokens {
                return violation(
                    "a denial consumed tokens",
                    format!(">= {before_tokens}"),
                    format!("{after_tokens}"),
                );
            }
        }
    }
    if !observed.allowed && !observed.replayed {
        let reported = observed.remaining.to_rational()?;
        if reported != after_tokens {
            return violation(
                "a denial's reported balance is not the stored one",
                format!("{after_tokens}"),
                format!("{reported}"),
            );
        }
    }
    None
}
