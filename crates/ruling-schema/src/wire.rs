//! The System One v1 wire types, exactly as clients send and receive them.
//!
//! These types are for (de)serialising and schema generation only; engines accept the
//! validated types ([`crate::ValidRequest`] and its parts). Every map is an [`IndexMap`]
//! because order is meaning here: the order of a choice's `criteria` is the option order,
//! and answers come back in the order questions were asked.

use indexmap::IndexMap;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Deserializer, Serialize};

pub use crate::text::{State, Text};
use crate::trace::EvaluationTrace;

/// `POST /v1/systemone` request body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SystemOneRequest {
    /// Name of the model to ask, as listed by `GET /v1/models`.
    pub model: String,
    pub state: State,
    /// Questions keyed by a client-chosen id; answers come back under the same ids.
    pub questions: IndexMap<String, Question>,
    /// Images keyed by a placeholder string that appears in the state, instructions or criteria.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assets: Option<IndexMap<String, Asset>>,
    /// Opt-in diagnostics: asks for an `evaluation_trace` in the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<bool>,
}

/// One typed question, tagged by `"type"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Question {
    /// Yes or no; answered with P(yes).
    Noul {
        /// May be left out (read as null), as the specification allows for a noul.
        #[serde(default = "Text::null")]
        instructions: Text,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        criteria: Option<NoulCriteria>,
    },
    /// One of 2 to 255 options, keyed by option key; each value describes its option.
    Choice {
        instructions: Text,
        #[schemars(extend("minProperties" = 2, "maxProperties" = 255))]
        criteria: IndexMap<String, Text>,
    },
    /// An ordered scale of 2 to 10 levels, lowest first.
    Score {
        instructions: Text,
        #[schemars(length(min = 2, max = 10))]
        criteria: Vec<Text>,
    },
    /// Where something is in an image; vision models only.
    Box { instructions: Text },
}

impl Question {
    /// The `"type"` tag of this question.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Noul { .. } => "noul",
            Self::Choice { .. } => "choice",
            Self::Score { .. } => "score",
            Self::Box { .. } => "box",
        }
    }
}

/// What "true" and "false" mean for a noul question.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoulCriteria {
    #[serde(
        rename = "true",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub if_true: Option<Text>,
    #[serde(
        rename = "false",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub if_false: Option<Text>,
}

/// Distinguishes an explicit `null` (`Some(Text::null())`) from an absent key (`None`) so
/// that a request serialises back to the JSON it came from.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Text>, D::Error> {
    Text::deserialize(deserializer).map(Some)
}

/// An image, either inline or sent as a multipart part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Asset {
    #[serde(rename = "type")]
    pub kind: AssetKind,
    pub format: ImageFormat,
    #[serde(flatten)]
    pub source: AssetSource,
}

/// The only asset kind System One v1 defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AssetKind {
    Image,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    Png,
    Jpg,
    Jpeg,
}

impl ImageFormat {
    pub const ALL: [ImageFormat; 3] = [Self::Png, Self::Jpg, Self::Jpeg];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Jpg => "jpg",
            Self::Jpeg => "jpeg",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

/// Where an asset's bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum AssetSource {
    /// Base64 (standard alphabet, padded) inside the JSON.
    Inline { data_base64: String },
    /// A `multipart/form-data` part of this name carries the bytes.
    Part { part: String },
}

/// One answer, tagged by `"type"` like the question it answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Answer {
    /// P(yes).
    Noul { noul: f64 },
    Choice {
        choice: String,
        /// `(p_max - 1/K) / (1 - 1/K)` for K options: 0 at chance, 1 when the chosen option
        /// holds all the probability (the System One reference formula).
        confidence: f64,
        /// Every option key with its probability, in option order.
        probabilities: IndexMap<String, f64>,
    },
    Score {
        /// Expected level index, in `[0, levels - 1]`.
        score: f64,
        /// `1 - sum_i p_i |i - m| / sum_i (1/n) |i - m|` over the n levels, `m` the most
        /// probable level, floored at 0: 0 for the uniform distribution, 1 for a certain level
        /// (the System One reference formula).
        confidence: f64,
        /// Level index (`"0"`, `"1"`, ...) to the rendered level text.
        legend: IndexMap<String, String>,
        /// Level index (`"0"`, `"1"`, ...) to its probability.
        probabilities: IndexMap<String, f64>,
    },
    Box {
        #[serde(rename = "box")]
        region: BoxRegion,
        confidence: Option<f64>,
    },
}

impl Answer {
    /// The `"type"` tag of this answer.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Noul { .. } => "noul",
            Self::Choice { .. } => "choice",
            Self::Score { .. } => "score",
            Self::Box { .. } => "box",
        }
    }
}

/// A rectangle in an image.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BoxRegion {
    pub top: f64,
    pub bottom: f64,
    pub left: f64,
    pub right: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// `POST /v1/systemone` response body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SystemOneResponse {
    /// The served model name.
    pub model: String,
    pub answers: IndexMap<String, Answer>,
    pub usage: Usage,
    /// What the engine computed; present only when the request asked for `trace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation_trace: Option<EvaluationTrace>,
}

/// `GET /v1/models` response body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelsList {
    pub models: Vec<ModelInfo>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelInfo {
    pub name: String,
    pub description: String,
    /// `YYYY-MM-DD`.
    pub release_date: String,
}

/// JSON Schema of the request body.
pub fn request_schema() -> Schema {
    schemars::schema_for!(SystemOneRequest)
}

/// JSON Schema of the response body.
pub fn response_schema() -> Schema {
    schemars::schema_for!(SystemOneResponse)
}

/// JSON Schema of the 422 error body.
pub fn error_schema() -> Schema {
    schemars::schema_for!(crate::error::ValidationErrorBody)
}
