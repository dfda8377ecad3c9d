//! `cargo xtask bench`: programs that measure and write a report under `docs/bench/`.

mod decoder;
mod long;
mod serve;

/// `cargo xtask bench <what>`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: Bench,
}

#[derive(Debug, clap::Subcommand)]
enum Bench {
    /// The candle decoder: prefill, shared-prefix branches against the naive path, layouts.
    Decoder(decoder::DecoderBenchArgs),
    /// Models served by `ruling-serve`, driven over HTTP: latency, throughput, peak memory.
    Serve(serve::ServeBenchArgs),
    /// The decision encoder on states of 512 to 16,384 tokens through `ruling-serve`.
    /// Writes `docs/bench/long-states.md`.
    Long(long::LongBenchArgs),
    /// The decoder backends side by side (candle, llama.cpp behind the port, plain
    /// llama.cpp): `ruling-bench` in release with these arguments (`--help` is its own).
    /// Writes `docs/bench/backends.md`.
    #[command(disable_help_flag = true)]
    Backends {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    match &args.what {
        Bench::Decoder(args) => decoder::run(args),
        Bench::Serve(args) => serve::run(args),
        Bench::Long(args) => long::run(args),
        Bench::Backends { args } => backends(args),
    }
}

/// A separate binary, so xtask itself never links llama.cpp.
fn backends(args: &[String]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    crate::prereq::ensure()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .args(["run", "--release", "-p", "ruling-bench", "--"])
        .args(args)
        .status()
        .with_context(|| format!("could not start {cargo}"))?;
    anyhow::ensure!(status.success(), "ruling-bench failed ({status})");
    Ok(())
}
