//! `ruling-eval coherence`: the project's own metamorphic suite (`docs/coherence.md`).
//!
//! Programs combine a judge's answers (negate them, merge options, threshold scores), which
//! is sound only when the probabilities obey the rules probability says they must. The
//! suite asks development states' questions and the variants `ruling_corpus::coherence`
//! derives from them, of a model in this process or of any System One server, and reports,
//! per relation and per dimension, the share of tests whose answers agree within a
//! tolerance, with a bootstrap interval.
//!
//! - `states.rs`: the development states (never a held-out one) and their base questions;
//! - `measure.rs`: one state's requests and tests;
//! - `score.rs`: the shares and their intervals; `report.rs`: `report.md`, `report.json`,
//!   the figure.
//!
//! One journal line per state (`states.jsonl`) is appended as the run goes, so a run cut
//! short resumes where it stopped; the report is rewritten from the whole journal at the end.

mod measure;
mod report;
mod score;
mod states;

use std::collections::HashSet;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use ruling_core::{Options, Ruling, WeightDtype};
use ruling_corpus::Dataset;
use ruling_corpus::coherence::Relation;
use ruling_corpus::journal::{Appender, read_journal, repair};
use serde::{Deserialize, Serialize};

use crate::client::{Client, HttpClient};
use crate::results::write_atomic;
use measure::{Measure, StateOutcome};

/// The settings file of a suite directory.
const MANIFEST_FILE: &str = "coherence.json";
/// The journal: one [`StateOutcome`] per line.
const JOURNAL_FILE: &str = "states.jsonl";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  ruling-eval coherence --model ruling-judge-minilm-l6 --states 200 --out runs/coherence-judge
  ruling-eval coherence --model qwen2.5-1.5b --rotations 2 --prior --states 100 \\
      --out runs/coherence-qwen
  ruling-eval coherence --url http://127.0.0.1:8000 --api-key $KEY --states 100 \\
      --relations negation-wrapper,merge,threshold --out runs/coherence-server")]
pub struct CoherenceArgs {
    /// In-process: a catalog name, `hf:org/repo[@revision]`, `encoder:PATH` or a local path.
    /// With --url: the name requests carry (default: the first the server lists).
    #[arg(long, env = "RULING_MODEL", required_unless_present = "url")]
    model: Option<String>,
    /// Ask a System One server at this base URL instead of a model in this process.
    #[arg(long)]
    url: Option<String>,
    /// Bearer key for --url.
    #[arg(long, env = "RULING_API_KEY", hide_env_values = true, requires = "url")]
    api_key: Option<String>,
    /// The suite directory (created; rerunning into it resumes).
    #[arg(long)]
    out: PathBuf,
    /// Development states measured, spread evenly over the datasets.
    #[arg(long, default_value_t = 100)]
    states: usize,
    /// Seeds the states, the questions, the variants and the bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Largest deviation a passing test may have.
    #[arg(long, default_value_t = 0.05)]
    tolerance: f64,
    /// Relations to run, comma-separated (default: all; docs/coherence.md lists them).
    #[arg(long, value_delimiter = ',')]
    relations: Vec<String>,
    /// Datasets the states come from (development splits only), comma-separated.
    #[arg(long = "datasets", value_delimiter = ',', default_value = states::DEFAULT_DATASETS)]
    datasets: Vec<String>,
    /// Base questions per state (more when the mix of types needs them: two nouls, a choice
    /// and a score).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=20))]
    questions: u64,
    /// Most questions one request asks (base questions and variants together).
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(2..=1000))]
    batch: u64,
    /// In-process: orderings averaged per question (default: the model's serving profile).
    #[arg(long, env = "RULING_ROTATIONS", value_parser = clap::value_parser!(u32).range(1..))]
    rotations: Option<u32>,
    /// In-process: subtract the content-free prior (default: the serving profile's choice).
    #[arg(long, env = "RULING_PRIOR")]
    prior: bool,
    /// In-process: a calibration file for this model and these settings.
    #[arg(long, env = "RULING_CALIBRATION")]
    calibration: Option<PathBuf>,
    /// In-process: leave settings not given at the engine's defaults instead of the model's
    /// serving profile.
    #[arg(long)]
    no_profile: bool,
    /// In-process: what runs a decoder, candle or llama.
    #[arg(long, env = "RULING_BACKEND", default_value_t = ruling_core::DecoderBackend::default())]
    backend: ruling_core::DecoderBackend,
    /// In-process: the precision weight matrices are kept at (auto, native, f32, f16, q8_0).
    #[arg(long, env = "RULING_DTYPE", default_value = "auto")]
    dtype: WeightDtype,
    /// In-process: the model cache root.
    #[arg(long, env = "RULING_CACHE")]
    cache: Option<PathBuf>,
    /// The datasets folder (default: $RULING_DATASETS, else shared/datasets beside the
    /// workspace).
    #[arg(long)]
    datasets_root: Option<PathBuf>,
    /// When stderr is not a terminal, log progress every this many states.
    #[arg(long, default_value_t = 10)]
    log_every: usize,
}

