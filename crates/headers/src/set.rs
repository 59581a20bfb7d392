//! A decision over a key's bandwidths, as the layer advertises it (docs/semantics.md, "Several
//! bandwidths per key").
//!
//! What it owns: [`SetOutcome`] (every bandwidth's part of one decision, each with the name it is
//! advertised under, and the combined wait) and the names bandwidths carry on the wire
//! ([`item_name`]). What it promises:
//! - a key of one unnamed bandwidth is advertised exactly as before sets existed: one item under the
//!   layer's own policy name ([`SetOutcome::single`]), byte for byte;
//! - any other key gives one item per bandwidth in each field, in the set's order, each with its own
//!   `q`/`w` and `r`/`t` under [`crate::mapping`]'s rules, named after its bandwidth;
//! - the names of one decision's items are distinct, and each is a structured-field key;
//! - `Retry-After` comes from the combined wait, the largest of the bandwidths' waits
//!   ([`SetOutcome::retry_after`]): retrying then finds every bandwidth covering the cost.
//!
//! # Names on the wire
//!
//! A named bandwidth's item carries its name. An unnamed bandwidth's identity is `#i`, its position
//! `i` in the set, and `#` cannot appear in a key, so its item is named [`UNNAMED_PREFIX`] followed
//! by `i` in decimal: `bucketproof-unnamed-bandwidth-at-0`, `...-at-1`, and so on. The prefix alone
//! is longer than [`MAX_NAME_LEN`], the longest name a bandwidth may have, so no bandwidth's own name
//! can ever equal a generated one. The name depends on the position only, as the identity does: a
//! client sees an item continue across a reconfiguration exactly when the limiter continues the
//! bandwidth (same name, or same position for unnamed ones).
//!
//! # The `t` of every item
//!
//! All bandwidths of a key share one refill cursor, so the cursor's lead over the decision's `now`
//! (which `t` must include, see [`Outcome::lag_ns`]) is one number for the whole decision. A part
//! does not always expose it: a bandwidth that covered the cost of a denied request reports a wait
//! of 0, and a full one a reset of 0. [`SetOutcome::lag_ns`] therefore takes it from any part that
//! exposes it. Every part that is short of the cost, or not full, with a positive rate does, so none
//! does only for a denial that can never be admitted (every bandwidth short of the cost has a zero
//! rate); then no item carries a `t`, as no window is stricter than a wrong one.

use bucketproof_limiter::{Bandwidths, Config, Decision, Decisions, MAX_NAME_LEN, Wait};

use crate::field::PolicyName;
use crate::mapping::{AdvertiseOptions, Advertised};
use crate::outcome::{self, Outcome};

/// What an unnamed bandwidth's item name starts with; its position follows. Longer than
/// [`MAX_NAME_LEN`], so no bandwidth's own name can be a generated one.
pub const UNNAMED_PREFIX: &str = "bucketproof-unnamed-bandwidth-at-";

// The promise above: a generated name is longer than any name a bandwidth may carry.
const _: () = assert!(UNNAMED_PREFIX.len() > MAX_NAME_LEN);

/// The name the bandwidth at `position` of `set` is advertised under: its own name, or for an
/// unnamed one [`UNNAMED_PREFIX`] and the position. `None` when the set has no such position.
pub fn item_name(set: &Bandwidths, position: usize) -> Option<PolicyName> {
    let bandwidth = set.as_slice().get(position)?;
    let text = match bandwidth.name() {
        Some(name) => name.as_str().to_owned(),
        None => format!("{UNNAMED_PREFIX}{position}"),
    };
    // Both forms are lowercase ASCII (a key), which an SF String always carries.
    PolicyName::new(text).ok()
}

/// One bandwidth's part of a [`SetOutcome`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    name: Option<PolicyName>,
    decision: Decision,
    config: Config,
}

impl Part {
    /// The item name; `None` for the one part of a key of one unnamed bandwidth, which is advertised
    /// under the layer's own policy name.
    pub fn name(&self) -> Option<&PolicyName> {
        self.name.as_ref()
    }

