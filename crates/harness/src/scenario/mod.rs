//! Scenarios: the declarative TOML workloads of `scenarios/*.toml`, and their loading.
//!
//! A scenario says what traffic to generate (keys, arrivals, costs, clock behaviour, reconfigurations,
//! request ids, sweeps), how long, with which seeds, against which subjects, and which events the run
//! must *reach* ([`crate::runner::EVENTS`]), so that no scenario passes vacuously. [`expand`] turns a
//! scenario and a seed into a stream of [`Op`]s, deterministically.
//!
//! Every table denies unknown fields, and every value is validated while it is parsed, so a mistake is
//! reported as `file:line:column: what was expected` (from toml's spans), never a panic and never a
//! silently ignored typo. `scenarios/README.md` documents the format.

pub mod expand;
pub mod sample;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

pub use self::expand::Expansion;
use crate::runner::EVENTS;
use crate::trace::{ConfigSpec, Op, PolicySpec, Setup};

/// Nanoseconds in a (365-day) year, for durations written with `y`.
pub const YEAR_NS: u64 = 365 * 86_400 * 1_000_000_000;

/// A duration in nanoseconds, written in TOML as an integer (ns) or a string `"<n><unit>"` with unit
/// `ns`, `us`, `ms`, `s`, `min`, `h`, `d` or `y` (365 days), e.g. `"250ms"`, `"3y"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Parses `"<n><unit>"` (or a bare integer of nanoseconds).
    pub fn parse(text: &str) -> Result<Nanos, String> {
        let text = text.trim();
        let digits_end = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (count, unit) = text.split_at(digits_end);
        let count: u64 = count
            .parse()
            .map_err(|_| format!("expected a duration like \"250ms\" or \"3y\", found {text:?}"))?;
        let unit_ns: u64 = match unit.trim() {
            "" | "ns" => 1,
            "us" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "min" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "y" => YEAR_NS,
            other => {
                return Err(format!(
                    "unknown duration unit {other:?} in {text:?}; use ns, us, ms, s, min, h, d or y"
                ));
            }
        };
        count
            .checked_mul(unit_ns)
            .map(Nanos)
            .ok_or_else(|| format!("duration {text:?} does not fit in u64 nanoseconds"))
    }
}

impl<'de> Deserialize<'de> for Nanos {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Nanos;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration: an integer of nanoseconds or a string like \"250ms\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Nanos, E> {
                u64::try_from(v)
                    .map(Nanos)
                    .map_err(|_| E::custom(format!("a duration cannot be negative ({v})")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Nanos, E> {
                Ok(Nanos(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Nanos, E> {
                Nanos::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// A probability in `[0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Default)]
pub struct Probability(pub f64);

impl<'de> Deserialize<'de> for Probability {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(deserializer)?;
        if (0.0..=1.0).contains(&value) {
            Ok(Probability(value))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a probability between 0 and 1, found {value}"
            )))
        }
    }
}

impl Probability {
    /// As an integer-threshold chance (see [`sample::Chance`]).
    pub fn chance(self) -> sample::Chance {
        sample::Chance::new(self.0)
    }
}

/// An event name from [`EVENTS`], checked while parsing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct EventName(pub String);

impl<'de> Deserialize<'de> for EventName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        if EVENTS.contains(&name.as_str()) {
            Ok(EventName(name))
        } else {
            Err(serde::de::Error::custom(format!(
                "unknown event {name:?}; known events: {}",
                EVENTS.join(", ")
            )))
        }
    }
}

/// A validated bucket config: `capacity` whole tokens and a `rate` like `"5/s"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawConfig")]
pub struct ConfigValue(pub ConfigSpec);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    capacity: u64,
    rate: String,
}

impl TryFrom<RawConfig> for ConfigValue {
    type Error = String;
    fn try_from(raw: RawConfig) -> Result<Self, String> {
        let spec = ConfigSpec::new(raw.capacity, raw.rate);
        spec.to_model().map_err(|e| e.to_string())?;
        Ok(ConfigValue(spec))
    }
}

