//! The typed answer to one question from its combined log-space scores and a temperature.
//!
//! Every engine ends the same way: per option key one score in log space (rotations already
//! averaged, the prior already subtracted), one temperature per answer type. Writing the step
//! once keeps the answers of the decoder and the encoder the same function of their scores,
//! which is what lets the evaluator recompute either engine's answer from its trace.

use indexmap::IndexMap;
use ruling_calibration::{
    argmax_or_first, choice_confidence, score_confidence, softmax_with_temperature,
};
use ruling_schema::{Answer, QuestionKind, ValidQuestion};

use crate::engine::EngineError;

/// The answer to `question` from `scores`, one per key of `keys` in that order, in log space
/// (`-inf` for a key that cannot be the answer), softmaxed at `temperature`.
///
/// `keys` may come in any order (the encoder normalises in its packing order); the answer is
/// laid out in the question's own key order, and everything after the softmax (the chosen key,
/// the confidence, the expected level) is computed in that order, so the same scores in
/// another order give the same answer bit for bit. A key of the question that `keys` lacks
/// gets probability zero.
///
/// A noul answers P(`"yes"`); a choice its most probable key (the earliest on a tie) with
/// [`choice_confidence`]; a score the expected level index with [`score_confidence`] and the
/// legend of its levels. A box question is [`EngineError::Unsupported`].
///
/// # Panics
///
/// When `keys` and `scores` differ in length: the caller paired them wrong.
pub fn answer(
    question: &ValidQuestion,
    keys: &[String],
    scores: &[f64],
    temperature: f64,
) -> Result<Answer, EngineError> {
    assert_eq!(
        keys.len(),
        scores.len(),
        "question {:?}: one score per key",
        question.id()
    );
    if let QuestionKind::Box { .. } = question.kind() {
        return Err(EngineError::Unsupported(
            "box questions need a vision model".into(),
        ));
    }
    let given = softmax_with_temperature(scores, temperature)?;
    let canonical = canonical_keys(question.kind());
    let probs: Vec<f64> = canonical
        .iter()
        .map(|key| keys.iter().position(|k| k == key).map_or(0.0, |i| given[i]))
        .collect();
    let distribution: IndexMap<String, f64> = canonical
        .iter()
        .cloned()
        .zip(probs.iter().copied())
        .collect();
    Ok(match question.kind() {
        QuestionKind::Noul { .. } => Answer::Noul {
            noul: distribution.get("yes").copied().unwrap_or(0.0),
        },
        QuestionKind::Choice { .. } => Answer::Choice {
            choice: canonical[argmax_or_first(&probs)].clone(),
            confidence: choice_confidence(&probs)?,
            probabilities: distribution,
        },
        QuestionKind::Score { levels, .. } => Answer::Score {
            score: probs.iter().enumerate().map(|(i, p)| i as f64 * p).sum(),
            confidence: score_confidence(&probs)?,
            legend: levels
                .iter()
                .enumerate()
                .map(|(i, l)| (i.to_string(), l.render()))
                .collect(),
            probabilities: distribution,
        },
        QuestionKind::Box { .. } => unreachable!("refused above"),
    })
}

/// A question's answer keys in its own order: `yes`, `no`; the option keys; the level indices.
fn canonical_keys(kind: &QuestionKind) -> Vec<String> {
    match kind {
        QuestionKind::Noul { .. } => vec!["yes".to_owned(), "no".to_owned()],
        QuestionKind::Choice { options, .. } => options.iter().map(|o| o.key.clone()).collect(),
        QuestionKind::Score { levels, .. } => (0..levels.len()).map(|i| i.to_string()).collect(),
        QuestionKind::Box { .. } => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use ruling_schema::{Capabilities, parse_request};

    use super::*;

    fn question(body: &str) -> ValidQuestion {
        let request = format!(r#"{{"model": "m", "state": "s", "questions": {{"q": {body}}}}}"#);
        let request =
            parse_request(request.as_bytes(), &Capabilities::vision()).expect("a valid request");
        request.questions()[0].clone()
    }

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|k| (*k).to_owned()).collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn a_noul_answers_p_yes_whatever_the_key_order() {
        let noul = question(r#"{"type": "noul", "instructions": "Is it?"}"#);
        let scores = [0.5f64.ln(), 0.25f64.ln()];
        let Answer::Noul { noul: yes } =
            answer(&noul, &keys(&["no", "yes"]), &scores, 1.0).unwrap()
        else {
            panic!("a noul answer");
        };
        assert!(close(yes, 1.0 / 3.0), "{yes}");
    }

    #[test]
    fn a_choice_takes_the_earliest_of_tied_keys_and_gives_impossible_ones_zero() {
        let choice = question(
            r#"{"type": "choice", "instructions": "Which?", "criteria": {"a": null, "b": null, "c": null}}"#,
        );
        let scores = [-1.0, -1.0, f64::NEG_INFINITY];
        let Answer::Choice {
            choice: chosen,
            confidence,
            probabilities,
        } = answer(&choice, &keys(&["a", "b", "c"]), &scores, 2.0).unwrap()
        else {
            panic!("a choice answer");
        };
        assert_eq!(chosen, "a");
        // (0.5 - 1/3) / (1 - 1/3): the spec's confidence, 0 at chance.
        assert!(close(confidence, 0.25));
        assert!(close(probabilities["c"], 0.0));
        assert_eq!(probabilities.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    }

    #[test]
    fn keys_in_another_order_give_the_same_answer_in_the_question_order() {
        let choice = question(
            r#"{"type": "choice", "instructions": "Which?", "criteria": {"a": null, "b": null, "c": null}}"#,
        );
        let forward = answer(&choice, &keys(&["a", "b", "c"]), &[-0.3, -1.7, -2.2], 1.0).unwrap();
        let shuffled = answer(&choice, &keys(&["c", "a", "b"]), &[-2.2, -0.3, -1.7], 1.0).unwrap();
        let (
            Answer::Choice {
                probabilities: p, ..
            },
            Answer::Choice {
                probabilities: q, ..
            },
        ) = (&forward, &shuffled)
        else {
            panic!("choice answers");
        };
        assert_eq!(q.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        for (key, value) in p {
            assert!(close(*value, q[key]), "{key}");
        }
    }

    #[test]
    fn a_score_is_the_expected_level_at_the_temperature() {
        let score = question(
            r#"{"type": "score", "instructions": "How?", "criteria": ["low", "mid", "high"]}"#,
        );
        // At temperature 2 these become probabilities in the ratio 1 : 2 : 1.
        let scores = [0.0, 2.0 * 2f64.ln(), 0.0];
        let Answer::Score {
            score: level,
            legend,
            probabilities,
            ..
        } = answer(&score, &keys(&["0", "1", "2"]), &scores, 2.0).unwrap()
        else {
            panic!("a score answer");
        };
        assert!(close(probabilities["1"], 0.5));
        assert!(close(level, 1.0));
        assert_eq!(legend["2"], "high");
    }

    #[test]
    fn a_box_is_unsupported() {
        let region = question(r#"{"type": "box", "instructions": "Where?"}"#);
        assert!(matches!(
            answer(&region, &[], &[], 1.0),
            Err(EngineError::Unsupported(_))
        ));
    }
}
