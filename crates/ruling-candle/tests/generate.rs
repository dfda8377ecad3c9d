//! Text generation on the candle backend: the incremental decode against a full recompute on
//! the generated fixtures, seeded sampling, stopping, and a real answer from SmolLM2-135M.

mod common;

use ruling_backend::{Backend, Finish, Generator, Sampling};
use ruling_candle::{CandleBackend, LoadOptions, WeightDtype};

fn fixture(name: &str) -> CandleBackend {
    let options = LoadOptions {
        dtype: WeightDtype::F32,
        ..LoadOptions::default()
    };
    CandleBackend::load(&common::fixtures().join(name), &options).expect("load fixture")
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn greedy_writing_matches_a_full_recompute_at_every_token() {
    for name in ["tiny-llama.gguf", "tiny-qwen2"] {
        let backend = fixture(name);
        let vocab = backend.decoder().config().vocab_size;
        let all: Vec<u32> = (0..vocab as u32).collect();
        let prompt = common::tokens(5, 17, vocab);
        let sampling = Sampling {
            max_tokens: 12,
            ..Sampling::default()
        };
        // No end tokens can interfere: compare whatever was written, token by token.
        let written = backend.generate(&[&prompt], &sampling).unwrap().remove(0);
        assert!(!written.tokens.is_empty(), "{name}: nothing written");
        let mut sequence = prompt.clone();
        for (step, &token) in written.tokens.iter().enumerate() {
            let (head, last) = sequence.split_at(sequence.len() - 1);
            let row = backend.decoder().score_naive(head, last, &all).unwrap();
            assert_eq!(argmax(&row.logits), token, "{name}: token {step}");
            sequence.push(token);
        }
        assert!(written.tokens.len() == 12 || written.finish == Finish::Stop);
    }
}

#[test]
fn sampling_is_seeded_and_a_prompt_does_not_depend_on_its_neighbours() {
    let backend = fixture("tiny-qwen2.gguf");
    let vocab = backend.decoder().config().vocab_size;
    let prompts: Vec<Vec<u32>> = (0..3).map(|i| common::tokens(40 + i, 9, vocab)).collect();
    let views: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let sampling = Sampling {
        temperature: 1.0,
        top_p: 0.9,
        seed: 21,
        max_tokens: 10,
    };
    let first = backend.generate(&views, &sampling).unwrap();
    assert_eq!(first, backend.generate(&views, &sampling).unwrap());
    // The same prompt at the same position writes the same with other neighbours.
    let other = common::tokens(99, 5, vocab);
    let mixed = backend
        .generate(&[views[0], &other, views[2]], &sampling)
        .unwrap();
    assert_eq!(mixed[0], first[0]);
    assert_eq!(mixed[2], first[2]);
    let reseeded = backend
        .generate(
            &views,
            &Sampling {
                seed: 22,
                ..sampling
            },
        )
        .unwrap();
    assert_ne!(reseeded, first, "another seed wrote the same three texts");
}

#[test]
fn the_end_of_turn_is_read_from_the_template() {
    let backend = fixture("tiny-qwen2.gguf");
    let im_end = backend.encode("<|im_end|>").unwrap();
    assert_eq!(im_end.len(), 1);
    assert!(
        backend.end_tokens().contains(&im_end[0]),
        "{:?}",
        backend.end_tokens()
    );
}

#[test]
fn prompts_that_cannot_be_written_are_refused() {
    let backend = fixture("tiny-qwen2.gguf");
    let err = backend
        .generate(&[&[]], &Sampling::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one token"), "{err}");
    let limit = backend.info().context_length;
    let long = vec![1u32; limit];
    let err = backend
        .generate(&[&long], &Sampling::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("maximum context length"), "{err}");
    let err = backend
        .generate(
            &[&[1, 2]],
            &Sampling {
                temperature: f32::NAN,
                ..Sampling::default()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("temperature"), "{err}");
}

#[test]
fn smollm2_answers_and_stops_at_the_end_of_its_turn() {
    let backend = CandleBackend::load(&common::smollm2_gguf(), &LoadOptions::default()).unwrap();
    let prompt = backend
        .encode(
            &backend
                .render_chat(&[ruling_backend::ChatMessage::new(
                    ruling_backend::Role::User,
                    "What is the capital of France? Answer in one sentence.",
                )])
                .unwrap(),
        )
        .unwrap();
    let written = backend
        .generate(
            &[&prompt],
            &Sampling {
                max_tokens: 40,
                ..Sampling::default()
            },
        )
        .unwrap()
        .remove(0);
    let text = backend.decode(&written.tokens).unwrap();
    assert!(text.contains("Paris"), "{text:?}");
    assert_eq!(written.finish, Finish::Stop, "{text:?}");
}
