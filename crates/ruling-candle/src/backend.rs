//! [`CandleBackend`]: the decoder, its tokenizer and its chat template behind the
//! [`Backend`] port.

use std::path::Path;
use std::sync::Arc;

use candle_core::Device;
use ruling_backend::{
    Backend, BackendError, BackendInfo, Branch, BranchLogits, ChatMessage, Decoding, Generation,
    Generator, Sampling,
};

use crate::decoder::{BranchBudget, BranchLayout, Decoder, KvCache, PREFILL_CHUNK};
use crate::error::LoadError;
use crate::lora::{Adapter, AdapterError, BaseModel};
use crate::template::ChatTemplate;
use crate::text::ChatText;
use crate::tokenizer::TextTokenizer;
use crate::weights::WeightDtype;

/// How to load and run a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The precision matrices are kept at.
    pub dtype: WeightDtype,
    /// How branches are laid out for a forward pass.
    pub layout: BranchLayout,
    /// Limits on one forward pass over branches.
    pub budget: BranchBudget,
    /// Refuse prefix plus branch beyond this many tokens (default: what the model supports).
    pub context_length: Option<usize>,
    /// The identity reported to calibration and reports (default: the file or directory name).
    pub model_id: Option<String>,
    /// The exact revision of the weights, when known (a sha256 or a hub commit).
    pub revision: Option<String>,
}

/// A decoder on candle's CPU device, ready to serve the [`Backend`] port.
#[derive(Debug)]
pub struct CandleBackend {
    info: BackendInfo,
    decoder: Decoder,
    text: Arc<ChatText>,
    layout: BranchLayout,
    budget: BranchBudget,
}

impl CandleBackend {
    /// Load a `.gguf` file (tokenizer and template from its metadata) or a Hugging Face
    /// directory (`config.json`, `*.safetensors`, `tokenizer.json`, `tokenizer_config.json`).
    pub fn load(path: &Path, options: &LoadOptions) -> Result<Self, LoadError> {
        let device = Device::Cpu;
        let (decoder, text) = if path.is_dir() {
            let decoder = Decoder::from_hf_dir(path, options.dtype, &device)?;
            (decoder, ChatText::from_dir(path)?)
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            let text = ChatText::from_gguf(path)?;
            (Decoder::from_gguf(path, options.dtype, &device)?, text)
        } else {
            return Err(LoadError::NotAModel(path.into()));
        };
        let limit = decoder.max_positions();
        let context_length = options.context_length.map_or(limit, |c| c.min(limit));
        let model_id = options.model_id.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        Ok(Self {
            info: BackendInfo {
                model_id,
                revision: options.revision.clone(),
                context_length,
                vision: None,
                max_token_bytes: text.tokenizer().max_token_bytes(),
                adapter_digest: None,
            },
            decoder,
            text: Arc::new(text),
            layout: options.layout,
            budget: options.budget,
        })
    }

    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// Keep layers `from..` as dense f32 so gradients pass through them (for training an
    /// adapter on this base; see [`Decoder::dequantize_from`]).
    pub fn dequantize_from(&mut self, from: usize) -> Result<(), LoadError> {
        Ok(self.decoder.dequantize_from(from)?)
    }

    /// The base this backend runs, as adapters record it (identity and shape).
    pub fn base_model(&self) -> BaseModel {
        BaseModel::new(
            self.decoder.config(),
            &self.info.model_id,
            self.info.revision.as_deref(),
        )
    }

    /// This backend with `adapter` added to every forward pass. The base's tensors, tokenizer
    /// and template are shared, not copied; `info` carries the adapter's digest, so a
    /// calibration fitted for another adapter (or none) is refused. An adapter trained for
    /// another base, or whose tensors do not fit its layout, is refused with what differs.
    pub fn with_adapter(&self, adapter: &Adapter) -> Result<Self, AdapterError> {
        if self.decoder.adapter().is_some() {
            return Err(AdapterError::NotAnAdapter {
                path: adapter.path.clone(),
                reason: "this backend already applies an adapter; adapters do not stack".into(),
            });
        }
        let weights = adapter.weights_for(self.decoder.config(), &self.base_model())?;
        Ok(Self {
            info: BackendInfo {
                adapter_digest: Some(adapter.digest.clone()),
                ..self.info.clone()
            },
            decoder: self.decoder.with_adapter(weights),
            text: Arc::clone(&self.text),
            layout: self.layout,
            budget: self.budget,
        })
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        self.text.tokenizer()
    }