/// `[setup]`: the default config and the limiter's knobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawSetup")]
pub struct SetupSpec(pub Setup);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSetup {
    capacity: u64,
    rate: String,
    max_keys: Option<usize>,
    policy: Option<PolicySpec>,
    sweep_per_op: Option<usize>,
    dedupe_window: Option<Nanos>,
    dedupe_per_key: Option<usize>,
}

impl TryFrom<RawSetup> for SetupSpec {
    type Error = String;
    fn try_from(raw: RawSetup) -> Result<Self, String> {
        let ConfigValue(config) = ConfigValue::try_from(RawConfig {
            capacity: raw.capacity,
            rate: raw.rate,
        })?;
        let mut setup = Setup::new(config);
        if let Some(max_keys) = raw.max_keys {
            if max_keys == 0 {
                return Err("max_keys must be at least 1".into());
            }
            setup.max_keys = max_keys;
        }
        if let Some(policy) = raw.policy {
            setup.policy = policy;
        }
        if let Some(sweep) = raw.sweep_per_op {
            setup.sweep_per_op = sweep;
        }
        if let Some(window) = raw.dedupe_window {
            setup.dedupe_window_ns = window.0;
        }
        if let Some(per_key) = raw.dedupe_per_key {
            setup.dedupe_per_key = per_key;
        }
        Ok(SetupSpec(setup))
    }
}

/// `[[tiers]]`: keys `first..=last` get their own config, by a reconfigure at the start of the trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// `[first, last]`, inclusive.
    pub keys: [u64; 2],
    /// Whole tokens.
    pub capacity: u64,
    /// Tokens per period.
    pub rate: String,
}

/// How keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KeyDistribution {
    /// Every key equally likely.
    #[default]
    Uniform,
    /// Key `k` with weight `1 / (k + 1)^exponent`.
    Zipf,
    /// Keys in turn: 0, 1, ..., count - 1, 0, ...
    RoundRobin,
}

/// `[keys]`: the key population.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Keys {
    /// Keys are `0..count`.
    #[serde(default = "one")]
    pub count: u64,
    /// How one is picked.
    #[serde(default)]
    pub distribution: KeyDistribution,
    /// Zipf exponent, a whole number 1..=4 (integer weights keep the table exact).
    #[serde(default = "one_u32")]
    pub zipf_exponent: u32,
    /// Probability that an acquire comes from an attacker with a fresh, never-seen key.
    #[serde(default)]
    pub attacker: Probability,
}

fn one() -> u64 {
    1
}
fn one_u32() -> u32 {
    1
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            count: 1,
            distribution: KeyDistribution::Uniform,
            zipf_exponent: 1,
            attacker: Probability(0.0),
        }
    }
}

/// The first key handed to attackers: far above any population, so a fresh id is never a real key.
pub const ATTACKER_KEY_BASE: u64 = 1 << 40;

/// Arrival patterns (the true time between consecutive ops).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalPattern {
    /// Exponential gaps with mean `gap` (a Poisson process).
    #[default]
    Poisson,
    /// Every gap exactly `gap` (`gap = 0`: time never moves).
    Fixed,
    /// On/off: Poisson with mean `gap` for `on`, then silence for `off`.
    Bursts,
    /// On the refill grid: `start + k * period` (`offset = "at"`), 1 ns before it (`"before"`), or both
    /// in turn (`"both"`: before, then at).
    Boundary,
}

/// Where on the refill grid `boundary` arrivals land.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BoundaryOffset {
    /// Exactly on the boundary.
    At,
    /// 1 ns before it.
    Before,
    /// Before, then at, for every boundary.
    #[default]
    Both,
}

