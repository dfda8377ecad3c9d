//! `ruling-eval run`: evaluate dataset records with one traced request each, appending one
//! result line per record as it goes, resumable after a kill.
//!
//! Every record is asked as a System One request with `"trace": true`, so one pass gives the
//! raw, prior-corrected, rotated and calibrated distributions (see `derive.rs`). When the
//! record has choice or score questions, a second request asks just those with their options
//! reversed (choice: criteria in reverse order; score: levels in reverse order, mapped back to
//! the original level indices); the flip rate compares the two. A noul has no option order a
//! request can reverse: its reversed order is the engine's own second order (no first, then
//! yes), traced when the run has two or more rotations. The reversal request's latency and
//! tokens are kept apart from the record's own.

use std::collections::HashSet;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use indexmap::IndexMap;
use indicatif::{ProgressBar, ProgressStyle};
use ruling_calibration::{AnswerType, Calibration, Provenance};
use ruling_core::{Options, Ruling, WeightDtype};
use ruling_corpus::{Dataset, LoadOptions, Record, Split, answer_keys};
use ruling_models::ModelSpec;
use ruling_schema::{
    Answer, EvaluationTrace, Question, QuestionTrace, SystemOneRequest, SystemOneResponse,
};

use crate::client::{Client, HttpClient, Reply};
use crate::derive::{Derived, Dist, derive};
use crate::results::{
    Appender, FORMAT_VERSION, QuestionResult, RUN_FILE, ResultLine, ReversalCost, Reversed,
    RunCalibration, RunManifest, read_manifest, read_results, repair, results_path, write_atomic,
};

/// How far a derived distribution may sit from the engine's own answer before the derivation
/// is called wrong: one branch against several is not bit-identical, but far closer than this.
const ANSWER_TOLERANCE: f64 = 1e-6;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  ruling-eval run --model smollm2-135m --dataset boolq --split dev --limit 200 --out runs/boolq
  ruling-eval run --model smollm2-135m --dataset boolq,chaosnli-snli,sst5 --split dev \\
      --limit 100 --rotations 2 --prior --out runs/debiased
  ruling-eval run --url http://127.0.0.1:8000 --api-key $KEY --dataset trec --split held-out \\
      --limit 300 --calibration calibration.json --out runs/trec-held-out")]
