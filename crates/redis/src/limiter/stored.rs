//! The one decoder of a stored hash field of a key of several bandwidths (`set.lua`), for its peek. (A
//! key of one bandwidth is `bucket.lua`'s packed string, decoded by `script::Packed`.)
//!
//! Owns: reading a balance field and the cursor's two limbs (numbers in Redis's own formatting).
//!
//! Promises: a field is either decoded exactly or refused by name; nothing is rounded.

use bucketproof_limiter::{BucketState, Config};

/// A number as Redis stores it: an exact integer below 2^53, written by Redis's own number
/// formatting (maybe "1e+15").
pub(super) fn stored_int(text: &str) -> Result<u128, &'static str> {
    let v: f64 = text.parse().map_err(|_| "stored number unreadable")?;
    if v.fract() != 0.0 || !(0.0..=crate::EXACT_LIMIT as f64).contains(&v) {
        return Err("stored number not an exact integer");
    }
    Ok(v as u128)
}

/// The one decoder of a stored bandwidth: the hash fields `b<i>` (balance in units), `s` and `n` (the
/// cursor's seconds and nanoseconds) under `config`. `Ok(None)` when the key holds no bucket; an
/// error names what is unreadable (a number, the cursor, or a balance above the capacity).
pub(super) fn stored_state(
    config: &Config,
    b: &Option<String>,
    s: &Option<String>,
    n: &Option<String>,
) -> Result<Option<BucketState>, &'static str> {
    let (Some(b), Some(s), Some(n)) = (b, s, n) else {
        return Ok(None);
    };
    let (balance, s, n) = (stored_int(b)?, stored_int(s)?, stored_int(n)?);
    let last_refill = crate::script::join(s as i64, n as i64).ok_or("cursor outside u64 ns")?;
    BucketState::new(config, balance, last_refill)
        .map(Some)
        .ok_or("stored balance above capacity")
}

#[cfg(test)]
mod tests {
    use bucketproof_limiter::{NANOS_PER_SECOND, Rate};

    use super::*;

    fn field(text: &str) -> Option<String> {
        Some(text.to_string())
    }

    /// No bucket, Redis's own number formatting,
    /// the cursor's two limbs, and every unreadable field refused by name.
    #[test]
    fn the_stored_bucket_decodes_once_for_peek_and_reconfigure() {
        let config = Config::new(2, Rate::per_second(1)).unwrap();
        assert_eq!(
            stored_state(&config, &None, &field("1"), &field("0")),
            Ok(None)
        );
        let state = stored_state(&config, &field("1e+9"), &field("3"), &field("5"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (state.balance(), state.last_refill()),
            (1_000_000_000, 3 * NANOS_PER_SECOND + 5)
        );
        let full = config.capacity_units().to_string();
        assert!(stored_state(&config, &field(&full), &field("0"), &field("0")).is_ok());
        let above = (config.capacity_units() + 1).to_string();
        for (b, s, n, why) in [
            (above.as_str(), "0", "0", "stored balance above capacity"),
            ("x", "0", "0", "stored number unreadable"),
            ("1.5", "0", "0", "stored number not an exact integer"),
            ("1", "0", "1000000000", "cursor outside u64 ns"),
        ] {
            assert_eq!(
                stored_state(&config, &field(b), &field(s), &field(n)),
                Err(why),
                "{b} {s} {n}"
            );
        }
    }
}
