//! The same work on plain llama.cpp (the `llama-cpp-2` crate, no engine), as a careful user of
//! llama.cpp would write it: one context, the prefix decoded once into sequence 0, each branch
//! decoded on top of it with logits at its last token and its cells removed after; generation
//! with one sequence per prompt, every prompt's next token in one batch, greedy.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use ruling_backend::{ChatMessage, Role};

use crate::{Args, PROMPTS, Plain, RequestRow, Work, WriteRow, median, seconds};

/// Tokens in one decode call.
const BATCH: usize = 2048;

/// Replays `work` (what the engine asked the llama backend for) and writes the benchmark's
/// prompts, on the GGUF at `path`.
pub fn plain(path: &Path, work: &[(RequestRow, Work)], args: &Args) -> anyhow::Result<Plain> {
    let runtime = ruling_llama::runtime()?;
    let model = LlamaModel::load_from_file(runtime, path, &LlamaModelParams::default())?;
    let threads = i32::try_from(args.threads).unwrap_or(2);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(8192))
        .with_n_batch(BATCH as u32)
        .with_n_ubatch(512)
        .with_n_seq_max(8)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut context = model.new_context(runtime, params)?;
    let mut batch = LlamaBatch::new(BATCH, 1);
    let prefix = &work.first().context("no work recorded")?.1.prefix;
    Ok(Plain {
        prefill_tokens_per_s: prefill_rate(&mut context, &mut batch, prefix)?,
        requests: replay(&mut context, &mut batch, work)?,
        writing: write(&model, &mut context, &mut batch, path, args)?,
    })
}

fn token(id: u32) -> LlamaToken {
    LlamaToken(i32::try_from(id).unwrap_or(i32::MAX))
}

/// Decodes `prefix` into sequence 0 of an emptied cache, in chunks of [`BATCH`], with logits
/// at its last token only when `logits` is set.
fn decode_prefix(
    context: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    prefix: &[u32],
    logits: bool,
) -> anyhow::Result<()> {
    context.clear_kv_cache();
    for (chunk_index, chunk) in prefix.chunks(BATCH).enumerate() {
        batch.clear();
        for (offset, &id) in chunk.iter().enumerate() {
            let at = chunk_index * BATCH + offset;
            batch.add(token(id), at as i32, &[0], logits && at + 1 == prefix.len())?;
        }
        context.decode(batch)?;
    }
    Ok(())
}

/// Prefill tokens per second: the median of three, after one warm-up.
fn prefill_rate(
    context: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    prefix: &[u32],
) -> anyhow::Result<f64> {
    decode_prefix(context, batch, prefix, true)?;
    let mut times = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        decode_prefix(context, batch, prefix, true)?;
        times.push(seconds(started));
    }
    Ok(prefix.len() as f64 / median(&mut times))
}

/// Each recorded request: its prefix, then every branch on top of it, read and dropped.
fn replay(
    context: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    work: &[(RequestRow, Work)],
) -> anyhow::Result<Vec<RequestRow>> {
    let mut requests = Vec::new();
    // Whole branches only: plain llama.cpp knows no stems and no stopping.
    for (row, recorded) in work
        .iter()
        .filter(|(row, _)| !(row.adaptive || row.every_rotation && row.stems))
    {
        let mut times = Vec::new();
        while times.len() < 3 && times.iter().sum::<f64>() < 20.0 {
            let started = Instant::now();
            decode_prefix(context, batch, &recorded.prefix, false)?;
            let p = recorded.prefix.len();
            for branch in &recorded.branches {
                batch.clear();
                for (offset, &id) in branch.iter().enumerate() {
                    let last = offset + 1 == branch.len();
                    batch.add(token(id), (p + offset) as i32, &[0], last)?;
                }
                context.decode(batch)?;
                let logits = context.get_logits_ith(batch.n_tokens() - 1);
                std::hint::black_box(logits.iter().copied().fold(f32::MIN, f32::max));
                context.clear_kv_cache_seq(Some(0), Some(p as u32), None)?;
            }
            times.push(seconds(started));
        }
        let seconds = median(&mut times);
        eprintln!(
            "bench: plain llama.cpp: {} questions{}: {seconds:.2} s",
            row.questions,
            if row.every_rotation {
                ", every rotation"
            } else {
                ""
            }
        );
        requests.push(RequestRow {
            seconds,
            ..row.clone()
        });
    }
    Ok(requests)
}

/// Greedy generation for one prompt and for eight at once, each prompt its own sequence.
fn write(
    model: &LlamaModel,
    context: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    path: &Path,
    args: &Args,
) -> anyhow::Result<Vec<WriteRow>> {
    let vocab = model.vocab();
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| {
            let text = format_prompt(path, p)?;
            Ok(vocab
                .tokenize(text.as_bytes(), false, true)
                .into_iter()
                .map(|t| t.0 as u32)
                .collect())
        })
        .collect::<anyhow::Result<_>>()?;
    let mut writing = Vec::new();
    for count in [1usize, 8] {
        context.clear_kv_cache();
        let started = Instant::now();
        batch.clear();
        let mut lengths = Vec::new();
        let mut last = Vec::new();
        for (seq, prompt) in prompts[..count].iter().enumerate() {
            for (at, &id) in prompt.iter().enumerate() {
                batch.add(token(id), at as i32, &[seq as i32], at + 1 == prompt.len())?;
            }
            lengths.push(prompt.len());
            last.push(Some(batch.n_tokens() - 1));
        }
        context.decode(batch)?;
        let mut written = 0;
        let mut steps = 0;
        while steps < args.write_tokens {
            batch.clear();
            let mut rows = Vec::new();
            for seq in 0..count {
                let Some(at) = last[seq] else { continue };
                let logits = context.get_logits_ith(at);
                let mut best = 0;
                for (i, &l) in logits.iter().enumerate() {
                    if l > logits[best] {
                        best = i;
                    }
                }
                let next = LlamaToken(best as i32);
                if vocab.is_eog(next) {
                    last[seq] = None;
                    continue;
                }
                written += 1;
                batch.add(next, lengths[seq] as i32, &[seq as i32], true)?;
                lengths[seq] += 1;
                rows.push(seq);
            }
            if rows.is_empty() {
                break;
            }
            context.decode(batch)?;
            for (index, seq) in rows.into_iter().enumerate() {
                last[seq] = Some(index as i32);
            }
            steps += 1;
        }
        let row = WriteRow {
            prompts: count,
            tokens: written,
            seconds: seconds(started),
        };
        eprintln!(
            "bench: plain llama.cpp: {count} prompts wrote {} tokens in {:.2} s",
            row.tokens, row.seconds
        );
        writing.push(row);
    }
    Ok(writing)
}

/// A user turn in the GGUF's own chat template (rendered by the project's reader, as every
/// backend does, so the plain run writes after the same prompt).
fn format_prompt(path: &Path, user: &str) -> anyhow::Result<String> {
    let text = ruling_candle::ChatText::from_gguf(path)?;
    Ok(text.render_chat(&[ChatMessage::new(Role::User, user)])?)
}