/// `[arrivals]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrivals {
    /// The pattern.
    #[serde(default)]
    pub pattern: ArrivalPattern,
    /// Mean (poisson, bursts) or exact (fixed) gap.
    #[serde(default = "default_gap")]
    pub gap: Nanos,
    /// Bursts: length of an on phase.
    #[serde(default = "default_on")]
    pub on: Nanos,
    /// Bursts: length of an off phase.
    #[serde(default = "default_off")]
    pub off: Nanos,
    /// Boundary: the grid spacing; default: the time the default config takes to refill one token
    /// (rounded up to whole ns).
    pub period: Option<Nanos>,
    /// Boundary: where on the grid.
    #[serde(default)]
    pub offset: BoundaryOffset,
    /// The first `initial_burst` ops all come at the start time (drains or probes a full bucket).
    #[serde(default)]
    pub initial_burst: u64,
}

fn default_gap() -> Nanos {
    Nanos(10_000_000)
}
fn default_on() -> Nanos {
    Nanos(1_000_000_000)
}
fn default_off() -> Nanos {
    Nanos(5_000_000_000)
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals {
            pattern: ArrivalPattern::Poisson,
            gap: default_gap(),
            on: default_on(),
            off: default_off(),
            period: None,
            offset: BoundaryOffset::Both,
            initial_burst: 0,
        }
    }
}

/// A cost as written: a whole number, `"capacity"` (of the key's config) or `"over_capacity"`
/// (capacity + 1, always invalid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CostValue {
    /// Exactly this many tokens (0 is invalid by the spec, and useful).
    Tokens(u64),
    /// The key's capacity.
    Capacity,
    /// The key's capacity plus one.
    OverCapacity,
}

