//! Which datasets there are, which of their rows are development data and which are held out,
//! and [`load`], the one way to turn a dataset split into records.
//!
//! The split of each dataset follows the table in `shared/datasets/README.md` exactly. A held-out
//! split is for reporting only: never to train, to choose prompts or hyper-parameters, or to fit
//! a temperature. Asking for a split a dataset does not have is an error that says why, never
//! an empty list or rows of the other split.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

use crate::error::CorpusError;
use crate::record::Record;
use crate::sources;

/// The environment variable that overrides [`default_root`].
pub const DATASETS_ENV: &str = "RULING_DATASETS";

/// Development data, or data held out for evaluation only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Split {
    /// May train, tune prompts and fit calibration.
    Dev,
    /// For reporting only, after every choice was made on development data.
    HeldOut,
}

impl Split {
    pub const ALL: [Split; 2] = [Split::Dev, Split::HeldOut];

    /// The command-line name: `dev` or `held-out`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dev => "dev",
            Self::HeldOut => "held-out",
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a [`Split`] or a [`Dataset`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown {what} {given:?}: expected {expected}")]
pub struct ParseNameError {
    what: &'static str,
    given: String,
    expected: String,
}

impl ParseNameError {
    /// `given` is not a name of `what`; `expected` says which names are.
    pub(crate) fn new(what: &'static str, given: &str, expected: String) -> Self {
        Self {
            what,
            given: given.to_owned(),
            expected,
        }
    }
}

impl FromStr for Split {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|split| split.as_str() == s)
            .ok_or_else(|| ParseNameError {
                what: "split",
                given: s.to_owned(),
                expected: "dev or held-out".to_owned(),
            })
    }
}

/// Most intents a CLINC150 subset may offer: a subset of all 150 is the full question.
pub const MAX_CLINC_SUBSET: usize = 149;

/// A dataset under the datasets root, as one kind of typed question.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dataset {
    /// BoolQ (SuperGLUE copy of the dev set): noul over a passage.
    Boolq,
    /// ChaosNLI's SNLI items: 3-way choice with 100-vote soft targets.
    ChaosnliSnli,
    /// ChaosNLI's MNLI (matched) items: 3-way choice with 100-vote soft targets.
    ChaosnliMnli,
    /// SST-5: score over five sentiment levels.
    Sst5,
    /// SST-2: noul, is the sentiment positive.
    Sst2,
    /// CLINC150: choice over all 150 intents plus `oos`, or, with `subset: Some(n)`, over `n`
    /// intents sampled per row (always including the gold intent) plus `oos`.
    Clinc150 { subset: Option<usize> },
    /// BANKING77: choice over 77 intents.
    Banking77,
    /// AG News: choice over 4 topics.
    AgNews,
    /// TREC question classification: choice over 6 coarse answer types.
    Trec,
    /// GoEmotions: one noul per emotion (27 and neutral), multi-label.
    Goemotions,
    /// SuperGLUE CommitmentBank: 3-way choice.
    Cb,
    /// SuperGLUE RTE: 2-way choice.
    Rte,
    /// SST-5's train file: the score question of [`Dataset::Sst5`] on other sentences.
    Sst5Train,
    /// HWU64: choice over the 64 intents of a home assistant.
    Hwu64,
    /// SNIPS: choice over the 7 intents of a voice assistant.
    Snips,
    /// SNLI dev and test pairs: the 3-way choice of ChaosNLI with hard labels.
    Snli,
    /// Medical Abstracts: choice over 5 topics.
    MedicalAbstracts,
    /// SpamAssassin: noul, is a whole e-mail spam.
    Spamassassin,
    /// State of the Union addresses: choice, which party's president gave a whole address.
    Sotu,
    /// UDHR paragraphs: choice, which of ten languages a paragraph is in.
    Udhr,
    /// WordNet definitions: choice over the supersenses of a noun or verb.
    Wordnet,
    /// ChatterBot openers: choice over 21 conversation topics.
    Chatterbot,
    /// Fortunes: choice over 22 categories of quotations and jokes.
    Fortunes,
    /// A held-out CLINC150 request hidden in a log of development requests filling about
    /// `tokens` tokens (0: the request alone): does any message ask about its intent, about
    /// an absent one.
    Needle { tokens: usize },
}

