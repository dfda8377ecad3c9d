//! WordNet 3.0 glosses (`wordnet/wordnet30_glosses.jsonl`): every synset's words, definition
//! and example sentences, and its lexicographer file (its supersense: `noun.person`,
//! `verb.motion`, ...). All of it is development data.
//!
//! The labelled question is which kind of thing or event a definition describes, over the
//! supersenses of its part of speech (26 for nouns, 15 for verbs); adjectives and adverbs
//! have too few to choose among and are states only.

use std::path::Path;

use serde::Deserialize;

use super::{choice, jsonl_rows, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const NOUN_INSTRUCTIONS: &str = "What kind of thing does this dictionary definition describe?";
const VERB_INSTRUCTIONS: &str =
    "What kind of action or event does this dictionary definition describe?";

/// The supersenses (lexicographer files) of nouns and verbs, with what each holds.
pub(crate) const SUPERSENSES: [(&str, &str); 41] = [
    ("noun.Tops", "a unique top-level concept"),
    ("noun.act", "an act or action"),
    ("noun.animal", "an animal"),
    ("noun.artifact", "a man-made object"),
    (
        "noun.attribute",
        "an attribute or quality of people and objects",
    ),
    ("noun.body", "a body part"),
    ("noun.cognition", "a cognitive process or content"),
    (
        "noun.communication",
        "communication: speech, writing, signs",
    ),
    ("noun.event", "a natural event or happening"),
    ("noun.feeling", "a feeling or emotion"),
    ("noun.food", "a food or drink"),
    ("noun.group", "a group or collection of people or things"),
    ("noun.location", "a place or spatial position"),
    ("noun.motive", "a goal or motive"),
    ("noun.object", "a natural object, not man-made"),
    ("noun.person", "a person"),
    ("noun.phenomenon", "a natural phenomenon"),
    ("noun.plant", "a plant"),
    ("noun.possession", "a possession or its transfer"),
    ("noun.process", "a natural process"),
    ("noun.quantity", "a quantity or unit of measure"),
    (
        "noun.relation",
        "a relation between people, things or ideas",
    ),
    ("noun.shape", "a two- or three-dimensional shape"),
    ("noun.state", "a stable state of affairs"),
    ("noun.substance", "a substance"),
    ("noun.time", "a time or temporal relation"),
    ("verb.body", "grooming, dressing and bodily care"),
    ("verb.change", "change of size, temperature, intensity"),
    ("verb.cognition", "thinking, judging, analysing, doubting"),
    ("verb.communication", "telling, asking, ordering, singing"),
    ("verb.competition", "fighting, athletic activities"),
    ("verb.consumption", "eating and drinking"),
    ("verb.contact", "touching, hitting, tying, digging"),
    ("verb.creation", "sewing, baking, painting, performing"),
    ("verb.emotion", "feeling"),
    ("verb.motion", "walking, flying, swimming"),
    ("verb.perception", "seeing, hearing, feeling"),
    ("verb.possession", "buying, selling, owning"),
    ("verb.social", "political and social activities and events"),
    ("verb.stative", "being, having, spatial relations"),
    ("verb.weather", "raining, snowing, thawing, thundering"),
];

/// A supersense's option name: `noun.artifact` is `artifact`, `verb.motion` is `motion`.
pub(crate) fn option_name(supersense: &str) -> &str {
    supersense
        .split_once('.')
        .map_or(supersense, |(_, name)| name)
}

#[derive(Deserialize)]
struct Line {
    words: Vec<String>,
    definition: String,
    #[serde(default)]
    examples: Vec<String>,
    label: String,
    pos: String,
    offset: String,
}

/// One synset.
pub(crate) struct Row {
    pub(crate) pos: String,
    pub(crate) offset: String,
    pub(crate) definition: String,
    pub(crate) examples: Vec<String>,
    pub(crate) supersense: String,
}

/// Every synset, in file order.
pub(crate) fn rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    let path = root.join("wordnet/wordnet30_glosses.jsonl");
    jsonl_rows::<Line>(&path)?
        .into_iter()
        .map(|(line, l)| {
            if l.definition.trim().is_empty() || l.words.is_empty() {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    "a synset needs its words and a definition",
                ));
            }
            Ok(Row {
                pos: l.pos,
                offset: l.offset,
                definition: l.definition.trim().to_owned(),
                examples: l.examples,
                supersense: l.label,
            })
        })
        .collect()
}

/// The synsets the supersense question is asked of: nouns and verbs.
pub(super) fn labelled_rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    Ok(rows(root)?
        .into_iter()
        .filter(|r| SUPERSENSES.iter().any(|(s, _)| *s == r.supersense))
        .collect())
}

pub(super) fn record(row: &Row) -> Record {
    let noun = row.supersense.starts_with("noun.");
    let prefix = if noun { "noun." } else { "verb." };
    let options = SUPERSENSES
        .iter()
        .filter(|(s, _)| s.starts_with(prefix))
        .map(|(s, d)| (option_name(s), Some(*d)));
    single(
        "wordnet",
        format!("wordnet:{}:{}", row.pos, row.offset),
        row.definition.clone(),
        "supersense",
        choice(
            if noun {
                NOUN_INSTRUCTIONS
            } else {
                VERB_INSTRUCTIONS
            },
            options,
        ),
        Label::Key(option_name(&row.supersense).to_owned()),
    )
}
