//! A key's whole configuration: a set of 1 to [`MAX_BANDWIDTHS`] bandwidths, each a [`Config`] with an
//! optional name (docs/semantics.md, "Several bandwidths per key").
//!
//! What it owns: [`Bandwidth`], [`BandwidthName`], [`Bandwidths`] and their validation. What it
//! promises: a `Bandwidths` in circulation is usable: it holds 1 to 8 valid configs in the order given,
//! its names are distinct and each is a structured-field key (so a name can label a RateLimit item),
//! and its smallest capacity (the largest valid cost) is known without a scan. A set of one unnamed
//! bandwidth is exactly a [`Config`]: every front end treats it as today's single bucket.

use std::fmt;

use arrayvec::ArrayVec;

use crate::{Config, ConfigError};

/// The most bandwidths one key may have.
pub const MAX_BANDWIDTHS: usize = 8;

/// The longest bandwidth name, in bytes.
pub const MAX_NAME_LEN: usize = 32;

/// A bandwidth's name: a lowercase letter or `*`, then lowercase letters, digits, `_`, `-`, `.` or `*`,
/// at most [`MAX_NAME_LEN`] bytes. Stored inline so that a [`Bandwidth`] is `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BandwidthName {
    bytes: [u8; MAX_NAME_LEN],
    len: u8,
}

impl BandwidthName {
    /// The name `text`, or why it is not one.
    pub fn new(text: &str) -> Result<BandwidthName, ConfigError> {
        let invalid = |reason| ConfigError::BandwidthName {
            name: text.to_owned(),
            reason,
        };
        let bytes = text.as_bytes();
        let Some(&first) = bytes.first() else {
            return Err(invalid("a name is not empty"));
        };
        if bytes.len() > MAX_NAME_LEN {
            return Err(invalid("a name has at most 32 bytes"));
        }
        if !(first.is_ascii_lowercase() || first == b'*') {
            return Err(invalid("a name starts with a lowercase letter or `*`"));
        }
        let allowed = |b: &u8| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
        };
        if !bytes.iter().all(allowed) {
            return Err(invalid(
                "a name holds only lowercase letters, digits, `_`, `-`, `.` and `*`",
            ));
        }
        let mut name = BandwidthName {
            bytes: [0; MAX_NAME_LEN],
            len: bytes.len() as u8,
        };
        name.bytes[..bytes.len()].copy_from_slice(bytes);
        Ok(name)
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored (checked in `new`).
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or_default()
    }
}

impl fmt::Debug for BandwidthName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for BandwidthName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One bandwidth: a capacity and a rate, optionally named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bandwidth {
    config: Config,
    name: Option<BandwidthName>,
}

impl Bandwidth {
    /// An unnamed bandwidth.
    pub const fn new(config: Config) -> Bandwidth {
        Bandwidth { config, name: None }
    }

    /// A named bandwidth, or why `name` is not a name.
    pub fn named(name: &str, config: Config) -> Result<Bandwidth, ConfigError> {
        Ok(Bandwidth {
            config,
            name: Some(BandwidthName::new(name)?),
        })
    }

    /// Its capacity and rate.
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// Its name, if it has one.
    pub const fn name(&self) -> Option<&BandwidthName> {
        self.name.as_ref()
    }
}

impl From<Config> for Bandwidth {
    fn from(config: Config) -> Bandwidth {
        Bandwidth::new(config)
    }
}

/// What identifies a bandwidth across a reconfiguration: its name, or for an unnamed one its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Identity {
    /// A named bandwidth.
    Named(BandwidthName),
    /// The unnamed bandwidth at this position.
    Position(usize),
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Named(name) => write!(f, "{name}"),
            Identity::Position(position) => write!(f, "#{position}"),
        }
    }
}

/// A key's configuration: 1 to [`MAX_BANDWIDTHS`] bandwidths, all of which must cover a cost for it to
/// be allowed. Built from a [`Config`] (one unnamed bandwidth) or checked by [`Bandwidths::new`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bandwidths {
    parts: ArrayVec<Bandwidth, MAX_BANDWIDTHS>,
    /// The smallest capacity: the largest valid cost.
    cost_bound: u64,
}

