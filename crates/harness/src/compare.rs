//! Float versus rational: identical traces through the exact core, the f64 baselines and governor,
//! judged against the reference model, over a grid of rates, capacities and horizons.
//!
//! What this module owns and promises:
//! - **The grid** ([`CompareOptions`]): the CI-sized default ([`CompareOptions::ci`], a few seconds
//!   in release) and the big one ([`CompareOptions::full`], or `BUCKETPROOF_COMPARE_FULL=1` through
//!   [`CompareOptions::from_env`]). Rates are exact fractions for the core and the model; the float
//!   subjects get the `f64` a user would write (for 10/13 that is `0.7692307692307693`, bit for bit).
//! - **The traces**: [`generate_trace`] is deterministic (ChaCha8 and this module's own sampling, no
//!   wall clock): bursts, polling clients, arrivals exactly at / 1 ns around the instant an exact
//!   bucket reaches the cost, and idle gaps sized so the ops spread over the whole horizon (sparse
//!   ops over 100 simulated years). Time is monotone, so every difference is arithmetic, not clock
//!   handling.
//! - **Per cell and subject**: decisions that differ from the model, over-admissions (admitted what
//!   the model denies: overselling) and under-admissions, the first divergence time, the largest
//!   token error and arrival-curve breaches, all from [`RunReport::divergence`], plus the
//!   token-error series (computed exactly against the model) that the plot draws.
//! - **Named scenarios** ([`named_scenarios`]): golang/go#46579 and golang/go#34861 as traces that
//!   pass on the exact core and fail on the Go-style float bucket.
//! - **The report**: [`write_report`] writes `float-vs-rational.{md,json,svg}`; the bytes depend only
//!   on the options (no timings, no dates, no hash-map order), so a test can regenerate the committed
//!   report and fail when it is stale.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bucketproof_float::{GoRateVersion, GoStyleBucket, TextbookBucket};
use bucketproof_model::Rational;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde::Serialize;

use crate::runner::{RunOptions, RunReport, Verdict, run_trace};
use crate::subject::{Amount, Inspection, Observed, Subject, SubjectError};
use crate::subjects::float::FloatSubject;
use crate::subjects::{CoreSubject, ModelSubject};
use crate::trace::{ConfigSpec, Op, Setup, Trace};

const SECOND: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
/// A simulated year is 365 days (the runner's `long_idle` uses the same).
const YEAR: u64 = 365 * DAY;

/// The subjects every cell runs, in report order.
pub const SUBJECTS: &[&str] = &["core", "float-textbook", "float-go", "governor"];

/// The environment variable that selects the full grid in [`CompareOptions::from_env`].
pub const FULL_ENV: &str = "BUCKETPROOF_COMPARE_FULL";

/// The report's file stem inside the report directory.
pub const REPORT_STEM: &str = "float-vs-rational";

/// Why a comparison could not be set up or written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// A rate that is not `<tokens>/<period>` or not a valid config.
    #[error("bad rate {input:?}: {reason}")]
    BadRate {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A horizon that is not `<count><unit>` (units ns, us, ms, s, min, h, d, y).
    #[error("bad horizon {input:?}: {reason}")]
    BadHorizon {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A capacity of 0.
    #[error("bad capacity {0}: must be at least 1")]
    BadCapacity(u64),
    /// No rates, capacities, horizons or ops: nothing would be compared.
    #[error("empty grid: {0}")]
    EmptyGrid(&'static str),
    /// The plot could not be drawn.
    #[error("plot: {0}")]
    Plot(String),
    /// A report file could not be written or read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
}

/// One rate of the grid: the exact fraction (as a config string) and the `f64` the float subjects use.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GridRate {
    /// The exact rate as the limiter parses it, e.g. `"10/13s"`.
    pub spec: String,
    /// Numerator of the reduced rate in tokens per second.
    pub numer: u64,
    /// Denominator of the reduced rate.
    pub denom: u64,
    /// The rate the float subjects are given, tokens per second.
    pub float: f64,
}

impl GridRate {
    /// Parses `"<tokens>/<period>"` (e.g. `"1/3600s"`, `"7000000/s"`); the float rate is `p / q` in f64.
    pub fn parse(spec: &str) -> Result<GridRate, CompareError> {
        let config =
            ConfigSpec::new(1, spec.trim())
                .to_config()
                .map_err(|e| CompareError::BadRate {
                    input: spec.to_owned(),
                    reason: e.reason,
                })?;
        let (numer, denom) = (config.rate().numer(), config.rate().denom());
        if numer == 0 {
            return Err(CompareError::BadRate {
                input: spec.to_owned(),
                reason: "a zero rate never refills: nothing to compare".into(),
            });
        }
        Ok(GridRate {
            spec: spec.trim().to_owned(),
            numer,
            denom,
            float: numer as f64 / denom as f64,
        })
    }

    /// `p/q` per second, for tables.
    pub fn label(&self) -> String {
        if self.denom == 1 {
            format!("{}/s", self.numer)
        } else {
            format!("{}/{} per s", self.numer, self.denom)
        }
    }
}

/// Parses a horizon: `<count><unit>` with unit `ns`, `us`, `ms`, `s`, `min`, `h`, `d` or `y` (365 d).
pub fn parse_horizon(input: &str) -> Result<u64, CompareError> {
    let bad = |reason: &str| CompareError::BadHorizon {
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    let text = input.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| bad("missing unit (ns, us, ms, s, min, h, d, y)"))?;
    let (count, unit) = text.split_at(split);
    let count: u64 = count
        .parse()
        .map_err(|_| bad("the count is not a whole number"))?;
    let unit = match unit.trim() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => SECOND,
        "min" => MINUTE,
        "h" => HOUR,
        "d" => DAY,
        "y" => YEAR,
        _ => return Err(bad("unknown unit; use ns, us, ms, s, min, h, d or y")),
    };
    count
        .checked_mul(unit)
        .filter(|&ns| ns > 0)
        .ok_or_else(|| bad("must be positive and below 2^64 ns"))
}

