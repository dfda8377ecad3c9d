//! The training data of the decision encoder: the development rows of the shared datasets,
//! asked as typed questions in varied wordings.
//!
//! An encoder trained on one wording per dataset learns that wording instead of learning to
//! read the instructions, and then fails on a client's own. So each row is asked in a wording
//! drawn from a few instructions and, for choices and scores, a few ways of naming and
//! describing the options; the draw is seeded by the seed and the row's id alone, so a row's
//! record does not depend on which other rows were loaded. One of the wordings is always the
//! exact question the evaluation readers ask, so training also covers the format the evaluator
//! measures.
//! Intent questions offer a random subset of a dataset's intents and an abstain option, which
//! is the right answer for every out-of-scope row and for the quarter of in-scope rows whose
//! intent is left out of the subset: that is what teaches the encoder to abstain. Each intent
//! row also asks a topical yes/no question about one intent or domain (its own half the time),
//! the kind of noul clients ask most and no evaluation reader asks.
//!
//! Only development splits are read (through [`load`](crate::load)'s readers). A held-out split
//! is read only to collect its states ([`held_out_states`]): every development row whose state
//! also occurs in a held-out split of any dataset is dropped and counted, since the datasets
//! README requires training to refuse held-out states, and the datasets share some (HWU64's
//! short requests such as "call mom" are also CLINC150 test rows).

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use indexmap::IndexMap;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use ruling_schema::{Question, State, Text};

use crate::dataset::{
    Dataset, LoadOptions, ParseNameError, Split, default_root, for_each_record, row_rng,
    sample_indices,
};
use crate::error::CorpusError;
use crate::record::{Label, Record, Reference, Target};
use crate::sources::{clinc150, sst};

mod labels;
mod logs;
mod mentions;

/// Logs drawn when no `per_source` is given.
const LOGS_DEFAULT: usize = 2_000;

/// A source of training records: one kind of question over one dataset's development data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrainingSource {
    /// CLINC150 dev (its out-of-scope rows included): intent choices with an abstain option.
    Clinc150,
    /// HWU64: intent choices with an abstain option.
    Hwu64,
    /// SNIPS: intent choices with an abstain option.
    Snips,
    /// BoolQ rows with an even idx: a noul over the passage.
    Boolq,
    /// SST-5 dev and train files: a five-level score, sometimes with an "is it positive" noul.
    Sst5,
    /// ChaosNLI SNLI: a verdict choice and an entailment noul, soft targets from 100 votes.
    ChaosnliSnli,
    /// ChaosNLI MNLI: a verdict choice and an entailment noul, soft targets from 100 votes.
    ChaosnliMnli,
    /// SNLI dev and test files: a verdict choice and an entailment noul, hard labels.
    Snli,
    /// CommitmentBank: a verdict choice and an entailment noul.
    Cb,
    /// RTE: a two-way verdict choice and an entailment noul.
    Rte,
    /// GoEmotions: a few nouls per comment, one per emotion.
    Goemotions,
    /// Medical Abstracts: a choice over the 5 topics.
    MedicalAbstracts,
    /// SpamAssassin's development groups: whole e-mails, spam or not.
    Spamassassin,
    /// State of the Union addresses of even years, whole: which party's president.
    Sotu,
    /// UDHR paragraphs: which language.
    Udhr,
    /// WordNet noun and verb definitions: which supersense.
    Wordnet,
    /// ChatterBot openers: which topic.
    Chatterbot,
    /// Quotations: which category.
    Fortunes,
    /// Logs of many CLINC150 development requests: which message asks what (`logs.rs`).
    Logs,
    /// Whole chapters of Moby-Dick: does the text mention a name (`mentions.rs`).
    MobyDick,
}

impl TrainingSource {
    /// The labelled sources of the shipped judge's recipe (`--datasets all`).
    pub const ALL: [TrainingSource; 12] = [
        TrainingSource::Clinc150,
        TrainingSource::Hwu64,
        TrainingSource::Snips,
        TrainingSource::Boolq,
        TrainingSource::Sst5,
        TrainingSource::ChaosnliSnli,
        TrainingSource::ChaosnliMnli,
        TrainingSource::Snli,
        TrainingSource::Cb,
        TrainingSource::Rte,
        TrainingSource::Goemotions,
        TrainingSource::MedicalAbstracts,
    ];

    /// The sources added for the distilled judge (`--datasets added`): their labels asked in
    /// the taxonomy's ways (`labels.rs`).
    pub const ADDED: [TrainingSource; 8] = [
        TrainingSource::Spamassassin,
        TrainingSource::Sotu,
        TrainingSource::Udhr,
        TrainingSource::Wordnet,
        TrainingSource::Chatterbot,
        TrainingSource::Fortunes,
        TrainingSource::Logs,
        TrainingSource::MobyDick,
    ];

    /// Every source, [`Self::ALL`] then [`Self::ADDED`].
    pub fn every() -> impl Iterator<Item = TrainingSource> {
        Self::ALL.into_iter().chain(Self::ADDED)
    }

