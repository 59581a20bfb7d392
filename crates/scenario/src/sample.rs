//! The project's own sampling functions over a `ChaCha8Rng` stream, in integer arithmetic only.
//!
//! Owns the determinism rule's one sampler: every generator of the project (scenario expansion, the
//! float-vs-rational grid's traces, the mutants' traces, the harness tests' traces) takes its stream
//! from [`stream`] and its draws from these functions. Promises: unbiased draws ([`below`] rejects
//! rather than taking a remainder), and the same numbers for the same seed everywhere, forever.
//!
//! Why not `rand`'s distributions: their algorithms may change between versions, and a seed in a bug
//! report must replay next year (design.md section 7). Why not `f64::ln` for exponential gaps: IEEE 754
//! fixes `+ - * /` and `sqrt` bit for bit, but not transcendental functions, whose results may differ
//! between libm versions and platforms. Everything here is integer arithmetic (probabilities given as
//! `f64` are turned into integer thresholds by a multiplication by a power of two, which is exact), so
//! the same seed gives the same numbers on every machine, forever.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// A ChaCha8 stream for `seed`, on its own `stream` number so that independent aspects of a scenario
/// (keys, arrivals, costs, clock, ...) draw from independent streams: changing how often rollbacks
/// happen does not reshuffle which keys are chosen.
pub fn stream(seed: u64, stream: u64) -> ChaCha8Rng {
    // The seed bytes are laid out by hand (not `seed_from_u64`, whose expansion is a library detail).
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(b"bktproof");
    let mut rng = ChaCha8Rng::from_seed(bytes);
    rng.set_stream(stream);
    rng
}

/// Uniform in `[0, bound)` by Lemire's multiply-shift with rejection (no modulo bias). `bound == 0`
/// gives 0.
pub fn below(rng: &mut ChaCha8Rng, bound: u64) -> u64 {
    if bound == 0 {
        return 0;
    }
    // Values of the low product word below `threshold` would make some results more likely.
    let threshold = bound.wrapping_neg() % bound;
    loop {
        let product = rng.next_u64() as u128 * bound as u128;
        if (product as u64) >= threshold {
            return (product >> 64) as u64;
        }
    }
}

/// Uniform in `[low, high]` (inclusive; `high < low` gives `low`).
pub fn between(rng: &mut ChaCha8Rng, low: u64, high: u64) -> u64 {
    if high <= low {
        return low;
    }
    match (high - low).checked_add(1) {
        Some(span) => low + below(rng, span),
        None => rng.next_u64(), // the whole u64 range
    }
}

/// A probability as an integer threshold out of `2^32`. `p * 2^32` is exact in `f64` (a power-of-two
/// scaling), and the truncation is exact too, so the threshold is the same everywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chance {
    threshold: u64,
}

impl Chance {
    /// Never.
    pub const NEVER: Chance = Chance { threshold: 0 };

    /// From a probability in `[0, 1]` (validated by the caller).
    pub fn new(probability: f64) -> Chance {
        Chance {
            threshold: (probability.clamp(0.0, 1.0) * 4_294_967_296.0) as u64,
        }
    }

    /// True if this chance can ever hit.
    pub fn possible(self) -> bool {
        self.threshold > 0
    }

    /// One Bernoulli draw. A chance of zero draws nothing, so adding an unused feature to a scenario
    /// does not shift its stream.
    pub fn hit(self, rng: &mut ChaCha8Rng) -> bool {
        self.threshold > 0 && (rng.next_u32() as u64) < self.threshold
    }
}

/// `-log2(x / 2^32)` for `x` in `[1, 2^32]`, in fixed point with 32 fraction bits, by the classic
/// digit-by-digit binary logarithm (square the mantissa; each overflow past 2 is a one bit).
fn neg_log2_q32(x: u64) -> u64 {
    debug_assert!((1..=1u64 << 32).contains(&x));
    let integer = 63 - x.leading_zeros() as u64; // floor(log2 x), 0..=32
    // Mantissa x / 2^integer in [1, 2), with 32 fraction bits.
    let mut mantissa: u64 = (((x as u128) << 32) >> integer) as u64;
    let mut fraction: u64 = 0;
    for bit in (0..32).rev() {
        // mantissa < 2^33 before squaring, so < 2^34 after: `overflow` is the one bit "past 2". Taken
        // without a branch, since it is a coin flip the predictor cannot learn. The square needs 68 bits:
        // one 64x64 -> 128 multiply.
        mantissa = ((u128::from(mantissa) * u128::from(mantissa)) >> 32) as u64;
        let overflow = mantissa >> 33;
        mantissa >>= overflow;
        fraction |= overflow << bit;
    }
    let log2_x = (integer << 32) | fraction;
    (32u64 << 32) - log2_x
}

/// `ln 2` with 32 fraction bits (0.693147180559945... * 2^32, rounded).
const LN2_Q32: u128 = 2_977_044_472;

/// An exponentially distributed gap with the given mean (ns), rounded down to whole nanoseconds:
/// `mean * -ln(u)` with `u` uniform in `(0, 1]`, computed as `-log2(u) * ln 2` in fixed point.
/// The largest gap it can return is about `22.2 * mean`.
pub fn exponential(rng: &mut ChaCha8Rng, mean_ns: u64) -> u64 {
    let x = rng.next_u32() as u64 + 1;
    let neg_ln_q32 = (neg_log2_q32(x) as u128 * LN2_Q32) >> 32; // <= 2^37
    let gap = (mean_ns as u128 * neg_ln_q32) >> 32;
    u64::try_from(gap).unwrap_or(u64::MAX)
}

