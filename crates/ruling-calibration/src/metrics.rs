//! Calibration and accuracy metrics over a set of answers, for the evaluator's reports and for
//! judging a fitted temperature: ECE with its reliability bins, Brier, log loss, coverage at an
//! error rate, accuracy, macro-F1, the mean absolute error of an expected score level, the KL
//! divergence of a soft target from a prediction, and the flip rate between two orderings.
//!
//! Every function refuses empty input, mismatched lengths and values outside their domain with
//! a [`MetricError`] naming the item at fault, rather than returning a number that averages
//! over garbage.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::distribution::{DistributionError, check_distribution};

/// Why a metric could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MetricError {
    /// There were no items.
    #[error("no items to score")]
    Empty,
    /// Two parallel slices had different lengths.
    #[error("{left_name} has {left} items but {right_name} has {right}")]
    LengthMismatch {
        /// Name of the first slice.
        left_name: &'static str,
        /// Its length.
        left: usize,
        /// Name of the second slice.
        right_name: &'static str,
        /// Its length.
        right: usize,
    },
    /// A reliability diagram needs at least one bin.
    #[error("the number of bins must be at least 1")]
    NoBins,
    /// A confidence was NaN or outside `[0, 1]`.
    #[error("confidence of item {item} must lie in [0, 1], got {value}")]
    InvalidConfidence {
        /// Index of the item.
        item: usize,
        /// The confidence given.
        value: f64,
    },
    /// The tolerated error rate was NaN or outside `[0, 1]`.
    #[error("the maximum error rate must lie in [0, 1], got {value}")]
    InvalidErrorRate {
        /// The rate given.
        value: f64,
    },
    /// An item's predicted or target probabilities were not a distribution.
    #[error("item {item}: {source}")]
    InvalidDistribution {
        /// Index of the item.
        item: usize,
        /// What was wrong with it.
        #[source]
        source: DistributionError,
    },
    /// A hard target named a class the item does not have.
    #[error("item {item}: target class {target} but only {classes} classes")]
    TargetOutOfRange {
        /// Index of the item.
        item: usize,
        /// The target class.
        target: usize,
        /// Number of classes the item has.
        classes: usize,
    },
    /// A soft target had a different number of classes than the prediction.
    #[error("item {item}: {predicted} predicted classes but {target} target classes")]
    ClassCountMismatch {
        /// Index of the item.
        item: usize,
        /// Classes in the prediction.
        predicted: usize,
        /// Classes in the target.
        target: usize,
    },
    /// A value that must be a finite number was NaN or infinite.
    #[error("{name} of item {item} must be finite, got {value}")]
    NonFinite {
        /// What the value is (`"expected level"`, `"score"`, `"sample a"`).
        name: &'static str,
        /// Index of the item.
        item: usize,
        /// The value given.
        value: f64,
    },
    /// A list of scores had no entries, so it has no argmax.
    #[error("item {item} has no scores")]
    NoScores {
        /// Index of the item.
        item: usize,
    },
    /// A bootstrap needs at least one resample.
    #[error("the number of bootstrap resamples must be at least 1")]
    NoResamples,
    /// The confidence level of an interval was not strictly between 0 and 1.
    #[error("the confidence level must lie strictly between 0 and 1, got {value}")]
    InvalidLevel {
        /// The level given.
        value: f64,
    },
}

/// One bin of a [`ReliabilityDiagram`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    /// Lower edge of the bin (included).
    pub lower: f64,
    /// Upper edge of the bin (excluded, except for the last bin, which includes 1.0).
    pub upper: f64,
    /// Number of answers whose confidence fell in the bin.
    pub count: usize,
    /// Mean confidence of those answers; `None` for an empty bin.
    pub mean_confidence: Option<f64>,
    /// Share of those answers that were correct; `None` for an empty bin.
    pub accuracy: Option<f64>,
}

/// The per-bin table behind an expected calibration error, ready to draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityDiagram {
    /// Equal-width bins over `[0, 1]`, lowest first.
    pub bins: Vec<ReliabilityBin>,
    /// Number of answers binned.
    pub total: usize,
    /// The expected calibration error (see [`expected_calibration_error`]).
    pub ece: f64,
}

