//! `batch-probe`: where llama.cpp's batch dependence comes from.
//!
//! One branch is decoded over a shared prefix alone, and then again with `k` tokens of another
//! sequence beside it, arranged three ways that move one thing at a time:
//!
//! - *before*: the other tokens come first in the same decode call, so the branch's rows of the
//!   batch and its cache cells both move by `k`;
//! - *after*: they come after it in the same call, so only the batch grows (the branch's rows
//!   and cells stay where they were alone);
//! - *cells*: they are decoded first in a call of their own and kept, then the branch alone, so
//!   only its cache cells move by `k`.
//!
//! For each `k` it prints the largest difference over the branch's last row of logits from the
//! branch decoded alone. A program, not a test: it measures, it does not assert. Run it with
//! `cargo run --release -p ruling-bench --bin batch-probe -- MODEL.gguf`.

// Its output is the table it prints.
#![allow(clippy::print_stdout)]

use std::num::NonZeroU32;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;

#[derive(Debug, Parser)]
#[command(about = "Where llama.cpp's batch dependence comes from: one branch, moved three ways")]
struct Args {
    /// A GGUF file.
    model: PathBuf,
    /// Flash attention: 0 off (the scoring context), -1 llama.cpp's choice (on, for the CPU).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    flash_attention: i32,
    /// Displacements to try, comma separated.
    #[arg(
        long,
        default_value = "0,1,2,3,4,5,6,7,8,9,12,15,16,17,24,31,32,33,48,64,96,128"
    )]
    shifts: String,
    #[arg(long, default_value_t = 2)]
    threads: i32,
}

const PREFIX: &str = "A customer writes: my card was charged twice for the March invoice, once on \
the first and again on the third, and the second charge has not been refunded although your \
support page promised a refund within five working days. I have attached both statements. \
Please refund the duplicate charge and confirm by email. Question: is this message about \
billing? Options: A) yes B) no C) it cannot be told from the text. Think about the customer's \
words and the options, then answer with one letter.";
const BRANCH: &str = " The message is about a duplicate card charge, so the answer is";
const OTHER: &str = " Unrelated words fill another sequence so that the branch has company in \
the batch and in the cache, and the filler, said six times, is long enough for every shift the \
probe tries, which is why this sentence goes on for a while about nothing in particular.";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = ruling_llama::runtime()?;
    let model = LlamaModel::load_from_file(runtime, &args.model, &LlamaModelParams::default())
        .with_context(|| format!("loading {}", args.model.display()))?;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(2048))
        .with_n_batch(512)
        .with_n_ubatch(512)
        .with_n_seq_max(4)
        .with_kv_unified(true)
        .with_flash_attention_policy(args.flash_attention)
        .with_n_threads(args.threads)
        .with_n_threads_batch(args.threads);
    let mut context = model.new_context(runtime, params)?;
    let vocab = model.vocab();
    let prefix = vocab.tokenize(PREFIX.as_bytes(), true, false);
    let branch = vocab.tokenize(BRANCH.as_bytes(), false, false);
    let other = vocab.tokenize(OTHER.as_bytes(), false, false).repeat(6);
    let shifts: Vec<usize> = args
        .shifts
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()
        .context("--shifts: comma-separated whole numbers")?;
    let most = shifts.iter().copied().max().unwrap_or(0);
    anyhow::ensure!(
        other.len() >= most,
        "the filler has {} tokens, fewer than the largest shift {most}",
        other.len()
    );

    let long: Vec<LlamaToken> = other.iter().copied().cycle().take(400).collect();
    let prefill = prefill_rate(&mut context, &long)?;
    let mut probe = Probe {
        context: &mut context,
        batch: LlamaBatch::new(512, 1),
        at: prefix.len(),
    };
    probe.prefix(&prefix)?;
    let alone = probe.run(&branch, &[], Arrangement::After)?;
    let again = probe.run(&branch, &[], Arrangement::After)?;
    println!(
        "{}: prefill {prefill:.1} tokens/s; prefix {} tokens, branch {}, flash attention {}; \
         alone twice: max |diff| {:.3e}",
        args.model.display(),
        prefix.len(),
        branch.len(),
        args.flash_attention,
        max_diff(&alone, &again)
    );
    println!("| k | before (rows and cells move) | after (batch grows) | cells (cells move) |");
    println!("|---:|---:|---:|---:|");
    for k in shifts {
        let filler = &other[..k];
        let row =
            [Arrangement::Before, Arrangement::After, Arrangement::Cells].map(|arrangement| {
                probe
                    .run(&branch, filler, arrangement)
                    .map(|logits| max_diff(&alone, &logits))
            });
        let [before, after, cells] = row;
        println!("| {k} | {:.4} | {:.4} | {:.4} |", before?, after?, cells?);
    }
    Ok(())
}

