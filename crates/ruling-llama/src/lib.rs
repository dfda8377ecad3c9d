//! The ruling [`Backend`](ruling_backend::Backend) on llama.cpp's CPU kernels.
//!
//! A GGUF file's weights run in llama.cpp (through the `llama-cpp-2` crate); its tokenizer and
//! chat template are read by the project's own code (`ruling-candle`'s `ChatText`), so this
//! backend and the candle one see the same token ids for the same text. A state's prefix is
//! run once into sequence 0 of a context with a unified KV cache and saved; each branch is a
//! sequence sharing the prefix's cells, all branches of a group go through one decode call
//! with logits asked for only at their last tokens, and their cells are removed afterwards.
//!
//! Contexts cannot be shared between threads, so each lives on a worker thread of its own
//! (`worker.rs`); a backend has one per engine worker, and the weights are loaded once.

mod backend;
mod error;
mod text;
mod worker;

pub use backend::{
    DEFAULT_BATCH, DEFAULT_CONTEXT, DEFAULT_SEQUENCES, LlamaCppBackend, LlamaPrefix, LoadOptions,
    runtime,
};
pub use error::LoadError;
