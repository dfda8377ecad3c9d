//! The four side-by-side distributions of one question, derived from the engine's trace.
//!
//! One traced request holds, per question ([`QuestionTrace`]), every order the engine showed
//! the options in (`rotations[r].order`), the code log-probabilities it read for that order
//! after the prior was subtracted (`rotations[r].log_probabilities`) and the prior itself
//! (`rotations[r].prior`, `None` when the engine runs without one). From that one pass:
//!
//! - **raw**: the first order (the options as given), prior added back: what an engine with
//!   one rotation and no prior answers.
//! - **prior-corrected**: the first order as traced, i.e. with the prior subtracted; `None`
//!   when the engine runs without a prior (there is nothing to derive it from).
//! - **rotated**: the per-key mean of the traced log-probabilities over every order (a key an
//!   order did not show counts as absent, and a key no order showed is impossible), exactly as
//!   the decoder engine folds rotations; so it is prior-corrected when the engine has
//!   the prior on, and equals raw when it runs one rotation without a prior.
//! - **calibrated**: the rotated scores divided by the answer type's temperature before the
//!   softmax; with the temperature the engine applied, this is the engine's own answer.
//!
//! Every distribution is keyed by the question's answer keys in canonical order
//! (`ruling_corpus::answer_keys`), with 0 for a key the order did not show (the options a
//! two-stage choice dropped before its final pass).

use anyhow::{Context as _, ensure};
use indexmap::IndexMap;
use ruling_calibration::softmax_with_temperature;
use ruling_schema::{QuestionTrace, RotationTrace};

/// A distribution over answer keys, in canonical order.
pub type Dist = IndexMap<String, f64>;

/// One shown order of a question, read from its trace.
#[derive(Debug, Clone, PartialEq)]
struct Order<'a> {
    /// Canonical index of the key each code stood for.
    positions: Vec<usize>,
    /// The traced log-probabilities (prior already subtracted when there is one).
    log_probabilities: &'a [f64],
    prior: Option<&'a [f64]>,
}

/// What one question's trace yields.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    pub raw: Dist,
    pub prior: Option<Dist>,
    pub rotated: Dist,
    /// The rotated scores in log space (canonical order; `-inf` for an impossible key), the
    /// logits temperatures scale.
    pub rotated_scores: Vec<f64>,
    /// The temperature the engine applied.
    pub temperature: f64,
    /// How many orders were averaged.
    pub rotations: usize,
    /// How many options the first order showed (fewer than the question has for a
    /// two-stage choice).
    pub shown: usize,
    /// The candidate mass of each order (the share of the full-vocabulary probability that
    /// fell on the codes).
    pub candidate_mass: Vec<f64>,
    /// The second order's raw and prior-corrected distributions, when there is one (for a
    /// noul with two rotations, the options reversed).
    pub second: Option<(Dist, Option<Dist>)>,
    /// Whether the engine asked this question as a two-stage choice.
    pub two_stage: bool,
    /// Each order's log-probabilities (prior subtracted) by canonical key, in the order the
    /// engine read them; `None` for a key the order did not show.
    pub by_order: Vec<Vec<Option<f64>>>,
}

impl Derived {
    /// The rotated scores at `temperature`: the calibrated column.
    pub fn calibrated(&self, keys: &[String], temperature: f64) -> anyhow::Result<Dist> {
        scaled(keys, &self.rotated_scores, temperature)
    }
}

/// Derives the side-by-side distributions of one question from its trace entry
/// (`evaluation_trace.questions[question_id]`). `keys` are the question's answer keys in
/// canonical order.
pub fn derive(keys: &[String], trace: &QuestionTrace) -> anyhow::Result<Derived> {
    ensure!(!trace.rotations.is_empty(), "the trace lists no rotations");
    let orders = trace
        .rotations
        .iter()
        .enumerate()
        .map(|(r, rotation)| order(keys, rotation).with_context(|| format!("rotation {r}")))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let first = &orders[0];
    let raw = scaled(keys, &spread(keys.len(), first, true), 1.0)?;
    let prior = match first.prior {
        Some(_) => Some(scaled(keys, &spread(keys.len(), first, false), 1.0)?),
        None => None,
    };
    let second = match orders.get(1) {
        Some(order) => Some((
            scaled(keys, &spread(keys.len(), order, true), 1.0)?,
            match order.prior {
                Some(_) => Some(scaled(keys, &spread(keys.len(), order, false), 1.0)?),
                None => None,
            },
        )),
        None => None,
    };

    // The engine's fold: sum each key's log-probability over the orders that showed it, then
    // divide by the number of orders.
    let mut sums = vec![0.0; keys.len()];
    let mut seen = vec![false; keys.len()];
    for order in &orders {
        for (&position, &value) in order.positions.iter().zip(order.log_probabilities) {
            sums[position] += value;
            seen[position] = true;
        }
    }
    let n = orders.len() as f64;
    let rotated_scores: Vec<f64> = sums
        .iter()
        .zip(&seen)
        .map(|(&sum, &seen)| if seen { sum / n } else { f64::NEG_INFINITY })
        .collect();
    let rotated = scaled(keys, &rotated_scores, 1.0)?;
    let by_order = orders
        .iter()
        .map(|order| {
            let mut row = vec![None; keys.len()];
            for (&position, &value) in order.positions.iter().zip(order.log_probabilities) {
                row[position] = Some(value);
            }
            row
        })
        .collect();
    Ok(Derived {
        by_order,
        raw,
        prior,
        rotated,
        rotated_scores,
        temperature: trace.temperature,
        rotations: orders.len(),
        shown: first.positions.len(),
        candidate_mass: trace.candidate_mass.clone(),
        second,
        two_stage: trace.stage_one.is_some(),
    })
}

