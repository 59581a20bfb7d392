//! A key's config as a bandwidth set: docs/semantics.md, "Several bandwidths per key", its first two rules.
//!
//! Owns:
//! > A key's config is a *bandwidth set*: 1 to 8 bandwidths, each a config as above (`capacity >= 1` and a rate)
//! > with an optional name, in the order given.
//! > Names: a lowercase letter or `*`, then up to 31 of lowercase letters, digits, `_`, `-`, `.`, `*` (a
//! > structured-field key, so a name can label a RateLimit item); names in one set are distinct. A bandwidth's
//! > *identity* is its name, or `#i` for the unnamed bandwidth at position `i` (from 0).
//!
//! Promise: a [`ModelBandwidths`] value is always a valid set (its fields are private and its constructors
//! validate), so the set transition never meets an empty set, a ninth bandwidth or two bandwidths of one
//! identity. A [`ModelConfig`] is the set of one unnamed bandwidth, so every rule for one config is this set's
//! rule for a set of one.

use std::fmt;

use smallvec::SmallVec;

use crate::config::{ConfigError, MAX_BANDWIDTHS, MAX_NAME_LEN, ModelConfig, NameRule};

/// One value per bandwidth of a set (a balance, a decision), in the set's order.
///
/// Inline for a set of one, on the heap for more: the harness steps the model once per operation of every
/// trace, nearly all of one bandwidth, and a heap allocation (or an inline array of eight, moved around) per
/// state and decision costs more there than the arithmetic.
pub(crate) type PerBandwidth<T> = SmallVec<[T; 1]>;

/// "A bandwidth's *identity* is its name, or `#i` for the unnamed bandwidth at position `i` (from 0)": what
/// a reconfiguration matches an old bandwidth and a new one by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelIdentity {
    /// A named bandwidth: its name.
    Named(String),
    /// The unnamed bandwidth at this position (from 0).
    Position(usize),
}

impl fmt::Display for ModelIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelIdentity::Named(name) => f.write_str(name),
            ModelIdentity::Position(i) => write!(f, "#{i}"),
        }
    }
}

/// "1 to 8 bandwidths, each a config as above ... with an optional name, in the order given", valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelBandwidths {
    /// The bandwidths in the order given: 1 to [`MAX_BANDWIDTHS`], names distinct and well formed.
    parts: Vec<(Option<String>, ModelConfig)>,
}

/// "a lowercase letter or `*`, then up to 31 of lowercase letters, digits, `_`, `-`, `.`, `*`".
///
/// Byte by byte: every allowed character is ASCII, so any other byte (a part of a non-ASCII character
/// included) breaks the rule at its own offset.
fn check_name(name: &str) -> Result<(), NameRule> {
    let bytes = name.as_bytes();
    let Some((&first, rest)) = bytes.split_first() else {
        return Err(NameRule::Empty);
    };
    if !(first.is_ascii_lowercase() || first == b'*') {
        return Err(NameRule::First);
    }
    if bytes.len() > MAX_NAME_LEN {
        return Err(NameRule::TooLong(bytes.len()));
    }
    let later = |b: &u8| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
    };
    match rest.iter().position(|b| !later(b)) {
        Some(at) => Err(NameRule::Later(at + 1)),
        None => Ok(()),
    }
}

impl ModelBandwidths {
    /// The set of `bandwidths` (`(name, config)`, in order), or why it is not one: none, more than 8, a name that
    /// is not a structured-field key, or two bandwidths with one name (checked in that order, the first broken
    /// rule of the earliest bandwidth reported).
    pub fn new<'a>(
        bandwidths: impl IntoIterator<Item = (Option<&'a str>, ModelConfig)>,
    ) -> Result<Self, ConfigError> {
        let parts: Vec<(Option<String>, ModelConfig)> = bandwidths
            .into_iter()
            .map(|(name, config)| (name.map(str::to_owned), config))
            .collect();
        if parts.is_empty() {
            return Err(ConfigError::NoBandwidths);
        }
        if parts.len() > MAX_BANDWIDTHS {
            return Err(ConfigError::TooManyBandwidths(parts.len()));
        }
        for (position, (name, _)) in parts.iter().enumerate() {
            if let Some(name) = name {
                check_name(name).map_err(|rule| ConfigError::BandwidthName { position, rule })?;
            }
        }
        for (second, (name, _)) in parts.iter().enumerate() {
            let first = name.as_ref().and_then(|name| {
                parts[..second]
                    .iter()
                    .position(|(other, _)| other.as_ref() == Some(name))
            });
            if let Some(first) = first {
                return Err(ConfigError::DuplicateBandwidthName { first, second });
            }
        }
        Ok(ModelBandwidths { parts })
    }

