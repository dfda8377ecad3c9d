//! `ruling-train distill stats`: what the stages wrote, counted from their journals.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ruling_corpus::Record;
use ruling_corpus::journal::read_journal;
use ruling_encoder::checkpoint::write_atomic;
use ruling_schema::Question;

use super::answer::Skipped;
use super::parse::Dropped;
use super::write::WrittenState;
use super::{ANSWERED_FILE, DistillDir, POOL_FILE, SKIPPED_FILE, STATS_FILE, WRITTEN_FILE};

/// Arguments of `ruling-train distill stats`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatsArgs {
    /// The distillation directory.
    #[arg(long)]
    pub dir: PathBuf,
}

pub fn run(args: &StatsArgs) -> anyhow::Result<()> {
    let text = write(&args.dir)?;
    #[allow(clippy::print_stdout)]
    {
        print!("{text}");
    }
    Ok(())
}

/// Write `stats.md` and show it on stderr (what the stages do when they stop).
pub fn print(dir: &Path) -> anyhow::Result<()> {
    eprint!("{}", write(dir)?);
    Ok(())
}

/// Count the journals into `stats.md` (atomically) and return its text.
fn write(dir: &Path) -> anyhow::Result<String> {
    let text = summary(dir)?;
    write_atomic(&DistillDir::new(dir).file(STATS_FILE), text.as_bytes())?;
    Ok(text)
}

fn kind(question: &Question) -> &'static str {
    match question {
        Question::Noul { .. } => "noul",
        Question::Choice { .. } => "choice",
        Question::Score { .. } => "score",
        Question::Box { .. } => "box",
    }
}

/// The statistics of a distillation directory, as markdown.
pub fn summary(dir: &Path) -> anyhow::Result<String> {
    let dir = DistillDir::new(dir);
    let written = read_journal::<WrittenState>(&dir.file(WRITTEN_FILE))?.lines;
    let answered = read_journal::<Record>(&dir.file(ANSWERED_FILE))?.lines;
    let skipped = read_journal::<Skipped>(&dir.file(SKIPPED_FILE))?.lines;
    let pool = if dir.file(POOL_FILE).exists() {
        ruling_corpus::read_jsonl(dir.file(POOL_FILE))?
    } else {
        Vec::new()
    };
    let mut out = String::from("# Distillation statistics\n\n");
    if !pool.is_empty() {
        pool_section(&mut out, &pool);
    }
    if !written.is_empty() {
        written_section(&mut out, &written);
    }
    answered_section(&mut out, &answered, &skipped);
    if !answered.is_empty() {
        kinds_section(&mut out, &answered);
    }
    Ok(out)
}

/// What the writer produced: states, questions kept by type and by source, what it dropped.
fn written_section(out: &mut String, written: &[WrittenState]) {
    let with_questions = written.iter().filter(|l| l.record.is_some()).count();
    let cut = written.iter().filter(|l| l.finish == "length").count();
    let reply_tokens: usize = written.iter().map(|l| l.reply_tokens).sum();
    let prompt_tokens: usize = written.iter().map(|l| l.prompt_tokens).sum();
    let per = |total: usize| total as f64 / written.len().max(1) as f64;
    let _ = writeln!(
        out,
        "## Written\n\n{} states, {with_questions} with at least one question kept; {cut} replies \
         ran out of tokens; {:.0} prompt and {:.0} reply tokens per state.\n",
        written.len(),
        per(prompt_tokens),
        per(reply_tokens),
    );

    let mut by_source: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    let mut dropped: BTreeMap<Dropped, usize> = BTreeMap::new();
    for line in written {
        let entry = by_source.entry(&line.source).or_default();
        entry.0 += 1;
        if let Some(record) = &line.record {
            entry.1 += record.questions.len();
            for question in record.questions.values() {
                *by_type.entry(kind(question)).or_default() += 1;
            }
        }
        for (reason, n) in &line.dropped {
            *dropped.entry(*reason).or_default() += n;
        }
    }
    let kept: usize = by_type.values().sum();
    let _ = writeln!(out, "| questions kept | count |\n|---|---:|");
    for (kind, n) in &by_type {
        let _ = writeln!(out, "| {kind} | {n} |");
    }
    let _ = writeln!(out, "| **all** | {kept} |\n");
    let _ = writeln!(out, "| dropped | what | count |\n|---|---|---:|");
    for (reason, n) in &dropped {
        let what = if reason.is_reply_level() {
            "a whole reply"
        } else {
            "one question"
        };
        let _ = writeln!(out, "| {reason} | {what} | {n} |");
    }
    let _ = writeln!(
        out,
        "\n| source | states | questions kept |\n|---|---:|---:|"
    );
    for (source, (states, questions)) in &by_source {
        let _ = writeln!(out, "| {source} | {states} | {questions} |");
    }
}

