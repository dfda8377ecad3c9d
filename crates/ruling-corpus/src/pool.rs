//! The pool of states the distilled set is written about: texts of every kind the development
//! sources hold (requests, reviews, passages, whole e-mails, speeches, a novel, definitions,
//! text in many languages, chat openers, quotations, code), each with what the question drafts
//! need to know of it ([`StateInfo`]), and the taxonomy's questions about each
//! ([`draft_questions`]).
//!
//! Only development rows are read, and a state that a held-out split of any dataset also holds
//! is dropped and counted (the datasets README). The pool is deterministic: the same options
//! give the same states in the same order.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use indexmap::IndexMap;
use rand::Rng;
use rand::RngCore;
use rand::seq::SliceRandom;
use ruling_schema::{Question, State};
use serde::Deserialize;

use crate::dataset::{Dataset, LoadOptions, ParseNameError, Split, row_rng, sample_indices};
use crate::error::CorpusError;
use crate::sources::{chatterbot, fortunes, sotu, spamassassin, udhr, wordnet};
use crate::taxonomy::{Genre, Kind, StateInfo};
use crate::training::{HeldOutStates, state_key};

/// Where pool states come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolSource {
    Boolq,
    Sst5,
    Clinc150,
    Hwu64,
    Snips,
    Goemotions,
    MedicalAbstracts,
    Snli,
    Spamassassin,
    Udhr,
    Wordnet,
    Sotu,
    MobyDick,
    Chatterbot,
    Fortunes,
    HumanEval,
}

impl PoolSource {
    pub const ALL: [PoolSource; 16] = [
        PoolSource::Boolq,
        PoolSource::Sst5,
        PoolSource::Clinc150,
        PoolSource::Hwu64,
        PoolSource::Snips,
        PoolSource::Goemotions,
        PoolSource::MedicalAbstracts,
        PoolSource::Snli,
        PoolSource::Spamassassin,
        PoolSource::Udhr,
        PoolSource::Wordnet,
        PoolSource::Sotu,
        PoolSource::MobyDick,
        PoolSource::Chatterbot,
        PoolSource::Fortunes,
        PoolSource::HumanEval,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Boolq => "boolq",
            Self::Sst5 => "sst5",
            Self::Clinc150 => "clinc150",
            Self::Hwu64 => "hwu64",
            Self::Snips => "snips",
            Self::Goemotions => "goemotions",
            Self::MedicalAbstracts => "medical-abstracts",
            Self::Snli => "snli",
            Self::Spamassassin => "spamassassin",
            Self::Udhr => "udhr",
            Self::Wordnet => "wordnet",
            Self::Sotu => "sotu",
            Self::MobyDick => "moby-dick",
            Self::Chatterbot => "chatterbot",
            Self::Fortunes => "fortunes",
            Self::HumanEval => "human-eval",
        }
    }

    /// States drawn from it by default: 6,000 in all, more from the sources whose texts are
    /// most unlike the labelled sources'.
    pub fn default_states(self) -> usize {
        match self {
            Self::Boolq => 500,
            Self::Sst5 => 300,
            Self::Clinc150 => 450,
            Self::Hwu64 => 300,
            Self::Snips => 150,
            Self::Goemotions => 400,
            Self::MedicalAbstracts => 300,
            Self::Snli => 250,
            Self::Spamassassin => 600,
            Self::Udhr => 350,
            Self::Wordnet => 500,
            Self::Sotu => 400,
            Self::MobyDick => 300,
            Self::Chatterbot => 500,
            Self::Fortunes => 500,
            Self::HumanEval => 200,
        }
    }
}

impl fmt::Display for PoolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PoolSource {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|source| source.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|s| s.as_str()).collect();
                ParseNameError::new("pool source", s, format!("one of {}", names.join(", ")))
            })
    }
}

/// One state of the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolState {
    pub source: PoolSource,
    /// Where it sits in its source (`"sotu:1862:3"` is the fourth passage of 1862's address).
    pub id: String,
    pub state: State,
    pub info: StateInfo,
}

