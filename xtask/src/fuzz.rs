//! `cargo xtask fuzz`: the coverage-guided fuzz target on request validation (`fuzz/`), on the
//! stable toolchain.
//!
//! cargo-fuzz needs nightly for its sanitizers; the coverage instrumentation libFuzzer steers by
//! is plain `-C` flags, so this builds `fuzz/` with them directly (for the host triple given
//! explicitly, so build scripts and proc macros stay uninstrumented, as cargo-fuzz does) and runs
//! the binary. The committed corpus (`fuzz/corpus/validate_request`) is read, never written: new
//! inputs go to `target/fuzz/corpus`, a crashing input to `target/fuzz/artifacts`. `--merge`
//! folds what a long run found back into the committed corpus, keeping only inputs that add
//! coverage.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::ci::run_command;

const TARGET: &str = "validate_request";

/// The flags cargo-fuzz passes for libFuzzer's coverage, without its (nightly-only) sanitizers.
const COVERAGE_FLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "-Cllvm-args=-sanitizer-coverage-stack-depth",
    "-Cdebug-assertions",
    "-Coverflow-checks",
    "--cfg=fuzzing",
];

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// How long to fuzz, in seconds, after replaying the committed corpus.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Instead of fuzzing, merge the inputs a run found (`target/fuzz/corpus`) into the
    /// committed corpus, keeping only those that add coverage.
    #[arg(long)]
    pub merge: bool,
}

pub fn run(args: &FuzzArgs) -> anyhow::Result<()> {
    let root = crate::workspace_root()?;
    let binary = build(&root)?;
    let committed = root.join("fuzz/corpus").join(TARGET);
    let found = root.join("target/fuzz/corpus");
    let artifacts = root.join("target/fuzz/artifacts");
    for dir in [&found, &artifacts] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut command = Command::new(&binary);
    if args.merge {
        command.arg("-merge=1").arg(&committed).arg(&found);
    } else {
        command
            .arg(format!("-max_total_time={}", args.seconds))
            // A validation that takes a second on one input is a bug worth a report.
            .arg("-timeout=10")
            .arg("-rss_limit_mb=4096")
            .arg("-max_len=65536")
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg(&found)
            .arg(&committed);
    }
    eprintln!("fuzz: {command:?}");
    run_command(command).with_context(|| {
        format!(
            "the fuzz target failed; the input that broke it is in {}, replay it with `{} FILE`",
            artifacts.display(),
            binary.display()
        )
    })
}

/// Build the instrumented target; its path.
fn build(root: &Path) -> anyhow::Result<PathBuf> {
    let host = host_triple()?;
    let target_dir = root.join("target/fuzz");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "--release", "--bin", TARGET, "--target", &host])
        .arg("--manifest-path")
        .arg(root.join("fuzz/Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", COVERAGE_FLAGS.join(" "))
        // The workspace's own settings (its profile, a RUSTFLAGS of the caller) stay out.
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    run_command(command).context("building the fuzz target")?;
    Ok(target_dir.join(host).join("release").join(TARGET))
}

fn host_triple() -> anyhow::Result<String> {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("could not run rustc -vV")?;
    let text = String::from_utf8_lossy(&output.stdout);
    match text.lines().find_map(|line| line.strip_prefix("host: ")) {
        Some(host) => Ok(host.trim().to_owned()),
        None => bail!("rustc -vV named no host triple:\n{text}"),
    }
}
