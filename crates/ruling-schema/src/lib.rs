//! The System One v1 contract of ruling, with no ML in sight: the wire types clients send and
//! receive (with their JSON Schema), the validation that turns a request body into the
//! [`ValidRequest`] engines accept, the pydantic-shaped 422 body that validation failures
//! become, the invariants every response must hold, the one rendering of free-form text
//! into prompt text, and the typed evaluation trace every engine writes. Engines, the server
//! and the evaluator all depend on this crate; it depends on no tensor library, no async
//! runtime and no HTTP stack.

pub mod capacity;
mod check;
mod error;
mod json;
mod non_finite;
pub mod text;
pub mod trace;
mod valid;
mod validate;
pub mod wire;

pub use check::{InvariantError, SUM_TOLERANCE};
pub use error::{ErrorDetail, LocItem, ValidationErrorBody, ValidationErrors};
pub use text::{State, Text, render_text};
pub use trace::{EngineKind, EvaluationTrace, QuestionTrace, RotationTrace, StageOneScore};
pub use valid::{
    AssetData, ChoiceOption, QuestionKind, ValidAsset, ValidQuestion, ValidRequest, ValidState,
};
pub use validate::{
    Capabilities, DEFAULT_MAX_IMAGES, MAX_CHOICE_OPTIONS, MAX_SCORE_LEVELS, MIN_CHOICE_OPTIONS,
    MIN_SCORE_LEVELS, QUESTION_TYPES, parse_request, validate,
};
pub use wire::{
    Answer, Asset, AssetKind, AssetSource, BoxRegion, ImageFormat, ModelInfo, ModelsList,
    NoulCriteria, Question, SystemOneRequest, SystemOneResponse, Usage, error_schema,
    request_schema, response_schema,
};
