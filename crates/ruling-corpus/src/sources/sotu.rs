//! State of the Union addresses 1790-2016 (`sotu_mobydick/sotu.jsonl`) and Moby-Dick in 139
//! sections (`sotu_mobydick/moby_dick_sections.jsonl`): long documents, thousands of tokens
//! each. Addresses of even years are development data, those of odd years are held out; all
//! of Moby-Dick is development data.
//!
//! The labelled question is which party the president who gave an address belonged to.

use std::path::Path;

use serde::Deserialize;

use super::{choice, jsonl_rows, single};
use crate::dataset::Split;
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which party did the president who gave this address belong to?";

/// The parties as the file names them, and how the question shows them.
pub(crate) const PARTIES: [(&str, &str); 8] = [
    ("Democratic", "the Democratic Party"),
    ("Republican", "the Republican Party"),
    (
        "Democratic-Republican",
        "the Democratic-Republican Party of Jefferson and Madison",
    ),
    ("Federalist", "the Federalist Party"),
    ("Whig", "the Whig Party"),
    (
        "Whig & Democratic",
        "elected a Whig, later without a party (John Tyler)",
    ),
    (
        "National Union",
        "the National Union ticket of 1864 (Lincoln and Andrew Johnson)",
    ),
    ("none", "no party (George Washington)"),
];

#[derive(Deserialize)]
struct AddressLine {
    year: u32,
    party: String,
    text: String,
}

/// One address.
pub(crate) struct Address {
    /// Position in the file, from 0 (some years have two addresses).
    pub(crate) row: usize,
    pub(crate) year: u32,
    pub(crate) party: &'static str,
    pub(crate) text: String,
}

/// The addresses of `split` (even years dev, odd years held out), in file order.
pub(crate) fn addresses(root: &Path, split: Split) -> Result<Vec<Address>, CorpusError> {
    let path = root.join("sotu_mobydick/sotu.jsonl");
    let mut rows = Vec::new();
    for (index, (line, row)) in jsonl_rows::<AddressLine>(&path)?.into_iter().enumerate() {
        let Some((party, _)) = PARTIES.iter().find(|(p, _)| *p == row.party) else {
            return Err(CorpusError::malformed(
                &path,
                line,
                format!(
                    "party must be one of {:?}, got {:?}",
                    PARTIES.map(|(p, _)| p),
                    row.party
                ),
            ));
        };
        if row.text.trim().is_empty() {
            return Err(CorpusError::malformed(&path, line, "text is empty"));
        }
        let in_split = match split {
            Split::Dev => row.year % 2 == 0,
            Split::HeldOut => row.year % 2 == 1,
        };
        if in_split {
            rows.push(Address {
                row: index,
                year: row.year,
                party,
                text: row.text,
            });
        }
    }
    Ok(rows)
}

pub(super) fn record(address: &Address) -> Record {
    single(
        "sotu",
        format!("sotu:{}:{}", address.year, address.row),
        address.text.clone(),
        "party",
        choice(
            INSTRUCTIONS,
            PARTIES
                .iter()
                .map(|(key, description)| (*key, Some(*description))),
        ),
        Label::Key(address.party.to_owned()),
    )
}

#[derive(Deserialize)]
struct SectionLine {
    section: String,
    text: String,
}

/// One section of Moby-Dick (a chapter, the etymology, the extracts, the epilogue).
pub(crate) struct Section {
    pub(crate) name: String,
    pub(crate) text: String,
}

/// Every section of Moby-Dick, in file order; all of them are development data.
pub(crate) fn moby_dick(root: &Path) -> Result<Vec<Section>, CorpusError> {
    let path = root.join("sotu_mobydick/moby_dick_sections.jsonl");
    jsonl_rows::<SectionLine>(&path)?
        .into_iter()
        .map(|(line, row)| {
            if row.text.trim().is_empty() {
                return Err(CorpusError::malformed(&path, line, "text is empty"));
            }
            Ok(Section {
                name: row.section,
                text: row.text,
            })
        })
        .collect()
}

/// `text` cut into passages of whole paragraphs (or, where a paragraph is longer, whole
/// sentences) of about `words` words each, in order.
pub(crate) fn passages(text: &str, words: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut count = 0;
    let pieces = text
        .split("\n\n")
        .flat_map(|paragraph| {
            if paragraph.split_whitespace().count() <= words {
                vec![paragraph]
            } else {
                paragraph.split_inclusive(". ").collect()
            }
        })
        .map(str::trim)
        .filter(|p| !p.is_empty());
    for piece in pieces {
        let n = piece.split_whitespace().count();
        if count > 0 && count + n > words {
            out.push(current.join(" "));
            current.clear();
            count = 0;
        }
        current.push(piece);
        count += n;
    }
    if !current.is_empty() {
        out.push(current.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passages_keep_every_word_in_order_and_stay_near_their_length() {
        let text =
            "One two three. Four five.\n\nSix seven eight nine ten eleven. Twelve.\n\nThirteen";
        let cut = passages(text, 6);
        assert_eq!(
            cut.join(" ").split_whitespace().collect::<Vec<_>>(),
            text.split_whitespace().collect::<Vec<_>>()
        );
        assert!(cut.len() >= 3, "{cut:?}");
        assert!(
            cut.iter().all(|p| p.split_whitespace().count() <= 7),
            "{cut:?}"
        );
    }
}
