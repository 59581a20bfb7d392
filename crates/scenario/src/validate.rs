//! The rules that no single value or table can check: across tables, and the caps on work.
//!
//! Owns every cross-field rule of `scenarios/README.md` and says, for each broken rule, which key of
//! the file it is about, so that the parser can point at it. Promises: a scenario that passes
//! [`check`] expands without surprises: its trace is at most [`MAX_OPS_PER_SEED`] ops, its seeds
//! are distinct and at most [`MAX_SEEDS`], and every key a tier pins fits under `max_keys`.

use std::collections::BTreeMap;

use super::tables::{ArrivalPattern, IdSpace, KeyDistribution};
use super::{MAX_OPS_PER_SEED, MAX_SEEDS, Scenario};

/// One step of a key path into the file: a table key or an array index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Segment {
    /// A key of a table.
    Key(&'static str),
    /// An element of an array (or array of tables).
    Index(usize),
}

/// A broken rule: the key path it is about (as far as the file spells it out) and what is wrong.
#[derive(Debug)]
pub(super) struct Broken {
    pub place: Vec<Segment>,
    pub message: String,
}

fn broken(place: &[Segment], message: impl Into<String>) -> Broken {
    Broken {
        place: place.to_vec(),
        message: message.into(),
    }
}

use Segment::{Index, Key};

/// Checks every rule across fields; the first broken one is returned.
pub(super) fn check(scenario: &Scenario) -> Result<(), Broken> {
    check_top_level(scenario)?;
    check_tiers(scenario)?;
    check_tables(scenario)
}

fn check_top_level(s: &Scenario) -> Result<(), Broken> {
    let name_ok = !s.name.is_empty()
        && s.name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !name_ok {
        return Err(broken(
            &[Key("name")],
            format!(
                "name {:?}: use lowercase letters, digits, '-' and '_' (it names report files; \
                 without a `name`, the file name is used)",
                s.name
            ),
        ));
    }
    if s.seeds.is_empty() {
        return Err(broken(&[Key("seeds")], "seeds: give at least one seed"));
    }
    if s.seeds.len() > MAX_SEEDS {
        return Err(broken(
            &[Key("seeds")],
            format!(
                "seeds: {} seeds is above the cap of {MAX_SEEDS} (see scenarios/README.md)",
                s.seeds.len()
            ),
        ));
    }
    let mut first_index: BTreeMap<u64, usize> = BTreeMap::new();
    for (index, &seed) in s.seeds.iter().enumerate() {
        if let Some(first) = first_index.insert(seed, index) {
            return Err(broken(
                &[Key("seeds"), Index(index)],
                format!(
                    "seeds[{index}]: seed {seed} is already seeds[{first}] (it would run twice)"
                ),
            ));
        }
    }
    if s.subjects.is_empty() {
        return Err(broken(
            &[Key("subjects")],
            "subjects: give at least one subject",
        ));
    }
    if s.reach.is_empty() {
        return Err(broken(
            &[Key("reach")],
            "reach: declare at least one event the run must reach (no vacuous passes)",
        ));
    }
    if s.length == 0 {
        return Err(broken(&[Key("length")], "length must be at least 1"));
    }
    if s.total_ops() > MAX_OPS_PER_SEED {
        let tier_ops = s.total_ops() - s.length.min(s.total_ops());
        let with_tiers = if tier_ops > 0 {
            format!(" (with {tier_ops} of tier setup)")
        } else {
            String::new()
        };
        return Err(broken(
            &[Key("length")],
            format!(
                "length: {} ops per seed{with_tiers} is above the cap of {MAX_OPS_PER_SEED} \
                 (see scenarios/README.md); use more seeds instead",
                s.total_ops(),
            ),
        ));
    }
    Ok(())
}

