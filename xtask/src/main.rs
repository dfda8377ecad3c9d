//! `cargo xtask`: the project's own automation, written in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask fixtures` writes the tiny random-weight models the tests load.
//! - `cargo xtask bench decoder` measures the decoder and writes `docs/bench/decoder.md`.
//! - `cargo xtask ci` is the whole test pipeline that README.md and `.ci/run` call.

use clap::{Parser, Subcommand};

mod bench;
mod ci;
mod fixtures;

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
    /// Run the whole test pipeline: fmt, clippy, cargo-deny, dependency rules, fixtures, tests.
    Ci(ci::CiArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Fixtures(args) => fixtures::run(&args),
        Command::Ci(args) => ci::run(&args),
        Command::Bench(args) => bench::run(&args),
    }
}
