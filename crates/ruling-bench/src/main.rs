//! `ruling-bench`: the decoder backends side by side, on the same GGUF, in one run.
//!
//! For each model, in a child process per backend (so peak memory is that backend's alone):
//! prefill tokens/s of a ~400-token state; requests of 1 and 16 questions, with one rotation and
//! with every rotation, through the real `DecoderEngine` (prefix cache off, so every request
//! pays its prefill); generation tokens/s for one prompt and for eight at once; peak resident
//! memory. The llama child then replays the very prefix and branches the engine asked for on
//! *plain llama.cpp* (the same crate, no engine): the prefix decoded once, each branch decoded on
//! top of it and its cells dropped, which is what a careful user of llama.cpp would write.
//! `cargo xtask bench backends` runs it and writes `docs/bench/backends.md`. A program, not a
//! test: it measures, it does not assert.

mod plain;
mod report;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::bail;
use clap::Parser;
use ruling_backend::{
    Backend, BackendError, BackendInfo, Branch, BranchLogits, ChatMessage, DecoderEngine, Engine,
    EngineOptions, Generator, Role, Sampling,
};
use ruling_models::{LocalModel, PullOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Parser)]
#[command(
    about = "The decoder backends side by side: candle, llama.cpp behind the port, plain llama.cpp"
)]
struct Args {
    /// Catalog names or GGUF paths, comma separated.
    #[arg(
        long,
        default_value = "smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"
    )]
    models: String,
    /// Backends to run, comma separated (candle, llama; llama also runs plain llama.cpp).
    #[arg(long, default_value = "candle,llama")]
    backends: String,
    /// Tokens in the state.
    #[arg(long, default_value_t = 400)]
    state_tokens: usize,
    /// Tokens written per prompt in the generation runs.
    #[arg(long, default_value_t = 64)]
    write_tokens: usize,
    /// The adaptive-rotation margin of the adaptive request, in nats (0.5: the margin chosen
    /// on development rows, docs/debiasing.md).
    #[arg(long, default_value_t = 0.5)]
    adaptive_margin: f64,
    /// Threads each backend computes with.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Where the report goes (`.md`, and `.json` beside it).
    #[arg(long, default_value = "docs/bench/backends.md")]
    out: PathBuf,
    /// Internal: run one model on one backend and write its JSON here.
    #[arg(long, hide = true)]
    single: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Run {
    model: String,
    backend: String,
    load_s: f64,
    prefill_tokens: usize,
    prefill_tokens_per_s: f64,
    requests: Vec<RequestRow>,
    writing: Vec<WriteRow>,
    peak_rss_mib: f64,
    /// Plain llama.cpp on the same work (the llama child only).
    plain: Option<Plain>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RequestRow {
    questions: usize,
    every_rotation: bool,
    /// Rotations stopped early by the engine's adaptive rule (never on plain llama.cpp).
    #[serde(default)]
    adaptive: bool,
    /// Question stems encoded once over the state (the engine's default).
    #[serde(default)]
    stems: bool,
    branches: usize,
    branch_tokens: usize,
    seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WriteRow {
    prompts: usize,
    tokens: usize,
    seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Plain {
    prefill_tokens_per_s: f64,
    requests: Vec<RequestRow>,
    writing: Vec<WriteRow>,
}

const STATE_TEXT: &str = "The customer writes that the invoice for March was charged twice to the \
    same card, once on the first and again on the third, and asks for one of the two payments \
    to be refunded. They add that the mobile app has logged them out several times this week, \
    that the password reset email arrives late, and that they would like to move from the \
    monthly plan to the yearly one if the refund goes through before the end of the month. ";

const PROMPTS: [&str; 8] = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a refund is processed by a bank.",
    "Describe the city of Paris to a child.",
    "List the steps to reset a forgotten password.",
    "Why is the sky blue? Explain in detail.",
    "Write a letter asking for a yearly plan.",
    "What makes a good customer support reply?",
    "Summarise the plot of a detective novel.",
];

/// The 16 questions of the request: nouls, scores and choices of two to six options.
fn questions() -> serde_json::Value {
    serde_json::json!({
        "billing": {"type": "noul", "instructions": "Is this ticket about billing or payments?"},
        "team": {"type": "choice", "instructions": "Which team should handle this ticket first?",
                 "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in problems", "sales": "plans and upgrades", "other": null}},
        "urgency": {"type": "score", "instructions": "How urgent is this ticket?",
                    "criteria": ["can wait", "this week", "today", "right now"]},
        "angry": {"type": "noul", "instructions": "Does the customer sound angry?"},
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?",
                   "criteria": {"true": "they ask for money back", "false": "no money is asked back"}},
        "area": {"type": "choice", "instructions": "Which product area is affected most?",
                 "criteria": {"payments": null, "login": null, "mobile app": null, "web": null, "email": null, "other": null}},
        "sentiment": {"type": "score", "instructions": "How satisfied does the customer sound?",
                      "criteria": ["very unhappy", "unhappy", "neutral", "happy", "very happy"]},
        "upgrade": {"type": "noul", "instructions": "Does the customer want to change their plan?"},
        "channel": {"type": "choice", "instructions": "Where should the reply go?",
                    "criteria": {"email": null, "phone": null, "in-app chat": null}},
        "security": {"type": "noul", "instructions": "Could this be a security problem with the account?"},
        "language": {"type": "choice", "instructions": "What language is the ticket written in?",
                     "criteria": {"English": null, "French": null, "German": null, "Spanish": null}},
        "followup": {"type": "noul", "instructions": "Will this need a follow-up after the first reply?"},
        "effort": {"type": "score", "instructions": "How much work will resolving it take?",
                   "criteria": ["minutes", "an hour", "a day"]},
        "duplicate": {"type": "noul", "instructions": "Is a payment described as made twice?"},
        "priority": {"type": "choice", "instructions": "Which issue should be solved first?",
                     "criteria": {"the double charge": null, "the log-outs": null}},
        "spam": {"type": "noul", "instructions": "Is this ticket spam?"}
    })
}