/// Tier ranges and configs, and the key bound: an override is never evicted, so every key a tier
/// pins must fit under `max_keys` whatever the subject (how a subject spreads keys over its shards
/// is the subject's own check).
fn check_tiers(s: &Scenario) -> Result<(), Broken> {
    let max_keys = s.setup.0.max_keys as u64;
    // The distinct keys pinned so far, as disjoint inclusive ranges `first -> last` (tiers may
    // overlap: a later tier overrides an earlier one's keys).
    let mut pinned: BTreeMap<u64, u64> = BTreeMap::new();
    let mut pinned_count: u64 = 0;
    for (index, tier) in s.tiers.iter().enumerate() {
        let place = [Key("tiers"), Index(index), Key("keys")];
        let [first, last] = tier.keys;
        if first > last {
            return Err(broken(
                &place,
                format!("tiers[{index}].keys: [{first}, {last}] is empty"),
            ));
        }
        if last - first >= 1 << 20 {
            return Err(broken(
                &place,
                format!("tiers[{index}].keys: at most 2^20 keys per tier"),
            ));
        }
        (tier.config).to_model().map_err(|e| {
            broken(
                &[Key("tiers"), Index(index)],
                format!("tiers[{index}]: {e}"),
            )
        })?;
        pinned_count += insert_range(&mut pinned, first, last);
        if pinned_count > max_keys {
            return Err(broken(
                &place,
                format!(
                    "tiers[{index}].keys: the tiers up to this one pin {pinned_count} keys, but \
                     setup.max_keys is {max_keys}: a key with its own config is never evicted, so \
                     every tier key must fit under the bound (raise max_keys or shrink the tiers)"
                ),
            ));
        }
    }
    Ok(())
}

/// Adds `first..=last` to the disjoint ranges; returns how many of its keys were not in them yet.
fn insert_range(ranges: &mut BTreeMap<u64, u64>, first: u64, last: u64) -> u64 {
    // The ranges that overlap or touch `first..=last` start at or before `last + 1` and end at or
    // after `first - 1`; they are merged into one.
    let touching: Vec<(u64, u64)> = ranges
        .range(..=last.saturating_add(1))
        .rev()
        .take_while(|&(_, &end)| end.saturating_add(1) >= first)
        .map(|(&start, &end)| (start, end))
        .collect();
    let mut already = 0;
    let (mut merged_first, mut merged_last) = (first, last);
    for (start, end) in touching {
        ranges.remove(&start);
        let (low, high) = (start.max(first), end.min(last));
        if low <= high {
            already += high - low + 1;
        }
        merged_first = merged_first.min(start);
        merged_last = merged_last.max(end);
    }
    ranges.insert(merged_first, merged_last);
    (last - first + 1) - already
}