/// Bins the answers by confidence and computes the expected calibration error.
///
/// `bins` equal-width bins cover `[0, 1]`: bin `k` holds confidences in `[k/B, (k+1)/B)`,
/// computed as `floor(c * B)`, and a confidence of exactly 1.0 goes in the last bin. For
/// each non-empty bin `b` with `n_b` answers, `acc_b` is the share correct and `conf_b` the
/// mean confidence; the ECE is `sum_b (n_b / N) * |acc_b - conf_b|`, the answer-weighted
/// mean gap between how sure the model said it was and how often it was right. Empty bins
/// contribute nothing.
pub fn reliability_diagram(
    confidences: &[f64],
    correct: &[bool],
    bins: usize,
) -> Result<ReliabilityDiagram, MetricError> {
    check_parallel("confidences", confidences.len(), "correct", correct.len())?;
    if bins == 0 {
        return Err(MetricError::NoBins);
    }
    check_confidences(confidences, true)?;

    let mut counts = vec![0usize; bins];
    let mut confidence_sums = vec![0.0f64; bins];
    let mut correct_counts = vec![0usize; bins];
    for (&c, &right) in confidences.iter().zip(correct) {
        // c is in [0, 1] so the product is in [0, B]; truncation is the floor.
        let bin = ((c * bins as f64) as usize).min(bins - 1);
        counts[bin] += 1;
        confidence_sums[bin] += c;
        correct_counts[bin] += usize::from(right);
    }

    let total = confidences.len();
    let mut ece = 0.0;
    let table = (0..bins)
        .map(|k| {
            let count = counts[k];
            let (mean_confidence, accuracy) = if count == 0 {
                (None, None)
            } else {
                let mean = confidence_sums[k] / count as f64;
                let accuracy = correct_counts[k] as f64 / count as f64;
                ece += (count as f64 / total as f64) * (accuracy - mean).abs();
                (Some(mean), Some(accuracy))
            };
            ReliabilityBin {
                lower: k as f64 / bins as f64,
                upper: (k + 1) as f64 / bins as f64,
                count,
                mean_confidence,
                accuracy,
            }
        })
        .collect();
    Ok(ReliabilityDiagram {
        bins: table,
        total,
        ece,
    })
}

/// The expected calibration error alone; see [`reliability_diagram`] for the definition.
pub fn expected_calibration_error(
    confidences: &[f64],
    correct: &[bool],
    bins: usize,
) -> Result<f64, MetricError> {
    Ok(reliability_diagram(confidences, correct, bins)?.ece)
}

/// Multi-class Brier score against hard targets: the mean over items of
/// `sum_k (p_k - y_k)^2`, where `y` is one-hot on the target class.
///
/// Ranges from 0 (every item certain and right) to 2 (every item certain and wrong). Items
/// may have different numbers of classes; each row must be a probability distribution.
pub fn brier_score(probs: &[Vec<f64>], targets: &[usize]) -> Result<f64, MetricError> {
    check_parallel("probs", probs.len(), "targets", targets.len())?;
    let mut total = 0.0;
    for (item, (row, &target)) in probs.iter().zip(targets).enumerate() {
        check_row(item, row)?;
        check_target(item, row, target)?;
        total += row
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                let y = if k == target { 1.0 } else { 0.0 };
                (p - y) * (p - y)
            })
            .sum::<f64>();
    }
    Ok(total / probs.len() as f64)
}

/// Brier score against soft targets: the mean over items of `sum_k (p_k - q_k)^2`, where
/// `q` is the target distribution (for instance the share of human votes per option).
///
/// With one-hot targets it equals [`brier_score`]. Both `p` and `q` must be distributions
/// over the same number of classes.
pub fn brier_score_soft(probs: &[Vec<f64>], targets: &[Vec<f64>]) -> Result<f64, MetricError> {
    check_parallel("probs", probs.len(), "targets", targets.len())?;
    let mut total = 0.0;
    for (item, (row, target)) in probs.iter().zip(targets).enumerate() {
        check_soft_pair(item, row, target)?;
        total += row
            .iter()
            .zip(target)
            .map(|(&p, &q)| (p - q) * (p - q))
            .sum::<f64>();
    }
    Ok(total / probs.len() as f64)
}

/// Mean negative log-likelihood of the target class: the mean over items of `-ln p_target`.
///
/// Nothing is clipped: an item that puts probability 0 on its target makes the loss `+inf`,
/// which is the honest value (the model ruled out what happened).
pub fn log_loss(probs: &[Vec<f64>], targets: &[usize]) -> Result<f64, MetricError> {
    check_parallel("probs", probs.len(), "targets", targets.len())?;
    let mut total = 0.0;
    for (item, (row, &target)) in probs.iter().zip(targets).enumerate() {
        check_row(item, row)?;
        check_target(item, row, target)?;
        total -= row[target].ln();
    }
    Ok(total / probs.len() as f64)
}

/// Mean cross-entropy against soft targets: the mean over items of `-sum_k q_k ln p_k`,
/// with terms where `q_k = 0` left out (so `p_k = 0` there costs nothing). `+inf` when an
/// item puts probability 0 where the target has mass.
pub fn log_loss_soft(probs: &[Vec<f64>], targets: &[Vec<f64>]) -> Result<f64, MetricError> {
    check_parallel("probs", probs.len(), "targets", targets.len())?;
    let mut total = 0.0;
    for (item, (row, target)) in probs.iter().zip(targets).enumerate() {
        check_soft_pair(item, row, target)?;
        total -= row
            .iter()
            .zip(target)
            .filter(|&(_, &q)| q > 0.0)
            .map(|(&p, &q)| q * p.ln())
            .sum::<f64>();
    }
    Ok(total / probs.len() as f64)
}

