//! Validated requests: the only request types engines accept.
//!
//! A [`ValidRequest`] can only be made by [`crate::validate()`] or [`crate::parse_request`],
//! so holding one proves the limits of System One v1 and of the serving model's
//! [`crate::Capabilities`] were checked: 2 to `max_choice_options` distinct options per choice,
//! 2 to 10 distinct non-null levels per score, images only for vision models, every asset
//! referenced and decodable.

use base64::Engine as _;
use indexmap::IndexMap;

use crate::text::{State, Text};
use crate::wire::{
    Asset, AssetKind, AssetSource, ImageFormat, NoulCriteria, Question, SystemOneRequest,
};

/// The state of a validated request. [`State`] already refuses every shape System One does
/// not allow, so validation has nothing to add to it.
pub type ValidState = State;

#[derive(Clone, Debug, PartialEq)]
pub struct ValidRequest {
    pub(crate) model: String,
    pub(crate) state: ValidState,
    pub(crate) questions: Vec<ValidQuestion>,
    pub(crate) assets: Vec<ValidAsset>,
    pub(crate) trace: bool,
}

impl ValidRequest {
    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn state(&self) -> &ValidState {
        &self.state
    }

    /// Questions in request order; ids are unique and non-empty.
    pub fn questions(&self) -> &[ValidQuestion] {
        &self.questions
    }

    pub fn question(&self, id: &str) -> Option<&ValidQuestion> {
        self.questions.iter().find(|q| q.id == id)
    }

    /// Assets in request order; empty unless the model reads images.
    pub fn assets(&self) -> &[ValidAsset] {
        &self.assets
    }

    /// This request with every asset placeholder in the state, instructions and criteria
    /// (option keys excepted: they are the client's names for its options) replaced by the
    /// name `names` gives it, and no assets: what a vision engine asks once the images
    /// themselves are in the prompt under those names.
    pub fn naming_images(&self, names: &[(&str, &str)]) -> ValidRequest {
        let kind = |kind: &QuestionKind| match kind {
            QuestionKind::Noul {
                instructions,
                if_true,
                if_false,
            } => QuestionKind::Noul {
                instructions: instructions.replacing(names),
                if_true: if_true.as_ref().map(|t| t.replacing(names)),
                if_false: if_false.as_ref().map(|t| t.replacing(names)),
            },
            QuestionKind::Choice {
                instructions,
                options,
            } => QuestionKind::Choice {
                instructions: instructions.replacing(names),
                options: options
                    .iter()
                    .map(|o| ChoiceOption {
                        key: o.key.clone(),
                        description: o.description.as_ref().map(|t| t.replacing(names)),
                    })
                    .collect(),
            },
            QuestionKind::Score {
                instructions,
                levels,
            } => QuestionKind::Score {
                instructions: instructions.replacing(names),
                levels: levels.iter().map(|t| t.replacing(names)).collect(),
            },
            QuestionKind::Box { instructions } => QuestionKind::Box {
                instructions: instructions.replacing(names),
            },
        };
        ValidRequest {
            model: self.model.clone(),
            state: self.state.replacing(names),
            questions: self
                .questions
                .iter()
                .map(|q| ValidQuestion {
                    id: q.id.clone(),
                    kind: kind(&q.kind),
                })
                .collect(),
            assets: Vec::new(),
            trace: self.trace,
        }
    }

    /// Whether the client asked for an evaluation trace.
    pub fn trace(&self) -> bool {
        self.trace
    }

    /// The wire form of this request. Explicit `null`s a client wrote where absence means
    /// the same (noul criteria, `assets`, `trace`) are not kept.
    pub fn to_wire(&self) -> SystemOneRequest {
        let questions = self
            .questions
            .iter()
            .map(|q| (q.id.clone(), q.kind.to_wire()))
            .collect();
        let assets = (!self.assets.is_empty()).then(|| {
            self.assets
                .iter()
                .map(|a| (a.placeholder.clone(), a.to_wire()))
                .collect::<IndexMap<_, _>>()
        });
        SystemOneRequest {
            model: self.model.clone(),
            state: self.state.clone(),
            questions,
            assets,
            trace: self.trace.then_some(true),
        }
    }