impl Dataset {
    /// Every dataset, with CLINC150 both whole and as the 20-intent subset.
    pub const ALL: [Dataset; 27] = [
        Dataset::Boolq,
        Dataset::ChaosnliSnli,
        Dataset::ChaosnliMnli,
        Dataset::Sst5,
        Dataset::Sst2,
        Dataset::Clinc150 { subset: None },
        Dataset::Clinc150 { subset: Some(20) },
        Dataset::Banking77,
        Dataset::AgNews,
        Dataset::Trec,
        Dataset::Goemotions,
        Dataset::Cb,
        Dataset::Rte,
        Dataset::Sst5Train,
        Dataset::Hwu64,
        Dataset::Snips,
        Dataset::Snli,
        Dataset::MedicalAbstracts,
        Dataset::Spamassassin,
        Dataset::Sotu,
        Dataset::Udhr,
        Dataset::Wordnet,
        Dataset::Chatterbot,
        Dataset::Fortunes,
        Dataset::Needle { tokens: 0 },
        Dataset::Needle { tokens: 2048 },
        Dataset::Needle { tokens: 8192 },
    ];

    /// The question type its records ask: `noul`, `choice` or `score`.
    pub fn question_type(self) -> &'static str {
        match self {
            Self::Boolq
            | Self::Sst2
            | Self::Goemotions
            | Self::Spamassassin
            | Self::Needle { .. } => "noul",
            Self::Sst5 | Self::Sst5Train => "score",
            Self::ChaosnliSnli
            | Self::ChaosnliMnli
            | Self::Clinc150 { .. }
            | Self::Banking77
            | Self::AgNews
            | Self::Trec
            | Self::Cb
            | Self::Rte
            | Self::Hwu64
            | Self::Snips
            | Self::Snli
            | Self::MedicalAbstracts
            | Self::Sotu
            | Self::Udhr
            | Self::Wordnet
            | Self::Chatterbot
            | Self::Fortunes => "choice",
        }
    }

    /// The splits it has, per the datasets README.
    pub fn splits(self) -> &'static [Split] {
        match self {
            Self::Boolq
            | Self::Sst5
            | Self::Sst2
            | Self::Clinc150 { .. }
            | Self::Spamassassin
            | Self::Sotu => &Split::ALL,
            Self::Banking77 | Self::AgNews | Self::Trec | Self::Needle { .. } => &[Split::HeldOut],
            Self::ChaosnliSnli
            | Self::ChaosnliMnli
            | Self::Goemotions
            | Self::Cb
            | Self::Rte
            | Self::Sst5Train
            | Self::Hwu64
            | Self::Snips
            | Self::Snli
            | Self::MedicalAbstracts
            | Self::Udhr
            | Self::Wordnet
            | Self::Chatterbot
            | Self::Fortunes => &[Split::Dev],
        }
    }

    /// What the answers are and which rows make which split, in a line.
    pub fn description(self) -> String {
        match self {
            Self::Boolq => {
                "yes/no question over a Wikipedia passage; boolq/val.jsonl, even idx dev, \
                            odd idx held-out"
                    .to_owned()
            }
            Self::ChaosnliSnli | Self::ChaosnliMnli => "entailment / neutral / contradiction with \
                 the 100-vote distribution as soft target, majority vote as label; dev only"
                .to_owned(),
            Self::Sst5 => {
                "sentiment of a movie-review sentence on 5 levels, very negative to very \
                           positive; stsa.fine.dev dev, stsa.fine.test held-out"
                    .to_owned()
            }
            Self::Sst2 => "is a movie-review sentence positive; dev is stsa.fine.dev without its \
                           neutral sentences, held-out is stsa.binary.test"
                .to_owned(),
            Self::Clinc150 { subset: None } => {
                "intent of a virtual-assistant request over all 150 \
                 intents plus oos; train, val, oos_train, oos_val dev, test, oos_test held-out"
                    .to_owned()
            }
            Self::Clinc150 { subset: Some(n) } => format!(
                "intent over {n} intents sampled per row (the gold one always among them) plus \
                 oos; splits as clinc150"
            ),
            Self::Banking77 => {
                "intent of a bank customer's message over 77 intents; held-out only".to_owned()
            }
            Self::AgNews => {
                "topic of a news article: World, Sports, Business, Sci/Tech; held-out only"
                    .to_owned()
            }
            Self::Trec => {
                "the kind of answer a question asks for, 6 coarse TREC types; held-out only"
                    .to_owned()
            }
            Self::Goemotions => {
                "one yes/no question per emotion (27 and neutral) about a Reddit comment, \
                 multi-label; dev only"
                    .to_owned()
            }
            Self::Cb => {
                "entailment / contradiction / neutral (CommitmentBank); dev only".to_owned()
            }
            Self::Rte => "entailment / not_entailment (RTE); dev only".to_owned(),
            Self::Sst5Train => {
                "the sst5 question on its train file, stsa.fine.train; dev only".to_owned()
            }
            Self::Hwu64 => "intent of a request to a home assistant over 64 intents; \
                            trainset and testset of fold 1, dev only"
                .to_owned(),
            Self::Snips => "intent of a request to a voice assistant over 7 intents; \
                            train_*_full and validate_*, dev only"
                .to_owned(),
            Self::Snli => "entailment / neutral / contradiction of SNLI pairs, hard labels; \
                           dev and test files, dev only"
                .to_owned(),
            Self::MedicalAbstracts => "topic of a medical abstract over 5 kinds of condition; \
                                       medical_tc_test, dev only"
                .to_owned(),
            Self::Spamassassin => "is a whole e-mail (headers and body) spam; groups easy-ham-1, \
                                   hard-ham-1, spam-1 dev, easy-ham-2, spam-2 held-out"
                .to_owned(),
            Self::Sotu => "which party's president gave a whole State of the Union address; \
                           even years dev, odd years held-out"
                .to_owned(),
            Self::Udhr => "which of ten languages a UDHR paragraph is written in (paragraphs in \
                           named languages only); dev only"
                .to_owned(),
            Self::Wordnet => "which supersense a WordNet noun or verb definition belongs to (26 \
                              noun, 15 verb); dev only"
                .to_owned(),
            Self::Chatterbot => "which of 21 topics a ChatterBot conversation opener is about, 28 \
                                 languages; dev only"
                .to_owned(),
            Self::Fortunes => {
                "which of 22 categories a quotation or joke was filed under; dev only".to_owned()
            }
            Self::Needle { tokens: 0 } => {
                "a held-out CLINC150 request alone in a one-message log: \
                                           does any message ask about its intent, about another; \
                                           held-out only"
                    .to_owned()
            }
            Self::Needle { tokens } => format!(
                "a held-out CLINC150 request among development requests filling a log of about \
                 {tokens} tokens: does any message ask about its intent, about another; held-out only"
            ),
        }
    }

    /// Why the dataset lacks `split`, or `None` when it has it.
    fn missing_split_reason(self, split: Split) -> Option<&'static str> {
        if self.splits().contains(&split) {
            return None;
        }
        Some(match split {
            Split::Dev => {
                "the datasets README reserves all of it for evaluation (held-out only); develop \
                 on another dataset's dev split"
            }
            Split::HeldOut => {
                "the datasets README makes all of it development data (dev only); report on \
                 another dataset's held-out split"
            }
        })
    }
}