pub struct RunArgs {
    /// In-process: a catalog name, `hf:org/repo[@revision]` or a local path. With --url: the
    /// name requests carry (the server's served name; default: the first it lists), also read
    /// as a model spec for the provenance of a calibration fitted on the results.
    #[arg(long, env = "RULING_MODEL", required_unless_present = "url")]
    model: Option<String>,
    /// Evaluate against a System One server at this base URL instead of in-process.
    #[arg(long)]
    url: Option<String>,
    /// Bearer key for --url.
    #[arg(long, env = "RULING_API_KEY", hide_env_values = true, requires = "url")]
    api_key: Option<String>,
    /// Datasets, comma-separated (boolq, chaosnli-snli, sst5, clinc150-20, trec, ...).
    #[arg(long = "dataset", required = true, value_delimiter = ',')]
    datasets: Vec<String>,
    /// `dev` (may fit calibration) or `held-out` (report only).
    #[arg(long)]
    split: String,
    /// At most this many records per dataset, a seeded sample (a larger limit with the same
    /// seed extends a smaller one).
    #[arg(long)]
    limit: Option<usize>,
    /// Seeds the sample.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The results directory (created; rerunning into it resumes).
    #[arg(long)]
    out: PathBuf,
    /// Orderings averaged per question. With --url, the server's setting (checked against its
    /// traces).
    #[arg(long, env = "RULING_ROTATIONS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rotations: u32,
    /// Subtract the content-free prior. With --url, the server's setting (checked against its
    /// traces).
    #[arg(long, env = "RULING_PRIOR")]
    prior: bool,
    /// Adaptive rotations: stop a question's rotations (after at least two) once every order
    /// read so far picked the same option and its mean log-probability leads by this many
    /// nats. With --url, the server's setting.
    #[arg(long, env = "RULING_ADAPTIVE_MARGIN", value_parser = parse_margin)]
    adaptive_margin: Option<f64>,
    /// In-process: the most options a decoder shows in one pass (default 255, as far as the
    /// tokenizer proves codes); a wider choice is asked in two stages. 26 asks every choice
    /// past the single letters in two stages, as engines before wide codes did.
    #[arg(long, conflicts_with = "url", value_parser = clap::value_parser!(u64).range(2..=255))]
    max_options_per_pass: Option<u64>,
    /// In-process: where a decoder puts each question relative to the state: auto (a long
    /// question about a short state goes first, its head reused across records),
    /// state-first, or question-first.
    #[arg(long, conflicts_with = "url", value_parser = parse_layout)]
    layout: Option<ruling_core::Layout>,
    /// A calibration file for this model and these settings; the engine applies it. With
    /// --url, the one the server was started with (checked against its traces).
    #[arg(long, env = "RULING_CALIBRATION")]
    calibration: Option<PathBuf>,
    /// In-process: evaluate the model through this LoRA adapter file (candle backend only).
    /// The results' provenance carries its digest, so `calibrate` writes a calibration for
    /// this adapter; `--calibration` is then the adapter's (none is applied by default).
    #[arg(long, conflicts_with = "url")]
    adapter: Option<PathBuf>,
    /// Records evaluated at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Skip the reversal request (no flip rate for choice and score questions).
    #[arg(long)]
    no_reversal: bool,
    /// The datasets folder (default: $RULING_DATASETS, else shared/datasets beside the
    /// workspace).
    #[arg(long)]
    datasets_root: Option<PathBuf>,
    /// When stderr is not a terminal, log progress every this many records.
    #[arg(long, default_value_t = 25)]
    log_every: usize,
    /// In-process: what runs a decoder, candle (pure Rust) or llama (llama.cpp's kernels, GGUF
    /// only). A decision encoder ignores it.
    #[arg(long, env = "RULING_BACKEND", default_value_t = ruling_core::DecoderBackend::default())]
    backend: ruling_core::DecoderBackend,
    /// In-process: the precision weight matrices are kept at (auto, native, f32, f16, q8_0).
    #[arg(long, env = "RULING_DTYPE", default_value = "auto")]
    dtype: WeightDtype,
    /// In-process: the model cache root.
    #[arg(long, env = "RULING_CACHE")]
    cache: Option<PathBuf>,
}

/// What a worker needs to turn a record into a result line.
struct Job<'a> {
    client: &'a Client,
    model: &'a str,
    manifest: &'a RunManifest,
    dataset: &'a str,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let datasets: Vec<Dataset> = args
        .datasets
        .iter()
        .map(|d| d.parse::<Dataset>().map_err(anyhow::Error::from))
        .collect::<anyhow::Result<_>>()?;
    let split: Split = args.split.parse()?;
    // Every dataset is read before the model loads, so a missing split or file fails at once.
    let load = LoadOptions {
        root: args.datasets_root.clone(),
        limit: args.limit,
        seed: args.seed,
    };
    let records = datasets
        .iter()
        .map(|&dataset| {
            Ok((
                dataset.to_string(),
                ruling_corpus::load(dataset, split, &load)?,
            ))
        })
        .collect::<anyhow::Result<Vec<(String, Vec<Record>)>>>()?;
    let loaded = Instant::now();
    let (client, model, provenance, mode) = connect(&args)?;
    let calibration = run_calibration(args.calibration.as_deref(), &provenance)?;
    let mut manifest = RunManifest {
        format_version: FORMAT_VERSION,
        mode: mode.to_owned(),
        model: model.clone(),
        url: args.url.clone(),
        provenance,
        split: split.to_string(),
        seed: args.seed,
        reversal: !args.no_reversal,
        calibration,
        datasets: Vec::new(),
        adaptive_margin: args.adaptive_margin,
        max_options_per_pass: args.max_options_per_pass,
        layout: args.layout.map(layout_name),
    };
    pin_manifest(
        &args.out,
        &mut manifest,
        records.iter().map(|(name, _)| name),
    )?;
    eprintln!(
        "{mode} {model}: ready in {:.1} s (rotations {}, prior {}, calibration {})",
        loaded.elapsed().as_secs_f64(),
        manifest.provenance.rotations,
        manifest.provenance.prior,
        manifest
            .calibration
            .as_ref()
            .map_or("none", |c| c.path.as_str())
    );

    for (name, records) in &records {
        let job = Job {
            client: &client,
            model: &model,
            manifest: &manifest,
            dataset: name,
        };
        evaluate_dataset(&job, &args, records, &results_path(&args.out, name))?;
    }
    let written = crate::report::write(&args.out, None)?;
    eprintln!("wrote {}", written.display());
    Ok(())
}

