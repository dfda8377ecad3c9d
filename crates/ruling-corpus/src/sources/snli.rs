//! SNLI dev and test pairs in the e-SNLI authors' tokenized export (`snli_esnli/s1.*`, `s2.*`,
//! `labels.*`): premise, hypothesis and gold label, one per line, the three files of a part
//! aligned line by line. Both parts are development data (the datasets README); the question
//! is the 3-way one ChaosNLI asks, so the two measure the same thing, with hard labels only.
//!
//! The export is tokenized, punctuation split off ("holding to go packages ."), and every line
//! ends with a space; the text is kept as written, less that space.

use std::path::Path;

use super::{nli, read_text, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

/// The parts, in the order they are read; both are development data.
const PARTS: [&str; 2] = ["dev", "test"];

pub(super) struct Row {
    part: &'static str,
    /// Position among the part's lines, from 0.
    index: usize,
    premise: String,
    hypothesis: String,
    relation: &'static str,
}

/// Every line of a file, blank ones included (they would misalign the three files).
fn all_lines(path: &Path) -> Result<Vec<String>, CorpusError> {
    Ok(read_text(path)?.lines().map(str::to_owned).collect())
}

pub(super) fn rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    let base = root.join("snli_esnli");
    let mut rows = Vec::new();
    for part in PARTS {
        let premises_path = base.join(format!("s1.{part}"));
        let hypotheses_path = base.join(format!("s2.{part}"));
        let labels_path = base.join(format!("labels.{part}"));
        let premises = all_lines(&premises_path)?;
        let hypotheses = all_lines(&hypotheses_path)?;
        let labels = all_lines(&labels_path)?;
        for (path, lines) in [(&hypotheses_path, &hypotheses), (&labels_path, &labels)] {
            if lines.len() != premises.len() {
                return Err(CorpusError::malformed(
                    path,
                    0,
                    format!(
                        "has {} lines but s1.{part} has {}: the three files must align line by line",
                        lines.len(),
                        premises.len()
                    ),
                ));
            }
        }
        for (index, ((premise, hypothesis), label)) in
            premises.iter().zip(&hypotheses).zip(&labels).enumerate()
        {
            let line = index as u64 + 1;
            let Some((relation, _)) = nli::RELATIONS.iter().find(|(key, _)| *key == label.trim())
            else {
                return Err(CorpusError::malformed(
                    &labels_path,
                    line,
                    format!("label must be entailment, neutral or contradiction, got {label:?}"),
                ));
            };
            for (path, text) in [(&premises_path, premise), (&hypotheses_path, hypothesis)] {
                if text.trim().is_empty() {
                    return Err(CorpusError::malformed(path, line, "the sentence is empty"));
                }
            }
            rows.push(Row {
                part,
                index,
                premise: premise.trim().to_owned(),
                hypothesis: hypothesis.trim().to_owned(),
                relation,
            });
        }
    }
    Ok(rows)
}

pub(super) fn record(row: &Row) -> Record {
    single(
        "snli",
        format!("snli:{}:{}", row.part, row.index),
        nli::state(&row.premise, &row.hypothesis),
        nli::QUESTION_ID,
        nli::three_way(),
        Label::Key(row.relation.to_owned()),
    )
}
