//! `cargo xtask bench`: programs that measure and write a report under `docs/bench/`.

mod decoder;
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
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    match &args.what {
        Bench::Decoder(args) => decoder::run(args),
        Bench::Serve(args) => serve::run(args),
    }
}