/// A duration in the largest unit that divides it, for labels (`"100 y"`, `"1 s"`, `"1500 ms"`).
pub fn format_ns(ns: u64) -> String {
    for (unit, name) in [
        (YEAR, "y"),
        (DAY, "d"),
        (HOUR, "h"),
        (MINUTE, "min"),
        (SECOND, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ] {
        if ns >= unit && ns.is_multiple_of(unit) {
            return format!("{} {name}", ns / unit);
        }
    }
    format!("{ns} ns")
}

/// What to compare.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareOptions {
    /// The rates.
    pub rates: Vec<GridRate>,
    /// The capacities (whole tokens).
    pub capacities: Vec<u64>,
    /// The horizons (ns of simulated time each trace spans at most).
    pub horizons_ns: Vec<u64>,
    /// Acquires per cell (fewer if the horizon runs out first).
    pub ops_per_cell: usize,
    /// Base seed; each cell derives its own from it and its coordinates.
    pub seed: u64,
    /// Whether this is the full grid (for the report's title only).
    pub full: bool,
}

/// The rates the issue asks for, in order: 1/3600, 10/13 (Go's 0.7692307692307693), 1/3, 5/3, 7,
/// 1000, 3,000,000 and 7,000,000 per second.
pub const DEFAULT_RATES: &[&str] = &[
    "1/3600s",
    "10/13s",
    "1/3s",
    "5/3s",
    "7/s",
    "1000/s",
    "3000000/s",
    "7000000/s",
];

impl CompareOptions {
    /// The CI-sized grid: every rate, capacities 1, 10, 1000, horizons 1 s, 1 d and 100 y, 300 acquires
    /// per cell. This is what the committed report shows.
    pub fn ci() -> CompareOptions {
        CompareOptions {
            rates: default_rates(),
            capacities: vec![1, 10, 1000],
            horizons_ns: vec![SECOND, DAY, 100 * YEAR],
            ops_per_cell: 300,
            seed: 46_579,
            full: false,
        }
    }

    /// The big grid: more capacities and horizons from 1 s to 100 years, 20,000 acquires per cell.
    pub fn full() -> CompareOptions {
        CompareOptions {
            rates: default_rates(),
            capacities: vec![1, 2, 10, 1000, 1_000_000],
            horizons_ns: vec![SECOND, MINUTE, HOUR, DAY, YEAR, 10 * YEAR, 100 * YEAR],
            ops_per_cell: 20_000,
            seed: 46_579,
            full: true,
        }
    }

    /// [`CompareOptions::full`] if `BUCKETPROOF_COMPARE_FULL` is set to anything but `0` or empty,
    /// else [`CompareOptions::ci`].
    pub fn from_env() -> CompareOptions {
        match std::env::var(FULL_ENV) {
            Ok(value) if !value.is_empty() && value != "0" => CompareOptions::full(),
            _ => CompareOptions::ci(),
        }
    }

