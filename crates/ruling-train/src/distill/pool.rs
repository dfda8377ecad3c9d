//! `ruling-train distill pool`: the taxonomy's questions about a pool of development states
//! from every source (`ruling_corpus::pool`), written as records for the teacher to answer.
//!
//! No model is involved: the states, the kinds asked of each and every question's wording
//! and options are drawn from the seed, so the same command always writes the same
//! `pool.jsonl`. `distill answer` then answers it beside whatever the writer wrote.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use ruling_corpus::Record;
use ruling_corpus::pool::{PoolOptions, PoolSource, build_pool, draft_questions};
use ruling_models::files::sha256_hex;
use ruling_schema::Capabilities;
use serde::{Deserialize, Serialize};

use super::{DistillDir, POOL_FILE, POOL_MANIFEST, pin_settings};

/// Arguments of `ruling-train distill pool`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example (docs/distill.md):
  ruling-train distill pool --dir data/distill-3")]
pub struct PoolArgs {
    /// The distillation directory; `pool.jsonl` and `pool.json` are written there.
    #[arg(long)]
    pub dir: PathBuf,
    /// Questions asked per state (fewer where fewer kinds fit the state).
    #[arg(long, default_value_t = 4)]
    pub questions: usize,
    /// States from one source, replacing its default share (repeatable): `--states
    /// sotu=800`; `0` leaves the source out.
    #[arg(long = "states", value_parser = parse_share)]
    pub states: Vec<(PoolSource, usize)>,
    /// Seeds the sample of states, their order, the kinds asked and every wording.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Ask only these kinds (comma-separated: topic, genre, seeks, ...) [default: every kind
    /// that fits each state].
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<ruling_corpus::taxonomy::Kind>,
    /// Only states that read as questions (for the kind `seeks`: what a question looks for).
    #[arg(long)]
    pub questions_only: bool,
    /// HumanEval's correct and broken solutions, made by running its tests
    /// (`python3 data/human-eval/make.py`).
    #[arg(long, default_value = "data/human-eval/solutions.jsonl")]
    pub human_eval: PathBuf,
    /// The datasets folder [default: `RULING_DATASETS`, else `shared/datasets` beside the
    /// workspace].
    #[arg(long)]
    pub datasets_root: Option<PathBuf>,
}

fn parse_share(text: &str) -> Result<(PoolSource, usize), String> {
    let (name, count) = text
        .split_once('=')
        .ok_or_else(|| format!("expected SOURCE=COUNT, got {text:?}"))?;
    let source = name.parse::<PoolSource>().map_err(|e| e.to_string())?;
    let count = count
        .parse::<usize>()
        .map_err(|_| format!("{count:?} is not a count of states"))?;
    Ok((source, count))
}

/// Bumped whenever the taxonomy's kinds, vocabularies or wordings change, so a pool is never
/// extended with questions drawn another way.
const TAXONOMY_VERSION: u32 = 1;

/// What the pool stage pins.
#[derive(Debug, Serialize, Deserialize)]
struct PoolSettings {
    taxonomy_version: u32,
    seed: u64,
    questions: usize,
    states: BTreeMap<String, usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    kinds: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    questions_only: bool,
    human_eval_sha256: String,
    /// sha256 of `pool.jsonl` as written.
    pool_sha256: String,
}

pub fn run(args: &PoolArgs) -> anyhow::Result<()> {
    if args.questions == 0 {
        bail!("--questions must be at least 1");
    }
    let root = args
        .datasets_root
        .clone()
        .unwrap_or_else(ruling_corpus::default_root);
    let human_eval = std::fs::read(&args.human_eval).with_context(|| {
        format!(
            "reading {} (make it with `python3 data/human-eval/make.py`)",
            args.human_eval.display()
        )
    })?;
    let held_out = ruling_corpus::held_out_states(&root)
        .with_context(|| format!("reading the held-out splits under {}", root.display()))?;
    let options = PoolOptions {
        root: root.clone(),
        human_eval: Some(args.human_eval.clone()),
        seed: args.seed,
        states: args.states.iter().copied().collect(),
        questions_only: args.questions_only,
    };
    let pool = build_pool(&options, &held_out)
        .with_context(|| format!("building the pool from {}", root.display()))?;
    let caps = Capabilities::default();
    let records: Vec<Record> = pool
        .states
        .iter()
        .map(|state| Record {
            id: Some(format!("pool:{}", state.id)),
            family: format!("distill_{}", state.source),
            state: state.state.clone(),
            questions: draft_questions(
                state,
                args.questions,
                args.seed,
                (!args.kinds.is_empty()).then_some(args.kinds.as_slice()),
            ),
            labels: Default::default(),
            references: Default::default(),
            weight: 1.0,
        })
        .collect();
    for record in &records {
        record
            .validate(&caps)
            .with_context(|| "the taxonomy drafted a question no request may ask")?;
    }
    let mut bytes = Vec::new();
    for record in &records {
        serde_json::to_writer(&mut bytes, record)?;
        bytes.push(b'\n');
    }

    let dir = DistillDir::new(&args.dir);
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let settings = PoolSettings {
        taxonomy_version: TAXONOMY_VERSION,
        seed: args.seed,
        questions: args.questions,
        states: PoolSource::ALL
            .iter()
            .map(|s| {
                let wanted = options.states.get(s).copied().unwrap_or(s.default_states());
                (s.to_string(), wanted)
            })
            .collect(),
        kinds: args.kinds.iter().map(ToString::to_string).collect(),
        questions_only: args.questions_only,
        human_eval_sha256: sha256_hex(&human_eval),
        pool_sha256: sha256_hex(&bytes),
    };
    // The same settings always draw the same pool: a rerun that pins other settings, or
    // finds another pool under the same ones, is refused before anything is written.
    pin_settings(&dir.file(POOL_MANIFEST), &settings, "pool")?;
    ruling_encoder::checkpoint::write_atomic(&dir.file(POOL_FILE), &bytes)
        .with_context(|| format!("writing {}", dir.file(POOL_FILE).display()))?;

    let mut per_source: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for record in &records {
        let entry = per_source.entry(record.family.as_str()).or_default();
        entry.0 += 1;
        entry.1 += record.questions.len();
    }
    eprintln!(
        "distill pool: {} states, {} questions in {}",
        records.len(),
        records.iter().map(|r| r.questions.len()).sum::<usize>(),
        dir.file(POOL_FILE).display()
    );
    for (source, (read, dropped)) in &pool.read {
        let (states, questions) = per_source
            .get(format!("distill_{source}").as_str())
            .copied()
            .unwrap_or_default();
        eprintln!(
            "  {source}: {read} candidate states, {dropped} left out (held out, repeated, or not a question when only questions are asked), {states} drawn, {questions} questions"
        );
    }
    Ok(())
}
