//! The one wording of natural-language-inference questions, shared by ChaosNLI, CB and RTE so
//! that their measurements compare the same question.

use ruling_schema::Question;

use super::choice;

/// The question id of every NLI record.
pub(super) const QUESTION_ID: &str = "relation";

const THREE_WAY: &str = "Read the premise and the hypothesis. Does the premise entail the \
                         hypothesis, contradict it, or neither?";

/// The three relations with their descriptions, in the order ChaosNLI counts votes (E, N, C).
pub(super) const RELATIONS: [(&str, &str); 3] = [
    (
        "entailment",
        "if the premise is true, the hypothesis is true too",
    ),
    (
        "neutral",
        "the premise does not settle whether the hypothesis is true",
    ),
    (
        "contradiction",
        "if the premise is true, the hypothesis is false",
    ),
];

const TWO_WAY: &str =
    "Read the premise and the hypothesis. Does the premise entail the hypothesis?";

pub(super) const TWO_WAY_RELATIONS: [(&str, &str); 2] = [
    (
        "entailment",
        "if the premise is true, the hypothesis is true too",
    ),
    (
        "not_entailment",
        "the premise does not establish the hypothesis: it may be false or undetermined",
    ),
];

pub(super) fn three_way() -> Question {
    choice(THREE_WAY, RELATIONS.map(|(k, d)| (k, Some(d))))
}

pub(super) fn two_way() -> Question {
    choice(TWO_WAY, TWO_WAY_RELATIONS.map(|(k, d)| (k, Some(d))))
}

/// The state of an NLI record.
pub(super) fn state(premise: &str, hypothesis: &str) -> String {
    format!(
        "Premise: {}\nHypothesis: {}",
        premise.trim(),
        hypothesis.trim()
    )
}
