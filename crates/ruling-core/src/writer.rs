//! [`Writer`]: a decoder that writes the assistant's turn for chat prompts, on either backend,
//! loaded the way [`crate::Ruling`] loads a decoder.

use ruling_backend::{BackendError, ChatMessage, EngineError, Finish, Generator, Sampling};
use ruling_candle::Adapter;

use crate::{CoreError, DecoderBackend, Options, Pulled, adapter};

/// A decoder that writes text: chat prompts continued with seeded sampling, on either backend
/// (what distillation uses to have a teacher write before it reads an answer).
pub struct Writer {
    backend: Box<dyn Writes>,
    model_id: String,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("model", &self.model_id)
            .finish_non_exhaustive()
    }
}

/// What one prompt's turn came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The assistant's text, without the end-of-turn token.
    pub text: String,
    /// Prompt tokens read.
    pub prompt_tokens: usize,
    /// Tokens written.
    pub tokens: Vec<u32>,
    pub finish: Finish,
}

/// A backend that can both render chats and write: what [`Writer`] holds.
trait Writes: Send + Sync {
    fn prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, BackendError>;
    fn generator(&self) -> &dyn Generator;
}

impl<B: ruling_backend::Backend + Generator> Writes for B {
    fn prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, BackendError> {
        self.encode(&self.render_chat(messages)?)
    }

    fn generator(&self) -> &dyn Generator {
        self
    }
}

impl Writer {
    /// Load a decoder model spec (a catalog name, `hf:org/repo[@rev]`, a `.gguf` file or a
    /// model directory) on the backend `options.backend` names; with [`Options::adapter`],
    /// the base on candle writing through that adapter.
    pub fn load(spec: &str, options: &Options) -> Result<Self, CoreError> {
        if let Some(choice) = &options.adapter {
            let base = adapter::adapter_base(spec, options)?;
            let adapted = Adapter::load(&choice.path)
                .and_then(|adapter| base.with_adapter(&adapter))
                .map_err(|e| CoreError::ForAdapter {
                    name: choice.name.clone(),
                    source: Box::new(e.into()),
                })?;
            let model_id = ruling_backend::Backend::info(&adapted).model_id.clone();
            return Ok(Self {
                backend: Box::new(adapted),
                model_id,
            });
        }
        let model = Pulled::pull(spec, options)?;
        if model.is_encoder() {
            return Err(CoreError::CannotWrite {
                model: spec.to_owned(),
            });
        }
        let backend: Box<dyn Writes> = match options.backend {
            DecoderBackend::Candle => Box::new(model.candle(options)?),
            #[cfg(feature = "llama-cpp")]
            DecoderBackend::Llama => Box::new(model.llama(options)?),
            #[cfg(not(feature = "llama-cpp"))]
            DecoderBackend::Llama => return Err(CoreError::LlamaNotBuilt),
        };
        Ok(Self {
            backend,
            model_id: model.model_id,
        })
    }

    /// The model's identity, as calibration files name it.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Render each conversation with the model's chat template (the assistant's turn open)
    /// and write the assistant's turn, all of them in one call. Deterministic for a fixed
    /// `sampling.seed`: conversation `i` always draws from the seed's stream `i`.
    pub fn write(
        &self,
        conversations: &[Vec<ChatMessage>],
        sampling: &Sampling,
    ) -> Result<Vec<Written>, CoreError> {
        let prompts = conversations
            .iter()
            .map(|messages| self.backend.prompt(messages))
            .collect::<Result<Vec<_>, _>>()
            .map_err(EngineError::from)?;
        let views: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
        let generator = self.backend.generator();
        let written = generator
            .generate(&views, sampling)
            .map_err(EngineError::from)?;
        written
            .into_iter()
            .zip(&prompts)
            .map(|(generation, prompt)| {
                Ok(Written {
                    text: generator
                        .decode(&generation.tokens)
                        .map_err(EngineError::from)?,
                    prompt_tokens: prompt.len(),
                    tokens: generation.tokens,
                    finish: generation.finish,
                })
            })
            .collect()
    }
}
