//! The Universal Declaration of Human Rights in 532 language variants
//! (`udhr/udhr_paragraphs.jsonl`): paragraphs of at least 20 characters, each labelled with
//! its language's ISO 639-3 code. All of it is development data.
//!
//! The labelled question is which language a paragraph is written in, over a seeded sample of
//! ten named languages per row, its own among them. Only languages with a name in
//! [`LANGUAGES`] are asked about (`und`, undetermined, never); the others are still states.

use std::path::Path;

use rand::seq::IndexedRandom;
use serde::Deserialize;

use super::{choice, jsonl_rows, single};
use crate::dataset::row_rng;
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which language is this text written in?";

/// Languages offered per question, the row's own included.
const OFFERED: usize = 10;

/// English names of the ISO 639-3 codes the corpus uses most, and of the widely spoken ones.
pub(crate) const LANGUAGES: [(&str, &str); 110] = [
    ("afr", "Afrikaans"),
    ("amh", "Amharic"),
    ("arb", "Arabic"),
    ("ast", "Asturian"),
    ("azj", "Azerbaijani"),
    ("bam", "Bambara"),
    ("bel", "Belarusian"),
    ("ben", "Bengali"),
    ("bod", "Tibetan"),
    ("bos", "Bosnian"),
    ("bre", "Breton"),
    ("bul", "Bulgarian"),
    ("cat", "Catalan"),
    ("ceb", "Cebuano"),
    ("ces", "Czech"),
    ("chr", "Cherokee"),
    ("cmn", "Mandarin Chinese"),
    ("cos", "Corsican"),
    ("cym", "Welsh"),
    ("dan", "Danish"),
    ("deu", "German"),
    ("ekk", "Estonian"),
    ("ell", "Greek"),
    ("eng", "English"),
    ("epo", "Esperanto"),
    ("eus", "Basque"),
    ("ewe", "Ewe"),
    ("fao", "Faroese"),
    ("fij", "Fijian"),
    ("fin", "Finnish"),
    ("fra", "French"),
    ("fry", "Frisian"),
    ("fur", "Friulian"),
    ("gla", "Scottish Gaelic"),
    ("gle", "Irish"),
    ("glg", "Galician"),
    ("guj", "Gujarati"),
    ("hat", "Haitian Creole"),
    ("hau", "Hausa"),
    ("haw", "Hawaiian"),
    ("heb", "Hebrew"),
    ("hin", "Hindi"),
    ("hrv", "Croatian"),
    ("hun", "Hungarian"),
    ("hye", "Armenian"),
    ("ibo", "Igbo"),
    ("ind", "Indonesian"),
    ("isl", "Icelandic"),
    ("ita", "Italian"),
    ("jav", "Javanese"),
    ("jpn", "Japanese"),
    ("kan", "Kannada"),
    ("kat", "Georgian"),
    ("kaz", "Kazakh"),
    ("khm", "Khmer"),
    ("kin", "Kinyarwanda"),
    ("kir", "Kyrgyz"),
    ("kor", "Korean"),
    ("lao", "Lao"),
    ("lat", "Latin"),
    ("lin", "Lingala"),
    ("lit", "Lithuanian"),
    ("ltz", "Luxembourgish"),
    ("lvs", "Latvian"),
    ("mal", "Malayalam"),
    ("mar", "Marathi"),
    ("mkd", "Macedonian"),
    ("mlt", "Maltese"),
    ("mri", "Maori"),
    ("mya", "Burmese"),
    ("nld", "Dutch"),
    ("nno", "Norwegian Nynorsk"),
    ("nob", "Norwegian"),
    ("npi", "Nepali"),
    ("nya", "Chichewa"),
    ("oci", "Occitan"),
    ("pan", "Punjabi"),
    ("pes", "Persian"),
    ("pol", "Polish"),
    ("por", "Portuguese"),
    ("que", "Quechua"),
    ("roh", "Romansh"),
    ("ron", "Romanian"),
    ("rus", "Russian"),
    ("san", "Sanskrit"),
    ("sco", "Scots"),
    ("sin", "Sinhala"),
    ("slk", "Slovak"),
    ("slv", "Slovenian"),
    ("smo", "Samoan"),
    ("sna", "Shona"),
    ("som", "Somali"),
    ("spa", "Spanish"),
    ("srp", "Serbian"),
    ("swe", "Swedish"),
    ("swh", "Swahili"),
    ("tam", "Tamil"),
    ("tel", "Telugu"),
    ("tgl", "Tagalog"),
    ("tha", "Thai"),
    ("tur", "Turkish"),
    ("ukr", "Ukrainian"),
    ("urd", "Urdu"),
    ("uzn", "Uzbek"),
    ("vie", "Vietnamese"),
    ("wol", "Wolof"),
    ("xho", "Xhosa"),
    ("yor", "Yoruba"),
    ("yue", "Cantonese"),
    ("zul", "Zulu"),
];

/// The English name of an ISO 639-3 code, when [`LANGUAGES`] has one.
pub(crate) fn language_name(code: &str) -> Option<&'static str> {
    LANGUAGES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

#[derive(Deserialize)]
struct Line {
    text: String,
    label: String,
}

/// One paragraph and its language.
pub(crate) struct Row {
    /// Position among the file's rows, from 0.
    pub(crate) row: usize,
    pub(crate) text: String,
    /// ISO 639-3, or `und`.
    pub(crate) language: String,
}

/// Every paragraph, in file order.
pub(crate) fn rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    let path = root.join("udhr/udhr_paragraphs.jsonl");
    jsonl_rows::<Line>(&path)?
        .into_iter()
        .enumerate()
        .map(|(row, (line, l))| {
            if l.label.len() != 3 || !l.label.bytes().all(|b| b.is_ascii_lowercase()) {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    format!("label must be an ISO 639-3 code, got {:?}", l.label),
                ));
            }
            Ok(Row {
                row,
                text: l.text.trim().to_owned(),
                language: l.label,
            })
        })
        .collect()
}

/// The rows a language question can be asked of: those in a named language.
pub(super) fn named_rows(root: &Path) -> Result<Vec<Row>, CorpusError> {
    Ok(rows(root)?
        .into_iter()
        .filter(|r| language_name(&r.language).is_some())
        .collect())
}

pub(super) fn record(row: &Row, seed: u64) -> Record {
    let id = format!("udhr:{}", row.row);
    let own = language_name(&row.language).expect("named_rows keeps named languages only");
    let mut rng = row_rng(seed, &id);
    let others: Vec<&(&str, &str)> = LANGUAGES
        .iter()
        .filter(|(c, _)| *c != row.language)
        .collect();
    let mut offered: Vec<&str> = others
        .choose_multiple(&mut rng, OFFERED - 1)
        .map(|(_, name)| *name)
        .collect();
    offered.push(own);
    offered.sort_unstable();
    single(
        "udhr",
        id,
        row.text.clone(),
        "language",
        choice(INSTRUCTIONS, offered.into_iter().map(|name| (name, None))),
        Label::Key(own.to_owned()),
    )
}