    /// The name on the command line and in [`SourceReport::source`] and [`Record::family`].
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Clinc150 => "clinc150",
            Self::Hwu64 => "hwu64",
            Self::Snips => "snips",
            Self::Boolq => "boolq",
            Self::Sst5 => "sst5",
            Self::ChaosnliSnli => "chaosnli-snli",
            Self::ChaosnliMnli => "chaosnli-mnli",
            Self::Snli => "snli",
            Self::Cb => "cb",
            Self::Rte => "rte",
            Self::Goemotions => "goemotions",
            Self::MedicalAbstracts => "medical-abstracts",
            Self::Spamassassin => "spamassassin",
            Self::Sotu => "sotu",
            Self::Udhr => "udhr",
            Self::Wordnet => "wordnet",
            Self::Chatterbot => "chatterbot",
            Self::Fortunes => "fortunes",
            Self::Logs => "logs",
            Self::MobyDick => "moby-dick",
        }
    }

    /// The datasets whose development split it reads.
    pub fn datasets(self) -> &'static [Dataset] {
        match self {
            Self::Clinc150 => &[Dataset::Clinc150 { subset: None }],
            Self::Hwu64 => &[Dataset::Hwu64],
            Self::Snips => &[Dataset::Snips],
            Self::Boolq => &[Dataset::Boolq],
            Self::Sst5 => &[Dataset::Sst5, Dataset::Sst5Train],
            Self::ChaosnliSnli => &[Dataset::ChaosnliSnli],
            Self::ChaosnliMnli => &[Dataset::ChaosnliMnli],
            Self::Snli => &[Dataset::Snli],
            Self::Cb => &[Dataset::Cb],
            Self::Rte => &[Dataset::Rte],
            Self::Goemotions => &[Dataset::Goemotions],
            Self::MedicalAbstracts => &[Dataset::MedicalAbstracts],
            Self::Spamassassin => &[Dataset::Spamassassin],
            Self::Sotu => &[Dataset::Sotu],
            Self::Udhr => &[Dataset::Udhr],
            Self::Wordnet => &[Dataset::Wordnet],
            Self::Chatterbot => &[Dataset::Chatterbot],
            Self::Fortunes => &[Dataset::Fortunes],
            Self::Logs => &[Dataset::Clinc150 { subset: None }],
            // Its chapters are read directly: the novel has no labelled question.
            Self::MobyDick => &[],
        }
    }

    fn kind(self) -> Kind {
        match self {
            Self::Clinc150 | Self::Hwu64 | Self::Snips => Kind::Intents,
            Self::Boolq => Kind::Passage,
            Self::Sst5 => Kind::Sentiment,
            Self::ChaosnliSnli | Self::ChaosnliMnli | Self::Snli | Self::Cb | Self::Rte => {
                Kind::Inference
            }
            Self::Goemotions => Kind::Emotions,
            Self::MedicalAbstracts => Kind::Topics,
            Self::Spamassassin => Kind::Spam,
            Self::Sotu => Kind::Party,
            Self::Udhr => Kind::Language,
            Self::Wordnet => Kind::Supersense,
            Self::Chatterbot => Kind::ChatTopic,
            Self::Fortunes => Kind::QuoteCategory,
            Self::Logs => Kind::Logs,
            Self::MobyDick => Kind::Mentions,
        }
    }
}

impl fmt::Display for TrainingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TrainingSource {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::every()
            .find(|source| source.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::every().map(|s| s.as_str()).collect();
                ParseNameError::new("training source", s, format!("one of {}", names.join(", ")))
            })
    }
}

/// What to build a training set from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrainingOptions {
    /// The datasets folder; [`default_root`] when `None`.
    pub root: Option<PathBuf>,
    /// Seeds the per-source samples and every per-row choice of wording and options.
    pub seed: u64,
    /// At most this many rows per source, a seeded sample of those left after the held-out
    /// states are dropped; every row when `None`.
    pub per_source: Option<usize>,
    /// The sources, in the order their records come; empty means every one of
    /// [`TrainingSource::ALL`]. A source listed twice is read once.
    pub sources: Vec<TrainingSource>,
}

impl TrainingOptions {
    fn sources(&self) -> Vec<TrainingSource> {
        let listed: &[TrainingSource] = if self.sources.is_empty() {
            &TrainingSource::ALL
        } else {
            &self.sources
        };
        let mut sources = Vec::with_capacity(listed.len());
        for source in listed {
            if !sources.contains(source) {
                sources.push(*source);
            }
        }
        sources
    }
}

/// The records of a training set and how each source contributed.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainingSet {
    /// Source by source in the order the options list them, rows in file order.
    pub records: Vec<Record>,
    /// One entry per source, in the same order.
    pub report: Vec<SourceReport>,
}

/// What one source gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceReport {
    /// [`TrainingSource::as_str`].
    pub source: String,
    /// Development rows read.
    pub rows: usize,
    /// Records built: the rows left after the held-out drop, capped at `per_source`.
    pub records: usize,
    /// Questions over all of its records.
    pub questions: usize,
    /// Rows dropped because their state occurs in a held-out split.
    pub dropped_held_out: usize,
}

/// The overlap key of a state: its prompt text ([`State::render`]) with every run of
/// whitespace made one space and the ends trimmed, so a tokenized copy and a plain copy of the
/// same sentence that differ only in spacing or line breaks meet.
pub fn state_key(state: &State) -> String {
    state
        .render()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The states of every held-out split of every dataset: what training must not see.
///
/// A state is held out when its [`state_key`] is a held-out state's, or when the two are the
/// same once case and punctuation are folded too: MANIFEST.md counts 33 HWU64 requests that
/// are CLINC150 test rows up to case and punctuation ("Call mom." and "call mom"), and requires
/// the overlap check to drop every one of them; the key alone finds 24. Dropping a few more
/// training rows costs nothing, training on a held-out row would spoil the evaluation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldOutStates {
    keys: HashSet<String>,
    folded: HashSet<String>,
}

impl HeldOutStates {
    /// Whether `state` occurs in a held-out split, by its [`state_key`] or with case and
    /// punctuation folded as well.
    pub fn contains(&self, state: &State) -> bool {
        let key = state_key(state);
        match folded(&key) {
            // A state of punctuation alone folds to nothing; only its key can tell it apart.
            folded if folded.is_empty() => self.keys.contains(&key),
            folded => self.folded.contains(&folded),
        }
    }

    /// How many distinct held-out states (by [`state_key`]) there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn insert(&mut self, state: &State) {
        let key = state_key(state);
        self.folded.insert(folded(&key));
        self.keys.insert(key);
    }
}