/// The largest share of answers that can be kept, most confident first, while the kept
/// answers' error rate stays at or below `max_error_rate`.
///
/// Answers are ranked by confidence, highest first. Only prefixes of that ranking that keep
/// tied confidences together are considered (a threshold cannot split a tie). The result is
/// `n / N` for the largest such prefix of `n` answers whose share of wrong answers is at most
/// `max_error_rate`; a longer prefix may qualify even if a shorter one did not (an early
/// error diluted by later correct answers). It is 0.0 when no non-empty prefix qualifies,
/// for instance at rate 0 when the most confident answer is wrong, and 1.0 when all answers
/// together are within the rate.
///
/// Confidences need not lie in `[0, 1]` (only their order matters) but must be finite;
/// `max_error_rate` must lie in `[0, 1]`.
pub fn coverage_at_error(
    confidences: &[f64],
    correct: &[bool],
    max_error_rate: f64,
) -> Result<f64, MetricError> {
    check_parallel("confidences", confidences.len(), "correct", correct.len())?;
    if !(0.0..=1.0).contains(&max_error_rate) {
        return Err(MetricError::InvalidErrorRate {
            value: max_error_rate,
        });
    }
    check_confidences(confidences, false)?;

    let mut order: Vec<usize> = (0..confidences.len()).collect();
    order.sort_by(|&a, &b| confidences[b].total_cmp(&confidences[a]));

    let total = order.len();
    let mut best = 0usize;
    let mut errors = 0usize;
    let mut start = 0usize;
    while start < total {
        let level = confidences[order[start]];
        let mut end = start;
        while end < total && confidences[order[end]].total_cmp(&level).is_eq() {
            errors += usize::from(!correct[order[end]]);
            end += 1;
        }
        // errors / end <= rate, multiplied out so a rate like 0.1 with 10 answers and 1
        // error is not refused by a rounding hair.
        if errors as f64 <= max_error_rate * end as f64 + 1e-9 {
            best = end;
        }
        start = end;
    }
    Ok(best as f64 / total as f64)
}

/// The share of items whose prediction equals the label.
pub fn accuracy<T: PartialEq>(predictions: &[T], labels: &[T]) -> Result<f64, MetricError> {
    check_parallel("predictions", predictions.len(), "labels", labels.len())?;
    let right = predictions
        .iter()
        .zip(labels)
        .filter(|(p, l)| p == l)
        .count();
    Ok(right as f64 / labels.len() as f64)
}

/// The unweighted mean over classes of each class's F1 score.
///
/// The classes are those that occur among the labels or the predictions (as scikit-learn does
/// by default). For class `c`, with `tp` items labelled and predicted `c`, `fp` predicted `c`
/// but labelled otherwise and `fn` labelled `c` but predicted otherwise,
/// `F1_c = 2 tp / (2 tp + fp + fn)`; every class counted occurs somewhere, so the denominator
/// is never zero. A class that is only ever predicted, never the label, scores 0 and pulls the
/// mean down: inventing a class costs. A class of the question that occurs in neither list is
/// not counted, so a sample that happens to lack a class is not punished for it. Every class
/// weighs the same whatever its frequency, which is the point of macro-F1 on skewed labels.
pub fn macro_f1<T: Ord>(predictions: &[T], labels: &[T]) -> Result<f64, MetricError> {
    check_parallel("predictions", predictions.len(), "labels", labels.len())?;
    // (tp, fp, fn) per class; a BTreeMap keeps the summation order, and so the result, fixed.
    let mut counts: BTreeMap<&T, (usize, usize, usize)> = BTreeMap::new();
    for (prediction, label) in predictions.iter().zip(labels) {
        if prediction == label {
            counts.entry(label).or_default().0 += 1;
        } else {
            counts.entry(prediction).or_default().1 += 1;
            counts.entry(label).or_default().2 += 1;
        }
    }
    let total: f64 = counts
        .values()
        .map(|&(tp, fp, fn_)| (2 * tp) as f64 / (2 * tp + fp + fn_) as f64)
        .sum();
    Ok(total / counts.len() as f64)
}

/// The expected level index of a score answer, `sum_k k * p_k`, from its level
/// probabilities lowest first (what a System One score answer reports as `score`).
pub fn expected_level(probs: &[f64]) -> Result<f64, DistributionError> {
    check_distribution(probs)?;
    Ok(probs.iter().enumerate().map(|(k, &p)| k as f64 * p).sum())
}

