//! `ruling-train distill answer`: the teacher's calibrated, order-averaged answers to every
//! written question, stored as soft `target` references.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use ruling_backend::EngineError;
use ruling_core::{CoreError, DecoderBackend, Options, Ruling};
use ruling_corpus::journal::{Appender, read_journal};
use ruling_corpus::{NOUL_KEYS, Record, Reference, Target};
use ruling_models::files::sha256_hex;
use ruling_schema::Answer;
use serde::{Deserialize, Serialize};

use super::write::WrittenState;
use super::{
    ANSWER_MANIFEST, ANSWERED_FILE, DistillDir, POOL_FILE, SKIPPED_FILE, WRITTEN_FILE, content_key,
    pin_settings, reopen,
};

/// Arguments of `ruling-train distill answer`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example (docs/distill.md):
  ruling-train distill answer --dir target/distill")]
pub struct AnswerArgs {
    /// The distillation directory `distill write` filled. Rerunning the same command resumes,
    /// and answers what a writer run added since.
    #[arg(long)]
    pub dir: PathBuf,
    /// The teacher: a decoder spec (catalog name, `hf:org/repo`, local path).
    #[arg(long, default_value = "qwen2.5-coder-1.5b")]
    pub teacher: String,
    /// What runs the teacher.
    #[arg(long, default_value = "llama")]
    pub backend: DecoderBackend,
    /// Option orders averaged per question; at least 2, so no answer is one order's bias.
    /// The default and the prior are the settings the teacher's development report
    /// (docs/results/qwen2.5-coder-1.5b/dev) measured best calibrated.
    #[arg(long, default_value_t = 3)]
    pub rotations: u32,
    /// Subtract the content-free prior per option count.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub prior: bool,
    /// The teacher's calibration, fitted on development rows for these settings (`none` for
    /// none).
    #[arg(
        long,
        default_value = "docs/results/qwen2.5-coder-1.5b/calibration.json"
    )]
    pub calibration: String,
    /// Stop (cleanly, resumable) once this many records are answered or skipped.
    #[arg(long)]
    pub stop_after: Option<usize>,
    /// The model cache root.
    #[arg(long, env = "RULING_CACHE")]
    pub cache: Option<PathBuf>,
}

/// What the answer stage pins at its first run.
#[derive(Debug, Serialize, Deserialize)]
struct AnswerSettings {
    teacher: String,
    backend: String,
    rotations: u32,
    prior: bool,
    calibration: Option<String>,
    calibration_sha256: Option<String>,
}

/// A record the teacher could not answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Skipped {
    /// The record's [`content_key`].
    pub key: String,
    pub id: Option<String>,
    pub reason: String,
}

pub fn run(args: &AnswerArgs) -> anyhow::Result<()> {
    let dir = DistillDir::new(&args.dir);
    let calibration = check_and_pin(args, &dir)?;
    let records = questions_to_answer(&dir)?;

    let answered_path = dir.file(ANSWERED_FILE);
    let skipped_path = dir.file(SKIPPED_FILE);
    let answered = reopen::<Record>(&answered_path, "distill answer")?;
    let skipped = reopen::<Skipped>(&skipped_path, "distill answer")?;
    let mut done: HashSet<String> = answered.lines.iter().map(content_key).collect();
    done.extend(skipped.lines.iter().map(|s| s.key.clone()));
    let todo: Vec<&(String, Record)> = records.iter().filter(|(k, _)| !done.contains(k)).collect();
    let stop_at = args.stop_after.unwrap_or(usize::MAX);
    let already = records.len() - todo.len();
    if todo.is_empty() || already >= stop_at {
        eprintln!(
            "distill answer: {already} of {} records already answered or skipped",
            records.len()
        );
        return super::stats::print(&args.dir);
    }

    eprintln!(
        "distill answer: {} records to answer ({already} done), teacher {} on {}, rotations {}, prior {}",
        todo.len(),
        args.teacher,
        args.backend.as_str(),
        args.rotations,
        if args.prior { "on" } else { "off" }
    );
    let teacher = load_teacher(args, calibration)?;
    let model = teacher.info().model.clone();

    let mut answers_out = Appender::open(&answered_path)?;
    let mut skips_out = Appender::open(&skipped_path)?;
    let bar = crate::state::bar(records.len() as u64, already as u64, "records");
    bar.set_prefix("answering");
    let started = Instant::now();
    let (mut tokens, mut questions, mut count) = (0u64, 0usize, already);
    for (key, record) in todo {
        if count >= stop_at {
            break;
        }
        if let Some((answered, read)) = answer(&teacher, &model, key, record, &mut skips_out)? {
            answers_out.append(&answered)?;
            questions += record.questions.len();
            tokens += read;
        }
        count += 1;
        bar.set_position(count as u64);
        let message = format!(
            "{questions} questions this run, {:.1} tok/s read",
            tokens as f64 / started.elapsed().as_secs_f64().max(1e-9)
        );
        if bar.is_hidden() && count % 10 == 0 {
            eprintln!(
                "distill answer: {count}/{} records, {message}",
                records.len()
            );
        }
        bar.set_message(message);
    }
    bar.finish();
    eprintln!(
        "distill answer: {count} of {} records done, {questions} questions answered in {:.0?} this run",
        records.len(),
        started.elapsed()
    );
    super::stats::print(&args.dir)
}