/// The calibration file asked for, checked against the run's settings.
fn run_calibration(
    path: Option<&Path>,
    provenance: &Provenance,
) -> anyhow::Result<Option<RunCalibration>> {
    let Some(path) = path else { return Ok(None) };
    let file = Calibration::load(path)?;
    file.check(provenance)
        .with_context(|| format!("{} does not fit this run's settings", path.display()))?;
    Ok(Some(RunCalibration {
        path: path.display().to_string(),
        temperatures: file.temperatures,
    }))
}

/// Write the run's manifest into `out`. Resuming into a directory of another run's settings
/// is refused; resuming one of the same run keeps its datasets and adds these after them.
fn pin_manifest<'a>(
    out: &Path,
    manifest: &mut RunManifest,
    datasets: impl IntoIterator<Item = &'a String>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    if out.join(RUN_FILE).exists() {
        let existing = read_manifest(out)?;
        if let Some((field, was, now)) = existing.difference(manifest) {
            bail!(
                "{} holds results of another run ({field} was {was}, now {now}); resume with \
                 the same settings or choose another --out",
                out.display()
            );
        }
        manifest.datasets = existing.datasets;
    }
    for name in datasets {
        if !manifest.datasets.contains(name) {
            manifest.datasets.push(name.clone());
        }
    }
    write_atomic(&out.join(RUN_FILE), &serde_json::to_vec_pretty(manifest)?)?;
    Ok(())
}

/// The client, the model name requests carry, the provenance of the results and the mode.
fn connect(args: &RunArgs) -> anyhow::Result<(Client, String, Provenance, &'static str)> {
    // What a calibration fitted on these results will be checked against.
    let settings = |model_id: String, revision: Option<String>, adapter_digest| Provenance {
        model_id,
        revision,
        rotations: args.rotations,
        prior: args.prior,
        adapter_digest,
    };
    if let Some(url) = &args.url {
        let http = HttpClient::new(url, args.api_key.clone());
        let name = match &args.model {
            Some(name) => name.clone(),
            None => http.served_model()?,
        };
        let (model_id, revision) = identity(&name).unwrap_or_else(|_| (name.clone(), None));
        let provenance = settings(model_id, revision, None);
        return Ok((Client::Http(http), name, provenance, "http"));
    }
    let spec = args
        .model
        .as_deref()
        .context("--model or --url is needed")?;
    let (calibration, adapter) = crate::with_adapter(args.calibration.clone(), &args.adapter)?;
    let options = Options {
        backend: args.backend,
        rotations: Some(args.rotations),
        prior: Some(args.prior),
        // Exactly the settings on the command line: what a run measures is what it names.
        profile: false,
        calibration,
        adapter,
        dtype: args.dtype,
        cache_dir: args.cache.clone(),
        adaptive: args.adaptive_margin.map(adaptive),
        max_options_per_pass: args
            .max_options_per_pass
            .map_or(Options::default().max_options_per_pass, |n| n as usize),
        layout: args.layout.unwrap_or_default(),
        ..Options::default()
    };
    let ruling = Ruling::load(spec, &options).with_context(|| format!("loading model {spec}"))?;
    let engine = ruling.provenance();
    let (model_id, revision) = (engine.model_id, engine.revision);
    // An adapted model answers under the adapter's name; its provenance names the base.
    ensure!(
        ruling.adapter().is_some() || ruling.info().model == model_id,
        "the engine calls the model {:?} but its provenance would say {model_id:?}; a \
         calibration fitted on these results would not load",
        ruling.info().model
    );
    let model = ruling.info().model.clone();
    let provenance = settings(model_id, revision, engine.adapter_digest);
    Ok((
        Client::InProcess(Box::new(ruling)),
        model,
        provenance,
        "in-process",
    ))
}

