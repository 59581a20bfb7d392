//! A bucket's configuration: capacity and rate, validated once, with the unit grid precomputed.

use crate::{ConfigError, NANOS_PER_SECOND, Rate};

/// Capacity (the burst, in whole tokens) and refill rate of one bucket.
///
/// Validated at construction, so every `Config` in circulation is usable: capacity >= 1, the rate is
/// exact. `units_per_token = q * 10^9` and `capacity_units = capacity * units_per_token < 2^126`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    capacity: u64,
    rate: Rate,
    units_per_token: u128,
    capacity_units: u128,
}

impl Config {
    /// A bucket holding at most `capacity` tokens, refilled at `rate`.
    pub fn new(capacity: u64, rate: Rate) -> Result<Config, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        Ok(Config::from_valid(capacity, rate))
    }

    /// The config of a capacity already known to be `>= 1` and a valid rate (one taken apart from a
    /// `Config`, as a [`crate::Decision`] does).
    pub(crate) const fn from_valid(capacity: u64, rate: Rate) -> Config {
        let units_per_token = rate.denom() as u128 * NANOS_PER_SECOND as u128;
        Config {
            capacity,
            rate,
            units_per_token,
            // capacity < 2^64, units_per_token <= 2^32 * 10^9 < 2^62: no overflow.
            capacity_units: capacity as u128 * units_per_token,
        }
    }

    /// Maximum whole tokens (the burst).
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Refill rate.
    pub const fn rate(&self) -> Rate {
        self.rate
    }

    /// Units in one token: `q * 10^9`.
    pub const fn units_per_token(&self) -> u128 {
        self.units_per_token
    }

    /// The capacity in units.
    pub const fn capacity_units(&self) -> u128 {
        self.capacity_units
    }

    /// Units added per nanosecond of refill: the rate's numerator `p`.
    pub const fn units_per_nanosecond(&self) -> u64 {
        self.rate.numer()
    }

    /// `cost` whole tokens in units, or `None` if the cost is invalid (`0` or above capacity).
    pub(crate) fn cost_units(&self, cost: u64) -> Option<u128> {
        (cost != 0 && cost <= self.capacity).then(|| cost as u128 * self.units_per_token)
    }
}
