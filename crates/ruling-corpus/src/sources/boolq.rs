//! BoolQ (`boolq/val.jsonl`, the SuperGLUE copy of the dev set): a yes/no question about a
//! Wikipedia passage. Rows with an even `idx` are development data, odd ones are held out.

use std::path::Path;

use serde::Deserialize;

use super::{jsonl_rows, noul, single};
use crate::dataset::Split;
use crate::error::CorpusError;
use crate::record::{Label, Record};

#[derive(Deserialize)]
struct Line {
    question: String,
    passage: String,
    idx: u64,
    label: String,
}

pub(super) struct Row {
    idx: u64,
    question: String,
    passage: String,
    answer: bool,
}

pub(super) fn rows(root: &Path, split: Split) -> Result<Vec<Row>, CorpusError> {
    let path = root.join("boolq/val.jsonl");
    let mut rows = Vec::new();
    for (line, row) in jsonl_rows::<Line>(&path)? {
        let in_split = match split {
            Split::Dev => row.idx % 2 == 0,
            Split::HeldOut => row.idx % 2 == 1,
        };
        if !in_split {
            continue;
        }
        let answer = match row.label.as_str() {
            "true" => true,
            "false" => false,
            other => {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    format!("label must be \"true\" or \"false\", got {other:?}"),
                ));
            }
        };
        rows.push(Row {
            idx: row.idx,
            question: row.question,
            passage: row.passage,
            answer,
        });
    }
    Ok(rows)
}

pub(super) fn record(row: &Row) -> Record {
    single(
        "boolq",
        format!("boolq:{}", row.idx),
        row.passage.clone(),
        "answer",
        noul(as_question(&row.question)),
        Label::Yes(row.answer),
    )
}

/// BoolQ questions are lowercase search queries without a question mark ("is france the
/// same timezone as the uk"); asked as a sentence they read "Is france the same timezone as
/// the uk?".
fn as_question(query: &str) -> String {
    let query = query.trim();
    let mut chars = query.chars();
    let mut text: String = chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default();
    if !text.ends_with('?') {
        text.push('?');
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn queries_become_questions() {
        assert_eq!(super::as_question("is it so"), "Is it so?");
        assert_eq!(super::as_question(" does it? "), "Does it?");
    }
}
