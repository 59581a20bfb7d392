//! # bucketproof-scenario: the declarative TOML workloads of `scenarios/*.toml`
//!
//! A scenario says what traffic to generate (keys, arrivals, costs, clock behaviour, reconfigurations,
//! request ids, sweeps), how long, with which seeds, against which subjects, and which events the run
//! must *reach* ([`bucketproof_trace::events::EVENTS`]), so that no scenario passes vacuously.
//!
//! This crate owns the [`Scenario`] type, its error type and the requests made of a loaded scenario
//! (its seeds, a scaled copy, its op stream), with the caps on how much work those may ask for. The
//! other jobs have their own files: `parse` (text to a scenario, and where an error is),
//! `validate` (rules across tables), `tables` and `values` (the format's parts), [`expand`] (a scenario and a seed to ops) and [`sample`] (the one
//! sampler of the determinism rule). Durations are the vocabulary's ([`bucketproof_trace::duration`]).
//! It depends on the vocabulary alone: it builds traces, never runs one.
//!
//! Promises: a loaded scenario is valid (every rule of `scenarios/README.md` holds, including the
//! caps [`MAX_OPS_PER_SEED`] and [`MAX_SEEDS`]); every error in a file is reported as
//! `file:line:column: what is wrong`, never a panic and never a silently ignored typo; a request
//! beyond a cap is refused with the reason before any work starts.

pub mod expand;
mod parse;
pub mod sample;
mod tables;
mod validate;
mod values;

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use self::expand::Expansion;
pub use self::parse::load_all;
pub use self::tables::{
    ArrivalPattern, Arrivals, BoundaryOffset, Clock, CostChoice, CostRange, IdSpace, Jump,
    KeyDistribution, Keys, Maintenance, Reconfigure, RequestIds, Rollback, ScheduledReconfig,
    SetupSpec, SummaryPressure, Tier,
};
pub use self::values::{ConfigValue, CostValue, EventName, Probability};
use bucketproof_trace::trace::{Op, Setup};

/// The most ops one seed's trace may have (tier setup included, after any scaling). At the harness's
/// speed (about a million checked steps a second) that is minutes per run, and a failing run keeps
/// its prefix in memory to shrink it (tens of bytes an op): beyond this, a run would look hung or
/// exhaust memory, and a longer soak is better spent on more seeds.
pub const MAX_OPS_PER_SEED: u64 = 100_000_000;

/// The most seeds one scenario may run (declared, or asked for with a count). The list of runs is
/// built before the first one starts; a bigger count is a typo far more often than a plan, and would
/// keep the gate busy for days before it printed a verdict.
pub const MAX_SEEDS: usize = 100_000;

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Stable name (reports, JUnit, replay files); default: the file stem.
    #[serde(default)]
    pub name: String,
    /// What the scenario exercises, in a sentence or two.
    #[serde(default)]
    pub description: String,
    /// Seeds run by default.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// Ops generated per seed (after the tier setup).
    pub length: u64,
    /// Subjects run by default.
    #[serde(default = "default_subjects")]
    pub subjects: Vec<String>,
    /// Events every run must reach at least once.
    pub reach: Vec<EventName>,
    /// The key whose balance is plotted.
    #[serde(default)]
    pub sample_key: u64,
    /// Default config and limiter knobs.
    pub setup: SetupSpec,
    /// Per-key configs.
    #[serde(default)]
    pub tiers: Vec<Tier>,
    /// The key population.
    #[serde(default)]
    pub keys: Keys,
    /// Arrival pattern.
    #[serde(default)]
    pub arrivals: Arrivals,
    /// Weighted cost choices (default: always 1).
    #[serde(default)]
    pub costs: Vec<CostChoice>,
    /// Clock behaviour.
    #[serde(default)]
    pub clock: Clock,
    /// Reconfigurations.
    #[serde(default)]
    pub reconfigure: Reconfigure,
    /// Request ids.
    #[serde(default)]
    pub request_ids: RequestIds,
    /// Sweeps and forgets.
    #[serde(default)]
    pub maintenance: Maintenance,
    /// Eviction-summary pressure phases.
    #[serde(default)]
    pub pressure: SummaryPressure,
}

