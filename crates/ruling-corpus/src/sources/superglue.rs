//! SuperGLUE CommitmentBank and RTE validation sets (`superglue_cb_rte/CB_val.jsonl`,
//! `RTE_val.jsonl`): premise/hypothesis pairs with a string label. Development data only.

use std::path::Path;

use serde::Deserialize;

use super::{jsonl_rows, nli, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

#[derive(Deserialize)]
struct Line {
    premise: String,
    hypothesis: String,
    label: String,
    idx: u64,
}

pub(super) struct Row {
    idx: u64,
    premise: String,
    hypothesis: String,
    relation: &'static str,
}

fn rows(path: &Path, relations: &[&'static str]) -> Result<Vec<Row>, CorpusError> {
    jsonl_rows::<Line>(path)?
        .into_iter()
        .map(|(line, row)| {
            let Some(relation) = relations.iter().find(|r| **r == row.label) else {
                return Err(CorpusError::malformed(
                    path,
                    line,
                    format!("label must be one of {relations:?}, got {:?}", row.label),
                ));
            };
            Ok(Row {
                idx: row.idx,
                premise: row.premise,
                hypothesis: row.hypothesis,
                relation,
            })
        })
        .collect()
}

pub(super) fn cb_rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    rows(
        &root.join("superglue_cb_rte/CB_val.jsonl"),
        &nli::RELATIONS.map(|(key, _)| key),
    )
}

pub(super) fn rte_rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    rows(
        &root.join("superglue_cb_rte/RTE_val.jsonl"),
        &nli::TWO_WAY_RELATIONS.map(|(key, _)| key),
    )
}

pub(super) fn cb_record(row: &Row) -> Record {
    single(
        "cb",
        format!("cb:{}", row.idx),
        nli::state(&row.premise, &row.hypothesis),
        nli::QUESTION_ID,
        nli::three_way(),
        Label::Key(row.relation.to_owned()),
    )
}

pub(super) fn rte_record(row: &Row) -> Record {
    single(
        "rte",
        format!("rte:{}", row.idx),
        nli::state(&row.premise, &row.hypothesis),
        nli::QUESTION_ID,
        nli::two_way(),
        Label::Key(row.relation.to_owned()),
    )
}