/// Mean absolute error of expected levels against the true level indices:
/// the mean over items of `|expected_i - level_i|`, in levels.
///
/// Unlike accuracy on the most likely level, it credits an answer for being near the truth on
/// an ordered scale (SST-5's "positive" for "very positive" costs 1, "very negative" costs 4).
pub fn mean_absolute_error(expected: &[f64], levels: &[usize]) -> Result<f64, MetricError> {
    check_parallel("expected", expected.len(), "levels", levels.len())?;
    if let Some(item) = expected.iter().position(|e| !e.is_finite()) {
        return Err(MetricError::NonFinite {
            name: "expected level",
            item,
            value: expected[item],
        });
    }
    let total: f64 = expected
        .iter()
        .zip(levels)
        .map(|(&e, &level)| (e - level as f64).abs())
        .sum();
    Ok(total / expected.len() as f64)
}

/// The floor put under a predicted probability inside [`kl_divergence`].
pub const KL_EPSILON: f64 = 1e-12;

/// The Kullback-Leibler divergence of the target `q` from the prediction `p`, in nats:
/// `KL(q || p) = sum_k q_k ln(q_k / p_k)`, how much worse `p` codes outcomes drawn from `q`
/// than `q` itself. It is 0 exactly when `p = q`.
///
/// Epsilon: terms with `q_k = 0` are 0 (the limit of `q ln q`), whatever `p_k` is. Where
/// `q_k > 0`, `p_k` is floored at [`KL_EPSILON`] (1e-12) without renormalising, so a model that
/// rules out an answer some annotators gave pays at most `q_k * 27.6` nats instead of
/// infinity, and a dataset mean stays finite and comparable between models. (Log loss, by
/// contrast, reports the honest `+inf`.) Both must be distributions of the same length.
pub fn kl_divergence(target: &[f64], predicted: &[f64]) -> Result<f64, MetricError> {
    check_soft_pair(0, predicted, target)?;
    Ok(kl_unchecked(target, predicted))
}

/// Mean over items of [`kl_divergence`]`(targets[i], probs[i])`.
pub fn mean_kl_divergence(probs: &[Vec<f64>], targets: &[Vec<f64>]) -> Result<f64, MetricError> {
    check_parallel("probs", probs.len(), "targets", targets.len())?;
    let mut total = 0.0;
    for (item, (row, target)) in probs.iter().zip(targets).enumerate() {
        check_soft_pair(item, row, target)?;
        total += kl_unchecked(target, row);
    }
    Ok(total / probs.len() as f64)
}

fn kl_unchecked(target: &[f64], predicted: &[f64]) -> f64 {
    target
        .iter()
        .zip(predicted)
        .filter(|&(&q, _)| q > 0.0)
        .map(|(&q, &p)| q * (q.ln() - p.max(KL_EPSILON).ln()))
        .sum()
}

/// The index of the largest score; on a tie, the lowest such index. `None` when empty.
/// Scores are meant to be finite (a NaN is never chosen unless it comes first). Every argmax in
/// the workspace is this one, so engine, trainers and evaluator break ties alike.
pub fn argmax<T: PartialOrd>(scores: &[T]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, s) in scores.iter().enumerate() {
        if best.is_none_or(|b| *s > scores[b]) {
            best = Some(i);
        }
    }
    best
}

/// [`argmax`] for callers whose scores are never empty (a question has at least two options):
/// 0 when they are.
pub fn argmax_or_first<T: PartialOrd>(scores: &[T]) -> usize {
    argmax(scores).unwrap_or(0)
}

/// The share of items whose argmax differs between two orderings of the same question.
///
/// `first[i]` and `second[i]` are item `i`'s scores (probabilities, log-probabilities or
/// logits: only their order matters) under two presentations, for instance the options as
/// given and reversed, both mapped back to the same canonical option order. A tie resolves to
/// the earlier option in both, as [`argmax`] does. Rows must be non-empty, finite and of equal
/// length per item.
pub fn flip_rate(first: &[Vec<f64>], second: &[Vec<f64>]) -> Result<f64, MetricError> {
    check_parallel("first", first.len(), "second", second.len())?;
    let mut flips = 0usize;
    for (item, (a, b)) in first.iter().zip(second).enumerate() {
        if a.len() != b.len() {
            return Err(MetricError::ClassCountMismatch {
                item,
                predicted: a.len(),
                target: b.len(),
            });
        }
        if let Some(&value) = a.iter().chain(b).find(|s| !s.is_finite()) {
            return Err(MetricError::NonFinite {
                name: "score",
                item,
                value,
            });
        }
        match (argmax(a), argmax(b)) {
            (Some(x), Some(y)) => flips += usize::from(x != y),
            _ => return Err(MetricError::NoScores { item }),
        }
    }
    Ok(flips as f64 / first.len() as f64)
}

