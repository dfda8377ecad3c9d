//! The evaluation trace: what an engine computed to answer a request, returned when the
//! request sets `"trace": true`.
//!
//! Every engine writes the same shape, so the evaluator derives its columns (raw,
//! prior-corrected, rotated, calibrated) the same way whichever engine answered. Per question
//! it holds each order the options were shown in with the code log-probabilities read for it
//! (after the content-free prior, when the engine subtracts one), and the temperature
//! applied; an engine's answer is the softmax of the per-key mean over those orders divided by
//! that temperature.
//!
//! Log-probabilities can be `-inf`, which JSON cannot write: they travel as `null` and read
//! back as `-inf` (`non_finite.rs`).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::non_finite;

/// Which kind of engine answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// A decoder read at the answer position: a shared prefix, one branch per question and
    /// order.
    Decoder,
    /// A decision encoder: the state and every question packed into one sequence.
    Encoder,
}

/// What the engine computed for one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvaluationTrace {
    /// The kind of engine that answered.
    pub engine: EngineKind,
    /// Per question id, in the order the questions were asked.
    pub questions: IndexMap<String, QuestionTrace>,
    /// Tokens of the shared prefix (decoder) or of the packed sequence (encoder).
    pub prefix_tokens: usize,
    /// Decoder only: whether the prefix came from the cross-request cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cached: Option<bool>,
}

/// What the engine computed for one question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionTrace {
    /// Every order the options were shown in, the options as given first. The encoder writes
    /// exactly one, in the question's own key order, without a prior.
    pub rotations: Vec<RotationTrace>,
    /// The temperature applied to the mean of the rotations before the softmax.
    pub temperature: f64,
    /// Per rotation, the share of the full-vocabulary probability that fell on the answer
    /// codes (decoder only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_mass: Vec<f64>,
    /// Per rotation, the tokens of its branch (decoder only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branch_tokens: Vec<usize>,
    /// Per rotation, the tokens of the question's own prefix when it was asked question-first
    /// (its text and options encoded as the prefix, the state in the branch; decoder only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub question_prefix_tokens: Vec<usize>,
    /// For a choice asked in two stages (more options than one pass shows): every option's
    /// stage-one strength, strongest first. The rotations are then those of the final pass,
    /// which shows only the strongest few.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_one: Option<Vec<StageOneScore>>,
}

/// One order the options were shown in, and what was read for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RotationTrace {
    /// The option keys in the order they were shown (the key each answer code stood for).
    pub order: Vec<String>,
    /// The log-probability of each shown key, in `order`, with the prior subtracted when the
    /// engine subtracts one (`null` stands for `-inf`).
    #[serde(with = "non_finite::seq")]
    #[schemars(schema_with = "non_finite::seq::schema")]
    pub log_probabilities: Vec<f64>,
    /// The content-free log-prior subtracted at each code position, or `null` when the engine
    /// subtracts none (an entry's `null` stands for `-inf`).
    #[serde(default, with = "non_finite::optional_seq")]
    #[schemars(schema_with = "non_finite::optional_seq::schema")]
    pub prior: Option<Vec<f64>>,
    /// Keys whose log-probability the model's host could not report (a remote server that
    /// gives only its top log-probabilities may leave an answer code out): they count as
    /// impossible in this order, and are listed here rather than given an invented value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

