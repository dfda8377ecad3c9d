//! The crate's errors; `candle_core::Error` is converted here and nowhere else.

use std::path::PathBuf;

/// Why an encoder or a decision checkpoint could not be loaded, or a request scored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncoderError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid encoder configuration: {0}")]
    Config(String),
    #[error(
        "unsupported encoder family {found:?}; this crate implements {}",
        crate::model::FamilyConfig::SUPPORTED
    )]
    UnsupportedFamily { found: String },
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("the tokenizer has no {0} token, which the decision layout needs")]
    MissingSpecialToken(&'static str),
    #[error("{dir} is not a complete encoder: it lacks {}", missing.join(", "))]
    Incomplete { dir: PathBuf, missing: Vec<String> },
    #[error(
        "{dir} is a base encoder without a decision head (no decision.json); train one with \
         `ruling-train encoder --base {}` and serve its output directory",
        dir.display()
    )]
    NotTrained { dir: PathBuf },
    #[error("{dir}: {message}")]
    Mismatch { dir: PathBuf, message: String },
    #[error("{path}: {message}")]
    Metadata { path: PathBuf, message: String },
    #[error(transparent)]
    Calibration(#[from] ruling_calibration::CalibrationError),
    #[error("tensor library error: {0}")]
    Candle(#[from] candle_core::Error),
}

impl EncoderError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    pub(crate) fn write(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Write { path, source }
    }
}
