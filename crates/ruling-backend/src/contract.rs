//! The backend contract, checked once at load.
//!
//! A backend that splits the prompt at the wrong place, tokenizes differently across the
//! split, or reads a code that is really two tokens does not fail: it returns confident,
//! wrong probabilities. Each promise the decision logic relies on is checked here on a probe
//! conversation, and a failure names the promise that broke.

use crate::backend::{Backend, Branch};
use crate::codes::AnswerCodes;
use crate::error::ContractError;
use crate::prompt::{conversation, split_prompt, user_head};

const PROBE_SYSTEM: &str = "You answer questions about the state with a single letter.";
const PROBE_STATE: &str = "The probe state: a short note about checking a backend.";
// A branch must carry real text after the state, so the check exercises the cut between
// the shared prefix and the per-question part exactly as requests do.
const PROBE_QUESTION: &str = "Question: Is this a probe?\nA. yes\nB. no\nAnswer:";
// The same question asked question-first: its options end the prefix, the state opens the
// branch.
const PROBE_QUESTION_HEAD: &str = "Question: Is this a probe?\nA. yes\nB. no\n";

/// What the check learned about a backend that passed.
#[derive(Debug, Clone)]
pub struct ContractReport {
    /// The proven answer codes.
    pub codes: AnswerCodes,
    /// Tokens in the probe's shared prefix.
    pub probe_prefix_tokens: usize,
    /// Candidate mass of the codes on the probe branch, a first hint of how well the model
    /// follows the answer format.
    pub probe_candidate_mass: f64,
    /// Whether a question asked question-first (its text and options as the prefix, the state
    /// in the branch) splits as cleanly as the usual layout: when not, the engine never asks
    /// that way, and this says which promise that layout broke.
    pub question_first: Result<(), String>,
}

/// Check every promise of the [`Backend`] contract and prove `labels` as answer codes.
///
/// Runs one short forward pass so that the shape of `score_branches` is checked as well.
pub fn verify_backend<B: Backend + ?Sized>(
    backend: &B,
    labels: &[&str],
) -> Result<ContractReport, ContractError> {
    verify_backend_widened(backend, labels, &[], labels.len())
}

/// [`verify_backend`], then add each of `wide` that proves to be one distinct token where the
/// answer is read, up to `max` codes in all (see [`AnswerCodes::widen`]): the codes a Choice
/// wider than `labels` is shown with in one pass.
pub fn verify_backend_widened<B: Backend + ?Sized>(
    backend: &B,
    labels: &[&str],
    wide: &[String],
    max: usize,
) -> Result<ContractReport, ContractError> {
    let Seam {
        full,
        prefix_ids,
        rest_ids,
    } = check_seam(backend, &user_head(PROBE_STATE), PROBE_QUESTION)?;
    let mut codes = AnswerCodes::prove(backend, &full, labels)?;
    codes.widen(backend, &full, wide, max)?;

    let prefix = backend.encode_prefix(&prefix_ids)?;
    let scored = backend.score_branches(
        &prefix,
        &[Branch {
            tokens: &rest_ids,
            codes: codes.ids(),
        }],
    )?;
    let probe = match scored.as_slice() {
        [one] if one.logits.len() == codes.ids().len() => one,
        _ => {
            return Err(ContractError::BadScores {
                reason: format!(
                    "one branch of {} codes came back as {} entries of widths {:?}",
                    codes.ids().len(),
                    scored.len(),
                    scored.iter().map(|s| s.logits.len()).collect::<Vec<_>>()
                ),
            });
        }
    };
    // A code the backend could not read (listed in `unread`) is given as -inf; every other
    // logit, and the normaliser, must be a number.
    let read = probe
        .logits
        .iter()
        .enumerate()
        .filter(|(i, _)| !probe.unread.contains(i))
        .map(|(_, v)| v);
    if probe.unread.len() >= probe.logits.len()
        || !read.chain([&probe.log_normalizer]).all(|v| v.is_finite())
    {
        return Err(ContractError::BadScores {
            reason: format!(
                "non-finite logits {:?} or normaliser {}",
                probe.logits, probe.log_normalizer
            ),
        });
    }
    let question_first = check_seam(
        backend,
        PROBE_QUESTION_HEAD,
        &format!("State: {PROBE_STATE}\nAnswer:"),
    )
    .map(|_| ())
    .map_err(|e| e.to_string());
    Ok(ContractReport {
        probe_prefix_tokens: prefix_ids.len(),
        probe_candidate_mass: probe.candidate_mass(),
        codes,
        question_first,
    })
}

/// A probe conversation rendered whole and cut at the end of its user turn's head.
struct Seam {
    /// The whole render, system turn to assistant start.
    full: String,
    prefix_ids: Vec<u32>,
    /// The branch (`rest` and the template's tail), encoded on its own.
    rest_ids: Vec<u32>,
}

/// Render `head` + `rest` as the user turn, and check that cutting after `head` gives a
/// prefix of the whole render, that the branch is `rest` followed by the tail, and that
/// encoding the two apart gives exactly the tokens of encoding them together.
fn check_seam<B: Backend + ?Sized>(
    backend: &B,
    head: &str,
    rest: &str,
) -> Result<Seam, ContractError> {
    let split = split_prompt(backend, PROBE_SYSTEM, head)?;
    let full = backend.render_chat(&conversation(
        backend,
        PROBE_SYSTEM,
        &format!("{head}{rest}"),
    ))?;
    if !full.starts_with(&split.prefix) {
        let at = common_prefix_len(&split.prefix, &full);
        return Err(ContractError::PrefixNotPrefix {
            at,
            prefix_next: excerpt(&split.prefix[at..]),
            full_next: excerpt(&full[at..]),
        });
    }
    let rest = format!("{rest}{}", split.tail);
    if full[split.prefix.len()..] != rest {
        return Err(ContractError::TailMismatch {
            full_rest: excerpt(&full[split.prefix.len()..]),
            expected_rest: excerpt(&rest),
        });
    }
    let prefix_ids = backend.encode(&split.prefix)?;
    let rest_ids = backend.encode_continuation(&rest)?;
    let together = backend.encode(&full)?;
    let apart: Vec<u32> = prefix_ids.iter().chain(&rest_ids).copied().collect();
    if apart != together {
        let at = apart
            .iter()
            .zip(&together)
            .take_while(|(a, b)| a == b)
            .count();
        return Err(ContractError::TokenBoundary {
            at,
            apart: window(&apart, at),
            together: window(&together, at),
        });
    }
    Ok(Seam {
        full,
        prefix_ids,
        rest_ids,
    })
}

fn common_prefix_len(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}

fn excerpt(text: &str) -> String {
    text.chars().take(40).collect()
}

fn window(ids: &[u32], at: usize) -> Vec<u32> {
    ids[at.saturating_sub(2)..(at + 3).min(ids.len())].to_vec()
}
