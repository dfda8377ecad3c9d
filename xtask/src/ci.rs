//! The whole test pipeline, one step after another, stopping at the first failure.
//!
//! README.md's test command and `.ci/run` both call this, so a developer and CI run exactly
//! the same checks. Tools the pipeline needs and a fresh machine lacks are installed on first
//! use: the llama.cpp build's system packages with apt-get (`prereq.rs`), cargo-deny from
//! crates.io. After the tests: the crates packaged as crates.io would take them, a project
//! outside the workspace built against those packages (`outside.rs`), the documentation with
//! warnings denied, and a minute of fuzzing on request validation (`fuzz.rs`).

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

/// Crates that sit above no tensor library, async runtime or HTTP stack (DESIGN.md, "Layers").
const PURE_CRATES: &[&str] = &[
    "ruling-schema",
    "ruling-calibration",
    "ruling-backend",
    "ruling-corpus",
];
const FORBIDDEN_IN_PURE: &[&str] = &["candle-core", "candle-nn", "tokio", "axum", "hyper"];

#[derive(Debug, clap::Args)]
pub struct CiArgs {
    /// Skip the formatting, clippy and cargo-deny steps and only run the tests.
    #[arg(long)]
    tests_only: bool,
}

pub fn run(args: &CiArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    step_fn("system packages", crate::prereq::ensure_for_tests)?;
    if !args.tests_only {
        step("format", cargo(&["fmt", "--all", "--", "--check"]))?;
        step(
            "clippy",
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
        ensure_cargo_deny()?;
        // `cargo deny --offline` reads every crate in Cargo.lock, including those only other
        // platforms build (WASI, Windows), which a Linux build never downloads.
        step(
            "fetch every platform's crates",
            cargo(&["fetch", "--locked"]),
        )?;
        step(
            "cargo-deny",
            cargo(&["deny", "--offline", "check", "licenses", "bans", "sources"]),
        )?;
        step_fn("dependency rules", check_pure_crates)?;
    }
    step("fixtures", cargo(&["xtask", "fixtures"]))?;
    step(
        "tests",
        cargo(&["test", "--workspace", "--all-targets", "--no-fail-fast"]),
    )?;
    step("doc tests", cargo(&["test", "--workspace", "--doc"]))?;
    // Every publishable crate packages and its manifest is complete. Not verified by building
    // each package here: that rebuilds every crate and llama.cpp outside the workspace; the
    // next step builds ruling-core and everything it depends on from the packages instead.
    step(
        "package for crates.io",
        cargo(&[
            "publish",
            "--workspace",
            "--dry-run",
            "--allow-dirty",
            "--no-verify",
        ]),
    )?;
    step_fn("a project outside the workspace", crate::outside::run)?;
    let mut doc = cargo(&["doc", "--workspace", "--no-deps"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    step("documentation", doc)?;
    step_fn("fuzz request validation", || {
        crate::fuzz::run(&crate::fuzz::FuzzArgs {
            seconds: 60,
            merge: false,
        })
    })?;
    eprintln!("ci: all steps passed in {:.0?}", started.elapsed());
    Ok(())
}

pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.args(args);
    command
}

fn step(name: &str, command: Command) -> anyhow::Result<()> {
    step_fn(name, || run_command(command))
}

/// Run `command` to the end; fail unless it exits with success.
pub(crate) fn run_command(mut command: Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("could not start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(())
}

fn step_fn(name: &str, body: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    eprintln!("ci: == {name} ==");
    let started = Instant::now();
    body().with_context(|| format!("ci step `{name}` failed"))?;
    eprintln!("ci: {name} passed in {:.1?}", started.elapsed());
    Ok(())
}

fn ensure_cargo_deny() -> anyhow::Result<()> {
    let present = cargo(&["deny", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if present {
        return Ok(());
    }
    eprintln!("ci: cargo-deny is missing; installing it from crates.io (a few minutes, once)");
    step(
        "install cargo-deny",
        cargo(&["install", "cargo-deny", "--locked"]),
    )
}

/// `cargo tree` of each pure crate's normal dependencies must name none of the heavy stacks.
fn check_pure_crates() -> anyhow::Result<()> {
    for krate in PURE_CRATES {
        let output = cargo(&[
            "tree",
            "--package",
            krate,
            "--edges",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .with_context(|| format!("could not run cargo tree for {krate}"))?;
        if !output.status.success() {
            bail!(
                "cargo tree -p {krate} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let tree = String::from_utf8_lossy(&output.stdout);
        for line in tree.lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if FORBIDDEN_IN_PURE.contains(&name) {
                bail!(
                    "{krate} depends on {name} ({line}); DESIGN.md keeps it free of tensor, async and HTTP crates"
                );
            }
        }
        eprintln!("ci: {krate}: no tensor, async or HTTP dependency");
    }
    Ok(())
}
