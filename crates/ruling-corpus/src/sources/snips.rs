//! SNIPS, the 2017-06 custom-intent-engines benchmark (`snips/train_<Intent>_full.json`,
//! `validate_<Intent>.json`): requests to a voice assistant for one of 7 intents, one file per
//! intent and part. All of it is development data.
//!
//! Each utterance is a list of pieces, the slots among them marked with an `entity`; the state
//! is the pieces joined back into plain text, since the questions are about the request, not
//! its slots.

use std::borrow::Cow;
use std::fs;
use std::path::Path;

use indexmap::IndexMap;
use ruling_schema::Question;
use serde::Deserialize;

use super::{choice, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which intent does this request to a voice assistant express?";

/// The 7 intents as the files name them, with what each asks for.
const INTENTS: [(&str, &str); 7] = [
    ("AddToPlaylist", "add a song, artist or album to a playlist"),
    ("BookRestaurant", "book a table at a restaurant"),
    ("GetWeather", "ask for a weather forecast"),
    ("PlayMusic", "play music"),
    ("RateBook", "give a rating to a book"),
    (
        "SearchCreativeWork",
        "find a creative work: a book, film, show, song, album or game",
    ),
    (
        "SearchScreeningEvent",
        "find when and where a film is showing",
    ),
];

/// The two parts, in the order they are read.
const PARTS: [&str; 2] = ["train", "validate"];

/// The file of one intent's part: the `_full` train file (not the few-shot sampling pools,
/// which the datasets folder leaves out) or the validation file.
fn file_name(part: &str, intent: &str) -> String {
    match part {
        "train" => format!("train_{intent}_full.json"),
        _ => format!("validate_{intent}.json"),
    }
}

#[derive(Deserialize)]
struct Utterance {
    data: Vec<Piece>,
}

#[derive(Deserialize)]
struct Piece {
    text: String,
}

pub(super) struct Row {
    part: &'static str,
    intent: &'static str,
    /// Position in its file's list, from 0.
    index: usize,
    text: String,
}

/// Every utterance of both parts, intent by intent in [`INTENTS`] order.
pub(super) fn rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    let mut rows = Vec::new();
    for part in PARTS {
        for (intent, _) in INTENTS {
            let path = root.join("snips").join(file_name(part, intent));
            let text = read_text(&path)?;
            let mut file: IndexMap<String, Vec<Utterance>> =
                serde_json::from_str(&text).map_err(|source| CorpusError::Json {
                    path: path.clone(),
                    line: source.line() as u64,
                    source,
                })?;
            let keys: Vec<String> = file.keys().cloned().collect();
            let utterances = match file.swap_remove(intent) {
                Some(utterances) if keys.len() == 1 => utterances,
                _ => {
                    return Err(CorpusError::malformed(
                        &path,
                        0,
                        format!("expected one top-level key, {intent:?}, found {keys:?}"),
                    ));
                }
            };
            for (index, utterance) in utterances.into_iter().enumerate() {
                let joined: String = utterance.data.iter().map(|p| p.text.as_str()).collect();
                let text = joined.trim();
                if text.is_empty() {
                    return Err(CorpusError::malformed(
                        &path,
                        0,
                        format!("{intent}[{index}] has no text"),
                    ));
                }
                rows.push(Row {
                    part,
                    intent,
                    index,
                    text: text.to_owned(),
                });
            }
        }
    }
    Ok(rows)
}

/// The file as text. `train_PlayMusic_full.json` writes one emoji as two CESU-8 surrogate
/// halves, which strict UTF-8 refuses; they are joined into the character they encode, and
/// any other invalid byte is still an error.
fn read_text(path: &Path) -> Result<String, CorpusError> {
    let bytes = fs::read(path).map_err(CorpusError::io(path))?;
    let bytes = join_surrogate_pairs(&bytes);
    match std::str::from_utf8(&bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(error) => {
            let at = error.valid_up_to();
            let line = bytes[..at].iter().filter(|b| **b == b'\n').count() as u64 + 1;
            Err(CorpusError::malformed(
                path,
                line,
                format!("not UTF-8 at byte {at}: {error}"),
            ))
        }
    }
}

/// `bytes` with every CESU-8 surrogate pair (a high surrogate `ED A0..AF xx` followed by a low
/// one `ED B0..BF xx`) replaced by the UTF-8 of the character the pair encodes.
fn join_surrogate_pairs(bytes: &[u8]) -> Cow<'_, [u8]> {
    /// The 16-bit value of a 3-byte sequence starting with ED and a second byte in `range`.
    fn surrogate(bytes: &[u8], range: std::ops::RangeInclusive<u8>) -> Option<u32> {
        match *bytes {
            [0xED, second, third, ..] if range.contains(&second) && third & 0xC0 == 0x80 => {
                Some(0xD000 | (u32::from(second & 0x3F) << 6) | u32::from(third & 0x3F))
            }
            _ => None,
        }
    }
    let pair = |at: usize| {
        let high = surrogate(&bytes[at..], 0xA0..=0xAF)?;
        let low = surrogate(bytes.get(at + 3..)?, 0xB0..=0xBF)?;
        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    };
    if !bytes.contains(&0xED) {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if let Some(c) = pair(at) {
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            at += 6;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    Cow::Owned(out)
}

/// A choice over the 7 intents, each described.
pub(super) fn question() -> Question {
    choice(INSTRUCTIONS, INTENTS.map(|(key, d)| (key, Some(d))))
}

pub(super) fn record(question: &Question, row: &Row) -> Record {
    single(
        "snips",
        format!("snips:{}:{}:{}", row.part, row.intent, row.index),
        row.text.clone(),
        "intent",
        question.clone(),
        Label::Key(row.intent.to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::join_surrogate_pairs;

    #[test]
    fn surrogate_halves_become_the_character_they_encode() {
        // The bytes of train_PlayMusic_full.json: U+1F355 as the pair D83C DF55.
        let cesu = b"Pop Punk Perfection \xed\xa0\xbc\xed\xbd\x95\"";
        assert_eq!(
            std::str::from_utf8(&join_surrogate_pairs(cesu)),
            Ok("Pop Punk Perfection \u{1F355}\"")
        );
        let plain = "caf\u{e9} \u{1F355}".as_bytes();
        assert!(matches!(
            join_surrogate_pairs(plain),
            std::borrow::Cow::Borrowed(_)
        ));
        // A lone half stays as it is, for UTF-8 decoding to refuse.
        assert_eq!(&*join_surrogate_pairs(b"a\xed\xa0\xbcb"), b"a\xed\xa0\xbcb");
    }
}
