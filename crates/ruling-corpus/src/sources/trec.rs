//! TREC question classification, the TREC-10 test set of Li and Roth (`trec/TREC.test`): one
//! `COARSE:fine question` per line. A choice over the six coarse answer types. Held out only.

use std::path::Path;

use ruling_schema::Question;

use super::{choice, lines, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "What kind of answer does this question ask for?";

/// Coarse type in the file, option key, description.
const TYPES: [(&str, &str, &str); 6] = [
    (
        "ABBR",
        "abbreviation",
        "an abbreviation, or what one stands for",
    ),
    (
        "DESC",
        "description",
        "a definition, description, manner or reason",
    ),
    (
        "ENTY",
        "entity",
        "a thing: an animal, colour, event, food, product, term or other entity",
    ),
    ("HUM", "human", "a person, group or organisation"),
    (
        "LOC",
        "location",
        "a place: a city, country, mountain or other location",
    ),
    (
        "NUM",
        "numeric",
        "a number: a count, date, distance, amount, percentage or other quantity",
    ),
];

pub(super) struct Row {
    row: usize,
    question: String,
    key: &'static str,
}

pub(super) fn rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    let path = root.join("trec/TREC.test");
    lines(&path)?
        .into_iter()
        .enumerate()
        .map(|(row, (line, text))| {
            let parsed = text.split_once(' ').and_then(|(label, question)| {
                let (coarse, _fine) = label.split_once(':')?;
                let (_, key, _) = TYPES.iter().find(|(c, _, _)| *c == coarse)?;
                let question = question.trim();
                (!question.is_empty()).then(|| (*key, question.to_owned()))
            });
            let (key, question) = parsed.ok_or_else(|| {
                CorpusError::malformed(
                    &path,
                    line,
                    "expected COARSE:fine and a question, COARSE one of ABBR, DESC, ENTY, HUM, \
                     LOC, NUM",
                )
            })?;
            Ok(Row { row, question, key })
        })
        .collect()
}

fn question() -> Question {
    choice(INSTRUCTIONS, TYPES.map(|(_, key, d)| (key, Some(d))))
}

pub(super) fn record(row: &Row) -> Record {
    single(
        "trec",
        format!("trec:{}", row.row),
        row.question.clone(),
        "answer_type",
        question(),
        Label::Key(row.key.to_owned()),
    )
}
