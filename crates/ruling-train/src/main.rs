//! `ruling-train`: the trainers of ruling.
//!
//! - `ruling-train encoder` fine-tunes a decision encoder (a BERT or ModernBERT checkpoint) on
//!   typed-question records from the development side of `shared/datasets` and any JSONL record
//!   files, and writes a checkpoint `ruling-serve --model encoder:DIR` serves.
//! - `ruling-train soup` averages the weights of checkpoints one recipe trained with different
//!   seeds into one checkpoint, and fits its temperatures.
//! - `ruling-train lora` teaches a decoder's letter readout with a LoRA adapter on the same
//!   records, rendered exactly as the engine renders them, and writes an adapter
//!   `ruling-serve --adapter NAME=PATH` serves beside its base.
//! - `ruling-train distill write` and `distill answer` make distillation records: a large
//!   decoder's questions about development states, with its answers as soft targets.
//!
//! Every trainer refuses held-out states, resumes exactly after a kill (rerun the same
//! command), and keeps its best checkpoint with the sha256 of its data.

use clap::{Parser, Subcommand};

mod data;
mod distill;
mod encoder;
mod lora;
mod state;
mod steps;

#[global_allocator]
static ALLOCATOR: ruling_alloc::Allocator = ruling_alloc::Allocator;

#[derive(Debug, Parser)]
#[command(name = "ruling-train", version, about = "Train ruling's models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fine-tune a decision encoder on typed-question records.
    Encoder(encoder::EncoderArgs),
    /// Average the weights of checkpoints one recipe trained with different seeds, and fit
    /// the average's temperatures.
    Soup(encoder::SoupArgs),
    /// Teach a decoder's letter readout with a LoRA adapter.
    Lora(lora::LoraArgs),
    /// Distillation data: a large decoder writes questions about development states and
    /// answers them; its distributions become soft targets for `encoder --data`.
    #[command(subcommand)]
    Distill(distill::DistillCommand),
}

fn main() -> anyhow::Result<()> {
    ruling_alloc::settle();
    match Cli::parse().command {
        Command::Encoder(args) => encoder::run(&args),
        Command::Soup(args) => encoder::soup(&args),
        Command::Lora(args) => lora::run(&args),
        Command::Distill(command) => distill::run(&command),
    }
}
