//! `ruling-train distill`: a large decoder writes typed questions about many development
//! states and answers them with option-order averaging; its probabilities become soft targets
//! the decision encoder learns from (seed `ruling/distill.py`; `docs/distill.md`).
//!
//! Two stages, each a command that can be killed at any moment and rerun to carry on:
//!
//! - `write`: states from the development side of `shared/datasets` (and JSONL files of
//!   states), never a held-out one; the writer model is asked for a mix of noul, choice and
//!   score questions about each, in batches with a seed per batch; every reply is parsed and
//!   each question validated as a request would be (`parse.rs`), the rest dropped and counted
//!   by reason. One journal line per state (`written.jsonl`): the reply, what it yielded, what
//!   was dropped.
//! - `answer`: every written record answered by the teacher through the decoder engine, at
//!   least two option orders per question, calibrated; the answers' distributions stored as
//!   `target` references (`answered.jsonl`, records of DESIGN.md the trainers read with
//!   `--data`). Records the teacher cannot fit are journalled in `skipped.jsonl`.
//!
//! Resuming matches on content, never on line counts: the writer skips states already in its
//! journal (a batch cut short is written again whole, from the same seed, and only its missing
//! states appended), the answerer skips records whose state and questions already have an
//! answer or a skip line. A stage's settings are pinned in its manifest at the first run; a
//! rerun with other settings is refused, naming the setting.

mod answer;
mod parse;
mod pool;
mod stats;
mod write;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ruling_corpus::Record;
use ruling_encoder::checkpoint::write_atomic;
use ruling_models::files::sha256_hex;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use answer::AnswerArgs;
pub use pool::PoolArgs;
pub use stats::StatsArgs;
pub use write::WriteArgs;

/// The writer's journal: one line per state.
pub const WRITTEN_FILE: &str = "written.jsonl";
/// The writer's settings.
pub const WRITE_MANIFEST: &str = "write.json";
/// The taxonomy's questions about the pool of states.
pub const POOL_FILE: &str = "pool.jsonl";
/// The pool's settings.
pub const POOL_MANIFEST: &str = "pool.json";
/// The answered records.
pub const ANSWERED_FILE: &str = "answered.jsonl";
/// Records the teacher could not answer, and why.
pub const SKIPPED_FILE: &str = "skipped.jsonl";
/// The answerer's settings.
pub const ANSWER_MANIFEST: &str = "answer.json";
/// The statistics `distill stats` writes.
pub const STATS_FILE: &str = "stats.md";

/// The stages of `ruling-train distill`.
#[derive(Debug, clap::Subcommand)]
pub enum DistillCommand {
    /// Draw the taxonomy's questions about a pool of development states from every source.
    Pool(PoolArgs),
    /// Have a decoder write questions about development states.
    Write(WriteArgs),
    /// Have the teacher answer every written question; its distributions become targets.
    Answer(AnswerArgs),
    /// Count what the stages wrote: questions per type, drops by reason, the teacher's
    /// confidence.
    Stats(StatsArgs),
}

pub fn run(command: &DistillCommand) -> anyhow::Result<()> {
    match command {
        DistillCommand::Pool(args) => pool::run(args),
        DistillCommand::Write(args) => write::run(args),
        DistillCommand::Answer(args) => answer::run(args),
        DistillCommand::Stats(args) => stats::run(args),
    }
}

/// What identifies a record's content for resuming: its state and its questions, in order.
pub fn content_key(record: &Record) -> String {
    let questions = serde_json::to_string(&record.questions).expect("questions serialise");
    sha256_hex(format!("{}\n{questions}", ruling_corpus::state_key(&record.state)).as_bytes())
}

/// A stage's journal read back, with any line a killed run left unfinished cut off the file
/// (and said so, under the stage's name).
fn reopen<T: DeserializeOwned>(
    path: &Path,
    stage: &str,
) -> anyhow::Result<ruling_corpus::journal::ReadBack<T>> {
    let journal = ruling_corpus::journal::read_journal::<T>(path)?;
    let cut = ruling_corpus::journal::repair(path, &journal)?;
    if cut > 0 {
        eprintln!(
            "{stage}: dropped {cut} bytes of a line a killed run left unfinished in {}",
            path.display()
        );
    }
    Ok(journal)
}

/// Pin a stage's settings: the first run writes them, every later run must match them.
fn pin_settings<T: Serialize + DeserializeOwned>(
    path: &Path,
    settings: &T,
    stage: &str,
) -> anyhow::Result<()> {
    let wanted = serde_json::to_value(settings)?;
    match std::fs::read(path) {
        Ok(bytes) => {
            let pinned: serde_json::Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a settings file", path.display()))?;
            if let Some((field, was, now)) = first_difference(&pinned, &wanted) {
                bail!(
                    "{} was started with {field} = {was}, this command gives {now}; rerun with \
                     the same settings to resume, or choose another --dir to start a new {stage} run",
                    path.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = serde_json::to_vec_pretty(&wanted)?;
            bytes.push(b'\n');
            write_atomic(path, &bytes).with_context(|| format!("writing {}", path.display()))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The first top-level field two settings objects disagree on.
fn first_difference(
    was: &serde_json::Value,
    now: &serde_json::Value,
) -> Option<(String, String, String)> {
    let (Some(was), Some(now)) = (was.as_object(), now.as_object()) else {
        return (was != now).then(|| ("settings".into(), was.to_string(), now.to_string()));
    };
    let missing = serde_json::Value::String("(not set)".into());
    was.keys()
        .chain(now.keys().filter(|k| !was.contains_key(*k)))
        .find_map(|key| {
            let a = was.get(key).unwrap_or(&missing);
            let b = now.get(key).unwrap_or(&missing);
            (a != b).then(|| (key.clone(), a.to_string(), b.to_string()))
        })
}

/// The stage files of a distillation directory.
#[derive(Debug, Clone)]
pub struct DistillDir(PathBuf);

impl DistillDir {
    pub fn new(dir: &Path) -> Self {
        Self(dir.to_owned())
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_differing_setting_is_named() {
        let was = json!({"writer": "a", "seed": 1, "batch": 8});
        assert_eq!(first_difference(&was, &was), None);
        let now = json!({"writer": "a", "seed": 2, "batch": 8});
        assert_eq!(
            first_difference(&was, &now),
            Some(("seed".into(), "1".into(), "2".into()))
        );
        let added = json!({"writer": "a", "seed": 1, "batch": 8, "top_p": 0.9});
        assert_eq!(
            first_difference(&was, &added),
            Some(("top_p".into(), "\"(not set)\"".into(), "0.9".into()))
        );
    }
}
