//! Shared by the `ruling-eval` end-to-end tests: where the workspace and the tiny fixture are,
//! and the built binary with a clean environment.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// The generated tiny llama GGUF; `cargo xtask fixtures` writes it.
pub fn tiny_llama() -> String {
    let path = workspace().join("fixtures/generated/tiny-llama.gguf");
    assert!(
        path.exists(),
        "{} is missing; run `cargo xtask fixtures`",
        path.display()
    );
    path.display().to_string()
}

/// The binary with no ruling settings inherited from the environment running the tests, the
/// test model cache, and no hub.
pub fn ruling_eval() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruling-eval"));
    for var in [
        "RULING_MODEL",
        "RULING_ROTATIONS",
        "RULING_PRIOR",
        "RULING_CALIBRATION",
        "RULING_DTYPE",
        "RULING_API_KEY",
        "RULING_DATASETS",
    ] {
        command.env_remove(var);
    }
    command
        .env("RULING_CACHE", workspace().join("target/ruling-cache"))
        .env("RULING_NO_HUB", "1");
    command
}

/// Stdout and stderr of a run that must have succeeded.
pub fn succeed(output: Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "ruling-eval failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    (stdout, stderr)
}

/// Writes a LoRA adapter named `name` for the tiny llama GGUF to `dir/adapter.safetensors`
/// (the base loaded as `ruling-core` loads it, so the adapter names the identity `--model`
/// gives) and returns its path. B is zero, as a fresh adapter's is: these tests follow the
/// adapter's digest, not what it does to the answers.
pub fn tiny_llama_adapter(dir: &Path, name: &str) -> PathBuf {
    use ruling_candle::lora::{ADAPTER_FORMAT, adapter_bytes};
    use ruling_candle::{AdapterMeta, LoraConfig, LoraWeights, Projection};

    let backend = ruling_core::load_candle(&tiny_llama(), &ruling_core::Options::default())
        .expect("the tiny llama loads");
    let config = backend.decoder().config();
    let lora = LoraConfig {
        rank: 2,
        scale: 1.0,
        dropout: 0.0,
        projections: vec![Projection::Q, Projection::V],
        layers: 1,
    };
    let tensors = LoraWeights::init(&lora, config, 7, backend.decoder().device())
        .expect("fresh adapter tensors");
    let meta = AdapterMeta {
        format: ADAPTER_FORMAT,
        name: name.to_owned(),
        lora,
        base: backend.base_model(),
        training: serde_json::json!({"test": true}),
    };
    let path = dir.join("adapter.safetensors");
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(
        &path,
        adapter_bytes(&meta, &tensors).expect("adapter bytes"),
    )
    .expect("write");
    path
}
