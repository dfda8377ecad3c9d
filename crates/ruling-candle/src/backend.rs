//! [`CandleBackend`]: the decoder, its tokenizer and its chat template behind the
//! [`Backend`] port.

use std::path::Path;

use candle_core::Device;
use candle_core::quantized::gguf_file;
use ruling_backend::{Backend, BackendError, BackendInfo, Branch, BranchLogits, ChatMessage, Role};

use crate::decoder::{BranchBudget, BranchLayout, Decoder, KvCache};
use crate::error::LoadError;
use crate::template::ChatTemplate;
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
    tokenizer: TextTokenizer,
    template: ChatTemplate,
    system_role: bool,
    layout: BranchLayout,
    budget: BranchBudget,
}

impl CandleBackend {
    /// Load a `.gguf` file (tokenizer and template from its metadata) or a Hugging Face
    /// directory (`config.json`, `*.safetensors`, `tokenizer.json`, `tokenizer_config.json`).
    pub fn load(path: &Path, options: &LoadOptions) -> Result<Self, LoadError> {
        let device = Device::Cpu;
        let (decoder, tokenizer, template) = if path.is_dir() {
            let decoder = Decoder::from_hf_dir(path, options.dtype, &device)?;
            let tokenizer = TextTokenizer::from_dir(path)?;
            let template = ChatTemplate::from_tokenizer_config(path.join("tokenizer_config.json"))?;
            (decoder, tokenizer, template)
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            let (tokenizer, template) = gguf_text(path)?;
            let decoder = Decoder::from_gguf(path, options.dtype, &device)?;
            (decoder, tokenizer, template)
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
        // Asked once here, since the engine asks on every request.
        let system_role = template
            .render(
                &[
                    ChatMessage::new(Role::System, "s"),
                    ChatMessage::new(Role::User, "u"),
                ],
                true,
            )
            .is_ok();
        Ok(Self {
            info: BackendInfo {
                model_id,
                revision: options.revision.clone(),
                context_length,
                vision: false,
                max_token_bytes: tokenizer.max_token_bytes(),
            },
            decoder,
            tokenizer,
            template,
            system_role,
            layout: options.layout,
            budget: options.budget,
        })
    }

    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Score branches with a chosen layout, for benchmarks comparing the two.
    pub fn set_layout(&mut self, layout: BranchLayout) {
        self.layout = layout;
    }
}

/// The tokenizer and chat template a GGUF file carries in its metadata, for a backend that
/// runs the file's weights elsewhere but tokenizes and renders exactly as this one does.
pub fn gguf_text(path: &Path) -> Result<(TextTokenizer, ChatTemplate), LoadError> {
    let content = read_gguf_header(path)?;
    Ok((
        TextTokenizer::from_gguf(&content)?,
        ChatTemplate::from_gguf(&content)?,
    ))
}

fn read_gguf_header(path: &Path) -> Result<gguf_file::Content, LoadError> {
    let mut file = std::fs::File::open(path).map_err(|source| LoadError::Io {
        path: path.into(),
        source,
    })?;
    Ok(gguf_file::Content::read(&mut file)?)
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
        self.template
            .render(messages, true)
            .map_err(|err| BackendError::Template {
                message: err.to_string(),
                source: Some(Box::new(err)),
            })
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.tokenizer
            .encode(text)
            .map_err(|err| BackendError::Tokenizer {
                source: Box::new(err),
            })
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
        let vocab = self.decoder.config().vocab_size;
        for (index, branch) in branches.iter().enumerate() {
            let needed = prefix.len() + branch.tokens.len();
            if needed > self.info.context_length {
                return Err(BackendError::ContextExceeded {
                    branch: index,
                    needed,
                    limit: self.info.context_length,
                });
            }
            if branch.tokens.is_empty() {
                return Err(BackendError::InvalidBranch {
                    branch: index,
                    reason: "a branch needs at least one token".into(),
                });
            }
            if let Some(code) = branch.codes.iter().find(|&&c| c as usize >= vocab) {
                return Err(BackendError::InvalidBranch {
                    branch: index,
                    reason: format!("code id {code} is outside the vocabulary of {vocab}"),
                });
            }
        }
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
            })
            .collect())
    }

    fn accepts_system_role(&self) -> bool {
        self.system_role
    }
}
