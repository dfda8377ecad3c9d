//! GoEmotions test set (`goemotions/test.tsv`, `emotions.txt`): Reddit comments, each with one
//! or more of 27 emotions or neutral. One noul per emotion, multi-label. Development data only.

use std::path::Path;

use indexmap::IndexMap;
use ruling_schema::{Question, State};

use super::{csv_rows, lines, noul};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const NEUTRAL: &str = "neutral";

pub(super) struct Row {
    comment_id: String,
    text: String,
    /// Indices into the emotion list.
    emotions: Vec<usize>,
}

/// The 28 emotion names of `emotions.txt` and every row of `test.tsv`.
pub(super) fn rows(root: &Path) -> Result<(Vec<String>, Vec<Row>), CorpusError> {
    let emotions: Vec<String> = lines(&root.join("goemotions/emotions.txt"))?
        .into_iter()
        .map(|(_, name)| name.trim().to_owned())
        .collect();
    let path = root.join("goemotions/test.tsv");
    let rows = csv_rows(&path, b'\t', false, 3)?
        .into_iter()
        .map(|(line, record)| {
            let ids: Option<Vec<usize>> = record[1]
                .split(',')
                .map(|id| {
                    id.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|i| *i < emotions.len())
                })
                .collect();
            let ids = ids.ok_or_else(|| {
                CorpusError::malformed(
                    &path,
                    line,
                    format!(
                        "emotions must be comma-separated ids 0 to {}, got {:?}",
                        emotions.len().saturating_sub(1),
                        &record[1]
                    ),
                )
            })?;
            Ok(Row {
                comment_id: record[2].to_owned(),
                text: record[0].trim().to_owned(),
                emotions: ids,
            })
        })
        .collect::<Result<_, CorpusError>>()?;
    Ok((emotions, rows))
}

/// One noul per emotion, keyed by the emotion's name.
pub(super) fn questions(emotions: &[String]) -> IndexMap<String, Question> {
    emotions
        .iter()
        .map(|emotion| {
            let text = if emotion == NEUTRAL {
                "Is this comment emotionally neutral, expressing no particular emotion?".to_owned()
            } else {
                format!("Does this comment express {}?", emotion.replace('_', " "))
            };
            (emotion.clone(), noul(text))
        })
        .collect()
}

pub(super) fn record(questions: &IndexMap<String, Question>, row: &Row) -> Record {
    let labels = questions
        .keys()
        .enumerate()
        .map(|(i, emotion)| (emotion.clone(), Label::Yes(row.emotions.contains(&i))))
        .collect();
    Record {
        id: Some(format!("goemotions:{}", row.comment_id)),
        family: "goemotions".to_owned(),
        state: State::from(row.text.clone()),
        questions: questions.clone(),
        labels,
        references: IndexMap::new(),
        weight: 1.0,
    }
}