impl fmt::Display for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Boolq => f.write_str("boolq"),
            Self::ChaosnliSnli => f.write_str("chaosnli-snli"),
            Self::ChaosnliMnli => f.write_str("chaosnli-mnli"),
            Self::Sst5 => f.write_str("sst5"),
            Self::Sst2 => f.write_str("sst2"),
            Self::Clinc150 { subset: None } => f.write_str("clinc150"),
            Self::Clinc150 { subset: Some(n) } => write!(f, "clinc150-{n}"),
            Self::Banking77 => f.write_str("banking77"),
            Self::AgNews => f.write_str("ag-news"),
            Self::Trec => f.write_str("trec"),
            Self::Goemotions => f.write_str("goemotions"),
            Self::Cb => f.write_str("cb"),
            Self::Rte => f.write_str("rte"),
            Self::Sst5Train => f.write_str("sst5-train"),
            Self::Hwu64 => f.write_str("hwu64"),
            Self::Snips => f.write_str("snips"),
            Self::Snli => f.write_str("snli"),
            Self::MedicalAbstracts => f.write_str("medical-abstracts"),
            Self::Spamassassin => f.write_str("spamassassin"),
            Self::Sotu => f.write_str("sotu"),
            Self::Udhr => f.write_str("udhr"),
            Self::Wordnet => f.write_str("wordnet"),
            Self::Chatterbot => f.write_str("chatterbot"),
            Self::Fortunes => f.write_str("fortunes"),
            Self::Needle { tokens } => f.write_str(&crate::sources::needle::name(*tokens)),
        }
    }
}