/// The model id and revision `ruling_core::Ruling::load` gives the engine (and so what a
/// calibration must name): the catalog name and the sha256 the catalog pins for its first
/// file, `hf:org/repo` and the revision asked for, or a local model's file or folder name.
pub fn identity(spec: &str) -> anyhow::Result<(String, Option<String>)> {
    Ok(ruling_core::model_identity(&ModelSpec::parse(spec)?))
}

fn evaluate_dataset(
    job: &Job<'_>,
    args: &RunArgs,
    records: &[Record],
    path: &Path,
) -> anyhow::Result<()> {
    let pending = pending_records(job.dataset, records, path)?;
    let total = records.len();
    let already = total - pending.len();
    if pending.is_empty() {
        eprintln!("{}: all {total} records already done", job.dataset);
        return Ok(());
    }
    let bar = progress_bar(job.dataset, total as u64, already as u64);
    let mut out = Appender::open(path)?;
    let started = Instant::now();
    let mut count = 0usize;
    let evaluated = evaluate_in_parallel(job, &pending, args.workers as usize, |line| {
        out.append(&line)?;
        count += 1;
        bar.inc(1);
        if bar.is_hidden()
            && (count.is_multiple_of(args.log_every.max(1)) || count == pending.len())
        {
            log_progress(job.dataset, already + count, total, count, started);
        }
        Ok(())
    });
    bar.finish_and_clear();
    evaluated?;
    if !bar.is_hidden() {
        log_progress(job.dataset, total, total, pending.len(), started);
    }
    Ok(())
}

/// The records of `dataset` its results file at `path` does not hold yet, in order; an
/// unterminated last line (a run cut short) is dropped first, and a record without an id, or
/// with one that repeats, is refused.
fn pending_records<'r>(
    dataset: &str,
    records: &'r [Record],
    path: &Path,
) -> anyhow::Result<Vec<&'r Record>> {
    let existing = read_results(path)?;
    let dropped = repair(path, &existing)?;
    if dropped > 0 {
        eprintln!(
            "{}: dropped an unterminated last line of {dropped} bytes (a run cut short); its \
             record is evaluated again",
            path.display()
        );
    }
    let done: HashSet<&str> = existing.lines.iter().map(|l| l.id.as_str()).collect();
    let mut ids = HashSet::new();
    let mut pending = Vec::new();
    for record in records {
        let id = record
            .id
            .as_deref()
            .with_context(|| format!("a {dataset} record has no id"))?;
        ensure!(ids.insert(id), "{dataset}: record id {id:?} repeats");
        if !done.contains(id) {
            pending.push(record);
        }
    }
    Ok(pending)
}

