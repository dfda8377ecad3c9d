//! HWU64 (`hwu64/trainset/*.csv`, `testset/*.csv`: fold 1 of the authors' cross-validation):
//! requests to a home assistant robot, one file per intent, named `<scenario>_<intent>` as the
//! dataset names its 64 intents (`alarm_set`, `iot_hue_lightchange`). Both folders are
//! development data; neither is held out.
//!
//! The files are `;`-separated with a header. The text is `answer_from_anno`, the annotated
//! answer with its slot marks removed, as the manifest advises; `answerid` is not unique, so a
//! row is named by its folder, intent and position in the file instead.

use std::fs;
use std::path::Path;

use ruling_schema::Question;

use super::{choice, csv_rows, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which intent does this request to a home assistant express?";

/// The two folders of fold 1, in the order they are read.
const FOLDERS: [&str; 2] = ["trainset", "testset"];

/// Columns of every file: answerid, scenario, intent, answer_annotation, answer_from_anno,
/// answer_from_user.
const COLUMNS: usize = 6;
const SCENARIO: usize = 1;
const INTENT: usize = 2;
const TEXT: usize = 4;

pub(super) struct Row {
    folder: &'static str,
    intent: String,
    /// Position among the data rows of its file, from 0.
    index: usize,
    text: String,
}

/// The intents `folder` holds a file for, sorted (so scenario by scenario).
fn intents_in(folder: &Path) -> Result<Vec<String>, CorpusError> {
    let mut intents = Vec::new();
    for entry in fs::read_dir(folder).map_err(CorpusError::io(folder))? {
        let path = entry.map_err(CorpusError::io(folder))?.path();
        if path.extension().is_some_and(|e| e == "csv")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            intents.push(stem.to_owned());
        }
    }
    intents.sort_unstable();
    if intents.is_empty() {
        return Err(CorpusError::malformed(
            folder,
            0,
            "no <scenario>_<intent>.csv files in the folder",
        ));
    }
    Ok(intents)
}

/// The intents (one per file of `trainset/`, sorted) and every row of both folders.
pub(super) fn rows(root: &Path) -> Result<(Vec<String>, Vec<Row>), CorpusError> {
    let base = root.join("hwu64");
    let intents = intents_in(&base.join(FOLDERS[0]))?;
    let mut rows = Vec::new();
    for folder in FOLDERS {
        let dir = base.join(folder);
        let here = intents_in(&dir)?;
        if here != intents {
            return Err(CorpusError::malformed(
                &dir,
                0,
                format!(
                    "holds files for {} intents that differ from the {} of {}: {:?}",
                    here.len(),
                    intents.len(),
                    FOLDERS[0],
                    here.iter()
                        .filter(|i| !intents.contains(i))
                        .chain(intents.iter().filter(|i| !here.contains(i)))
                        .collect::<Vec<_>>()
                ),
            ));
        }
        for intent in &intents {
            let path = dir.join(format!("{intent}.csv"));
            for (index, (line, record)) in csv_rows(&path, b';', true, COLUMNS)?
                .into_iter()
                .enumerate()
            {
                let label = format!("{}_{}", &record[SCENARIO], &record[INTENT]);
                if label != *intent {
                    return Err(CorpusError::malformed(
                        &path,
                        line,
                        format!(
                            "scenario and intent make {label:?}, but the file holds {intent:?}"
                        ),
                    ));
                }
                let text = record[TEXT].trim();
                if text.is_empty() {
                    return Err(CorpusError::malformed(
                        &path,
                        line,
                        "answer_from_anno is empty",
                    ));
                }
                rows.push(Row {
                    folder,
                    intent: intent.clone(),
                    index,
                    text: text.to_owned(),
                });
            }
        }
    }
    Ok((intents, rows))
}

/// A choice over every intent; descriptions left out, as for BANKING77: the names say it.
pub(super) fn question(intents: &[String]) -> Question {
    choice(INSTRUCTIONS, intents.iter().map(|i| (i.as_str(), None)))
}

pub(super) fn record(question: &Question, row: &Row) -> Record {
    single(
        "hwu64",
        format!("hwu64:{}:{}:{}", row.folder, row.intent, row.index),
        row.text.clone(),
        "intent",
        question.clone(),
        Label::Key(row.intent.clone()),
    )
}
