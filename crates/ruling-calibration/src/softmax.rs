//! Numerically stable softmax over answer-code logits, in f64 throughout.
//!
//! The engine reads a handful of logits (one per answer code) and turns them into the
//! probabilities a client sees, so these functions must never produce NaN from finite or
//! infinite-but-meaningful input:
//!
//! - Every function shifts by the largest entry before exponentiating, so logits of any
//!   magnitude (up to `f64::MAX`) neither overflow nor underflow to an all-zero vector.
//! - An entry of `-inf` means "this option is impossible" (the prior subtraction and the
//!   two-stage choice both produce it): it gets probability exactly `0.0` and log-probability
//!   `-inf`, and the other entries are unaffected.
//! - Entries of `+inf` dominate every finite entry; in the limit they share the whole mass
//!   equally, and that limit is what is returned.
//! - Input with no usable entry (empty, all `-inf`) or any NaN is refused with a
//!   [`SoftmaxError`], because any answer would be invented.
//! - Every normalising sum adds its terms smallest first, whatever order the logits come in,
//!   so permuting the logits permutes the result exactly, bit for bit: the options of a
//!   question in another order get the same probabilities, not ones a rounding apart.

use thiserror::Error;

/// Why a softmax could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SoftmaxError {
    /// There were no logits at all.
    #[error("softmax of an empty slice of logits")]
    Empty,
    /// A logit was NaN, so no probability can be trusted.
    #[error("logit at position {position} is NaN")]
    NotANumber {
        /// Index of the first NaN logit.
        position: usize,
    },
    /// Every logit was `-inf`: every option is impossible, so there is no distribution.
    #[error("every one of the {len} logits is -inf")]
    AllNegativeInfinity {
        /// Number of logits given.
        len: usize,
    },
    /// The temperature was not a finite number greater than zero.
    #[error("temperature must be finite and greater than zero, got {value}")]
    InvalidTemperature {
        /// The temperature given.
        value: f64,
    },
}

/// `ln(sum(exp(x)))`, computed without overflow.
///
/// Documented values instead of errors, because this is the primitive the checked functions
/// build on and the mathematical answer exists in every case but NaN:
/// - empty slice, or every entry `-inf`: `-inf` (the log of an empty sum, `ln 0`);
/// - any `+inf` entry (and no NaN): `+inf`;
/// - any NaN entry: NaN.
pub fn log_sum_exp(logits: &[f64]) -> f64 {
    if logits.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let max = max_of(logits);
    if !max.is_finite() {
        // -inf: empty or all impossible; +inf: dominates everything else.
        return max;
    }
    let sum = order_free_sum(logits.iter().map(|&x| (x - max).exp()));
    // sum >= 1 because the maximum contributes exp(0), so the log is finite.
    max + sum.ln()
}

/// Probabilities `exp(x_i) / sum_j exp(x_j)`.
///
/// The result has the same length as `logits`, every entry lies in `[0, 1]` and they sum to
/// one within rounding. See the module documentation for `-inf` and `+inf` entries.
pub fn softmax(logits: &[f64]) -> Result<Vec<f64>, SoftmaxError> {
    scaled_softmax(logits, 1.0)
}

/// Log-probabilities `x_i - log_sum_exp(x)`, more accurate than `ln(softmax(x))` for tiny
/// probabilities (which would round to zero before the log).
///
/// `-inf` entries stay `-inf`; with `+inf` entries present, those get `-ln k` (k of them) and
/// every other entry `-inf`.
pub fn log_softmax(logits: &[f64]) -> Result<Vec<f64>, SoftmaxError> {
    let max = checked_max(logits)?;
    if max.is_infinite() {
        let log_share = -(count_positive_infinities(logits) as f64).ln();
        return Ok(logits
            .iter()
            .map(|&x| {
                if is_positive_infinity(x) {
                    log_share
                } else {
                    f64::NEG_INFINITY
                }
            })
            .collect());
    }
    let shifted_sum = order_free_sum(logits.iter().map(|&x| (x - max).exp()));
    let log_norm = shifted_sum.ln();
    // Subtracting the maximum before the normaliser keeps huge logits exact: (x - max) is
    // computed once, not (x - (max + ln sum)), which would lose the small differences.
    Ok(logits.iter().map(|&x| (x - max) - log_norm).collect())
}

/// Softmax of `logits / temperature`.
///
/// Temperatures above one flatten the distribution, below one sharpen it; one is the plain
/// [`softmax`]. The temperature must be finite and greater than zero. The division is applied
/// after shifting by the maximum, so a small temperature cannot overflow huge logits.
pub fn softmax_with_temperature(
    logits: &[f64],
    temperature: f64,
) -> Result<Vec<f64>, SoftmaxError> {
    check_temperature(temperature)?;
    scaled_softmax(logits, temperature.recip())
}