fn check_parallel(
    left_name: &'static str,
    left: usize,
    right_name: &'static str,
    right: usize,
) -> Result<(), MetricError> {
    if left != right {
        return Err(MetricError::LengthMismatch {
            left_name,
            left,
            right_name,
            right,
        });
    }
    if left == 0 {
        return Err(MetricError::Empty);
    }
    Ok(())
}

fn check_confidences(confidences: &[f64], unit_interval: bool) -> Result<(), MetricError> {
    let bad = |c: &f64| {
        if unit_interval {
            !(0.0..=1.0).contains(c)
        } else {
            !c.is_finite()
        }
    };
    match confidences.iter().position(bad) {
        Some(item) => Err(MetricError::InvalidConfidence {
            item,
            value: confidences[item],
        }),
        None => Ok(()),
    }
}

fn check_row(item: usize, row: &[f64]) -> Result<(), MetricError> {
    check_distribution(row).map_err(|source| MetricError::InvalidDistribution { item, source })
}

fn check_target(item: usize, row: &[f64], target: usize) -> Result<(), MetricError> {
    if target >= row.len() {
        return Err(MetricError::TargetOutOfRange {
            item,
            target,
            classes: row.len(),
        });
    }
    Ok(())
}

fn check_soft_pair(item: usize, row: &[f64], target: &[f64]) -> Result<(), MetricError> {
    check_row(item, row)?;
    check_row(item, target)?;
    if row.len() != target.len() {
        return Err(MetricError::ClassCountMismatch {
            item,
            predicted: row.len(),
            target: target.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn ece_hand_worked() {
        // Two bins: [0, 0.5) and [0.5, 1].
        // Bin 0 holds 0.2 (wrong) and 0.4 (right): mean confidence 0.3, accuracy 0.5, gap 0.2.
        // Bin 1 holds 0.6 (right), 0.8 (right), 1.0 (wrong; 1.0 lands in the last bin):
        // mean confidence 0.8, accuracy 2/3, gap 2/15.
        // ECE = 2/5 * 0.2 + 3/5 * 2/15 = 0.08 + 0.08 = 0.16.
        let confidences = [0.2, 0.4, 0.6, 0.8, 1.0];
        let correct = [false, true, true, true, false];
        let diagram = reliability_diagram(&confidences, &correct, 2).expect("valid input");
        assert!(close(diagram.ece, 0.16), "{diagram:?}");
        assert_eq!(diagram.total, 5);
        assert_eq!(diagram.bins[0].count, 2);
        assert!(close(
            diagram.bins[0].mean_confidence.expect("non-empty"),
            0.3
        ));
        assert!(close(diagram.bins[0].accuracy.expect("non-empty"), 0.5));
        assert_eq!(diagram.bins[1].count, 3);
        assert!(close(
            diagram.bins[1].mean_confidence.expect("non-empty"),
            0.8
        ));
        assert!(close(
            diagram.bins[1].accuracy.expect("non-empty"),
            2.0 / 3.0
        ));
        assert!(close(diagram.bins[1].upper, 1.0));
        let ece = expected_calibration_error(&confidences, &correct, 2).expect("valid input");
        assert!(close(ece, 0.16));
    }

    #[test]
    fn ece_reports_empty_bins_and_refuses_bad_input() {
        let diagram = reliability_diagram(&[0.95], &[true], 10).expect("valid input");
        assert_eq!(diagram.bins.len(), 10);
        assert!(
            diagram.bins[..9]
                .iter()
                .all(|b| b.count == 0 && b.accuracy.is_none())
        );
        assert!(close(diagram.ece, 0.05));
        assert_eq!(reliability_diagram(&[], &[], 10), Err(MetricError::Empty));
        assert_eq!(
            reliability_diagram(&[0.5], &[true], 0),
            Err(MetricError::NoBins)
        );
        assert!(matches!(
            reliability_diagram(&[0.5, 1.5], &[true, true], 10),
            Err(MetricError::InvalidConfidence { item: 1, .. })
        ));
        assert!(matches!(
            reliability_diagram(&[f64::NAN], &[true], 10),
            Err(MetricError::InvalidConfidence { item: 0, .. })
        ));
        assert!(matches!(
            reliability_diagram(&[0.5], &[true, false], 10),
            Err(MetricError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn brier_hand_worked() {
        // Item 0: (0.7-1)^2 + 0.2^2 + 0.1^2 = 0.09 + 0.04 + 0.01 = 0.14.
        // Item 1: (0.4-1)^2 + 0.6^2 = 0.36 + 0.36 = 0.72.
        // Mean: 0.43.
        let probs = vec![vec![0.7, 0.2, 0.1], vec![0.4, 0.6]];
        assert!(close(brier_score(&probs, &[0, 0]).expect("valid"), 0.43));
        // The soft variant with one-hot targets agrees.
        let one_hot = vec![vec![1.0, 0.0, 0.0], vec![1.0, 0.0]];
        assert!(close(
            brier_score_soft(&probs, &one_hot).expect("valid"),
            0.43
        ));
        // Soft: (0.7-0.5)^2 + (0.3-0.5)^2 = 0.08.
        let soft = brier_score_soft(&[vec![0.7, 0.3]], &[vec![0.5, 0.5]]).expect("valid");
        assert!(close(soft, 0.08));
        assert!(matches!(
            brier_score(&probs, &[0, 2]),
            Err(MetricError::TargetOutOfRange {
                item: 1,
                target: 2,
                classes: 2
            })
        ));
        assert!(matches!(
            brier_score(&[vec![0.7, 0.2]], &[0]),
            Err(MetricError::InvalidDistribution { item: 0, .. })
        ));
        assert!(matches!(
            brier_score_soft(&[vec![0.5, 0.5]], &[vec![1.0, 0.0, 0.0]]),
            Err(MetricError::ClassCountMismatch { item: 0, .. })
        ));
    }

    #[test]
    fn log_loss_hand_worked() {
        // (-ln 0.5 - ln 0.75) / 2.
        let probs = vec![vec![0.5, 0.5], vec![0.25, 0.75]];
        let want = (2f64.ln() - 0.75f64.ln()) / 2.0;
        assert!(close(log_loss(&probs, &[0, 1]).expect("valid"), want));
        let soft = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        assert!(close(log_loss_soft(&probs, &soft).expect("valid"), want));
        // Certain and wrong is infinitely bad, not clipped.
        assert!(
            log_loss(&[vec![1.0, 0.0]], &[1])
                .expect("valid")
                .is_infinite()
        );
        // Zero probability where the target has no mass costs nothing.
        assert!(close(
            log_loss_soft(&[vec![1.0, 0.0]], &[vec![1.0, 0.0]]).expect("valid"),
            0.0
        ));
    }

    #[test]
    fn coverage_hand_worked_on_ten_items() {
        // Ranked by confidence (two answers tie at 0.9, one right and one wrong):
        //   rank:        1    2    3-4        5    6    7    8    9    10
        //   confidence: .99  .95  .90 .90    .80  .70  .60  .50  .40  .30
        //   correct:     y    y    y   n      y    y    n    y    n    n
        // Prefixes that keep the tie together, with errors / size:
        //   1: 0/1  2: 0/2  4: 1/4  5: 1/5  6: 1/6  7: 2/7  8: 2/8  9: 3/9  10: 4/10
        let confidences = [0.5, 0.9, 0.99, 0.3, 0.9, 0.8, 0.7, 0.6, 0.95, 0.4];
        let correct = [
            true, false, true, false, true, true, true, false, true, false,
        ];
        let at = |rate| coverage_at_error(&confidences, &correct, rate).expect("valid input");
        // Rate 0: only prefixes 1 and 2 are error-free; the tie forbids stopping at 3.
        assert!(close(at(0.0), 0.2));
        // Rate 0.2: prefixes 5 (1/5) and 6 (1/6) qualify although 4 (1/4) does not.
        assert!(close(at(0.2), 0.6));
        // Rate 0.25: prefix 8 (2/8) qualifies exactly.
        assert!(close(at(0.25), 0.8));
        // Rate 0.4: everything (4/10).
        assert!(close(at(0.4), 1.0));
    }

    #[test]
    fn coverage_is_zero_when_the_top_answer_is_wrong_at_rate_zero() {
        let got = coverage_at_error(&[0.9, 0.5, 0.4], &[false, true, true], 0.0).expect("valid");
        assert!(close(got, 0.0));
        assert!(matches!(
            coverage_at_error(&[0.9], &[true], 1.5),
            Err(MetricError::InvalidErrorRate { .. })
        ));
        assert!(matches!(
            coverage_at_error(&[f64::INFINITY], &[true], 0.1),
            Err(MetricError::InvalidConfidence { item: 0, .. })
        ));
        assert_eq!(coverage_at_error(&[], &[], 0.1), Err(MetricError::Empty));
    }

    #[test]
    fn ece_and_coverage_at_five_percent_worked_by_hand_on_ten_items() {
        // Ten answers, already in order of confidence:
        //   item:        0    1    2    3    4    5    6    7    8    9
        //   confidence: .98  .95  .91  .88  .88  .81  .74  .62  .55  .43
        //   correct:     y    y    y    y    y    n    y    n    y    n
        //
        // ECE with 10 bins; item i goes to bin floor(10 c):
        //   bin 9 [.9, 1]:  .98 .95 .91 -> 3 right, confidence sum 2.84, |3 - 2.84| = 0.16
        //   bin 8 [.8, .9): .88 .88 .81 -> 2 right, confidence sum 2.57, |2 - 2.57| = 0.57
        //   bin 7: .74 right  |1 - .74| = 0.26      bin 6: .62 wrong  |0 - .62| = 0.62
        //   bin 5: .55 right  |1 - .55| = 0.45      bin 4: .43 wrong  |0 - .43| = 0.43
        // ECE = sum_b (n_b / N) |acc_b - conf_b| = (1/N) sum_b |right_b - confidence sum_b|
        //     = (0.16 + 0.57 + 0.26 + 0.62 + 0.45 + 0.43) / 10 = 2.49 / 10 = 0.249.
        //
        // Coverage at 5% error: a kept prefix of n answers may hold at most 0.05 n errors,
        // which is below one for every n <= 10, so the prefix must be error-free. The first
        // five are right (the tie at .88 is kept whole: both right); the sixth is wrong, and
        // every longer prefix has 1/6 = 0.17 or more errors. Coverage = 5 / 10 = 0.5.
        // At 20%: 1/6 and 1/7 qualify, 2/8 does not, nor 2/9 or 3/10: coverage 7 / 10.
        let confidences = [0.98, 0.95, 0.91, 0.88, 0.88, 0.81, 0.74, 0.62, 0.55, 0.43];
        let correct = [
            true, true, true, true, true, false, true, false, true, false,
        ];
        let diagram = reliability_diagram(&confidences, &correct, 10).expect("valid input");
        assert!(close(diagram.ece, 0.249), "{}", diagram.ece);
        let counts: Vec<usize> = diagram.bins.iter().map(|b| b.count).collect();
        assert_eq!(counts, [0, 0, 0, 0, 1, 1, 1, 1, 3, 3]);
        assert!(close(
            diagram.bins[8].accuracy.expect("non-empty"),
            2.0 / 3.0
        ));
        assert!(close(
            coverage_at_error(&confidences, &correct, 0.05).expect("valid"),
            0.5
        ));
        assert!(close(
            coverage_at_error(&confidences, &correct, 0.2).expect("valid"),
            0.7
        ));
        // Shuffling the items changes neither.
        let order = [7, 2, 9, 0, 5, 3, 8, 1, 6, 4];
        let c: Vec<f64> = order.iter().map(|&i| confidences[i]).collect();
        let r: Vec<bool> = order.iter().map(|&i| correct[i]).collect();
        assert!(close(
            expected_calibration_error(&c, &r, 10).expect("valid"),
            0.249
        ));
        assert!(close(coverage_at_error(&c, &r, 0.05).expect("valid"), 0.5));
        // And the accuracy of the ten is 7/10.
        assert!(close(accuracy(&correct, &[true; 10]).expect("valid"), 0.7));
    }

    #[test]
    fn accuracy_and_macro_f1_hand_worked() {
        // labels      a a b b c
        // predictions a b b b a
        // a: tp 1 (item 0), fp 1 (item 4), fn 1 (item 1): F1 = 2 / (2 + 1 + 1) = 0.5
        // b: tp 2, fp 1 (item 1), fn 0:                    F1 = 4 / (4 + 1)     = 0.8
        // c: tp 0, fp 0, fn 1 (item 4):                    F1 = 0 / 1           = 0
        // macro-F1 = (0.5 + 0.8 + 0) / 3 = 1.3 / 3; accuracy 3/5.
        let labels = ["a", "a", "b", "b", "c"];
        let predictions = ["a", "b", "b", "b", "a"];
        assert!(close(accuracy(&predictions, &labels).expect("valid"), 0.6));
        assert!(close(
            macro_f1(&predictions, &labels).expect("valid"),
            1.3 / 3.0
        ));
        // A class only ever predicted counts, with F1 0: a scores 2/3, z scores 0.
        assert!(close(
            macro_f1(&["a", "z"], &["a", "a"]).expect("valid"),
            1.0 / 3.0
        ));
        // Perfect predictions score 1 whatever classes are absent.
        assert!(close(macro_f1(&[3, 1, 3], &[3, 1, 3]).expect("valid"), 1.0));
        assert_eq!(accuracy::<u8>(&[], &[]), Err(MetricError::Empty));
        assert!(matches!(
            macro_f1(&[1], &[1, 2]),
            Err(MetricError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn expected_level_and_its_mean_absolute_error_hand_worked() {
        // [0.1, 0.2, 0.7]: 0 * 0.1 + 1 * 0.2 + 2 * 0.7 = 1.6, true level 2: error 0.4.
        // [0.5, 0.5, 0.0]: 0.5, true level 0: error 0.5. Mean 0.45.
        let first = expected_level(&[0.1, 0.2, 0.7]).expect("a distribution");
        let second = expected_level(&[0.5, 0.5, 0.0]).expect("a distribution");
        assert!(close(first, 1.6) && close(second, 0.5));
        assert!(close(
            mean_absolute_error(&[first, second], &[2, 0]).expect("valid"),
            0.45
        ));
        assert!(expected_level(&[0.5, 0.6]).is_err());
        assert!(matches!(
            mean_absolute_error(&[f64::NAN], &[1]),
            Err(MetricError::NonFinite { item: 0, .. })
        ));
    }

    #[test]
    fn kl_divergence_hand_worked() {
        // q = (0.5, 0.5), p = (0.25, 0.75):
        // 0.5 ln(0.5 / 0.25) + 0.5 ln(0.5 / 0.75) = 0.5 ln 2 + 0.5 ln(2/3) = 0.5 ln(4/3).
        let kl = kl_divergence(&[0.5, 0.5], &[0.25, 0.75]).expect("valid");
        assert!(close(kl, 0.5 * (4.0f64 / 3.0).ln()), "{kl}");
        assert!(close(
            kl_divergence(&[0.2, 0.8], &[0.2, 0.8]).expect("valid"),
            0.0
        ));
        // Where the target has no mass the prediction may be anything, even 0.
        assert!(close(
            kl_divergence(&[0.0, 1.0], &[0.0, 1.0]).expect("valid"),
            0.0
        ));
        // Ruling out what happened costs -ln(1e-12) = 12 ln 10, not infinity.
        let ruled_out = kl_divergence(&[1.0, 0.0], &[0.0, 1.0]).expect("valid");
        assert!(close(ruled_out, 12.0 * 10f64.ln()), "{ruled_out}");
        let mean = mean_kl_divergence(
            &[vec![0.25, 0.75], vec![0.2, 0.8]],
            &[vec![0.5, 0.5], vec![0.2, 0.8]],
        )
        .expect("valid");
        assert!(close(mean, kl / 2.0));
        assert!(matches!(
            kl_divergence(&[0.5, 0.5], &[1.0]),
            Err(MetricError::ClassCountMismatch { .. })
        ));
        assert!(matches!(
            mean_kl_divergence(&[vec![0.5, 0.5]], &[vec![0.6, 0.6]]),
            Err(MetricError::InvalidDistribution { item: 0, .. })
        ));
    }

    #[test]
    fn flip_rate_hand_worked() {
        // Item 0: argmax 0 then 0 (kept). Item 1: 2 then 0 (flip). Item 2: a tie (0.5, 0.5)
        // resolves to option 0 both times (kept). Item 3: log-probabilities, 1 then 0 (flip).
        let first = vec![
            vec![0.7, 0.2, 0.1],
            vec![0.1, 0.3, 0.6],
            vec![0.5, 0.5],
            vec![-2.0, -0.1],
        ];
        let second = vec![
            vec![0.6, 0.3, 0.1],
            vec![0.5, 0.3, 0.2],
            vec![0.5, 0.5],
            vec![-0.1, -2.0],
        ];
        assert!(close(flip_rate(&first, &second).expect("valid"), 0.5));
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), Some(1));
        assert_eq!(argmax::<f64>(&[]), None);
        assert!(matches!(
            flip_rate(&[vec![0.5, 0.5]], &[vec![1.0]]),
            Err(MetricError::ClassCountMismatch { item: 0, .. })
        ));
        assert!(matches!(
            flip_rate(&[vec![]], &[vec![]]),
            Err(MetricError::NoScores { item: 0 })
        ));
        assert!(matches!(
            flip_rate(&[vec![f64::NAN]], &[vec![1.0]]),
            Err(MetricError::NonFinite { item: 0, .. })
        ));
    }

    proptest! {
        // Statistical property: a fixed proptest seed keeps it deterministic in CI.
        #![proptest_config(ProptestConfig {
            cases: 8,
            rng_seed: RngSeed::Fixed(0x5EED_0001),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn ece_of_a_calibrated_sample_is_small(seed in any::<u64>(), bins in 5usize..16) {
            // Each answer reports confidence c and is right with probability exactly c.
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let n = 20_000;
            let confidences: Vec<f64> = (0..n).map(|_| rng.random::<f64>()).collect();
            let correct: Vec<bool> = confidences.iter().map(|&c| rng.random::<f64>() < c).collect();
            let ece = expected_calibration_error(&confidences, &correct, bins).expect("valid");
            prop_assert!(ece < 0.02, "ece {}", ece);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn coverage_is_a_share_and_grows_with_the_rate(
            items in prop::collection::vec((0.0f64..1.0, any::<bool>()), 1..40),
            rate in 0.0f64..1.0,
        ) {
            let (confidences, correct): (Vec<f64>, Vec<bool>) = items.into_iter().unzip();
            let low = coverage_at_error(&confidences, &correct, rate).expect("valid");
            let high = coverage_at_error(&confidences, &correct, 1.0).expect("valid");
            prop_assert!((0.0..=1.0).contains(&low));
            prop_assert!(close(high, 1.0));
            prop_assert!(low <= high);
        }
    }
}
