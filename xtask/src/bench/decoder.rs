//! `cargo xtask bench decoder`: what the shared-prefix design buys, measured.
//!
//! For each model and weight precision, in a child process of its own (so peak memory is the
//! model's alone): load time, prefill tokens/s, the wall time of a 400-token state with 1, 4,
//! 16 and 64 questions scored against the shared prefix and naively (each question re-running
//! the whole prompt), both branch layouts, the matmul throughput the forward pass achieved as
//! a share of a plain f32 matmul measured in the same process, and peak resident memory.
//! Writes `docs/bench/decoder.md` and `.json`. A program, not a test: it measures, it does not
//! assert.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use candle_core::{Device, Tensor};
use ruling_backend::{Backend, split_prompt, user_head};
use ruling_candle::{BranchLayout, CandleBackend, LoadOptions, WeightDtype};
use ruling_models::{LocalModel, PullOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, clap::Args)]
pub struct DecoderBenchArgs {
    /// Catalog names or model paths, comma separated.
    #[arg(long, default_value = "smollm2-135m,qwen2.5-coder-1.5b")]
    models: String,
    /// Weight precisions to compare, comma separated (auto, native, f32, f16, q8_0).
    #[arg(long, default_value = "native,f32")]
    dtypes: String,
    /// Question counts to time.
    #[arg(long, default_value = "1,4,16,64")]
    questions: String,
    /// Tokens in the state.
    #[arg(long, default_value_t = 400)]
    state_tokens: usize,
    /// Time the naive path while it is expected to take at most this many seconds for a
    /// count; past that, its time is extrapolated from the last measured count and marked so
    /// (the naive path is linear in the count by construction).
    #[arg(long, default_value_t = 90.0)]
    naive_seconds: f64,
    /// Most query tokens in one branch-scoring pass (the decoder's default when absent).
    #[arg(long)]
    max_branch_tokens: Option<usize>,
    /// Where the report goes (`.md` and `.json` beside it).
    #[arg(long, default_value = "docs/bench/decoder.md")]
    out: PathBuf,
    /// Internal: run one model at one precision and write its JSON here.
    #[arg(long, hide = true)]
    single: Option<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Run {
    model: String,
    dtype: String,
    load_s: f64,
    state_tokens: usize,
    prefill_tokens_per_s: f64,
    rows: Vec<Row>,
    layouts: Vec<LayoutRow>,
    plain_f32_gflops: f64,
    achieved_gflops: f64,
    peak_rss_mib: f64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Row {
    questions: usize,
    branch_tokens: usize,
    shared_s: f64,
    naive_s: f64,
    naive_extrapolated: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct LayoutRow {
    questions: usize,
    rows_s: f64,
    packed_s: f64,
}

pub fn run(args: &DecoderBenchArgs) -> anyhow::Result<()> {
    if let Some(out) = &args.single {
        let model = args.models.split(',').next().unwrap_or_default();
        let dtype: WeightDtype = args.dtypes.parse().map_err(anyhow::Error::msg)?;
        let result = single(model, dtype, args)?;
        std::fs::write(out, serde_json::to_vec_pretty(&result)?)?;
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let mut runs = Vec::new();
    for model in args.models.split(',').filter(|m| !m.is_empty()) {
        for dtype in args.dtypes.split(',').filter(|d| !d.is_empty()) {
            eprintln!("bench: {model} at {dtype}");
            let json =
                std::env::temp_dir().join(format!("ruling-bench-{}.json", std::process::id()));
            let status = Command::new(&exe)
                .args(["bench", "decoder", "--models", model, "--dtypes", dtype])
                .args([
                    "--questions",
                    &args.questions,
                    "--state-tokens",
                    &args.state_tokens.to_string(),
                ])
                .args([
                    "--naive-seconds",
                    &args.naive_seconds.to_string(),
                    "--single",
                ])
                .arg(&json)
                .status()?;
            if !status.success() {
                bail!("the benchmark of {model} at {dtype} failed ({status})");
            }
            runs.push(serde_json::from_slice::<Run>(&std::fs::read(&json)?)?);
            std::fs::remove_file(&json).ok();
        }
    }
    write_report(&args.out, &runs)
}

fn model_path(spec: &str) -> anyhow::Result<PathBuf> {
    let mut options = PullOptions::from_env()?;
    if std::env::var_os(ruling_models::CACHE_ENV).is_none() {
        options = PullOptions::new(Path::new("target/ruling-cache"));
    }
    Ok(match ruling_models::pull_str(spec, &options)? {
        LocalModel::Gguf { path } | LocalModel::Directory { path } => path,
    })
}

const STATE_TEXT: &str = "The customer writes that the invoice for March was charged twice to the \
    same card, once on the first and again on the third, and asks for one of the two payments \
    to be refunded. They add that the mobile app has logged them out several times this week, \
    that the password reset email arrives late, and that they would like to move from the \
    monthly plan to the yearly one if the refund goes through before the end of the month. ";

const QUESTIONS: [&str; 4] = [
    "Question: Is this ticket about billing or payments?\nA. yes\nB. no\nAnswer with the letter only.",
    "Question: Which team should handle this ticket first?\nA. billing\nB. technical support\nC. sales\nD. other\nAnswer with the letter only.",
    "Question: How urgent is this ticket?\nA. can wait\nB. this week\nC. today\nD. right now\nAnswer with the letter only.",
    "Question: Does the customer sound angry?\nA. yes\nB. no\nAnswer with the letter only.",
];

fn seconds(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

fn single(model: &str, dtype: WeightDtype, args: &DecoderBenchArgs) -> anyhow::Result<Run> {
    let path = model_path(model)?;
    let started = Instant::now();
    let options = LoadOptions {
        dtype,
        ..LoadOptions::default()
    };
    let mut backend = CandleBackend::load(&path, &options)
        .with_context(|| format!("loading {}", path.display()))?;
    let load_s = seconds(started);

    let counts: Vec<usize> = args
        .questions
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let most = counts.iter().copied().max().unwrap_or(1);
    let Workload {
        prefix,
        codes,
        branches: all_branches,
    } = workload(&backend, args.state_tokens, most)?;

    let started = Instant::now();
    let cache = backend.encode_prefix(&prefix)?;
    let prefill_s = seconds(started);
    drop(cache);

    let mut flops = 0.0;
    let mut busy = 0.0;
    let mut rows = Vec::new();
    let mut per_naive = 0.0;
    for &n in &counts {
        let branches = &all_branches[..n];
        let port = branch_views(branches, &codes);
        let started = Instant::now();
        let cache = backend.encode_prefix(&prefix)?;
        backend.score_branches(&cache, &port)?;
        let shared_s = seconds(started);
        let branch_tokens: usize = branches.iter().map(Vec::len).sum();
        flops += forward_flops(&backend, prefix.len(), 0)
            + branches
                .iter()
                .map(|b| forward_flops(&backend, b.len(), prefix.len()))
                .sum::<f64>();
        busy += shared_s;
        let expected = per_naive * n as f64;
        let (naive_s, extrapolated) = if per_naive == 0.0 || expected <= args.naive_seconds {
            let started = Instant::now();
            for branch in &port {
                backend
                    .decoder()
                    .score_naive(&prefix, branch.tokens, branch.codes)?;
            }
            let s = seconds(started);
            per_naive = s / n as f64;
            (s, false)
        } else {
            (per_naive * n as f64, true)
        };
        eprintln!(
            "bench: {model} {n:>3} questions: shared {shared_s:.2}s, naive {naive_s:.2}s{}",
            if extrapolated { " (extrapolated)" } else { "" }
        );
        rows.push(Row {
            questions: n,
            branch_tokens,
            shared_s,
            naive_s,
            naive_extrapolated: extrapolated,
        });
    }

    let layouts = layout_rows(&mut backend, &prefix, &all_branches, &codes, &counts)?;

    let hidden = backend.decoder().config().hidden_size;
    Ok(Run {
        model: model.to_owned(),
        dtype: format!("{dtype:?}").to_lowercase(),
        load_s,
        state_tokens: prefix.len(),
        prefill_tokens_per_s: prefix.len() as f64 / prefill_s,
        rows,
        layouts,
        plain_f32_gflops: plain_matmul_gflops(512, hidden)?,
        achieved_gflops: flops / busy / 1e9,
        peak_rss_mib: peak_rss_mib(),
    })
}

/// What every row scores: the prefix of a state of exactly `state_tokens` tokens, the four
/// answer codes, and `most` question branches.
struct Workload {
    prefix: Vec<u32>,
    codes: Vec<u32>,
    branches: Vec<Vec<u32>>,
}

fn workload(backend: &CandleBackend, state_tokens: usize, most: usize) -> anyhow::Result<Workload> {
    // The state is decoded back to text, so the prompt renders it as a user would send it.
    let mut text = String::new();
    while backend.encode(&text)?.len() < state_tokens {
        text.push_str(STATE_TEXT);
    }
    let ids = backend.encode(&text)?;
    let state = backend.tokenizer().decode(&ids[..state_tokens])?;
    let split = split_prompt(
        backend,
        ruling_backend::render::SYSTEM_PROMPT,
        &user_head(&state),
    )?;
    let prefix = backend.encode(&split.prefix)?;
    let codes = ["A", "B", "C", "D"]
        .iter()
        .map(|c| backend.encode(c).map(|t| t[0]))
        .collect::<Result<_, _>>()?;
    let branches = (0..most)
        .map(|i| backend.encode(&format!("{}{}", QUESTIONS[i % QUESTIONS.len()], split.tail)))
        .collect::<Result<_, _>>()?;
    Ok(Workload {
        prefix,
        codes,
        branches,
    })
}

fn branch_views<'a>(branches: &'a [Vec<u32>], codes: &'a [u32]) -> Vec<ruling_backend::Branch<'a>> {
    branches
        .iter()
        .map(|tokens| ruling_backend::Branch { tokens, codes })
        .collect()
}

/// The two branch layouts side by side, on every count of at least 16 questions.
fn layout_rows(
    backend: &mut CandleBackend,
    prefix: &[u32],
    all_branches: &[Vec<u32>],
    codes: &[u32],
    counts: &[usize],
) -> anyhow::Result<Vec<LayoutRow>> {
    let mut layouts = Vec::new();
    for &n in counts.iter().filter(|&&n| n >= 16) {
        let port = branch_views(&all_branches[..n], codes);
        let cache = backend.encode_prefix(prefix)?;
        let mut time = |layout| -> anyhow::Result<f64> {
            backend.set_layout(layout);
            let started = Instant::now();
            backend.score_branches(&cache, &port)?;
            Ok(seconds(started))
        };
        let rows_s = time(BranchLayout::Rows)?;
        let packed_s = time(BranchLayout::Packed)?;
        backend.set_layout(BranchLayout::Rows);
        layouts.push(LayoutRow {
            questions: n,
            rows_s,
            packed_s,
        });
    }
    Ok(layouts)
}

/// Multiply-adds of the projections and attention for `tokens` new tokens after `past`.
fn forward_flops(backend: &CandleBackend, tokens: usize, past: usize) -> f64 {
    let c = backend.decoder().config();
    let (h, d) = (c.hidden_size as f64, c.head_dim as f64);
    let q = c.num_heads as f64 * d;
    let kv = c.num_kv_heads as f64 * d;
    let per_token_layer =
        2.0 * (h * q + 2.0 * h * kv + q * h + 3.0 * h * c.intermediate_size as f64);
    let keys = past as f64 + tokens as f64 / 2.0;
    let attention = 4.0 * q * keys;
    tokens as f64 * c.num_layers as f64 * (per_token_layer + attention)
}

fn plain_matmul_gflops(m: usize, k: usize) -> anyhow::Result<f64> {
    let a = Tensor::ones((m, k), candle_core::DType::F32, &Device::Cpu)?;
    let b = Tensor::ones((k, k), candle_core::DType::F32, &Device::Cpu)?;
    a.matmul(&b)?;
    let reps = 10;
    let started = Instant::now();
    for _ in 0..reps {
        a.matmul(&b)?;
    }
    Ok(2.0 * (m * k * k * reps) as f64 / seconds(started) / 1e9)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn write_report(out: &Path, runs: &[Run]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut md = String::new();
    writeln!(md, "# Decoder benchmark\n")?;
    writeln!(
        md,
        "Written by `cargo xtask bench decoder` on {} ({} CPUs). Times are wall-clock seconds of one run; ratios compare runs made side by side in the same process.\n",
        std::env::consts::ARCH,
        std::thread::available_parallelism().map_or(0, usize::from)
    )?;
    writeln!(
        md,
        "| model | weights | load s | prefill tok/s | achieved GFLOP/s | plain f32 matmul GFLOP/s | share | peak RSS MiB |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for r in runs {
        writeln!(
            md,
            "| {} | {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0}% | {:.0} |",
            r.model,
            r.dtype,
            r.load_s,
            r.prefill_tokens_per_s,
            r.achieved_gflops,
            r.plain_f32_gflops,
            100.0 * r.achieved_gflops / r.plain_f32_gflops,
            r.peak_rss_mib
        )?;
    }
    writeln!(
        md,
        "\n## A {}-token state with N questions\n",
        runs.first().map_or(0, |r| r.state_tokens)
    )?;
    writeln!(
        md,
        "Shared: encode the prefix once, score every question against it. Naive: run prefix and question from scratch per question (marked ~ where extrapolated linearly from the largest measured count). Cost vs 1: shared time over the shared time of one question.\n"
    )?;
    writeln!(
        md,
        "| model | weights | questions | branch tokens | shared s | naive s | naive / shared | shared cost vs 1 question |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for r in runs {
        let one = r.rows.first().map_or(f64::NAN, |row| row.shared_s);
        for row in &r.rows {
            let mark = if row.naive_extrapolated { "~" } else { "" };
            writeln!(
                md,
                "| {} | {} | {} | {} | {:.2} | {mark}{:.2} | {mark}{:.1}x | {:.2}x |",
                r.model,
                r.dtype,
                row.questions,
                row.branch_tokens,
                row.shared_s,
                row.naive_s,
                row.naive_s / row.shared_s,
                row.shared_s / one
            )?;
        }
    }
    writeln!(
        md,
        "\n## Branch layouts (scoring only, prefix already encoded)\n"
    )?;
    writeln!(
        md,
        "| model | weights | questions | rows s | packed s | packed / rows |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for r in runs {
        for l in &r.layouts {
            writeln!(
                md,
                "| {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                r.model,
                r.dtype,
                l.questions,
                l.rows_s,
                l.packed_s,
                l.packed_s / l.rows_s
            )?;
        }
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, &md)?;
    std::fs::write(out.with_extension("json"), serde_json::to_vec_pretty(runs)?)?;
    eprintln!("bench: wrote {}", out.display());
    #[allow(clippy::print_stdout)] // the report on stdout is this command's output
    {
        print!("{md}");
    }
    Ok(())
}