/// Evaluate `pending` on `workers` threads, handing each result line to `each` on this thread
/// as it comes (not in record order). The first error, a record's or `each`'s, stops the
/// workers after the records they are on, and is returned.
fn evaluate_in_parallel(
    job: &Job<'_>,
    pending: &[&Record],
    workers: usize,
    mut each: impl FnMut(ResultLine) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let workers = workers.clamp(1, pending.len().max(1));
    let (sender, receiver) = mpsc::sync_channel::<anyhow::Result<ResultLine>>(workers * 2);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let sender = sender.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(record) = pending.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let line = evaluate_record(job, record)
                        .with_context(|| format!("record {}", record.display_id()));
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        let mut first_error = None;
        // After a record fails, the lines already evaluated are still handed on; after `each`
        // fails, none is.
        let mut each_failed = false;
        for line in receiver {
            let handed = match line {
                Ok(line) if !each_failed => each(line).inspect_err(|_| each_failed = true),
                Ok(_) => Ok(()),
                Err(error) => Err(error),
            };
            if let Err(error) = handed {
                stop.store(true, Ordering::Relaxed);
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

fn progress_bar(dataset: &str, total: u64, done: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total).with_prefix(dataset.to_owned());
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>14} [{bar:30}] {pos}/{len} records, {per_sec}, ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_position(done);
    bar.reset_eta();
    bar
}

fn log_progress(dataset: &str, position: usize, total: usize, count: usize, started: Instant) {
    let elapsed = started.elapsed().as_secs_f64();
    let rate = if elapsed > 0.0 {
        count as f64 / elapsed
    } else {
        0.0
    };
    let left = total.saturating_sub(position);
    let eta = if rate > 0.0 {
        format!("{:.0} s", left as f64 / rate)
    } else {
        "-".to_owned()
    };
    eprintln!("{dataset}: {position}/{total} records, {rate:.2}/s, ETA {eta}");
}

/// One record: the traced request, the reversal request, and the derived distributions.
fn evaluate_record(job: &Job<'_>, record: &Record) -> anyhow::Result<ResultLine> {
    let manifest = job.manifest;
    let mut request = record.to_request(job.model);
    request.trace = Some(true);
    let started = Instant::now();
    let reply = job.client.answer(&request)?;
    let latency_ms = millis(started.elapsed());
    let id = record.display_id().to_owned();
    let mut line = ResultLine {
        id,
        dataset: job.dataset.to_owned(),
        split: manifest.split.clone(),
        error: None,
        latency_ms,
        usage: Default::default(),
        reversal: None,
        questions: IndexMap::new(),
    };
    let response = match reply {
        Reply::Answered(response) => response,
        Reply::Refused(message) => {
            line.error = Some(message);
            return Ok(line);
        }
    };
    line.usage = response.usage;
    let trace = traced(&response)?;

    let twin = if manifest.reversal {
        reversal(job, record, &mut line)?
    } else {
        None
    };
    for (question_id, question) in &record.questions {
        if matches!(question, Question::Box { .. }) {
            continue;
        }
        let result = question_result(job, record, question_id, trace, &response, twin.as_ref())
            .with_context(|| format!("question {question_id:?}"))?;
        line.questions.insert(question_id.clone(), result);
    }
    Ok(line)
}

/// The reversal request of a record with choices or scores (options in reverse order), sent
/// and costed on `line`; `None` when the record has none or the engine refused it.
fn reversal(
    job: &Job<'_>,
    record: &Record,
    line: &mut ResultLine,
) -> anyhow::Result<Option<(SystemOneRequest, SystemOneResponse)>> {
    let Some(request) = reversed_request(record, job.model) else {
        return Ok(None);
    };
    let started = Instant::now();
    let reply = job.client.answer(&request)?;
    let latency_ms = millis(started.elapsed());
    let Reply::Answered(response) = reply else {
        return Ok(None);
    };
    line.reversal = Some(ReversalCost {
        latency_ms,
        input_tokens: response.usage.input_tokens,
    });
    Ok(Some((request, response)))
}

/// Every column of one question: derived from the trace, checked against the engine's
/// answer and settings, with its label, soft target and reversed reading.
fn question_result(
    job: &Job<'_>,
    record: &Record,
    question_id: &str,
    trace: &EvaluationTrace,
    response: &SystemOneResponse,
    twin: Option<&(SystemOneRequest, SystemOneResponse)>,
) -> anyhow::Result<QuestionResult> {
    let manifest = job.manifest;
    let question = &record.questions[question_id];
    let keys = answer_keys(question);
    let kind = answer_type(question);
    let derived =
        derive(&keys, question_trace(trace, question_id)?).context("reading its trace")?;
    check_settings(manifest, kind, question_id, &derived)?;
    let answer = answer_dist(
        &keys,
        response
            .answers
            .get(question_id)
            .context("the response has no answer to it")?,
    );
    check_answer(question_id, &keys, &derived, &answer)?;
    let calibrated = match &manifest.calibration {
        Some(c) => Some(derived.calibrated(&keys, c.temperatures.get(kind))?),
        None => None,
    };
    let reversed = match (kind, twin) {
        (AnswerType::Noul, _) => derived.second.clone().map(|(raw, prior)| Reversed {
            raw,
            prior,
            rotated: derived.rotated.clone(),
        }),
        (_, Some((request, response))) => Some(reversed_dists(
            question,
            &request.questions[question_id],
            question_trace(traced(response)?, question_id)?,
        )?),
        (_, None) => None,
    };
    let label = record.labels.get(question_id).map(|l| l.answer_key());
    let target = record.soft_target(question_id).map(|target| {
        keys.iter()
            .map(|k| (k.clone(), target.get(k).copied().unwrap_or(0.0)))
            .collect()
    });
    Ok(QuestionResult {
        kind,
        label,
        target,
        temperature: derived.temperature,
        rotations: derived.rotations,
        two_stage: derived.two_stage,
        candidate_mass: derived.candidate_mass.clone(),
        answer,
        raw: derived.raw,
        prior: derived.prior,
        rotated: derived.rotated,
        calibrated,
        reversed,
        orders: if derived.rotations >= 2 {
            derived.by_order.clone()
        } else {
            Vec::new()
        },
    })
}

fn parse_layout(given: &str) -> Result<ruling_core::Layout, String> {
    use ruling_core::Layout;
    match given {
        "auto" => Ok(Layout::Auto),
        "state-first" => Ok(Layout::StateFirst),
        "question-first" => Ok(Layout::QuestionFirst),
        _ => Err(format!(
            "unknown layout {given:?}; expected auto, state-first or question-first"
        )),
    }
}

fn layout_name(layout: ruling_core::Layout) -> String {
    use ruling_core::Layout;
    match layout {
        Layout::Auto => "auto",
        Layout::StateFirst => "state-first",
        Layout::QuestionFirst => "question-first",
    }
    .to_owned()
}

fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e3
}

