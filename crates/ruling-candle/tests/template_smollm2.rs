//! The SmolLM2-135M-Instruct GGUF chat template against Python jinja2's rendering of it.
//!
//! `fixtures/reference/smollm2_chat.txt` was rendered by jinja2 with `transformers`' settings
//! (`trim_blocks`, `lstrip_blocks`, sandboxed); see `fixtures/reference/README.md`.

mod common;

use std::path::Path;

use candle_core::quantized::gguf_file::Content;
use ruling_backend::{ChatMessage, Role};
use ruling_candle::template::ChatTemplate;
use ruling_candle::tokenizer::TextTokenizer;

fn smollm2_content() -> Content {
    let path = common::smollm2_gguf();
    let mut file = std::fs::File::open(&path).expect("open gguf");
    Content::read(&mut file).expect("read gguf")
}

/// The conversation `make_smollm2_references.py` renders.
fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new(
            Role::System,
            "You answer questions about the state with a single letter.",
        ),
        ChatMessage::new(Role::User, "Is the sky green?\nA. yes\nB. no"),
        ChatMessage::new(Role::Assistant, "B"),
        ChatMessage::new(
            Role::User,
            "Which city is the capital of France?\nA. Lyon\nB. Paris\nC. Nice",
        ),
    ]
}

#[test]
fn smollm2_template_renders_exactly_as_jinja2() {
    let content = smollm2_content();
    let template = ChatTemplate::from_gguf(&content).expect("template");
    assert_eq!(template.bos_token(), "<|im_start|>");
    assert_eq!(template.eos_token(), "<|im_end|>");
    let expected = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/reference/smollm2_chat.txt"),
    )
    .expect("read reference");
    let rendered = template.render(&conversation(), true).expect("render");
    assert_eq!(rendered, expected);

    // The prompt starts with <|im_start|> and ends with the assistant header.
    let tokenizer = TextTokenizer::from_gguf(&content).expect("tokenizer");
    let ids = tokenizer.encode(&rendered).expect("encode");
    assert_eq!(ids.first(), Some(&1));
    let tail = tokenizer
        .encode("<|im_start|>assistant\n")
        .expect("encode tail");
    assert_eq!(tail[0], 1);
    assert!(ids.ends_with(&tail), "{ids:?}");
    assert_eq!(tokenizer.decode(&ids).expect("decode"), rendered);
}

#[test]
fn smollm2_template_without_generation_prompt_ends_after_the_turn() {
    let template = ChatTemplate::from_gguf(&smollm2_content()).expect("template");
    let rendered = template.render(&conversation(), false).expect("render");
    assert!(rendered.ends_with("C. Nice<|im_end|>\n"), "{rendered:?}");
}
