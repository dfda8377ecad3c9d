//! Remote engines: ruling's decisions answered by servers that already run the model.
//!
//! - `openai:URL#MODEL` ([`OpenAiBackend`]): an OpenAI-compatible completions endpoint that
//!   reports log-probabilities (vLLM, SGLang, llama.cpp's server, llama-cpp-python's). It is
//!   a [`ruling_backend::Backend`]: the decoder engine renders every prompt itself, from the
//!   model's own chat template and tokenizer, and each branch becomes one completion of one
//!   token whose top log-probabilities hold the answer codes'. Codes, rotations, prior,
//!   calibration and limits are the local engine's, unchanged.
//! - `systemone:URL#MODEL` ([`SystemOneEngine`]): another System One server. Requests are
//!   validated here, forwarded, and the upstream's answers returned as they came.
//!
//! Both talk HTTP through [`Upstream`]: bounded concurrency, a timeout per request, retries
//! with backoff on 429 and 5xx, and every failure typed as a
//! [`ruling_backend::UpstreamError`] that says what a client should do about it.

mod openai;
mod spec;
mod systemone;
mod upstream;

pub use openai::{OpenAiBackend, OpenAiOptions, RemotePrefix};
pub use spec::{OPENAI_PREFIX, RemoteSpec, SYSTEMONE_PREFIX, SpecError};
pub use systemone::SystemOneEngine;
pub use upstream::{Upstream, UpstreamOptions};