/// Refuse settings that cannot distil, then pin them in `answer.json` (a resumed run must
/// match them). Returns the teacher's calibration file, if any.
fn check_and_pin(args: &AnswerArgs, dir: &DistillDir) -> anyhow::Result<Option<PathBuf>> {
    if args.rotations < 2 {
        bail!(
            "--rotations {} would read each question in one option order; distillation needs \
             at least 2 so the targets are not one order's bias",
            args.rotations
        );
    }
    if !dir.file(WRITTEN_FILE).exists() && !dir.file(POOL_FILE).exists() {
        bail!(
            "{} has neither {WRITTEN_FILE} nor {POOL_FILE}: run `ruling-train distill pool --dir \
             {}` or `distill write` first",
            args.dir.display(),
            args.dir.display()
        );
    }
    let calibration = (args.calibration != "none").then(|| PathBuf::from(&args.calibration));
    let calibration_sha256 = calibration.as_deref().map(file_sha256).transpose()?;
    pin_settings(
        &dir.file(ANSWER_MANIFEST),
        &AnswerSettings {
            teacher: args.teacher.clone(),
            backend: args.backend.as_str().to_owned(),
            rotations: args.rotations,
            prior: args.prior,
            calibration: calibration.as_ref().map(|p| p.display().to_string()),
            calibration_sha256,
        },
        "answer",
    )?;
    Ok(calibration)
}

/// The teacher engine: the decoder with the rotations, prior and calibration asked for.
fn load_teacher(args: &AnswerArgs, calibration: Option<PathBuf>) -> anyhow::Result<Ruling> {
    Ruling::load(
        &args.teacher,
        &Options {
            backend: args.backend,
            rotations: Some(args.rotations),
            prior: Some(args.prior),
            profile: false,
            calibration,
            cache_dir: args.cache.clone(),
            ..Options::default()
        },
    )
    .with_context(|| format!("loading the teacher {}", args.teacher))
}

/// One record through the teacher: the record with each question's distribution as its
/// target, and the input tokens read; `None` when it is too long for the teacher, journalled
/// in `skips` with the engine's message.
fn answer(
    teacher: &Ruling,
    model: &str,
    key: &str,
    record: &Record,
    skips: &mut Appender,
) -> anyhow::Result<Option<(Record, u64)>> {
    match teacher.evaluate(&record.to_request(model)) {
        Ok(response) => {
            let mut answered = record.clone();
            for (id, answer) in &response.answers {
                answered
                    .references
                    .insert(id.clone(), Reference::target(target_of(answer)?));
            }
            Ok(Some((answered, response.usage.input_tokens)))
        }
        Err(CoreError::Engine(EngineError::InputTooLong { message, .. })) => {
            skips.append(&Skipped {
                key: key.to_owned(),
                id: record.id.clone(),
                reason: message,
            })?;
            Ok(None)
        }
        Err(e) => {
            Err(e).with_context(|| format!("the teacher failed on record {}", record.display_id()))
        }
    }
}

/// What there is to answer, keyed by content and once per content: the pool's records, then
/// what the writer kept (a state written twice with the same questions is answered once).
fn questions_to_answer(dir: &DistillDir) -> anyhow::Result<Vec<(String, Record)>> {
    let mut records = Vec::new();
    let pool = dir.file(POOL_FILE);
    if pool.exists() {
        records.extend(ruling_corpus::read_jsonl(&pool)?);
    }
    let written = dir.file(WRITTEN_FILE);
    if written.exists() {
        records.extend(
            read_journal::<WrittenState>(&written)?
                .lines
                .into_iter()
                .filter_map(|line| line.record),
        );
    }
    let mut seen = HashSet::new();
    Ok(records
        .into_iter()
        .map(|record| (content_key(&record), record))
        .filter(|(key, _)| seen.insert(key.clone()))
        .collect())
}

/// The teacher's calibration file's digest, pinned so a resumed run reads the same one.
fn file_sha256(path: &Path) -> anyhow::Result<String> {
    std::fs::read(path)
        .map(|bytes| sha256_hex(&bytes))
        .with_context(|| format!("reading the teacher's calibration {}", path.display()))
}

/// An answer's distribution over its question's answer keys.
fn target_of(answer: &Answer) -> anyhow::Result<Target> {
    Ok(match answer {
        Answer::Noul { noul } => [(NOUL_KEYS[0], *noul), (NOUL_KEYS[1], 1.0 - noul)]
            .into_iter()
            .map(|(k, p)| (k.to_owned(), p))
            .collect(),
        Answer::Choice { probabilities, .. } | Answer::Score { probabilities, .. } => {
            probabilities.clone()
        }
        Answer::Box { .. } => bail!("a box answer has no distribution to distil"),
    })
}