/// Rules across the other tables.
fn check_tables(s: &Scenario) -> Result<(), Broken> {
    if s.keys.count == 0 {
        return Err(broken(
            &[Key("keys"), Key("count")],
            "keys.count must be at least 1",
        ));
    }
    if s.keys.distribution == KeyDistribution::Zipf {
        if !(1..=4).contains(&s.keys.zipf_exponent) {
            return Err(broken(
                &[Key("keys"), Key("zipf_exponent")],
                "keys.zipf_exponent must be a whole number from 1 to 4",
            ));
        }
        if s.keys.count > 1 << 24 {
            return Err(broken(
                &[Key("keys"), Key("count")],
                "keys.count is at most 2^24 with a zipf distribution",
            ));
        }
    }
    for (index, entry) in s.reconfigure.schedule.iter().enumerate() {
        (entry.config).to_model().map_err(|e| {
            broken(
                &[Key("reconfigure"), Key("schedule"), Index(index)],
                format!("reconfigure.schedule[{index}]: {e}"),
            )
        })?;
    }
    if s.reconfigure.probability.0 > 0.0 && s.reconfigure.configs.is_empty() {
        return Err(broken(
            &[Key("reconfigure"), Key("probability")],
            "reconfigure.probability needs at least one entry in configs",
        ));
    }
    let every = s.pressure.every;
    if every > 0 {
        let setup = &s.setup.0;
        let Some(phase) = bucketproof_trace::pressure::Phase::of(setup) else {
            return Err(broken(
                &[Key("pressure"), Key("every")],
                "pressure.every needs setup.policy = \"evict_keeping_deficit\" (no other policy keeps \
                 a summary of its victims)",
            ));
        };
        if every <= phase.len() {
            return Err(broken(
                &[Key("pressure"), Key("every")],
                format!(
                    "pressure.every: a phase at max_keys {} is {} ops ({} victims, {} per slot of \
                     its {} summary slots, then their returns); every must be larger, so that \
                     phases do not overlap",
                    setup.max_keys,
                    phase.len(),
                    phase.keys(),
                    bucketproof_trace::pressure::VICTIMS_PER_SLOT,
                    bucketproof_trace::pressure::summary_slots(setup),
                ),
            ));
        }
    }
    if s.clock.start.is_some() && s.clock.start_before_end.is_some() {
        return Err(broken(
            &[Key("clock"), Key("start_before_end")],
            "clock: give start or start_before_end, not both",
        ));
    }
    if s.clock.boundary.0 > 0.0 && super::expand::boundary_gaps(s).is_empty() {
        return Err(broken(
            &[Key("clock"), Key("boundary")],
            "clock.boundary needs a config that refills: a rate of 0 has no boundary gaps",
        ));
    }
    let zero_default_rate = s
        .setup
        .0
        .config
        .to_bandwidths()
        .is_ok_and(|set| set.first().rate().numer() == 0);
    if s.arrivals.pattern == ArrivalPattern::Boundary
        && s.arrivals.period.is_none()
        && zero_default_rate
    {
        return Err(broken(
            &[Key("arrivals"), Key("pattern")],
            "arrivals.period is required when the default rate is 0",
        ));
    }
    if s.arrivals.pattern == ArrivalPattern::Bursts && s.arrivals.on.0 == 0 {
        return Err(broken(
            &[Key("arrivals"), Key("on")],
            "arrivals.on must be positive for bursts",
        ));
    }
    if s.request_ids.recent == 0 {
        return Err(broken(
            &[Key("request_ids"), Key("recent")],
            "request_ids.recent must be at least 1",
        ));
    }
    match (s.request_ids.space, s.request_ids.ids) {
        (IdSpace::Shared, None) => {
            return Err(broken(
                &[Key("request_ids"), Key("space")],
                "request_ids.space = \"shared\" needs ids = N, the size of the shared space",
            ));
        }
        (IdSpace::Shared, Some(0)) => {
            return Err(broken(
                &[Key("request_ids"), Key("ids")],
                "request_ids.ids must be at least 1",
            ));
        }
        (IdSpace::Unique, Some(_)) => {
            return Err(broken(
                &[Key("request_ids"), Key("ids")],
                "request_ids.ids sizes a shared space: it needs space = \"shared\"",
            ));
        }
        (IdSpace::Shared, Some(_)) | (IdSpace::Unique, None) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boundary_chance_needs_a_config_that_refills() {
        let text = |rate: &str| {
            format!(
                "length = 10\nreach = [\"allowed\"]\n[setup]\ncapacity = 3\nrate = \"{rate}\"\n\
                 [clock]\nboundary = 0.1\n"
            )
        };
        let path = std::path::Path::new("t.toml");
        let error = Scenario::parse(&text("0/s"), path).unwrap_err().to_string();
        assert!(
            error.contains("clock.boundary needs a config that refills"),
            "{error}"
        );
        assert!(Scenario::parse(&text("1/s"), path).is_ok());
        let above_one = text("1/s").replace("0.1", "1.5");
        assert!(Scenario::parse(&above_one, path).is_err());
    }

    /// Pressure needs the one policy that keeps a summary, and room between phases.
    #[test]
    fn pressure_needs_evict_keeping_deficit_and_phases_that_do_not_overlap() {
        let text = |policy: &str, every: u64| {
            format!(
                "length = 10\nreach = [\"allowed\"]\n[setup]\ncapacity = 3\nrate = \"1/s\"\n\
                 max_keys = 2\npolicy = \"{policy}\"\n[pressure]\nevery = {every}\n"
            )
        };
        let path = std::path::Path::new("t.toml");
        let error = Scenario::parse(&text("evict_least_recent", 100), path).unwrap_err();
        assert!(error.to_string().contains("needs setup.policy"), "{error}");
        // max_keys 2 on 4 shards: one key per shard, so 4 * DEFICIT_SLOTS_PER_KEY slots, twice as
        // many victims, and the heavy half of them back.
        let slots = 4 * bucketproof_limiter::DEFICIT_SLOTS_PER_KEY as u64;
        let len = 2 * slots + slots;
        let error = Scenario::parse(&text("evict_keeping_deficit", len), path).unwrap_err();
        assert!(
            error.to_string().contains(&format!("is {len} ops")),
            "{error}"
        );
        assert!(Scenario::parse(&text("evict_keeping_deficit", len + 1), path).is_ok());
    }

    #[test]
    fn overlapping_tier_ranges_count_each_key_once() {
        let mut ranges = BTreeMap::new();
        assert_eq!(insert_range(&mut ranges, 10, 19), 10);
        assert_eq!(insert_range(&mut ranges, 15, 24), 5);
        assert_eq!(insert_range(&mut ranges, 0, 9), 10); // touches: merged
        assert_eq!(insert_range(&mut ranges, 30, 30), 1);
        assert_eq!(insert_range(&mut ranges, 0, 40), 41 - 26);
        assert_eq!(ranges.into_iter().collect::<Vec<_>>(), vec![(0, 40)]);
        let mut top = BTreeMap::new();
        assert_eq!(insert_range(&mut top, u64::MAX - 1, u64::MAX), 2);
        assert_eq!(insert_range(&mut top, u64::MAX, u64::MAX), 0);
    }
}