/// What the teacher answered: its mean confidence per question type, and why records were skipped.
fn answered_section(out: &mut String, answered: &[Record], skipped: &[Skipped]) {
    let mut confidence: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for record in answered {
        for (id, question) in &record.questions {
            let Some(target) = record.soft_target(id) else {
                continue;
            };
            let top = target.values().copied().fold(0.0, f64::max);
            let entry = confidence.entry(kind(question)).or_default();
            entry.0 += top;
            entry.1 += 1;
        }
    }
    let answered_questions: usize = confidence.values().map(|(_, n)| n).sum();
    let _ = writeln!(
        out,
        "\n## Answered\n\n{} records ({answered_questions} questions) answered, {} skipped.\n",
        answered.len(),
        skipped.len()
    );
    if answered_questions > 0 {
        let _ = writeln!(
            out,
            "| type | questions | teacher's mean confidence |\n|---|---:|---:|"
        );
        let (mut sum, mut n) = (0.0, 0);
        for (kind, (total, count)) in &confidence {
            let _ = writeln!(out, "| {kind} | {count} | {:.3} |", total / *count as f64);
            sum += total;
            n += count;
        }
        let _ = writeln!(out, "| **all** | {n} | {:.3} |", sum / n as f64);
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for skip in skipped {
        let reason = if skip.reason.contains(ruling_schema::capacity::CONTEXT) {
            "too long for the teacher".to_owned()
        } else {
            skip.reason.clone()
        };
        *reasons.entry(reason).or_default() += 1;
    }
    if !reasons.is_empty() {
        let _ = writeln!(out, "\n| skipped because | records |\n|---|---:|");
        for (reason, n) in &reasons {
            let _ = writeln!(out, "| {reason} | {n} |");
        }
    }
}

/// A question's kind: its id when the taxonomy drew it (the pool names questions by kind),
/// `written` for a question the writer model wrote.
fn kind_of(id: &str) -> &str {
    ruling_corpus::taxonomy::Kind::ALL
        .iter()
        .find(|k| k.as_str() == id)
        .map_or("written", |k| k.as_str())
}

/// A record's source: its family without the `distill_` prefix.
fn source_of(record: &Record) -> &str {
    record
        .family
        .strip_prefix("distill_")
        .unwrap_or(&record.family)
}

/// The pool: states and questions per source, questions per kind and type.
fn pool_section(out: &mut String, pool: &[Record]) {
    let questions: usize = pool.iter().map(|r| r.questions.len()).sum();
    let _ = writeln!(
        out,
        "## Pool\n\n{} states, {questions} questions drawn from the taxonomy.\n",
        pool.len()
    );
    let mut by_source: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for record in pool {
        let entry = by_source.entry(source_of(record)).or_default();
        entry.0 += 1;
        entry.1 += record.questions.len();
    }
    let _ = writeln!(out, "| source | states | questions |\n|---|---:|---:|");
    for (source, (states, questions)) in &by_source {
        let _ = writeln!(out, "| {source} | {states} | {questions} |");
    }
    let _ = writeln!(out);
}

/// The answered questions per kind (and type, with the teacher's mean confidence) and per
/// source.
fn kinds_section(out: &mut String, answered: &[Record]) {
    // kind -> type -> (questions, summed top probability)
    let mut by_kind: BTreeMap<&str, BTreeMap<&str, (usize, f64)>> = BTreeMap::new();
    let mut by_source: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for record in answered {
        let entry = by_source.entry(source_of(record)).or_default();
        entry.0 += 1;
        for (id, question) in &record.questions {
            let Some(target) = record.soft_target(id) else {
                continue;
            };
            entry.1 += 1;
            let top = target.values().copied().fold(0.0, f64::max);
            let cell = by_kind
                .entry(kind_of(id))
                .or_default()
                .entry(kind(question))
                .or_default();
            cell.0 += 1;
            cell.1 += top;
        }
    }
    let _ = writeln!(
        out,
        "\n### Answered questions per kind\n\n| kind | noul | choice | score | all | teacher's mean confidence |\n|---|---:|---:|---:|---:|---:|"
    );
    for (kind, types) in &by_kind {
        let count = |t: &str| types.get(t).map_or(0, |c| c.0);
        let all: usize = types.values().map(|c| c.0).sum();
        let confidence: f64 = types.values().map(|c| c.1).sum::<f64>() / all.max(1) as f64;
        let _ = writeln!(
            out,
            "| {kind} | {} | {} | {} | {all} | {confidence:.3} |",
            count("noul"),
            count("choice"),
            count("score")
        );
    }
    let _ = writeln!(
        out,
        "\n### Answered per source\n\n| source | states | questions |\n|---|---:|---:|"
    );
    let (mut states, mut questions) = (0, 0);
    for (source, (s, q)) in &by_source {
        let _ = writeln!(out, "| {source} | {s} | {q} |");
        states += s;
        questions += q;
    }
    let _ = writeln!(out, "| **all** | {states} | {questions} |");
}
