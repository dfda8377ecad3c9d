//! The states the coherence suite asks about, and the base questions it asks of each.
//!
//! States are development rows only (`ruling_corpus::load(.., Split::Dev, ..)`), and a state
//! that any held-out split also holds is dropped and counted, then checked once more before
//! anything is asked: the suite measures a judge, and nothing it reads may be data the judge
//! is later reported on. Each state's base questions are its dataset's own question and
//! questions drafted from the taxonomy (`ruling_corpus::taxonomy`), enough to give every
//! relation something to work on: two nouls (for the pair relations), a choice, a score.
//! Everything is seeded, so the same arguments give the same states and questions.

use std::path::PathBuf;

use anyhow::{Context as _, bail, ensure};
use indexmap::IndexMap;
use rand::SeedableRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use ruling_corpus::taxonomy::{Genre, Kind, StateInfo};
use ruling_corpus::{Dataset, LoadOptions, Record, Split};
use ruling_schema::{Question, State};

/// The datasets states are drawn from by default: every kind of text the development splits
/// hold, from one-line requests to whole e-mails.
pub const DEFAULT_DATASETS: &str =
    "clinc150-20,sst5,goemotions,boolq,spamassassin,chatterbot,fortunes,medical-abstracts";

/// Rows drawn from each dataset before its states are picked: the picks are a seeded
/// shuffle of these, so a larger `--states` with the same seed extends a smaller one.
const CANDIDATES: usize = 400;

/// Longest state taken, in characters: a few long e-mails would cost a decoder more than
/// hundreds of short states, and tell nothing the short ones do not.
const MAX_STATE_CHARS: usize = 3_000;

/// Drafts tried per state before giving up on the mix of question types.
const DRAFTS: usize = 60;

/// One state and the base questions asked about it.
#[derive(Debug, Clone)]
pub struct SuiteState {
    /// The record's id (`"sst5:dev:12"`).
    pub id: String,
    pub dataset: String,
    pub state: State,
    /// Base questions by id: `dataset` (the dataset's own question), then taxonomy kinds.
    pub questions: IndexMap<String, Question>,
}

/// `count` development states spread evenly over `datasets` (in turn, one from each), with
/// `questions` base questions each (more when the mix of types needs them), and how many
/// candidate states were dropped because a held-out split holds them.
pub fn development(
    datasets: &[Dataset],
    count: usize,
    questions: usize,
    seed: u64,
    root: Option<PathBuf>,
) -> anyhow::Result<(Vec<SuiteState>, usize)> {
    let options = LoadOptions {
        root,
        limit: Some(CANDIDATES),
        seed,
    };
    let root = options.root();
    let held_out = ruling_corpus::held_out_states(&root)
        .with_context(|| format!("reading the held-out splits under {}", root.display()))?;
    let mut dropped = 0;
    let mut pools = Vec::new();
    for &dataset in datasets {
        if !dataset.splits().contains(&Split::Dev) {
            bail!("{dataset} has no development split; the suite reads development data only");
        }
        let records = ruling_corpus::load(dataset, Split::Dev, &options)?;
        let before = records.len();
        let mut records: Vec<Record> = records
            .into_iter()
            .filter(|r| !held_out.contains(&r.state))
            .collect();
        dropped += before - records.len();
        records.retain(|r| r.state.render().chars().count() <= MAX_STATE_CHARS);
        records.shuffle(&mut seeded(seed, &format!("coherence-states:{dataset}")));
        pools.push((dataset, records.into_iter()));
    }
    let mut states = Vec::with_capacity(count);
    while states.len() < count {
        let before = states.len();
        for (dataset, pool) in &mut pools {
            if states.len() == count {
                break;
            }
            if let Some(record) = pool.next() {
                states.push(suite_state(*dataset, &record, questions, seed)?);
            }
        }
        if states.len() == before {
            break; // every pool is empty
        }
    }
    // Filtered above; checked again here, where a state is about to be asked.
    for state in &states {
        ensure!(
            !held_out.contains(&state.state),
            "state {} is held out; the coherence suite must never read held-out data",
            state.id
        );
    }
    Ok((states, dropped))
}

fn suite_state(
    dataset: Dataset,
    record: &Record,
    count: usize,
    seed: u64,
) -> anyhow::Result<SuiteState> {
    let id = record
        .id
        .clone()
        .with_context(|| format!("a {dataset} record has no id"))?;
    let questions = base_questions(dataset, record, &id, count, seed);
    Ok(SuiteState {
        id,
        dataset: dataset.to_string(),
        state: record.state.clone(),
        questions,
    })
}

