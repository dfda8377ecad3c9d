//! The one error type of this crate: every failure names the file (and line, where there is
//! one) or the dataset and split it concerns.

use std::path::PathBuf;

use thiserror::Error;

use crate::dataset::Split;

/// Why records could not be read, written or loaded.
#[derive(Debug, Error)]
pub enum CorpusError {
    /// Opening, reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line or file is not the JSON expected there.
    #[error("{}:{line}: {source}", path.display())]
    Json {
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        #[source]
        source: serde_json::Error,
    },
    /// A CSV or TSV file could not be read.
    #[error("{}:{line}: {source}", path.display())]
    Csv {
        path: PathBuf,
        /// 1-based line number where the record starts (0 when unknown).
        line: u64,
        #[source]
        source: csv::Error,
    },
    /// A row parsed but holds something the dataset's documentation rules out.
    #[error("{}:{line}: {message}", path.display())]
    Malformed {
        path: PathBuf,
        /// 1-based line number (0 for a problem with the whole file).
        line: u64,
        message: String,
    },
    /// A CLINC150 subset size outside 1 to [`MAX_CLINC_SUBSET`](crate::MAX_CLINC_SUBSET).
    #[error(
        "a CLINC150 subset offers 1 to {max} of the 150 intents (use clinc150 for all of them), \
         got {subset}"
    )]
    InvalidSubset { subset: usize, max: usize },
    /// The dataset has no rows in this split: the datasets README reserves it for the other.
    #[error("{dataset} has no {split} split: {reason}")]
    SplitUnavailable {
        /// The dataset's command-line name.
        dataset: String,
        split: Split,
        reason: &'static str,
    },
}

impl CorpusError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    pub(crate) fn malformed(
        path: impl Into<PathBuf>,
        line: u64,
        message: impl Into<String>,
    ) -> Self {
        Self::Malformed {
            path: path.into(),
            line,
            message: message.into(),
        }
    }
}
