//! Labelled data as typed-question records, for the evaluator, the trainer and calibration.
//!
//! It owns the JSONL record of DESIGN.md ([`Record`]: a state, System One questions about it,
//! labels and soft targets, a weight) with its reading and atomic writing, and one reader per
//! dataset under `shared/datasets/` that turns rows into records asking the question type the
//! dataset exercises. Every dataset is split into development data and held-out data exactly as
//! the datasets README says ([`Split`]); [`load`] reads one split of one [`Dataset`], never
//! both, and refuses a split the dataset does not have.
//!
//! [`build_training_set`] turns the development splits into the decision encoder's training
//! records, each row asked in a varied wording, and drops every row whose state also occurs in
//! a held-out split.
//!
//! It depends on `ruling-schema` for the question types and on no tensor library, model code,
//! async runtime or HTTP stack: reading a dataset never needs a model.

pub mod coherence;
mod dataset;
mod error;
pub mod journal;
mod jsonl;
pub mod pool;
mod record;
mod sources;
pub mod taxonomy;
mod training;

pub use dataset::{
    DATASETS_ENV, Dataset, DatasetInfo, LoadOptions, MAX_CLINC_SUBSET, ParseNameError, Split,
    catalog, default_root, load,
};
pub use error::CorpusError;
pub use jsonl::{read_jsonl, read_jsonl_from, write_jsonl};
pub use record::{Label, NOUL_KEYS, Record, RecordError, Reference, Target, answer_keys};
pub use training::{
    HeldOutStates, SourceReport, TrainingOptions, TrainingSet, TrainingSource, build_training_set,
    held_out_states, state_key,
};