/// What to build the pool from.
#[derive(Clone, Debug, Default)]
pub struct PoolOptions {
    /// The datasets folder.
    pub root: PathBuf,
    /// HumanEval's correct and broken solutions (`data/human-eval/solutions.jsonl`); the
    /// source is skipped when `None`.
    pub human_eval: Option<PathBuf>,
    pub seed: u64,
    /// States per source; a source left out gets its [`PoolSource::default_states`], one
    /// given 0 gives none.
    pub states: BTreeMap<PoolSource, usize>,
    /// Only states that read as questions ([`crate::taxonomy::looks_like_question`]).
    pub questions_only: bool,
}

/// The pool, and what each source gave.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Every source's states, shuffled together so any first part of the pool holds every
    /// source in proportion.
    pub states: Vec<PoolState>,
    /// Per source: candidate states read, and those dropped because a held-out split holds
    /// them.
    pub read: BTreeMap<PoolSource, (usize, usize)>,
}

/// Words per passage cut from the long documents.
const PASSAGE_WORDS: usize = 180;
/// Longest e-mail (as a mail client shows it) the pool takes, in characters: the teacher reads
/// every state whole, and a few long messages would cost more than hundreds of short ones.
const MAX_EMAIL_CHARS: usize = 2_500;

/// Builds the pool: each source's candidate states less the held-out ones, a seeded sample of
/// its share, all shuffled together.
pub fn build_pool(options: &PoolOptions, held_out: &HeldOutStates) -> Result<Pool, CorpusError> {
    let mut states = Vec::new();
    let mut read = BTreeMap::new();
    let mut seen = HashSet::new();
    for source in PoolSource::ALL {
        let wanted = options
            .states
            .get(&source)
            .copied()
            .unwrap_or_else(|| source.default_states());
        if wanted == 0 || (source == PoolSource::HumanEval && options.human_eval.is_none()) {
            continue;
        }
        let candidates = candidates(source, options)?;
        let total = candidates.len();
        let kept: Vec<PoolState> = candidates
            .into_iter()
            .filter(|c| !options.questions_only || c.info.is_question)
            .filter(|c| !held_out.contains(&c.state))
            .filter(|c| seen.insert(state_key(&c.state)))
            .collect();
        let dropped = total - kept.len();
        read.insert(source, (total, dropped));
        let seed = row_rng(options.seed, &format!("pool-sample:{source}")).next_u64();
        for index in sample_indices(kept.len(), Some(wanted), seed) {
            states.push(kept[index].clone());
        }
    }
    states.shuffle(&mut row_rng(options.seed, "pool-order"));
    Ok(Pool { states, read })
}

/// The questions asked about one pool state: `count` kinds that apply to it (of `only`, when
/// given), drawn by weight without repeats, each drafted once; ids are the kinds' names.
pub fn draft_questions(
    state: &PoolState,
    count: usize,
    seed: u64,
    only: Option<&[Kind]>,
) -> IndexMap<String, Question> {
    let mut rng = row_rng(seed, &format!("pool-questions:{}", state.id));
    let mut kinds: Vec<(Kind, f64)> = Kind::ALL
        .into_iter()
        .filter(|k| only.is_none_or(|only| only.contains(k)))
        .filter(|k| k.applies(&state.info))
        .map(|k| (k, weight(k, state)))
        .collect();
    let text = state.state.render();
    let mut questions = IndexMap::new();
    while questions.len() < count && !kinds.is_empty() {
        let total: f64 = kinds.iter().map(|(_, w)| w).sum();
        let mut point = rng.random_range(0.0..total);
        let mut chosen = kinds.len() - 1;
        for (i, (_, w)) in kinds.iter().enumerate() {
            if point < *w {
                chosen = i;
                break;
            }
            point -= w;
        }
        let (kind, _) = kinds.swap_remove(chosen);
        questions.insert(
            kind.as_str().to_owned(),
            kind.draft(&state.info, &text, &mut rng),
        );
    }
    questions
}

