//! Shared by the `ruling-eval` end-to-end tests: where the workspace and the tiny fixture are,
//! and the built binary with a clean environment.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
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
