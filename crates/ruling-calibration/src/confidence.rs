//! The single confidence number reported next to a choice or score answer: the System One
//! specification's reference formulas, so a client's thresholds mean the same on every server.
//!
//! Both functions take the (calibrated) probabilities of one answer and return a number in
//! `[0, 1]`, higher meaning surer, 0 for the uniform distribution and 1 for a one-hot one:
//!
//! - **Choice of K options: `(p_max - 1/K) / (1 - 1/K)`**, the top probability rescaled so
//!   that chance (`1/K`) is 0 whatever K is. It orders answers exactly as `p_max` does; the
//!   calibration metrics (ECE and its reliability bins) keep reading `p_max` itself, which is
//!   the probability that the chosen key is right.
//! - **Score of n levels: `1 - sum_i p_i |i - m| / sum_i (1/n) |i - m|`**, floored at 0,
//!   where `m` is the most probable level (the first of equals): the expected distance from
//!   the mode in levels, relative to that distance under the uniform distribution. The
//!   reported score is an expected level, so what matters is how far the mass spreads from
//!   the level it piles on, and a neighbouring level costs less than a distant one.
//!
//! Both refuse input that is not a probability distribution (see
//! [`crate::distribution::check_distribution`]); a single option or level is certain (1).

use crate::distribution::{DistributionError, check_distribution};

/// The confidence of a choice answer: `(p_max - 1/K) / (1 - 1/K)`; 1 when `K = 1`.
pub fn choice_confidence(probs: &[f64]) -> Result<f64, DistributionError> {
    check_distribution(probs)?;
    let k = probs.len() as f64;
    if probs.len() == 1 {
        return Ok(1.0);
    }
    let top = probs.iter().copied().fold(0.0, f64::max);
    Ok(((top - 1.0 / k) / (1.0 - 1.0 / k)).clamp(0.0, 1.0))
}

/// The confidence of a score answer: one minus the expected distance from the mode over the
/// uniform distribution's, floored at 0; 1 when `n = 1`.
pub fn score_confidence(probs: &[f64]) -> Result<f64, DistributionError> {
    check_distribution(probs)?;
    if probs.len() == 1 {
        return Ok(1.0);
    }
    let n = probs.len() as f64;
    let mode = probs
        .iter()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |best, (i, &p)| {
            if p > best.1 { (i, p) } else { best }
        })
        .0;
    let distance = |i: usize| i.abs_diff(mode) as f64;
    let spread: f64 = probs.iter().enumerate().map(|(i, p)| p * distance(i)).sum();
    let uniform: f64 = (0..probs.len()).map(|i| distance(i) / n).sum();
    Ok((1.0 - spread / uniform).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn choice_confidence_rescales_the_top_probability_from_chance() {
        // (0.5 - 1/3) / (1 - 1/3) = 0.25
        assert!(close(
            choice_confidence(&[0.2, 0.5, 0.3]).expect("valid"),
            0.25
        ));
        assert!(close(choice_confidence(&[0.25; 4]).expect("valid"), 0.0));
        assert!(close(choice_confidence(&[0.0, 1.0]).expect("valid"), 1.0));
        assert!(close(choice_confidence(&[1.0]).expect("valid"), 1.0));
        assert!(choice_confidence(&[]).is_err());
        assert!(choice_confidence(&[0.2, 0.2]).is_err());
    }

    #[test]
    fn score_confidence_is_one_for_one_hot_and_zero_for_uniform() {
        for n in 2..=10 {
            let mut one_hot = vec![0.0; n];
            one_hot[n / 2] = 1.0;
            assert!(close(score_confidence(&one_hot).expect("valid"), 1.0));
            let uniform = vec![1.0 / n as f64; n];
            assert!(close(score_confidence(&uniform).expect("valid"), 0.0));
        }
        assert!(close(score_confidence(&[1.0]).expect("valid"), 1.0));
    }

    #[test]
    fn score_confidence_hand_computed() {
        // Mode 1; spread 0.3 * 1 + 0.1 * 1 = 0.4; uniform (1 + 0 + 1) / 3 = 2/3.
        let want = 1.0 - 0.4 / (2.0 / 3.0);
        assert!(close(
            score_confidence(&[0.3, 0.6, 0.1]).expect("valid"),
            want
        ));
        // Mass at both ends, mode 0: spread 0.45 * 2 = 0.9, uniform 1: floored at 0.
        assert!(close(
            score_confidence(&[0.55, 0.0, 0.45]).expect("valid"),
            0.1
        ));
        assert!(close(
            score_confidence(&[0.4, 0.2, 0.4]).expect("valid"),
            0.0
        ));
        assert!(score_confidence(&[f64::NAN, 1.0]).is_err());
    }
}
