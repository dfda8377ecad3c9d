//! `cargo xtask outside`: a program outside the workspace (`examples/outside-workspace`) that
//! depends on `ruling-core` the way `cargo add ruling-core` writes it, built against the
//! crates exactly as `cargo package` makes them for crates.io, and run on README.md's request.
//!
//! Nothing is published: each packaged crate is unpacked under `target/outside/crates` and
//! patched in for crates.io, so the example resolves `ruling-core = "0.1.0"` to the packaged
//! sources. A file a crate forgets to package, a path that only exists in the repository or
//! a dependency only the workspace supplies breaks this build, as it would break a user's.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::ci::{cargo, run_command};

/// The model the example answers with (pulled into `target/ruling-cache` by the tests).
const MODEL: &str = "smollm2-135m";

pub fn run() -> anyhow::Result<()> {
    let root = crate::workspace_root()?;
    let packaged = package(&root)?;
    let unpacked = root.join("target/outside/crates");
    if unpacked.exists() {
        std::fs::remove_dir_all(&unpacked)
            .with_context(|| format!("clearing {}", unpacked.display()))?;
    }
    std::fs::create_dir_all(&unpacked)
        .with_context(|| format!("creating {}", unpacked.display()))?;
    let example = root.join("examples/outside-workspace");
    // The versions the workspace is tested with; cargo drops what the example does not use.
    std::fs::copy(root.join("Cargo.lock"), example.join("Cargo.lock"))
        .context("copying Cargo.lock into the example")?;
    let mut command = cargo(&["run", "--release", "--manifest-path"]);
    command.arg(example.join("Cargo.toml"));
    for krate in &packaged {
        let mut tar = Command::new("tar");
        tar.arg("-xzf").arg(krate).arg("-C").arg(&unpacked);
        run_command(tar).with_context(|| format!("unpacking {}", krate.display()))?;
        let dir = unpacked.join(
            krate
                .file_stem()
                .context("a packaged crate has a file name")?,
        );
        let name = package_name(&dir)?;
        command.arg("--config").arg(format!(
            "patch.crates-io.{name}.path={:?}",
            dir.display().to_string()
        ));
    }
    command
        .arg("--")
        .arg(MODEL)
        .env("CARGO_TARGET_DIR", root.join("target/outside/target"))
        .env("RULING_CACHE", root.join("target/ruling-cache"))
        // The workspace's own build settings stay out: a user's project has none of them.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    eprintln!("outside: building examples/outside-workspace against the packaged crates");
    run_command(command).context("the example outside the workspace failed")
}

/// `cargo package` every publishable crate of the workspace; the `.crate` files made.
fn package(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    // `cargo package` writes under the target directory, which CARGO_TARGET_DIR may move.
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let dir = target.join("package");
    // Only this run's archives: an older version's would be patched in beside them.
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "crate") {
                std::fs::remove_file(entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
    }
    let mut command = cargo(&["package", "--no-verify", "--allow-dirty"]);
    for name in publishable(root)? {
        command.arg("--package").arg(name);
    }
    command.current_dir(root);
    run_command(command).context("cargo package")?;
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "crate"))
        .collect();
    crates.sort();
    if !crates
        .iter()
        .any(|c| c.to_string_lossy().contains("ruling-core-"))
    {
        bail!(
            "cargo package made no ruling-core archive in {}",
            dir.display()
        );
    }
    Ok(crates)
}

/// The workspace's crates that may be published (`publish = false` marks the others).
fn publishable(root: &Path) -> anyhow::Result<Vec<String>> {
    let output = cargo(&["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .context("could not run cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("reading cargo metadata's output")?;
    let names: Vec<String> = metadata["packages"]
        .as_array()
        .context("cargo metadata lists no packages")?
        .iter()
        // `publish` is null when any registry may take the crate, `[]` for `publish = false`.
        .filter(|p| p["publish"].is_null())
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    Ok(names)
}

/// The `name` of an unpacked crate's manifest.
fn package_name(dir: &Path) -> anyhow::Result<String> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name = ") {
            return Ok(value.trim_matches('"').to_owned());
        }
    }
    bail!("{} names no package", manifest.display())
}