/// The settings a suite directory was measured under; a rerun into it with others is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    /// `in-process` or `http`.
    pub mode: String,
    pub model: String,
    pub url: Option<String>,
    /// The engine's settings in a line.
    pub settings: String,
    pub seed: u64,
    pub datasets: Vec<String>,
    pub relations: Vec<Relation>,
    pub questions: usize,
    pub batch: usize,
}

pub fn coherence(args: CoherenceArgs) -> anyhow::Result<()> {
    ensure!(
        args.tolerance > 0.0 && args.tolerance < 1.0,
        "--tolerance must lie between 0 and 1, got {}",
        args.tolerance
    );
    let relations = relations(&args.relations)?;
    let datasets: Vec<Dataset> = args
        .datasets
        .iter()
        .map(|d| d.parse::<Dataset>().map_err(anyhow::Error::from))
        .collect::<anyhow::Result<_>>()?;
    let started = Instant::now();
    let (states, dropped) = states::development(
        &datasets,
        args.states,
        args.questions as usize,
        args.seed,
        args.datasets_root.clone(),
    )?;
    ensure!(!states.is_empty(), "the datasets gave no development state");
    eprintln!(
        "{} development states read in {:.1} s ({dropped} candidates dropped: a held-out split \
         holds them)",
        states.len(),
        started.elapsed().as_secs_f64()
    );

    let (client, model, mode, settings) = connect(&args)?;
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        mode: mode.to_owned(),
        model: model.clone(),
        url: args.url.clone(),
        settings,
        seed: args.seed,
        datasets: args.datasets.clone(),
        relations: relations.clone(),
        questions: args.questions as usize,
        batch: args.batch as usize,
    };
    pin_manifest(&args.out, &manifest)?;
    eprintln!("{mode} {model}: {}", manifest.settings);

    let journal = args.out.join(JOURNAL_FILE);
    let done = done_states(&journal)?;
    let pending: Vec<&states::SuiteState> =
        states.iter().filter(|s| !done.contains(&s.id)).collect();
    let measure = Measure {
        client: &client,
        model: &model,
        relations: &relations,
        batch: args.batch as usize,
        seed: args.seed,
    };
    let bar = progress_bar(states.len() as u64, (states.len() - pending.len()) as u64);
    let mut appender = Appender::open(&journal)?;
    let started = Instant::now();
    for (count, state) in pending.iter().enumerate() {
        let outcome = measure
            .state(state)
            .with_context(|| format!("state {}", state.id))?;
        appender.append(&outcome)?;
        bar.inc(1);
        let count = count + 1;
        if bar.is_hidden()
            && (count.is_multiple_of(args.log_every.max(1)) || count == pending.len())
        {
            eprintln!(
                "coherence: {}/{} states, {:.2}/s",
                states.len() - pending.len() + count,
                states.len(),
                count as f64 / started.elapsed().as_secs_f64().max(1e-9)
            );
        }
    }
    bar.finish_and_clear();

    let outcomes = read_journal::<StateOutcome>(&journal)?.lines;
    let scores = score::score(&outcomes, &relations, args.tolerance, args.seed);
    let report = report::report(manifest, &outcomes, scores);
    report::write(&args.out, &report)?;
    for dimension in &report.scores.dimensions {
        eprintln!("{}", line(dimension.dimension.as_str(), dimension.score));
    }
    eprintln!("{}", line("overall", report.scores.overall));
    eprintln!("wrote {}", args.out.join("report.md").display());
    Ok(())
}

