//! The single confidence number reported next to a choice or score answer.
//!
//! Both functions take the (calibrated) probabilities of one answer and return a number in
//! `[0, 1]`, higher meaning surer. They differ because the two answer types are read
//! differently:
//!
//! - **Choice: `max_i p_i`**, the probability of the chosen key. This is what the predecessor
//!   reported, clients already threshold on it, and it has a direct meaning: after
//!   calibration, answers reported at confidence `c` are right about a share `c` of the time
//!   (that is what [`crate::metrics::expected_calibration_error`] measures).
//! - **Score: `1 - H(p) / ln n`**, one minus the Shannon entropy `H(p) = -sum_i p_i ln p_i`
//!   (with `0 ln 0 = 0`) normalised by its largest possible value `ln n`, where `n` is the
//!   number of levels. It is exactly 1 for a one-hot distribution and exactly 0 for the
//!   uniform one, whatever `n` is. The reported score is an expected level, not an argmax,
//!   so the top probability says little about it; and `max p` has a floor of `1/n` that
//!   differs between a 2-level and a 10-level scale, while the normalised entropy puts every
//!   scale on the same 0-to-1 footing and uses the whole distribution.
//!   With `n = 1` there is nothing to be unsure about and `ln 1 = 0` would divide by zero, so
//!   the confidence is defined as 1.
//!
//! Both refuse input that is not a probability distribution (see
//! [`crate::distribution::check_distribution`]).

use crate::distribution::{DistributionError, check_distribution};

/// The confidence of a choice answer: the largest probability.
pub fn choice_confidence(probs: &[f64]) -> Result<f64, DistributionError> {
    check_distribution(probs)?;
    Ok(probs.iter().copied().fold(0.0, f64::max))
}

/// The confidence of a score answer: `1 - H(p) / ln n`, in `[0, 1]`; 1 when `n = 1`.
pub fn score_confidence(probs: &[f64]) -> Result<f64, DistributionError> {
    check_distribution(probs)?;
    if probs.len() == 1 {
        return Ok(1.0);
    }
    let entropy: f64 = probs
        .iter()
        .filter(|&&p| p > 0.0)
        .map(|&p| -p * p.ln())
        .sum();
    let normalised = entropy / (probs.len() as f64).ln();
    // Rounding (and the sum tolerance) can push the ratio a hair outside [0, 1].
    Ok((1.0 - normalised).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn choice_confidence_is_the_top_probability() {
        assert!(close(
            choice_confidence(&[0.2, 0.5, 0.3]).expect("valid"),
            0.5
        ));
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
        // H([0.5, 0.5, 0]) = ln 2; normalised by ln 3.
        let want = 1.0 - 2f64.ln() / 3f64.ln();
        assert!(close(
            score_confidence(&[0.5, 0.5, 0.0]).expect("valid"),
            want
        ));
        assert!(score_confidence(&[f64::NAN, 1.0]).is_err());
    }
}