    /// Replaces the rates with parsed specs (e.g. from a command line).
    pub fn with_rates<S: AsRef<str>>(
        mut self,
        specs: &[S],
    ) -> Result<CompareOptions, CompareError> {
        self.rates = specs
            .iter()
            .map(|s| GridRate::parse(s.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// Replaces the horizons with parsed ones (e.g. `"1s"`, `"100y"`).
    pub fn with_horizons<S: AsRef<str>>(
        mut self,
        horizons: &[S],
    ) -> Result<CompareOptions, CompareError> {
        self.horizons_ns = horizons
            .iter()
            .map(|h| parse_horizon(h.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// What a command line asks for: the full grid if `full` (or `BUCKETPROOF_COMPARE_FULL`), else
    /// the CI grid, with the rates and horizons replaced by the given ones when there are any.
    pub fn from_args<S: AsRef<str>>(
        full: bool,
        rates: &[S],
        horizons: &[S],
    ) -> Result<CompareOptions, CompareError> {
        let mut options = if full {
            CompareOptions::full()
        } else {
            CompareOptions::from_env()
        };
        if !rates.is_empty() {
            options = options.with_rates(rates)?;
        }
        if !horizons.is_empty() {
            options = options.with_horizons(horizons)?;
        }
        options.validate()?;
        Ok(options)
    }

    fn validate(&self) -> Result<(), CompareError> {
        if self.rates.is_empty() {
            return Err(CompareError::EmptyGrid("no rates"));
        }
        if self.capacities.is_empty() {
            return Err(CompareError::EmptyGrid("no capacities"));
        }
        if self.horizons_ns.is_empty() {
            return Err(CompareError::EmptyGrid("no horizons"));
        }
        if self.ops_per_cell == 0 {
            return Err(CompareError::EmptyGrid("zero ops per cell"));
        }
        if let Some(&c) = self.capacities.iter().find(|&&c| c == 0) {
            return Err(CompareError::BadCapacity(c));
        }
        Ok(())
    }
}

fn default_rates() -> Vec<GridRate> {
    DEFAULT_RATES
        .iter()
        .map(|spec| GridRate::parse(spec).expect("the built-in rates parse"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------------------------

/// The project's own sampling (design.md section 7): a seed replays the same trace next year,
/// whatever a distribution library does. The modulo bias is irrelevant here and deterministic.
struct Sampler(ChaCha8Rng);

impl Sampler {
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.0.next_u64() % n }
    }
}

/// splitmix64: derives each cell's seed from the base seed and the cell's coordinates.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn cell_seed(seed: u64, rate: &GridRate, capacity: u64, horizon_ns: u64) -> u64 {
    [rate.numer, rate.denom, capacity, horizon_ns]
        .iter()
        .fold(mix(seed), |acc, &v| mix(acc ^ v))
}

/// The generator's own exact bucket, only to aim arrivals at refill boundaries (the instant the
/// bucket reaches the cost, and 1 ns either side). It is not an oracle: the model judges.
/// Units are `1/(q * 10^9)` token; one ns adds `p` units.
struct Shadow {
    p: u128,
    unit: u128,
    cap_units: u128,
    balance: u128,
    last: u64,
}

impl Shadow {
    fn balance_at(&self, t: u64) -> u128 {
        let dt = u128::from(t.saturating_sub(self.last));
        self.balance
            .saturating_add(dt.saturating_mul(self.p))
            .min(self.cap_units)
    }

    fn acquire(&mut self, t: u64, cost: u64) {
        self.balance = self.balance_at(t);
        self.last = self.last.max(t);
        let need = u128::from(cost) * self.unit;
        if self.balance >= need {
            self.balance -= need;
        }
    }

    /// ns from `t` until the balance reaches `cost` (0 if it already has).
    fn time_to(&self, t: u64, cost: u64) -> u64 {
        let need = u128::from(cost) * self.unit;
        let have = self.balance_at(t);
        if have >= need {
            return 0;
        }
        u64::try_from((need - have).div_ceil(self.p)).unwrap_or(u64::MAX)
    }
}

/// A deterministic single-key trace for one cell: at most `ops` acquires, at times in `[0, horizon]`,
/// non-decreasing. See the module doc for the patterns.
pub fn generate_trace(
    rate: &GridRate,
    capacity: u64,
    horizon_ns: u64,
    ops: usize,
    seed: u64,
) -> Vec<Op> {
    let mut rng = Sampler(ChaCha8Rng::seed_from_u64(seed));
    let unit = u128::from(rate.denom) * u128::from(SECOND);
    let p = u128::from(rate.numer.max(1));
    let mut shadow = Shadow {
        p,
        unit,
        cap_units: u128::from(capacity) * unit,
        balance: u128::from(capacity) * unit,
        last: 0,
    };
    // ns per token, rounded up (a polling period near the refill rate).
    let token_ns = u64::try_from(unit.div_ceil(p)).unwrap_or(u64::MAX).max(1);
    let mut out: Vec<Op> = Vec::with_capacity(ops);
    let mut now = 0u64;
    let push = |out: &mut Vec<Op>, shadow: &mut Shadow, at: u64, cost: u64| {
        shadow.acquire(at, cost);
        out.push(Op::Acquire {
            key: 0,
            at,
            cost,
            request_id: None,
        });
    };
    // Bounded attempts: patterns that do not fit in the horizon are skipped, never looped on.
    for _ in 0..ops.saturating_mul(4) {
        if out.len() >= ops {
            break;
        }
        let left = (ops - out.len()) as u64;
        // An idle gap sized so the remaining segments (about 8 ops each) span the rest of the horizon.
        let segments_left = (left / 8).max(1);
        let span = (horizon_ns - now) / segments_left;
        now = now.saturating_add(rng.below(span.saturating_mul(2).saturating_add(1)));
        if now > horizon_ns {
            now = horizon_ns;
        }
        let pick_cost = |rng: &mut Sampler| match rng.below(100) {
            0..70 => 1,
            70..85 => capacity,
            _ => 1 + rng.below(capacity),
        };
        match rng.below(100) {
            // Arrivals at the exact refill boundary for the cost, or 1 ns either side.
            0..40 => {
                for _ in 0..1 + rng.below(4) {
                    let cost = pick_cost(&mut rng);
                    let wait = shadow.time_to(now, cost);
                    let at = match (wait, rng.below(4)) {
                        (0, 0) => now,
                        (0, _) => now.saturating_add(1),
                        (w, 0) => now.saturating_add(w - 1),
                        (w, 1) => now.saturating_add(w + 1),
                        (w, _) => now.saturating_add(w),
                    };
                    if at > horizon_ns || out.len() >= ops {
                        break;
                    }
                    now = at;
                    push(&mut out, &mut shadow, now, cost);
                }
            }
            // A burst: as many requests at one instant as the bucket holds, and one more.
            40..55 => {
                for _ in 0..(capacity.saturating_add(1)).min(16) {
                    if out.len() >= ops {
                        break;
                    }
                    push(&mut out, &mut shadow, now, 1);
                }
            }
            // A polling client: a fixed period near the refill rate.
            55..85 => {
                let period = match rng.below(5) {
                    0 => token_ns / 7,
                    1 => token_ns / 2,
                    2 => token_ns,
                    3 => token_ns.saturating_add(token_ns / 2),
                    _ => token_ns.saturating_sub(1),
                }
                .max(1);
                for _ in 0..4 + rng.below(20) {
                    let at = now.saturating_add(period);
                    if at > horizon_ns || out.len() >= ops {
                        break;
                    }
                    now = at;
                    push(&mut out, &mut shadow, now, 1);
                }
            }
            // One request after the idle gap.
            _ => {
                let cost = pick_cost(&mut rng);
                push(&mut out, &mut shadow, now, cost);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// One subject's results in one cell (or one scenario).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubjectCell {
    /// The subject's name.
    pub subject: String,
    /// `pass`, `diverged`, or why the subject could not run the cell.
    pub status: String,
    /// Ops run.
    pub steps: u64,
    /// Admit/deny differs from the model.
    pub decision_mismatches: u64,
    /// Admitted what the model denies (overselling).
    pub over_admissions: u64,
    /// Denied what the model admits.
    pub under_admissions: u64,
    /// Same decision, different balance or wait.
    pub value_mismatches: u64,
    /// Simulated time (ns) of the first answer that differs in any way.
    pub first_divergence_ns: Option<u64>,
    /// Largest `|subject remaining - model remaining|`, tokens.
    pub max_token_error: f64,
    /// Arrival-curve breaches.
    pub arrival_breaches: u64,
    /// Invariant and retry-after violations.
    pub other_violations: u64,
}

impl SubjectCell {
    fn from_report(report: &RunReport) -> SubjectCell {
        let d = &report.divergence;
        let status = match &report.verdict {
            Verdict::Pass => "pass".to_owned(),
            Verdict::Fail(_) => "diverged".to_owned(),
            Verdict::Incompatible { step, reason } => {
                format!("stopped at step {step}: {reason}")
            }
        };
        SubjectCell {
            subject: report.subject.clone(),
            status,
            steps: report.steps,
            decision_mismatches: d.decision_mismatches,
            over_admissions: d.over_admissions,
            under_admissions: d.under_admissions,
            value_mismatches: d.value_mismatches,
            first_divergence_ns: d.first_divergence_at,
            max_token_error: d.max_token_error,
            arrival_breaches: d.arrival_breaches,
            other_violations: d.other_violations,
        }
    }

    fn unsupported(subject: &str, error: &SubjectError) -> SubjectCell {
        SubjectCell {
            subject: subject.to_owned(),
            status: format!("not run: {error}"),
            steps: 0,
            decision_mismatches: 0,
            over_admissions: 0,
            under_admissions: 0,
            value_mismatches: 0,
            first_divergence_ns: None,
            max_token_error: 0.0,
            arrival_breaches: 0,
            other_violations: 0,
        }
    }

    /// Any difference from the model at all.
    pub fn diverged(&self) -> bool {
        self.decision_mismatches
            + self.value_mismatches
            + self.arrival_breaches
            + self.other_violations
            > 0
            || self.max_token_error != 0.0
    }
}

/// One cell of the grid.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    /// The rate.
    pub rate: GridRate,
    /// Capacity in whole tokens.
    pub capacity: u64,
    /// Horizon in ns.
    pub horizon_ns: u64,
    /// Acquires in the trace.
    pub ops: u64,
    /// Simulated time of the last op, ns.
    pub last_op_ns: u64,
    /// Per subject, in [`SUBJECTS`] order.
    pub subjects: Vec<SubjectCell>,
}

/// Totals of one subject over the grid.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubjectTotals {
    /// The subject.
    pub subject: String,
    /// Cells run.
    pub cells: u64,
    /// Cells with any difference from the model.
    pub cells_diverged: u64,
    /// Cells with at least one over-admission.
    pub cells_over_admitting: u64,
    /// Summed over cells.
    pub decision_mismatches: u64,
    /// Summed over cells.
    pub over_admissions: u64,
    /// Summed over cells.
    pub under_admissions: u64,
    /// Summed over cells.
    pub value_mismatches: u64,
    /// Summed over cells.
    pub arrival_breaches: u64,
    /// Summed over cells.
    pub other_violations: u64,
    /// Largest over cells.
    pub max_token_error: f64,
    /// Earliest first divergence over cells, ns.
    pub earliest_divergence_ns: Option<u64>,
}

/// A named reproduction of a published float failure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScenarioResult {
    /// Stable name (`go-46579`, `go-34861`).
    pub name: String,
    /// What it reproduces.
    pub summary: String,
    /// The trace (the Go subject's starting state is described in `summary`).
    pub trace: Trace,
    /// The exact core: must pass.
    pub core: SubjectCell,
    /// The Go-style float bucket: must fail.
    pub float_go: SubjectCell,
}

/// One point of the token-error plot.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ErrorPoint {
    /// Simulated time, seconds.
    pub at_s: f64,
    /// `|subject remaining - model remaining|`, tokens (exact difference, rounded once to f64).
    pub error: f64,
}

/// Everything a comparison produced. No timings: the same options give the same value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareReport {
    /// The grid.
    pub options: CompareOptions,
    /// Per subject, over the grid.
    pub totals: Vec<SubjectTotals>,
    /// The named scenarios.
    pub scenarios: Vec<ScenarioResult>,
    /// Every cell.
    pub cells: Vec<Cell>,
    /// Per subject: the token-error envelope over simulated time (all cells pooled; per log-spaced
    /// time bin, the largest error seen), what the plot draws.
    pub error_envelope: Vec<(String, Vec<ErrorPoint>)>,
}

impl CompareReport {
    /// The totals of `subject`, if it ran.
    pub fn totals_of(&self, subject: &str) -> Option<&SubjectTotals> {
        self.totals.iter().find(|t| t.subject == subject)
    }
}

/// Records every acquire's remaining balance on the way through, for the error series.
struct Recording<'a> {
    inner: &'a mut dyn Subject,
    seen: Vec<(u64, Option<Amount>)>,
}

impl Subject for Recording<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn acquire(
        &mut self,
        key: u64,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Observed, SubjectError> {
        let got = self.inner.acquire(key, now, cost, request_id);
        self.seen
            .push((now, got.as_ref().ok().map(|observed| observed.remaining)));
        got
    }
    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        self.inner.reconfigure(key, config, now)
    }
    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.inner.forget(key)
    }
    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.inner.sweep(now)
    }
    fn would_allow(&mut self, key: u64, now: u64, cost: u64) -> Option<bool> {
        self.inner.would_allow(key, now, cost)
    }
    fn inspect(&mut self, key: u64) -> Inspection {
        self.inner.inspect(key)
    }
    fn may_evict(&self) -> bool {
        self.inner.may_evict()
    }
}