impl Bandwidths {
    /// The set of `bandwidths`, in order, or why it is not one: none, more than [`MAX_BANDWIDTHS`], or
    /// two with one name.
    pub fn new(bandwidths: impl IntoIterator<Item = Bandwidth>) -> Result<Bandwidths, ConfigError> {
        let mut parts = ArrayVec::new();
        for (position, bandwidth) in bandwidths.into_iter().enumerate() {
            if parts.try_push(bandwidth).is_err() {
                return Err(ConfigError::TooManyBandwidths {
                    count: position + 1,
                    max: MAX_BANDWIDTHS,
                });
            }
        }
        let Some(cost_bound) = parts.iter().map(|b| b.config.capacity()).min() else {
            return Err(ConfigError::NoBandwidths);
        };
        for (i, bandwidth) in parts.iter().enumerate() {
            if let Some(name) = bandwidth.name
                && parts[..i].iter().any(|other| other.name == Some(name))
            {
                return Err(ConfigError::BandwidthName {
                    name: name.as_str().to_owned(),
                    reason: "two bandwidths of one set have this name",
                });
            }
        }
        Ok(Bandwidths { parts, cost_bound })
    }

    /// The bandwidths, in order.
    pub fn as_slice(&self) -> &[Bandwidth] {
        &self.parts
    }

    /// How many bandwidths (at least 1).
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// The first bandwidth's config: the whole config of a set of one.
    pub fn first(&self) -> &Config {
        &self.parts[0].config
    }

    /// The config of a set of one unnamed bandwidth; `None` for any other set.
    pub fn single(&self) -> Option<&Config> {
        (self.parts.len() == 1 && self.parts[0].name.is_none()).then(|| &self.parts[0].config)
    }

    /// The smallest capacity: a cost above it is invalid.
    pub const fn cost_bound(&self) -> u64 {
        self.cost_bound
    }

    /// The identity of the bandwidth at `position`.
    pub fn identity(&self, position: usize) -> Identity {
        match self.parts.get(position).and_then(|b| b.name) {
            Some(name) => Identity::Named(name),
            None => Identity::Position(position),
        }
    }

    /// The position of the bandwidth with `identity`, if there is one.
    pub fn position_of(&self, identity: Identity) -> Option<usize> {
        (0..self.parts.len()).find(|&position| self.identity(position) == identity)
    }
}

impl From<Config> for Bandwidths {
    fn from(config: Config) -> Bandwidths {
        let mut parts = ArrayVec::new();
        parts.push(Bandwidth::new(config));
        Bandwidths {
            parts,
            cost_bound: config.capacity(),
        }
    }
}

impl From<&Config> for Bandwidths {
    fn from(config: &Config) -> Bandwidths {
        Bandwidths::from(*config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    fn config(capacity: u64, per_second: u64) -> Config {
        Config::new(capacity, Rate::per_second(per_second)).unwrap()
    }

    #[test]
    fn names_follow_the_structured_field_key_syntax() {
        for good in ["burst", "*", "daily.quota", "a-1_b*", &"x".repeat(32)] {
            assert_eq!(BandwidthName::new(good).unwrap().as_str(), good);
        }
        for bad in ["", "Burst", "1st", "a b", "é", &"x".repeat(33)] {
            assert!(
                matches!(
                    BandwidthName::new(bad),
                    Err(ConfigError::BandwidthName { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_set_holds_one_to_eight_bandwidths_with_distinct_names() {
        assert_eq!(Bandwidths::new([]), Err(ConfigError::NoBandwidths));
        let nine = (0..9).map(|i| Bandwidth::new(config(i + 1, 1)));
        assert_eq!(
            Bandwidths::new(nine),
            Err(ConfigError::TooManyBandwidths { count: 9, max: 8 })
        );
        let twins = [
            Bandwidth::named("a", config(2, 1)).unwrap(),
            Bandwidth::named("a", config(3, 1)).unwrap(),
        ];
        assert!(matches!(
            Bandwidths::new(twins),
            Err(ConfigError::BandwidthName { .. })
        ));
        let set = Bandwidths::new([
            Bandwidth::named("burst", config(20, 5)).unwrap(),
            Bandwidth::new(config(10, 1)),
        ])
        .unwrap();
        assert_eq!(set.cost_bound(), 10);
        assert_eq!(set.len(), 2);
        assert_eq!(set.single(), None);
        assert_eq!(set.identity(1).to_string(), "#1");
        assert_eq!(set.position_of(set.identity(0)), Some(0));
    }

    #[test]
    fn a_config_is_a_set_of_one() {
        let set = Bandwidths::from(config(7, 2));
        assert_eq!(set.single(), Some(&config(7, 2)));
        assert_eq!(set.cost_bound(), 7);
    }
}
