//! `ruling-train distill write`: the writer model's questions about development states.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use ruling_core::{ChatMessage, DecoderBackend, Finish, Options, Role, Sampling, Writer};
use ruling_corpus::journal::Appender;
use ruling_corpus::taxonomy::Kind;
use ruling_corpus::{Dataset, LoadOptions, Record, Split, state_key};
use ruling_models::files::sha256_hex;
use ruling_schema::{Capabilities, State};
use serde::{Deserialize, Serialize};

use super::parse::{Dropped, parse_reply};
use super::{DistillDir, WRITE_MANIFEST, WRITTEN_FILE, pin_settings, reopen};
use crate::data::{DataFile, sample_indices};

/// Arguments of `ruling-train distill write`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example (docs/distill.md):
  ruling-train distill write --dir data/distill --per-source 90")]
pub struct WriteArgs {
    /// The distillation directory: the journal, the settings, later the answers. Rerunning
    /// the same command resumes.
    #[arg(long)]
    pub dir: PathBuf,
    /// The decoder that writes the questions: a catalog name, `hf:org/repo`, or a local path.
    #[arg(long, default_value = "qwen2.5-coder-1.5b")]
    pub writer: String,
    /// What runs the writer: llama (fast generation) or candle.
    #[arg(long, default_value = "llama")]
    pub backend: DecoderBackend,
    /// Datasets whose development rows give the states (comma-separated, or `none`). A
    /// dataset with no development split is refused.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "boolq,sst5-train,hwu64,snips,clinc150,goemotions,medical-abstracts,snli,rte,cb"
    )]
    pub datasets: Vec<String>,
    /// JSONL files of more states (repeatable): records of DESIGN.md, or objects with a
    /// `"state"`. A held-out state in one stops the run.
    #[arg(long = "states")]
    pub states: Vec<PathBuf>,
    /// States drawn from each dataset (a seeded sample of its distinct development states).
    #[arg(long, default_value_t = 90)]
    pub per_source: usize,
    /// Questions asked for per state.
    #[arg(long, default_value_t = 6)]
    pub questions: usize,
    /// States written together in one generation call.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Seeds the sample, the order of states and every batch's draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Most tokens one reply may have. Six well-formed questions took 290-590 tokens on the
    /// 1.5B writer; the replies that went past this were loops of one question repeated.
    #[arg(long, default_value_t = 768)]
    pub max_tokens: usize,
    /// Ask for kinds of the taxonomy (`docs/distill.md`) instead of leaving the mix to the
    /// writer: every state is asked for statements to check against it (supported,
    /// contradicted, not mentioned) and for one or two other kinds drawn per state.
    #[arg(long)]
    pub kinds: bool,
    /// Stop (cleanly, resumable) once the journal holds this many states.
    #[arg(long)]
    pub stop_after: Option<usize>,
    /// The datasets folder [default: `RULING_DATASETS`, else `shared/datasets` beside the
    /// workspace].
    #[arg(long)]
    pub datasets_root: Option<PathBuf>,
    /// The model cache root.
    #[arg(long, env = "RULING_CACHE")]
    pub cache: Option<PathBuf>,
}

/// What the writer stage pins at its first run.
#[derive(Debug, Serialize, Deserialize)]
struct WriteSettings {
    writer: String,
    backend: String,
    datasets: Vec<String>,
    files: Vec<DataFile>,
    per_source: usize,
    questions: usize,
    batch: usize,
    seed: u64,
    temperature: f32,
    top_p: f32,
    max_tokens: usize,
    states: usize,
    /// sha256 over the state keys in the order they are written.
    states_sha256: String,
    prompt_version: u32,
}

/// One state's line in the writer's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WrittenState {
    /// sha256 of the state's [`state_key`].
    pub key: String,
    pub source: String,
    pub batch: usize,
    pub prompt_tokens: usize,
    pub reply_tokens: usize,
    /// `stop` (the writer ended its turn) or `length` (it ran out of tokens).
    pub finish: String,
    pub reply: String,
    /// What was dropped, by reason.
    pub dropped: BTreeMap<Dropped, usize>,
    /// The kept questions about the state, when there are any.
    pub record: Option<Record>,
}

