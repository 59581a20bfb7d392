//! Reproductions of published float failures: golang/go#46579 and golang/go#34861 as traces.
//!
//! Owns the named scenarios ([`named_scenario_defs`]) and their run ([`named_scenarios`]). Promises:
//! each passes on the exact core and fails on the Go-style float bucket its summary names, with the
//! Go state set as the Go issue's reporter set it where a fresh Go bucket cannot reach it (each summary
//! says which).

use bucketproof_float::{GoRateVersion, GoStyleBucket};
use serde::Serialize;

use super::cell::{SubjectCell, comparison_options};
use bucketproof_check::runner::run_trace;
use bucketproof_check::subjects::CoreSubject;
use bucketproof_check::subjects::float::FloatSubject;
use bucketproof_trace::duration::{HOUR, SECOND};
use bucketproof_trace::subject::Subject;
use bucketproof_trace::trace::{Acquire, ConfigSpec, Op, Setup, Trace};

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
///   at the zero time (the Go issue's state; `last = None` is Go's zero `time.Time`). Idle since the
///   zero time, the exact balance is full, which is also what a fresh exact bucket holds, so the
///   trace is one acquire an hour in: the core admits, Go's capped refill round trip
///   (`maxElapsed = durationFromTokens(1 - 0.5499...)`, truncated) reaches only
///   0.99999999999972 tokens and a 1 ns wait, so Go denies. A fresh Go bucket cannot reach that
///   state through `AllowN` with burst 1 (an admission leaves at most 0 tokens), so the state is set
///   as the Go issue's reporter set it.
/// - `go-46579-reached`: the same mechanism from a fresh Go limiter through `AllowN` alone, with
///   burst 2 so that an admission can leave a fractional balance (a trace found by a search).
/// - `go-34861`: `NewLimiter(0.7692307692307693, 1).Allow()` on a fresh limiter, Go's arithmetic
///   before the 2019 fix ([`GoRateVersion::SecondsCapped`]): the first refill reaches
///   0.9999999992307692 tokens and Go denies; the core admits.
pub fn named_scenario_defs() -> Vec<NamedScenario> {
    let one = |now: u64| {
        Op::Acquire(Acquire {
            key: 0,
            cost: 1,
            now,
            request_id: None,
        })
    };
    let go_46579 = GoStyleBucket::from_f64_rate(1, GO_46579_RATE)
        .and_then(|b| b.with_state(GO_46579_TOKENS, None))
        .expect("the Go issue's state is a valid Go bucket");
    let take = |cost: u64, now: u64| {
        Op::Acquire(Acquire {
            key: 0,
            cost,
            now,
            request_id: None,
        })
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
                    take(2, 7_274_941_802_361),
                    take(1, 13_770_691_126_785),
                    take(2, 21_103_551_712_482),
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

#[cfg(test)]
mod tests {
    use super::*;

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