/// `key` lowercased, without the characters that are neither letters, digits nor spaces, its
/// spaces collapsed again.
fn folded(key: &str) -> String {
    let kept: String = key
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads the held-out split of every dataset that has one, keeping only the states.
pub fn held_out_states(root: &Path) -> Result<HeldOutStates, CorpusError> {
    let options = LoadOptions {
        root: Some(root.to_owned()),
        ..LoadOptions::default()
    };
    let mut states = HeldOutStates::default();
    for dataset in Dataset::ALL {
        // The CLINC150 subsets ask about the same rows as the full question, and so do the
        // needle logs (their held-out part is a CLINC150 test request).
        let same_rows_as_full = matches!(
            dataset,
            Dataset::Clinc150 { subset: Some(_) } | Dataset::Needle { .. }
        );
        if same_rows_as_full || !dataset.splits().contains(&Split::HeldOut) {
            continue;
        }
        for_each_record(dataset, Split::HeldOut, &options, &mut |record| {
            states.insert(&record.state);
        })?;
    }
    Ok(states)
}

/// Builds the training set: for each source, its development rows less those whose state is
/// held out, sampled down to `per_source`, each asked in a wording drawn for that row.
///
/// The same options always give the same records; another seed gives other samples and
/// wordings.
pub fn build_training_set(options: &TrainingOptions) -> Result<TrainingSet, CorpusError> {
    let root = options.root.clone().unwrap_or_else(default_root);
    let held_out = held_out_states(&root)?;
    let mut set = TrainingSet {
        records: Vec::new(),
        report: Vec::new(),
    };
    for source in options.sources() {
        let (report, records) = build_source(source, &root, &held_out, options)?;
        set.report.push(report);
        set.records.extend(records);
    }
    Ok(set)
}

fn build_source(
    source: TrainingSource,
    root: &Path,
    held_out: &HeldOutStates,
    options: &TrainingOptions,
) -> Result<(SourceReport, Vec<Record>), CorpusError> {
    let load = LoadOptions {
        root: Some(root.to_owned()),
        limit: None,
        seed: options.seed,
    };
    let kind = source.kind();
    let mut rows = 0;
    let mut dropped_held_out = 0;
    let mut intent_question = None;
    let mut kept = Vec::new();
    for &dataset in source.datasets() {
        for_each_record(dataset, Split::Dev, &load, &mut |mut record| {
            rows += 1;
            if matches!(kind, Kind::Intents | Kind::Logs) {
                // Every row asks the same question over all the intents: keep one copy, not
                // one per row (CLINC150's has 151 options).
                let question = record.questions.swap_remove(INTENT);
                if intent_question.is_none() {
                    intent_question = question;
                }
            }
            if held_out.contains(&record.state) {
                dropped_held_out += 1;
            } else {
                kept.push(record);
            }
        })?;
    }
    let domains = if matches!(source, TrainingSource::Clinc150 | TrainingSource::Logs) {
        clinc150::domains(root)?
    } else {
        IndexMap::new()
    };
    if kind == Kind::Mentions {
        return moby_dick(source, root, held_out, options);
    }
    if kind == Kind::Logs {
        let names: Vec<String> = match &intent_question {
            Some(Question::Choice { criteria, .. }) => criteria
                .keys()
                .filter(|k| *k != clinc150::OUT_OF_SCOPE)
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        let count = options.per_source.unwrap_or(LOGS_DEFAULT);
        let records: Vec<Record> = (0..count)
            .map(|i| {
                let mut rng = row_rng(options.seed, &format!("training-logs:{i}"));
                logs::record(i, &kept, &names, &domains, &mut rng)
            })
            .collect();
        let report = SourceReport {
            source: source.as_str().to_owned(),
            rows,
            records: records.len(),
            questions: records.iter().map(|r| r.questions.len()).sum(),
            dropped_held_out,
        };
        return Ok((report, records));
    }
    let intents = intent_question.map(|question| IntentSet::new(question, domains));
    // Whole addresses are also asked whether they mention a name; the others are where absent
    // names come from.
    let documents: Vec<String> = if kind == Kind::Party {
        kept.iter().map(|r| r.state.render()).collect()
    } else {
        Vec::new()
    };
    let others: Vec<&str> = documents.iter().map(String::as_str).collect();
    let sample_seed = row_rng(options.seed, &format!("training-sample:{source}")).next_u64();
    let records: Vec<Record> = sample_indices(kept.len(), options.per_source, sample_seed)
        .into_iter()
        .map(|i| {
            let row = &kept[i];
            let mut rng = row_rng(options.seed, &format!("training:{}", row.display_id()));
            let mut draft = draft(kind, intents.as_ref(), row, &mut rng);
            if kind == Kind::Party {
                let text = row.state.render();
                mentions::ask(&text, &others, "mention", &mut rng, &mut draft);
            }
            Record {
                id: row.id.clone(),
                family: source.as_str().to_owned(),
                state: row.state.clone(),
                questions: draft.questions,
                labels: draft.labels,
                references: draft.references,
                weight: 1.0,
            }
        })
        .collect();
    let report = SourceReport {
        source: source.as_str().to_owned(),
        rows,
        records: records.len(),
        questions: records.iter().map(|r| r.questions.len()).sum(),
        dropped_held_out,
    };
    Ok((report, records))
}

/// Moby-Dick's chapters, each asked one or two mention questions (`mentions.rs`).
fn moby_dick(
    source: TrainingSource,
    root: &Path,
    held_out: &HeldOutStates,
    options: &TrainingOptions,
) -> Result<(SourceReport, Vec<Record>), CorpusError> {
    let sections = crate::sources::sotu::moby_dick(root)?;
    let rows = sections.len();
    let kept: Vec<_> = sections
        .into_iter()
        .filter(|s| !held_out.contains(&State::from(s.text.clone())))
        .collect();
    let dropped_held_out = rows - kept.len();
    let texts: Vec<&str> = kept.iter().map(|s| s.text.as_str()).collect();
    let sample_seed = row_rng(options.seed, &format!("training-sample:{source}")).next_u64();
    let mut records = Vec::new();
    for i in sample_indices(kept.len(), options.per_source, sample_seed) {
        let section = &kept[i];
        let id = format!("moby-dick:{}", section.name);
        let mut rng = row_rng(options.seed, &format!("training:{id}"));
        let mut draft = Draft::default();
        mentions::ask(&section.text, &texts, "mention", &mut rng, &mut draft);
        if rng.random_bool(0.5) {
            mentions::ask(&section.text, &texts, "mention_2", &mut rng, &mut draft);
        }
        if draft.questions.is_empty() {
            continue;
        }
        records.push(Record {
            id: Some(id),
            family: source.as_str().to_owned(),
            state: State::from(section.text.clone()),
            questions: draft.questions,
            labels: draft.labels,
            references: draft.references,
            weight: 1.0,
        });
    }
    let report = SourceReport {
        source: source.as_str().to_owned(),
        rows,
        records: records.len(),
        questions: records.iter().map(|r| r.questions.len()).sum(),
        dropped_held_out,
    };
    Ok((report, records))
}

/// The kinds of question the sources are turned into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Intents,
    Inference,
    Passage,
    Sentiment,
    Emotions,
    Topics,
    Spam,
    Party,
    Language,
    Supersense,
    ChatTopic,
    QuoteCategory,
    Logs,
    Mentions,
}

/// The question ids of training records: the evaluation readers' own, so a question means the
/// same under the same id in both.
const INTENT: &str = "intent";
const RELATION: &str = "relation";
const ENTAILED: &str = "entailed";
const ANSWER: &str = "answer";
const SENTIMENT: &str = "sentiment";
const POSITIVE: &str = "positive";
const TOPIC: &str = "topic";
const ABOUT: &str = "about";

/// The questions, labels and targets of one training record.
#[derive(Default)]
struct Draft {
    questions: IndexMap<String, Question>,
    labels: IndexMap<String, Label>,
    references: IndexMap<String, Reference>,
}

impl Draft {
    fn ask(&mut self, id: &str, question: Question, label: Label) {
        self.questions.insert(id.to_owned(), question);
        self.labels.insert(id.to_owned(), label);
    }

    fn target(&mut self, id: &str, target: Target) {
        self.references
            .insert(id.to_owned(), Reference::target(target));
    }
}

/// The questions of one row's training record. `intents` is the intent set of an intent
/// source, which every one of its rows brings.
fn draft(kind: Kind, intents: Option<&IntentSet>, row: &Record, rng: &mut ChaCha8Rng) -> Draft {
    match kind {
        Kind::Intents => intents
            .unwrap_or_else(|| panic!("{}: an intent row without its question", row.display_id()))
            .draft(row, rng),
        Kind::Inference => inference(row, rng),
        Kind::Passage => passage(row, rng),
        Kind::Sentiment => sentiment(row, rng),
        Kind::Emotions => emotions(row, rng),
        Kind::Topics => topics(row, rng),
        Kind::Spam => labels::spam(row, rng),
        Kind::Party => labels::draft(row, &labels::PARTY, rng),
        Kind::Language => labels::draft(row, &labels::LANGUAGE, rng),
        Kind::Supersense => labels::draft(row, &labels::SUPERSENSE, rng),
        Kind::ChatTopic => labels::draft(row, &labels::CHAT_TOPIC, rng),
        Kind::QuoteCategory => labels::draft(row, &labels::QUOTE_CATEGORY, rng),
        Kind::Logs | Kind::Mentions => {
            unreachable!("logs and mentions read many rows at once (build_source)")
        }
    }
}

/// Draws a wording: `None` for the evaluation question, or one of `alternatives`. The
/// evaluation question counts as one more alternative, so it comes up as often as each other.
fn wording<'a, T>(rng: &mut ChaCha8Rng, alternatives: &'a [T]) -> Option<&'a T> {
    match rng.random_range(0..=alternatives.len()) {
        0 => None,
        i => Some(&alternatives[i - 1]),
    }
}

fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// The question a reader's record asks under `id`, which every record of its dataset has.
fn asked<'r>(row: &'r Record, id: &str) -> &'r Question {
    row.questions
        .get(id)
        .unwrap_or_else(|| panic!("{}: the reader asks no {id:?}", row.display_id()))
}

/// The label of `id` in a reader's record, which every record of its dataset has.
fn label<'r>(row: &'r Record, id: &str) -> &'r Label {
    row.labels
        .get(id)
        .unwrap_or_else(|| panic!("{}: the reader labels no {id:?}", row.display_id()))
}

/// A choice's options, key and description, in order.
type ChoiceOptions = Vec<(String, Text)>;

/// The options of a choice question.
fn options_of(question: &Question) -> ChoiceOptions {
    match question {
        Question::Choice { criteria, .. } => criteria
            .iter()
            .map(|(k, d)| (k.clone(), d.clone()))
            .collect(),
        other => panic!(
            "a reader asked a {} where a choice was expected",
            other.type_name()
        ),
    }
}

fn choice(instructions: impl Into<String>, options: ChoiceOptions) -> Question {
    Question::Choice {
        instructions: Text::from(instructions.into()),
        criteria: options.into_iter().collect(),
    }
}

fn noul(instructions: impl Into<String>) -> Question {
    Question::Noul {
        instructions: Text::from(instructions.into()),
        criteria: None,
    }
}

fn yes_no(p_yes: f64) -> Target {
    Target::from([("yes".to_owned(), p_yes), ("no".to_owned(), 1.0 - p_yes)])
}

// ---------------------------------------------------------------------------------------------
// Intent sets: CLINC150, HWU64, SNIPS.

/// Fewest and most intents a training question offers, before its abstain option.
const MIN_OFFERED: usize = 3;
const MAX_OFFERED: usize = 20;
/// How often an in-scope row's own intent is left out, making the abstain option right.
const GOLD_LEFT_OUT: f64 = 0.25;

/// Instructions for an intent choice; `{none}` is the abstain option's key.
const INTENT_INSTRUCTIONS: [&str; 6] = [
    "Which request type does this user message belong to? Answer {none} if it belongs to none \
     of them.",
    "What does the user want? Pick the intent that matches the message, or {none} if no listed \
     intent does.",
    "Classify this message by its intent. If none of the listed intents fits, answer {none}.",
    "Route this request to the intent it expresses, or to {none} when it expresses none of them.",
    "Which of the listed intents does this utterance express? Choose {none} if it expresses \
     another one.",
    "Which intent does this request express?",
];