impl<'de> Deserialize<'de> for CostValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = CostValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number of tokens, \"capacity\" or \"over_capacity\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<CostValue, E> {
                u64::try_from(v)
                    .map(CostValue::Tokens)
                    .map_err(|_| E::custom(format!("a cost cannot be negative ({v})")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<CostValue, E> {
                Ok(CostValue::Tokens(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CostValue, E> {
                match v {
                    "capacity" => Ok(CostValue::Capacity),
                    "over_capacity" => Ok(CostValue::OverCapacity),
                    other => Err(E::custom(format!(
                        "expected a whole number, \"capacity\" or \"over_capacity\", found {other:?}"
                    ))),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `[[costs]]`: one weighted choice. Give `cost`, or `range = [low, high]` (uniform, inclusive).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawCost")]
pub struct CostChoice {
    /// What to charge.
    pub cost: CostRange,
    /// Relative weight.
    pub weight: u64,
}

/// A cost or a range of costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CostRange {
    /// One value.
    One(CostValue),
    /// Uniform in `[low, high]`.
    Range(u64, u64),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCost {
    cost: Option<CostValue>,
    range: Option<[u64; 2]>,
    #[serde(default = "one")]
    weight: u64,
}

impl TryFrom<RawCost> for CostChoice {
    type Error = String;
    fn try_from(raw: RawCost) -> Result<Self, String> {
        let cost = match (raw.cost, raw.range) {
            (Some(cost), None) => CostRange::One(cost),
            (None, Some([low, high])) if low <= high => CostRange::Range(low, high),
            (None, Some([low, high])) => {
                return Err(format!("cost range [{low}, {high}] is empty (low > high)"));
            }
            _ => return Err("give exactly one of `cost` or `range`".into()),
        };
        if raw.weight == 0 || raw.weight > 1 << 32 {
            return Err("weight must be between 1 and 2^32".into());
        }
        Ok(CostChoice {
            cost,
            weight: raw.weight,
        })
    }
}

/// A rollback: with `probability`, an op's clock reads `size` behind the true time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    /// Per op.
    pub probability: Probability,
    /// How far back.
    pub size: Nanos,
}

/// A jump: with `probability`, the true time leaps forward by `size` (and stays there).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jump {
    /// Per op.
    pub probability: Probability,
    /// How far forward.
    pub size: Nanos,
}

/// `[clock]`: how the clock an op reads relates to the true time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Clock {
    /// True time of the first op.
    pub start: Option<Nanos>,
    /// Or: start this long before `u64::MAX` (the end of the clock).
    pub start_before_end: Option<Nanos>,
    /// Each reading is off by a uniform amount in `[-jitter, +jitter]`.
    #[serde(default)]
    pub jitter: Nanos,
    /// Readings behind the true time.
    pub rollback: Option<Rollback>,
    /// With this probability, a reading repeats the previous one (the clock did not move).
    #[serde(default)]
    pub frozen: Probability,
    /// Leaps of the true time.
    pub jump: Option<Jump>,
}

/// `[[reconfigure.schedule]]`: at op `step`, key `key` moves to a new config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledReconfig {
    /// 0-based index among the scenario's ops (after the tier setup).
    pub step: u64,
    /// The key.
    pub key: u64,
    /// Whole tokens.
    pub capacity: u64,
    /// Tokens per period.
    pub rate: String,
}

/// `[reconfigure]`: reconfigurations at given steps, or at random with one of `configs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Reconfigure {
    /// Per op: reconfigure a key of the population to one of `configs`.
    #[serde(default)]
    pub probability: Probability,
    /// Random reconfigurations pick among these.
    #[serde(default)]
    pub configs: Vec<ConfigValue>,
    /// Fixed reconfigurations.
    #[serde(default)]
    pub schedule: Vec<ScheduledReconfig>,
}

/// `[request_ids]`: idempotency ids on acquires.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestIds {
    /// Per acquire: it carries a request id.
    #[serde(default)]
    pub probability: Probability,
    /// Per acquire: it repeats a recent request (same key, id and cost) instead: a client retry.
    #[serde(default)]
    pub repeat: Probability,
    /// How many recent requests a repeat chooses from.
    #[serde(default = "default_recent")]
    pub recent: usize,
}

fn default_recent() -> usize {
    8
}

impl Default for RequestIds {
    fn default() -> Self {
        RequestIds {
            probability: Probability(0.0),
            repeat: Probability(0.0),
            recent: default_recent(),
        }
    }
}

/// `[maintenance]`: sweeps and forgets mixed into the stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Maintenance {
    /// Per op: a sweep.
    #[serde(default)]
    pub sweep: Probability,
    /// A sweep every this many ops (0: never).
    #[serde(default)]
    pub sweep_every: u64,
    /// Per op: forget a key of the population.
    #[serde(default)]
    pub forget: Probability,
}

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
}

fn default_seeds() -> Vec<u64> {
    vec![1]
}
fn default_subjects() -> Vec<String> {
    vec!["core".into()]
}

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML is malformed or a value is invalid, at a known place.
    #[error("{path}:{line}:{column}: {message}")]
    At {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was expected.
        message: String,
    },
    /// The scenario is well-formed but inconsistent (checked after parsing).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

