//! The ports between ruling's decision logic and whatever runs a model.
//!
//! A [`Backend`] is a host that can run a forward pass: it renders a chat around a state,
//! encodes text, encodes a shared prefix once and scores many short branches against it,
//! returning only the logits of the requested answer codes at each branch's last position.
//! An [`Engine`] answers a validated System One request. The decoder decision logic
//! (prompting, rotations, prior subtraction, calibration) is written once over [`Backend`],
//! so a new model family or a remote host implements only the small trait here.
//!
//! A [`Generator`] writes text (for distillation, never to answer): backends run the forward
//! passes and a shared [`Decoding`] samples and stops, so every backend picks tokens alike.
//!
//! A backend that gets the port subtly wrong returns wrong probabilities instead of failing,
//! so [`verify_backend`] proves the contract once at load and says which part broke.
//!
//! This crate depends on no tensor library, async runtime or HTTP stack.

mod answer;
mod backend;
mod cancel;
mod codes;
mod contract;
mod decision;
mod engine;
mod error;
mod generate;
mod picture;
mod prefix_cache;
mod prompt;
pub mod render;

pub use answer::answer;
pub use backend::{
    Backend, BackendInfo, Branch, BranchLogits, ChatMessage, Role, VisionInfo, check_branches,
};
pub use cancel::{Cancel, CancelOnDrop, Stopped};
pub use codes::{AnswerCodes, DEFAULT_CODES, MAX_CODES, two_letter_codes};
pub use contract::{ContractReport, verify_backend, verify_backend_widened};
pub use decision::{
    AdaptiveRotations, DEFAULT_PREFIX_CACHE_BYTES, DecoderEngine, EngineOptions, Layout,
    QUESTION_FIRST_MIN_BYTES, QUESTION_FIRST_RATIO, QuestionPrompt,
};
pub use engine::{Engine, EngineError, EngineInfo};
pub use error::{BackendError, BoxError, ContractError, UpstreamError, UpstreamFailure};
pub use generate::{Decoding, Finish, Generation, Generator, Sampling, check_prompts, sample};
pub use picture::{
    DEFAULT_MAX_IMAGE_TOKENS, ImageBudget, MAX_ASPECT_RATIO, MAX_SOURCE_PIXELS, Picture,
    PictureError,
};
pub use prefix_cache::{PrefixCache, PrefixCacheStats};
pub use prompt::{PromptSplit, SPLIT_MARKER, split_prompt, user_head};
