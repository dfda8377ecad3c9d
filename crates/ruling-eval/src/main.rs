//! `ruling-eval`: the ruling evaluator binary.
//!
//! - `ask` loads a model in-process, asks typed questions about one state, and prints the
//!   answers as a table (or the raw System One response with `--json`).
//! - `run` evaluates dataset records (in-process or against a System One server) with one
//!   traced request each, appending a result line per record, resumable after a kill, and
//!   writes the report at the end (`run.rs`, `derive.rs`, `results.rs`).
//! - `calibrate` fits one temperature per question type on development results
//!   (`calibrate.rs`); `report` writes `report.md`, `report.json` and the SVG figures
//!   (`summary.rs`, `report.rs`, `figures.rs`); `compare` sets two result sets side by side
//!   with paired bootstrap intervals (`compare.rs`).
//! - `coherence` runs the metamorphic suite: development states' questions and their
//!   rewritings (negations, merged options, thresholds, paraphrases, ...) asked of a model or
//!   a server, scored per relation and dimension (`coherence/`, `docs/coherence.md`).
//!
//! `docs/eval.md` documents the commands, the result format and every derivation.

mod batch;
mod calibrate;
mod client;
mod coherence;
mod compare;
mod derive;
mod figures;
mod question;
mod report;
mod results;
mod run;
mod summary;
mod write;

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use clap::{Parser, Subcommand};
use indexmap::IndexMap;
use ruling_core::{AdapterCalibration, AdapterChoice, Options, Ruling, WeightDtype};
use ruling_schema::{
    Answer, Asset, AssetKind, AssetSource, ImageFormat, SystemOneRequest, SystemOneResponse,
};
use serde_json::{Value, json};

use crate::question::QuestionArg;

/// Evaluate ruling models: ask typed questions about content and read calibrated answers.
#[derive(Debug, Parser)]
#[command(name = "ruling-eval", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Ask questions about one state in-process and print the answers.
    Ask(AskArgs),
    /// Evaluate dataset records, appending one result line each; rerun to resume.
    Run(run::RunArgs),
    /// Fit one temperature per question type on dev results; write a calibration file.
    Calibrate(calibrate::CalibrateArgs),
    /// Write report.md, report.json and the SVG figures of a results directory.
    Report(report::ReportArgs),
    /// Two results directories side by side, with paired bootstrap intervals.
    Compare(compare::CompareArgs),
    /// Have a decoder write the assistant's turn for prompts (seeded sampling).
    Write(write::WriteArgs),
    /// The metamorphic coherence suite: do the answers obey probability? Writes report.md.
    Coherence(coherence::CoherenceArgs),
    /// A JSONL file of requests in, their responses out, against servers or in process;
    /// rerun to resume.
    Batch(batch::BatchArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  ruling-eval ask --model smollm2-135m --state 'My card was charged twice.' \\
      --question 'billing=noul:Is this about billing?' \\
      --question 'team=choice:Which team?:billing,tech,other' \\
      --question 'urgency=score:How urgent?:low,medium,high'
  ruling-eval ask --model ./model.gguf --state @ticket.json --question 'q=noul:Is it spam?' --json")]
struct AskArgs {
    /// A catalog name (smollm2-135m, qwen2.5-coder-0.5b, ...), `hf:org/repo[@revision]`, or a
    /// local path.
    #[arg(long, env = "RULING_MODEL")]
    model: String,
    /// The content asked about: text, `@path` to read a file (a file holding a JSON object or
    /// array is sent as that JSON), or `-` to read stdin the same way.
    #[arg(long)]
    state: String,
    /// `ID=noul:TEXT`, `ID=choice:TEXT:KEY,KEY,...` or `ID=score:TEXT:LEVEL,LEVEL,...` (lowest
    /// first); option keys and levels may not contain ':' or ','. Repeat for more questions.
    #[arg(
        long = "question",
        short = 'q',
        required = true,
        value_name = "QUESTION"
    )]
    questions: Vec<QuestionArg>,
    /// Orderings averaged per question (1: as given; 2+: both directions for noul and score,
    /// that many cyclic rotations for a choice).
    #[arg(long, env = "RULING_ROTATIONS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rotations: u32,
    /// Subtract the content-free prior of each option count (off by default: it over-corrects
    /// the small models on development data).
    #[arg(long, env = "RULING_PRIOR")]
    prior: bool,
    /// A calibration file fitted for this model and these settings (with --adapter, for the
    /// adapted model).
    #[arg(long, env = "RULING_CALIBRATION")]
    calibration: Option<PathBuf>,
    /// Answer through this LoRA adapter file over the model (candle backend only).
    #[arg(long)]
    adapter: Option<PathBuf>,
    /// What runs a decoder: candle (pure Rust) or llama (llama.cpp's kernels, GGUF only). A
    /// decision encoder ignores it.
    #[arg(long, env = "RULING_BACKEND", default_value_t = ruling_core::DecoderBackend::default())]
    backend: ruling_core::DecoderBackend,
    /// The precision weight matrices are kept at: auto, native, f32, f16 or q8_0.
    #[arg(long, env = "RULING_DTYPE", default_value = "auto")]
    dtype: WeightDtype,
    /// The model cache root (default: the platform cache directory + /ruling).
    #[arg(long, env = "RULING_CACHE")]
    cache: Option<PathBuf>,
    /// Print the raw System One response JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Ask the engine for its evaluation trace (per-rotation log-probabilities, priors,
    /// candidate mass) and print it.
    #[arg(long)]
    trace: bool,
    /// An image the state or questions name: `PLACEHOLDER=FILE` (PNG or JPEG), sent as an
    /// inline asset; the placeholder must appear in the state or a question. Repeatable. Needs
    /// a vision model (`--backend llama --mmproj FILE`; docs/images.md).
    #[arg(long = "image", value_name = "PLACEHOLDER=FILE")]
    images: Vec<String>,
    /// The vision projector GGUF of a vision-language model (with `--backend llama`).
    #[arg(long, env = "RULING_MMPROJ")]
    mmproj: Option<PathBuf>,
    /// Most tokens one image may become; each is resized to fit.
    #[arg(long, env = "RULING_MAX_IMAGE_TOKENS", default_value_t = Options::default().max_image_tokens)]
    max_image_tokens: u32,
}