fn default_seeds() -> Vec<u64> {
    vec![1]
}
fn default_subjects() -> Vec<String> {
    vec!["core".into()]
}

/// Why a scenario could not be loaded, or a request of a loaded one cannot be honoured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML is malformed or a value or rule is broken, at a known place.
    #[error("{path}:{line}:{column}: {message}")]
    At {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong (never empty).
        message: String,
    },
    /// Two files of one directory declare the same scenario name.
    #[error("{path}: duplicate scenario name {name:?}")]
    DuplicateName {
        /// The second file.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// A request of a loaded scenario (a scale, a seed count) it cannot honour.
    #[error("scenario {scenario}: {message}")]
    Refused {
        /// The scenario's name.
        scenario: String,
        /// Why, with the cap it would pass.
        message: String,
    },
}

impl Scenario {
    /// The setup subjects are built with.
    pub fn setup(&self) -> Setup {
        self.setup.0.clone()
    }

    /// Ops per seed, including the tier setup (one reconfigure per tier key).
    pub fn total_ops(&self) -> u64 {
        self.tier_ops().saturating_add(self.length)
    }

    /// The tier setup's ops: one per key of each tier.
    fn tier_ops(&self) -> u64 {
        self.tiers
            .iter()
            .map(|t| t.keys[1].saturating_sub(t.keys[0]).saturating_add(1))
            .fold(0, u64::saturating_add)
    }

    /// The op stream for `seed`: deterministic, lazy, memory flat in the length.
    pub fn expand(&self, seed: u64) -> Expansion {
        Expansion::new(self, seed)
    }

    /// The first `count` ops for `seed` (a failure's prefix).
    pub fn prefix(&self, seed: u64, count: u64) -> Vec<Op> {
        self.expand(seed).take(count as usize).collect()
    }

    fn refused(&self, message: String) -> ScenarioError {
        ScenarioError::Refused {
            scenario: self.name.clone(),
            message,
        }
    }

    /// This scenario with `scale` times its length (the tier setup is not repeated). Refuses a scale
    /// of 0 and a scaled trace above [`MAX_OPS_PER_SEED`].
    pub fn scaled(&self, scale: u64) -> Result<Scenario, ScenarioError> {
        if scale == 0 {
            return Err(self.refused("a scale of 0 would run nothing; use 1 or more".into()));
        }
        let length = self.length.checked_mul(scale);
        let total = length.map(|length| self.tier_ops().saturating_add(length));
        match (length, total) {
            (Some(length), Some(total)) if total <= MAX_OPS_PER_SEED => Ok(Scenario {
                length,
                ..self.clone()
            }),
            _ => Err(self.refused(format!(
                "scale {scale} makes {} x {scale} ops per seed, above the cap of {MAX_OPS_PER_SEED} \
                 (see scenarios/README.md); use a smaller scale or more seeds",
                self.length
            ))),
        }
    }

    /// The seeds to run: the first `count` declared seeds, continued with the integers after the largest
    /// declared one when `count` exceeds them; all declared seeds for `None`. Refuses a count of 0 and
    /// one above [`MAX_SEEDS`]. Linear in the count.
    pub fn seeds_to_run(&self, count: Option<usize>) -> Result<Vec<u64>, ScenarioError> {
        let Some(count) = count else {
            return Ok(self.seeds.clone());
        };
        if count == 0 {
            return Err(self.refused("a seed count of 0 would check nothing".into()));
        }
        if count > MAX_SEEDS {
            return Err(self.refused(format!(
                "{count} seeds is above the cap of {MAX_SEEDS} (see scenarios/README.md)"
            )));
        }
        let mut seeds: Vec<u64> = self.seeds.iter().copied().take(count).collect();
        // The continuation starts above every declared seed, so it can meet one only after wrapping
        // past u64::MAX: only then does the set of declared seeds matter.
        let declared: BTreeSet<u64> = self.seeds.iter().copied().collect();
        let mut next = self.seeds.iter().copied().max().unwrap_or(0);
        while seeds.len() < count {
            next = next.wrapping_add(1);
            if !declared.contains(&next) {
                seeds.push(next);
            }
        }
        Ok(seeds)
    }
}
