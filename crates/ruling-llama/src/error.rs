//! The crate's errors; llama-cpp-2's are converted here and nowhere else.

use std::path::PathBuf;

/// Why a model could not be loaded on llama.cpp.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error(
        "the llama backend reads GGUF files only, and {0} is not one; serve it with the candle \
         backend (--backend candle)"
    )]
    NotGguf(PathBuf),
    /// The tokenizer or chat template in the GGUF metadata (read by the project's own code).
    #[error(transparent)]
    Text(Box<ruling_candle::LoadError>),
    #[error("llama.cpp could not start: {0}")]
    Runtime(String),
    #[error("llama.cpp could not load {path}: {message}")]
    Model { path: PathBuf, message: String },
    #[error("llama.cpp could not create a context of {n_ctx} tokens: {message}")]
    Context { n_ctx: u32, message: String },
    /// The vision projector (`mmproj`) could not be loaded for this model.
    #[error("the vision projector {path} could not be loaded: {message}")]
    Projector { path: PathBuf, message: String },
    #[error("could not start a llama.cpp worker thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl From<ruling_candle::LoadError> for LoadError {
    fn from(err: ruling_candle::LoadError) -> Self {
        Self::Text(Box::new(err))
    }
}