/// One option's stage-one strength in a two-stage choice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageOneScore {
    /// The option key.
    pub key: String,
    /// Log P(yes) - log P(no) when the option was asked about alone (`null` stands for
    /// `-inf`).
    #[serde(with = "non_finite::scalar")]
    #[schemars(schema_with = "non_finite::scalar::schema")]
    pub log_odds_yes: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn traced() -> EvaluationTrace {
        EvaluationTrace {
            engine: EngineKind::Decoder,
            questions: [(
                "route".to_owned(),
                QuestionTrace {
                    rotations: vec![RotationTrace {
                        order: vec!["b".into(), "a".into()],
                        log_probabilities: vec![-0.25, f64::NEG_INFINITY],
                        prior: Some(vec![f64::NEG_INFINITY, -1.5]),
                        unread: Vec::new(),
                    }],
                    temperature: 1.5,
                    candidate_mass: vec![0.75],
                    branch_tokens: vec![12],
                    question_prefix_tokens: Vec::new(),
                    stage_one: Some(vec![
                        StageOneScore {
                            key: "b".into(),
                            log_odds_yes: 2.0,
                        },
                        StageOneScore {
                            key: "a".into(),
                            log_odds_yes: f64::NEG_INFINITY,
                        },
                    ]),
                },
            )]
            .into_iter()
            .collect(),
            prefix_tokens: 40,
            prefix_cached: Some(false),
        }
    }

    #[test]
    fn minus_infinity_travels_as_null_and_comes_back() {
        let trace = traced();
        let value = serde_json::to_value(&trace).unwrap();
        assert_eq!(
            value,
            json!({
                "engine": "decoder",
                "questions": {"route": {
                    "rotations": [{"order": ["b", "a"], "log_probabilities": [-0.25, null], "prior": [null, -1.5]}],
                    "temperature": 1.5,
                    "candidate_mass": [0.75],
                    "branch_tokens": [12],
                    "stage_one": [{"key": "b", "log_odds_yes": 2.0}, {"key": "a", "log_odds_yes": null}],
                }},
                "prefix_tokens": 40,
                "prefix_cached": false,
            })
        );
        let text = serde_json::to_string(&trace).unwrap();
        let back: EvaluationTrace = serde_json::from_str(&text).unwrap();
        assert_eq!(back, trace);
    }

    #[test]
    fn every_non_finite_number_is_written_as_null() {
        let rotation = RotationTrace {
            order: vec!["a".into(), "b".into(), "c".into()],
            log_probabilities: vec![f64::INFINITY, f64::NAN, f64::NEG_INFINITY],
            prior: None,
            unread: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(&rotation).unwrap(),
            json!({"order": ["a", "b", "c"], "log_probabilities": [null, null, null], "prior": null})
        );
    }

    #[test]
    fn an_encoder_trace_omits_what_only_a_decoder_has() {
        let trace = EvaluationTrace {
            engine: EngineKind::Encoder,
            questions: [(
                "q".to_owned(),
                QuestionTrace {
                    rotations: vec![RotationTrace {
                        order: vec!["yes".into(), "no".into()],
                        log_probabilities: vec![-0.1, -2.35],
                        prior: None,
                        unread: Vec::new(),
                    }],
                    temperature: 1.0,
                    candidate_mass: Vec::new(),
                    branch_tokens: Vec::new(),
                    question_prefix_tokens: Vec::new(),
                    stage_one: None,
                },
            )]
            .into_iter()
            .collect(),
            prefix_tokens: 17,
            prefix_cached: None,
        };
        let value = serde_json::to_value(&trace).unwrap();
        assert_eq!(
            value,
            json!({
                "engine": "encoder",
                "questions": {"q": {
                    "rotations": [{"order": ["yes", "no"], "log_probabilities": [-0.1, -2.35], "prior": null}],
                    "temperature": 1.0,
                }},
                "prefix_tokens": 17,
            })
        );
        // A missing prior reads as none, like a `null` one.
        let mut without_prior = value.clone();
        without_prior["questions"]["q"]["rotations"][0]
            .as_object_mut()
            .unwrap()
            .remove("prior");
        assert_eq!(
            serde_json::from_value::<EvaluationTrace>(without_prior).unwrap(),
            trace
        );
    }

    #[test]
    fn the_schema_admits_null_for_log_space_numbers() {
        let schema = schemars::schema_for!(EvaluationTrace).to_value();
        let rotation = &schema["$defs"]["RotationTrace"]["properties"];
        assert_eq!(
            rotation["log_probabilities"]["items"]["type"],
            json!(["number", "null"])
        );
        assert_eq!(rotation["prior"]["type"], json!(["array", "null"]));
        assert_eq!(
            rotation["prior"]["items"]["type"],
            json!(["number", "null"])
        );
        let stage_one = &schema["$defs"]["StageOneScore"];
        assert_eq!(
            stage_one["properties"]["log_odds_yes"]["type"],
            json!(["number", "null"])
        );
        assert_eq!(stage_one["required"], json!(["key", "log_odds_yes"]));
        assert_eq!(
            schema["$defs"]["RotationTrace"]["required"],
            json!(["order", "log_probabilities"])
        );
    }
}