impl Scenario {
    /// Parses scenario text; `path` names it in errors and gives the default name.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let mut scenario: Scenario = toml::from_str(text).map_err(|error| {
            let (line, column) = error
                .span()
                .map_or((1, 1), |span| line_column(text, span.start));
            ScenarioError::At {
                path: path.to_path_buf(),
                line,
                column,
                message: error.message().trim().to_owned(),
            }
        })?;
        if scenario.name.is_empty() {
            scenario.name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        scenario
            .validate()
            .map_err(|message| ScenarioError::Invalid {
                path: path.to_path_buf(),
                message,
            })?;
        Ok(scenario)
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::parse(&text, path)
    }

    /// Cross-field checks that no single value can make.
    fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !name_ok {
            return Err(format!(
                "name {:?}: use lowercase letters, digits, '-' and '_' (it names report files)",
                self.name
            ));
        }
        if self.seeds.is_empty() {
            return Err("seeds: give at least one seed".into());
        }
        if self.subjects.is_empty() {
            return Err("subjects: give at least one subject".into());
        }
        if self.reach.is_empty() {
            return Err(
                "reach: declare at least one event the run must reach (no vacuous passes)".into(),
            );
        }
        if self.length == 0 {
            return Err("length must be at least 1".into());
        }
        if self.keys.count == 0 {
            return Err("keys.count must be at least 1".into());
        }
        if self.keys.distribution == KeyDistribution::Zipf {
            if !(1..=4).contains(&self.keys.zipf_exponent) {
                return Err("keys.zipf_exponent must be a whole number from 1 to 4".into());
            }
            if self.keys.count > 1 << 24 {
                return Err("keys.count is at most 2^24 with a zipf distribution".into());
            }
        }
        for (index, tier) in self.tiers.iter().enumerate() {
            let [first, last] = tier.keys;
            if first > last {
                return Err(format!("tiers[{index}].keys: [{first}, {last}] is empty"));
            }
            if last - first >= 1 << 20 {
                return Err(format!("tiers[{index}].keys: at most 2^20 keys per tier"));
            }
            ConfigSpec::new(tier.capacity, tier.rate.clone())
                .to_model()
                .map_err(|e| format!("tiers[{index}]: {e}"))?;
        }
        for (index, entry) in self.reconfigure.schedule.iter().enumerate() {
            ConfigSpec::new(entry.capacity, entry.rate.clone())
                .to_model()
                .map_err(|e| format!("reconfigure.schedule[{index}]: {e}"))?;
        }
        if self.reconfigure.probability.0 > 0.0 && self.reconfigure.configs.is_empty() {
            return Err("reconfigure.probability needs at least one entry in configs".into());
        }
        if self.clock.start.is_some() && self.clock.start_before_end.is_some() {
            return Err("clock: give start or start_before_end, not both".into());
        }
        if self.arrivals.pattern == ArrivalPattern::Boundary
            && self.arrivals.period.is_none()
            && self
                .setup
                .0
                .config
                .to_config()
                .is_ok_and(|c| c.rate().numer() == 0)
        {
            return Err("arrivals.period is required when the default rate is 0".into());
        }
        if self.arrivals.pattern == ArrivalPattern::Bursts && self.arrivals.on.0 == 0 {
            return Err("arrivals.on must be positive for bursts".into());
        }
        if self.request_ids.recent == 0 {
            return Err("request_ids.recent must be at least 1".into());
        }
        Ok(())
    }

    /// The setup subjects are built with.
    pub fn setup(&self) -> Setup {
        self.setup.0.clone()
    }

    /// Ops per seed, including the tier setup (one reconfigure per tier key).
    pub fn total_ops(&self) -> u64 {
        let tier_ops: u64 = self.tiers.iter().map(|t| t.keys[1] - t.keys[0] + 1).sum();
        tier_ops + self.length
    }

    /// The op stream for `seed`: deterministic, lazy, memory flat in the length.
    pub fn expand(&self, seed: u64) -> Expansion {
        Expansion::new(self, seed)
    }

    /// The first `count` ops for `seed` (a failure's prefix).
    pub fn prefix(&self, seed: u64, count: u64) -> Vec<Op> {
        self.expand(seed).take(count as usize).collect()
    }

    /// The seeds to run: the first `count` declared seeds, continued with the integers after the largest
    /// declared one when `count` exceeds them; all declared seeds for `None`.
    pub fn seeds_to_run(&self, count: Option<usize>) -> Vec<u64> {
        let Some(count) = count else {
            return self.seeds.clone();
        };
        let mut seeds: Vec<u64> = self.seeds.iter().copied().take(count).collect();
        let mut next = self.seeds.iter().copied().max().unwrap_or(0);
        while seeds.len() < count {
            next = next.wrapping_add(1);
            if !seeds.contains(&next) {
                seeds.push(next);
            }
        }
        seeds
    }
}