/// How often a kind is drawn for a state: topic most, and the kinds that only fit some texts
/// (code, what a question seeks, spam) nearly always where they fit.
fn weight(kind: Kind, state: &PoolState) -> f64 {
    match kind {
        Kind::Topic => 3.0,
        Kind::Code | Kind::Seeks => 6.0,
        Kind::Spam => 3.0,
        Kind::Language if !state.info.english => 4.0,
        Kind::Language | Kind::Genre | Kind::Formality | Kind::Safety => 1.0,
        Kind::Sentiment | Kind::Tone | Kind::Claim | Kind::Mention | Kind::Subject => 1.5,
        Kind::Request | Kind::Urgency => 1.5,
    }
}

fn pool_state(
    source: PoolSource,
    id: String,
    text: String,
    genre: Genre,
    english: bool,
) -> PoolState {
    let info = StateInfo::new(genre, &text, english);
    PoolState {
        source,
        id,
        state: State::from(text),
        info,
    }
}

/// Every candidate state of one source, in a fixed order.
fn candidates(source: PoolSource, options: &PoolOptions) -> Result<Vec<PoolState>, CorpusError> {
    let root = &options.root;
    let dev = |dataset: Dataset| -> Result<Vec<(String, String)>, CorpusError> {
        let records = crate::load(
            dataset,
            Split::Dev,
            &LoadOptions {
                root: Some(root.clone()),
                limit: None,
                seed: options.seed,
            },
        )?;
        Ok(records
            .into_iter()
            .map(|r| (r.display_id().to_owned(), r.state.render()))
            .collect())
    };
    let of = |rows: Vec<(String, String)>, genre: Genre| -> Vec<PoolState> {
        rows.into_iter()
            .map(|(id, text)| pool_state(source, id, text, genre, true))
            .collect()
    };
    Ok(match source {
        PoolSource::Boolq => of(dev(Dataset::Boolq)?, Genre::Encyclopedia),
        PoolSource::Sst5 => {
            let mut rows = dev(Dataset::Sst5)?;
            rows.extend(dev(Dataset::Sst5Train)?);
            of(rows, Genre::Review)
        }
        PoolSource::Clinc150 => of(dev(Dataset::Clinc150 { subset: None })?, Genre::Request),
        PoolSource::Hwu64 => of(dev(Dataset::Hwu64)?, Genre::Request),
        PoolSource::Snips => of(dev(Dataset::Snips)?, Genre::Request),
        PoolSource::Goemotions => of(dev(Dataset::Goemotions)?, Genre::SocialComment),
        PoolSource::MedicalAbstracts => of(dev(Dataset::MedicalAbstracts)?, Genre::Abstract),
        PoolSource::Snli => {
            // The premise alone: a sentence describing a scene.
            let rows = dev(Dataset::Snli)?.into_iter().filter_map(|(id, text)| {
                let premise = text
                    .strip_prefix("Premise: ")?
                    .split("\nHypothesis:")
                    .next()?;
                Some((id, premise.trim().to_owned()))
            });
            of(rows.collect(), Genre::Caption)
        }
        PoolSource::Spamassassin => spamassassin::rows(root, Split::Dev)?
            .into_iter()
            .map(|row| (row.id, spamassassin::as_read(&row.text)))
            .filter(|(_, text)| text.len() <= MAX_EMAIL_CHARS)
            .map(|(id, text)| {
                pool_state(
                    source,
                    format!("spamassassin:{id}"),
                    text,
                    Genre::Email,
                    true,
                )
            })
            .collect(),
        PoolSource::Udhr => udhr::rows(root)?
            .into_iter()
            .map(|row| {
                let english = row.language == "eng";
                pool_state(
                    source,
                    format!("udhr:{}", row.row),
                    row.text,
                    Genre::Legal,
                    english,
                )
            })
            .collect(),
        PoolSource::Wordnet => {
            let mut out = Vec::new();
            for row in wordnet::rows(root)? {
                let id = format!("wordnet:{}:{}", row.pos, row.offset);
                out.push(pool_state(
                    source,
                    id.clone(),
                    row.definition,
                    Genre::Definition,
                    true,
                ));
                for (i, example) in row.examples.iter().enumerate() {
                    let text = example.trim().trim_matches('"').trim().to_owned();
                    if text.split_whitespace().count() >= 4 {
                        out.push(pool_state(
                            source,
                            format!("{id}:{i}"),
                            text,
                            Genre::Example,
                            true,
                        ));
                    }
                }
            }
            out
        }
        PoolSource::Sotu => sotu::addresses(root, Split::Dev)?
            .into_iter()
            .flat_map(|address| {
                sotu::passages(&address.text, PASSAGE_WORDS)
                    .into_iter()
                    .enumerate()
                    .map(move |(i, text)| {
                        pool_state(
                            source,
                            format!("sotu:{}:{i}", address.year),
                            text,
                            Genre::Speech,
                            true,
                        )
                    })
            })
            .collect(),
        PoolSource::MobyDick => sotu::moby_dick(root)?
            .into_iter()
            .flat_map(|section| {
                sotu::passages(&section.text, PASSAGE_WORDS)
                    .into_iter()
                    .enumerate()
                    .map(move |(i, text)| {
                        pool_state(
                            source,
                            format!("moby-dick:{}:{i}", section.name),
                            text,
                            Genre::Novel,
                            true,
                        )
                    })
            })
            .collect(),
        PoolSource::Chatterbot => chatterbot::rows(root)?
            .into_iter()
            .map(|row| {
                let english = row.language == "english";
                pool_state(
                    source,
                    format!("chatterbot:{}", row.row),
                    row.text,
                    Genre::ChatMessage,
                    english,
                )
            })
            .collect(),
        PoolSource::Fortunes => fortunes::rows(root)?
            .into_iter()
            .map(|row| {
                pool_state(
                    source,
                    format!("fortunes:{}", row.row),
                    row.text,
                    Genre::Quotation,
                    true,
                )
            })
            .collect(),
        PoolSource::HumanEval => {
            let path = options
                .human_eval
                .as_deref()
                .expect("build_pool skips human-eval without its file");
            human_eval_solutions(path)?
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    pool_state(
                        source,
                        format!("human-eval:{}:{i}", s.task_id),
                        s.code,
                        Genre::Code,
                        true,
                    )
                })
                .collect()
        }
    })
}