/// The softmax of `scores / temperature`, keyed by `keys`.
pub fn scaled(keys: &[String], scores: &[f64], temperature: f64) -> anyhow::Result<Dist> {
    let probabilities = softmax_with_temperature(scores, temperature)
        .with_context(|| format!("softmax of {scores:?} at temperature {temperature}"))?;
    Ok(keys.iter().cloned().zip(probabilities).collect())
}

/// The log-space scores behind a distribution, for fitting or applying a temperature: the
/// softmax is unchanged by the constant `ln p` differs from the original scores by.
pub fn log_scores(dist: &Dist) -> Vec<f64> {
    dist.values().map(|p| p.ln()).collect()
}

/// One order's log-probabilities in canonical positions, with the prior added back (`raw`)
/// or as traced; `-inf` where the order did not show a key.
fn spread(len: usize, order: &Order<'_>, raw: bool) -> Vec<f64> {
    let mut scores = vec![f64::NEG_INFINITY; len];
    for (i, (&position, &value)) in order
        .positions
        .iter()
        .zip(order.log_probabilities)
        .enumerate()
    {
        let prior = match (order.prior, raw) {
            (Some(prior), true) => prior.get(i).copied().unwrap_or(0.0),
            _ => 0.0,
        };
        scores[position] = value + prior;
    }
    scores
}