#[global_allocator]
static ALLOCATOR: ruling_alloc::Allocator = ruling_alloc::Allocator;

fn main() -> anyhow::Result<()> {
    ruling_alloc::settle();
    let cli = Cli::parse();
    match cli.command {
        Command::Ask(args) => ask(args),
        Command::Run(args) => run::run(args),
        Command::Calibrate(args) => calibrate::calibrate(args),
        Command::Report(args) => report::report(args),
        Command::Compare(args) => compare::compare(args),
        Command::Write(args) => write::write(args),
        Command::Batch(args) => batch::run(args),
        Command::Coherence(args) => coherence::coherence(args),
    }
}

fn ask(args: AskArgs) -> anyhow::Result<()> {
    let mut ids: Vec<&str> = Vec::new();
    for question in &args.questions {
        if ids.contains(&question.id.as_str()) {
            bail!(
                "question id {:?} is given twice; every question needs its own id",
                question.id
            );
        }
        ids.push(&question.id);
    }
    let state = read_state(&args.state)?;
    let mut request = build_request(&args.model, state, &args.questions, args.trace)?;
    if !args.images.is_empty() {
        request.assets = Some(read_images(&args.images)?);
    }

    let (calibration, adapter) = with_adapter(args.calibration.clone(), &args.adapter)?;
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
        mmproj: args.mmproj.clone(),
        max_image_tokens: args.max_image_tokens,
        ..Options::default()
    };
    let started = Instant::now();
    let ruling = Ruling::load(&args.model, &options)
        .with_context(|| format!("loading model {}", args.model))?;
    let loaded = started.elapsed();
    let started = Instant::now();
    let response = ruling
        .evaluate(&request)
        .context("evaluating the questions")?;
    let evaluated = started.elapsed();

    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &response)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", table(&response, loaded, evaluated))?;
        if let Some(trace) = &response.evaluation_trace {
            writeln!(out, "\ntrace:\n{}", serde_json::to_string_pretty(trace)?)?;
        }
    }
    Ok(())
}

