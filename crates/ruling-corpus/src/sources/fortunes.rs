//! Quotations, jokes and epigrams from the fortune program (`fortunes/fortunes.jsonl`), in 40
//! categories. All of it is development data; the texts are of mixed provenance, so they are
//! states to train on, never data the product ships.
//!
//! The labelled question is which category a text was filed under, over the categories whose
//! names say what they hold (`zippy`, `knghtbrd`, `cookie` and the like are states only).

use std::path::Path;

use serde::Deserialize;

use super::{choice, jsonl_rows, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which category of quotations does this one belong to?";

/// The categories whose names say what they hold, and a gloss of each.
pub(crate) const CATEGORIES: [(&str, &str); 22] = [
    ("art", "art, artists and creativity"),
    ("computers", "computers and programmers"),
    ("definitions", "joke definitions of words"),
    ("drugs", "drugs and drinking"),
    ("education", "school, teachers and learning"),
    ("food", "food and eating"),
    ("kids", "children"),
    ("law", "laws and lawyers"),
    ("love", "love and romance"),
    ("medicine", "doctors and health"),
    ("men-women", "men and women"),
    ("news", "newspaper headlines and reports"),
    ("pets", "pets and animals"),
    ("people", "sayings of famous people"),
    ("platitudes", "platitudes and cliches"),
    ("politics", "politics and government"),
    ("science", "science and scientists"),
    ("songs-poems", "songs and poems"),
    ("sports", "sports"),
    ("startrek", "Star Trek"),
    ("wisdom", "words of wisdom"),
    ("work", "work and the office"),
];

#[derive(Deserialize)]
struct Line {
    text: String,
    label: String,
}

/// One text and its category.
pub(crate) struct Row {
    /// Position among the file's rows, from 0.
    pub(crate) row: usize,
    pub(crate) text: String,
    pub(crate) category: String,
}

/// Every text, in file order.
pub(crate) fn rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    let path = root.join("fortunes/fortunes.jsonl");
    Ok(jsonl_rows::<Line>(&path)?
        .into_iter()
        .enumerate()
        .map(|(row, (_, l))| Row {
            row,
            text: l.text.trim().to_owned(),
            category: l.label,
        })
        .filter(|r| !r.text.is_empty())
        .collect())
}

/// The rows of a named category.
pub(super) fn labelled_rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    Ok(rows(root)?
        .into_iter()
        .filter(|r| CATEGORIES.iter().any(|(c, _)| *c == r.category))
        .collect())
}

pub(super) fn record(row: &Row) -> Record {
    single(
        "fortunes",
        format!("fortunes:{}", row.row),
        row.text.clone(),
        "category",
        choice(
            INSTRUCTIONS,
            CATEGORIES
                .iter()
                .map(|(key, description)| (*key, Some(*description))),
        ),
        Label::Key(row.category.clone()),
    )
}