impl WrittenState {
    /// The journal line for `candidate` from the writer's `reply` in batch `batch`: the
    /// questions that pass validation kept as a record, the rest counted by reason.
    fn new(
        candidate: &Candidate,
        batch: usize,
        reply: ruling_core::Written,
        caps: &Capabilities,
    ) -> Self {
        let parsed = parse_reply(&reply.text, &candidate.state, caps);
        let record = (!parsed.questions.is_empty()).then(|| Record {
            id: Some(format!(
                "distill:{}:{}",
                candidate.source,
                &candidate.key[..16]
            )),
            family: format!("distill_{}", candidate.source),
            state: candidate.state.clone(),
            questions: parsed.questions,
            labels: Default::default(),
            references: Default::default(),
            weight: 1.0,
        });
        WrittenState {
            key: candidate.key.clone(),
            source: candidate.source.clone(),
            batch,
            prompt_tokens: reply.prompt_tokens,
            reply_tokens: reply.tokens.len(),
            finish: match reply.finish {
                Finish::Stop => "stop",
                Finish::Length => "length",
            }
            .to_owned(),
            reply: reply.text,
            dropped: parsed.dropped,
            record,
        }
    }
}

impl WriteSettings {
    fn new(args: &WriteArgs, candidates: &[Candidate], files: Vec<DataFile>) -> Self {
        WriteSettings {
            writer: args.writer.clone(),
            backend: args.backend.as_str().to_owned(),
            datasets: args.datasets.clone(),
            files,
            per_source: args.per_source,
            questions: args.questions,
            batch: args.batch,
            seed: args.seed,
            temperature: args.temperature,
            top_p: args.top_p,
            max_tokens: args.max_tokens,
            states: candidates.len(),
            states_sha256: sha256_hex(
                candidates
                    .iter()
                    .map(|c| c.key.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
                    .as_bytes(),
            ),
            prompt_version: if args.kinds {
                KINDS_PROMPT_VERSION
            } else {
                PROMPT_VERSION
            },
        }
    }
}

/// A state to write about, and where it came from.
#[derive(Debug, Clone)]
struct Candidate {
    source: String,
    state: State,
    key: String,
}

/// Bumped whenever the writer prompt changes, so a resumed run never mixes two prompts.
const PROMPT_VERSION: u32 = 3;
/// The prompt that asks for the taxonomy's kinds (`--kinds`).
const KINDS_PROMPT_VERSION: u32 = 4;

/// The kinds the writer is asked for besides claims: those a template cannot write because
/// they need the document's own content.
const WRITER_KINDS: [Kind; 5] = [
    Kind::Mention,
    Kind::Subject,
    Kind::Topic,
    Kind::Request,
    Kind::Tone,
];

/// The kinds one state is asked for: claims, then one or two others drawn by the batch's seed
/// and the state's key.
fn kinds_for(seed: u64, key: &str) -> Vec<Kind> {
    let mut hash = seed;
    for byte in key.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let first = WRITER_KINDS[(hash % WRITER_KINDS.len() as u64) as usize];
    let second = WRITER_KINDS[((hash >> 17) % WRITER_KINDS.len() as u64) as usize];
    let mut kinds = vec![Kind::Claim, first];
    if second != first && hash & (1 << 40) != 0 {
        kinds.push(second);
    }
    kinds
}

/// The conversation asking for `count` questions of the given kinds about `state`: claims
/// spelled out as nouls of three sorts, the other kinds by the taxonomy's brief.
fn kinds_prompt(state: &State, count: usize, kinds: &[Kind]) -> Vec<ChatMessage> {
    let briefs: Vec<String> = kinds
        .iter()
        .map(|k| format!("- {}: {}", k.as_str(), k.writer_brief()))
        .collect();
    let user = format!(
        r#"Document:
{document}

Write exactly {count} questions a program could ask about this document, of these kinds:
{briefs}
For "claim", write yes/no questions of type "noul" ("Does the text say that ...?"): at least one the document clearly supports, one it contradicts (change a name, a number or a fact it states) and one it does not mention. For the other kinds use "noul", "choice" (2 to 8 named options, each with its meaning in "criteria") or "score" (3 to 5 levels from lowest to highest in "criteria"). Every choice and every score needs its "criteria". Keep each question to one sentence with a short snake_case id.

Reply with only this JSON object, {count} entries in all:
{{"questions": {{
  "an_id": {{"type": "noul", "instructions": "..."}},
  "another_id": {{"type": "choice", "instructions": "...", "criteria": {{"name_of_an_option": "what this option means", "name_of_another_option": "what that option means"}}}},
  "a_third_id": {{"type": "score", "instructions": "...", "criteria": ["lowest level", "middle level", "highest level"]}}
}}}}"#,
        document = state.render(),
        briefs = briefs.join(
            "
"
        ),
    );
    vec![
        ChatMessage::new(Role::System, WRITER_SYSTEM),
        ChatMessage::new(Role::User, user),
    ]
}

const WRITER_SYSTEM: &str = "You write test questions for software that reads a document and \
    makes quick typed judgments about it. You answer with one JSON object and no other text.";

/// The conversation asking for `count` questions about `state`: the type mix spelled out
/// and the count repeated, because the 1.5B writer, asked only for "a mix" and a count, kept
/// writing questions past it until the reply ran out of tokens on half the states.
fn writer_prompt(state: &State, count: usize) -> Vec<ChatMessage> {
    let [noul, choice, score] = type_mix(count);
    let user = format!(
        r#"Document:
{document}

Write exactly {count} questions a program could ask about this document: {noul} of type "noul", {choice} of type "choice" and {score} of type "score".
- "noul": a yes-or-no question about the document.
- "choice": one of 2 to 6 named options; its "criteria" name each option and say what it means.
- "score": an ordered scale of 3 to 5 levels; its "criteria" list them from lowest to highest.
Every choice and every score question needs its "criteria". Ask about different things: the
writer's intent, the tone, facts the document states, facts it leaves out, risks, what should
happen next, what category it belongs to. Make some questions hard to answer from the document
alone, and some whose answer is plainly no. Keep each question to one sentence and give it a
short snake_case id.

Reply with only this JSON object, one entry per question, {count} entries in all:
{{"questions": {{
  "an_id": {{"type": "noul", "instructions": "..."}},
  "another_id": {{"type": "choice", "instructions": "...", "criteria": {{"name_of_an_option": "what this option means", "name_of_another_option": "what that option means"}}}},
  "a_third_id": {{"type": "score", "instructions": "...", "criteria": ["lowest level", "middle level", "highest level"]}}
}}}}"#,
        document = state.render(),
    );
    vec![
        ChatMessage::new(Role::System, WRITER_SYSTEM),
        ChatMessage::new(Role::User, user),
    ]
}

/// How many of `count` questions are noul, choice and score: a third each, the remainder to
/// noul first, then choice.
fn type_mix(count: usize) -> [usize; 3] {
    let noul = count.div_ceil(3);
    let choice = (count - noul).div_ceil(2);
    [noul, choice, count - noul - choice]
}

/// The writer's context: room for a whole batch to write at once (prompts up to
/// [`PROMPT_ROOM`] tokens, each reply to `max_tokens`), so no batch is split into groups that
/// write one after the other. Derived from pinned settings only, so a resumed run groups its
/// batches as the first run did.
fn writer_context(batch: usize, max_tokens: usize) -> usize {
    batch.saturating_mul(PROMPT_ROOM + max_tokens)
}

/// Prompt tokens a state is given room for in [`writer_context`]; longer ones still write,
/// in smaller groups.
const PROMPT_ROOM: usize = 1024;

/// Batch `index`'s draws: a seed of its own, so a batch written again after a kill gives the
/// same texts whatever ran before it.
fn batch_seed(seed: u64, index: usize) -> u64 {
    seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

pub fn run(args: &WriteArgs) -> anyhow::Result<()> {
    if args.batch == 0 || args.questions == 0 {
        bail!("--batch and --questions must be at least 1");
    }
    let dir = DistillDir::new(&args.dir);
    let root = args
        .datasets_root
        .clone()
        .unwrap_or_else(ruling_corpus::default_root);
    let (candidates, files) = gather_states(args, &root)?;
    if candidates.is_empty() {
        bail!("no states to write about: --datasets and --states gave none");
    }
    let settings = WriteSettings::new(args, &candidates, files);
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    pin_settings(&dir.file(WRITE_MANIFEST), &settings, "write")?;

    let journal_path = dir.file(WRITTEN_FILE);
    let journal = reopen::<WrittenState>(&journal_path, "distill write")?;
    let mut done: HashSet<String> = journal.lines.iter().map(|l| l.key.clone()).collect();
    let mut totals = Totals::from_lines(&journal.lines);
    let stop_at = args.stop_after.unwrap_or(usize::MAX).min(candidates.len());
    if done.len() >= stop_at {
        eprintln!(
            "distill write: {} of {} states already written",
            done.len(),
            candidates.len()
        );
        return super::stats::print(&args.dir);
    }

    eprintln!(
        "distill write: {} states ({} written), {} questions each, writer {} on {}",
        candidates.len(),
        done.len(),
        args.questions,
        args.writer,
        args.backend.as_str()
    );
    let writer = load_writer(args)?;
    let caps = Capabilities::default();
    let mut out = Appender::open(&journal_path)?;
    let bar = crate::state::bar(candidates.len() as u64, done.len() as u64, "states");
    bar.set_prefix("writing");
    let started = Instant::now();
    let mut tokens_now = 0usize;
    for (index, batch) in candidates.chunks(args.batch).enumerate() {
        if done.len() >= stop_at {
            break;
        }
        if batch.iter().all(|c| done.contains(&c.key)) {
            continue;
        }
        let (lines, tokens) = write_batch(&writer, args, index, batch, &done, &caps)?;
        tokens_now += tokens;
        out.append_all(&lines)?;
        for line in &lines {
            done.insert(line.key.clone());
            totals.add(line);
        }
        bar.set_position(done.len() as u64);
        let message = format!(
            "{} questions kept, {} dropped, {:.1} tok/s written",
            totals.kept,
            totals.dropped,
            tokens_now as f64 / started.elapsed().as_secs_f64().max(1e-9)
        );
        if bar.is_hidden() {
            eprintln!(
                "distill write: {}/{} states, {message}",
                done.len(),
                candidates.len()
            );
        }
        bar.set_message(message);
    }
    bar.finish();
    eprintln!(
        "distill write: {} of {} states written in {:.0?} this run",
        done.len(),
        candidates.len(),
        started.elapsed()
    );
    super::stats::print(&args.dir)
}

/// The writer: a decoder with room for a whole batch of prompts and their replies.
fn load_writer(args: &WriteArgs) -> anyhow::Result<Writer> {
    Writer::load(
        &args.writer,
        &Options {
            backend: args.backend,
            cache_dir: args.cache.clone(),
            max_context: Some(writer_context(args.batch, args.max_tokens)),
            ..Options::default()
        },
    )
    .with_context(|| format!("loading the writer {}", args.writer))
}

/// Batch `index` written whole with its own seed (so a batch cut short is written again with
/// the same draws); returns the journal lines of its states not yet `done`, and the tokens
/// written for the whole batch.
fn write_batch(
    writer: &Writer,
    args: &WriteArgs,
    index: usize,
    batch: &[Candidate],
    done: &HashSet<String>,
    caps: &Capabilities,
) -> anyhow::Result<(Vec<WrittenState>, usize)> {
    let conversations: Vec<_> = batch
        .iter()
        .map(|c| {
            if args.kinds {
                kinds_prompt(&c.state, args.questions, &kinds_for(args.seed, &c.key))
            } else {
                writer_prompt(&c.state, args.questions)
            }
        })
        .collect();
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        seed: batch_seed(args.seed, index),
        max_tokens: args.max_tokens,
    };
    let written = writer
        .write(&conversations, &sampling)
        .with_context(|| format!("writing batch {index}"))?;
    let mut tokens = 0;
    let mut lines = Vec::new();
    for (candidate, reply) in batch.iter().zip(written) {
        tokens += reply.tokens.len();
        if !done.contains(&candidate.key) {
            lines.push(WrittenState::new(candidate, index, reply, caps));
        }
    }
    Ok((lines, tokens))
}

/// Running counts for the progress line.
#[derive(Debug, Default)]
struct Totals {
    kept: usize,
    dropped: usize,
}

impl Totals {
    fn from_lines(lines: &[WrittenState]) -> Self {
        let mut totals = Self::default();
        for line in lines {
            totals.add(line);
        }
        totals
    }