/// Builds a grid subject for a cell. The float subjects take the cell's `f64` rate.
fn build_subject(
    name: &str,
    setup: &Setup,
    rate: &GridRate,
) -> Result<Box<dyn Subject>, SubjectError> {
    let capacity = setup.config.capacity;
    let float_error = |e: bucketproof_float::FloatError| SubjectError::Build(e.to_string());
    Ok(match name {
        "core" => Box::new(CoreSubject::new(setup)?),
        "float-textbook" => Box::new(FloatSubject::from_template(
            "float-textbook",
            TextbookBucket::from_f64_rate(capacity, rate.float).map_err(float_error)?,
        )),
        "float-go" => Box::new(FloatSubject::from_template(
            "float-go",
            GoStyleBucket::from_f64_rate(capacity, rate.float).map_err(float_error)?,
        )),
        #[cfg(feature = "governor")]
        "governor" => Box::new(crate::subjects::GovernorSubject::new(setup)?),
        other => crate::subjects::Registry::default().build(other, setup)?,
    })
}

fn comparison_options() -> RunOptions {
    RunOptions {
        stop_at_first: false,
        check_retry_after: true,
        check_invariants: true,
        sample_key: None,
        max_samples: 2,
    }
}

/// The model's remaining balance after each acquire of `ops` (`None` where it errs).
fn model_series(setup: &Setup, ops: &[Op]) -> Result<Vec<Option<Rational>>, SubjectError> {
    let mut model = ModelSubject::new(setup)?;
    Ok(ops
        .iter()
        .filter_map(|op| match op {
            Op::Acquire {
                key,
                at,
                cost,
                request_id,
            } => Some(
                model
                    .acquire(*key, *at, *cost, *request_id)
                    .ok()
                    .and_then(|o| o.remaining.to_rational()),
            ),
            _ => None,
        })
        .collect())
}

/// At most this many plot points per (cell, subject): the largest error of each equal-count chunk.
const POINTS_PER_RUN: usize = 24;

fn error_points(seen: &[(u64, Option<Amount>)], model: &[Option<Rational>]) -> Vec<ErrorPoint> {
    let errors: Vec<(u64, f64)> = seen
        .iter()
        .zip(model)
        .filter_map(|((at, got), want)| {
            let got = got.and_then(Amount::to_rational)?;
            let want = want.as_ref()?;
            let error = (got - want).to_f64().value().abs();
            Some((*at, error))
        })
        .collect();
    let chunk = errors.len().div_ceil(POINTS_PER_RUN).max(1);
    errors
        .chunks(chunk)
        .filter_map(|c| {
            c.iter()
                .copied()
                .reduce(|best, x| if x.1 > best.1 { x } else { best })
        })
        .map(|(at, error)| ErrorPoint {
            at_s: at as f64 / SECOND as f64,
            error,
        })
        .collect()
}

