//! SentencePiece vocabularies (`tokenizer.ggml.model = "llama"`: Gemma, Llama 2, Mistral,
//! Phi-3): the tokenizer ruling builds from the GGUF gives llama.cpp's own ids, on the tiny
//! fixture and on the real Gemma 3 270M over text in hundreds of languages.

mod common;

use std::path::Path;

use candle_core::quantized::gguf_file::Content;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use ruling_candle::TextTokenizer;

/// Texts that stress the SentencePiece details: the space prefix (and its return after a
/// special token), runs of spaces, byte fallback for characters no piece covers, specials.
const TEXTS: &[&str] = &[
    "",
    "Hello world",
    " Hello world",
    "  two leading spaces",
    "trailing spaces   ",
    "The capital of France is Paris.",
    "A",
    "Answer: B",
    "Question: which option?\nA. red\nB. green\nC. blue\n",
    "1234567890 3.14159 -42 $1,000,000.00",
    "tabs\tand\t\ttabs\r\nwindows\n\n\n",
    "Café naïve résumé über Straße ångström",
    "東京は日本の首都です。北京是中国的首都。한국어 텍스트",
    "Emoji: 😀👍🏽 🇫🇷 ❤️",
    "Привет, мир! Γειά σου κόσμε",
    "fn main() { println!(\"{}\", x + 1); } // code",
    "<s>[INST] What is 2+2? [/INST] 4</s>",
    "text</s>more<s>end",
    "inline<s>marker",
    "<s  not a token>",
    "x\u{00a0}y\u{2003}z",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa abababababab",
];

/// llama.cpp's ids for `text`, as the engine tokenizes: no BOS added, specials recognised.
fn llama_ids(model: &LlamaModel, text: &str) -> Vec<u32> {
    model
        .vocab()
        .tokenize(text.as_bytes(), false, true)
        .iter()
        .map(|t| u32::try_from(t.0).expect("a token id"))
        .collect()
}

fn both(path: &Path) -> (LlamaModel, TextTokenizer) {
    let runtime = ruling_llama::runtime().expect("llama.cpp runtime");
    let model = LlamaModel::load_from_file(runtime, path, &LlamaModelParams::default())
        .unwrap_or_else(|e| panic!("llama.cpp loads {}: {e}", path.display()));
    let mut file = std::fs::File::open(path).expect("open the GGUF");
    let content = Content::read(&mut file).expect("read the GGUF");
    let ours = TextTokenizer::from_gguf(&content).expect("a SentencePiece tokenizer");
    (model, ours)
}

/// Texts compared, the characters in them, and those whose ids differ (at most five shown).
fn compare<'a>(
    model: &LlamaModel,
    ours: &TextTokenizer,
    texts: impl IntoIterator<Item = &'a str>,
) -> (usize, usize, Vec<String>) {
    let (mut count, mut chars, mut differ) = (0, 0, Vec::new());
    for text in texts {
        count += 1;
        chars += text.chars().count();
        let want = llama_ids(model, text);
        let got = ours.encode(text).expect("encode");
        if got != want {
            differ.push(format!("{text:?}: llama.cpp {want:?}, ruling {got:?}"));
        }
    }
    (count, chars, differ)
}