    pub fn template(&self) -> &ChatTemplate {
        self.text.template()
    }

    /// Score branches with a chosen layout, for benchmarks comparing the two.
    pub fn set_layout(&mut self, layout: BranchLayout) {
        self.layout = layout;
    }
}

fn forward_error(err: candle_core::Error) -> BackendError {
    BackendError::Forward {
        source: Box::new(err),
    }
}

impl Backend for CandleBackend {
    type Prefix = KvCache;

    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        self.text.render_chat(messages)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.text.encode(text)
    }

    fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.text.encode_continuation(text)
    }

    fn encode_prefix(&self, tokens: &[u32]) -> Result<KvCache, BackendError> {
        if tokens.len() > self.info.context_length {
            return Err(BackendError::ContextExceeded {
                branch: 0,
                needed: tokens.len(),
                limit: self.info.context_length,
            });
        }
        let mut cache = self.decoder.empty_cache();
        self.decoder
            .prefill(&mut cache, tokens)
            .map_err(forward_error)?;
        Ok(cache)
    }

    fn extend_prefix(
        &self,
        prefix: &KvCache,
        tokens: &[u32],
    ) -> Result<Option<KvCache>, BackendError> {
        let needed = prefix.len() + tokens.len();
        if needed > self.info.context_length {
            return Err(BackendError::ContextExceeded {
                branch: 0,
                needed,
                limit: self.info.context_length,
            });
        }
        // The clone shares the prefix's tensors; appending builds new ones, so `prefix` is
        // untouched.
        let mut cache = prefix.clone();
        self.decoder
            .prefill(&mut cache, tokens)
            .map_err(forward_error)?;
        Ok(Some(cache))
    }

    fn prefix_len(&self, prefix: &KvCache) -> usize {
        prefix.len()
    }

    fn prefix_bytes(&self, prefix: &KvCache) -> usize {
        prefix.bytes()
    }

    fn score_branches(
        &self,
        prefix: &KvCache,
        branches: &[Branch<'_>],
    ) -> Result<Vec<BranchLogits>, BackendError> {
        ruling_backend::check_branches(
            prefix.len(),
            branches,
            self.info.context_length,
            self.decoder.config().vocab_size,
        )?;
        let pairs: Vec<(&[u32], &[u32])> = branches.iter().map(|b| (b.tokens, b.codes)).collect();
        let scored = self
            .decoder
            .score_branches(prefix, &pairs, self.layout, self.budget)
            .map_err(forward_error)?;
        Ok(scored
            .into_iter()
            .map(|s| BranchLogits {
                logits: s.logits,
                log_normalizer: s.log_normalizer,
                unread: Vec::new(),
            })
            .collect())
    }

    fn accepts_system_role(&self) -> bool {
        self.text.accepts_system_role()
    }
}

/// Prompts are written one after another, each one token per step: candle's quantized matrix
/// product handles one activation row at a time, so stacking prompts into one batch would
/// save nothing here (llama.cpp's backend does batch them).
impl Generator for CandleBackend {
    fn generate(
        &self,
        prompts: &[&[u32]],
        sampling: &Sampling,
    ) -> Result<Vec<Generation>, BackendError> {
        let limit = self.info.context_length;
        let vocab = self.decoder.config().vocab_size;
        ruling_backend::check_prompts(prompts, limit, vocab)?;
        let mut decoding = Decoding::new(prompts.len(), sampling, self.text.end_tokens())?;
        for (row, prompt) in prompts.iter().enumerate() {
            let mut cache = self.decoder.empty_cache();
            let mut logits = self
                .decoder
                .prefill_chunked(&mut cache, prompt, PREFILL_CHUNK)
                .map_err(forward_error)?;
            while let Some(row_logits) = logits.take() {
                let Some(token) = decoding.push(row, &row_logits) else {
                    break;
                };
                if cache.len() >= limit {
                    decoding.stop_for_length(row);
                    break;
                }
                logits = self
                    .decoder
                    .prefill_chunked(&mut cache, &[token], 1)
                    .map_err(forward_error)?;
            }
        }
        Ok(decoding.finish())
    }

    fn end_tokens(&self) -> &[u32] {
        self.text.end_tokens()
    }

    fn decode(&self, tokens: &[u32]) -> Result<String, BackendError> {
        self.text.decode(tokens)
    }
}