/// A backend that notes the prefix and branches the engine asks for, so plain llama.cpp can
/// be given exactly the same work. Shared through an `Arc` so engines of several settings use
/// one loaded model.
struct Recorder<B> {
    inner: Arc<B>,
    log: Arc<Mutex<Work>>,
}

#[derive(Debug, Default, Clone)]
struct Work {
    prefix: Vec<u32>,
    branches: Vec<Vec<u32>>,
    /// Tokens of question stems encoded as prefix extensions.
    stem_tokens: usize,
}

impl<B: Backend> Backend for Recorder<B> {
    type Prefix = B::Prefix;

    fn info(&self) -> &BackendInfo {
        self.inner.info()
    }

    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        self.inner.render_chat(messages)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.inner.encode(text)
    }

    fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.inner.encode_continuation(text)
    }

    fn encode_prefix(&self, tokens: &[u32]) -> Result<B::Prefix, BackendError> {
        if let Ok(mut log) = self.log.lock() {
            log.prefix = tokens.to_vec();
        }
        self.inner.encode_prefix(tokens)
    }

    fn extend_prefix(
        &self,
        prefix: &B::Prefix,
        tokens: &[u32],
    ) -> Result<Option<B::Prefix>, BackendError> {
        if let Ok(mut log) = self.log.lock() {
            log.stem_tokens += tokens.len();
        }
        self.inner.extend_prefix(prefix, tokens)
    }

    fn prefix_len(&self, prefix: &B::Prefix) -> usize {
        self.inner.prefix_len(prefix)
    }

    fn prefix_bytes(&self, prefix: &B::Prefix) -> usize {
        self.inner.prefix_bytes(prefix)
    }

    fn score_branches(
        &self,
        prefix: &B::Prefix,
        branches: &[Branch<'_>],
    ) -> Result<Vec<BranchLogits>, BackendError> {
        if let Ok(mut log) = self.log.lock() {
            log.branches
                .extend(branches.iter().map(|b| b.tokens.to_vec()));
        }
        self.inner.score_branches(prefix, branches)
    }

    fn accepts_system_role(&self) -> bool {
        self.inner.accepts_system_role()
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(out) = &args.single {
        let model = args.models.split(',').next().unwrap_or_default();
        let run = single(model, &args.backends, &args)?;
        std::fs::write(out, serde_json::to_vec_pretty(&run)?)?;
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let mut runs = Vec::new();
    for model in args.models.split(',').filter(|m| !m.is_empty()) {
        for backend in args.backends.split(',').filter(|b| !b.is_empty()) {
            eprintln!("bench: {model} on {backend}");
            let json = std::env::temp_dir().join(format!(
                "ruling-bench-{}-{backend}.json",
                std::process::id()
            ));
            let status = Command::new(&exe)
                .args(["--models", model, "--backends", backend])
                .args(["--state-tokens", &args.state_tokens.to_string()])
                .args(["--write-tokens", &args.write_tokens.to_string()])
                .args(["--threads", &args.threads.to_string()])
                .args(["--adaptive-margin", &args.adaptive_margin.to_string()])
                .arg("--single")
                .arg(&json)
                .status()?;
            if !status.success() {
                bail!("the benchmark of {model} on {backend} failed ({status})");
            }
            runs.push(serde_json::from_slice::<Run>(&std::fs::read(&json)?)?);
            std::fs::remove_file(&json).ok();
        }
    }
    report::write_report(&args, &runs)
}

fn model_path(spec: &str) -> anyhow::Result<PathBuf> {
    let mut options = PullOptions::from_env()?;
    if std::env::var_os(ruling_models::CACHE_ENV).is_none() {
        options = PullOptions::new(Path::new("target/ruling-cache"));
    }
    options.hub = false;
    match ruling_models::pull_str(spec, &options)? {
        LocalModel::Gguf { path } => Ok(path),
        LocalModel::Directory { path } => bail!("{} is not a GGUF file", path.display()),
    }
}

fn seconds(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A state of exactly `tokens` tokens, decoded back to text.
fn state_text(
    backend: &impl Backend,
    tokenizer: &ruling_candle::TextTokenizer,
    tokens: usize,
) -> anyhow::Result<String> {
    let mut text = String::new();
    while backend.encode(&text)?.len() < tokens {
        text.push_str(STATE_TEXT);
    }
    let ids = backend.encode(&text)?;
    Ok(tokenizer.decode(&ids[..tokens])?)
}

/// The request shapes: (questions, every rotation, adaptive stopping, shared stems). Stems
/// only apply with two or more rotations; each feature is measured on and off so its share
/// shows.
const SHAPES: [(usize, bool, bool, bool); 7] = [
    (1, false, false, true),
    (1, true, false, false),
    (1, true, false, true),
    (16, false, false, true),
    (16, true, false, false),
    (16, true, false, true),
    (16, true, true, true),
];

fn shape_name(every: bool, adaptive: bool, stems: bool) -> &'static str {
    match (every, adaptive, stems) {
        (false, _, _) => "1",
        (true, false, false) => "every, whole branches",
        (true, false, true) => "every, shared stems",
        (true, true, false) => "every, adaptive",
        (true, true, true) => "every, shared stems + adaptive",
    }
}

/// Every rotation: each choice shown in all its cyclic orders, nouls and scores both ways.
const EVERY_ROTATION: u32 = 6;

fn single(model: &str, backend: &str, args: &Args) -> anyhow::Result<Run> {
    let path = model_path(model)?;
    match backend {
        "candle" => {
            let started = Instant::now();
            let loaded = Arc::new(ruling_candle::CandleBackend::load(
                &path,
                &ruling_candle::LoadOptions::default(),
            )?);
            let load_s = seconds(started);
            let tokenizer = loaded.tokenizer();
            let (mut run, _) = measure(
                model,
                "candle",
                load_s,
                Arc::clone(&loaded),
                tokenizer,
                args,
            )?;
            run.peak_rss_mib = peak_rss_mib();
            Ok(run)
        }
        "llama" => {
            let started = Instant::now();
            let options = ruling_llama::LoadOptions {
                threads: Some(args.threads),
                ..ruling_llama::LoadOptions::default()
            };
            let loaded = Arc::new(ruling_llama::LlamaCppBackend::load(&path, &options)?);
            let load_s = seconds(started);
            let tokenizer = anyhow::Context::with_context(loaded.tokenizer(), || {
                format!(
                    "{model}: llama.cpp's own vocabulary tokenizes it; the benchmark needs ruling's"
                )
            })?;
            let (mut run, work) =
                measure(model, "llama", load_s, Arc::clone(&loaded), tokenizer, args)?;
            run.peak_rss_mib = peak_rss_mib();
            drop(loaded);
            run.plain = Some(plain::plain(&path, &work, args)?);
            Ok(run)
        }
        other => bail!("unknown backend {other:?}; expected candle or llama"),
    }
}

/// What the engine and the writer cost on one backend; returns the work each request shape
/// put through the model, for the plain replay.
fn measure<B: Backend + Generator + 'static>(
    model: &str,
    name: &str,
    load_s: f64,
    backend: Arc<B>,
    tokenizer: &ruling_candle::TextTokenizer,
    args: &Args,
) -> anyhow::Result<(Run, Vec<(RequestRow, Work)>)> {
    let state = state_text(backend.as_ref(), tokenizer, args.state_tokens)?;
    let engines = Engines::new(&backend, args.adaptive_margin)?;
    let (prefill_tokens, prefill_s) = prefill(&engines, backend.as_ref(), &state)?;
    let mut work = Vec::new();
    for (questions, every_rotation, stops, stems) in SHAPES {
        let engine = engines.for_shape(every_rotation, stops, stems);
        let body = request(&state, questions)?;
        let valid = ruling_schema::parse_request(&body, &engine.info().capabilities)?;
        let (seconds, recorded) = time_request(engine, &engines.log, &valid)?;
        let row = RequestRow {
            questions,
            every_rotation,
            adaptive: stops,
            stems,
            branches: recorded.branches.len(),
            branch_tokens: recorded.branches.iter().map(Vec::len).sum::<usize>()
                + recorded.stem_tokens,
            seconds,
        };
        eprintln!(
            "bench: {model} {name}: {questions} questions, rotations {}: {:.2} s ({} branches, {} tokens)",
            shape_name(every_rotation, stops, stems),
            row.seconds,
            row.branches,
            row.branch_tokens
        );
        work.push((row, recorded));
    }

    let writing = write_rows(backend.as_ref(), model, name, args.write_tokens)?;
    Ok((
        Run {
            model: model.to_owned(),
            backend: name.to_owned(),
            load_s,
            prefill_tokens,
            prefill_tokens_per_s: prefill_tokens as f64 / prefill_s,
            requests: work.iter().map(|(row, _)| row.clone()).collect(),
            writing,
            peak_rss_mib: 0.0,
            plain: None,
        },
        work,
    ))
}

/// The engine settings the request shapes compare, all over one backend and recording what
/// they send it into one log.
struct Engines<B: Backend> {
    log: Arc<Mutex<Work>>,
    one: DecoderEngine<Recorder<B>>,
    whole: DecoderEngine<Recorder<B>>,
    every: DecoderEngine<Recorder<B>>,
    adaptive: DecoderEngine<Recorder<B>>,
}

impl<B: Backend + 'static> Engines<B> {
    fn new(backend: &Arc<B>, adaptive_margin: f64) -> anyhow::Result<Self> {
        let log = Arc::new(Mutex::new(Work::default()));
        let engine = |rotations: u32,
                      adaptive: Option<ruling_backend::AdaptiveRotations>,
                      shared_stems: bool| {
            DecoderEngine::new(
                Recorder {
                    inner: Arc::clone(backend),
                    log: Arc::clone(&log),
                },
                EngineOptions {
                    rotations,
                    prefix_cache_bytes: 0,
                    max_request_tokens: 1 << 20,
                    adaptive,
                    shared_stems,
                    ..EngineOptions::default()
                },
                None,
            )
        };
        let stopping = ruling_backend::AdaptiveRotations::after_two(adaptive_margin)
            .map_err(anyhow::Error::msg)?;
        Ok(Self {
            one: engine(1, None, true)?,
            whole: engine(EVERY_ROTATION, None, false)?,
            every: engine(EVERY_ROTATION, None, true)?,
            adaptive: engine(EVERY_ROTATION, Some(stopping), true)?,
            log,
        })
    }

    /// The engine for one of `SHAPES`.
    fn for_shape(
        &self,
        every_rotation: bool,
        stops: bool,
        stems: bool,
    ) -> &DecoderEngine<Recorder<B>> {
        match (every_rotation, stops, stems) {
            (false, _, _) => &self.one,
            (true, true, _) => &self.adaptive,
            (true, false, false) => &self.whole,
            (true, false, true) => &self.every,
        }
    }
}

