//! The crate's errors; `candle_core::Error` is converted here and nowhere else.

use std::path::PathBuf;

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "unsupported model family {found:?}; this decoder implements {}",
        crate::config::Family::SUPPORTED
    )]
    UnsupportedFamily { found: String },
    #[error("invalid model configuration: {0}")]
    Config(String),
    #[error("the GGUF metadata lacks {0:?}")]
    MissingMetadata(String),
    #[error("GGUF metadata {key:?} has the wrong type: {source}")]
    BadMetadata {
        key: String,
        #[source]
        source: candle_core::Error,
    },
    #[error("the weights lack tensor {0:?}")]
    MissingTensor(String),
    #[error("tensor {name:?} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("{0}")]
    Template(#[from] crate::template::TemplateError),
    #[error(
        "no model files in {0}: expected a .gguf file or a directory with config.json, *.safetensors and tokenizer.json"
    )]
    NotAModel(PathBuf),
    #[error("tensor library error: {0}")]
    Candle(#[from] candle_core::Error),
}

impl LoadError {
    pub(crate) fn metadata(key: &str, source: candle_core::Error) -> Self {
        Self::BadMetadata {
            key: key.to_owned(),
            source,
        }
    }
}