/// The dataset's own question (one of them, for a record that asks several), then drafts of
/// the taxonomy's kinds that apply to the state, each kind once before any is asked twice,
/// until there are `count` questions and at least two nouls, a choice and a score.
fn base_questions(
    dataset: Dataset,
    record: &Record,
    id: &str,
    count: usize,
    seed: u64,
) -> IndexMap<String, Question> {
    let mut rng = seeded(seed, &format!("coherence-questions:{id}"));
    let text = record.state.render();
    let info = StateInfo::new(genre(dataset), &text, english(dataset));
    let mut questions = IndexMap::new();
    let own: Vec<&Question> = record
        .questions
        .values()
        .filter(|q| !matches!(q, Question::Box { .. }))
        .collect();
    if let Some(question) = own.choose(&mut rng) {
        questions.insert("dataset".to_owned(), (*question).clone());
    }
    let applicable: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.applies(&info)).collect();
    let mut kinds: Vec<Kind> = Vec::new();
    for _ in 0..DRAFTS {
        let missing = missing_types(&questions);
        if questions.len() >= count && missing.is_empty() {
            break;
        }
        if kinds.is_empty() {
            kinds = applicable.clone();
            kinds.shuffle(&mut rng);
        }
        let Some(kind) = kinds.pop() else { break };
        let question = kind.draft(&info, &text, &mut rng);
        if questions.len() < count || missing.contains(&question.type_name()) {
            let mut id = kind.as_str().to_owned();
            let mut n = 1;
            while questions.contains_key(&id) {
                n += 1;
                id = format!("{kind}-{n}");
            }
            questions.insert(id, question);
        }
    }
    questions
}

/// The question types the mix still lacks: two nouls, a choice, a score.
fn missing_types(questions: &IndexMap<String, Question>) -> Vec<&'static str> {
    let count = |t: &str| questions.values().filter(|q| q.type_name() == t).count();
    let mut missing = Vec::new();
    if count("noul") < 2 {
        missing.push("noul");
    }
    if count("choice") < 1 {
        missing.push("choice");
    }
    if count("score") < 1 {
        missing.push("score");
    }
    missing
}

/// What sort of text a dataset's states are, for the drafts.
fn genre(dataset: Dataset) -> Genre {
    match dataset {
        Dataset::Clinc150 { .. } | Dataset::Hwu64 | Dataset::Snips | Dataset::Banking77 => {
            Genre::Request
        }
        Dataset::Sst5 | Dataset::Sst2 | Dataset::Sst5Train => Genre::Review,
        Dataset::Goemotions => Genre::SocialComment,
        Dataset::Spamassassin => Genre::Email,
        Dataset::Chatterbot => Genre::ChatMessage,
        Dataset::Fortunes => Genre::Quotation,
        Dataset::MedicalAbstracts => Genre::Abstract,
        Dataset::Snli | Dataset::ChaosnliSnli => Genre::Caption,
        Dataset::Sotu => Genre::Speech,
        Dataset::Wordnet => Genre::Definition,
        Dataset::Udhr => Genre::Legal,
        _ => Genre::Encyclopedia,
    }
}

/// Whether a dataset's states are English (ChatterBot's and the UDHR's are in many languages).
fn english(dataset: Dataset) -> bool {
    !matches!(dataset, Dataset::Chatterbot | Dataset::Udhr)
}

/// A generator seeded by `seed` and a label, so each state's (and each question's) draws do
/// not depend on what else the run draws.
pub fn seeded(seed: u64, label: &str) -> ChaCha8Rng {
    // FNV-1a: stable across platforms and releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.to_le_bytes().iter().chain(label.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ChaCha8Rng::seed_from_u64(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_questions_mix_the_types_and_are_seeded() {
        let record: Record = serde_json::from_value(serde_json::json!({
            "id": "sst5:dev:1", "family": "sst5", "state": "A tender, funny and moving film.",
            "questions": {"sentiment": {"type": "noul", "instructions": "Is it positive?"}},
        }))
        .unwrap();
        let questions = base_questions(Dataset::Sst5, &record, "sst5:dev:1", 5, 7);
        assert!(questions.len() >= 5, "{questions:?}");
        assert!(missing_types(&questions).is_empty(), "{questions:?}");
        assert_eq!(questions.get_index(0).unwrap().0, "dataset");
        let again = base_questions(Dataset::Sst5, &record, "sst5:dev:1", 5, 7);
        assert_eq!(questions, again);
    }
}