/// Log-softmax of `logits / temperature`; see [`log_softmax`] and [`softmax_with_temperature`].
pub fn log_softmax_with_temperature(
    logits: &[f64],
    temperature: f64,
) -> Result<Vec<f64>, SoftmaxError> {
    check_temperature(temperature)?;
    let max = checked_max(logits)?;
    if max.is_infinite() {
        return log_softmax(logits);
    }
    let inverse = temperature.recip();
    let scaled: Vec<f64> = logits.iter().map(|&x| (x - max) * inverse).collect();
    log_softmax(&scaled)
}

fn check_temperature(temperature: f64) -> Result<(), SoftmaxError> {
    if temperature.is_finite() && temperature > 0.0 {
        Ok(())
    } else {
        Err(SoftmaxError::InvalidTemperature { value: temperature })
    }
}

/// Softmax of `logits * inverse_temperature`, with `inverse_temperature` finite and positive.
fn scaled_softmax(logits: &[f64], inverse_temperature: f64) -> Result<Vec<f64>, SoftmaxError> {
    let max = checked_max(logits)?;
    if max.is_infinite() {
        // Only +inf reaches here (checked_max refuses all -inf): the limit shares the mass
        // equally among the +inf entries, whatever the temperature.
        let share = (count_positive_infinities(logits) as f64).recip();
        return Ok(logits
            .iter()
            .map(|&x| if is_positive_infinity(x) { share } else { 0.0 })
            .collect());
    }
    // x - max <= 0, so exp never overflows; a -inf logit gives exp(-inf) = 0 exactly.
    let mut probs: Vec<f64> = logits
        .iter()
        .map(|&x| ((x - max) * inverse_temperature).exp())
        .collect();
    let sum = order_free_sum(probs.iter().copied());
    for p in &mut probs {
        *p /= sum;
    }
    Ok(probs)
}

/// The sum of non-negative `terms`, smallest first: the same bits in any order.
fn order_free_sum(terms: impl Iterator<Item = f64>) -> f64 {
    let mut terms: Vec<f64> = terms.collect();
    terms.sort_by(f64::total_cmp);
    terms.iter().sum()
}

/// The largest entry, refusing input for which no distribution exists.
fn checked_max(logits: &[f64]) -> Result<f64, SoftmaxError> {
    if logits.is_empty() {
        return Err(SoftmaxError::Empty);
    }
    if let Some(position) = logits.iter().position(|x| x.is_nan()) {
        return Err(SoftmaxError::NotANumber { position });
    }
    let max = max_of(logits);
    if max.is_infinite() && max < 0.0 {
        return Err(SoftmaxError::AllNegativeInfinity { len: logits.len() });
    }
    Ok(max)
}