/// One solution of `data/human-eval/solutions.jsonl`: a HumanEval problem's prompt and a body,
/// correct or broken as its tests found.
#[derive(Clone, Debug, Deserialize)]
pub struct Solution {
    pub task_id: String,
    pub code: String,
    pub passes: bool,
    pub edit: Option<String>,
}

/// Every solution in the file, in order.
pub fn human_eval_solutions(path: &Path) -> Result<Vec<Solution>, CorpusError> {
    crate::sources::jsonl_file::<Solution>(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names_round_trip() {
        for source in PoolSource::ALL {
            assert_eq!(source.as_str().parse::<PoolSource>(), Ok(source));
        }
        assert!("ag-news".parse::<PoolSource>().is_err());
        let total: usize = PoolSource::ALL.iter().map(|s| s.default_states()).sum();
        assert_eq!(total, 6_000);
    }

    #[test]
    fn a_state_gets_distinct_kinds_that_fit_it() {
        let state = pool_state(
            PoolSource::HumanEval,
            "human-eval:x:0".into(),
            "def add(a, b):\n    return a - b".into(),
            Genre::Code,
            true,
        );
        for seed in 0..20 {
            let questions = draft_questions(&state, 3, seed, None);
            assert_eq!(questions.len(), 3);
            for id in questions.keys() {
                let kind = Kind::ALL.into_iter().find(|k| k.as_str() == id).unwrap();
                assert!(kind.applies(&state.info), "{id}");
            }
        }
        assert_eq!(
            draft_questions(&state, 3, 4, None),
            draft_questions(&state, 3, 4, None)
        );
        let only = draft_questions(&state, 3, 4, Some(&[Kind::Code]));
        assert_eq!(only.keys().collect::<Vec<_>>(), ["code"]);
    }
}