/// Abstain options, key and description; CLINC150's own comes first.
const ABSTAIN: [(&str, &str); 5] = [
    (clinc150::OUT_OF_SCOPE, clinc150::OUT_OF_SCOPE_DESCRIPTION),
    (
        "none_of_these",
        "the request matches none of the other options",
    ),
    ("none", "none of the listed intents"),
    ("other", "something else: no listed intent fits"),
    (
        "out_of_scope",
        "the message asks for none of the intents above",
    ),
];

/// How an intent option is described.
#[derive(Clone, Copy)]
enum IntentStyle {
    /// As the evaluation question describes it (no description for CLINC150 and HWU64).
    Evaluation,
    /// The key alone.
    Bare,
    /// "alarm set"
    Spaced,
    /// "Alarm set"
    Capitalised,
    /// "the alarm set intent"
    Named,
}

const INTENT_STYLES: [IntentStyle; 5] = [
    IntentStyle::Evaluation,
    IntentStyle::Bare,
    IntentStyle::Spaced,
    IntentStyle::Capitalised,
    IntentStyle::Named,
];

/// A dataset's intents as its evaluation question offers them.
struct IntentSet {
    instructions: String,
    /// Every intent with the evaluation question's description of it.
    intents: ChoiceOptions,
    /// The evaluation question's own out-of-scope option (CLINC150's `oos`), if it has one.
    out_of_scope: Option<(String, Text)>,
    /// The abstain options whose keys no intent uses.
    abstain: ChoiceOptions,
    /// Each intent's domain, where the dataset groups them (CLINC150's `banking`, `travel`...).
    domains: IndexMap<String, String>,
}

impl IntentSet {
    fn new(question: Question, domains: IndexMap<String, String>) -> Self {
        let Question::Choice {
            instructions,
            criteria,
        } = question
        else {
            panic!("an intent reader asked a {}", question.type_name());
        };
        let (own, intents): (Vec<_>, Vec<_>) = criteria
            .into_iter()
            .partition(|(key, _)| key == clinc150::OUT_OF_SCOPE);
        let abstain = ABSTAIN
            .iter()
            .filter(|(key, _)| !intents.iter().any(|(intent, _)| intent == key))
            .map(|(key, description)| ((*key).to_owned(), Text::from(*description)))
            .collect();
        Self {
            instructions: instructions.render(),
            intents,
            out_of_scope: own.into_iter().next(),
            abstain,
            domains,
        }
    }

    fn draft(&self, row: &Record, rng: &mut ChaCha8Rng) -> Draft {
        let Label::Key(gold) = label(row, INTENT) else {
            panic!("{}: an intent label is a key", row.display_id());
        };
        let out_of_scope = self
            .out_of_scope
            .as_ref()
            .is_some_and(|(key, _)| key == gold);
        let gold = (!out_of_scope).then(|| {
            self.intents
                .iter()
                .position(|(intent, _)| intent == gold)
                .unwrap_or_else(|| panic!("{}: {gold:?} is not offered", row.display_id()))
        });

        let size = rng.random_range(MIN_OFFERED..=MAX_OFFERED.min(self.intents.len()));
        let keep_gold = gold.is_some() && !rng.random_bool(GOLD_LEFT_OUT);
        let others: Vec<usize> = (0..self.intents.len())
            .filter(|i| Some(*i) != gold)
            .collect();
        let drawn = size - usize::from(keep_gold);
        let mut offered: Vec<usize> = others
            .choose_multiple(rng, drawn.min(others.len()))
            .copied()
            .collect();
        if keep_gold {
            offered.extend(gold);
        }
        offered.shuffle(rng);

        let (instructions, style, abstain) = match wording(rng, &INTENT_INSTRUCTIONS) {
            // The evaluation question: its instructions and descriptions, and its own abstain
            // option where it has one (then it is exactly a clinc150-N question).
            None => {
                let abstain = match &self.out_of_scope {
                    Some(own) => own.clone(),
                    None => pick(rng, &self.abstain).clone(),
                };
                (self.instructions.clone(), IntentStyle::Evaluation, abstain)
            }
            Some(template) => {
                let abstain = pick(rng, &self.abstain).clone();
                let instructions = template.replace("{none}", &abstain.0);
                (instructions, *pick(rng, &INTENT_STYLES), abstain)
            }
        };
        let answer = match gold {
            Some(i) if keep_gold => self.intents[i].0.clone(),
            _ => abstain.0.clone(),
        };
        let mut options: ChoiceOptions = offered
            .into_iter()
            .map(|i| {
                let (key, description) = &self.intents[i];
                (key.clone(), describe_intent(style, key, description))
            })
            .collect();
        options.push(abstain);
        let mut draft = Draft::default();
        draft.ask(INTENT, choice(instructions, options), Label::Key(answer));
        let (about, yes) = self.about(gold, rng);
        draft.ask(ABOUT, about, Label::Yes(yes));
        draft
    }

    /// A noul asking whether the message is about one intent or domain: the row's own half the
    /// time (when it has one), another otherwise. This is the topical yes/no question programs
    /// ask most ("is this ticket about billing?"), which no evaluation reader asks.
    fn about(&self, gold: Option<usize>, rng: &mut ChaCha8Rng) -> (Question, bool) {
        let yes = gold.is_some() && rng.random_bool(0.5);
        let intent = match gold {
            Some(i) if yes => i,
            _ => loop {
                let i = rng.random_range(0..self.intents.len());
                if Some(i) != gold {
                    break i;
                }
            },
        };
        let (key, description) = &self.intents[intent];
        let gold_domain = gold.and_then(|i| self.domains.get(&self.intents[i].0));
        let subject = match self.domains.get(key) {
            // A domain question says yes only when the row's domain is the one asked about.
            // CLINC150's `meta` (talking about the assistant itself) is no topic in words.
            Some(domain) if domain != "meta" && rng.random_bool(ABOUT_DOMAIN) => {
                let yes = gold_domain == Some(domain);
                let template = pick(rng, &ABOUT_INSTRUCTIONS);
                return (noul(template.replace("{topic}", &spaced(domain))), yes);
            }
            _ if !description.is_null() && rng.random_bool(0.5) => {
                lowercased_first(&description.render())
            }
            _ => spaced(key),
        };
        let template = pick(rng, &ABOUT_INSTRUCTIONS);
        (noul(template.replace("{topic}", &subject)), yes)
    }
}