fn max_of(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

fn is_positive_infinity(x: f64) -> bool {
    x.is_infinite() && x.is_sign_positive()
}

fn count_positive_infinities(logits: &[f64]) -> usize {
    logits.iter().filter(|&&x| is_positive_infinity(x)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    fn assert_all_close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(close(*g, *w, tol), "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn softmax_of_zero_and_ln3_is_a_quarter_and_three_quarters() {
        // exp(0) = 1, exp(ln 3) = 3, total 4.
        let p = softmax(&[0.0, 3f64.ln()]).expect("finite logits");
        assert_all_close(&p, &[0.25, 0.75], 1e-15);
    }

    #[test]
    fn temperature_two_halves_the_logits() {
        // (0, 2 ln 3) / 2 = (0, ln 3).
        let p = softmax_with_temperature(&[0.0, 2.0 * 3f64.ln()], 2.0).expect("valid input");
        assert_all_close(&p, &[0.25, 0.75], 1e-15);
    }

    #[test]
    fn negative_infinity_gets_exactly_zero() {
        let p = softmax(&[1.0, f64::NEG_INFINITY, 1.0]).expect("some finite logits");
        assert_eq!(p[1].to_bits(), 0.0f64.to_bits());
        assert_all_close(&p, &[0.5, 0.0, 0.5], 1e-15);
        let lp = log_softmax(&[1.0, f64::NEG_INFINITY, 1.0]).expect("some finite logits");
        assert!(lp[1].is_infinite() && lp[1] < 0.0);
        assert!(close(lp[0], -(2f64.ln()), 1e-15));
    }

    #[test]
    fn huge_logits_do_not_overflow() {
        let p = softmax(&[f64::MAX, -f64::MAX, f64::MAX]).expect("finite logits");
        assert_all_close(&p, &[0.5, 0.0, 0.5], 1e-15);
        let p = softmax_with_temperature(&[1e308, 1e308 - 1e293], 0.05).expect("valid input");
        assert!(p.iter().all(|x| x.is_finite()));
        assert!(close(p.iter().sum(), 1.0, 1e-12));
        assert!(close(
            log_sum_exp(&[1000.0, 1000.0]),
            1000.0 + 2f64.ln(),
            1e-12
        ));
    }

    #[test]
    fn positive_infinity_takes_all_the_mass() {
        let p = softmax(&[f64::INFINITY, 3.0, f64::INFINITY]).expect("no NaN");
        assert_all_close(&p, &[0.5, 0.0, 0.5], 0.0);
        let lp = log_softmax(&[f64::INFINITY, 3.0]).expect("no NaN");
        assert!(close(lp[0], 0.0, 0.0));
        assert!(lp[1].is_infinite() && lp[1] < 0.0);
    }

    #[test]
    fn unusable_input_is_refused() {
        assert_eq!(softmax(&[]), Err(SoftmaxError::Empty));
        assert_eq!(
            softmax(&[f64::NEG_INFINITY, f64::NEG_INFINITY]),
            Err(SoftmaxError::AllNegativeInfinity { len: 2 })
        );
        assert_eq!(
            log_softmax(&[0.0, f64::NAN]),
            Err(SoftmaxError::NotANumber { position: 1 })
        );
        for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                softmax_with_temperature(&[0.0, 1.0], t),
                Err(SoftmaxError::InvalidTemperature { .. })
            ));
        }
    }

    #[test]
    fn log_sum_exp_documented_values() {
        assert!(log_sum_exp(&[]).is_infinite() && log_sum_exp(&[]) < 0.0);
        let all_impossible = log_sum_exp(&[f64::NEG_INFINITY; 3]);
        assert!(all_impossible.is_infinite() && all_impossible < 0.0);
        assert!(log_sum_exp(&[1.0, f64::INFINITY]).is_infinite());
        assert!(log_sum_exp(&[1.0, f64::NAN]).is_nan());
        assert!(close(log_sum_exp(&[0.0, 0.0]), 2f64.ln(), 1e-15));
    }

    /// A logit drawn mostly from a moderate range, sometimes huge or impossible.
    fn logit() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => -50.0f64..50.0,
            1 => -1e300f64..1e300,
            1 => Just(f64::NEG_INFINITY),
        ]
    }

    /// Logits with at least one finite entry, so a distribution exists.
    fn logits() -> impl Strategy<Value = Vec<f64>> {
        (
            -50.0f64..50.0,
            prop::collection::vec(logit(), 0..12),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(anchor, mut rest, at)| {
                let at = at.index(rest.len() + 1);
                rest.insert(at, anchor);
                rest
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn probabilities_are_a_distribution(xs in logits(), t in 0.05f64..20.0) {
            for p in [softmax(&xs), softmax_with_temperature(&xs, t)] {
                let p = p.expect("at least one finite logit");
                prop_assert_eq!(p.len(), xs.len());
                prop_assert!(p.iter().all(|&q| (0.0..=1.0).contains(&q)), "{:?}", p);
                prop_assert!(close(p.iter().sum(), 1.0, 1e-9), "{:?}", p);
            }
        }

        #[test]
        fn temperature_one_is_plain_softmax(xs in logits()) {
            let plain = softmax(&xs).expect("valid logits");
            let tempered = softmax_with_temperature(&xs, 1.0).expect("valid logits");
            for (a, b) in plain.iter().zip(&tempered) {
                prop_assert!(close(*a, *b, 1e-15));
            }
        }

        #[test]
        fn log_softmax_is_ln_of_softmax(
            xs in prop::collection::vec(prop_oneof![9 => -50.0f64..50.0, 1 => Just(f64::NEG_INFINITY)], 1..12),
            t in 0.5f64..5.0,
        ) {
            prop_assume!(xs.iter().any(|x| x.is_finite()));
            for (p, lp) in [
                (softmax(&xs), log_softmax(&xs)),
                (softmax_with_temperature(&xs, t), log_softmax_with_temperature(&xs, t)),
            ] {
                let (p, lp) = (p.expect("valid logits"), lp.expect("valid logits"));
                for (q, lq) in p.iter().zip(&lp) {
                    if *q == 0.0 {
                        prop_assert!(lq.is_infinite() && *lq < 0.0 || *lq < -700.0);
                    } else {
                        prop_assert!(close(q.ln(), *lq, 1e-9), "ln {} vs {}", q, lq);
                    }
                }
            }
        }

        #[test]
        fn shifting_every_logit_changes_nothing(
            xs in prop::collection::vec(-50.0f64..50.0, 1..12),
            shift in -1e3f64..1e3,
        ) {
            let shifted: Vec<f64> = xs.iter().map(|x| x + shift).collect();
            let a = softmax(&xs).expect("valid logits");
            let b = softmax(&shifted).expect("valid logits");
            for (p, q) in a.iter().zip(&b) {
                prop_assert!(close(*p, *q, 1e-9));
            }
        }
    }
}
