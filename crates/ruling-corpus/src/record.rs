//! The typed-question record of DESIGN.md ("Training"): one state, the System One questions
//! asked about it, what each answer should be, and how much the record counts.
//!
//! ```json
//! {"id": "boolq:4", "family": "boolq", "state": "...",
//!  "questions": {"answer": {"type": "noul", "instructions": "Is ...?"}},
//!  "labels": {"answer": true},
//!  "references": {"answer": {"target": {"yes": 0.8, "no": 0.2}}},
//!  "weight": 1.0}
//! ```
//!
//! A label is what a hard metric compares against: `true`/`false` for a noul, the option key
//! for a choice, the level index for a score. A `target` reference is a distribution over the
//! question's *answer keys*, the same keys a System One answer reports probabilities under:
//! `"yes"`/`"no"` for a noul, the option keys for a choice, `"0"`, `"1"`, ... for a score.
//! Where a dataset records how many people chose each answer, that share is the target; it
//! is the only ground truth for calibration that does not come from a model.

use indexmap::IndexMap;
use ruling_schema::{
    Capabilities, Question, SUM_TOLERANCE, State, SystemOneRequest, ValidRequest, ValidationErrors,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// A distribution over a question's answer keys.
pub type Target = IndexMap<String, f64>;

/// The answer keys of a noul, in canonical order (as `ruling-backend` shows them).
pub const NOUL_KEYS: [&str; 2] = ["yes", "no"];

/// One state with its questions, labels and reference distributions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// A stable id: the dataset name and where the row sits in its source
    /// (`"boolq:4"`, `"clinc150:val:12"`). Records made elsewhere may have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// What kind of data this is, for grouping in training and reports (the dataset name for
    /// the readers of this crate).
    pub family: String,
    pub state: State,
    /// Questions keyed by id, in the order they are asked.
    pub questions: IndexMap<String, Question>,
    /// The correct answer of each labelled question; a question may have none.
    #[serde(default)]
    pub labels: IndexMap<String, Label>,
    /// Reference answers per question, such as a soft `target`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub references: IndexMap<String, Reference>,
    /// How much this record counts relative to the others (default 1).
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// The correct answer of one question.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Label {
    /// A noul's answer: `true` is yes.
    Yes(bool),
    /// A score's level index, lowest level 0.
    Level(usize),
    /// A choice's option key.
    Key(String),
}

impl Label {
    /// The answer key this label names: `"yes"`/`"no"`, the level index as text, or the
    /// option key.
    pub fn answer_key(&self) -> String {
        match self {
            Self::Yes(true) => NOUL_KEYS[0].to_owned(),
            Self::Yes(false) => NOUL_KEYS[1].to_owned(),
            Self::Level(level) => level.to_string(),
            Self::Key(key) => key.clone(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Yes(_) => "a boolean",
            Self::Level(_) => "a level index",
            Self::Key(_) => "an option key",
        }
    }
}

/// Reference answers for one question. Fields other than `target` are kept as they were read,
/// so a record written by another tool round-trips unchanged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// The distribution the answer should have (for instance the share of human votes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Reference {
    /// A reference holding only a soft target.
    pub fn target(target: Target) -> Self {
        Self {
            target: Some(target),
            other: Map::new(),
        }
    }
}

/// Why a record is not a usable System One example.
#[derive(Debug, Error)]
pub enum RecordError {
    /// The state and questions do not make a valid System One request.
    #[error("record {id}: not a valid System One request: {source}")]
    Request {
        id: String,
        #[source]
        source: ValidationErrors,
    },
    /// A label or reference names a question the record does not ask.
    #[error("record {id}: {field} names question {question:?}, which the record does not ask")]
    UnknownQuestion {
        id: String,
        field: &'static str,
        question: String,
    },
    /// A label does not fit its question's type or options.
    #[error("record {id}: label of question {question:?} is {label:?}, but {expected}")]
    BadLabel {
        id: String,
        question: String,
        label: Label,
        expected: String,
    },
    /// A target names an answer key the question does not have.
    #[error("record {id}: target of question {question:?} names {key:?}, not one of {keys:?}")]
    UnknownTargetKey {
        id: String,
        question: String,
        key: String,
        keys: Vec<String>,
    },
    /// A target is not a probability distribution.
    #[error(
        "record {id}: target of question {question:?} must hold probabilities in [0, 1] \
         summing to 1 (within {SUM_TOLERANCE}); {problem}"
    )]
    BadTarget {
        id: String,
        question: String,
        problem: String,
    },
    /// The weight is negative or not finite.
    #[error("record {id}: weight must be a finite number at least 0, got {weight}")]
    BadWeight { id: String, weight: f64 },
}