#[test]
fn the_sentencepiece_fixture_tokenizes_as_llama_cpp_does() {
    let path = common::workspace().join("fixtures/generated/tiny-llama-spm.gguf");
    assert!(
        path.exists(),
        "{}: run `cargo xtask fixtures`",
        path.display()
    );
    let (model, ours) = both(&path);
    let (count, _, differ) = compare(&model, &ours, TEXTS.iter().copied());
    assert!(
        differ.is_empty(),
        "{} of {count} differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    // The vocabulary is small, so words fall back to bytes: the comparison covers that path.
    // The space prefix comes first, as its own piece.
    let ids = ours.encode("日本").unwrap();
    assert_eq!(ours.id_to_token(ids[0]).as_deref(), Some("▁"), "{ids:?}");
    assert_eq!(ids.len(), 7, "{ids:?}");
    assert!(ids[1..].iter().all(|&id| (3..259).contains(&id)), "{ids:?}");
    assert_eq!(ours.decode(&ids).unwrap(), "日本");
    assert!(ours.add_bos_token());
    assert_eq!(ours.bos_id(), Some(1));
}

/// Up to `per_language` paragraphs of each language of the UDHR, and the first fortunes, until
/// `budget` characters.
fn mixed_text(per_language: usize, budget: usize) -> Vec<String> {
    let datasets = common::workspace().join("../shared/datasets");
    let mut texts = Vec::new();
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut chars = 0;
    for (file, per) in [
        ("udhr/udhr_paragraphs.jsonl", per_language),
        ("fortunes/fortunes.jsonl", usize::MAX),
    ] {
        let path = datasets.join(file);
        let body =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for line in body.lines() {
            let row: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let label = row["label"].as_str().unwrap_or("").to_owned();
            let n = seen.entry(label).or_default();
            if *n >= per {
                continue;
            }
            *n += 1;
            let text = row["text"].as_str().expect("a text").to_owned();
            chars += text.chars().count();
            texts.push(text);
            if chars >= budget {
                return texts;
            }
        }
    }
    texts
}

#[test]
fn gemma3_tokenizes_as_llama_cpp_does_in_hundreds_of_languages() {
    let (model, ours) = both(&common::catalog_gguf("gemma3-270m"));
    let texts = mixed_text(2, 300_000);
    let (count, chars, differ) = compare(
        &model,
        &ours,
        TEXTS
            .iter()
            .copied()
            .chain(texts.iter().map(String::as_str)),
    );
    eprintln!(
        "gemma3-270m: {count} texts, {chars} characters, {} differ",
        differ.len()
    );
    assert!(chars >= 250_000, "only {chars} characters compared");
    assert!(
        differ.is_empty(),
        "{} of {count} differ, first:\n{}",
        differ.len(),
        differ
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A prompt cut between its prefix and a branch tokenizes as the whole prompt on a vocabulary
/// that puts `▁` before a text (Llama 2's, Mistral's): both backends prove it at load and
/// score the fixture's branches with the same answer codes.
#[test]
fn a_space_prefix_vocabulary_loads_on_both_backends_with_a_clean_seam() {
    use ruling_backend::{Backend, DEFAULT_CODES, verify_backend};

    let path = common::workspace().join("fixtures/generated/tiny-llama-spm.gguf");
    let llama = ruling_llama::LlamaCppBackend::load(&path, &ruling_llama::LoadOptions::default())
        .expect("the llama backend loads a SentencePiece GGUF");
    let candle = ruling_candle::CandleBackend::load(&path, &ruling_candle::LoadOptions::default())
        .expect("the candle backend loads a SentencePiece GGUF");
    let on_llama = verify_backend(&llama, &DEFAULT_CODES[..4]).expect("llama contract");
    let on_candle = verify_backend(&candle, &DEFAULT_CODES[..4]).expect("candle contract");
    assert_eq!(on_llama.codes.ids(), on_candle.codes.ids());
    assert_eq!(on_llama.question_first, Ok(()));
    assert_eq!(on_candle.question_first, Ok(()));

    // The continuation of a prompt gets no `▁` of its own, but one after a special token.
    let whole = candle.encode("[INST] Is it red? [/INST] A</s> B").unwrap();
    let head = candle.encode("[INST] Is it red?").unwrap();
    let rest = candle.encode_continuation(" [/INST] A</s> B").unwrap();
    assert_eq!([head, rest].concat(), whole);
    let pieces: Vec<String> = candle
        .encode_continuation("Is it")
        .unwrap()
        .iter()
        .map(|&id| candle.tokenizer().id_to_token(id).unwrap())
        .collect();
    assert_eq!(pieces.concat(), "Is▁it", "{pieces:?}");
}