impl FromStr for Dataset {
    type Err = ParseNameError;

    /// The names [`Display`](fmt::Display) writes; `clinc150-N` takes any `N` from 1 to
    /// [`MAX_CLINC_SUBSET`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let error = || ParseNameError {
            what: "dataset",
            given: s.to_owned(),
            expected: format!(
                "one of {}, or clinc150-N for N from 1 to {MAX_CLINC_SUBSET}, or needle-N for N \
                 from 256 to 16384",
                Self::ALL
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        if s == "needle-alone" {
            return Ok(Self::Needle { tokens: 0 });
        }
        if let Some(n) = s.strip_prefix("needle-") {
            // Digits only, no leading zero, 256 to 16,384 tokens.
            let canonical = n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0');
            return match n.parse::<usize>() {
                Ok(n) if canonical && (256..=16_384).contains(&n) => Ok(Self::Needle { tokens: n }),
                _ => Err(error()),
            };
        }
        if let Some(n) = s.strip_prefix("clinc150-") {
            // Digits only, no leading zero: one spelling per dataset.
            let canonical = n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0');
            return match n.parse::<usize>() {
                Ok(n) if canonical && (1..=MAX_CLINC_SUBSET).contains(&n) => {
                    Ok(Self::Clinc150 { subset: Some(n) })
                }
                _ => Err(error()),
            };
        }
        Self::ALL
            .into_iter()
            .find(|d| d.to_string() == s)
            .ok_or_else(error)
    }
}

/// One line of the catalog: a dataset, its question type and its splits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetInfo {
    pub dataset: Dataset,
    /// The command-line name.
    pub name: String,
    /// `noul`, `choice` or `score`.
    pub question_type: &'static str,
    pub splits: &'static [Split],
    pub description: String,
}

/// Every dataset of [`Dataset::ALL`] with its question type and splits.
pub fn catalog() -> Vec<DatasetInfo> {
    Dataset::ALL
        .into_iter()
        .map(|dataset| DatasetInfo {
            dataset,
            name: dataset.to_string(),
            question_type: dataset.question_type(),
            splits: dataset.splits(),
            description: dataset.description(),
        })
        .collect()
}

/// The datasets folder: `$RULING_DATASETS` when set and not empty, otherwise `shared/datasets`
/// beside the workspace this crate was built in (`<workspace>/../shared/datasets`).
pub fn default_root() -> PathBuf {
    match std::env::var_os(DATASETS_ENV) {
        Some(root) if !root.is_empty() => PathBuf::from(root),
        _ => {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets");
            root.canonicalize().unwrap_or(root)
        }
    }
}

/// How to load a split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The datasets folder; [`default_root`] when `None`.
    pub root: Option<PathBuf>,
    /// At most this many records, sampled with `seed`; every record of the split when `None`.
    pub limit: Option<usize>,
    /// Seeds the sample and every per-row random choice (the CLINC150 subsets).
    pub seed: u64,
}

impl LoadOptions {
    /// The datasets folder these options read from.
    pub fn root(&self) -> PathBuf {
        self.root.clone().unwrap_or_else(default_root)
    }
}

