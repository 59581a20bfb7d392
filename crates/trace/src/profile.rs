//! Profiles: what a subject promises, and so which oracles judge it.
//!
//! - [`ProfileName::Exact`]: `docs/semantics.md` exactly; the model judges every decision.
//! - [`ProfileName::Safety`]: the properties every token bucket owes its users (the arrival curve,
//!   bounds, denials that charge nothing, invalid costs (0, above capacity) never admitted, a
//!   retry-after never earlier than the next success), judged without the model; the model's
//!   distance is measured, never a verdict.
//!
//! Promise: a profile is plain data, written the same way in a subject's handshake, a subject file
//! and a counterexample; [`Profile::admits`] is the one rule for when a weaker profile may be asked
//! of a subject than the one it declares.

use bucketproof_model::Rational;
use serde::{Deserialize, Serialize};

use crate::amount::Amount;

/// The two profiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileName {
    /// Decision by decision against the reference model.
    #[default]
    Exact,
    /// The safety properties only.
    Safety,
}

impl ProfileName {
    /// The stable name (`exact`, `safety`).
    pub fn word(self) -> &'static str {
        match self {
            ProfileName::Exact => "exact",
            ProfileName::Safety => "safety",
        }
    }
}

/// A new bucket's balance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Starts {
    /// At capacity (the spec).
    #[default]
    Full,
    /// At zero.
    Empty,
}

/// The unit a subject counts time in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Nanoseconds (the harness's unit).
    #[default]
    Ns,
    /// Microseconds.
    Us,
    /// Milliseconds.
    Ms,
    /// Seconds.
    S,
}

impl Resolution {
    /// One step, in ns.
    pub fn ns(self) -> u64 {
        match self {
            Resolution::Ns => 1,
            Resolution::Us => 1_000,
            Resolution::Ms => 1_000_000,
            Resolution::S => 1_000_000_000,
        }
    }
}

/// How a subject rounds a retry-after to its resolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rounding {
    /// Up: retrying at `now + retry_after` succeeds.
    #[default]
    Up,
    /// Down.
    Down,
    /// To the nearest step.
    Nearest,
}

/// What a subject promises. Written `{"name": "exact"}` or `{"name": "safety", "time_resolution":
/// "ms", ...}`; the options mean something only for `safety`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Which profile.
    pub name: ProfileName,
    /// A new bucket's balance.
    #[serde(
        default,
        skip_serializing_if = "is_default",
        deserialize_with = "null_is_default"
    )]
    pub starts: Starts,
    /// The subject's unit of time.
    #[serde(
        default,
        skip_serializing_if = "is_default",
        deserialize_with = "null_is_default"
    )]
    pub time_resolution: Resolution,
    /// How it rounds a retry-after.
    #[serde(
        default,
        skip_serializing_if = "is_default",
        deserialize_with = "null_is_default"
    )]
    pub retry_after_rounding: Rounding,
    /// Tokens added to the arrival-curve bound, as `"a/b"`; `None` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<String>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The protocol's rule for optional fields: `null` is the same as absent.
fn null_is_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// A profile that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The tolerance is not an amount `>= 0`.
    #[error("profile tolerance {0:?} is not an amount \"a/b\" (a >= 0, b > 0)")]
    Tolerance(String),
    /// A stronger profile was asked for than the subject declares.
    #[error(
        "the subject declares profile {}; it cannot be checked as {} (only a weaker profile may be asked)",
        declared.word(),
        asked.word()
    )]
    Stronger {
        /// What the subject declares.
        declared: ProfileName,
        /// What was asked.
        asked: ProfileName,
    },
}

impl Profile {
    /// The exact profile.
    pub fn exact() -> Profile {
        Profile::default()
    }

    /// The safety profile with default options.
    pub fn safety() -> Profile {
        Profile {
            name: ProfileName::Safety,
            ..Profile::default()
        }
    }

    /// The stable name (`exact`, `safety`).
    pub fn word(&self) -> &'static str {
        self.name.word()
    }

    /// True for the safety profile.
    pub fn is_safety(&self) -> bool {
        self.name == ProfileName::Safety
    }

    /// The declared tolerance in tokens (0 when absent).
    pub fn tolerance(&self) -> Result<Rational, ProfileError> {
        let Some(text) = &self.tolerance else {
            return Ok(Rational::ZERO);
        };
        let invalid = || ProfileError::Tolerance(text.clone());
        let amount = parse_amount(text).ok_or_else(invalid)?;
        amount.to_rational().ok_or_else(invalid)
    }

    /// Checks that `self` (asked for, e.g. by a subject file) may be checked of a subject declaring
    /// `declared`: the same, or `safety` asked of an `exact` subject, never the reverse.
    pub fn admits(&self, declared: &Profile) -> Result<(), ProfileError> {
        self.tolerance()?;
        match (declared.name, self.name) {
            (ProfileName::Safety, ProfileName::Exact) => Err(ProfileError::Stronger {
                declared: declared.name,
                asked: self.name,
            }),
            _ => Ok(()),
        }
    }
}

/// An exact amount written `"a/b"`: decimal integers without leading zeros, `b > 0` (the protocol's
/// one string form, as its JSON Schema states it).
pub fn parse_amount(text: &str) -> Option<Amount> {
    let (numer, denom) = text.split_once('/')?;
    let digits = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    if !digits(numer) || !digits(denom) {
        return None;
    }
    let numer: u128 = numer.parse().ok()?;
    let denom: u128 = denom.parse().ok()?;
    (denom > 0).then_some(Amount::Exact { numer, denom })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_read_as_the_protocol_writes_them() {
        let exact: Profile = serde_json::from_str(r#"{"name":"exact"}"#).unwrap();
        assert_eq!(exact, Profile::exact());
        let nulls: Profile =
            serde_json::from_str(r#"{"name":"safety","starts":null,"tolerance":null}"#).unwrap();
        assert_eq!(nulls, Profile::safety());
        let safety: Profile = serde_json::from_str(
            r#"{"name":"safety","starts":"empty","time_resolution":"ms","tolerance":"1/2"}"#,
        )
        .unwrap();
        assert_eq!(safety.time_resolution.ns(), 1_000_000);
        assert_eq!(safety.tolerance().unwrap().to_string(), "1/2");
        assert!(serde_json::from_str::<Profile>(r#"{"name":"exact","typo":1}"#).is_err());
        assert_eq!(
            serde_json::to_string(&Profile::exact()).unwrap(),
            r#"{"name":"exact"}"#
        );
    }

    #[test]
    fn only_a_weaker_profile_may_be_asked() {
        assert!(Profile::safety().admits(&Profile::exact()).is_ok());
        assert!(Profile::exact().admits(&Profile::exact()).is_ok());
        assert!(Profile::exact().admits(&Profile::safety()).is_err());
        let bad = Profile {
            tolerance: Some("-1".into()),
            ..Profile::safety()
        };
        assert!(bad.admits(&Profile::exact()).is_err());
    }

    #[test]
    fn amounts_parse_strictly() {
        assert_eq!(
            parse_amount("3/4"),
            Some(Amount::Exact { numer: 3, denom: 4 })
        );
        assert_eq!(
            parse_amount("0/1"),
            Some(Amount::Exact { numer: 0, denom: 1 })
        );
        for bad in [
            "1/0", "", "/2", "1/", "-1/2", "1.5", " 1/2", "1/2/3", "7", "07/1", "1/01",
        ] {
            assert_eq!(parse_amount(bad), None, "{bad:?}");
        }
    }
}