/// Time bins of the envelope: this many per decade, from 1 ns.
const BINS_PER_DECADE: f64 = 4.0;

/// Per log-spaced time bin, the point with the largest error (bins without samples are absent).
/// Times before 1 ns fall in the first bin.
fn envelope(points: &[ErrorPoint]) -> Vec<ErrorPoint> {
    let mut bins: std::collections::BTreeMap<i64, ErrorPoint> = std::collections::BTreeMap::new();
    for p in points {
        let bin = ((p.at_s.max(PLOT_TIME_FLOOR) / PLOT_TIME_FLOOR).log10() * BINS_PER_DECADE)
            .floor() as i64;
        let slot = bins.entry(bin).or_insert(*p);
        if p.error > slot.error {
            *slot = *p;
        }
    }
    bins.into_values().collect()
}

/// Runs the grid and the named scenarios.
pub fn run(options: &CompareOptions) -> Result<CompareReport, CompareError> {
    options.validate()?;
    let mut cells = Vec::new();
    let mut series: Vec<(String, Vec<ErrorPoint>)> = SUBJECTS
        .iter()
        .map(|s| ((*s).to_owned(), Vec::new()))
        .collect();
    for rate in &options.rates {
        for &capacity in &options.capacities {
            for &horizon_ns in &options.horizons_ns {
                let setup = Setup::new(ConfigSpec::new(capacity, rate.spec.clone()));
                let seed = cell_seed(options.seed, rate, capacity, horizon_ns);
                let ops = generate_trace(rate, capacity, horizon_ns, options.ops_per_cell, seed);
                let model = model_series(&setup, &ops).map_err(|e| CompareError::BadRate {
                    input: rate.spec.clone(),
                    reason: e.to_string(),
                })?;
                let mut results = Vec::new();
                for (name, points) in SUBJECTS.iter().zip(series.iter_mut()) {
                    let mut subject = match build_subject(name, &setup, rate) {
                        Ok(subject) => subject,
                        Err(error) => {
                            results.push(SubjectCell::unsupported(name, &error));
                            continue;
                        }
                    };
                    let mut recording = Recording {
                        inner: subject.as_mut(),
                        seen: Vec::with_capacity(ops.len()),
                    };
                    let report = run_trace(
                        &setup,
                        ops.iter().cloned(),
                        &mut recording,
                        &comparison_options(),
                    );
                    match report {
                        Ok(report) => {
                            points.1.extend(error_points(&recording.seen, &model));
                            results.push(SubjectCell::from_report(&report));
                        }
                        Err(error) => results.push(SubjectCell::unsupported(name, &error)),
                    }
                }
                cells.push(Cell {
                    rate: rate.clone(),
                    capacity,
                    horizon_ns,
                    ops: ops.len() as u64,
                    last_op_ns: ops.last().and_then(Op::at).unwrap_or(0),
                    subjects: results,
                });
            }
        }
    }
    let totals = SUBJECTS.iter().map(|s| totals(s, &cells)).collect();
    Ok(CompareReport {
        options: options.clone(),
        totals,
        scenarios: named_scenarios(),
        cells,
        error_envelope: series
            .into_iter()
            .map(|(name, points)| (name, envelope(&points)))
            .collect(),
    })
}

fn totals(subject: &str, cells: &[Cell]) -> SubjectTotals {
    let mine: Vec<&SubjectCell> = cells
        .iter()
        .flat_map(|c| c.subjects.iter().filter(|s| s.subject == subject))
        .filter(|s| s.steps > 0)
        .collect();
    let sum = |f: fn(&SubjectCell) -> u64| mine.iter().map(|s| f(s)).sum();
    SubjectTotals {
        subject: subject.to_owned(),
        cells: mine.len() as u64,
        cells_diverged: mine.iter().filter(|s| s.diverged()).count() as u64,
        cells_over_admitting: mine.iter().filter(|s| s.over_admissions > 0).count() as u64,
        decision_mismatches: sum(|s| s.decision_mismatches),
        over_admissions: sum(|s| s.over_admissions),
        under_admissions: sum(|s| s.under_admissions),
        value_mismatches: sum(|s| s.value_mismatches),
        arrival_breaches: sum(|s| s.arrival_breaches),
        other_violations: sum(|s| s.other_violations),
        max_token_error: mine.iter().map(|s| s.max_token_error).fold(0.0, f64::max),
        earliest_divergence_ns: mine.iter().filter_map(|s| s.first_divergence_ns).min(),
    }
}

// ---------------------------------------------------------------------------------------------
// Named scenarios
// ---------------------------------------------------------------------------------------------

/// golang/go#46579: rate 1/3600 (Go's `0.00027777777777777778`), burst 1.
pub const GO_46579_RATE: f64 = 1.0 / 3600.0;
/// golang/go#34861: rate 10/13 (Go's `0.7692307692307693`).
#[allow(clippy::excessive_precision)] // digit for digit from the Go issue
pub const GO_34861_RATE: f64 = 0.769_230_769_230_769_3;
/// The stored token count of golang/go#46579's report, digit for digit.
#[allow(clippy::excessive_precision)]
pub const GO_46579_TOKENS: f64 = 0.549_904_920_048_055_58;

/// A named scenario: its trace and the Go-style bucket its keys start as.
pub struct NamedScenario {
    /// Stable name.
    pub name: &'static str,
    /// What it reproduces and why the trace is equivalent.
    pub summary: &'static str,
    /// The trace (the core and the model start fresh).
    pub trace: Trace,
    /// Every key of the Go subject starts as this bucket.
    pub go_template: GoStyleBucket,
}

