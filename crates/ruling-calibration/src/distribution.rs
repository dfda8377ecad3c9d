//! The one check that a slice of numbers is a probability distribution, shared by the
//! confidence functions, the metrics and soft fitting targets so they refuse the same inputs
//! with the same error.

use thiserror::Error;

/// How far the sum of a distribution may stray from one. Loose enough for probabilities that
/// went through JSON or f32, tight enough to catch unnormalised scores.
pub const SUM_TOLERANCE: f64 = 1e-6;

/// Why a slice is not a probability distribution.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DistributionError {
    /// There were no probabilities at all.
    #[error("empty probability distribution")]
    Empty,
    /// An entry was NaN, infinite, negative or above one.
    #[error("probability at position {position} must lie in [0, 1], got {value}")]
    OutOfRange {
        /// Index of the first offending entry.
        position: usize,
        /// The entry.
        value: f64,
    },
    /// The entries did not sum to one within [`SUM_TOLERANCE`].
    #[error("probabilities must sum to 1 (within {SUM_TOLERANCE}), they sum to {sum}")]
    NotNormalised {
        /// The sum found.
        sum: f64,
    },
}

/// Checks that `probs` is non-empty, every entry is in `[0, 1]` and they sum to one within
/// [`SUM_TOLERANCE`].
pub fn check_distribution(probs: &[f64]) -> Result<(), DistributionError> {
    if probs.is_empty() {
        return Err(DistributionError::Empty);
    }
    if let Some(position) = probs.iter().position(|p| !(0.0..=1.0).contains(p)) {
        return Err(DistributionError::OutOfRange {
            position,
            value: probs[position],
        });
    }
    let sum: f64 = probs.iter().sum();
    if (sum - 1.0).abs() > SUM_TOLERANCE {
        return Err(DistributionError::NotNormalised { sum });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_distribution() {
        assert_eq!(check_distribution(&[]), Err(DistributionError::Empty));
        assert!(matches!(
            check_distribution(&[0.5, f64::NAN]),
            Err(DistributionError::OutOfRange { position: 1, .. })
        ));
        assert!(matches!(
            check_distribution(&[1.5, -0.5]),
            Err(DistributionError::OutOfRange { position: 0, .. })
        ));
        assert!(matches!(
            check_distribution(&[0.5, 0.4]),
            Err(DistributionError::NotNormalised { .. })
        ));
        assert_eq!(check_distribution(&[0.25, 0.75]), Ok(()));
    }
}
