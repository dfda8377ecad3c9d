//! The request-answering port: what the server, the evaluator and library users call.

use ruling_calibration::Provenance;
use ruling_schema::{Capabilities, SystemOneResponse, ValidRequest};

use crate::Cancel;
use crate::error::{BackendError, ContractError};
use crate::prefix_cache::PrefixCacheStats;

/// What an engine serves and what it accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineInfo {
    /// The name the engine answers to in responses.
    pub model: String,
    /// What requests it can take (images, options per choice), used to validate requests
    /// before they reach it.
    pub capabilities: Capabilities,
    /// The longest prefix plus branch it can attend over, in tokens.
    pub max_context: usize,
}

/// Answers validated System One requests. Implementations are shared between threads: one
/// loaded model serves concurrent callers.
pub trait Engine: Send + Sync {
    fn info(&self) -> &EngineInfo;

    /// Answer every question of `request`, or refuse it whole.
    fn evaluate(&self, request: &ValidRequest) -> Result<SystemOneResponse, EngineError>;

    /// [`evaluate`](Self::evaluate), stopping with [`BackendError::Stopped`] between forward
    /// passes once `cancel` says so: a server frees its worker this way when the client has
    /// gone or the deadline has passed. The default looks once, before starting; an engine
    /// of several passes looks before each.
    fn evaluate_until(
        &self,
        request: &ValidRequest,
        cancel: &Cancel,
    ) -> Result<SystemOneResponse, EngineError> {
        cancel.check()?;
        self.evaluate(request)
    }

    /// What a calibration of this engine must have been fitted for. The default names the
    /// served model alone, at one rotation without the prior (test doubles need no more).
    fn provenance(&self) -> Provenance {
        Provenance {
            model_id: self.info().model.clone(),
            revision: None,
            rotations: 1,
            prior: false,
            adapter_digest: None,
        }
    }

    /// How the engine's cache of encoded prefixes is doing, when it has one.
    fn prefix_cache_stats(&self) -> Option<PrefixCacheStats> {
        None
    }
}

/// Why an engine could not answer a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The request does not fit: a branch longer than the context, or more tokens than the
    /// per-request budget. The message contains "maximum context length", the marker clients
    /// use to tell a capacity refusal from a failure.
    #[error("{message}")]
    InputTooLong {
        question: Option<String>,
        message: String,
    },
    /// The request asks for something this engine cannot do (a box question on a text model).
    #[error("{0}")]
    Unsupported(String),
    /// An image could not be read (not PNG or JPEG, corrupt, or too large to decode): its
    /// placeholder, and why.
    #[error("{message}")]
    Asset {
        placeholder: String,
        message: String,
    },
    /// The backend broke its contract while answering.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// The backend failed while answering.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The calibration given does not apply to this engine.
    #[error(transparent)]
    Calibration(#[from] ruling_calibration::CalibrationError),
    /// The scores could not be turned into probabilities (non-finite logits from the model).
    #[error("the model's scores are not usable: {0}")]
    Numeric(#[from] ruling_calibration::SoftmaxError),
    /// A probability distribution broke its invariants.
    #[error("an answer's distribution is invalid: {0}")]
    Distribution(#[from] ruling_calibration::DistributionError),
    /// The request would take far longer than its caller allows whatever else is running: its
    /// cost, estimated from its tokens and the engine's measured speed, is refused up front
    /// rather than started and abandoned.
    #[error(
        "this request reads about {tokens} tokens, about {seconds:.1} s at the {rate:.0} tokens/s \
         this engine has measured, and {allowed:.1} s are allowed per request; it cannot be \
         answered in time, so it is refused: ask fewer questions or rotations, or allow more time"
    )]
    TooSlow {
        tokens: usize,
        seconds: f64,
        rate: f64,
        allowed: f64,
    },
    /// The server a remote engine forwards to refused the request as malformed or beyond its
    /// capacity (a System One 422): its reasons, as it gave them.
    #[error("the upstream refused the request: {0}")]
    Refused(ruling_schema::ValidationErrors),
    /// A thread panicked while holding the engine's prior cache.
    #[error("the engine's prior cache was poisoned by a panic in another request")]
    Poisoned,
}

impl EngineError {
    /// Why the evaluation stopped early, when it did (see [`Engine::evaluate_until`]).
    pub fn stopped(&self) -> Option<crate::Stopped> {
        match self {
            Self::Backend(BackendError::Stopped(why)) => Some(*why),
            _ => None,
        }
    }
}
