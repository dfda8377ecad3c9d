//! How the llama backend turns prompts into tokens: ruling's own tokenizer and template
//! ([`ChatText`], the same code as the candle backend's), or, for a GGUF whose vocabulary that
//! tokenizer cannot build (a pre-tokenizer it does not know, a unigram or WordPiece
//! vocabulary), llama.cpp's own vocabulary under the same template. Either way the backend
//! contract is proven at load (`verify_backend`: the answer codes and the prompt seam).

use std::path::Path;

use candle_core::quantized::gguf_file;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use ruling_backend::{BackendError, ChatMessage};
use ruling_candle::{ChatTemplate, ChatText, TextTokenizer, TokenizerError};

use crate::error::LoadError;

/// A model's prompt text: whose tokenizer, and its chat template.
#[derive(Debug)]
pub(crate) enum Text {
    Ours(Box<ChatText>),
    Llama(Box<LlamaText>),
}

/// llama.cpp's vocabulary under the GGUF's chat template.
#[derive(Debug)]
pub(crate) struct LlamaText {
    template: ChatTemplate,
    system_role: bool,
    end_tokens: Vec<u32>,
}

impl Text {
    /// ruling's tokenizer where it reads the vocabulary; `Err` with the reason where only
    /// llama.cpp can (any other failure, such as a broken template, is an error as before).
    pub(crate) fn ours(path: &Path) -> Result<Result<Self, String>, LoadError> {
        match ChatText::from_gguf(path) {
            Ok(text) => Ok(Ok(Self::Ours(Box::new(text)))),
            Err(ruling_candle::LoadError::Tokenizer(
                err @ (TokenizerError::Unsupported { .. } | TokenizerError::UnsupportedPre { .. }),
            )) => Ok(Err(err.to_string())),
            Err(err) => Err(err.into()),
        }
    }

    /// llama.cpp's vocabulary of the loaded `model`, with the template of the GGUF at `path`.
    pub(crate) fn llama(path: &Path, model: &LlamaModel) -> Result<Self, LoadError> {
        let mut file = std::fs::File::open(path).map_err(|err| LoadError::Model {
            path: path.into(),
            message: err.to_string(),
        })?;
        let content = gguf_file::Content::read(&mut file).map_err(|err| LoadError::Model {
            path: path.into(),
            message: err.to_string(),
        })?;
        let template = ChatTemplate::from_gguf(&content)
            .map_err(|err| LoadError::from(ruling_candle::LoadError::from(err)))?;
        let system_role = template.accepts_system_role();
        let vocab = model.vocab();
        let end_tokens = (0..vocab.n_tokens())
            .filter(|&id| vocab.is_eog(LlamaToken(id)))
            .filter_map(|id| u32::try_from(id).ok())
            .collect();
        Ok(Self::Llama(Box::new(LlamaText {
            template,
            system_role,
            end_tokens,
        })))
    }

    /// ruling's tokenizer, when it is the one in use.
    pub(crate) fn tokenizer(&self) -> Option<&TextTokenizer> {
        match self {
            Self::Ours(text) => Some(text.tokenizer()),
            Self::Llama(_) => None,
        }
    }

    /// The longest token's text in bytes.
    pub(crate) fn max_token_bytes(&self, model: &LlamaModel) -> usize {
        match self {
            Self::Ours(text) => text.tokenizer().max_token_bytes(),
            Self::Llama(_) => {
                let vocab = model.vocab();
                (0..vocab.n_tokens())
                    .map(|id| vocab.token_to_piece(LlamaToken(id), true, None).len())
                    .max()
                    .unwrap_or(1)
            }
        }
    }

    pub(crate) fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        match self {
            Self::Ours(text) => text.render_chat(messages),
            Self::Llama(text) => {
                text.template
                    .render(messages, true)
                    .map_err(|err| BackendError::Template {
                        message: err.to_string(),
                        source: Some(Box::new(err)),
                    })
            }
        }
    }

    pub(crate) fn encode(&self, model: &LlamaModel, text: &str) -> Result<Vec<u32>, BackendError> {
        match self {
            Self::Ours(ours) => ours.encode(text),
            Self::Llama(_) => Ok(llama_tokenize(model, text)),
        }
    }

    pub(crate) fn encode_continuation(
        &self,
        model: &LlamaModel,
        text: &str,
    ) -> Result<Vec<u32>, BackendError> {
        match self {
            Self::Ours(ours) => ours.encode_continuation(text),
            Self::Llama(_) => Ok(llama_tokenize(model, text)),
        }
    }

    pub(crate) fn decode(
        &self,
        model: &LlamaModel,
        tokens: &[u32],
    ) -> Result<String, BackendError> {
        match self {
            Self::Ours(text) => text.decode(tokens),
            Self::Llama(_) => {
                let tokens: Vec<LlamaToken> = tokens
                    .iter()
                    .map(|&t| LlamaToken(i32::try_from(t).unwrap_or(i32::MAX)))
                    .collect();
                Ok(
                    String::from_utf8_lossy(&model.vocab().detokenize(&tokens, false, true))
                        .into_owned(),
                )
            }
        }
    }

    pub(crate) fn end_tokens(&self) -> &[u32] {
        match self {
            Self::Ours(text) => text.end_tokens(),
            Self::Llama(text) => &text.end_tokens,
        }
    }

    pub(crate) fn accepts_system_role(&self) -> bool {
        match self {
            Self::Ours(text) => text.accepts_system_role(),
            Self::Llama(text) => text.system_role,
        }
    }
}

/// llama.cpp's own tokenization of `text`: no special tokens added, those written in it
/// recognised.
pub(crate) fn llama_tokenize(model: &LlamaModel, text: &str) -> Vec<u32> {
    model
        .vocab()
        .tokenize(text.as_bytes(), false, true)
        .into_iter()
        .map(|t| u32::try_from(t.0).unwrap_or(0))
        .collect()
}