    /// This bandwidth's part of the decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The bandwidth's capacity and rate when the decision was made.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// True when this bandwidth kept the request from being admitted: the decision is a denial and
    /// this bandwidth did not cover the cost (its own wait is not 0).
    pub fn violated(&self) -> bool {
        matches!(self.decision.retry_after(), Some(wait) if wait != Wait::After(0))
    }
}

/// One decision over every bandwidth of a key, with the names its items are advertised under.
///
/// Built by a [`crate::source::DecisionSource`]: [`SetOutcome::single`] for a one-bandwidth
/// decision, [`SetOutcome::of_set`] for a key of several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetOutcome {
    parts: Vec<Part>,
    retry_after: Option<Wait>,
    cost: u64,
    degraded: bool,
}

impl SetOutcome {
    /// A one-bandwidth decision: one part, advertised under the layer's policy name, exactly as
    /// the layer advertised an [`Outcome`] before sets existed.
    pub fn single(outcome: Outcome) -> SetOutcome {
        SetOutcome {
            parts: vec![Part {
                name: None,
                decision: outcome.decision,
                config: outcome.config,
            }],
            retry_after: outcome.decision.retry_after(),
            cost: outcome.cost,
            degraded: outcome.degraded,
        }
    }

    /// The decision `decisions` on a key whose set is `set`: one named part per bandwidth (a set of
    /// one unnamed bandwidth is [`SetOutcome::single`]'s one part). `None` when the decision was not
    /// made under `set` (another number of bandwidths, or another config at some position): a
    /// concurrent reconfiguration, and the names of `set` would label the wrong numbers.
    pub fn of_set(
        set: &Bandwidths,
        decisions: &Decisions,
        cost: u64,
        degraded: bool,
    ) -> Option<SetOutcome> {
        let made = decisions.bandwidths();
        let matches = made.len() == set.len()
            && made
                .iter()
                .zip(set.as_slice())
                .all(|(decision, bandwidth)| decision.config() == *bandwidth.config());
        if !matches {
            return None;
        }
        if set.single().is_some() {
            return Some(SetOutcome::single(Outcome::of(made[0], cost, degraded)));
        }
        let parts = made
            .iter()
            .enumerate()
            .map(|(position, decision)| {
                Some(Part {
                    name: Some(item_name(set, position)?),
                    decision: *decision,
                    config: decision.config(),
                })
            })
            .collect::<Option<_>>()?;
        Some(SetOutcome {
            parts,
            retry_after: decisions.retry_after(),
            cost,
            degraded,
        })
    }

    /// Every bandwidth's part, in the set's order (at least one).
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// True if the request was admitted (and every bandwidth charged).
    pub fn is_allowed(&self) -> bool {
        self.parts.first().is_some_and(|p| p.decision.is_allowed())
    }

    /// The cost that was asked for.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// True when the store could not be reached and a fallback decided.
    pub fn degraded(&self) -> bool {
        self.degraded
    }

    /// For a denial, the combined wait: the largest of the bandwidths' waits (`Never` if any is), so
    /// that at `now + wait` every bandwidth covers the cost. `None` when allowed.
    pub fn retry_after(&self) -> Option<Wait> {
        self.retry_after
    }

    /// `Retry-After` in delay seconds for a denial, from the combined wait (rounded up, never 0 for
    /// a positive wait); `None` when allowed or when the wait is `Never`.
    pub fn retry_after_secs(&self) -> Option<u64> {
        outcome::wait_secs(self.retry_after)
    }

    /// How far the key's refill cursor was ahead of the decision's `now`, in ns: one number for every
    /// bandwidth, taken from the parts that expose it (see the module docs). `None` when none does.
    pub fn lag_ns(&self) -> Option<u64> {
        // Every exposing part recovers the same lag; the largest is kept should they ever differ,
        // because a longer `t` is the stricter hint.
        self.parts
            .iter()
            .filter_map(|p| outcome::exposed_lag(&p.config, &p.decision, self.cost))
            .max()
    }

    /// `r` and `t` of every part, in order (see [`crate::mapping`] for the rounding).
    pub fn advertised(&self, options: AdvertiseOptions) -> Vec<Advertised> {
        let lag = self.lag_ns();
        self.parts
            .iter()
            .map(|p| outcome::advertise_balance(&p.config, &p.decision, lag, options))
            .collect()
    }
}
