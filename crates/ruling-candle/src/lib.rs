//! The ruling [`Backend`](ruling_backend::Backend) on candle, for CPU inference.
//!
//! One decoder implementation covers the llama, qwen2, qwen3 and gemma3 families, which differ
//! in a handful of switches (see [`config`]). Weights load from a quantized GGUF file (kept
//! quantized or dequantized, by choice) or from a Hugging Face directory of safetensors. The
//! KV cache is an explicit value, so a state's prefix is encoded once and many short branches
//! (one per question and rotation) are scored against it; only the hidden state at each
//! branch's answer position goes through the output head.

mod backend;
pub mod config;
pub mod decoder;
mod error;
pub mod lora;
pub mod template;
mod text;
pub mod tokenizer;
mod weights;

pub use backend::{CandleBackend, LoadOptions};
pub use config::{Activation, DecoderConfig, Family, RopeStyle};
pub use decoder::{BranchBudget, BranchLayout, CodeLogits, Decoder, KvCache, PREFILL_CHUNK};
pub use error::LoadError;
pub use lora::{
    Adapter, AdapterError, AdapterMeta, BaseModel, LoraConfig, LoraWeights, Projection,
};
pub use template::{ChatTemplate, TemplateError};
pub use text::ChatText;
pub use tokenizer::{TextTokenizer, TokenizerError};
pub use weights::{Linear, WeightDtype};