/// The records of one split of one dataset.
///
/// Without a limit, every row of the split in file order. With `limit: Some(n)`, `n` rows
/// drawn without replacement (all of them when the split is smaller), in file order: the rows'
/// positions are shuffled with ChaCha8 seeded by `seed` and the first `n` are kept, so the same
/// seed always gives the same sample, and a smaller limit gives a subset of a larger one.
pub fn load(
    dataset: Dataset,
    split: Split,
    options: &LoadOptions,
) -> Result<Vec<Record>, CorpusError> {
    let mut records = Vec::new();
    for_each_record(dataset, split, options, &mut |record| records.push(record))?;
    Ok(records)
}

/// [`load`], handing each record to `sink` as it is built instead of collecting them, so a
/// caller that keeps only part of each record (the training builder drops the 151-option
/// CLINC150 question) never holds a whole split of large questions.
pub(crate) fn for_each_record(
    dataset: Dataset,
    split: Split,
    options: &LoadOptions,
    sink: &mut dyn FnMut(Record),
) -> Result<(), CorpusError> {
    if let Some(reason) = dataset.missing_split_reason(split) {
        return Err(CorpusError::SplitUnavailable {
            dataset: dataset.to_string(),
            split,
            reason,
        });
    }
    if let Dataset::Clinc150 {
        subset: Some(subset),
    } = dataset
        && !(1..=MAX_CLINC_SUBSET).contains(&subset)
    {
        return Err(CorpusError::InvalidSubset {
            subset,
            max: MAX_CLINC_SUBSET,
        });
    }
    sources::load(dataset, split, &options.root(), options, sink)
}

/// Builds the records of the rows [`sample_indices`] keeps and hands them to `sink`.
pub(crate) fn finish<T>(
    rows: &[T],
    options: &LoadOptions,
    build: impl Fn(&T) -> Record,
    sink: &mut dyn FnMut(Record),
) {
    for i in sample_indices(rows.len(), options.limit, options.seed) {
        sink(build(&rows[i]));
    }
}

/// The positions of a seeded sample of `limit` out of `len` rows, ascending.
pub(crate) fn sample_indices(len: usize, limit: Option<usize>, seed: u64) -> Vec<usize> {
    let mut indices: Vec<usize> = (0..len).collect();
    match limit {
        Some(limit) if limit < len => {
            indices.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
            indices.truncate(limit);
            indices.sort_unstable();
            indices
        }
        _ => indices,
    }
}

/// A generator for the random choices of one row, from the load seed and the row's id, so a
/// row's record does not depend on which other rows were loaded.
pub(crate) fn row_rng(seed: u64, id: &str) -> ChaCha8Rng {
    // FNV-1a over the seed and the id: stable across platforms and releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.to_le_bytes().iter().chain(id.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ChaCha8Rng::seed_from_u64(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for dataset in Dataset::ALL {
            assert_eq!(dataset.to_string().parse::<Dataset>(), Ok(dataset));
        }
        assert_eq!(
            "clinc150-5".parse::<Dataset>(),
            Ok(Dataset::Clinc150 { subset: Some(5) })
        );
        for bad in [
            "clinc150-0",
            "clinc150-150",
            "clinc150-05",
            "clinc150-+5",
            "BoolQ",
            "sst",
        ] {
            let err = bad.parse::<Dataset>().expect_err(bad);
            assert!(err.to_string().contains("clinc150-N"), "{err}");
        }
        assert_eq!("held-out".parse::<Split>(), Ok(Split::HeldOut));
        assert!("test".parse::<Split>().is_err());
    }

    #[test]
    fn samples_are_seeded_nested_and_sorted() {
        let a = sample_indices(100, Some(10), 7);
        assert_eq!(a, sample_indices(100, Some(10), 7));
        assert_ne!(a, sample_indices(100, Some(10), 8));
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        let b = sample_indices(100, Some(30), 7);
        assert!(
            a.iter().all(|i| b.contains(i)),
            "a smaller limit is a subset"
        );
        assert_eq!(sample_indices(5, Some(10), 7), vec![0, 1, 2, 3, 4]);
        assert_eq!(sample_indices(3, None, 7), vec![0, 1, 2]);
    }

    #[test]
    fn catalog_lists_every_dataset_once() {
        let names: Vec<String> = catalog().into_iter().map(|i| i.name).collect();
        assert_eq!(names.len(), Dataset::ALL.len());
        assert!(names.contains(&"clinc150-20".to_owned()));
    }
}
