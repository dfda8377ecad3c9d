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

impl BootstrapOptions {
    fn check(&self) -> Result<(), MetricError> {
        if self.resamples == 0 {
            return Err(MetricError::NoResamples);
        }
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(MetricError::InvalidLevel { value: self.level });
        }
        Ok(())
    }

    fn interval(&self, estimate: f64, resampled: &[f64]) -> BootstrapInterval {
        let tail = (1.0 - self.level) / 2.0;
        BootstrapInterval {
            estimate,
            lower: quantile(resampled, tail).unwrap_or(estimate),
            upper: quantile(resampled, 1.0 - tail).unwrap_or(estimate),
            level: self.level,
            resamples: self.resamples,
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
    options.check()?;
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
    Ok(options.interval(estimate, &means))
}

/// A percentile bootstrap interval for the difference between two *recipes*, each measured by
/// one or more runs (such as checkpoints trained with different seeds) on the same items.
///
/// `a[r][i]` is what run `r` of side a measured on item `i`; every run of both sides holds the
/// same items in the same order. `statistic` turns one run's measurements of a sample of items
/// into a number: a mean for accuracy, an expected calibration error for calibration. The
/// estimate is the mean of `statistic` over a's runs minus the same over b's.
///
/// Each resample first draws, for each side with more than one run, as many of its runs as it
/// has, uniformly with replacement; then `n` item indices with replacement, the same for both
/// sides (the pairing); and takes the mean over the drawn runs of `statistic` on the drawn
/// items. The interval so covers both which items were tested and which runs a recipe happened
/// to produce. A side with one run draws no runs, so with one run a side this is the plain
/// paired bootstrap (`paired_bootstrap` for a mean). Resampling `k` runs understates their
/// spread by a factor of about `(k - 1) / k` in variance, a half for two: read the interval of
/// a few runs as a lower bound on the uncertainty. ChaCha8 seeded with `options.seed`; the
/// quantiles as in [`paired_bootstrap`].
pub fn runs_bootstrap<T: Copy>(
    a: &[&[T]],
    b: &[&[T]],
    options: &BootstrapOptions,
    mut statistic: impl FnMut(&[T]) -> Result<f64, MetricError>,
) -> Result<BootstrapInterval, MetricError> {
    let (Some(first), false) = (a.first(), b.is_empty()) else {
        return Err(MetricError::Empty);
    };
    let n = first.len();
    for run in a.iter().chain(b) {
        if run.len() != n {
            return Err(MetricError::LengthMismatch {
                left_name: "the first run",
                left: n,
                right_name: "another run",
                right: run.len(),
            });
        }
    }
    if n == 0 {
        return Err(MetricError::Empty);
    }
    options.check()?;

    let mut mean_over = |runs: &[&[T]]| -> Result<f64, MetricError> {
        let mut sum = 0.0;
        for run in runs {
            sum += statistic(run)?;
        }
        Ok(sum / runs.len() as f64)
    };
    let estimate = mean_over(a)? - mean_over(b)?;

    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let draw_runs = |rng: &mut ChaCha8Rng, runs: &[&[T]], into: &mut Vec<usize>| {
        into.clear();
        if runs.len() == 1 {
            into.push(0);
        } else {
            into.extend((0..runs.len()).map(|_| rng.random_range(0..runs.len())));
        }
    };
    let (mut runs_a, mut runs_b, mut items) = (Vec::new(), Vec::new(), Vec::with_capacity(n));
    let mut sample = Vec::with_capacity(n);
    let mut resampled = Vec::with_capacity(options.resamples);
    for _ in 0..options.resamples {
        draw_runs(&mut rng, a, &mut runs_a);
        draw_runs(&mut rng, b, &mut runs_b);
        items.clear();
        items.extend((0..n).map(|_| rng.random_range(0..n)));
        let mut side = |runs: &[&[T]], drawn: &[usize]| -> Result<f64, MetricError> {
            let mut sum = 0.0;
            for &r in drawn {
                sample.clear();
                sample.extend(items.iter().map(|&i| runs[r][i]));
                sum += statistic(&sample)?;
            }
            Ok(sum / drawn.len() as f64)
        };
        let difference = side(a, &runs_a)? - side(b, &runs_b)?;
        resampled.push(difference);
    }
    Ok(options.interval(estimate, &resampled))
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

    fn mean(items: &[f64]) -> Result<f64, MetricError> {
        Ok(items.iter().sum::<f64>() / items.len() as f64)
    }

    #[test]
    fn one_run_a_side_is_the_paired_bootstrap() {
        let a: Vec<f64> = (0..300).map(|i| f64::from(u8::from(i % 3 != 0))).collect();
        let b: Vec<f64> = (0..300).map(|i| f64::from(u8::from(i % 4 != 0))).collect();
        let options = BootstrapOptions {
            resamples: 2_000,
            seed: 5,
            ..BootstrapOptions::default()
        };
        let plain = paired_bootstrap(&a, &b, &options).expect("valid");
        let runs = runs_bootstrap(&[&a], &[&b], &options, mean).expect("valid");
        for (x, y) in [
            (plain.estimate, runs.estimate),
            (plain.lower, runs.lower),
            (plain.upper, runs.upper),
        ] {
            assert!(close(x, y, 1e-12), "{plain:?} against {runs:?}");
        }
    }

    #[test]
    fn runs_that_disagree_widen_the_interval() {
        // Two runs of recipe a: one right on 70% of 1,000 items, one on 60%; recipe b's two
        // runs both on 60%. The estimate is the mean difference, 0.05; a row-only bootstrap of
        // the run means would be about +-0.02 wide, but a resample that draws a's weaker run
        // twice sees no difference at all, so the interval reaches 0.
        let right = |share: usize| -> Vec<f64> {
            (0..1_000)
                .map(|i| f64::from(u8::from(i % 10 < share)))
                .collect()
        };
        let (strong, weak) = (right(7), right(6));
        let options = BootstrapOptions::default();
        let interval =
            runs_bootstrap(&[&strong, &weak], &[&weak, &weak], &options, mean).expect("valid");
        assert!(close(interval.estimate, 0.05, 1e-12), "{interval:?}");
        assert!(
            interval.lower <= 0.0 && interval.upper >= 0.1 - 1e-12,
            "{interval:?}"
        );
        assert!(!interval.excludes_zero());
        // The same runs, each pooled into one mean run, look certain.
        let pooled: Vec<f64> = strong
            .iter()
            .zip(&weak)
            .map(|(x, y)| (x + y) / 2.0)
            .collect();
        let rows_only = runs_bootstrap(&[&pooled], &[&weak], &options, mean).expect("valid");
        assert!(rows_only.excludes_zero(), "{rows_only:?}");
        assert_eq!(
            runs_bootstrap(&[&strong, &weak], &[&weak, &weak], &options, mean).expect("valid"),
            interval,
            "seeded"
        );
    }

    #[test]
    fn runs_of_other_lengths_or_none_are_refused() {
        let options = BootstrapOptions::default();
        assert!(matches!(
            runs_bootstrap(
                &[&[1.0, 0.0][..], &[1.0][..]],
                &[&[0.0, 0.0][..]],
                &options,
                mean
            ),
            Err(MetricError::LengthMismatch {
                left: 2,
                right: 1,
                ..
            })
        ));
        assert_eq!(
            runs_bootstrap::<f64>(&[], &[&[0.0][..]], &options, mean),
            Err(MetricError::Empty)
        );
        assert_eq!(
            runs_bootstrap::<f64>(&[&[][..]], &[&[][..]], &options, mean),
            Err(MetricError::Empty)
        );
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
