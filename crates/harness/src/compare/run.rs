//! Running the grid: every cell's trace through every subject, in lockstep with the model.
//!
//! Owns the results ([`CompareReport`], [`Cell`], [`SubjectTotals`], the
//! token-error series) and [`run`]. Promises, per cell and subject: decisions that differ from the
//! model, over-admissions (admitted what the model denies: overselling) and under-admissions, the
//! first divergence time, the largest token error and arrival-curve breaches, all from
//! [`RunReport::divergence`], and the token-error series computed exactly against the model. A
//! subject that cannot run a cell is recorded as not run, never dropped. No timings: the same options
//! give the same report.

use bucketproof_float::{GoStyleBucket, TextbookBucket};
use bucketproof_model::Rational;
use serde::Serialize;

use super::cell::{SubjectCell, comparison_options};
use super::go_repro::{ScenarioResult, named_scenarios};
use super::traces::{cell_seed, generate_trace};
use super::{CompareError, CompareOptions, GridRate, SUBJECTS};
use bucketproof_check::runner::run_trace;
use bucketproof_check::subjects::float::FloatSubject;
use bucketproof_check::subjects::{CoreSubject, ModelSubject};
use bucketproof_trace::duration::SECOND;
use bucketproof_trace::subject::{Amount, Inspection, Observed, Subject, SubjectError};
use bucketproof_trace::trace::{Acquire, ConfigSpec, Op, Setup};

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
    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let got = self.inner.acquire(acquire);
        self.seen.push((
            acquire.now,
            got.as_ref().ok().map(|observed| observed.remaining),
        ));
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
    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        self.inner.would_allow(acquire)
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
    let capacity = setup.config.smallest_capacity();
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
        "governor" => Box::new(bucketproof_subjects::GovernorSubject::new(setup)?),
        other => crate::Registry::default().build(other, setup)?,
    })
}

/// The model's remaining balance after each acquire of `ops` (`None` where it errs).
fn model_series(setup: &Setup, ops: &[Op]) -> Result<Vec<Option<Rational>>, SubjectError> {
    let mut model = ModelSubject::new(setup)?;
    Ok(ops
        .iter()
        .filter_map(|op| match op {
            Op::Acquire(acquire) => Some(
                model
                    .acquire(*acquire)
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

/// The earliest time the envelope and the plot tell apart, seconds: 1 ns.
pub(super) const TIME_FLOOR_S: f64 = 1e-9;

/// Time bins of the envelope: this many per decade, from 1 ns.
const BINS_PER_DECADE: f64 = 4.0;

/// Per log-spaced time bin, the point with the largest error (bins without samples are absent).
/// Times before 1 ns fall in the first bin.
fn envelope(points: &[ErrorPoint]) -> Vec<ErrorPoint> {
    let mut bins: std::collections::BTreeMap<i64, ErrorPoint> = std::collections::BTreeMap::new();
    for p in points {
        let bin =
            ((p.at_s.max(TIME_FLOOR_S) / TIME_FLOOR_S).log10() * BINS_PER_DECADE).floor() as i64;
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
                    last_op_ns: ops.last().and_then(Op::now).unwrap_or(0),
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
