//! The grid: which rates, capacities and horizons a comparison covers, and how they are given.
//!
//! Owns [`CompareOptions`] (the CI-sized default the committed report shows, the full grid, and
//! replacements from a command line) and [`GridRate`] (one rate as the exact fraction the core and the
//! model get and the `f64` a user would write for the float subjects: for 10/13 that is
//! `0.7692307692307693`, bit for bit). Promises: options that pass validation describe a non-empty
//! grid of valid configs; bad input is a typed [`CompareError`].

use bucketproof_limiter::Nanos;
use serde::Serialize;

use super::{CompareError, FULL_ENV};
use bucketproof_trace::duration::{self, DAY, HOUR, MINUTE, SECOND, YEAR};
use bucketproof_trace::trace::ConfigSpec;

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

/// Parses a horizon: `<count><unit>` with unit `ns`, `us`, `ms`, `s`, `min`, `h`, `d` or `y` (365 d),
/// by the harness's one duration parser; unlike a scenario's durations, the unit is required and the
/// horizon must be positive.
pub fn parse_horizon(input: &str) -> Result<Nanos, CompareError> {
    let bad = |reason: String| CompareError::BadHorizon {
        input: input.to_owned(),
        reason,
    };
    if !duration::has_unit(input) {
        return Err(bad("missing unit (ns, us, ms, s, min, h, d, y)".into()));
    }
    match duration::parse(input) {
        Ok(0) => Err(bad("must be positive".into())),
        Ok(ns) => Ok(ns),
        Err(error) => Err(bad(error.to_string())),
    }
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

/// The default grid's rates, in order: 1/3600, 10/13 (Go's 0.7692307692307693), 1/3, 5/3, 7,
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
        self.rates = parse_each(specs, GridRate::parse)?;
        Ok(self)
    }

    /// Replaces the horizons with parsed ones (e.g. `"1s"`, `"100y"`).
    pub fn with_horizons<S: AsRef<str>>(
        mut self,
        horizons: &[S],
    ) -> Result<CompareOptions, CompareError> {
        self.horizons_ns = parse_each(horizons, parse_horizon)?;
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

    pub(super) fn validate(&self) -> Result<(), CompareError> {
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

/// Every item parsed, or the first error.
fn parse_each<S: AsRef<str>, T>(
    items: &[S],
    parse: fn(&str) -> Result<T, CompareError>,
) -> Result<Vec<T>, CompareError> {
    items.iter().map(|item| parse(item.as_ref())).collect()
}

fn default_rates() -> Vec<GridRate> {
    DEFAULT_RATES
        .iter()
        .map(|spec| GridRate::parse(spec).expect("the built-in rates parse"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::GO_34861_RATE;

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
        let mut empty = CompareOptions::ci();
        empty.capacities.clear();
        assert_eq!(
            super::super::run(&empty),
            Err(CompareError::EmptyGrid("no capacities"))
        );
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
}
