//! How sure a measured difference is: a seeded percentile bootstrap for the difference of the
//! means of two paired samples (two engines, or two settings, scored on the same items).
//!
//! Pairing matters: the items differ in difficulty far more than the settings do, so resampling
//! items (and keeping each item's two scores together) gives a much narrower, honest interval
//! than treating the two samples as independent.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::metrics::MetricError;

/// The confidence level of [`BootstrapOptions::default`].
pub const DEFAULT_LEVEL: f64 = 0.95;

/// How to bootstrap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootstrapOptions {
    /// Number of resamples; 10,000 keeps the 2.5% and 97.5% points stable to about 0.1% of
    /// the spread.
    pub resamples: usize,
    /// Seeds ChaCha8, so an interval is the same on every run and machine.
    pub seed: u64,
    /// Confidence level of the interval, strictly between 0 and 1.
    pub level: f64,
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        Self {
            resamples: 10_000,
            seed: 0,
            level: DEFAULT_LEVEL,
        }
    }
}

/// A difference of means with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BootstrapInterval {
    /// `mean(a) - mean(b)` on the samples as given.
    pub estimate: f64,
    /// Lower end of the interval.
    pub lower: f64,
    /// Upper end of the interval.
    pub upper: f64,
    /// The confidence level, such as 0.95.
    pub level: f64,
    /// How many resamples it rests on.
    pub resamples: usize,
}

impl BootstrapInterval {
    /// Whether the interval leaves out zero, the usual reading of "the difference is real".
    pub fn excludes_zero(&self) -> bool {
        self.lower > 0.0 || self.upper < 0.0
    }
}

/// A percentile bootstrap interval for `mean(a) - mean(b)`, where `a[i]` and `b[i]` are two
/// measurements of item `i` (for instance 1.0/0.0 for right/wrong under two settings).
///
/// With `d_i = a_i - b_i` and `n` items, each resample draws `n` item indices uniformly with
/// replacement (ChaCha8 seeded with `options.seed`) and takes the mean of their `d`. The
/// interval's ends are the `(1 - level) / 2` and `(1 + level) / 2` quantiles of the resampled
/// means, each interpolated linearly between the two nearest order statistics (position
/// `q (R - 1)` among the `R` sorted means; numpy's default). Deterministic for a given seed.
pub fn paired_bootstrap(
    a: &[f64],
    b: &[f64],
    options: &BootstrapOptions,
) -> Result<BootstrapInterval, MetricError> {
    if a.len() != b.len() {
        return Err(MetricError::LengthMismatch {
            left_name: "a",
            left: a.len(),
            right_name: "b",
            right: b.len(),
        });
    }
    if a.is_empty() {
        return Err(MetricError::Empty);
    }
    if options.resamples == 0 {
        return Err(MetricError::NoResamples);
    }
    if !(options.level > 0.0 && options.level < 1.0) {
        return Err(MetricError::InvalidLevel {
            value: options.level,
        });
    }
    for (name, sample) in [("sample a", a), ("sample b", b)] {
        if let Some(item) = sample.iter().position(|v| !v.is_finite()) {
            return Err(MetricError::NonFinite {
                name,
                item,
                value: sample[item],
            });
        }
    }

    let differences: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let n = differences.len();
    let estimate = differences.iter().sum::<f64>() / n as f64;
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let means: Vec<f64> = (0..options.resamples)
        .map(|_| {
            (0..n)
                .map(|_| differences[rng.random_range(0..n)])
                .sum::<f64>()
                / n as f64
        })
        .collect();
    let tail = (1.0 - options.level) / 2.0;
    Ok(BootstrapInterval {
        estimate,
        lower: quantile(&means, tail).unwrap_or(estimate),
        upper: quantile(&means, 1.0 - tail).unwrap_or(estimate),
        level: options.level,
        resamples: options.resamples,
    })
}