/// Loads every `*.toml` under `path` (a file or a directory, not recursive), sorted by file name, and
/// refuses duplicate scenario names.
pub fn load_all(path: &Path) -> Result<Vec<Scenario>, ScenarioError> {
    let files = if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|ext| ext == "toml"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut scenarios: Vec<Scenario> = Vec::new();
    for file in files {
        let scenario = Scenario::load(&file)?;
        if scenarios.iter().any(|s| s.name == scenario.name) {
            return Err(ScenarioError::Invalid {
                path: file,
                message: format!("duplicate scenario name {:?}", scenario.name),
            });
        }
        scenarios.push(scenario);
    }
    Ok(scenarios)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
length = 10
reach = ["allowed"]
[setup]
capacity = 3
rate = "1/s"
"#;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse(text, Path::new("scenarios/example.toml"))
    }

    #[test]
    fn a_minimal_scenario_gets_defaults_and_its_file_name() {
        let scenario = parse(MINIMAL).unwrap();
        assert_eq!(scenario.name, "example");
        assert_eq!(scenario.seeds, vec![1]);
        assert_eq!(scenario.subjects, vec!["core".to_string()]);
        assert_eq!(scenario.setup().config, ConfigSpec::new(3, "1/s"));
    }

    #[test]
    fn a_typo_is_reported_with_file_line_and_column() {
        let text = MINIMAL.replace("length = 10", "lenght = 10");
        let error = parse(&text).unwrap_err().to_string();
        assert!(
            error.starts_with("scenarios/example.toml:2:1: unknown field `lenght`"),
            "{error}"
        );
    }

    #[test]
    fn bad_values_are_reported_where_they_are() {
        let cases = [
            (
                MINIMAL.replace("\"allowed\"", "\"alowed\""),
                "3:",
                "unknown event",
            ),
            (
                MINIMAL.replace("\"1/s\"", "\"1/fortnight\""),
                "4:",
                "unknown unit",
            ),
            (
                format!("{MINIMAL}[clock]\njitter = \"5 parsecs\"\n"),
                "8:",
                "unknown duration unit",
            ),
            (
                format!("{MINIMAL}[clock]\nfrozen = 1.5\n"),
                "8:",
                "probability",
            ),
            (
                format!("{MINIMAL}[[costs]]\ncost = \"lots\"\n"),
                "8:",
                "\"capacity\"",
            ),
            (
                MINIMAL.replace("capacity = 3", "capacity = 0"),
                "4:",
                "capacity",
            ),
            (format!("{MINIMAL}[keys\n"), "7:", ""),
        ];
        for (text, place, words) in cases {
            let error = parse(&text).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("scenarios/example.toml:{place}")),
                "{error}"
            );
            assert!(error.contains(words), "{error}");
        }
    }

    #[test]
    fn cross_field_mistakes_are_named() {
        let text = MINIMAL.replace("reach = [\"allowed\"]", "reach = []");
        assert!(parse(&text).unwrap_err().to_string().contains("reach"));
        let text = format!("{MINIMAL}[[tiers]]\nkeys = [5, 2]\ncapacity = 1\nrate = \"1/s\"\n");
        assert!(parse(&text).unwrap_err().to_string().contains("tiers[0]"));
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(Nanos::parse("250ms").unwrap(), Nanos(250_000_000));
        assert_eq!(Nanos::parse("3y").unwrap(), Nanos(3 * YEAR_NS));
        assert_eq!(Nanos::parse("17").unwrap(), Nanos(17));
        assert!(Nanos::parse("999999y").is_err());
        assert!(Nanos::parse("ms").is_err());
    }

    #[test]
    fn extra_seeds_continue_after_the_declared_ones() {
        let mut scenario = parse(MINIMAL).unwrap();
        scenario.seeds = vec![5, 2];
        assert_eq!(scenario.seeds_to_run(Some(1)), vec![5]);
        assert_eq!(scenario.seeds_to_run(Some(4)), vec![5, 2, 6, 7]);
        assert_eq!(scenario.seeds_to_run(None), vec![5, 2]);
    }
}