fn traced(response: &SystemOneResponse) -> anyhow::Result<&EvaluationTrace> {
    response.evaluation_trace.as_ref().context(
        "the response has no evaluation_trace: the engine ignored \"trace\": true (is the \
         server a ruling-serve?)",
    )
}

fn question_trace<'a>(
    trace: &'a EvaluationTrace,
    question_id: &str,
) -> anyhow::Result<&'a QuestionTrace> {
    trace
        .questions
        .get(question_id)
        .with_context(|| format!("the trace has no entry for question {question_id:?}"))
}

pub fn answer_type(question: &Question) -> AnswerType {
    match question {
        Question::Noul { .. } => AnswerType::Noul,
        Question::Score { .. } => AnswerType::Score,
        _ => AnswerType::Choice,
    }
}

/// An answer as a distribution over the question's answer keys.
fn answer_dist(keys: &[String], answer: &Answer) -> Dist {
    let probabilities: Dist = match answer {
        Answer::Noul { noul } => [("yes".to_owned(), *noul), ("no".to_owned(), 1.0 - noul)]
            .into_iter()
            .collect(),
        Answer::Choice { probabilities, .. } | Answer::Score { probabilities, .. } => {
            probabilities.clone()
        }
        Answer::Box { .. } => Dist::new(),
    };
    keys.iter()
        .map(|k| (k.clone(), probabilities.get(k).copied().unwrap_or(0.0)))
        .collect()
}