    /// How many bandwidths: 1 to 8.
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// The configs, in the set's order.
    pub fn configs(&self) -> impl ExactSizeIterator<Item = &ModelConfig> + '_ {
        self.parts.iter().map(|(_, config)| config)
    }

    /// The config of the bandwidth at `position`, if there is one.
    pub fn config(&self, position: usize) -> Option<&ModelConfig> {
        self.parts.get(position).map(|(_, config)| config)
    }

    /// The first bandwidth's config: the whole config of a set of one.
    pub fn first(&self) -> &ModelConfig {
        // Never empty: the constructors refuse a set of none.
        &self.parts[0].1
    }

    /// The config of a set of one unnamed bandwidth (a plain [`ModelConfig`]); `None` for any other set.
    pub fn single(&self) -> Option<&ModelConfig> {
        match self.parts.as_slice() {
            [(None, config)] => Some(config),
            _ => None,
        }
    }

    /// The name of the bandwidth at `position`, if it has one.
    pub fn name(&self, position: usize) -> Option<&str> {
        self.parts
            .get(position)
            .and_then(|(name, _)| name.as_deref())
    }

    /// The identity of the bandwidth at `position` (which must be below [`ModelBandwidths::len`] to name one of
    /// this set's): its name, else `#position`.
    pub fn identity(&self, position: usize) -> ModelIdentity {
        match self.name(position) {
            Some(name) => ModelIdentity::Named(name.to_owned()),
            None => ModelIdentity::Position(position),
        }
    }

    /// The position of the bandwidth of this set with `identity`, if there is one. Names are distinct, so
    /// there is at most one.
    pub fn position_of(&self, identity: &ModelIdentity) -> Option<usize> {
        (0..self.len()).find(|&position| self.identity(position) == *identity)
    }

    /// acquire step 1 for a set: "`cost` above the *smallest* capacity -> `Err(InvalidCost)`": the largest valid
    /// cost.
    pub fn smallest_capacity(&self) -> u64 {
        self.configs().map(ModelConfig::capacity).min().unwrap_or(0)
    }
}

/// "Every rule above is the one-bandwidth case of this section": a config is the set of one unnamed bandwidth.
impl From<ModelConfig> for ModelBandwidths {
    fn from(config: ModelConfig) -> Self {
        ModelBandwidths {
            parts: vec![(None, config)],
        }
    }
}

impl From<&ModelConfig> for ModelBandwidths {
    fn from(config: &ModelConfig) -> Self {
        ModelBandwidths::from(config.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_rule_is_its_own_error() {
        assert_eq!(check_name(""), Err(NameRule::Empty));
        assert_eq!(check_name("Burst"), Err(NameRule::First));
        assert_eq!(check_name("1st"), Err(NameRule::First));
        assert_eq!(check_name("_a"), Err(NameRule::First));
        assert_eq!(check_name("aB"), Err(NameRule::Later(1)));
        assert_eq!(check_name("a b"), Err(NameRule::Later(1)));
        assert_eq!(check_name("ab\u{e9}"), Err(NameRule::Later(2)));
        assert_eq!(check_name(&"x".repeat(33)), Err(NameRule::TooLong(33)));
        for good in [
            "a",
            "*",
            "**",
            "daily.quota",
            "a-1_b*",
            "z9",
            &"x".repeat(32),
        ] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
    }
}
