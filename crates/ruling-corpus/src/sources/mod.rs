//! One reader per source folder under the datasets root. Each reads the rows of one split
//! (and only that split) into plain structs, and builds a record from a row; [`load`] samples
//! the rows first so only the kept ones become records.
//!
//! The files are byte-exact copies of their public sources (`shared/datasets/MANIFEST.md`), so
//! a reader refuses anything their documentation rules out (an unknown label, a missing field)
//! with an error naming the file and line, instead of guessing.

mod ag_news;
mod banking77;
mod boolq;
mod chaosnli;
pub(crate) mod chatterbot;
pub(crate) mod clinc150;
pub(crate) mod fortunes;
mod goemotions;
mod hwu64;
mod medical_abstracts;
pub(crate) mod needle;
mod nli;
mod snips;
mod snli;
pub(crate) mod sotu;
pub(crate) mod spamassassin;
pub(crate) mod sst;
mod superglue;
mod trec;
pub(crate) mod udhr;
pub(crate) mod wordnet;

use std::fs;
use std::path::Path;

use indexmap::IndexMap;
use ruling_schema::{Question, State, Text};
use serde::de::DeserializeOwned;

use crate::dataset::{Dataset, LoadOptions, Split, finish};
use crate::error::CorpusError;
use crate::record::{Label, Record};

pub(crate) fn load(
    dataset: Dataset,
    split: Split,
    root: &Path,
    options: &LoadOptions,
    sink: &mut dyn FnMut(Record),
) -> Result<(), CorpusError> {
    let name = dataset.to_string();
    match dataset {
        Dataset::Boolq => finish(&boolq::rows(root, split)?, options, boolq::record, sink),
        Dataset::ChaosnliSnli | Dataset::ChaosnliMnli => {
            let rows = chaosnli::rows(root, dataset)?;
            finish(&rows, options, |row| chaosnli::record(&name, row), sink);
        }
        Dataset::Sst5 => {
            let rows = sst::fine_rows(root, split)?;
            finish(&rows, options, |row| sst::fine_record(&name, row), sink);
        }
        Dataset::Sst5Train => {
            let rows = sst::train_rows(root)?;
            finish(&rows, options, |row| sst::fine_record(&name, row), sink);
        }
        Dataset::Sst2 => {
            let rows = sst::binary_rows(root, split)?;
            finish(&rows, options, sst::binary_record, sink);
        }
        Dataset::Clinc150 { subset } => {
            let (intents, rows) = clinc150::rows(root, split)?;
            let builder = clinc150::Builder::new(&name, intents, subset, options.seed);
            finish(&rows, options, |row| builder.record(row), sink);
        }
        Dataset::Banking77 => {
            let (intents, rows) = banking77::rows(root)?;
            let question = banking77::question(&intents);
            finish(
                &rows,
                options,
                |row| banking77::record(&question, row),
                sink,
            );
        }
        Dataset::AgNews => {
            let (question, rows) = ag_news::rows(root)?;
            finish(&rows, options, |row| ag_news::record(&question, row), sink);
        }
        Dataset::Trec => finish(&trec::rows(root)?, options, trec::record, sink),
        Dataset::Goemotions => {
            let (emotions, rows) = goemotions::rows(root)?;
            let questions = goemotions::questions(&emotions);
            finish(
                &rows,
                options,
                |row| goemotions::record(&questions, row),
                sink,
            );
        }
        Dataset::Cb => finish(
            &superglue::cb_rows(root)?,
            options,
            superglue::cb_record,
            sink,
        ),
        Dataset::Rte => {
            let rows = superglue::rte_rows(root)?;
            finish(&rows, options, superglue::rte_record, sink);
        }
        Dataset::Hwu64 => {
            let (intents, rows) = hwu64::rows(root)?;
            let question = hwu64::question(&intents);
            finish(&rows, options, |row| hwu64::record(&question, row), sink);
        }
        Dataset::Snips => {
            let question = snips::question();
            finish(
                &snips::rows(root)?,
                options,
                |row| snips::record(&question, row),
                sink,
            );
        }
        Dataset::Snli => finish(&snli::rows(root)?, options, snli::record, sink),
        Dataset::MedicalAbstracts => {
            let (question, rows) = medical_abstracts::rows(root)?;
            finish(
                &rows,
                options,
                |row| medical_abstracts::record(&question, row),
                sink,
            );
        }
        Dataset::Spamassassin => finish(
            &spamassassin::rows(root, split)?,
            options,
            spamassassin::record,
            sink,
        ),
        Dataset::Sotu => finish(&sotu::addresses(root, split)?, options, sotu::record, sink),
        Dataset::Udhr => finish(
            &udhr::named_rows(root)?,
            options,
            |row| udhr::record(row, options.seed),
            sink,
        ),
        Dataset::Wordnet => finish(
            &wordnet::labelled_rows(root)?,
            options,
            wordnet::record,
            sink,
        ),
        Dataset::Chatterbot => finish(
            &chatterbot::labelled_rows(root)?,
            options,
            chatterbot::record,
            sink,
        ),
        Dataset::Fortunes => finish(
            &fortunes::labelled_rows(root)?,
            options,
            fortunes::record,
            sink,
        ),
        Dataset::Needle { tokens } => {
            let needles = needle::needles(root)?;
            finish(
                needles.rows(),
                options,
                |row| needles.record(row, tokens, options.seed),
                sink,
            );
        }
    }
    Ok(())
}

