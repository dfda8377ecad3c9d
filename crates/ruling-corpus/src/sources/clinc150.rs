//! CLINC150 (`clinc150/data_full.json`, the "full" configuration of oos-eval): requests to a
//! virtual assistant, each labelled with one of 150 intents or `oos` (out of scope).
//!
//! Development data is `train`, `val`, `oos_train` and `oos_val`; held out is `test` and
//! `oos_test`. The question offers either every intent, in the order of `domains.json` (domain
//! by domain), or a subset of `n` intents drawn per row, always including the gold intent when
//! it is in scope, in a random order; `oos` is always the last option.

use std::path::Path;

use indexmap::IndexMap;
use rand::seq::{IndexedRandom, SliceRandom};
use ruling_schema::{Question, Text};

use super::{json_file, single};
use crate::dataset::{Split, row_rng};
use crate::error::CorpusError;
use crate::record::{Label, Record};

/// The out-of-scope label and option key.
pub(crate) const OUT_OF_SCOPE: &str = "oos";
pub(crate) const OUT_OF_SCOPE_DESCRIPTION: &str = "out of scope: none of the other intents";
const INSTRUCTIONS: &str = "Which intent does this request to a virtual assistant express? \
                            Answer oos if it expresses none of the listed intents.";

/// The parts of `data_full.json` in each split, in the order they are read.
fn parts(split: Split) -> &'static [&'static str] {
    match split {
        Split::Dev => &["train", "val", "oos_train", "oos_val"],
        Split::HeldOut => &["test", "oos_test"],
    }
}

pub(crate) struct Row {
    pub(crate) part: &'static str,
    /// Position in its part's list, from 0.
    pub(crate) index: usize,
    pub(crate) text: String,
    /// Index into the intent list, or `None` for out of scope.
    pub(crate) intent: Option<usize>,
}

/// Each intent's domain (`pin_change` is in `banking`), from `domains.json`.
pub(crate) fn domains(root: &Path) -> Result<IndexMap<String, String>, CorpusError> {
    let domains: IndexMap<String, Vec<String>> = json_file(&root.join("clinc150/domains.json"))?;
    Ok(domains
        .into_iter()
        .flat_map(|(domain, intents)| intents.into_iter().map(move |i| (i, domain.clone())))
        .collect())
}

/// The 150 intents in `domains.json` order, and the rows of `split`.
pub(crate) fn rows(root: &Path, split: Split) -> Result<(Vec<String>, Vec<Row>), CorpusError> {
    let domains_path = root.join("clinc150/domains.json");
    let domains: IndexMap<String, Vec<String>> = json_file(&domains_path)?;
    let intents: Vec<String> = domains.into_values().flatten().collect();
    let data_path = root.join("clinc150/data_full.json");
    let mut data: IndexMap<String, Vec<(String, String)>> = json_file(&data_path)?;
    let mut rows = Vec::new();
    for &part in parts(split) {
        let items = data.swap_remove(part).ok_or_else(|| {
            CorpusError::malformed(&data_path, 0, format!("no {part:?} list in the file"))
        })?;
        for (index, (text, label)) in items.into_iter().enumerate() {
            let intent = if label == OUT_OF_SCOPE {
                None
            } else {
                let position = intents.iter().position(|i| *i == label).ok_or_else(|| {
                    CorpusError::malformed(
                        &data_path,
                        0,
                        format!(
                            "{part}[{index}] has intent {label:?}, which domains.json does not list"
                        ),
                    )
                })?;
                Some(position)
            };
            rows.push(Row {
                part,
                index,
                text,
                intent,
            });
        }
    }
    Ok((intents, rows))
}

/// Builds the records of one load: the full question once, or a subset per row.
pub(super) struct Builder<'a> {
    family: &'a str,
    intents: Vec<String>,
    subset: Option<usize>,
    seed: u64,
    full: Question,
}

impl<'a> Builder<'a> {
    pub(super) fn new(
        family: &'a str,
        intents: Vec<String>,
        subset: Option<usize>,
        seed: u64,
    ) -> Self {
        let full = question(intents.iter().map(String::as_str));
        Self {
            family,
            intents,
            subset,
            seed,
            full,
        }
    }

    pub(super) fn record(&self, row: &Row) -> Record {
        let id = format!("{}:{}:{}", self.family, row.part, row.index);
        let label = row
            .intent
            .map_or(OUT_OF_SCOPE, |i| self.intents[i].as_str())
            .to_owned();
        let question = match self.subset {
            None => self.full.clone(),
            Some(n) => {
                let mut rng = row_rng(self.seed, &id);
                let others: Vec<usize> = (0..self.intents.len())
                    .filter(|i| Some(*i) != row.intent)
                    .collect();
                let drawn = n.saturating_sub(usize::from(row.intent.is_some()));
                let mut offered: Vec<usize> =
                    others.choose_multiple(&mut rng, drawn).copied().collect();
                offered.extend(row.intent);
                offered.shuffle(&mut rng);
                question(offered.into_iter().map(|i| self.intents[i].as_str()))
            }
        };
        single(
            self.family,
            id,
            row.text.clone(),
            "intent",
            question,
            Label::Key(label),
        )
    }
}

/// A choice over `intents` (descriptions left out: the names say it) and then `oos`.
fn question<'i>(intents: impl Iterator<Item = &'i str>) -> Question {
    let mut criteria: IndexMap<String, Text> =
        intents.map(|i| (i.to_owned(), Text::null())).collect();
    criteria.insert(
        OUT_OF_SCOPE.to_owned(),
        Text::from(OUT_OF_SCOPE_DESCRIPTION),
    );
    Question::Choice {
        instructions: Text::from(INSTRUCTIONS),
        criteria,
    }
}
