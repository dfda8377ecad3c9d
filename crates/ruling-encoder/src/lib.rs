//! The decision encoder: a small bidirectional model that answers every typed question of a
//! request in one forward pass, with no letter codes and no rotations.
//!
//! The state and every question go into one sequence (`pack`): each option is a `[MASK]`
//! slot followed by its text, all options of a question start at the same position, and a
//! 3-D attention mask lets each question see only the state and itself and each option only
//! the state, its question and itself. A linear head scores each slot (`model`); a softmax
//! over a question's slots is its answer. Answers therefore cannot depend on which other
//! questions are asked or in which order the options come: order-invariance is a property of
//! the computation, not of debiasing.
//!
//! Two encoder families, one file each and each reading its checkpoint's own config and tensor
//! names: BERT (`bert`) and ModernBERT (`modernbert`). `checkpoint` reads and checks encoder
//! directories; `engine` serves a trained one behind the `Engine` port.

mod attend;
pub mod bert;
pub mod checkpoint;
mod engine;
mod error;
pub mod kernels;
pub mod layout;
pub mod model;
pub mod modernbert;
pub mod ops;
pub mod pack;
mod rowwise;
pub mod tiles;
mod tokenizer;
pub mod train;

pub use checkpoint::{BaseIdentity, CheckpointMeta, EncoderFiles};
pub use engine::{
    DEFAULT_MAX_REQUEST_TOKENS, DEFAULT_MAX_STATE_TOKENS, EncoderEngine, EncoderOptions, Scored,
    ScoredQuestion, provenance,
};
pub use error::EncoderError;
pub use model::{BatchTensors, DecisionModel, Encoder, FamilyConfig};
pub use ops::{AttentionMask, Kernels};
pub use pack::{
    EncoderQuestion, Limits, PackError, Packed, PrepareError, Prepared, QuestionTokens, Special,
    WINDOW_OVERLAP, pack, prepare, windows,
};
pub use tokenizer::EncoderTokenizer;

#[cfg(test)]
mod testing {
    /// `n` reproducible values in [-0.5, 0.5) from `seed` (a linear congruential generator),
    /// for the kernels' tests.
    pub(crate) fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }
}