/// How often a topical noul on a dataset with domains asks about the domain, not the intent.
const ABOUT_DOMAIN: f64 = 0.35;

/// Topical nouls; `{topic}` is an intent or a domain, in words.
const ABOUT_INSTRUCTIONS: [&str; 6] = [
    "Is this message about {topic}?",
    "Is this request about {topic}?",
    "Does this message concern {topic}?",
    "The user is asking about {topic}.",
    "Is the user's request related to {topic}?",
    "Is this ticket about {topic}?",
];

fn describe_intent(style: IntentStyle, key: &str, evaluation: &Text) -> Text {
    match style {
        IntentStyle::Evaluation => evaluation.clone(),
        IntentStyle::Bare => Text::null(),
        IntentStyle::Spaced => Text::from(spaced(key)),
        IntentStyle::Capitalised => Text::from(capitalised(&spaced(key))),
        IntentStyle::Named => Text::from(format!("the {} intent", spaced(key))),
    }
}

/// An intent name as words: `alarm_set` and `AddToPlaylist` become "alarm set" and "add to
/// playlist".
fn spaced(key: &str) -> String {
    let mut words = String::with_capacity(key.len() + 4);
    for (i, c) in key.chars().enumerate() {
        if c == '_' {
            words.push(' ');
        } else if c.is_uppercase() {
            if i > 0 && !words.ends_with(' ') {
                words.push(' ');
            }
            words.extend(c.to_lowercase());
        } else {
            words.push(c);
        }
    }
    words
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn lowercased_first(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_lowercase().chain(chars).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Natural language inference: ChaosNLI, SNLI, CB, RTE.

const THREE_WAY_INSTRUCTIONS: [&str; 5] = [
    "Assess the hypothesis using only the premise as evidence.",
    "Given the premise, is the hypothesis true, false, or undetermined?",
    "Does the first statement imply the second, rule it out, or neither?",
    "Judge the hypothesis against the premise: does the premise support it, contradict it, or \
     leave it open?",
    "Using only what the premise says, what is the status of the hypothesis?",
];

/// Other names for entailment, neutral and contradiction, in that (the readers') order.
const THREE_WAY_OPTIONS: [[(&str, Option<&str>); 3]; 3] = [
    [
        ("entailment", None),
        ("neutral", None),
        ("contradiction", None),
    ],
    [
        ("supported", Some("the evidence establishes the claim")),
        (
            "insufficient",
            Some("the evidence establishes neither the claim nor its opposite"),
        ),
        (
            "contradicted",
            Some("the evidence establishes the opposite of the claim"),
        ),
    ],
    [
        (
            "true",
            Some("given the premise, the hypothesis must be true"),
        ),
        (
            "undetermined",
            Some("the premise leaves the hypothesis open"),
        ),
        (
            "false",
            Some("given the premise, the hypothesis must be false"),
        ),
    ],
];

const TWO_WAY_INSTRUCTIONS: [&str; 4] = [
    "Does the hypothesis follow from the premise?",
    "Using only the premise as evidence, is the hypothesis established?",
    "Is the hypothesis necessarily true when the premise is?",
    "Judge whether the premise establishes the hypothesis.",
];

/// Other names for entailment and not_entailment, in that order.
const TWO_WAY_OPTIONS: [[(&str, Option<&str>); 2]; 3] = [
    [("entailment", None), ("not_entailment", None)],
    [
        ("supported", Some("the evidence establishes the claim")),
        (
            "not_supported",
            Some("the evidence does not establish the claim"),
        ),
    ],
    [
        ("follows", Some("the hypothesis follows from the premise")),
        (
            "does_not_follow",
            Some("the hypothesis may be false, or the premise may not settle it"),
        ),
    ],
];

/// "The evidence establishes the claim", asked as a noul.
const ENTAILED_INSTRUCTIONS: [&str; 6] = [
    "Does the premise entail the hypothesis?",
    "The premise establishes that the hypothesis is true.",
    "If the premise is true, must the hypothesis be true as well?",
    "Using only the premise as evidence, is the hypothesis supported?",
    "The evidence in the premise establishes the claim in the hypothesis.",
    "Does the hypothesis follow from the premise?",
];

/// The readers' key of the relation the entailment noul asks about.
const ENTAILMENT: &str = "entailment";

fn named_options<const N: usize>(set: &[(&str, Option<&str>); N]) -> ChoiceOptions {
    set.iter()
        .map(|(key, description)| {
            (
                (*key).to_owned(),
                description.map_or_else(Text::null, Text::from),
            )
        })
        .collect()
}

/// A verdict choice (the reader's relations, possibly renamed) and an entailment noul. Where
/// the reader has vote shares, both get them as targets: the noul's yes is the share of
/// entailment votes.
fn inference(row: &Record, rng: &mut ChaCha8Rng) -> Draft {
    let evaluation = asked(row, RELATION);
    let relations = options_of(evaluation);
    let Label::Key(gold) = label(row, RELATION) else {
        panic!("{}: a relation label is a key", row.display_id());
    };
    let position = |key: &str| relations.iter().position(|(k, _)| k == key);
    let gold =
        position(gold).unwrap_or_else(|| panic!("{}: {gold:?} is not offered", row.display_id()));
    let entailment = position(ENTAILMENT)
        .unwrap_or_else(|| panic!("{}: no {ENTAILMENT} option", row.display_id()));
    let votes: Option<Vec<f64>> = row.soft_target(RELATION).map(|target| {
        relations
            .iter()
            .map(|(key, _)| target.get(key).copied().unwrap_or(0.0))
            .collect()
    });

    let (instructions, alternatives): (&[&str], Vec<ChoiceOptions>) = match relations.len() {
        3 => (
            &THREE_WAY_INSTRUCTIONS,
            THREE_WAY_OPTIONS.iter().map(named_options).collect(),
        ),
        2 => (
            &TWO_WAY_INSTRUCTIONS,
            TWO_WAY_OPTIONS.iter().map(named_options).collect(),
        ),
        n => panic!("{}: an NLI reader offers {n} relations", row.display_id()),
    };
    let verdict = match wording(rng, instructions) {
        None => evaluation.clone(),
        Some(text) => {
            let options = match wording(rng, &alternatives) {
                None => relations.clone(),
                Some(options) => options.clone(),
            };
            choice(*text, options)
        }
    };
    let keys: Vec<String> = options_of(&verdict).into_iter().map(|(k, _)| k).collect();
    let mut draft = Draft::default();
    draft.ask(RELATION, verdict, Label::Key(keys[gold].clone()));
    if let Some(votes) = &votes {
        draft.target(
            RELATION,
            keys.iter().cloned().zip(votes.iter().copied()).collect(),
        );
    }
    draft.ask(
        ENTAILED,
        noul(*pick(rng, &ENTAILED_INSTRUCTIONS)),
        Label::Yes(gold == entailment),
    );
    if let Some(votes) = &votes {
        draft.target(ENTAILED, yes_no(votes[entailment]));
    }
    draft
}

// ---------------------------------------------------------------------------------------------
// BoolQ.

/// Wrappers of the reader's question ("Is france the same timezone as the uk?"): `{question}`
/// is it as asked, `{question_lowercase}` with its first letter lowercase.
const PASSAGE_INSTRUCTIONS: [&str; 5] = [
    "Based on the passage: {question}",
    "Answer from the passage alone. {question}",
    "Question about the passage: {question}",
    "According to the passage, {question_lowercase}",
    "Read the passage, then answer yes or no. {question}",
];

fn passage(row: &Record, rng: &mut ChaCha8Rng) -> Draft {
    let evaluation = asked(row, ANSWER);
    let question = match wording(rng, &PASSAGE_INSTRUCTIONS) {
        None => evaluation.clone(),
        Some(template) => {
            let Question::Noul { instructions, .. } = evaluation else {
                panic!("{}: BoolQ asks a noul", row.display_id());
            };
            let asked = instructions.render();
            noul(
                template
                    .replace("{question_lowercase}", &lowercased_first(&asked))
                    .replace("{question}", &asked),
            )
        }
    };
    let mut draft = Draft::default();
    draft.ask(ANSWER, question, label(row, ANSWER).clone());
    draft
}

// ---------------------------------------------------------------------------------------------
// SST-5.

const SCORE_INSTRUCTIONS: [&str; 5] = [
    "Rate the sentiment of this sentence from a film review.",
    "How does the reviewer feel about the film, judging by this sentence?",
    "Where does this review sentence fall, from most negative to most positive?",
    "Score the opinion this sentence expresses about the movie.",
    "What rating does this sentence suggest the reviewer would give the film?",
];

/// Other wordings of SST-5's five levels, lowest first.
const LEVEL_WORDINGS: [[&str; sst::LEVELS.len()]; 4] = [
    [
        "strongly negative",
        "somewhat negative",
        "neutral or mixed",
        "somewhat positive",
        "strongly positive",
    ],
    ["1 star", "2 stars", "3 stars", "4 stars", "5 stars"],
    [
        "hated it",
        "disliked it",
        "neither liked nor disliked it",
        "liked it",
        "loved it",
    ],
    ["terrible", "poor", "mixed", "good", "excellent"],
];

/// Alternatives to the SST-2 question ([`sst::NOUL_INSTRUCTIONS`]).
const POSITIVE_INSTRUCTIONS: [&str; 4] = [
    "Is this review sentence positive about the movie?",
    "The sentence expresses a favourable opinion of the film.",
    "Does the reviewer like the film, judging by this sentence?",
    "Is the opinion in this sentence positive?",
];

/// SST-5's middle level: neither positive nor negative, so it gets no "is it positive" noul.
const NEUTRAL_LEVEL: usize = 2;
/// How often a sentence that is not neutral is also asked whether it is positive.
const ALSO_POSITIVE: f64 = 0.5;

fn sentiment(row: &Record, rng: &mut ChaCha8Rng) -> Draft {
    let evaluation = asked(row, SENTIMENT);
    let level = label(row, SENTIMENT).clone();
    let question = match wording(rng, &SCORE_INSTRUCTIONS) {
        None => evaluation.clone(),
        Some(text) => {
            let levels = match wording(rng, &LEVEL_WORDINGS) {
                None => sst::LEVELS.map(Text::from).to_vec(),
                Some(levels) => levels.map(Text::from).to_vec(),
            };
            Question::Score {
                instructions: Text::from(*text),
                criteria: levels,
            }
        }
    };
    let mut draft = Draft::default();
    draft.ask(SENTIMENT, question, level.clone());
    if let Label::Level(level) = level
        && level != NEUTRAL_LEVEL
        && rng.random_bool(ALSO_POSITIVE)
    {
        let text = wording(rng, &POSITIVE_INSTRUCTIONS).unwrap_or(&sst::NOUL_INSTRUCTIONS);
        draft.ask(POSITIVE, noul(*text), Label::Yes(level > NEUTRAL_LEVEL));
    }
    draft
}

// ---------------------------------------------------------------------------------------------
// GoEmotions.

/// `{emotion}` is the emotion's name.
const EMOTION_INSTRUCTIONS: [&str; 4] = [
    "The comment expresses {emotion}.",
    "Does the writer of this comment show {emotion}?",
    "Is there {emotion} in this comment?",
    "Would a reader say this comment conveys {emotion}?",
];

const NEUTRAL_INSTRUCTIONS: [&str; 3] = [
    "The comment expresses no particular emotion.",
    "Is this comment free of any clear emotion?",
    "Is the tone of this comment neutral?",
];

const NEUTRAL_EMOTION: &str = "neutral";

/// Fewest and most emotions the comment lacks that a record asks about.
const MIN_ABSENT: usize = 1;
const MAX_ABSENT: usize = 3;

/// Every emotion the comment carries and a few it lacks, in a random order.
///
/// The labels are hard: the shared GoEmotions copy has each comment's final labels but not the
/// raters' individual annotations, so there are no rater fractions to give as soft targets.
fn emotions(row: &Record, rng: &mut ChaCha8Rng) -> Draft {
    let (present, absent): (Vec<&String>, Vec<&String>) = row
        .questions
        .keys()
        .partition(|emotion| *label(row, emotion) == Label::Yes(true));
    let mut chosen = present;
    let wanted = rng.random_range(MIN_ABSENT..=MAX_ABSENT).min(absent.len());
    chosen.extend(absent.choose_multiple(rng, wanted).copied());
    chosen.shuffle(rng);
    let mut draft = Draft::default();
    for emotion in chosen {
        let alternatives: &[&str] = if emotion == NEUTRAL_EMOTION {
            &NEUTRAL_INSTRUCTIONS
        } else {
            &EMOTION_INSTRUCTIONS
        };
        let question = match wording(rng, alternatives) {
            None => asked(row, emotion).clone(),
            Some(template) => noul(template.replace("{emotion}", &emotion.replace('_', " "))),
        };
        draft.ask(emotion, question, label(row, emotion).clone());
    }
    draft
}

// ---------------------------------------------------------------------------------------------
// Medical abstracts.

const TOPIC_INSTRUCTIONS: [&str; 4] = [
    "Classify this abstract by the kind of disease it studies.",
    "What is the topic of this medical abstract?",
    "Which class of patient condition is this paper about?",
    "Which disease category does this abstract belong to?",
];

/// How the topics are named and described.
#[derive(Clone, Copy)]
enum TopicStyle {
    /// The reader's names and descriptions.
    Evaluation,
    /// The reader's names alone.
    Bare,
    /// The first word of the name ("digestive"), with the reader's description.
    Short,
    /// Numbered 1 to 5, as the dataset's own file codes them, the name as description.
    Numbered,
}

const TOPIC_STYLES: [TopicStyle; 3] = [TopicStyle::Bare, TopicStyle::Short, TopicStyle::Numbered];

fn topics(row: &Record, rng: &mut ChaCha8Rng) -> Draft {
    let evaluation = asked(row, TOPIC);
    let topics = options_of(evaluation);
    let Label::Key(gold) = label(row, TOPIC) else {
        panic!("{}: a topic label is a key", row.display_id());
    };
    let gold = topics
        .iter()
        .position(|(key, _)| key == gold)
        .unwrap_or_else(|| panic!("{}: {gold:?} is not offered", row.display_id()));
    let question = match wording(rng, &TOPIC_INSTRUCTIONS) {
        None => evaluation.clone(),
        Some(text) => {
            let style = *wording(rng, &TOPIC_STYLES).unwrap_or(&TopicStyle::Evaluation);
            let options = topics
                .iter()
                .enumerate()
                .map(|(i, (name, description))| match style {
                    TopicStyle::Evaluation => (name.clone(), description.clone()),
                    TopicStyle::Bare => (name.clone(), Text::null()),
                    TopicStyle::Short => (
                        name.split_whitespace().next().unwrap_or(name).to_owned(),
                        description.clone(),
                    ),
                    TopicStyle::Numbered => ((i + 1).to_string(), Text::from(name.as_str())),
                })
                .collect();
            choice(*text, options)
        }
    };
    let key = options_of(&question)
        .into_iter()
        .nth(gold)
        .map(|(key, _)| key)
        .unwrap_or_else(|| panic!("{}: option {gold} is missing", row.display_id()));
    let mut draft = Draft::default();
    draft.ask(TOPIC, question, Label::Key(key));
    draft
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_keys_collapse_whitespace_and_trim() {
        let state = State::from(" call\tmom \n\n now ");
        assert_eq!(state_key(&state), "call mom now");
        assert_eq!(state_key(&State::from("a .")), "a .");
    }

    #[test]
    fn held_out_states_match_up_to_case_and_punctuation() {
        let mut held_out = HeldOutStates::default();
        held_out.insert(&State::from("call mom"));
        held_out.insert(&State::from("?!"));
        assert!(held_out.contains(&State::from("Call  mom.")));
        assert!(!held_out.contains(&State::from("call mom now")));
        assert!(held_out.contains(&State::from(" ?! ")));
        assert!(
            !held_out.contains(&State::from("...")),
            "punctuation alone matches exactly"
        );
        assert_eq!(held_out.len(), 2);
    }

    #[test]
    fn source_names_round_trip() {
        for source in TrainingSource::ALL {
            assert_eq!(source.as_str().parse::<TrainingSource>(), Ok(source));
        }
        let error = "sst2".parse::<TrainingSource>().expect_err("not a source");
        assert!(error.to_string().contains("medical-abstracts"), "{error}");
    }

    #[test]
    fn intent_names_become_words() {
        assert_eq!(spaced("alarm_set"), "alarm set");
        assert_eq!(spaced("AddToPlaylist"), "add to playlist");
        assert_eq!(spaced("iot_hue_lightchange"), "iot hue lightchange");
        assert_eq!(capitalised("alarm set"), "Alarm set");
        assert_eq!(lowercased_first("Is it so?"), "is it so?");
    }

    #[test]
    fn listed_sources_are_read_once_and_none_means_all() {
        let options = TrainingOptions {
            sources: vec![TrainingSource::Cb, TrainingSource::Rte, TrainingSource::Cb],
            ..TrainingOptions::default()
        };
        assert_eq!(options.sources(), [TrainingSource::Cb, TrainingSource::Rte]);
        assert_eq!(TrainingOptions::default().sources(), TrainingSource::ALL);
    }
}
