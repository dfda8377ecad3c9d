//! The checkpoint's own `tokenizer.json`, with truncation and padding switched off (the layout
//! adds its own special tokens and bounds lengths itself), and the special tokens it needs.

use std::path::Path;

use crate::error::EncoderError;
use crate::pack::Special;

/// A WordPiece or BPE tokenizer read from `tokenizer.json`.
#[derive(Debug, Clone)]
pub struct EncoderTokenizer {
    inner: tokenizers::Tokenizer,
    special: Special,
}

impl EncoderTokenizer {
    pub fn load(path: &Path) -> Result<Self, EncoderError> {
        let failed = |message: String| EncoderError::Tokenizer {
            path: path.to_owned(),
            message,
        };
        let mut inner =
            tokenizers::Tokenizer::from_file(path).map_err(|e| failed(e.to_string()))?;
        inner
            .with_truncation(None)
            .map_err(|e| failed(e.to_string()))?;
        inner.with_padding(None);
        let id = |token: &'static str| {
            inner
                .token_to_id(token)
                .ok_or(EncoderError::MissingSpecialToken(token))
        };
        let special = Special {
            cls: id("[CLS]")?,
            sep: id("[SEP]")?,
            mask: id("[MASK]")?,
            pad: id("[PAD]")?,
        };
        Ok(Self { inner, special })
    }

    pub fn special(&self) -> Special {
        self.special
    }

    /// The ids of `text` without any special tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, EncoderError> {
        self.inner
            .encode_fast(text, false)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| EncoderError::Tokenizer {
                path: "tokenizer.json".into(),
                message: e.to_string(),
            })
    }

    /// The ids of several texts, encoded on the tokenizer's own threads.
    pub fn encode_all(&self, texts: &[String]) -> Result<Vec<Vec<u32>>, EncoderError> {
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.inner
            .encode_batch_fast(inputs, false)
            .map(|encodings| encodings.iter().map(|e| e.get_ids().to_vec()).collect())
            .map_err(|e| EncoderError::Tokenizer {
                path: "tokenizer.json".into(),
                message: e.to_string(),
            })
    }
}
