//! `ruling-eval write`: a decoder writes the assistant's turn for prompts from the terminal,
//! with the seeded sampling distillation uses. A way to see what a teacher writes, and to time
//! generation on either backend.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use ruling_core::{ChatMessage, DecoderBackend, Finish, Options, Role, Sampling, Writer};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  ruling-eval write --model smollm2-135m --prompt 'Name three colours.'
  ruling-eval write --model qwen2.5-coder-0.5b --backend llama --temperature 0.7 --seed 3 \\
      --prompt 'Is a refund request about billing? Think step by step.' --prompt 'Say hi.'")]
pub(crate) struct WriteArgs {
    /// A decoder: a catalog name, `hf:org/repo[@revision]`, or a local path.
    #[arg(long, env = "RULING_MODEL")]
    model: String,
    /// A user turn to answer; repeat for several, written together in one call.
    #[arg(long = "prompt", short = 'p', required = true)]
    prompts: Vec<String>,
    /// A system turn put before every prompt.
    #[arg(long)]
    system: Option<String>,
    /// 0 writes the most likely token every time; higher draws more freely.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Draw only from the most likely tokens holding this much probability (1: all).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Seeds the draws; prompt i uses the seed's stream i.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most tokens written per prompt.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// What runs the decoder: candle or llama.
    #[arg(long, env = "RULING_BACKEND", default_value_t = DecoderBackend::default())]
    backend: DecoderBackend,
    /// The model cache root (default: the platform cache directory + /ruling).
    #[arg(long, env = "RULING_CACHE")]
    cache: Option<PathBuf>,
    /// Print one JSON object per prompt instead of the texts.
    #[arg(long)]
    json: bool,
}

pub(crate) fn write(args: WriteArgs) -> anyhow::Result<()> {
    let options = Options {
        backend: args.backend,
        cache_dir: args.cache.clone(),
        ..Options::default()
    };
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        seed: args.seed,
        max_tokens: args.max_tokens,
    };
    let conversations: Vec<Vec<ChatMessage>> = args
        .prompts
        .iter()
        .map(|prompt| {
            let mut turns = Vec::new();
            if let Some(system) = &args.system {
                turns.push(ChatMessage::new(Role::System, system.clone()));
            }
            turns.push(ChatMessage::new(Role::User, prompt.clone()));
            turns
        })
        .collect();
    let writer = Writer::load(&args.model, &options)
        .with_context(|| format!("loading model {}", args.model))?;
    let started = Instant::now();
    let written = writer.write(&conversations, &sampling).context("writing")?;
    let seconds = started.elapsed().as_secs_f64();
    let tokens: usize = written.iter().map(|w| w.tokens.len()).sum();

    let mut out = std::io::stdout().lock();
    for (index, turn) in written.iter().enumerate() {
        let finish = match turn.finish {
            Finish::Stop => "stop",
            Finish::Length => "length",
        };
        if args.json {
            let line = serde_json::json!({
                "prompt": args.prompts[index],
                "text": turn.text,
                "prompt_tokens": turn.prompt_tokens,
                "tokens": turn.tokens.len(),
                "finish": finish,
            });
            writeln!(out, "{line}")?;
        } else {
            if written.len() > 1 {
                writeln!(
                    out,
                    "--- prompt {} ({finish}, {} tokens)",
                    index + 1,
                    turn.tokens.len()
                )?;
            }
            writeln!(out, "{}", turn.text)?;
        }
    }
    eprintln!(
        "{tokens} tokens written in {seconds:.2} s ({:.1} tokens/s) on {}",
        tokens as f64 / seconds.max(1e-9),
        args.backend
    );
    Ok(())
}