/// The trace must show the settings the run says the engine has: it is the only way to know
/// them for a server.
/// Adaptive rotations at `margin` nats, after at least two orders (checked by clap).
fn adaptive(margin: f64) -> ruling_core::AdaptiveRotations {
    ruling_core::AdaptiveRotations {
        margin,
        min_rotations: 2,
    }
}

fn check_settings(
    manifest: &RunManifest,
    kind: AnswerType,
    question_id: &str,
    derived: &Derived,
) -> anyhow::Result<()> {
    let settings = &manifest.provenance;
    let expected = match kind {
        AnswerType::Noul | AnswerType::Score => {
            if settings.rotations >= 2 {
                2
            } else {
                1
            }
        }
        // Cyclic shifts, at most one per option shown (a two-stage choice's final pass shows
        // its finalists only).
        AnswerType::Choice => (settings.rotations as usize).min(derived.shown),
    };
    let adaptive = manifest.adaptive_margin.is_some();
    ensure!(
        derived.rotations == expected || (adaptive && (1..expected).contains(&derived.rotations)),
        "question {question_id:?}: the engine averaged {} orders, but --rotations {} means \
         {expected}; the engine runs with other settings than this run says",
        derived.rotations,
        settings.rotations
    );
    ensure!(
        derived.prior.is_some() == settings.prior,
        "question {question_id:?}: the engine {} a prior, but this run says --prior is {}",
        if derived.prior.is_some() {
            "subtracts"
        } else {
            "does not subtract"
        },
        settings.prior
    );
    let temperature = manifest
        .calibration
        .as_ref()
        .map_or(1.0, |c| c.temperatures.get(kind));
    ensure!(
        (derived.temperature - temperature).abs() <= 1e-9 * temperature.max(1.0),
        "question {question_id:?}: the engine applied temperature {} to {kind} answers, but \
         this run's calibration says {temperature}; pass the calibration the engine uses",
        derived.temperature
    );
    Ok(())
}

/// The derived rotated scores at the applied temperature must be the engine's answer, or the
/// derivation (and every column) is wrong.
fn check_answer(
    question_id: &str,
    keys: &[String],
    derived: &Derived,
    answer: &Dist,
) -> anyhow::Result<()> {
    let recomputed = derived.calibrated(keys, derived.temperature)?;
    let gap = keys
        .iter()
        .map(|k| (recomputed[k] - answer[k]).abs())
        .fold(0.0, f64::max);
    ensure!(
        gap <= ANSWER_TOLERANCE,
        "question {question_id:?}: the traced scores give {recomputed:?} but the engine answered \
         {answer:?} (gap {gap:e}); the trace is not read the way the engine folds it"
    );
    Ok(())
}

/// The record's choice and score questions with their options reversed; `None` when it has
/// none.
fn reversed_request(record: &Record, model: &str) -> Option<SystemOneRequest> {
    let questions: IndexMap<String, Question> = record
        .questions
        .iter()
        .filter_map(|(id, question)| {
            let reversed = match question {
                Question::Choice {
                    instructions,
                    criteria,
                } => Question::Choice {
                    instructions: instructions.clone(),
                    criteria: criteria
                        .iter()
                        .rev()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                },
                Question::Score {
                    instructions,
                    criteria,
                } => Question::Score {
                    instructions: instructions.clone(),
                    criteria: criteria.iter().rev().cloned().collect(),
                },
                _ => return None,
            };
            Some((id.clone(), reversed))
        })
        .collect();
    if questions.is_empty() {
        return None;
    }
    Some(SystemOneRequest {
        model: model.to_owned(),
        state: record.state.clone(),
        questions,
        assets: None,
        trace: Some(true),
    })
}

