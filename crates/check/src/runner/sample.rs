//! The runner's plot series: a downsampled series of one key's balance (subject and model), the cost
//! it admitted and the arrival-curve bound, for the scenario reports' plots.
//!
//! Promises: at most `max_samples` points (every other point is dropped and the stride doubled when
//! full), chosen by op count alone, so the series is deterministic and spans the whole run.

use std::collections::BTreeMap;

use bucketproof_model::Model;

use super::Sample;
use bucketproof_trace::subject::Amount;
use bucketproof_trace::trace::Acquire;

/// The series of one key.
pub(super) struct Sampler {
    key: Option<u64>,
    max_samples: usize,
    samples: Vec<Sample>,
    stride: u64,
    seen: u64,
    /// Per key: the start of its curve epoch and the cost admitted since.
    admitted: BTreeMap<u64, (u64, u64)>,
}

impl Sampler {
    pub fn new(key: Option<u64>, max_samples: usize) -> Sampler {
        Sampler {
            key,
            max_samples,
            samples: Vec::new(),
            stride: 1,
            seen: 0,
            admitted: BTreeMap::new(),
        }
    }

    /// The key's curve epoch ended (its bucket was recreated, reconfigured or forgotten).
    pub fn restart(&mut self, key: u64) {
        self.admitted.remove(&key);
    }

    /// `acquire`, admitted or not; `remaining` is what the subject reported.
    pub fn acquire(&mut self, model: &Model, acquire: Acquire, admitted: bool, remaining: &Amount) {
        let Acquire { key, cost, now, .. } = acquire;
        if self.key != Some(key) {
            return;
        }
        let start = *self.admitted.entry(key).or_insert((now, 0));
        // Saturating: a subject that over-admits near capacity 2^63 - 1 can admit more than
        // u64::MAX in one epoch (the arrival oracle counts in wider units and reports it); the plot
        // only needs to show it is off the chart.
        let total = start.1.saturating_add(if admitted { cost } else { 0 });
        self.admitted.insert(key, (start.0, total));
        self.seen += 1;
        if !self.seen.is_multiple_of(self.stride) {
            return;
        }
        let config = model.config_of(key);
        let rate = config.rate_per_second().to_f64().value();
        let model_remaining = model
            .state(key)
            .map(|(tokens, _)| tokens.to_f64().value())
            .unwrap_or(f64::NAN);
        self.samples.push(Sample {
            at: now,
            subject_remaining: remaining.to_f64_lossy(),
            model_remaining,
            admitted: total,
            bound: config.capacity() as f64 + rate * (now.saturating_sub(start.0)) as f64 / 1e9,
        });
        if self.samples.len() >= self.max_samples.max(2) {
            // Keep every other point and halve the rate: deterministic, bounded, still spans the run.
            let kept: Vec<Sample> = self.samples.iter().step_by(2).cloned().collect();
            self.samples = kept;
            self.stride *= 2;
        }
    }

    pub fn into_samples(self) -> Vec<Sample> {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use bucketproof_model::{Model, ModelConfig};

    use super::*;

    #[test]
    fn the_admitted_total_saturates_when_a_subject_admits_past_u64_max() {
        let capacity = (1u64 << 63) - 1;
        let model = Model::new(ModelConfig::new(capacity, 1, 1).unwrap(), 0, 0);
        let mut sampler = Sampler::new(Some(0), 16);
        for cost in [1, capacity, capacity, 2] {
            let acquire = Acquire {
                key: 0,
                cost,
                now: 0,
                request_id: None,
            };
            sampler.acquire(&model, acquire, true, &Amount::Approx(0.0));
        }
        let samples = sampler.into_samples();
        assert_eq!(samples.last().unwrap().admitted, u64::MAX);
    }
}
