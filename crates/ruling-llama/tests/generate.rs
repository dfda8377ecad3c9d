//! Text generation on the llama.cpp backend with SmolLM2-135M-Instruct: a real answer that
//! stops at the end of its turn, seeded sampling, prompts written together, and agreement with
//! the candle backend's greedy text.

mod common;

use std::sync::OnceLock;

use ruling_backend::{Backend, ChatMessage, Finish, Generator, Role, Sampling};
use ruling_llama::{LlamaCppBackend, LoadOptions};

fn llama() -> &'static LlamaCppBackend {
    static BACKEND: OnceLock<LlamaCppBackend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        LlamaCppBackend::load(
            &common::catalog_gguf("smollm2-135m"),
            &LoadOptions::default(),
        )
        .expect("load smollm2 on llama.cpp")
    })
}

fn chat(backend: &impl Backend, user: &str) -> Vec<u32> {
    let text = backend
        .render_chat(&[ChatMessage::new(Role::User, user)])
        .unwrap();
    backend.encode(&text).unwrap()
}

#[test]
fn answers_and_stops_at_the_end_of_its_turn() {
    let backend = llama();
    let prompt = chat(
        backend,
        "What is the capital of France? Answer in one sentence.",
    );
    let sampling = Sampling {
        max_tokens: 40,
        ..Sampling::default()
    };
    let written = backend.generate(&[&prompt], &sampling).unwrap().remove(0);
    let text = backend.decode(&written.tokens).unwrap();
    assert!(text.contains("Paris"), "{text:?}");
    assert_eq!(written.finish, Finish::Stop, "{text:?}");
}

#[test]
fn several_prompts_write_together_and_the_same_seed_writes_the_same() {
    let backend = llama();
    let prompts: Vec<Vec<u32>> = [
        "Name three colours.",
        "Write a haiku about rain.",
        "What is 2 + 2?",
        "Describe a cat in one sentence.",
    ]
    .iter()
    .map(|p| chat(backend, p))
    .collect();
    let views: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let sampling = Sampling {
        temperature: 0.9,
        top_p: 0.95,
        seed: 8,
        max_tokens: 24,
    };
    let first = backend.generate(&views, &sampling).unwrap();
    assert_eq!(first.len(), 4);
    for written in &first {
        assert!(!written.tokens.is_empty() && written.tokens.len() <= 24);
        assert!(written.tokens.len() == 24 || written.finish == Finish::Stop);
    }
    assert_eq!(first, backend.generate(&views, &sampling).unwrap());
    let reseeded = backend
        .generate(
            &views,
            &Sampling {
                seed: 9,
                ..sampling
            },
        )
        .unwrap();
    assert_ne!(first, reseeded, "another seed wrote the same four texts");
}

#[test]
fn greedy_text_starts_as_the_candle_backends_does() {
    let backend = llama();
    let candle = ruling_candle::CandleBackend::load(
        &common::catalog_gguf("smollm2-135m"),
        &ruling_candle::LoadOptions::default(),
    )
    .unwrap();
    let prompt = chat(
        backend,
        "What is the capital of France? Answer in one sentence.",
    );
    let sampling = Sampling {
        max_tokens: 6,
        ..Sampling::default()
    };
    let ours = backend.generate(&[&prompt], &sampling).unwrap();
    let theirs = candle.generate(&[&prompt], &sampling).unwrap();
    // The two backends quantize activations differently, so a near tie could one day split
    // them; the first tokens of a clear answer must agree.
    assert_eq!(ours[0].tokens, theirs[0].tokens);
}

#[test]
fn a_prompt_without_room_to_write_is_refused() {
    let backend = llama();
    let long = vec![1u32; backend.info().context_length];
    let err = backend
        .generate(&[&long], &Sampling::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("maximum context length"), "{err}");
    let err = backend
        .generate(
            &[&[1, 2]],
            &Sampling {
                top_p: 1.5,
                ..Sampling::default()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("top_p"), "{err}");
}