/// The two published float failures as traces.
///
/// - `go-46579`: a limiter at 1/3600 per second, burst 1, that Go holds as 0.54990492004805558 tokens
///   at the zero time (the issue's state; `last = None` is Go's zero `time.Time`). Idle since the
///   zero time, the exact balance is full, which is also what a fresh exact bucket holds, so the
///   trace is one acquire an hour in: the core admits, Go's capped refill round trip
///   (`maxElapsed = durationFromTokens(1 - 0.5499...)`, truncated) reaches only
///   0.99999999999972 tokens and a 1 ns wait, so Go denies. A fresh Go bucket cannot reach that
///   state through `AllowN` with burst 1 (an admission leaves at most 0 tokens), so the state is set
///   as the issue's reporter set it.
/// - `go-46579-reached`: the same mechanism from a fresh Go limiter through `AllowN` alone, with
///   burst 2 so that an admission can leave a fractional balance (a trace found by a search).
/// - `go-34861`: `NewLimiter(0.7692307692307693, 1).Allow()` on a fresh limiter, Go's arithmetic
///   before the 2019 fix ([`GoRateVersion::SecondsCapped`]): the first refill reaches
///   0.9999999992307692 tokens and Go denies; the core admits.
pub fn named_scenario_defs() -> Vec<NamedScenario> {
    let one = |at: u64| Op::Acquire {
        key: 0,
        at,
        cost: 1,
        request_id: None,
    };
    let go_46579 = GoStyleBucket::from_f64_rate(1, GO_46579_RATE)
        .and_then(|b| b.with_state(GO_46579_TOKENS, None))
        .expect("the issue's state is a valid Go bucket");
    let at = |at: u64, cost: u64| Op::Acquire {
        key: 0,
        at,
        cost,
        request_id: None,
    };
    let go_46579_fresh = GoStyleBucket::from_f64_rate(2, GO_46579_RATE).expect("a valid Go bucket");
    let go_34861 = GoStyleBucket::from_f64_rate(1, GO_34861_RATE)
        .expect("a valid Go bucket")
        .with_version(GoRateVersion::SecondsCapped);
    vec![
        NamedScenario {
            name: "go-46579",
            summary: "golang/go#46579: rate 1/3600, burst 1, Go holding 0.54990492004805558 tokens \
                      at the zero time (a full bucket, exactly); one request an hour in. Exact: \
                      admitted. Go (capped refill, 2019-2021): 0.99999999999972 tokens, denied.",
            trace: Trace {
                setup: Setup::new(ConfigSpec::new(1, "1/3600s")),
                ops: vec![one(HOUR)],
            },
            go_template: go_46579,
        },
        NamedScenario {
            name: "go-46579-reached",
            summary: "golang/go#46579's mechanism reached through AllowN from a fresh limiter: rate \
                      1/3600, burst 2; take 2, take 1 at 1.80 h (0.80 left), then, 2.04 h later, \
                      take 2 from a bucket that is exactly full. Exact: admitted. Go (capped \
                      refill, 2019-2021): the refill round trip through durationFromTokens stops \
                      more than 1 ns worth short of 2 tokens, denied. Found by a deterministic search.",
            trace: Trace {
                setup: Setup::new(ConfigSpec::new(2, "1/3600s")),
                ops: vec![
                    at(7_274_941_802_361, 2),
                    at(13_770_691_126_785, 1),
                    at(21_103_551_712_482, 2),
                ],
            },
            go_template: go_46579_fresh,
        },
        NamedScenario {
            name: "go-34861",
            summary: "golang/go#34861: rate 0.7692307692307693 (10/13), burst 1, a fresh limiter; \
                      one request. Exact: admitted. Go before the 2019 fix: 0.9999999992307692 \
                      tokens, denied.",
            trace: Trace {
                setup: Setup::new(ConfigSpec::new(1, "10/13s")),
                ops: vec![one(SECOND)],
            },
            go_template: go_34861,
        },
    ]
}

