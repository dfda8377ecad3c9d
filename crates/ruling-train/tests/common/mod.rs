//! What the trainer tests share: the workspace, running `ruling-train`, and reading a run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run a trainer command to success, or fail the test with its stderr.
pub fn run(mut command: Command) -> Output {
    let output = command.output().expect("ruling-train starts");
    assert!(
        output.status.success(),
        "ruling-train failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Run a trainer command that must be refused; its stderr.
pub fn fails(mut command: Command) -> String {
    let output = command.output().expect("ruling-train starts");
    assert!(!output.status.success(), "ruling-train should have refused");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn sha256(path: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

/// The latest saved step of a run, if it has saved one.
pub fn latest_step(output: &Path) -> Option<u64> {
    let name = std::fs::read_to_string(output.join("run/latest")).ok()?;
    name.trim().strip_prefix("step-")?.parse().ok()
}
