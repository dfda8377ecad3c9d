//! Logs of messages to a virtual assistant, for reading long states: many CLINC150 requests
//! one per line, and questions whose answer lives in one of them.
//!
//! The held-out needle sets (`needle-2048`, `needle-8192`) place one held-out CLINC150 test
//! request (the needle) at a seeded place among development requests (`train` and `val`) that
//! fill the log to about that many tokens, and ask whether any message asks about the needle's
//! own intent (yes) and about an intent no message has (no). `needle-alone` asks the same two
//! questions about a log of the needle alone: the accuracy a long log should keep. Filler
//! messages never have either intent, so each answer is decided by the needle alone.
//!
//! The same logs built from development requests only are training data (`training::logs`).

use std::path::Path;

use indexmap::IndexMap;
use rand::Rng;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha8Rng;
use ruling_schema::{Question, State, Text};

use super::clinc150;
use crate::dataset::{Split, row_rng};
use crate::error::CorpusError;
use crate::record::{Label, Record};

/// Words per token of these messages, roughly (WordPiece on short English requests): filling a
/// log to `tokens` takes `tokens / TOKENS_PER_WORD` words.
pub(crate) const TOKENS_PER_WORD: f64 = 1.25;

/// The question asked of a log about one intent.
pub(crate) fn any_message_asks(intent: &str) -> Question {
    Question::Noul {
        instructions: Text::from(format!(
            "Does any message in this log ask about {}?",
            intent.replace('_', " ")
        )),
        criteria: None,
    }
}

/// A log of messages, one per line, numbered.
pub(crate) fn log(messages: &[&str]) -> String {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| format!("message {}: {}", i + 1, m.trim()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Filler messages (texts and intents) whose intent is neither of `excluded`, drawn until they
/// hold about `words` words.
pub(crate) fn filler<'a>(
    pool: &'a [(String, Option<usize>)],
    excluded: [usize; 2],
    words: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<&'a (String, Option<usize>)> {
    let mut out = Vec::new();
    let mut count = 0;
    while count < words {
        let Some(row) = pool.choose(rng) else { break };
        if row.1.is_some_and(|i| excluded.contains(&i)) {
            continue;
        }
        count += row.0.split_whitespace().count() + 2;
        out.push(row);
    }
    out
}

/// What a needle log is built from: the intents, the held-out test requests in scope, and
/// the development requests that fill the logs.
pub(super) struct Needles {
    intents: Vec<String>,
    needles: Vec<clinc150::Row>,
    pool: Vec<(String, Option<usize>)>,
}

pub(super) fn needles(root: &Path) -> Result<Needles, CorpusError> {
    let (intents, test) = clinc150::rows(root, Split::HeldOut)?;
    let (_, dev) = clinc150::rows(root, Split::Dev)?;
    Ok(Needles {
        intents,
        needles: test.into_iter().filter(|r| r.intent.is_some()).collect(),
        pool: dev.into_iter().map(|r| (r.text, r.intent)).collect(),
    })
}

impl Needles {
    pub(super) fn rows(&self) -> &[clinc150::Row] {
        &self.needles
    }

    /// The record of one needle in a log of about `tokens` tokens (0: the needle alone).
    pub(super) fn record(&self, row: &clinc150::Row, tokens: usize, seed: u64) -> Record {
        let own = row.intent.expect("needles are in scope");
        let key = format!("{}:{}", row.part, row.index);
        // The same absent intent whatever the size, so the sets pair question by question.
        let mut rng = row_rng(seed, &format!("needle:{key}"));
        let absent = loop {
            let i = rng.random_range(0..self.intents.len());
            if i != own {
                break i;
            }
        };
        let state = if tokens == 0 {
            log(&[&row.text])
        } else {
            let words = (tokens as f64 / TOKENS_PER_WORD) as usize;
            let mut fill = row_rng(seed ^ tokens as u64, &format!("needle-fill:{key}"));
            let mut messages: Vec<&str> = filler(&self.pool, [own, absent], words, &mut fill)
                .into_iter()
                .map(|(text, _)| text.as_str())
                .collect();
            let at = fill.random_range(0..=messages.len());
            messages.insert(at, &row.text);
            log(&messages)
        };
        let family = name(tokens);
        Record {
            id: Some(format!("{family}:{key}")),
            family,
            state: State::from(state),
            questions: IndexMap::from([
                ("own".to_owned(), any_message_asks(&self.intents[own])),
                ("absent".to_owned(), any_message_asks(&self.intents[absent])),
            ]),
            labels: IndexMap::from([
                ("own".to_owned(), Label::Yes(true)),
                ("absent".to_owned(), Label::Yes(false)),
            ]),
            references: IndexMap::new(),
            weight: 1.0,
        }
    }
}

/// The dataset name of a size.
pub(crate) fn name(tokens: usize) -> String {
    if tokens == 0 {
        "needle-alone".to_owned()
    } else {
        format!("needle-{tokens}")
    }
}