/// Prefill: the prefix of a one-question request, as the engine sent it, encoded alone three
/// times; its length and the median seconds.
fn prefill<B: Backend + 'static>(
    engines: &Engines<B>,
    backend: &B,
    state: &str,
) -> anyhow::Result<(usize, f64)> {
    let body = request(state, 1)?;
    let valid = ruling_schema::parse_request(&body, &engines.one.info().capabilities)?;
    engines.one.evaluate(&valid)?;
    let prefix = engines
        .log
        .lock()
        .map(|l| l.prefix.clone())
        .unwrap_or_default();
    let mut times = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        backend.encode_prefix(&prefix)?;
        times.push(seconds(started));
    }
    Ok((prefix.len(), median(&mut times)))
}

/// One request through `engine`: repeated while short (at most three times, 20 s in all) and
/// the median taken; the work of the last run, as the recorder saw it.
fn time_request<B: Backend>(
    engine: &DecoderEngine<Recorder<B>>,
    log: &Mutex<Work>,
    valid: &ruling_schema::ValidRequest,
) -> anyhow::Result<(f64, Work)> {
    let mut times = Vec::new();
    let mut recorded = Work::default();
    while times.len() < 3 && times.iter().sum::<f64>() < 20.0 {
        if let Ok(mut l) = log.lock() {
            *l = Work::default();
        }
        let started = Instant::now();
        engine.evaluate(valid)?;
        times.push(seconds(started));
        recorded = log.lock().map(|l| l.clone()).unwrap_or_default();
    }
    Ok((median(&mut times), recorded))
}

