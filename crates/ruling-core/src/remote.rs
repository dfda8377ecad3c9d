//! Remote engines behind `Ruling::load`: `openai:URL#MODEL`, the decoder engine over an
//! OpenAI-compatible completions server, and `systemone:URL#MODEL`, another System One server
//! answering whole requests (`ruling-remote` implements both).

use std::path::Path;
use std::time::Duration;

use ruling_backend::EngineError;
use ruling_candle::ChatText;
use ruling_remote::{OpenAiBackend, OpenAiOptions, RemoteSpec, SystemOneEngine, UpstreamOptions};
use ruling_schema::Capabilities;

use crate::{CoreError, Options, Pulled, Ruling};

/// How a remote engine reaches its server.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// `openai:`: the model whose chat template and tokenizer prompts are rendered with, and
    /// whose identity calibration files name (a catalog name, `hf:` repository or local
    /// path; pulled like any model). Default: the spec's `MODEL`, which must then be one.
    pub tokenizer: Option<String>,
    /// `openai:`: the log-probabilities asked for per branch; the answer codes must be among
    /// them (vLLM allows 20 unless started with more, OpenAI 5).
    pub top_logprobs: usize,
    /// `openai:`: the server's context, in tokens.
    pub context_length: usize,
    /// `systemone:`: whether the upstream reads images (requests with assets and box
    /// questions are refused here otherwise).
    pub vision: bool,
    /// The longest one call may take.
    pub timeout: Duration,
    /// Calls after the first when the server is busy, failing or unreachable.
    pub retries: u32,
    /// The server's bearer key, if it wants one.
    pub api_key: Option<String>,
    /// Calls in flight at once.
    pub concurrency: usize,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        let openai = OpenAiOptions::default();
        let upstream = UpstreamOptions::default();
        Self {
            tokenizer: None,
            top_logprobs: openai.top_logprobs,
            context_length: openai.context_length,
            vision: false,
            timeout: upstream.timeout,
            retries: upstream.retries,
            api_key: None,
            concurrency: upstream.concurrency,
        }
    }
}

impl RemoteOptions {
    fn upstream(&self) -> UpstreamOptions {
        UpstreamOptions {
            timeout: self.timeout,
            retries: self.retries,
            api_key: self.api_key.clone(),
            concurrency: self.concurrency.max(1),
            ..UpstreamOptions::default()
        }
    }
}

/// The engine a remote spec names.
pub(crate) fn load(spec: RemoteSpec, options: &Options) -> Result<Ruling, CoreError> {
    match &spec {
        RemoteSpec::OpenAi { base, model } => {
            let tokenizer = options.remote.tokenizer.as_deref().unwrap_or(model);
            let files = Pulled::pull(tokenizer, options)?;
            let text = if files.path.is_dir() {
                ChatText::from_dir(&files.path)?
            } else {
                ChatText::from_gguf(Path::new(&files.path))?
            };
            let backend = OpenAiBackend::connect(
                base,
                model,
                text,
                files.model_id,
                files.revision,
                OpenAiOptions {
                    top_logprobs: options.remote.top_logprobs,
                    context_length: options.remote.context_length,
                    upstream: options.remote.upstream(),
                },
            )
            .map_err(EngineError::from)?;
            // The tokenizer's model is the one the server runs: its serving profile applies.
            Ruling::decoder(tokenizer, backend, options)
        }
        RemoteSpec::SystemOne { base, model } => {
            let named = spec.to_string();
            let refuse = |setting| CoreError::NotForPassThrough {
                model: named.clone(),
                setting,
            };
            if options.rotations.is_some() {
                return Err(refuse("--rotations"));
            }
            if options.prior.is_some() {
                return Err(refuse("--prior"));
            }
            if options.calibration.is_some() {
                return Err(refuse("--calibration"));
            }
            if options.adapter.is_some() {
                return Err(refuse("an adapter"));
            }
            let capabilities = if options.remote.vision {
                Capabilities::vision()
            } else {
                Capabilities::default()
            };
            let engine = SystemOneEngine::connect(
                base,
                model,
                options.served_name.clone().unwrap_or_else(|| model.clone()),
                capabilities,
                options.remote.upstream(),
            )?;
            Ok(Ruling::from_engine(Box::new(engine)))
        }
    }
}