fn read_text(path: &Path) -> Result<String, CorpusError> {
    fs::read_to_string(path).map_err(CorpusError::io(path))
}

/// A whole-file JSON document.
fn json_file<T: DeserializeOwned>(path: &Path) -> Result<T, CorpusError> {
    serde_json::from_str(&read_text(path)?).map_err(|source| CorpusError::Json {
        path: path.to_owned(),
        line: source.line() as u64,
        source,
    })
}

/// Every non-blank line of a JSONL file, parsed, with its 1-based line number.
fn jsonl_rows<T: DeserializeOwned>(path: &Path) -> Result<Vec<(u64, T)>, CorpusError> {
    lines(path)?
        .into_iter()
        .map(|(line, text)| {
            serde_json::from_str(&text)
                .map(|row| (line, row))
                .map_err(|source| CorpusError::Json {
                    path: path.to_owned(),
                    line,
                    source,
                })
        })
        .collect()
}

/// Every row of a JSONL file, in order.
pub(crate) fn jsonl_file<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, CorpusError> {
    Ok(jsonl_rows(path)?.into_iter().map(|(_, row)| row).collect())
}

/// Every non-blank line of a text file with its 1-based line number, line ending removed.
fn lines(path: &Path) -> Result<Vec<(u64, String)>, CorpusError> {
    Ok(read_text(path)?
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| (i as u64 + 1, line.to_owned()))
        .collect())
}

/// Every record of a CSV (or, with `b'\t'`, TSV) file with the 1-based line it starts on;
/// quoted fields may hold the delimiter, doubled quotes and line breaks.
fn csv_rows(
    path: &Path,
    delimiter: u8,
    has_headers: bool,
    columns: usize,
) -> Result<Vec<(u64, csv::StringRecord)>, CorpusError> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(has_headers)
        .from_path(path)
        .map_err(|source| CorpusError::Csv {
            path: path.to_owned(),
            line: 0,
            source,
        })?;
    let mut rows = Vec::new();
    for result in reader.records() {
        let record = result.map_err(|source| CorpusError::Csv {
            path: path.to_owned(),
            line: source.position().map_or(0, csv::Position::line),
            source,
        })?;
        let line = record.position().map_or(0, csv::Position::line);
        if record.len() != columns {
            return Err(CorpusError::malformed(
                path,
                line,
                format!("expected {columns} fields, found {}", record.len()),
            ));
        }
        rows.push((line, record));
    }
    Ok(rows)
}

/// A choice question from option keys and their descriptions (`None` shows the key alone).
fn choice<'a>(
    instructions: &str,
    options: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Question {
    Question::Choice {
        instructions: Text::from(instructions),
        criteria: options
            .into_iter()
            .map(|(key, description)| {
                (
                    key.to_owned(),
                    description.map_or_else(Text::null, Text::from),
                )
            })
            .collect(),
    }
}

fn noul(instructions: impl Into<String>) -> Question {
    Question::Noul {
        instructions: Text::from(instructions.into()),
        criteria: None,
    }
}

/// A record that asks one question.
fn single(
    family: &str,
    id: String,
    state: impl Into<String>,
    question_id: &str,
    question: Question,
    label: Label,
) -> Record {
    Record {
        id: Some(id),
        family: family.to_owned(),
        state: State::from(state.into()),
        questions: IndexMap::from([(question_id.to_owned(), question)]),
        labels: IndexMap::from([(question_id.to_owned(), label)]),
        references: IndexMap::new(),
        weight: 1.0,
    }
}