fn line(name: &str, score: Option<score::Interval>) -> String {
    match score {
        Some(s) => format!(
            "{name:>15}: {:5.1} [{:.1}, {:.1}]",
            s.score, s.lower, s.upper
        ),
        None => format!("{name:>15}: no test"),
    }
}

/// `--relations` as relations (every one when none is given), each once.
fn relations(given: &[String]) -> anyhow::Result<Vec<Relation>> {
    if given.is_empty() {
        return Ok(Relation::ALL.to_vec());
    }
    let mut relations = Vec::new();
    for name in given {
        let relation: Relation = name.trim().parse()?;
        if !relations.contains(&relation) {
            relations.push(relation);
        }
    }
    // Report order is the catalogue's, whatever order they were named in.
    relations.sort_by_key(|r| Relation::ALL.iter().position(|a| a == r));
    Ok(relations)
}

/// Writes the manifest, or checks it against the one a previous run left.
fn pin_manifest(out: &Path, manifest: &Manifest) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let path = out.join(MANIFEST_FILE);
    if path.exists() {
        let text = std::fs::read_to_string(&path)?;
        let existing: Manifest = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a coherence manifest", path.display()))?;
        if existing != *manifest {
            bail!(
                "{} holds a suite run with other settings ({}); resume with the same settings \
                 or choose another --out",
                out.display(),
                path.display()
            );
        }
        return Ok(());
    }
    write_atomic(&path, &serde_json::to_vec_pretty(manifest)?)
}

/// The states the journal already holds; an unterminated last line (a run cut short) is cut
/// off first, so its state is measured again.
fn done_states(journal: &Path) -> anyhow::Result<HashSet<String>> {
    let read = read_journal::<StateOutcome>(journal)?;
    if repair(journal, &read)? > 0 {
        eprintln!(
            "{}: dropped an unterminated last line (a run cut short); its state is measured again",
            journal.display()
        );
    }
    let mut done = HashSet::new();
    for outcome in read.lines {
        ensure!(
            done.insert(outcome.id.clone()),
            "{}: state {} appears twice",
            journal.display(),
            outcome.id
        );
    }
    Ok(done)
}

/// The client, the model name requests carry, the mode, and the settings in a line.
fn connect(args: &CoherenceArgs) -> anyhow::Result<(Client, String, &'static str, String)> {
    if let Some(url) = &args.url {
        let http = HttpClient::new(url, args.api_key.clone());
        let name = match &args.model {
            Some(name) => name.clone(),
            None => http.served_model()?,
        };
        return Ok((
            Client::Http(http),
            name,
            "http",
            "the server's own settings".to_owned(),
        ));
    }
    let spec = args
        .model
        .as_deref()
        .context("--model or --url is needed")?;
    let options = Options {
        backend: args.backend,
        rotations: args.rotations,
        prior: args.prior.then_some(true),
        calibration: args.calibration.clone(),
        profile: !args.no_profile,
        dtype: args.dtype,
        cache_dir: args.cache.clone(),
        ..Options::default()
    };
    let ruling = Ruling::load(spec, &options).with_context(|| format!("loading model {spec}"))?;
    let settings = match ruling.settings() {
        Some(settings) => settings.describe(),
        None => "a decision encoder (one pass, no rotations or prior)".to_owned(),
    };
    let model = ruling.info().model.clone();
    Ok((
        Client::InProcess(Box::new(ruling)),
        model,
        "in-process",
        settings,
    ))
}

fn progress_bar(total: u64, done: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total).with_prefix("coherence");
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>14} [{bar:30}] {pos}/{len} states, {per_sec}, ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_position(done);
    bar.reset_eta();
    bar
}
