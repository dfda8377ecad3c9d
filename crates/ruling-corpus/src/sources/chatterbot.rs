//! The ChatterBot corpus (`chatterbot/chatterbot_first_turns.jsonl`): the first turn of short
//! conversations with a chatbot, in 21 topics and 28 languages (English 2,025). All of it is
//! development data.
//!
//! The labelled question is which topic an opener is about, over the 21 topics of the English
//! files (other languages' files named as one of them count as it; the rest are states only).

use std::path::Path;

use serde::Deserialize;

use super::{choice, jsonl_rows, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "What is this message to a chatbot about?";

/// The corpus's topics (its file names) and what each holds.
pub(crate) const TOPICS: [(&str, &str); 21] = [
    ("ai", "artificial intelligence and robots"),
    ("botprofile", "the chatbot itself: its name, age, likes"),
    ("coding", "programming languages and writing code"),
    ("computers", "computers and their parts"),
    (
        "conversations",
        "small talk: how are you, what are you doing",
    ),
    ("emotion", "feelings and emotions"),
    ("food", "food and drink"),
    ("gossip", "gossip about people"),
    ("greetings", "hello and goodbye"),
    ("health", "health and illness"),
    ("history", "historical events and figures"),
    ("humor", "jokes and humour"),
    ("literature", "books, authors and poetry"),
    ("money", "money, prices and the stock market"),
    ("movies", "films and actors"),
    ("politics", "government, elections and politicians"),
    ("psychology", "the mind and behaviour"),
    ("science", "science: physics, chemistry, biology"),
    ("sports", "sports, teams and athletes"),
    (
        "tech_support",
        "help with a device or software that does not work",
    ),
    ("trivia", "trivia questions about facts"),
];

#[derive(Deserialize)]
struct Line {
    text: String,
    topic: String,
    lang: String,
}

/// File names of other languages' folders that name one of [`TOPICS`].
const ALIASES: [(&str, &str); 11] = [
    ("computer", "computers"),
    ("psicologia", "psychology"),
    ("IA", "ai"),
    ("emociones", "emotion"),
    ("emotions", "emotion"),
    ("dinero", "money"),
    ("history_brasil", "history"),
    ("coversations", "conversations"),
    ("perfilbot", "botprofile"),
    ("profile", "botprofile"),
    ("sport", "sports"),
];

/// The topic of [`TOPICS`] a file name means, if any (`compliment`, `proverbs` and a few
/// other files of one language each have none).
fn topic(name: &str) -> Option<&'static str> {
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, topic)| topic);
    TOPICS.iter().find(|(t, _)| *t == name).map(|(t, _)| *t)
}

/// One opener.
pub(crate) struct Row {
    /// Position among the file's rows, from 0.
    pub(crate) row: usize,
    pub(crate) text: String,
    /// The topic, when its file name is one of [`TOPICS`] (or a translation of one).
    pub(crate) topic: Option<&'static str>,
    /// The corpus's language folder name (`english`, `persian`, ...).
    pub(crate) language: String,
}

/// Every opener, in file order.
pub(crate) fn rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    let path = root.join("chatterbot/chatterbot_first_turns.jsonl");
    jsonl_rows::<Line>(&path)?
        .into_iter()
        .enumerate()
        .map(|(row, (line, l))| {
            if l.topic.is_empty() || l.lang.is_empty() {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    "topic and lang must be named",
                ));
            }
            Ok(Row {
                row,
                text: l.text.trim().to_owned(),
                topic: topic(&l.topic),
                language: l.lang,
            })
        })
        .filter(|r| r.as_ref().map_or(true, |r| !r.text.is_empty()))
        .collect()
}

/// The openers whose topic is one of [`TOPICS`].
pub(super) fn labelled_rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    Ok(rows(root)?
        .into_iter()
        .filter(|r| r.topic.is_some())
        .collect())
}

pub(super) fn record(row: &Row) -> Record {
    single(
        "chatterbot",
        format!("chatterbot:{}", row.row),
        row.text.clone(),
        "topic",
        choice(
            INSTRUCTIONS,
            TOPICS
                .iter()
                .map(|(key, description)| (*key, Some(*description))),
        ),
        Label::Key(
            row.topic
                .expect("labelled_rows keeps labelled rows")
                .to_owned(),
        ),
    )
}
