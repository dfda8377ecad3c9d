//! [`ChatText`]: a model's tokenizer and chat template as the [`ruling_backend::Backend`] port
//! presents them. Every decoder backend (candle's and llama.cpp's) holds one, so both render
//! and tokenize a prompt through the same code.

use std::path::Path;

use candle_core::quantized::gguf_file;
use ruling_backend::{BackendError, ChatMessage, Role};

use crate::error::LoadError;
use crate::template::ChatTemplate;
use crate::tokenizer::TextTokenizer;

/// A tokenizer, its chat template, and whether the template takes a system turn (asked once
/// here, since the engine asks on every request).
#[derive(Debug)]
pub struct ChatText {
    tokenizer: TextTokenizer,
    template: ChatTemplate,
    system_role: bool,
    end_tokens: Vec<u32>,
}

impl ChatText {
    pub fn new(tokenizer: TextTokenizer, template: ChatTemplate) -> Self {
        let system_role = template.accepts_system_role();
        let end_tokens = end_tokens(&tokenizer, &template);
        Self {
            tokenizer,
            template,
            system_role,
            end_tokens,
        }
    }

    /// The tokenizer and chat template a GGUF file carries in its metadata.
    pub fn from_gguf(path: &Path) -> Result<Self, LoadError> {
        let mut file = std::fs::File::open(path).map_err(|source| LoadError::Io {
            path: path.into(),
            source,
        })?;
        let content = gguf_file::Content::read(&mut file)?;
        Ok(Self::new(
            TextTokenizer::from_gguf(&content)?,
            ChatTemplate::from_gguf(&content)?,
        ))
    }

    /// The tokenizer and chat template of a Hugging Face directory (`tokenizer.json`,
    /// `tokenizer_config.json`).
    pub fn from_dir(dir: &Path) -> Result<Self, LoadError> {
        Ok(Self::new(
            TextTokenizer::from_dir(dir)?,
            ChatTemplate::from_tokenizer_config(dir.join("tokenizer_config.json"))?,
        ))
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// [`ruling_backend::Backend::render_chat`]: the template with the assistant's turn open.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        self.template
            .render(messages, true)
            .map_err(|err| BackendError::Template {
                message: err.to_string(),
                source: Some(Box::new(err)),
            })
    }

    /// [`ruling_backend::Backend::encode`].
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.tokenizer
            .encode(text)
            .map_err(|err| BackendError::Tokenizer {
                source: Box::new(err),
            })
    }

    /// [`ruling_backend::Backend::encode_continuation`].
    pub fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.tokenizer
            .encode_continuation(text)
            .map_err(|err| BackendError::Tokenizer {
                source: Box::new(err),
            })
    }

    pub fn accepts_system_role(&self) -> bool {
        self.system_role
    }

    /// The tokens that end a generation: the end-of-text token, and the token the template
    /// closes an assistant turn with (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, ...).
    pub fn end_tokens(&self) -> &[u32] {
        &self.end_tokens
    }

    /// [`ruling_backend::Generator::decode`]: the text of generated tokens.
    pub fn decode(&self, tokens: &[u32]) -> Result<String, BackendError> {
        self.tokenizer
            .decode(tokens)
            .map_err(|err| BackendError::Tokenizer {
                source: Box::new(err),
            })
    }
}

/// The end-of-text id, and the first token the template writes after an assistant turn's
/// content: found by rendering one, so no list of marker spellings is needed.
fn end_tokens(tokenizer: &TextTokenizer, template: &ChatTemplate) -> Vec<u32> {
    const CONTENT: &str = "Done.";
    let mut ends: Vec<u32> = tokenizer.eos_id().into_iter().collect();
    let closed = template.render(
        &[
            ChatMessage::new(Role::User, "u"),
            ChatMessage::new(Role::Assistant, CONTENT),
        ],
        false,
    );
    if let Ok(rendered) = closed
        && let Some(at) = rendered.rfind(CONTENT)
        && let Ok(after) = tokenizer.encode(&rendered[at + CONTENT.len()..])
        && let Some(&first) = after.first()
        && tokenizer
            .inner()
            .get_added_tokens_decoder()
            .get(&first)
            .is_some_and(|token| token.special)
        && !ends.contains(&first)
    {
        ends.push(first);
    }
    ends
}