/// The answer keys of `question` in canonical order: `"yes"`, `"no"` for a noul, the option
/// keys for a choice, `"0"` up to `"levels - 1"` for a score, none for a box.
pub fn answer_keys(question: &Question) -> Vec<String> {
    match question {
        Question::Noul { .. } => NOUL_KEYS.iter().map(|k| (*k).to_owned()).collect(),
        Question::Choice { criteria, .. } => criteria.keys().cloned().collect(),
        Question::Score { criteria, .. } => (0..criteria.len()).map(|i| i.to_string()).collect(),
        Question::Box { .. } => Vec::new(),
    }
}

impl Record {
    /// The record's id, or `"(no id)"` for messages.
    pub fn display_id(&self) -> &str {
        self.id.as_deref().unwrap_or("(no id)")
    }

    /// The System One request that asks this record's questions of `model`.
    pub fn to_request(&self, model: &str) -> SystemOneRequest {
        SystemOneRequest {
            model: model.to_owned(),
            state: self.state.clone(),
            questions: self.questions.clone(),
            assets: None,
            trace: None,
        }
    }

    /// Checks that the record is a valid System One request under `caps`, that every label
    /// fits its question (a boolean for a noul, an option key for a choice, a level index
    /// below the level count for a score), that every target is a distribution over the
    /// question's answer keys (keys left out count as 0) and that the weight is finite and
    /// not negative. Returns the validated request.
    pub fn validate(&self, caps: &Capabilities) -> Result<ValidRequest, RecordError> {
        let id = || self.display_id().to_owned();
        let valid = self
            .to_request("ruling-corpus")
            .validate(caps)
            .map_err(|source| RecordError::Request { id: id(), source })?;
        if !self.weight.is_finite() || self.weight < 0.0 {
            return Err(RecordError::BadWeight {
                id: id(),
                weight: self.weight,
            });
        }
        for (question_id, label) in &self.labels {
            let question =
                self.questions
                    .get(question_id)
                    .ok_or_else(|| RecordError::UnknownQuestion {
                        id: id(),
                        field: "labels",
                        question: question_id.clone(),
                    })?;
            let expected = match (question, label) {
                (Question::Noul { .. }, Label::Yes(_)) => None,
                (Question::Noul { .. }, _) => Some("a noul takes true or false".to_owned()),
                (Question::Choice { criteria, .. }, Label::Key(key))
                    if criteria.contains_key(key) =>
                {
                    None
                }
                (Question::Choice { criteria, .. }, _) => Some(format!(
                    "a choice takes one of its {} option keys",
                    criteria.len()
                )),
                (Question::Score { criteria, .. }, Label::Level(level))
                    if *level < criteria.len() =>
                {
                    None
                }
                (Question::Score { criteria, .. }, _) => Some(format!(
                    "a score of {} levels takes a level index 0 to {}",
                    criteria.len(),
                    criteria.len().saturating_sub(1)
                )),
                (Question::Box { .. }, _) => Some(format!(
                    "a box question takes no label of this kind ({})",
                    label.kind()
                )),
            };
            if let Some(expected) = expected {
                return Err(RecordError::BadLabel {
                    id: id(),
                    question: question_id.clone(),
                    label: label.clone(),
                    expected,
                });
            }
        }
        for (question_id, reference) in &self.references {
            let question =
                self.questions
                    .get(question_id)
                    .ok_or_else(|| RecordError::UnknownQuestion {
                        id: id(),
                        field: "references",
                        question: question_id.clone(),
                    })?;
            if let Some(target) = &reference.target {
                check_target(self.display_id(), question_id, question, target)?;
            }
        }
        Ok(valid)
    }

    /// The soft target of a question, if the record has one.
    pub fn soft_target(&self, question_id: &str) -> Option<&Target> {
        self.references.get(question_id)?.target.as_ref()
    }

    /// The distribution a question's answer should have, over its answer keys in canonical
    /// order: the soft target where there is one (keys it leaves out get 0), otherwise one-hot
    /// on the label. `None` when the question is not asked or has neither.
    pub fn target_distribution(&self, question_id: &str) -> Option<Target> {
        let keys = answer_keys(self.questions.get(question_id)?);
        if let Some(target) = self.soft_target(question_id) {
            return Some(
                keys.into_iter()
                    .map(|k| {
                        let p = target.get(&k).copied().unwrap_or(0.0);
                        (k, p)
                    })
                    .collect(),
            );
        }
        let gold = self.labels.get(question_id)?.answer_key();
        Some(
            keys.into_iter()
                .map(|k| {
                    let p = if k == gold { 1.0 } else { 0.0 };
                    (k, p)
                })
                .collect(),
        )
    }
}

