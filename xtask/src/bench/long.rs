//! `cargo xtask bench long`: the decision encoder on long states, through `ruling-serve`.
//!
//! States of exactly 512, 2,048, 8,192 and 16,384 tokens (by the served checkpoint's own
//! tokenizer) are cut from Moby-Dick (development data), and asked 1, 3 and 8 questions
//! at a time, over loopback HTTP as a client would. Each length gets a server of its own, so
//! the peak resident memory read from `/proc` before it stops is that length's. Medians of a
//! few requests after one untimed warm-up. Writes `docs/bench/long-states.md` and `.json`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use ruling_calibration::quantile;
use serde::Serialize;
use serde_json::{Value, json};

use super::serve::Server;

#[derive(Debug, clap::Args)]
pub struct LongBenchArgs {
    /// The model served (a decision checkpoint: the default judge).
    #[arg(long, default_value = "ruling-judge-minilm-l6")]
    model: String,
    /// Its tokenizer, which cuts the states to their lengths.
    #[arg(long, default_value = "models/ruling-judge-minilm-l6/tokenizer.json")]
    tokenizer: PathBuf,
    /// State lengths in tokens, comma separated.
    #[arg(long, default_value = "512,2048,8192,16384", value_delimiter = ',')]
    lengths: Vec<usize>,
    /// Timed requests per length and question count.
    #[arg(long, default_value_t = 7)]
    repeats: usize,
    /// Where the report goes (`.json` beside it).
    #[arg(long, default_value = "docs/bench/long-states.md")]
    out: PathBuf,
    /// The `ruling-serve` binary (built with `cargo build --release -p ruling-serve`).
    #[arg(long, default_value = "target/release/ruling-serve")]
    server: PathBuf,
    /// The datasets folder [default: `RULING_DATASETS`, else `shared/datasets` beside the
    /// workspace].
    #[arg(long)]
    datasets_root: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct Row {
    state_tokens: usize,
    questions: usize,
    input_tokens: u64,
    median_ms: f64,
    p90_ms: f64,
    peak_rss_mib: f64,
}

/// Eight questions of the three types about a novel's passage; the first is the one asked
/// alone.
fn questions(count: usize) -> Value {
    let all = [
        (
            "whaling",
            json!({"type": "noul", "instructions": "Is this text about whaling?"}),
        ),
        (
            "genre",
            json!({"type": "choice", "instructions": "What kind of text is this?",
            "criteria": {"novel": "a passage of a novel", "email": null, "speech": null, "news": null}}),
        ),
        (
            "tone",
            json!({"type": "score", "instructions": "How dark is the tone?",
            "criteria": ["light", "neutral", "dark", "very dark"]}),
        ),
        (
            "captain",
            json!({"type": "noul", "instructions": "Does the text mention a captain?"}),
        ),
        (
            "setting",
            json!({"type": "choice", "instructions": "Where does it take place?",
            "criteria": {"at sea": null, "in a city": null, "in a forest": null, "in space": null, "other": null}}),
        ),
        (
            "danger",
            json!({"type": "score", "instructions": "How dangerous is the situation?",
            "criteria": ["safe", "some risk", "dangerous"]}),
        ),
        (
            "formal",
            json!({"type": "noul", "instructions": "Is the language formal?"}),
        ),
        (
            "narrator",
            json!({"type": "choice", "instructions": "Who tells the story?",
            "criteria": {"first person": "I, the narrator", "third person": null}}),
        ),
    ];
    Value::Object(
        all.into_iter()
            .take(count)
            .map(|(id, q)| (id.to_owned(), q))
            .collect(),
    )
}

pub fn run(args: &LongBenchArgs) -> anyhow::Result<()> {
    if !args.server.is_file() {
        bail!(
            "{} is missing: build it first with `cargo build --release -p ruling-serve`",
            args.server.display()
        );
    }
    let mut tokenizer = tokenizers::Tokenizer::from_file(&args.tokenizer)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.tokenizer.display()))?;
    tokenizer
        .with_truncation(None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let root = args
        .datasets_root
        .clone()
        .unwrap_or_else(ruling_corpus::default_root);
    let novel: String =
        std::fs::read_to_string(root.join("sotu_mobydick/moby_dick_sections.jsonl"))
            .context("reading Moby-Dick")?
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["text"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
            .join("\n\n");
    // `encode`, not `encode_fast`: the cut needs each token's offsets.
    let encoding = tokenizer
        .encode(novel.as_str(), false)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rows = Vec::new();
    for &length in &args.lengths {
        let Some(&(_, end)) = encoding.get_offsets().get(length.saturating_sub(1)) else {
            bail!("the novel is shorter than {length} tokens");
        };
        let state = &novel[..end];
        let counted = tokenizer
            .encode_fast(state, false)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .get_ids()
            .len();
        eprintln!(
            "bench long: {counted} tokens of state, serving {}",
            args.model
        );
        let server = Server::start(&args.server, &args.model, 1)?;
        for count in [1, 3, 8] {
            let body =
                json!({"model": "jev-latest", "state": state, "questions": questions(count)});
            server.ask(&body)?;
            let mut times = Vec::with_capacity(args.repeats);
            let mut input_tokens = 0;
            for _ in 0..args.repeats {
                let (elapsed, tokens) = server.ask(&body)?;
                times.push(elapsed.as_secs_f64() * 1e3);
                input_tokens = tokens;
            }
            times.sort_by(f64::total_cmp);
            rows.push(Row {
                state_tokens: counted,
                questions: count,
                input_tokens,
                median_ms: quantile(&times, 0.5).unwrap_or(f64::NAN),
                p90_ms: quantile(&times, 0.9).unwrap_or(f64::NAN),
                peak_rss_mib: f64::NAN,
            });
        }
        let peak = server.peak_rss_mib();
        for row in rows.iter_mut().filter(|r| r.state_tokens == counted) {
            row.peak_rss_mib = peak;
        }
        drop(server);
    }
    write_report(args, &rows)
}

fn write_report(args: &LongBenchArgs, rows: &[Row]) -> anyhow::Result<()> {
    let mut md = format!(
        "# Long states\n\nWritten by `cargo xtask bench long` (`xtask/src/bench/long.rs`): \
         `{}` served by the release `ruling-serve` (one engine worker, default settings), states \
         cut from Moby-Dick to exactly the lengths below by the checkpoint's tokenizer, asked \
         1, 3 and 8 questions over loopback HTTP; medians of {} requests after a warm-up. A state \
         past the 510 tokens of one window is read in windows (`docs/encoder.md`, \"Long states\"); \
         input tokens count every window, overlaps included, and the questions. Peak RSS is the \
         server's, a fresh one per length.\n\n",
        args.model, args.repeats
    );
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "an unknown CPU".to_owned());
    md.push_str(&format!(
        "Machine: {}, {} cores; {}.\n\n",
        cpu,
        std::thread::available_parallelism().map_or(0, usize::from),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    ));
    md.push_str(
        "| state tokens | questions | input tokens | median ms | p90 ms | peak RSS MiB |\n|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} |\n",
            r.state_tokens, r.questions, r.input_tokens, r.median_ms, r.p90_ms, r.peak_rss_mib
        ));
    }
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    ruling_models::files::write_atomic(&args.out, md.as_bytes())?;
    ruling_models::files::write_atomic(
        &args.out.with_extension("json"),
        &serde_json::to_vec_pretty(&json!(rows))?,
    )?;
    eprintln!("bench long: wrote {}", args.out.display());
    Ok(())
}