/// `--calibration` and `--adapter` as `Options` take them: with an adapter, the calibration is
/// the adapted model's (and only the one given: eval applies no calibration implicitly), and
/// the adapter is named by its own metadata.
pub(crate) fn with_adapter(
    calibration: Option<PathBuf>,
    adapter: &Option<PathBuf>,
) -> anyhow::Result<(Option<PathBuf>, Option<AdapterChoice>)> {
    let Some(path) = adapter else {
        return Ok((calibration, None));
    };
    let choice = AdapterChoice::from_file(path)
        .with_context(|| format!("reading the adapter {}", path.display()))?;
    let calibration = match calibration {
        Some(file) => AdapterCalibration::File(file),
        None => AdapterCalibration::Uncalibrated,
    };
    Ok((
        None,
        Some(AdapterChoice {
            calibration,
            ..choice
        }),
    ))
}

/// The state argument as the request's `state`: text, a file (`@path`) or stdin (`-`). A file
/// or stdin holding a JSON object or array is sent as that JSON; anything else as text.
fn read_state(given: &str) -> anyhow::Result<Value> {
    let contents = if given == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the state from stdin")?;
        text
    } else if let Some(path) = given.strip_prefix('@') {
        std::fs::read_to_string(path).with_context(|| format!("reading the state from {path}"))?
    } else {
        return Ok(Value::String(given.to_owned()));
    };
    Ok(match serde_json::from_str::<Value>(&contents) {
        Ok(value @ (Value::Object(_) | Value::Array(_))) => value,
        _ => Value::String(contents),
    })
}

/// `--image PLACEHOLDER=FILE` arguments as inline image assets, the format read from the
/// file's first bytes.
fn read_images(given: &[String]) -> anyhow::Result<IndexMap<String, Asset>> {
    let mut assets = IndexMap::new();
    for arg in given {
        let Some((placeholder, path)) = arg.split_once('=') else {
            bail!("--image {arg:?}: expected PLACEHOLDER=FILE, such as '<photo>=parcel.jpg'");
        };
        let bytes =
            std::fs::read(path).with_context(|| format!("--image {arg:?}: reading {path}"))?;
        let format = if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            ImageFormat::Png
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            ImageFormat::Jpeg
        } else {
            bail!("--image {arg:?}: {path} is neither PNG nor JPEG");
        };
        let asset = Asset {
            kind: AssetKind::Image,
            format,
            source: AssetSource::Inline {
                data_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
            },
        };
        if assets.insert(placeholder.to_owned(), asset).is_some() {
            bail!("--image: the placeholder {placeholder:?} is given twice");
        }
    }
    Ok(assets)
}

fn build_request(
    model: &str,
    state: Value,
    questions: &[QuestionArg],
    trace: bool,
) -> anyhow::Result<SystemOneRequest> {
    let questions: serde_json::Map<String, Value> = questions
        .iter()
        .map(|q| (q.id.clone(), q.to_wire()))
        .collect();
    let mut body = json!({"model": model, "state": state, "questions": questions});
    if trace {
        body["trace"] = Value::Bool(true);
    }
    serde_json::from_value(body).context("building the request")
}

/// How many of a distribution's options the table shows.
const TOP: usize = 5;

/// The readable form of a response: one row per question, then the timings.
fn table(response: &SystemOneResponse, loaded: Duration, evaluated: Duration) -> String {
    let rows: Vec<[String; 5]> = response
        .answers
        .iter()
        .map(|(id, answer)| {
            let (shown, confidence, distribution) = describe(answer);
            [
                id.clone(),
                answer.type_name().to_owned(),
                shown,
                confidence.map_or_else(|| "-".to_owned(), |c| format!("{c:.3}")),
                distribution,
            ]
        })
        .collect();
    let header = [
        "question",
        "type",
        "answer",
        "confidence",
        "distribution (top 5)",
    ];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 5]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate().take(4) {
            text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
        }
        text.push_str(cells[4]);
        text.trim_end().to_owned() + "\n"
    };
    let mut out = line(header);
    for row in &rows {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4]]));
    }
    out.push_str(&format!(
        "\nmodel {}: loaded in {:.2} s, evaluated in {:.3} s, {} tokens read\n",
        response.model,
        loaded.as_secs_f64(),
        evaluated.as_secs_f64(),
        response.usage.input_tokens
    ));
    out
}

