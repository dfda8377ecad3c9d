//! ChaosNLI (`chaosnli/chaosNLI_snli.jsonl`, `chaosNLI_mnli_m.jsonl`): SNLI and MNLI dev items,
//! each labelled by 100 people. The vote shares are the soft target, the majority label is the
//! label. Development data only. (The αNLI file is a different task and is not read.)

use std::path::Path;

use indexmap::IndexMap;
use serde::Deserialize;

use super::{jsonl_rows, nli, single};
use crate::dataset::Dataset;
use crate::error::CorpusError;
use crate::record::{Label, Record, Reference};

#[derive(Deserialize)]
struct Line {
    uid: String,
    majority_label: String,
    /// Votes in the order entailment, neutral, contradiction.
    label_count: [u32; 3],
    example: Example,
}

#[derive(Deserialize)]
struct Example {
    premise: String,
    hypothesis: String,
}

pub(super) struct Row {
    uid: String,
    premise: String,
    hypothesis: String,
    votes: [u32; 3],
    majority: usize,
}

/// ChaosNLI's label codes, in vote order.
const CODES: [&str; 3] = ["e", "n", "c"];

pub(super) fn rows(root: &Path, dataset: Dataset) -> Result<Vec<Row>, CorpusError> {
    let file = match dataset {
        Dataset::ChaosnliMnli => "chaosnli/chaosNLI_mnli_m.jsonl",
        _ => "chaosnli/chaosNLI_snli.jsonl",
    };
    let path = root.join(file);
    jsonl_rows::<Line>(&path)?
        .into_iter()
        .map(|(line, row)| {
            let Some(majority) = CODES.iter().position(|c| *c == row.majority_label) else {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    format!(
                        "majority_label must be e, n or c, got {:?}",
                        row.majority_label
                    ),
                ));
            };
            let most = row.label_count.iter().copied().max().unwrap_or(0);
            if most == 0 || row.label_count[majority] != most {
                // Ties are broken by ChaosNLI itself; a majority with fewer votes than another
                // label would mean the columns are not what the README says.
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    format!(
                        "majority_label {:?} does not have the most votes in label_count {:?}",
                        row.majority_label, row.label_count
                    ),
                ));
            }
            Ok(Row {
                uid: row.uid,
                premise: row.example.premise,
                hypothesis: row.example.hypothesis,
                votes: row.label_count,
                majority,
            })
        })
        .collect()
}

pub(super) fn record(family: &str, row: &Row) -> Record {
    let total: u32 = row.votes.iter().sum();
    let target: IndexMap<String, f64> = nli::RELATIONS
        .iter()
        .zip(row.votes)
        .map(|((key, _), votes)| ((*key).to_owned(), f64::from(votes) / f64::from(total)))
        .collect();
    let mut record = single(
        family,
        format!("{family}:{}", row.uid),
        nli::state(&row.premise, &row.hypothesis),
        nli::QUESTION_ID,
        nli::three_way(),
        Label::Key(nli::RELATIONS[row.majority].0.to_owned()),
    );
    record
        .references
        .insert(nli::QUESTION_ID.to_owned(), Reference::target(target));
    record
}
