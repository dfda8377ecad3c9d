//! BANKING77 test set (`banking77/test.csv`, `categories.json`): a bank customer's message and
//! its intent, one of 77. Held out only.

use std::path::Path;

use ruling_schema::Question;

use super::{choice, csv_rows, json_file, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which intent does this message from a bank's customer express?";

pub(super) struct Row {
    /// Position among the data rows, from 0.
    row: usize,
    text: String,
    intent: String,
}

/// The 77 intents in `categories.json` order, and every row of `test.csv`.
pub(super) fn rows(root: &Path) -> Result<(Vec<String>, Vec<Row>), CorpusError> {
    let intents: Vec<String> = json_file(&root.join("banking77/categories.json"))?;
    let path = root.join("banking77/test.csv");
    let rows = csv_rows(&path, b',', true, 2)?
        .into_iter()
        .enumerate()
        .map(|(row, (line, record))| {
            let intent = &record[1];
            if !intents.iter().any(|i| i == intent) {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    format!("category {intent:?} is not in categories.json"),
                ));
            }
            Ok(Row {
                row,
                text: record[0].trim().to_owned(),
                intent: intent.to_owned(),
            })
        })
        .collect::<Result<_, CorpusError>>()?;
    Ok((intents, rows))
}

pub(super) fn question(intents: &[String]) -> Question {
    choice(INSTRUCTIONS, intents.iter().map(|i| (i.as_str(), None)))
}

pub(super) fn record(question: &Question, row: &Row) -> Record {
    single(
        "banking77",
        format!("banking77:{}", row.row),
        row.text.clone(),
        "intent",
        question.clone(),
        Label::Key(row.intent.clone()),
    )
}