/// Runs the named scenarios on the core and on their Go-style bucket.
pub fn named_scenarios() -> Vec<ScenarioResult> {
    named_scenario_defs()
        .into_iter()
        .map(|scenario| {
            let setup = &scenario.trace.setup;
            let run = |subject: &mut dyn Subject| match run_trace(
                setup,
                scenario.trace.ops.iter().cloned(),
                subject,
                &comparison_options(),
            ) {
                Ok(report) => SubjectCell::from_report(&report),
                Err(error) => SubjectCell::unsupported(&subject.name(), &error),
            };
            let core = match CoreSubject::new(setup) {
                Ok(mut core) => run(&mut core),
                Err(error) => SubjectCell::unsupported("core", &error),
            };
            let mut go = FloatSubject::from_template("float-go", scenario.go_template.clone());
            let float_go = run(&mut go);
            ScenarioResult {
                name: scenario.name.to_owned(),
                summary: scenario.summary.to_owned(),
                trace: scenario.trace,
                core,
                float_go,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn fmt_opt_ns(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".to_owned(), fmt_time)
}

/// A simulated time for tables: seconds with 9 decimals below a day, else days.
fn fmt_time(ns: u64) -> String {
    if ns < DAY {
        format!("{}.{:09} s", ns / SECOND, ns % SECOND)
    } else {
        format!("{:.3} d", ns as f64 / DAY as f64)
    }
}

fn fmt_err(e: f64) -> String {
    if e == 0.0 {
        "0".to_owned()
    } else {
        format!("{e:.2e}")
    }
}

fn cell_summary(s: &SubjectCell) -> String {
    if s.steps == 0 {
        return "n/a".to_owned();
    }
    if !s.diverged() {
        return "0".to_owned();
    }
    let mut out = format!(
        "{} (+{}/-{})",
        s.decision_mismatches, s.over_admissions, s.under_admissions
    );
    if s.value_mismatches > 0 {
        let _ = write!(out, " v{}", s.value_mismatches);
    }
    let _ = write!(out, " e{}", fmt_err(s.max_token_error));
    if s.arrival_breaches > 0 {
        let _ = write!(out, " AC{}", s.arrival_breaches);
    }
    let _ = write!(out, " @{}", fmt_opt_ns(s.first_divergence_ns));
    out
}

/// The markdown report.
pub fn render_markdown(report: &CompareReport) -> String {
    let o = &report.options;
    let mut md = String::new();
    let _ = writeln!(md, "# Float versus rational\n");
    let _ = writeln!(
        md,
        "Generated by `cargo test -p bucketproof-harness --release --test compare_report` with \
         `BUCKETPROOF_REGENERATE=1` (or `bucketproof compare`); do not edit. Deterministic: the \
         same grid gives the same bytes.\n"
    );
    let _ = writeln!(
        md,
        "Every cell runs one deterministic trace (single key, monotone time: bursts, polling \
         clients, arrivals exactly at and 1 ns around refill boundaries, idle gaps spreading the \
         ops over the horizon) through each subject in lockstep with the reference model \
         (exact big rationals). A decision differs when admit/deny differs from the model's; \
         over = admitted what the model denies (overselling), under = denied what it admits.\n"
    );
    let _ = writeln!(
        md,
        "## Grid{}\n",
        if o.full { " (full)" } else { " (CI-sized)" }
    );
    let rates: Vec<String> = o
        .rates
        .iter()
        .map(|r| format!("{} (`{}`, f64 {:?})", r.label(), r.spec, r.float))
        .collect();
    let _ = writeln!(md, "- rates: {}", rates.join(", "));
    let caps: Vec<String> = o.capacities.iter().map(u64::to_string).collect();
    let _ = writeln!(md, "- capacities: {}", caps.join(", "));
    let hs: Vec<String> = o.horizons_ns.iter().map(|&h| format_ns(h)).collect();
    let _ = writeln!(md, "- horizons: {}", hs.join(", "));
    let _ = writeln!(
        md,
        "- at most {} acquires per cell, base seed {}; {} cells",
        o.ops_per_cell,
        o.seed,
        report.cells.len()
    );
    let _ = writeln!(
        md,
        "- subjects: `core` (the exact limiter), `float-textbook` (f64 tokens and seconds), \
         `float-go` (Go x/time/rate arithmetic, 2019-2021 version), `governor` (0.10, GCRA with \
         its emission interval truncated to whole ns). The float subjects get the f64 rate above; \
         the core, governor and the model get the exact fraction.\n"
    );
    let _ = writeln!(md, "## Totals per subject\n");
    let _ = writeln!(
        md,
        "| subject | cells | cells diverged | decisions differ | over-admissions | under-admissions \
         | value mismatches | arrival-curve breaches | other oracle violations | max token error \
         | earliest divergence |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    for t in &report.totals {
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.subject,
            t.cells,
            t.cells_diverged,
            t.decision_mismatches,
            t.over_admissions,
            t.under_admissions,
            t.value_mismatches,
            t.arrival_breaches,
            t.other_violations,
            fmt_err(t.max_token_error),
            fmt_opt_ns(t.earliest_divergence_ns)
        );
    }
    let _ = writeln!(
        md,
        "\nOther oracle violations are retry-after tightness and invariant checks (e.g. Go's \
         truncated waits). governor offers no side-effect-free probe, so those two oracles skip it.\n"
    );
    let _ = writeln!(
        md,
        "Once a decision differs, the states differ too: one over-admitted request of cost `c` \
         leaves the subject `c` tokens below the model until both refill to full, so the largest \
         whole-token errors (1, 10, 1000) are such consequences; fractional ones are the arithmetic \
         itself (f64 rounding, Go admitting a deficit worth less than 1 ns, governor's faster refill).\n"
    );
    let _ = writeln!(md, "### governor's emission interval\n");
    let _ = writeln!(
        md,
        "governor keeps `1/rate` as whole nanoseconds. Where that truncates, it refills faster than \
         configured and oversells; where it is exact, it matches the model in every answer.\n"
    );
    let _ = writeln!(
        md,
        "| rate | exact interval (ns) | governor's (ns) | cells with any differing answer |\n|---|---|---|---|"
    );
    for rate in &o.rates {
        let scaled = u128::from(rate.denom) * u128::from(SECOND);
        let p = u128::from(rate.numer);
        let exact = if scaled % p == 0 {
            (scaled / p).to_string()
        } else {
            format!("{:.3}", scaled as f64 / p as f64)
        };
        let governor: Vec<&SubjectCell> = report
            .cells
            .iter()
            .filter(|c| c.rate == *rate)
            .flat_map(|c| c.subjects.iter().filter(|s| s.subject == "governor"))
            .collect();
        let diverged = governor.iter().filter(|s| s.diverged()).count();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} of {} |",
            rate.label(),
            exact,
            scaled / p,
            diverged,
            governor.len()
        );
    }
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "![token error over simulated time]({REPORT_STEM}.svg)\n"
    );
    let _ = writeln!(md, "## Named scenarios\n");
    let _ = writeln!(md, "| scenario | core | float-go | |\n|---|---|---|---|");
    for s in &report.scenarios {
        let _ = writeln!(
            md,
            "| `{}` | {} | {}: {} (+{}/-{}) | {} |",
            s.name,
            s.core.status,
            s.float_go.status,
            s.float_go.decision_mismatches,
            s.float_go.over_admissions,
            s.float_go.under_admissions,
            s.summary
        );
    }
    let _ = writeln!(md, "\n## Cells\n");
    let _ = writeln!(
        md,
        "Each subject column: `decisions differing (+over/-under)`, `v` value mismatches, `e` \
         largest token error, `AC` arrival-curve breaches, `@` first divergence (simulated \
         time). `0`: identical to the model in every answer.\n"
    );
    let _ = write!(md, "| rate | capacity | horizon | ops |");
    for s in SUBJECTS {
        let _ = write!(md, " {s} |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|---|---|---|{}", "---|".repeat(SUBJECTS.len()));
    for c in &report.cells {
        let _ = write!(
            md,
            "| {} | {} | {} | {} |",
            c.rate.label(),
            c.capacity,
            format_ns(c.horizon_ns),
            c.ops
        );
        for s in &c.subjects {
            let _ = write!(md, " {} |", cell_summary(s));
        }
        let _ = writeln!(md);
    }
    md
}

/// The totals per subject as plain text, for a terminal.
pub fn summary(report: &CompareReport) -> String {
    let mut out = format!(
        "{} cells; per subject: decisions differing (over/under), value mismatches, arrival-curve \
         breaches, max token error\n",
        report.cells.len()
    );
    for t in &report.totals {
        let _ = writeln!(
            out,
            "  {:<15} {:>6} ({}/{})  values {:>6}  arrival {:>5}  max error {}",
            t.subject,
            t.decision_mismatches,
            t.over_admissions,
            t.under_admissions,
            t.value_mismatches,
            t.arrival_breaches,
            fmt_err(t.max_token_error)
        );
    }
    for s in &report.scenarios {
        let _ = writeln!(
            out,
            "  scenario {:<17} core {}, float-go {} ({} under-admission)",
            s.name, s.core.status, s.float_go.status, s.float_go.under_admissions
        );
    }
    out
}

/// The JSON report (pretty, stable key order from the struct definitions).
pub fn render_json(report: &CompareReport) -> String {
    let mut json =
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    json.push('\n');
    json
}

/// Where a value sits on the plot's log axes: zeros (exact answers) on the floor.
const PLOT_ERROR_FLOOR: f64 = 1e-18;
const PLOT_TIME_FLOOR: f64 = 1e-9;

/// The SVG plot: token error against simulated time, one colour per subject, log-log.
pub fn render_svg(report: &CompareReport) -> Result<String, CompareError> {
    use plotters::prelude::*;
    fn plot_error(e: impl std::fmt::Display) -> CompareError {
        CompareError::Plot(e.to_string())
    }
    let colors = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
    ];
    let x_max = report
        .options
        .horizons_ns
        .iter()
        .copied()
        .max()
        .map_or(1.0, |h| h as f64 / SECOND as f64)
        .max(1.0);
    let y_max = report
        .totals
        .iter()
        .map(|t| t.max_token_error)
        .fold(1.0, f64::max)
        * 10.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "largest |subject - model| remaining tokens per time bin, all cells (0 drawn at 1e-18)",
                ("sans-serif", 18),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d(
                (PLOT_TIME_FLOOR..x_max).log_scale(),
                (PLOT_ERROR_FLOOR..y_max).log_scale(),
            )
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("simulated time (s)")
            .y_desc("token error")
            .x_label_formatter(&|x| format!("{x:.0e}"))
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .draw()
            .map_err(plot_error)?;
        for (i, (name, points)) in report.error_envelope.iter().enumerate() {
            let color = colors[i % colors.len()];
            // Each subject's floor a little apart, so an all-exact subject stays visible.
            let floor = PLOT_ERROR_FLOOR * (1.0 + i as f64);
            let xy: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (p.at_s.max(PLOT_TIME_FLOOR), p.error.max(floor)))
                .collect();
            chart
                .draw_series(LineSeries::new(xy.iter().copied(), color.stroke_width(2)))
                .map_err(plot_error)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(xy.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(plot_error)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// The report files' contents: `(file name, bytes)`.
pub fn render_files(report: &CompareReport) -> Result<Vec<(String, String)>, CompareError> {
    Ok(vec![
        (format!("{REPORT_STEM}.md"), render_markdown(report)),
        (format!("{REPORT_STEM}.json"), render_json(report)),
        (format!("{REPORT_STEM}.svg"), render_svg(report)?),
    ])
}

/// Runs `options` and writes `float-vs-rational.{md,json,svg}` into `dir` (created if missing).
pub fn write_report_with(
    dir: &Path,
    options: &CompareOptions,
) -> Result<CompareReport, CompareError> {
    let report = run(options)?;
    let io = |path: &Path, e: std::io::Error| CompareError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for (name, contents) in render_files(&report)? {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(|e| io(&path, e))?;
    }
    Ok(report)
}

/// Writes the committed report (the CI-sized grid, [`CompareOptions::ci`]) into `dir`.
pub fn write_report(dir: &Path) -> Result<CompareReport, CompareError> {
    write_report_with(dir, &CompareOptions::ci())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_rates_are_the_issues_f64_literals() {
        let r = GridRate::parse("10/13s").unwrap();
        assert_eq!(r.float, GO_34861_RATE);
        assert_eq!(r.float.to_bits(), 0.769_230_769_230_769_3_f64.to_bits());
        let r = GridRate::parse("1/3600s").unwrap();
        #[allow(clippy::excessive_precision)]
        let go = 0.000_277_777_777_777_777_78_f64;
        assert_eq!(r.float, go);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert!(matches!(
            GridRate::parse("fast"),
            Err(CompareError::BadRate { .. })
        ));
        assert!(matches!(
            GridRate::parse("0/s"),
            Err(CompareError::BadRate { .. })
        ));
        assert!(matches!(
            parse_horizon("10"),
            Err(CompareError::BadHorizon { .. })
        ));
        assert!(matches!(
            parse_horizon("0s"),
            Err(CompareError::BadHorizon { .. })
        ));
        assert!(matches!(
            parse_horizon("999999y"),
            Err(CompareError::BadHorizon { .. })
        ));
        assert_eq!(parse_horizon("100y").unwrap(), 100 * YEAR);
        assert_eq!(format_ns(100 * YEAR), "100 y");
        let mut empty = CompareOptions::ci();
        empty.capacities.clear();
        assert_eq!(run(&empty), Err(CompareError::EmptyGrid("no capacities")));
    }

    #[test]
    fn command_line_arguments_replace_the_grid() {
        let none: [&str; 0] = [];
        assert_eq!(
            CompareOptions::from_args(true, &none, &none).unwrap(),
            CompareOptions::full()
        );
        let options = CompareOptions::from_args(false, &["7000000/s"], &["1s", "100y"]).unwrap();
        assert_eq!(options.rates, vec![GridRate::parse("7000000/s").unwrap()]);
        assert_eq!(options.horizons_ns, vec![SECOND, 100 * YEAR]);
        assert!(matches!(
            CompareOptions::from_args(false, &["7"], &none),
            Err(CompareError::BadRate { .. })
        ));
        assert!(matches!(
            CompareOptions::from_args(false, &none, &["soon"]),
            Err(CompareError::BadHorizon { .. })
        ));
    }

    #[test]
    fn traces_are_deterministic_monotone_and_inside_the_horizon() {
        let rate = GridRate::parse("7000000/s").unwrap();
        let a = generate_trace(&rate, 10, SECOND, 500, 7);
        assert_eq!(a, generate_trace(&rate, 10, SECOND, 500, 7));
        assert_ne!(a, generate_trace(&rate, 10, SECOND, 500, 8));
        assert_eq!(a.len(), 500);
        let times: Vec<u64> = a.iter().filter_map(Op::at).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        assert!(times.iter().all(|&t| t <= SECOND));
        // Sparse long horizons still reach far into the horizon.
        let slow = GridRate::parse("1/3600s").unwrap();
        let long = generate_trace(&slow, 1, 100 * YEAR, 300, 7);
        let last = long.iter().filter_map(Op::at).max().unwrap();
        assert!(last > 50 * YEAR, "last op at {last}");
    }

    #[test]
    fn named_scenarios_pass_on_the_core_and_fail_on_go() {
        for s in named_scenarios() {
            assert_eq!(s.core.status, "pass", "{}", s.name);
            assert!(!s.core.diverged(), "{}", s.name);
            assert_eq!(s.float_go.status, "diverged", "{}", s.name);
            assert_eq!(s.float_go.under_admissions, 1, "{}", s.name);
        }
    }
}