/// A discrete distribution over `0..n` with integer weights, sampled by binary search in the
/// cumulative table. The table is `n` words: build it once per scenario, not per op.
#[derive(Clone, Debug)]
pub struct WeightedTable {
    cumulative: Vec<u64>,
}

impl WeightedTable {
    /// From weights (at least one, total below `2^63`; zero weights are never drawn).
    pub fn new(weights: impl IntoIterator<Item = u64>) -> WeightedTable {
        let mut total: u64 = 0;
        let cumulative = weights
            .into_iter()
            .map(|weight| {
                total = total.saturating_add(weight);
                total
            })
            .collect();
        WeightedTable { cumulative }
    }

    /// Zipf weights for ranks `1..=n` with an integer exponent: `floor(2^40 / rank^exponent)`, at least
    /// 1. Integer exponents keep the table exact; the sum stays below `2^45` for any `n <= 2^24`.
    pub fn zipf(n: u64, exponent: u32) -> WeightedTable {
        WeightedTable::new((1..=n).map(|rank| {
            let power = (rank as u128).saturating_pow(exponent);
            ((1u128 << 40) / power).max(1) as u64
        }))
    }

    /// Sum of all weights.
    pub fn total(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// One draw: an index in `0..n`.
    pub fn draw(&self, rng: &mut ChaCha8Rng) -> usize {
        let target = below(rng, self.total());
        // The first index whose cumulative weight exceeds the target.
        self.cumulative.partition_point(|&c| c <= target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_pinned_to_known_values() {
        // If this fails, every seed in every bug report changed meaning: do not update it lightly.
        let mut rng = stream(1, 0);
        let first: Vec<u64> = (0..3).map(|_| below(&mut rng, 1_000_000)).collect();
        let mut again = stream(1, 0);
        let second: Vec<u64> = (0..3).map(|_| below(&mut again, 1_000_000)).collect();
        assert_eq!(first, second);
        let mut other = stream(1, 1);
        let third: Vec<u64> = (0..3).map(|_| below(&mut other, 1_000_000)).collect();
        assert_ne!(first, third, "streams must differ");
        assert_eq!(first, PINNED);
    }
    const PINNED: [u64; 3] = [800_804, 859_753, 291_504];

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = stream(7, 0);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let value = below(&mut rng, 5);
            seen[value as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(between(&mut rng, 3, 3), 3);
        assert_eq!(below(&mut rng, 0), 0);
    }

    /// The digits are pinned: traces depend on them bit for bit. This is the textbook form (u128
    /// throughout, a branch per digit) that the fast one must reproduce for every input tried.
    #[test]
    fn neg_log2_digits_equal_the_textbook_digit_by_digit_form() {
        fn textbook(x: u64) -> u64 {
            let integer = 63 - x.leading_zeros() as u64;
            let mut mantissa: u128 = ((x as u128) << 32) >> integer;
            let mut fraction: u64 = 0;
            for bit in (0..32).rev() {
                mantissa = (mantissa * mantissa) >> 32;
                if mantissa >= 2 << 32 {
                    mantissa >>= 1;
                    fraction |= 1 << bit;
                }
            }
            (32u64 << 32) - ((integer << 32) | fraction)
        }
        let edges = [
            1,
            2,
            3,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            (1 << 32) - 1,
            1 << 32,
        ];
        let mut x: u64 = 0x9e37_79b9;
        for step in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let input = edges.get(step as usize).copied().unwrap_or((x >> 32) + 1);
            assert_eq!(neg_log2_q32(input), textbook(input), "x = {input}");
        }
    }

    #[test]
    fn neg_log2_is_exact_on_powers_of_two_and_close_elsewhere() {
        assert_eq!(neg_log2_q32(1 << 32), 0);
        assert_eq!(neg_log2_q32(1 << 31), 1 << 32);
        assert_eq!(neg_log2_q32(1), 32 << 32);
        // -log2(0.75) = 0.415037499...
        let value = neg_log2_q32(3 << 30) as f64 / 4_294_967_296.0;
        assert!((value - 0.415_037_499_278_843_8).abs() < 1e-8, "{value}");
    }

    #[test]
    fn exponential_gaps_have_about_the_right_mean() {
        let mut rng = stream(3, 0);
        let n = 20_000u64;
        let total: u64 = (0..n).map(|_| exponential(&mut rng, 1_000_000)).sum();
        let mean = total / n;
        assert!((950_000..1_050_000).contains(&mean), "mean {mean}");
    }

    #[test]
    fn chances_hit_at_about_their_rate_and_zero_never_draws() {
        let mut rng = stream(5, 0);
        let quarter = Chance::new(0.25);
        let hits = (0..10_000).filter(|_| quarter.hit(&mut rng)).count();
        assert!((2_300..2_700).contains(&hits), "{hits}");
        assert!((0..100).all(|_| Chance::new(1.0).hit(&mut rng)));
        let before = rng.clone();
        assert!(!Chance::NEVER.hit(&mut rng));
        assert_eq!(before, rng, "a zero chance must not consume the stream");
    }

    #[test]
    fn zipf_prefers_low_ranks() {
        let table = WeightedTable::zipf(100, 1);
        let mut rng = stream(9, 0);
        let mut counts = [0u32; 100];
        for _ in 0..10_000 {
            counts[table.draw(&mut rng)] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[9] && counts[9] > counts[99]);
    }
}
