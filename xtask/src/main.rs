//! `cargo xtask`: the project's own automation, written in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask fixtures` writes the tiny random-weight models the tests load.
//! - `cargo xtask bench decoder` measures the decoder and writes `docs/bench/decoder.md`.
//! - `cargo xtask ci` is the whole test pipeline that README.md and `.ci/run` call.
//! - `cargo xtask fuzz` runs the coverage-guided fuzz target on request validation.
//! - `cargo xtask outside` builds and runs a project outside the workspace against the crates
//!   as `cargo package` makes them.
//! - `cargo xtask serve` installs the llama.cpp build's system packages if missing, then runs
//!   `ruling-serve` (README.md's first command).

use clap::{Parser, Subcommand};

mod bench;
mod ci;
mod fixtures;
mod fuzz;
mod outside;
mod prereq;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "ruling project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate the tiny random-weight model fixtures (deterministic from a seed).
    Fixtures(fixtures::FixturesArgs),
    /// Measure and write a report (`cargo xtask bench decoder`).
    Bench(bench::BenchArgs),
    /// Run the whole test pipeline: fmt, clippy, cargo-deny, dependency rules, tests, fuzz.
    Ci(ci::CiArgs),
    /// Fuzz request validation for a bounded time (`--seconds`), or `--merge` what a run found.
    Fuzz(fuzz::FuzzArgs),
    /// Build and run `examples/outside-workspace` against the packaged crates, as a user who
    /// ran `cargo add ruling-core` would.
    Outside,
    /// Install the build's system packages if missing, then build and run `ruling-serve`
    /// (release) with these arguments (`--help` is ruling-serve's).
    #[command(disable_help_flag = true)]
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Fixtures(args) => fixtures::run(&args),
        Command::Ci(args) => ci::run(&args),
        Command::Fuzz(args) => fuzz::run(&args),
        Command::Outside => outside::run(),
        Command::Bench(args) => bench::run(&args),
        Command::Serve { args } => serve(&args),
    }
}

/// The workspace this xtask belongs to.
fn workspace_root() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .context("xtask sits inside the workspace")
}

fn serve(args: &[String]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    prereq::ensure()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .args(["run", "--release", "-p", "ruling-serve", "--"])
        .args(args)
        .status()
        .with_context(|| format!("could not start {cargo}"))?;
    std::process::exit(status.code().unwrap_or(1));
}
