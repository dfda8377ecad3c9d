//! Answer codes: the single-token labels a model answers with, proven at load.
//!
//! The 26 capital letters are required of every backend. A Choice wider than that is shown
//! with two-letter codes after `Z` (`AA`, `AB`, ... as spreadsheet columns run), but only
//! those the tokenizer proves to be one token where the answer is read: how many there are
//! depends on the vocabulary, and a backend that proves too few keeps the two-stage path for
//! wider choices.

use crate::backend::Backend;
use crate::error::ContractError;

/// Capital letters, the labels that are single tokens in every tokenizer measured so far and
/// that carry the answer mass at the assistant's first position.
pub const DEFAULT_CODES: [&str; 26] = [
    "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S",
    "T", "U", "V", "W", "X", "Y", "Z",
];

/// The most options one pass may show: the wire format's limit for a Choice.
pub const MAX_CODES: usize = 255;

/// The two-letter candidates for codes after `Z`, in spreadsheet-column order (`AA`, `AB`,
/// ..., `ZZ`); [`AnswerCodes::widen`] keeps those that are one token.
pub fn two_letter_codes() -> Vec<String> {
    let letters = || DEFAULT_CODES.iter();
    letters()
        .flat_map(|first| letters().map(move |second| format!("{first}{second}")))
        .collect()
}

/// Labels and their token ids, each proven to be one token right where the answer is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerCodes {
    labels: Vec<String>,
    ids: Vec<u32>,
}

impl AnswerCodes {
    /// Prove that each label, appended to `prompt` (a full render ending where the model
    /// answers), adds exactly one token to its encoding and that no two labels share a token.
    pub fn prove<B: Backend + ?Sized>(
        backend: &B,
        prompt: &str,
        labels: &[&str],
    ) -> Result<Self, ContractError> {
        if labels.len() < 2 {
            return Err(ContractError::TooFewCodes {
                given: labels.len(),
            });
        }
        let base = backend.encode(prompt)?;
        let mut ids = Vec::with_capacity(labels.len());
        for label in labels {
            let with_code = backend.encode(&format!("{prompt}{label}"))?;
            let added = with_code
                .strip_prefix(base.as_slice())
                .unwrap_or(&with_code);
            match (with_code.starts_with(&base), added) {
                (true, [id]) => ids.push(*id),
                _ => {
                    return Err(ContractError::CodeNotSingleToken {
                        code: (*label).to_owned(),
                        tokens: added.to_vec(),
                    });
                }
            }
        }
        for (i, id) in ids.iter().enumerate() {
            if let Some(j) = ids[..i].iter().position(|other| other == id) {
                return Err(ContractError::CodesCollide {
                    first: labels[j].to_owned(),
                    second: labels[i].to_owned(),
                    id: *id,
                });
            }
        }
        Ok(Self {
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            ids,
        })
    }

    /// Append each of `candidates` that is one token right after `prompt` (as in
    /// [`prove`](Self::prove)) and not the token of a code already held, until `max` codes
    /// are held. Candidates that fail are skipped, not refused: wide codes are optional.
    /// Returns how many were added.
    pub fn widen<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        prompt: &str,
        candidates: &[String],
        max: usize,
    ) -> Result<usize, ContractError> {
        let base = backend.encode(prompt)?;
        let before = self.ids.len();
        for label in candidates {
            if self.ids.len() >= max {
                break;
            }
            if self.labels.contains(label) {
                continue;
            }
            let with_code = backend.encode(&format!("{prompt}{label}"))?;
            if let Some(&[id]) = with_code.strip_prefix(base.as_slice())
                && !self.ids.contains(&id)
            {
                self.labels.push(label.clone());
                self.ids.push(id);
            }
        }
        Ok(self.ids.len() - before)
    }

    /// The labels, in order: the first option is shown with the first label.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The token id of each label, in the same order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// How many options one pass can show: more go through the two-stage choice.
    pub fn max_options(&self) -> usize {
        self.ids.len()
    }
}