/// The `q` quantile of `values` (any order), interpolating linearly between the two nearest
/// order statistics (position `q (n - 1)`, numpy's default). `None` when empty.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // The position is in [0, len - 1], so its floor is a valid index.
    let position = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let below = position.floor() as usize;
    let above = (below + 1).min(sorted.len() - 1);
    Some(sorted[below] + (position - below as f64) * (sorted[above] - sorted[below]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let values = [3.0, 1.0, 4.0, 2.0];
        let at = |q| quantile(&values, q).unwrap();
        // Position 0.5 * 3 = 1.5: halfway between 2 and 3.
        assert!(close(at(0.5), 2.5, 1e-12));
        // Position 0.025 * 3 = 0.075: 1 + 0.075 * (2 - 1).
        assert!(close(at(0.025), 1.075, 1e-12));
        assert!(close(at(1.0), 4.0, 1e-12));
        assert_eq!(quantile(&[7.0], 0.975), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        let p99 = quantile(&(0..=100).map(f64::from).collect::<Vec<_>>(), 0.99).unwrap();
        assert!(close(p99, 99.0, 1e-12));
    }

    #[test]
    fn a_constant_difference_has_a_point_interval() {
        // Every item is 0.25 better under a: every resample's mean difference is 0.25.
        let a = [1.0, 0.5, 0.75, 0.25];
        let b = [0.75, 0.25, 0.5, 0.0];
        let interval = paired_bootstrap(&a, &b, &BootstrapOptions::default()).expect("valid");
        assert!(close(interval.estimate, 0.25, 1e-12));
        assert!(close(interval.lower, 0.25, 1e-12) && close(interval.upper, 0.25, 1e-12));
        assert!(interval.excludes_zero());
    }

    #[test]
    fn is_seeded_and_about_as_wide_as_the_normal_interval() {
        // 400 items, a right on 240 and b right on 200, the same 200 for both: d is 1 on 40
        // items and 0 on 360. Mean 0.1; the standard error of the mean is
        // sqrt(0.1 * 0.9 / 400) = 0.015, so the 95% interval is about 0.1 +- 0.029.
        let a: Vec<f64> = (0..400).map(|i| f64::from(u8::from(i < 240))).collect();
        let b: Vec<f64> = (0..400).map(|i| f64::from(u8::from(i < 200))).collect();
        let options = BootstrapOptions {
            seed: 11,
            ..BootstrapOptions::default()
        };
        let interval = paired_bootstrap(&a, &b, &options).expect("valid");
        assert!(close(interval.estimate, 0.1, 1e-12));
        assert!(close(interval.lower, 0.1 - 0.0294, 0.006), "{interval:?}");
        assert!(close(interval.upper, 0.1 + 0.0294, 0.006), "{interval:?}");
        assert!(interval.excludes_zero());
        assert_eq!(
            paired_bootstrap(&a, &b, &options).expect("valid"),
            interval,
            "same seed, same interval"
        );
        let other = paired_bootstrap(
            &a,
            &b,
            &BootstrapOptions {
                seed: 12,
                ..options
            },
        )
        .expect("valid");
        assert_ne!(other, interval, "another seed draws other resamples");
        // Unpaired, the same means would give an interval about 0.068 wide on each side;
        // paired it is far narrower.
        assert!(interval.upper - interval.lower < 0.08);
    }

    #[test]
    fn refuses_bad_input() {
        let options = BootstrapOptions::default();
        assert_eq!(
            paired_bootstrap(&[], &[], &options),
            Err(MetricError::Empty)
        );
        assert!(matches!(
            paired_bootstrap(&[1.0], &[1.0, 2.0], &options),
            Err(MetricError::LengthMismatch { .. })
        ));
        assert!(matches!(
            paired_bootstrap(&[1.0], &[f64::NAN], &options),
            Err(MetricError::NonFinite { item: 0, .. })
        ));
        assert_eq!(
            paired_bootstrap(
                &[1.0],
                &[0.0],
                &BootstrapOptions {
                    resamples: 0,
                    ..options
                }
            ),
            Err(MetricError::NoResamples)
        );
        assert!(matches!(
            paired_bootstrap(
                &[1.0],
                &[0.0],
                &BootstrapOptions {
                    level: 1.0,
                    ..options
                }
            ),
            Err(MetricError::InvalidLevel { .. })
        ));
    }
}