/// An answer's shown value, its confidence, and its distribution sorted by probability.
fn describe(answer: &Answer) -> (String, Option<f64>, String) {
    match answer {
        Answer::Noul { noul } => (
            format!("P(yes) = {noul:.3}"),
            Some(noul.max(1.0 - noul)),
            top(&[("yes".to_owned(), *noul), ("no".to_owned(), 1.0 - noul)]),
        ),
        Answer::Choice {
            choice,
            confidence,
            probabilities,
        } => (
            choice.clone(),
            Some(*confidence),
            top(&probabilities
                .iter()
                .map(|(k, p)| (k.clone(), *p))
                .collect::<Vec<_>>()),
        ),
        Answer::Score {
            score,
            confidence,
            legend,
            probabilities,
        } => {
            let nearest = score.round().max(0.0) as usize;
            let label = legend.get(&nearest.to_string()).map_or("?", String::as_str);
            let named: Vec<(String, f64)> = probabilities
                .iter()
                .map(|(k, p)| {
                    let name = legend.get(k).map_or(k.clone(), |l| format!("{k} {l}"));
                    (name, *p)
                })
                .collect();
            (
                format!("{score:.2} (~{label})"),
                Some(*confidence),
                top(&named),
            )
        }
        Answer::Box { region, confidence } => (
            format!(
                "top {:.3} bottom {:.3} left {:.3} right {:.3}",
                region.top, region.bottom, region.left, region.right
            ),
            *confidence,
            String::new(),
        ),
    }
}

fn top(items: &[(String, f64)]) -> String {
    let mut sorted: Vec<&(String, f64)> = items.iter().collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut shown: Vec<String> = sorted
        .iter()
        .take(TOP)
        .map(|(k, p)| format!("{k} {p:.3}"))
        .collect();
    if sorted.len() > TOP {
        shown.push(format!("(+{} more)", sorted.len() - TOP));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_sorts_distributions_and_names_levels() {
        let response: SystemOneResponse = serde_json::from_value(json!({
            "model": "m",
            "answers": {
                "b": {"type": "noul", "noul": 0.25},
                "t": {"type": "choice", "choice": "tech", "confidence": 0.5,
                      "probabilities": {"billing": 0.2, "tech": 0.7, "other": 0.1}},
                "u": {"type": "score", "score": 1.2, "confidence": 0.4,
                      "legend": {"0": "low", "1": "medium", "2": "high"},
                      "probabilities": {"0": 0.1, "1": 0.6, "2": 0.3}}
            },
            "usage": {"input_tokens": 42, "output_tokens": 0}
        }))
        .unwrap();
        let text = table(
            &response,
            Duration::from_millis(1500),
            Duration::from_millis(20),
        );
        assert!(text.contains("P(yes) = 0.250"), "{text}");
        assert!(text.contains("no 0.750, yes 0.250"), "{text}");
        assert!(
            text.contains("tech 0.700, billing 0.200, other 0.100"),
            "{text}"
        );
        assert!(text.contains("1.20 (~medium)"), "{text}");
        assert!(
            text.contains("1 medium 0.600, 2 high 0.300, 0 low 0.100"),
            "{text}"
        );
        assert!(
            text.contains("loaded in 1.50 s, evaluated in 0.020 s, 42 tokens read"),
            "{text}"
        );
    }

    #[test]
    fn top_keeps_five_and_counts_the_rest() {
        let items: Vec<(String, f64)> = (0..7)
            .map(|i| (format!("k{i}"), f64::from(i) / 21.0))
            .collect();
        let shown = top(&items);
        assert!(shown.starts_with("k6 "), "{shown}");
        assert!(shown.ends_with("(+2 more)"), "{shown}");
    }

    #[test]
    fn cli_reads_repeated_questions() {
        let cli = Cli::try_parse_from([
            "ruling-eval",
            "ask",
            "--model",
            "m",
            "--state",
            "s",
            "--question",
            "a=noul:Is it?",
            "-q",
            "b=choice:Which?:x,y",
        ])
        .unwrap();
        let Command::Ask(args) = cli.command else {
            panic!("ask parses as ask");
        };
        assert_eq!(args.questions.len(), 2);
        assert_eq!(args.rotations, 1);
        let bad = Cli::try_parse_from([
            "ruling-eval",
            "ask",
            "--model",
            "m",
            "--state",
            "s",
            "--question",
            "a=choice:Which?:x",
        ])
        .unwrap_err()
        .to_string();
        assert!(bad.contains("at least two option keys"), "{bad}");
    }
}
