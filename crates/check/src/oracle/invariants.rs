//! State invariants, judged only from what a subject shows through [`bucketproof_trace::Subject::inspect`]:
//! `0 <= tokens <= capacity`; the cursor never moves back while the bucket lives; an error changes
//! nothing; a denial leaves exactly the refilled balance (which is at least the balance before).
//!
//! For a key of several bandwidths the state shown is its first bandwidth's (and the one cursor), so a
//! denial's reported balance is compared with the first bandwidth's part of the decision, when the
//! subject reports the parts.

use std::cmp::Ordering;

use super::{OracleKind, Violation};
use bucketproof_trace::subject::{Amount, Inspected, Observed, SubjectError};

fn violation(what: &str, expected: String, got: String) -> Option<Violation> {
    Some(Violation::new(OracleKind::Invariant, what, expected, got))
}

/// Checks the state after one acquire against the state before it.
///
/// `restarted`: the bucket was (re)created by this call, so "before" says nothing about "after".
/// `reported`: the decision's balance for the bandwidth the state shows (`None`: the subject did not
/// report it apart, so it is not compared).
pub fn check_acquire(
    before: Option<&Inspected>,
    after: Option<&Inspected>,
    result: &Result<Observed, SubjectError>,
    restarted: bool,
    reported: Option<Amount>,
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
    let shown = |amount: Amount| {
        amount
            .to_rational()
            .map_or_else(|| format!("{amount:?}"), |value| value.to_string())
    };
    let Some(against_capacity) = after.tokens.compare_whole(after.capacity) else {
        return violation(
            "tokens are not a number",
            "a finite amount".into(),
            format!("{:?}", after.tokens),
        );
    };
    if after.tokens.compare_whole(0) == Some(Ordering::Less) {
        return violation("tokens below zero", ">= 0".into(), shown(after.tokens));
    }
    if against_capacity == Ordering::Greater {
        return violation(
            "tokens above capacity",
            format!("<= {}", after.capacity),
            shown(after.tokens),
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
        if !observed.allowed
            && !observed.replayed
            && after.tokens.compare(before.tokens)? == Ordering::Less
        {
            return violation(
                "a denial consumed tokens",
                format!(">= {}", shown(before.tokens)),
                shown(after.tokens),
            );
        }
    }
    let reported = reported?;
    if !observed.allowed && !observed.replayed && reported.compare(after.tokens)? != Ordering::Equal
    {
        return violation(
            "a denial's reported balance is not the stored one",
            shown(after.tokens),
            shown(reported),
        );
    }
    None
}