fn check_target(
    id: &str,
    question_id: &str,
    question: &Question,
    target: &Target,
) -> Result<(), RecordError> {
    let keys = answer_keys(question);
    let bad = |problem: String| RecordError::BadTarget {
        id: id.to_owned(),
        question: question_id.to_owned(),
        problem,
    };
    if target.is_empty() {
        return Err(bad("it is empty".to_owned()));
    }
    for (key, &p) in target {
        if !keys.contains(key) {
            return Err(RecordError::UnknownTargetKey {
                id: id.to_owned(),
                question: question_id.to_owned(),
                key: key.clone(),
                keys,
            });
        }
        if !(0.0..=1.0).contains(&p) {
            return Err(bad(format!("{key:?} has {p}")));
        }
    }
    let sum: f64 = target.values().sum();
    if (sum - 1.0).abs() > SUM_TOLERANCE {
        return Err(bad(format!("they sum to {sum}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(value: Value) -> Record {
        serde_json::from_value(value).expect("a record")
    }

    fn choice() -> Value {
        json!({"type": "choice", "instructions": "Which?", "criteria": {"a": null, "b": "the other"}})
    }

    #[test]
    fn labels_read_as_their_kind() {
        let r = record(json!({
            "family": "f", "state": "s",
            "questions": {
                "n": {"type": "noul", "instructions": "Is it?"},
                "c": choice(),
                "s": {"type": "score", "instructions": "How?", "criteria": ["low", "mid", "high"]},
            },
            "labels": {"n": false, "c": "b", "s": 2},
        }));
        assert_eq!(r.labels["n"], Label::Yes(false));
        assert_eq!(r.labels["c"], Label::Key("b".into()));
        assert_eq!(r.labels["s"], Label::Level(2));
        assert!(
            (r.weight - 1.0).abs() < f64::EPSILON,
            "weight defaults to 1"
        );
        r.validate(&Capabilities::default()).expect("valid");
        assert_eq!(
            r.target_distribution("s").expect("labelled"),
            [("0", 0.0), ("1", 0.0), ("2", 1.0)]
                .into_iter()
                .map(|(k, p)| (k.to_owned(), p))
                .collect::<Target>()
        );
        let noul = r.target_distribution("n").expect("labelled");
        assert!(
            noul["no"] > 0.5 && noul["yes"] < 0.5,
            "one-hot on no: {noul:?}"
        );
    }

    #[test]
    fn round_trips_with_unknown_reference_fields() {
        let value = json!({
            "id": "x:1", "family": "f", "state": {"a": [1, 2]},
            "questions": {"c": choice()},
            "labels": {"c": "a"},
            "references": {"c": {"target": {"a": 0.25, "b": 0.75}, "rationale": "votes"}},
            "weight": 0.5,
        });
        let r = record(value.clone());
        assert_eq!(r.references["c"].other["rationale"], json!("votes"));
        assert_eq!(serde_json::to_value(&r).expect("serialises"), value);
        r.validate(&Capabilities::default()).expect("valid");
    }

    #[test]
    fn refuses_labels_and_targets_that_do_not_fit() {
        let base = json!({"id": "x:2", "family": "f", "state": "s", "questions": {"c": choice()}});
        let with = |field: &str, v: Value| {
            let mut b = base.clone();
            b[field] = v;
            record(b).validate(&Capabilities::default())
        };
        let err = with("labels", json!({"c": "z"})).expect_err("not an option");
        assert!(matches!(err, RecordError::BadLabel { .. }), "{err}");
        assert!(err.to_string().contains("x:2"), "{err}");
        let err = with("labels", json!({"q": "a"})).expect_err("no such question");
        assert!(matches!(err, RecordError::UnknownQuestion { .. }), "{err}");
        let err = with("references", json!({"c": {"target": {"a": 0.5, "z": 0.5}}}))
            .expect_err("unknown key");
        assert!(
            matches!(err, RecordError::UnknownTargetKey { ref id, .. } if id == "x:2"),
            "{err}"
        );
        let err = with("references", json!({"c": {"target": {"a": 0.5, "b": 0.6}}}))
            .expect_err("sums to 1.1");
        assert!(matches!(err, RecordError::BadTarget { .. }), "{err}");
        let err = with("weight", json!(-1.0)).expect_err("negative weight");
        assert!(matches!(err, RecordError::BadWeight { .. }), "{err}");
        let mut one_option = base.clone();
        one_option["questions"]["c"]["criteria"] = json!({"a": null});
        let err = record(one_option)
            .validate(&Capabilities::default())
            .expect_err("one option");
        assert!(
            err.to_string()
                .contains("a choice needs at least two options"),
            "{err}"
        );
    }
}