/// The reversed question's distributions under the original question's keys: a choice keeps
/// its keys, a score's reversed level `j` is original level `n - 1 - j`.
fn reversed_dists(
    original: &Question,
    reversed: &Question,
    trace: &QuestionTrace,
) -> anyhow::Result<Reversed> {
    let keys = answer_keys(original);
    let derived =
        derive(&answer_keys(reversed), trace).context("reading the reversed question's trace")?;
    let back = |dist: &Dist| -> Dist {
        let n = keys.len();
        keys.iter()
            .enumerate()
            .map(|(i, key)| {
                let source = match original {
                    Question::Score { .. } => (n - 1 - i).to_string(),
                    _ => key.clone(),
                };
                (key.clone(), dist.get(&source).copied().unwrap_or(0.0))
            })
            .collect()
    };
    Ok(Reversed {
        raw: back(&derived.raw),
        prior: derived.prior.as_ref().map(back),
        rotated: back(&derived.rotated),
    })
}

/// `--adaptive-margin`: a finite number of nats, 0 or more.
fn parse_margin(given: &str) -> Result<f64, String> {
    let margin: f64 = given
        .parse()
        .map_err(|_| format!("{given:?} is not a number of nats"))?;
    ruling_core::AdaptiveRotations::after_two(margin).map(|_| margin)
}

#[cfg(test)]
mod tests {
    use ruling_schema::RotationTrace;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reversed_score_maps_levels_back() {
        let original: Question = serde_json::from_value(
            json!({"type": "score", "instructions": "How?", "criteria": ["low", "mid", "high"]}),
        )
        .unwrap();
        let record: Record = serde_json::from_value(json!({
            "id": "r", "family": "f", "state": "s",
            "questions": {"q": original, "n": {"type": "noul", "instructions": "Is it?"}},
        }))
        .unwrap();
        let request = reversed_request(&record, "m").expect("a score to reverse");
        assert_eq!(request.questions.len(), 1, "nouls are not reversed");
        let reversed = &request.questions["q"];
        // Shown lowest first as the reversed question has it: high, mid, low. The engine puts
        // most weight on its level 0, which is the original "high" (level 2).
        let lse = (2.0f64.exp() + 1.0f64.exp() + 1.0).ln();
        let trace = QuestionTrace {
            rotations: vec![RotationTrace {
                order: vec!["0".into(), "1".into(), "2".into()],
                log_probabilities: vec![2.0 - lse, 1.0 - lse, -lse],
                prior: None,
                unread: Vec::new(),
            }],
            temperature: 1.0,
            candidate_mass: Vec::new(),
            branch_tokens: Vec::new(),
            question_prefix_tokens: Vec::new(),
            stage_one: None,
        };
        let back = reversed_dists(&original, reversed, &trace).unwrap();
        assert_eq!(back.raw.keys().collect::<Vec<_>>(), ["0", "1", "2"]);
        assert!((back.raw["2"] - (2.0 - lse).exp()).abs() < 1e-12);
        assert!((back.raw["0"] - (-lse).exp()).abs() < 1e-12);
    }

    #[test]
    fn a_reversed_choice_keeps_its_keys() {
        let record: Record = serde_json::from_value(json!({
            "id": "r", "family": "f", "state": "s",
            "questions": {"c": {"type": "choice", "instructions": "Which?",
                                "criteria": {"a": null, "b": "bee", "c": null}}},
        }))
        .unwrap();
        let request = reversed_request(&record, "m").unwrap();
        let Question::Choice { criteria, .. } = &request.questions["c"] else {
            panic!("a choice");
        };
        assert_eq!(criteria.keys().collect::<Vec<_>>(), ["c", "b", "a"]);
        assert_eq!(request.trace, Some(true));
    }

    #[test]
    fn identity_names_catalog_models_with_their_pinned_digest() {
        let (id, revision) = identity("smollm2-135m").unwrap();
        assert_eq!(id, "smollm2-135m");
        assert_eq!(revision.map(|r| r.len()), Some(64));
        assert_eq!(
            identity("hf:org/repo@v1").unwrap(),
            ("hf:org/repo".to_owned(), Some("v1".to_owned()))
        );
    }
}
