//! The Medical Abstracts corpus of Schopf et al. (`medical_abstracts/medical_tc_test.csv` with
//! `medical_tc_labels.csv`): the title and abstract of a medical paper, and which of 5 kinds of
//! patient condition it is about. Only the test file is in the datasets folder, and all of it
//! is development data.

use std::path::Path;

use ruling_schema::Question;

use super::{choice, csv_rows, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which kind of patient condition is this medical abstract about?";

/// The topics by their `condition_name` in `medical_tc_labels.csv`, with descriptions: the
/// names are MeSH disease categories, terse enough that a model needs the gloss.
const TOPICS: [(&str, &str); 5] = [
    ("neoplasms", "tumours and cancers"),
    (
        "digestive system diseases",
        "diseases of the digestive system: the gut, liver, biliary tract and pancreas",
    ),
    (
        "nervous system diseases",
        "diseases of the brain, spinal cord, nerves and muscles they control",
    ),
    (
        "cardiovascular diseases",
        "diseases of the heart and blood vessels",
    ),
    (
        "general pathological conditions",
        "pathological conditions, signs and symptoms not specific to one organ system",
    ),
];

pub(super) struct Row {
    /// Position among the data rows, from 0.
    row: usize,
    text: String,
    topic: &'static str,
}

/// The question (its options in `medical_tc_labels.csv` order) and every row of the test file.
pub(super) fn rows(root: &Path) -> Result<(Question, Vec<Row>), CorpusError> {
    let labels_path = root.join("medical_abstracts/medical_tc_labels.csv");
    let mut labels: Vec<(String, &'static str, &'static str)> = Vec::new();
    for (line, record) in csv_rows(&labels_path, b',', true, 2)? {
        let name = record[1].trim();
        let Some((topic, description)) = TOPICS.iter().find(|(t, _)| *t == name) else {
            return Err(CorpusError::malformed(
                &labels_path,
                line,
                format!(
                    "unknown condition_name {name:?}; expected one of {:?}",
                    TOPICS.map(|(t, _)| t)
                ),
            ));
        };
        let code = record[0].trim().to_owned();
        if labels.iter().any(|(c, t, _)| *c == code || t == topic) {
            return Err(CorpusError::malformed(
                &labels_path,
                line,
                format!("condition_label {code:?} or {name:?} is listed twice"),
            ));
        }
        labels.push((code, topic, description));
    }
    if labels.len() != TOPICS.len() {
        return Err(CorpusError::malformed(
            &labels_path,
            0,
            format!(
                "expected {} conditions, found {}",
                TOPICS.len(),
                labels.len()
            ),
        ));
    }
    let question = choice(INSTRUCTIONS, labels.iter().map(|(_, t, d)| (*t, Some(*d))));
    let path = root.join("medical_abstracts/medical_tc_test.csv");
    let rows = csv_rows(&path, b',', true, 2)?
        .into_iter()
        .enumerate()
        .map(|(row, (line, record))| {
            let code = record[0].trim();
            let Some((_, topic, _)) = labels.iter().find(|(c, _, _)| c == code) else {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    format!(
                        "condition_label must be one of {:?}, got {code:?}",
                        labels
                            .iter()
                            .map(|(c, _, _)| c.as_str())
                            .collect::<Vec<_>>()
                    ),
                ));
            };
            let text = record[1].trim();
            if text.is_empty() {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    "medical_abstract is empty",
                ));
            }
            Ok(Row {
                row,
                text: text.to_owned(),
                topic,
            })
        })
        .collect::<Result<_, CorpusError>>()?;
    Ok((question, rows))
}

pub(super) fn record(question: &Question, row: &Row) -> Record {
    single(
        "medical-abstracts",
        format!("medical-abstracts:{}", row.row),
        row.text.clone(),
        "topic",
        question.clone(),
        Label::Key(row.topic.to_owned()),
    )
}