    pub fn into_wire(self) -> SystemOneRequest {
        self.to_wire()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ValidQuestion {
    pub(crate) id: String,
    pub(crate) kind: QuestionKind,
}

impl ValidQuestion {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn kind(&self) -> &QuestionKind {
        &self.kind
    }

    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum QuestionKind {
    Noul {
        instructions: Text,
        /// What "true" means; `None` when the client gave nothing or null.
        if_true: Option<Text>,
        if_false: Option<Text>,
    },
    Choice {
        instructions: Text,
        /// In the order the client listed them; keys are unique and non-empty.
        options: Vec<ChoiceOption>,
    },
    Score {
        instructions: Text,
        /// Lowest first; none null, no two rendering the same.
        levels: Vec<Text>,
    },
    Box {
        instructions: Text,
    },
}

impl QuestionKind {
    /// The wire `"type"` tag.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Noul { .. } => "noul",
            Self::Choice { .. } => "choice",
            Self::Score { .. } => "score",
            Self::Box { .. } => "box",
        }
    }

    pub fn instructions(&self) -> &Text {
        match self {
            Self::Noul { instructions, .. }
            | Self::Choice { instructions, .. }
            | Self::Score { instructions, .. }
            | Self::Box { instructions } => instructions,
        }
    }

    fn to_wire(&self) -> Question {
        match self {
            Self::Noul {
                instructions,
                if_true,
                if_false,
            } => Question::Noul {
                instructions: instructions.clone(),
                criteria: (if_true.is_some() || if_false.is_some()).then(|| NoulCriteria {
                    if_true: if_true.clone(),
                    if_false: if_false.clone(),
                }),
            },
            Self::Choice {
                instructions,
                options,
            } => Question::Choice {
                instructions: instructions.clone(),
                criteria: options
                    .iter()
                    .map(|o| {
                        let description = o.description.clone().unwrap_or_else(Text::null);
                        (o.key.clone(), description)
                    })
                    .collect(),
            },
            Self::Score {
                instructions,
                levels,
            } => Question::Score {
                instructions: instructions.clone(),
                criteria: levels.clone(),
            },
            Self::Box { instructions } => Question::Box {
                instructions: instructions.clone(),
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceOption {
    pub key: String,
    /// `None` when the client sent `null`.
    pub description: Option<Text>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidAsset {
    pub(crate) placeholder: String,
    pub(crate) format: ImageFormat,
    pub(crate) data: AssetData,
}

impl ValidAsset {
    /// The string whose occurrences in the request's text stand for this image.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    pub fn format(&self) -> ImageFormat {
        self.format
    }

    pub fn data(&self) -> &AssetData {
        &self.data
    }

    fn to_wire(&self) -> Asset {
        let source = match &self.data {
            AssetData::Inline(bytes) => AssetSource::Inline {
                data_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
            AssetData::Part(part) => AssetSource::Part { part: part.clone() },
        };
        Asset {
            kind: AssetKind::Image,
            format: self.format,
            source,
        }
    }
}

/// An asset's bytes, or where to find them.
#[derive(Clone, PartialEq, Eq)]
pub enum AssetData {
    /// Decoded from `data_base64`.
    Inline(Vec<u8>),
    /// Named multipart part; the server attaches the bytes.
    Part(String),
}

impl std::fmt::Debug for AssetData {
    // Images run to megabytes; a debug dump of every byte helps nobody.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline(bytes) => write!(f, "Inline({} bytes)", bytes.len()),
            Self::Part(name) => f.debug_tuple("Part").field(name).finish(),
        }
    }
}
