//! The Stanford Sentiment Treebank, sentence level (`sst5/stsa.*`, the harvardnlp exports):
//! one `LABEL sentence` per line, lowercased and tokenized.
//!
//! SST-5 is a five-level score: `stsa.fine.dev` is development data, `stsa.fine.test` is held
//! out. `stsa.fine.train` is more development data, read as its own dataset (`sst5-train`) so
//! that `sst5` keeps meaning the dev and test files every SST-5 result is reported on. SST-2 is a noul (is it positive?): held out is `stsa.binary.test`; development data is
//! `stsa.fine.dev` without its neutral sentences, levels 0-1 negative and 3-4 positive, which is
//! how SST-2 is made from SST-5 (it gives the 872 sentences of the usual SST-2 dev set).

use std::path::Path;

use ruling_schema::{Question, Text};

use super::{lines, noul, single};
use crate::dataset::Split;
use crate::error::CorpusError;
use crate::record::{Label, Record};

/// SST-5's levels, lowest first; the file's label is the index.
pub(crate) const LEVELS: [&str; 5] = [
    "very negative",
    "negative",
    "neutral",
    "positive",
    "very positive",
];

const SCORE_INSTRUCTIONS: &str =
    "How positive or negative is the sentiment of this sentence from a movie review?";
/// The SST-2 question, which the training builder also asks of SST-5 sentences.
pub(crate) const NOUL_INSTRUCTIONS: &str =
    "Is the sentiment of this sentence from a movie review positive?";

pub(super) struct Row {
    /// `dev`, `test` or `train`: which file the sentence comes from.
    file: &'static str,
    /// Position among the file's sentences, from 0.
    row: usize,
    label: usize,
    sentence: String,
}

/// Every sentence of one file with its label, checked against `classes`.
fn read(root: &Path, name: &str, classes: usize) -> Result<Vec<(usize, String)>, CorpusError> {
    let path = root.join("sst5").join(name);
    lines(&path)?
        .into_iter()
        .map(|(line, text)| {
            let parsed = text.split_once(' ').and_then(|(label, sentence)| {
                let label = label.parse::<usize>().ok().filter(|l| *l < classes)?;
                let sentence = sentence.trim();
                (!sentence.is_empty()).then(|| (label, sentence.to_owned()))
            });
            parsed.ok_or_else(|| {
                CorpusError::malformed(
                    &path,
                    line,
                    format!("expected a label 0 to {} and a sentence", classes - 1),
                )
            })
        })
        .collect()
}

fn file_of(split: Split) -> &'static str {
    match split {
        Split::Dev => "dev",
        Split::HeldOut => "test",
    }
}

pub(super) fn fine_rows(root: &Path, split: Split) -> Result<Vec<Row>, CorpusError> {
    let name = match split {
        Split::Dev => "stsa.fine.dev",
        Split::HeldOut => "stsa.fine.test",
    };
    fine_file(root, name, file_of(split))
}

/// The rows of `stsa.fine.train`, development data only.
pub(super) fn train_rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    fine_file(root, "stsa.fine.train", "train")
}

fn fine_file(root: &Path, name: &str, file: &'static str) -> Result<Vec<Row>, CorpusError> {
    Ok(read(root, name, LEVELS.len())?
        .into_iter()
        .enumerate()
        .map(|(row, (label, sentence))| Row {
            file,
            row,
            label,
            sentence,
        })
        .collect())
}

/// SST-2 rows; `label` is 1 for positive, 0 for negative.
pub(super) fn binary_rows(root: &Path, split: Split) -> Result<Vec<Row>, CorpusError> {
    Ok(match split {
        Split::Dev => fine_rows(root, Split::Dev)?
            .into_iter()
            .filter(|row| row.label != 2)
            .map(|row| Row {
                label: usize::from(row.label > 2),
                ..row
            })
            .collect(),
        Split::HeldOut => read(root, "stsa.binary.test", 2)?
            .into_iter()
            .enumerate()
            .map(|(row, (label, sentence))| Row {
                file: file_of(split),
                row,
                label,
                sentence,
            })
            .collect(),
    })
}

/// `family` is the dataset's name: `sst5` or `sst5-train`, which ask the same question.
pub(super) fn fine_record(family: &str, row: &Row) -> Record {
    let question = Question::Score {
        instructions: Text::from(SCORE_INSTRUCTIONS),
        criteria: LEVELS.map(Text::from).to_vec(),
    };
    single(
        family,
        format!("{family}:{}:{}", row.file, row.row),
        row.sentence.clone(),
        "sentiment",
        question,
        Label::Level(row.label),
    )
}

/// Ids keep the row of the file the sentence is in, so an SST-2 dev record and the SST-5 dev
/// record of the same sentence share their row number.
pub(super) fn binary_record(row: &Row) -> Record {
    single(
        "sst2",
        format!("sst2:{}:{}", row.file, row.row),
        row.sentence.clone(),
        "positive",
        noul(NOUL_INSTRUCTIONS),
        Label::Yes(row.label == 1),
    )
}
