//! How fast llama.cpp writes when several prompts write together: the same long-form prompt
//! written by 1, 2, 4, 8 and 16 rows at once, every row held to a fixed length, tokens per
//! second over all rows. Says whether batching rows (continuous or not) is worth it here.
//!
//! `cargo run --release -p ruling-llama --example generation_rate -- MODEL TOKENS [FILLER_WORDS] [ROWS,..]`,
//! for example `-- qwen2.5-coder-1.5b 200 300 1,4` (the figures in docs/distill.md).

#![allow(clippy::print_stdout)] // a measurement printed for the reader

use std::time::Instant;

use ruling_backend::{Backend, ChatMessage, Generator, Role, Sampling};
use ruling_llama::{LlamaCppBackend, LoadOptions};
use ruling_models::{LocalModel, PullOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| "smollm2-135m".to_owned());
    let tokens: usize = args
        .next()
        .map_or(64, |n| n.parse().expect("a token count"));
    // Filler before the request, in words: a longer prompt, as a distillation writer reads.
    let filler: usize = args.next().map_or(0, |n| n.parse().expect("a word count"));
    let rows_tried: Vec<usize> = args
        .next()
        .unwrap_or_else(|| "1,2,4,8,16".to_owned())
        .split(',')
        .map(|r| r.parse().expect("rows, comma-separated"))
        .collect();
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ruling-cache");
    let mut options = PullOptions::new(cache);
    options.hub = false;
    let LocalModel::Gguf { path } = ruling_models::pull_str(&model, &options).expect("pull") else {
        panic!("{model} is not a GGUF");
    };
    let backend = LlamaCppBackend::load(
        &path,
        &LoadOptions {
            context_length: Some(16 * (tokens + 2 * filler + 128)),
            ..LoadOptions::default()
        },
    )
    .expect("load");
    let text = backend
        .render_chat(&[ChatMessage::new(
            Role::User,
            format!(
                "{}Write a long, detailed story about a lighthouse keeper and a storm.",
                "The tide came in over the rocks. ".repeat(filler / 7)
            ),
        )])
        .expect("chat");
    let prompt = backend.encode(&text).expect("encode");
    println!(
        "{model}: prompt {} tokens, {tokens} written per row",
        prompt.len()
    );
    for rows in rows_tried {
        let prompts: Vec<&[u32]> = vec![prompt.as_slice(); rows];
        let sampling = Sampling {
            temperature: 0.7,
            top_p: 0.95,
            seed: 1,
            max_tokens: tokens,
        };
        let started = Instant::now();
        let written = backend.generate(&prompts, &sampling).expect("generate");
        let seconds = started.elapsed().as_secs_f64();
        let total: usize = written.iter().map(|g| g.tokens.len()).sum();
        println!(
            "rows {rows:>2}: {total:>5} tokens in {seconds:>6.1} s, {:>6.1} tok/s",
            total as f64 / seconds
        );
    }
}