fn order<'a>(keys: &[String], rotation: &'a RotationTrace) -> anyhow::Result<Order<'a>> {
    let positions = rotation
        .order
        .iter()
        .map(|key| {
            keys.iter()
                .position(|k| k == key)
                .with_context(|| format!("the order names {key:?}, not one of {keys:?}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    ensure!(
        rotation.log_probabilities.len() == positions.len(),
        "{} log-probabilities for an order of {} keys",
        rotation.log_probabilities.len(),
        positions.len()
    );
    if let Some(prior) = &rotation.prior {
        ensure!(
            prior.len() == positions.len(),
            "a prior of {} values for an order of {} keys",
            prior.len(),
            positions.len()
        );
    }
    Ok(Order {
        positions,
        log_probabilities: &rotation.log_probabilities,
        prior: rotation.prior.as_deref(),
    })
}

/// The index of the largest probability; the earliest key on a tie.
pub fn argmax(dist: &Dist) -> usize {
    let values: Vec<f64> = dist.values().copied().collect();
    ruling_calibration::argmax_or_first(&values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A question's trace as the engine writes it on the wire.
    fn traced(value: Value) -> QuestionTrace {
        serde_json::from_value(value).expect("a question trace in the wire shape")
    }

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|k| (*k).to_owned()).collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// log-softmax of three logits, written out so the test does not reuse the code it checks.
    fn ls(x: [f64; 3]) -> [f64; 3] {
        let lse = (x[0].exp() + x[1].exp() + x[2].exp()).ln();
        [x[0] - lse, x[1] - lse, x[2] - lse]
    }

    #[test]
    fn raw_prior_and_rotated_from_a_hand_made_trace() {
        // A 3-way choice asked in two cyclic orders with a prior. The engine reads raw
        // log-probabilities r0 (order a, b, c) and r1 (order b, c, a), subtracts the prior of
        // each code position and traces the result.
        let prior = ls([0.5, 0.0, -0.5]);
        let r0 = ls([2.0, 1.0, 0.0]);
        let r1 = ls([0.0, 1.0, 3.0]);
        let traced0: Vec<f64> = (0..3).map(|i| r0[i] - prior[i]).collect();
        let traced1: Vec<f64> = (0..3).map(|i| r1[i] - prior[i]).collect();
        let trace = traced(json!({
            "rotations": [
                {"order": ["a", "b", "c"], "log_probabilities": traced0, "prior": prior},
                {"order": ["b", "c", "a"], "log_probabilities": traced1, "prior": prior},
            ],
            "temperature": 2.0,
            "candidate_mass": [0.9, 0.8],
            "branch_tokens": [10, 10],
        }));
        let keys = keys(&["a", "b", "c"]);
        let d = derive(&keys, &trace).expect("a well-formed trace");

        // raw: the first order with the prior added back is r0 itself.
        for (i, key) in keys.iter().enumerate() {
            assert!(close(d.raw[key], r0[i].exp()), "raw {key}");
        }
        // prior-corrected: softmax of the traced first order.
        let z: f64 = traced0.iter().map(|v| v.exp()).sum();
        for (i, key) in keys.iter().enumerate() {
            assert!(close(d.prior.as_ref().unwrap()[key], traced0[i].exp() / z));
        }
        // rotated: per key, the mean of its two traced values. Order 1 shows b, c, a.
        let mean = [
            (traced0[0] + traced1[2]) / 2.0,
            (traced0[1] + traced1[0]) / 2.0,
            (traced0[2] + traced1[1]) / 2.0,
        ];
        let z: f64 = mean.iter().map(|v| v.exp()).sum();
        for (i, key) in keys.iter().enumerate() {
            assert!(close(d.rotated[key], mean[i].exp() / z), "rotated {key}");
            assert!(close(d.rotated_scores[i], mean[i]));
        }
        // calibrated at the traced temperature: the mean halved before the softmax.
        let calibrated = d.calibrated(&keys, d.temperature).unwrap();
        let z: f64 = mean.iter().map(|v| (v / 2.0).exp()).sum();
        assert!(close(calibrated["b"], (mean[1] / 2.0).exp() / z));
        assert_eq!(d.rotations, 2);
        assert_eq!(d.candidate_mass, vec![0.9, 0.8]);
        assert!(!d.two_stage);
        // The second order, mapped back to canonical keys: r1 shows b first.
        let (second_raw, second_prior) = d.second.expect("two orders");
        assert!(close(second_raw["b"], r1[0].exp()));
        assert!(close(second_raw["a"], r1[2].exp()));
        assert!(second_prior.is_some());
    }

    #[test]
    fn without_a_prior_raw_is_the_first_order_and_prior_is_absent() {
        let lse = (0.3f64.exp() + (-0.4f64).exp()).ln();
        let two = [0.3 - lse, -0.4 - lse];
        let trace = traced(json!({
            "rotations": [{"order": ["yes", "no"], "log_probabilities": two, "prior": null}],
            "temperature": 1.0,
        }));
        let keys = keys(&["yes", "no"]);
        let d = derive(&keys, &trace).unwrap();
        assert!(d.prior.is_none());
        assert!(close(d.raw["yes"], two[0].exp()));
        assert_eq!(d.raw, d.rotated, "one order, no prior: rotated is raw");
        assert!(d.second.is_none());
    }

    #[test]
    fn a_two_stage_choice_gives_dropped_options_zero() {
        // Four options; the final pass showed only c and a.
        let lse = (1.0f64.exp() + 0.0f64.exp()).ln();
        let trace = traced(json!({
            "rotations": [{"order": ["c", "a"], "log_probabilities": [1.0 - lse, -lse], "prior": null}],
            "temperature": 1.0,
            "stage_one": [{"key": "c", "log_odds_yes": 2.0}, {"key": "b", "log_odds_yes": null}],
        }));
        let keys = keys(&["a", "b", "c", "d"]);
        let d = derive(&keys, &trace).unwrap();
        assert!(d.two_stage);
        assert!(close(d.raw["b"], 0.0) && close(d.raw["d"], 0.0));
        assert!(close(d.rotated["c"], (1.0 - lse).exp()));
        assert!(d.rotated_scores[1].is_infinite());
        assert_eq!(argmax(&d.rotated), 2);
    }

    #[test]
    fn malformed_traces_are_named() {
        let keys = keys(&["a", "b"]);
        let err = derive(&keys, &traced(json!({"rotations": [], "temperature": 1.0}))).unwrap_err();
        assert!(format!("{err:#}").contains("rotations"), "{err:#}");
        let err = derive(
            &keys,
            &traced(
                json!({"rotations": [{"order": ["a", "z"], "log_probabilities": [0.0, 0.0]}], "temperature": 1.0}),
            ),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("\"z\""), "{err:#}");
        let err = derive(
            &keys,
            &traced(
                json!({"rotations": [{"order": ["a", "b"], "log_probabilities": [0.0]}], "temperature": 1.0}),
            ),
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("1 log-probabilities"),
            "{err:#}"
        );
    }
}
