//! The scenario format's tables (`[setup]`, `[[tiers]]`, `[keys]`, `[arrivals]`, `[[costs]]`,
//! `[clock]`, `[reconfigure]`, `[request_ids]`, `[maintenance]`, `[pressure]`) and their defaults.
//!
//! Owns the shape of each table and what an absent field means; promises that every table denies
//! unknown fields (a typo is an error at its place, never silently ignored) and that a rule needing
//! only one table's fields is checked here, while it is parsed. Rules across tables live in
//! [`super::validate`].

use serde::{Deserialize, Serialize};

use super::values::{ConfigValue, CostValue, Probability};
use bucketproof_trace::duration::{DurationNs, SECOND};
use bucketproof_trace::trace::{BandwidthSpec, ConfigSpec, PolicySpec, Setup};

/// `[setup]`: the default config and the limiter's knobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawSetup")]
pub struct SetupSpec(pub Setup);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSetup {
    capacity: Option<u64>,
    rate: Option<String>,
    bandwidths: Option<Vec<BandwidthSpec>>,
    max_keys: Option<usize>,
    policy: Option<PolicySpec>,
    sweep_per_op: Option<usize>,
    dedupe_window: Option<DurationNs>,
    dedupe_per_key: Option<usize>,
}

impl TryFrom<RawSetup> for SetupSpec {
    type Error = String;
    fn try_from(raw: RawSetup) -> Result<Self, String> {
        let ConfigValue(config) = ConfigValue::from_fields(raw.capacity, raw.rate, raw.bandwidths)?;
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
#[serde(try_from = "RawTier")]
pub struct Tier {
    /// `[first, last]`, inclusive.
    pub keys: [u64; 2],
    /// Their config (`capacity` and `rate`, or `bandwidths`).
    pub config: ConfigSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    keys: [u64; 2],
    capacity: Option<u64>,
    rate: Option<String>,
    bandwidths: Option<Vec<BandwidthSpec>>,
}

impl TryFrom<RawTier> for Tier {
    type Error = String;
    fn try_from(raw: RawTier) -> Result<Self, String> {
        let ConfigValue(config) = ConfigValue::from_fields(raw.capacity, raw.rate, raw.bandwidths)?;
        Ok(Tier {
            keys: raw.keys,
            config,
        })
    }
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
    pub gap: DurationNs,
    /// Bursts: length of an on phase.
    #[serde(default = "default_on")]
    pub on: DurationNs,
    /// Bursts: length of an off phase.
    #[serde(default = "default_off")]
    pub off: DurationNs,
    /// Boundary: the grid spacing; default: the time the default config takes to refill one token
    /// (rounded up to whole ns).
    pub period: Option<DurationNs>,
    /// Boundary: where on the grid.
    #[serde(default)]
    pub offset: BoundaryOffset,
    /// The first `initial_burst` ops all come at the start time (drains or probes a full bucket).
    #[serde(default)]
    pub initial_burst: u64,
}

fn default_gap() -> DurationNs {
    DurationNs(10_000_000)
}
fn default_on() -> DurationNs {
    DurationNs(SECOND)
}
fn default_off() -> DurationNs {
    DurationNs(5 * SECOND)
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
    pub size: DurationNs,
}

/// A jump: with `probability`, the true time leaps forward by `size` (and stays there).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jump {
    /// Per op.
    pub probability: Probability,
    /// How far forward.
    pub size: DurationNs,
}

/// `[clock]`: how the clock an op reads relates to the true time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Clock {
    /// True time of the first op.
    pub start: Option<DurationNs>,
    /// Or: start this long before `u64::MAX` (the end of the clock).
    pub start_before_end: Option<DurationNs>,
    /// Each reading is off by a uniform amount in `[-jitter, +jitter]`.
    #[serde(default)]
    pub jitter: DurationNs,
    /// Readings behind the true time.
    pub rollback: Option<Rollback>,
    /// With this probability, a reading repeats the previous one (the clock did not move).
    #[serde(default)]
    pub frozen: Probability,
    /// Leaps of the true time.
    pub jump: Option<Jump>,
    /// With this probability per step, the true time also advances by one of the boundary gaps of
    /// the scenario's configs ([`bucketproof_trace::boundary`]): the idle times at which a refill's arithmetic
    /// crosses a line (`2^64` or `2^128`, the packed-balance line, the Redis exactness line, full).
    #[serde(default)]
    pub boundary: Probability,
}

/// `[[reconfigure.schedule]]`: at op `step`, key `key` moves to a new config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawScheduledReconfig")]
pub struct ScheduledReconfig {
    /// 0-based index among the scenario's ops (after the tier setup).
    pub step: u64,
    /// The key.
    pub key: u64,
    /// The new config (`capacity` and `rate`, or `bandwidths`).
    pub config: ConfigSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduledReconfig {
    step: u64,
    key: u64,
    capacity: Option<u64>,
    rate: Option<String>,
    bandwidths: Option<Vec<BandwidthSpec>>,
}

impl TryFrom<RawScheduledReconfig> for ScheduledReconfig {
    type Error = String;
    fn try_from(raw: RawScheduledReconfig) -> Result<Self, String> {
        let ConfigValue(config) = ConfigValue::from_fields(raw.capacity, raw.rate, raw.bandwidths)?;
        Ok(ScheduledReconfig {
            step: raw.step,
            key: raw.key,
            config,
        })
    }
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
    /// Where fresh ids come from.
    #[serde(default)]
    pub space: IdSpace,
    /// The size of a shared space: ids `1..=ids` (required with `space = "shared"`, refused
    /// without it).
    #[serde(default)]
    pub ids: Option<u64>,
    /// Per acquire: it settles a recent request (same key and id) instead, with an actual cost
    /// drawn from `0..=capacity` (docs/semantics.md, "settle").
    #[serde(default)]
    pub settle: Probability,
    /// Per settle: it names another key than the request's (whose record must not be found).
    #[serde(default)]
    pub settle_elsewhere: Probability,
}

/// `[request_ids] space`: where fresh request ids come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IdSpace {
    /// One counter for the whole trace: every fresh id is new (1, 2, 3, ...), so two requests share
    /// an id only when one repeats the other.
    #[default]
    Unique,
    /// Every key draws its fresh ids uniformly from the same `1..=ids`: different users send the
    /// same ids. Records are per key, so user B's id 7 must never replay user A's decision for 7.
    Shared,
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
            space: IdSpace::Unique,
            ids: None,
            settle: Probability(0.0),
            settle_elsewhere: Probability(0.0),
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

/// `[pressure]`: eviction-summary pressure phases ([`bucketproof_trace::pressure`]) under
/// `evict_keeping_deficit`: more distinct victims drained and dropped than the summary holds, then
/// the early ones back before they are full.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SummaryPressure {
    /// A phase starts at every step that is a multiple of this, from step `every` on (0: never).
    #[serde(default)]
    pub every: u64,
}
