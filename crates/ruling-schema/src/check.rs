//! The invariants every System One response must hold, checkable by engines and tests alike.
//!
//! Clients feed these numbers straight into control flow, so a response that breaks them is a
//! bug in ruling, never the client's problem: probabilities are finite and in `[0, 1]` and sum
//! to 1 within [`SUM_TOLERANCE`], a chosen key is one of the options, a score lies within its
//! levels, and (against the request) every question gets one answer of its own type.

use indexmap::IndexMap;

use crate::valid::{QuestionKind, ValidRequest};
use crate::wire::{Answer, SystemOneResponse};

/// How far the probabilities of one answer may sum from 1.
pub const SUM_TOLERANCE: f64 = 1e-6;

/// A broken response invariant, naming the answer at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InvariantError {
    #[error("answer {id:?}: {field} is {value}, not a finite number in [0, 1]")]
    NotAProbability {
        id: String,
        field: String,
        value: f64,
    },
    #[error("answer {id:?}: probabilities sum to {sum}, not 1 within {SUM_TOLERANCE:e}")]
    BadSum { id: String, sum: f64 },
    #[error("answer {id:?}: has no probabilities")]
    NoOptions { id: String },
    #[error("answer {id:?}: chose {choice:?}, which is not one of the options")]
    UnknownChoice { id: String, choice: String },
    #[error("answer {id:?}: score {score} is outside [0, {max}]")]
    ScoreOutOfRange { id: String, score: f64, max: usize },
    #[error(
        "answer {id:?}: score keys must be \"0\", \"1\", ... in order in both legend and probabilities"
    )]
    ScoreKeys { id: String },
    #[error("answer {id:?}: box {field} is {value}, not a finite number")]
    BoxNotFinite {
        id: String,
        field: &'static str,
        value: f64,
    },
    #[error("question {id:?} has no answer")]
    Unanswered { id: String },
    #[error("answer {id:?} answers no question of the request")]
    UnaskedQuestion { id: String },
    #[error("answer {id:?} is a {got} answer to a {expected} question")]
    WrongType {
        id: String,
        expected: &'static str,
        got: &'static str,
    },
    #[error("answer {id:?}: probabilities are not keyed by the question's options in order")]
    OptionMismatch { id: String },
    #[error("answer {id:?}: has {got} levels, the question has {expected}")]
    LevelMismatch {
        id: String,
        expected: usize,
        got: usize,
    },
}

fn probability(id: &str, field: &str, value: f64) -> Result<(), InvariantError> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(InvariantError::NotAProbability {
            id: id.to_owned(),
            field: field.to_owned(),
            value,
        })
    }
}

fn distribution(id: &str, probabilities: &IndexMap<String, f64>) -> Result<(), InvariantError> {
    if probabilities.is_empty() {
        return Err(InvariantError::NoOptions { id: id.to_owned() });
    }
    for (key, &p) in probabilities {
        probability(id, &format!("probabilities[{key:?}]"), p)?;
    }
    let sum: f64 = probabilities.values().sum();
    if (sum - 1.0).abs() > SUM_TOLERANCE {
        return Err(InvariantError::BadSum {
            id: id.to_owned(),
            sum,
        });
    }
    Ok(())
}

fn is_index_keyed<V>(map: &IndexMap<String, V>) -> bool {
    map.keys().enumerate().all(|(i, k)| *k == i.to_string())
}

impl Answer {
    /// Checks the invariants that hold for this answer on its own; `id` names it in errors.
    pub fn check(&self, id: &str) -> Result<(), InvariantError> {
        match self {
            Self::Noul { noul } => probability(id, "noul", *noul),
            Self::Choice {
                choice,
                confidence,
                probabilities,
            } => {
                probability(id, "confidence", *confidence)?;
                distribution(id, probabilities)?;
                if !probabilities.contains_key(choice) {
                    return Err(InvariantError::UnknownChoice {
                        id: id.to_owned(),
                        choice: choice.clone(),
                    });
                }
                Ok(())
            }
            Self::Score {
                score,
                confidence,
                legend,
                probabilities,
            } => {
                probability(id, "confidence", *confidence)?;
                distribution(id, probabilities)?;
                if legend.len() != probabilities.len()
                    || !is_index_keyed(legend)
                    || !is_index_keyed(probabilities)
                {
                    return Err(InvariantError::ScoreKeys { id: id.to_owned() });
                }
                let max = probabilities.len() - 1;
                // `max` is at most a few levels, so the conversion is exact.
                if !(score.is_finite() && (0.0..=max as f64).contains(score)) {
                    return Err(InvariantError::ScoreOutOfRange {
                        id: id.to_owned(),
                        score: *score,
                        max,
                    });
                }
                Ok(())
            }
            Self::Box { region, confidence } => {
                for (field, value) in [
                    ("top", region.top),
                    ("bottom", region.bottom),
                    ("left", region.left),
                    ("right", region.right),
                ] {
                    if !value.is_finite() {
                        return Err(InvariantError::BoxNotFinite {
                            id: id.to_owned(),
                            field,
                            value,
                        });
                    }
                }
                match confidence {
                    Some(c) => probability(id, "confidence", *c),
                    None => Ok(()),
                }
            }
        }
    }
}

impl SystemOneResponse {
    /// Checks every answer's own invariants.
    pub fn check(&self) -> Result<(), InvariantError> {
        self.answers
            .iter()
            .try_for_each(|(id, answer)| answer.check(id))
    }

    /// Checks [`Self::check`] and that the answers match `request`: one per question, of the
    /// question's type, with its options (in option order) or its number of levels.
    pub fn check_against(&self, request: &ValidRequest) -> Result<(), InvariantError> {
        self.check()?;
        for id in self.answers.keys() {
            if request.question(id).is_none() {
                return Err(InvariantError::UnaskedQuestion { id: id.clone() });
            }
        }
        for question in request.questions() {
            let id = question.id();
            let Some(answer) = self.answers.get(id) else {
                return Err(InvariantError::Unanswered { id: id.to_owned() });
            };
            if answer.type_name() != question.type_name() {
                return Err(InvariantError::WrongType {
                    id: id.to_owned(),
                    expected: question.type_name(),
                    got: answer.type_name(),
                });
            }
            match (question.kind(), answer) {
                (QuestionKind::Choice { options, .. }, Answer::Choice { probabilities, .. }) => {
                    let same = options.len() == probabilities.len()
                        && options
                            .iter()
                            .zip(probabilities.keys())
                            .all(|(o, k)| o.key == *k);
                    if !same {
                        return Err(InvariantError::OptionMismatch { id: id.to_owned() });
                    }
                }
                (QuestionKind::Score { levels, .. }, Answer::Score { probabilities, .. })
                    if levels.len() != probabilities.len() =>
                {
                    return Err(InvariantError::LevelMismatch {
                        id: id.to_owned(),
                        expected: levels.len(),
                        got: probabilities.len(),
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }
}