    fn add(&mut self, line: &WrittenState) {
        self.kept += line.record.as_ref().map_or(0, |r| r.questions.len());
        self.dropped += line.dropped.values().sum::<usize>();
    }
}

/// Every state to write about, in the order they are written, and the state files read.
fn gather_states(
    args: &WriteArgs,
    root: &std::path::Path,
) -> anyhow::Result<(Vec<Candidate>, Vec<DataFile>)> {
    let held_out = ruling_corpus::held_out_states(root)
        .with_context(|| format!("reading the held-out splits under {}", root.display()))?;
    let mut seen = HashSet::new();
    let mut candidates = Vec::new();
    let mut push = |source: &str, state: State| {
        let key = sha256_hex(state_key(&state).as_bytes());
        if seen.insert(key.clone()) {
            candidates.push(Candidate {
                source: source.to_owned(),
                state,
                key,
            });
        }
    };
    for name in args.datasets.iter().filter(|n| n.as_str() != "none") {
        for state in dataset_states(name, root, args, &held_out)? {
            push(name, state);
        }
    }
    let mut files = Vec::new();
    for path in &args.states {
        let (states, file) = file_states(path, &held_out)?;
        let source = path
            .file_stem()
            .map_or_else(|| "states".to_owned(), |s| s.to_string_lossy().into_owned());
        for state in states {
            push(&source, state);
        }
        files.push(file);
    }
    candidates.shuffle(&mut ChaCha8Rng::seed_from_u64(args.seed));
    Ok((candidates, files))
}

/// A seeded sample of `--per-source` distinct development states of one dataset, none of
/// them also in a held-out split.
fn dataset_states(
    name: &str,
    root: &std::path::Path,
    args: &WriteArgs,
    held_out: &ruling_corpus::HeldOutStates,
) -> anyhow::Result<Vec<State>> {
    let dataset: Dataset = name.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    if !dataset.splits().contains(&Split::Dev) {
        bail!(
            "{name} has no development split: held-out data is never distilled \
             (shared/datasets/README.md)"
        );
    }
    let records = ruling_corpus::load(
        dataset,
        Split::Dev,
        &LoadOptions {
            root: Some(root.to_owned()),
            limit: None,
            seed: args.seed,
        },
    )?;
    let mut keys = HashSet::new();
    let states: Vec<State> = records
        .into_iter()
        .map(|r| r.state)
        .filter(|s| !held_out.contains(s) && keys.insert(state_key(s)))
        .collect();
    let source_seed = args.seed
        ^ u64::from_le_bytes(
            sha256_hex(name.as_bytes()).as_bytes()[..8]
                .try_into()
                .expect("8 bytes"),
        );
    Ok(sample_indices(states.len(), args.per_source, source_seed)
        .into_iter()
        .map(|index| states[index].clone())
        .collect())
}

/// Every state of a `--states` JSONL file, in order, and the file's digest for the manifest.
/// A file holding any held-out state is refused whole.
fn file_states(
    path: &std::path::Path,
    held_out: &ruling_corpus::HeldOutStates,
) -> anyhow::Result<(Vec<State>, DataFile)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut states = Vec::new();
    let mut held = 0;
    for (index, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let where_ = || format!("{}:{}", path.display(), index + 1);
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not JSON", where_()))?;
        let state = value
            .get("state")
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{}: no \"state\" field", where_()))?;
        let state = State::new(state).map_err(|v| {
            anyhow::anyhow!(
                "{}: a state is a string, object or array, got {v}",
                where_()
            )
        })?;
        if held_out.contains(&state) {
            held += 1;
        } else {
            states.push(state);
        }
    }
    if held > 0 {
        bail!(
            "{} holds {held} states of held-out splits; held-out data is never distilled",
            path.display()
        );
    }
    let file = DataFile {
        path: path.to_owned(),
        sha256: sha256_hex(&bytes),
    };
    Ok((states, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_the_count_and_holds_the_document() {
        let state = State::new(serde_json::json!({"ticket": "refund please"})).unwrap();
        let prompt = writer_prompt(&state, 5);
        assert_eq!(prompt.len(), 2);
        assert!(prompt[1].content.contains(
            "Write exactly 5 questions a program could ask about this document: 2 of type \"noul\", 2 of type \"choice\" and 1 of type \"score\"."
        ));
        assert!(prompt[1].content.contains("5 entries in all"));
        assert!(prompt[1].content.contains("\"ticket\": \"refund please\""));
        // The shape example is itself a reply the parser accepts.
        let example = prompt[1].content.split("in all:\n").nth(1).unwrap();
        let parsed = parse_reply(example, &state, &Capabilities::default());
        assert_eq!(parsed.questions.len(), 3, "{:?}", parsed.dropped);
    }

    #[test]
    fn the_kinds_prompt_asks_for_claims_and_its_example_parses() {
        let state = State::from("The meeting moved to Friday at 3 pm in room 4.".to_owned());
        let kinds = kinds_for(0, "some key");
        assert_eq!(kinds[0], Kind::Claim);
        assert!((2..=3).contains(&kinds.len()));
        let prompt = kinds_prompt(&state, 5, &kinds);
        assert!(
            prompt[1]
                .content
                .contains("- claim: statements about the document")
        );
        assert!(prompt[1].content.contains("one it contradicts"));
        let example = prompt[1].content.split("in all:\n").nth(1).unwrap();
        let parsed = parse_reply(example, &state, &Capabilities::default());
        assert_eq!(parsed.questions.len(), 3, "{:?}", parsed.dropped);
        // Different states are asked for different kinds.
        let drawn: std::collections::HashSet<Vec<Kind>> =
            (0..40).map(|i| kinds_for(0, &format!("key {i}"))).collect();
        assert!(drawn.len() > 3);
    }

    #[test]
    fn the_type_mix_adds_up_and_spreads_evenly() {
        assert_eq!(type_mix(6), [2, 2, 2]);
        assert_eq!(type_mix(5), [2, 2, 1]);
        assert_eq!(type_mix(1), [1, 0, 0]);
        for count in 0..20 {
            assert_eq!(type_mix(count).iter().sum::<usize>(), count);
        }
    }

    #[test]
    fn batch_seeds_differ_and_do_not_depend_on_what_ran_before() {
        assert_ne!(batch_seed(0, 0), batch_seed(0, 1));
        assert_ne!(batch_seed(0, 3), batch_seed(1, 3));
        assert_eq!(batch_seed(7, 3), batch_seed(7, 3));
    }
}