/// Text generation: one prompt, then eight in one batch.
fn write_rows<B: Backend + Generator>(
    backend: &B,
    model: &str,
    name: &str,
    write_tokens: usize,
) -> anyhow::Result<Vec<WriteRow>> {
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| {
            let text = backend.render_chat(&[ChatMessage::new(Role::User, *p)])?;
            backend.encode(&text)
        })
        .collect::<Result<_, _>>()?;
    let mut writing = Vec::new();
    for count in [1, 8] {
        let views: Vec<&[u32]> = prompts[..count].iter().map(Vec::as_slice).collect();
        let sampling = Sampling {
            max_tokens: write_tokens,
            ..Sampling::default()
        };
        let started = Instant::now();
        let written = backend.generate(&views, &sampling)?;
        let row = WriteRow {
            prompts: count,
            tokens: written.iter().map(|w| w.tokens.len()).sum(),
            seconds: seconds(started),
        };
        eprintln!(
            "bench: {model} {name}: {count} prompts wrote {} tokens in {:.2} s",
            row.tokens, row.seconds
        );
        writing.push(row);
    }
    Ok(writing)
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn request(state: &str, questions: usize) -> anyhow::Result<Vec<u8>> {
    let all = questions_map()?;
    let picked: serde_json::Map<String, serde_json::Value> =
        all.into_iter().take(questions).collect();
    Ok(serde_json::to_vec(&serde_json::json!({
        "model": "bench",
        "state": state,
        "questions": picked,
    }))?)
}

fn questions_map() -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    match questions() {
        serde_json::Value::Object(map) => Ok(map),
        _ => bail!("the questions are an object"),
    }
}
