//! Typed errors of the port: what a backend may fail with, and which part of the contract broke.

/// The cause an implementation attaches; kept as a source so callers can still downcast it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure inside a backend implementation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The chat template could not be rendered for these messages.
    #[error("chat template failed: {message}")]
    Template {
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    /// The tokenizer refused or failed on a text.
    #[error("tokenizer failed: {source}")]
    Tokenizer {
        #[source]
        source: BoxError,
    },
    /// The forward pass failed (out of memory, a shape error, a device error).
    #[error("forward pass failed: {source}")]
    Forward {
        #[source]
        source: BoxError,
    },
    /// A prefix plus a branch does not fit the model's context window.
    #[error(
        "branch {branch} needs {needed} tokens with its prefix, over the {} of {limit}",
        ruling_schema::capacity::CONTEXT
    )]
    ContextExceeded {
        branch: usize,
        needed: usize,
        limit: usize,
    },
    /// The caller broke the port's preconditions (an empty branch, a code id outside the vocabulary).
    #[error("invalid branch {branch}: {reason}")]
    InvalidBranch { branch: usize, reason: String },
    /// Generation settings that cannot sample (a negative temperature, `top_p` outside (0, 1]).
    #[error("invalid sampling settings: {reason}")]
    InvalidSampling { reason: String },
    /// A prompt to generate from is empty or does not leave room to write.
    #[error("invalid prompt {prompt}: {reason}")]
    InvalidPrompt { prompt: usize, reason: String },
    /// Images were given to a backend whose model reads text only.
    #[error("this model reads text only; it cannot read images")]
    TextOnly,
    /// An image the backend was given could not be read.
    #[error("image {index} cannot be read by the model: {reason}")]
    Image { index: usize, reason: String },
    /// The work stopped between forward passes because its caller asked (see [`crate::Cancel`]).
    #[error("stopped before the end: {0}")]
    Stopped(crate::Stopped),
    /// A remote server the backend forwards to failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

/// A server a remote engine forwards to failed, in a way its client can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream {server}: {message}")]
pub struct UpstreamError {
    /// Where it was (its base URL).
    pub server: String,
    pub failure: UpstreamFailure,
    /// What happened, for a person: the status, the time waited, what the body was.
    pub message: String,
}

/// How an upstream server failed, after every retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// It is overloaded or not ready (429, 503): a client should retry, after `retry_after`
    /// seconds when it said so. `status` is what it answered.
    Busy {
        status: u16,
        retry_after: Option<u64>,
    },
    /// It did not answer within the timeout.
    Timeout,
    /// It could not be reached, failed (5xx), or answered with something its API does not
    /// promise.
    Failed,
    /// It refused the request (a 4xx other than 429): its status.
    Refused { status: u16 },
}

/// Which part of the backend contract a backend failed at load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The split marker did not come through the chat template exactly once.
    #[error(
        "the chat template kept {found} copies of the split marker (expected exactly one); \
         it must pass the user content through unchanged"
    )]
    MarkerNotPreserved { found: usize },
    /// The state itself contains the split marker, so the prompt cannot be split.
    #[error("the state contains the reserved split marker {marker:?}")]
    StateContainsMarker { marker: &'static str },
    /// Rendering the whole conversation did not begin with the shared prefix.
    #[error(
        "the full render does not begin with the prefix render: they part at byte {at} \
         (prefix continues {prefix_next:?}, full render continues {full_next:?})"
    )]
    PrefixNotPrefix {
        at: usize,
        prefix_next: String,
        full_next: String,
    },
    /// The full render is not the prefix, the question and the tail laid end to end.
    #[error(
        "the full render is not prefix + question + tail: after the prefix it continues \
         {full_rest:?} but prefix + question + tail gives {expected_rest:?}"
    )]
    TailMismatch {
        full_rest: String,
        expected_rest: String,
    },
    /// Tokens differ when the prefix and the rest are encoded apart rather than together.
    #[error(
        "encode(prefix) + encode(rest) differs from encode(prefix + rest) at token {at}: \
         apart {apart:?}, together {together:?}"
    )]
    TokenBoundary {
        at: usize,
        apart: Vec<u32>,
        together: Vec<u32>,
    },
    /// An answer code is not exactly one token where the model reads it.
    #[error("answer code {code:?} encodes to {tokens:?} after the prompt, not to a single token")]
    CodeNotSingleToken { code: String, tokens: Vec<u32> },
    /// Two answer codes share a token id, so their probabilities could not be told apart.
    #[error("answer codes {first:?} and {second:?} are the same token {id}")]
    CodesCollide {
        first: String,
        second: String,
        id: u32,
    },
    /// `score_branches` broke its promise of one finite entry per branch, one logit per code.
    #[error("score_branches broke the port: {reason}")]
    BadScores { reason: String },
    /// Fewer codes than the smallest question needs.
    #[error("at least 2 answer codes are needed, {given} given")]
    TooFewCodes { given: usize },
    /// The backend failed while being checked.
    #[error(transparent)]
    Backend(#[from] BackendError),
}