/// Tokens per second of `tokens` decoded into an empty cache in one call (median of three,
/// after one untimed).
fn prefill_rate(context: &mut LlamaContext<'_>, tokens: &[LlamaToken]) -> anyhow::Result<f64> {
    let mut batch = LlamaBatch::new(tokens.len(), 1);
    let mut times = Vec::new();
    for round in 0..4 {
        context.clear_kv_cache();
        batch.clear();
        for (at, &token) in tokens.iter().enumerate() {
            batch.add(token, pos(at), &[0], at + 1 == tokens.len())?;
        }
        let started = std::time::Instant::now();
        context.decode(&mut batch)?;
        if round > 0 {
            times.push(started.elapsed().as_secs_f64());
        }
    }
    context.clear_kv_cache();
    times.sort_by(f64::total_cmp);
    Ok(tokens.len() as f64 / times[1])
}

#[derive(Debug, Clone, Copy)]
enum Arrangement {
    Before,
    After,
    Cells,
}

struct Probe<'c, 'm> {
    context: &'c mut LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Where the branch and the filler start: the prefix's length.
    at: usize,
}

impl Probe<'_, '_> {
    fn prefix(&mut self, tokens: &[LlamaToken]) -> anyhow::Result<()> {
        self.batch.clear();
        for (at, &token) in tokens.iter().enumerate() {
            self.batch.add(token, pos(at), &[0], false)?;
        }
        self.context.decode(&mut self.batch)?;
        Ok(())
    }

    /// The branch's last row of logits (sequence 1) with `filler` in sequence 2.
    fn run(
        &mut self,
        branch: &[LlamaToken],
        filler: &[LlamaToken],
        arrangement: Arrangement,
    ) -> anyhow::Result<Vec<f32>> {
        self.context.copy_kv_cache_seq(0, 1, None, None)?;
        self.context.copy_kv_cache_seq(0, 2, None, None)?;
        self.batch.clear();
        let last = match arrangement {
            Arrangement::Before => {
                self.add(2, filler, false)?;
                self.add(1, branch, true)?
            }
            Arrangement::After => {
                let last = self.add(1, branch, true)?;
                self.add(2, filler, false)?;
                last
            }
            Arrangement::Cells => {
                if !filler.is_empty() {
                    self.add(2, filler, false)?;
                    self.context.decode(&mut self.batch)?;
                    self.batch.clear();
                }
                self.add(1, branch, true)?
            }
        };
        self.context.decode(&mut self.batch)?;
        let logits = self.context.get_logits_ith(last).to_vec();
        for seq in [1, 2] {
            self.context.clear_kv_cache_seq(Some(seq), None, None)?;
        }
        Ok(logits)
    }

    /// Add `tokens` to sequence `seq` from the prefix's end; the batch row of the last one.
    fn add(&mut self, seq: i32, tokens: &[LlamaToken], logits: bool) -> anyhow::Result<i32> {
        for (offset, &token) in tokens.iter().enumerate() {
            let last = logits && offset + 1 == tokens.len();
            self.batch.add(token, pos(self.at + offset), &[seq], last)?;
        }
        Ok(self.batch.n_tokens() - 1)
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn pos(index: usize) -> i32 {
    i32::try_from(index).unwrap_or(i32::MAX)
}
