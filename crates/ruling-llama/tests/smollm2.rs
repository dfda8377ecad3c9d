//! The llama.cpp backend on the real SmolLM2-135M-Instruct (the same Q4_1 GGUF the candle
//! tests use): the tokenizer seam, the backend contract, parity with the candle backend, and
//! determinism.

mod common;

use std::sync::OnceLock;

use ruling_backend::{Backend, Branch, BranchLogits, DEFAULT_CODES, verify_backend};
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

const STATE: &str = "Ticket 4812 from Dana: my card was charged twice for the March invoice. \
                     Can you refund one of them? The app also logged me out twice today.";
const QUESTIONS: [&str; 6] = [
    "\nIs this about billing?\nA. yes\nB. no",
    "\nWhich team?\nA. billing\nB. tech\nC. sales\nD. other",
    "\nHow urgent is it, from A (can wait) to D (right now)?",
    "\nDoes the customer sound angry?\nA. yes\nB. no\nC. unsure",
    "\nIs a refund requested?",
    "\nWhich product area is affected?\nA. payments\nB. login\nC. mobile app\nD. web\nE. other",
];
const TAIL: &str = "<|im_end|>\n<|im_start|>assistant\n";

fn prefix_tokens(backend: &impl Backend) -> Vec<u32> {
    backend
        .encode(&format!("<|im_start|>user\n{STATE}"))
        .unwrap()
}

fn branch_tokens(backend: &impl Backend) -> Vec<Vec<u32>> {
    QUESTIONS
        .iter()
        .map(|q| backend.encode(&format!("{q}{TAIL}")).unwrap())
        .collect()
}

fn codes(backend: &impl Backend) -> Vec<u32> {
    verify_backend(backend, &DEFAULT_CODES[..6])
        .unwrap()
        .codes
        .ids()
        .to_vec()
}

/// Every branch, each reading all of `codes`.
fn all_reading<'a>(branches: &'a [Vec<u32>], codes: &'a [u32]) -> Vec<Branch<'a>> {
    branches
        .iter()
        .map(|tokens| Branch { tokens, codes })
        .collect()
}

fn log_probs(scored: &BranchLogits) -> Vec<f32> {
    scored
        .logits
        .iter()
        .map(|l| l - scored.log_normalizer)
        .collect()
}

#[test]
fn both_tokenizers_give_the_same_ids() {
    let backend = llama();
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            common::workspace().join("fixtures/reference/smollm2_tokens.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut texts: Vec<String> = reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| case["text"].as_str().unwrap().to_owned())
        .collect();
    texts.push(format!("<|im_start|>user\n{STATE}"));
    texts.extend(QUESTIONS.iter().map(|q| format!("{q}{TAIL}")));
    texts.push("Café, naïve résumé — 日本語のテキスト 🙂 and tabs\tand  double  spaces".into());
    assert!(texts.len() > 10);
    for text in &texts {
        assert_eq!(
            backend.encode(text).unwrap(),
            backend.llama_tokenize(text),
            "{text:?}"
        );
    }
}

#[test]
fn smollm2_meets_the_backend_contract_on_llama() {
    let report = verify_backend(llama(), &DEFAULT_CODES[..8]).unwrap();
    assert_eq!(report.codes.ids(), [49, 50, 51, 52, 53, 54, 55, 56]);
    assert!(report.probe_candidate_mass > 0.0 && report.probe_candidate_mass <= 1.0);
}

/// A branch over the saved, restored and shared prefix reads what the same tokens read as one
/// sequence decoded from scratch, to llama.cpp's own noise: its flash attention takes another
/// kernel for calls of 64 rows or more (the whole sequence here) than for fewer (a branch), so
/// the same tokens split differently into calls move a code's log-probability (measured here:
/// up to 0.16 on SmolLM2-135M, whose 4-bit weights make every small difference a visible one).
#[test]
fn branches_over_the_shared_prefix_equal_whole_sequences() {
    let backend = llama();
    let codes = codes(backend);
    let prefix = prefix_tokens(backend);
    let branches = branch_tokens(backend);
    let port = all_reading(&branches, &codes);
    let shared = backend
        .score_branches(&backend.encode_prefix(&prefix).unwrap(), &port)
        .unwrap();
    let mut largest = 0f32;
    for (i, branch) in branches.iter().enumerate() {
        let whole: Vec<u32> = prefix
            .iter()
            .chain(&branch[..branch.len() - 1])
            .copied()
            .collect();
        let last = [branch[branch.len() - 1]];
        let alone = backend
            .score_branches(
                &backend.encode_prefix(&whole).unwrap(),
                &[Branch {
                    tokens: &last,
                    codes: &codes,
                }],
            )
            .unwrap();
        for (a, b) in log_probs(&shared[i]).iter().zip(log_probs(&alone[0])) {
            largest = largest.max((a - b).abs());
        }
    }
    eprintln!("shared prefix vs whole sequence: largest gap {largest:.4}");
    assert!(
        largest <= 0.2,
        "shared prefix and whole sequence differ by {largest}"
    );
}

/// The two backends run the same quantized weights with different kernels: candle
/// dequantizes SmolLM2's Q4_1 matrices to f32 and multiplies in f32, llama.cpp quantizes each
/// activation row to 8 bits (Q8_1) for its Q4_1 dot products. So they agree to that
/// quantization noise, not to the last bit: measured here, at most 0.17 on any code's
/// log-probability and about 0.06 on average (the largest gaps on the least likely codes).
#[test]
fn code_log_probs_match_the_candle_backend() {
    let llama = llama();
    let candle = ruling_candle::CandleBackend::load(
        &common::catalog_gguf("smollm2-135m"),
        &ruling_candle::LoadOptions::default(),
    )
    .unwrap();
    let codes = codes(llama);
    assert_eq!(codes, self::codes(&candle));
    let prefix = prefix_tokens(llama);
    let branches = branch_tokens(llama);
    let port: Vec<Branch<'_>> = branches
        .iter()
        .enumerate()
        .map(|(i, tokens)| Branch {
            tokens,
            codes: &codes[..2 + i % 5],
        })
        .collect();
    let ours = llama
        .score_branches(&llama.encode_prefix(&prefix).unwrap(), &port)
        .unwrap();
    let theirs = candle
        .score_branches(&candle.encode_prefix(&prefix).unwrap(), &port)
        .unwrap();
    let mut gaps = Vec::new();
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a.logits.len(), port[i].codes.len());
        gaps.extend(
            log_probs(a)
                .iter()
                .zip(log_probs(b))
                .map(|(x, y)| (x - y).abs()),
        );
    }
    let largest = gaps.iter().copied().fold(0f32, f32::max);
    let mean = gaps.iter().sum::<f32>() / gaps.len() as f32;
    eprintln!("code log-probabilities, llama vs candle: largest gap {largest:.4}, mean {mean:.4}");
    assert!(largest <= 0.3, "llama and candle differ by {largest}");
    assert!(mean <= 0.1, "llama and candle differ by {mean} on average");
}

#[test]
fn the_same_branches_give_bit_identical_logits_every_time() {
    let backend = llama();
    let codes = codes(backend);
    let prefix = prefix_tokens(backend);
    let branches = branch_tokens(backend);
    let port = all_reading(&branches, &codes);
    let first = backend
        .score_branches(&backend.encode_prefix(&prefix).unwrap(), &port)
        .unwrap();
    // Once more from a freshly encoded prefix, and once from the same one restored.
    let encoded = backend.encode_prefix(&prefix).unwrap();
    let again = backend.score_branches(&encoded, &port).unwrap();
    let other = backend.encode_prefix(&prefix[..prefix.len() / 2]).unwrap();
    backend.score_branches(&other, &port[..1]).unwrap();
    let restored = backend.score_branches(&encoded, &port).unwrap();
    assert_eq!(first, again);
    assert_eq!(first, restored);
}

#[test]
fn refuses_what_does_not_fit_before_decoding() {
    let backend = llama();
    let prefix = backend.encode_prefix(&prefix_tokens(backend)).unwrap();
    let empty = backend.score_branches(
        &prefix,
        &[Branch {
            tokens: &[],
            codes: &[49],
        }],
    );
    assert!(
        empty
            .unwrap_err()
            .to_string()
            .contains("at least one token")
    );
    let outside = backend.score_branches(
        &prefix,
        &[Branch {
            tokens: &[49],
            codes: &[u32::MAX],
        }],
    );
    assert!(
        outside
            .unwrap_err()
            .to_string()
            .contains("outside the vocabulary")
    );
    let long = vec![49; backend.info().context_length + 1];
    let too_long = backend.encode_prefix(&long);
    assert!(
        too_long
            .unwrap_err()
            .to_string()
            .contains("maximum context length")
    );
}

/// A question's logits do not depend on which other branches share the call, nor on their
/// order: decoded together (the default with this workspace's llama.cpp build, which keeps
/// weights unrepacked) they are bit-identical to each branch decoded alone.
#[test]
fn a_branch_reads_the_same_whatever_else_is_asked() {
    assert!(
        LoadOptions::default().branches_per_decode > 1,
        "llama.cpp was built with repacked weights: build it with GGML_CPU_REPACK=OFF \
         (.cargo/config.toml; `cargo clean -p llama-cpp-sys-2` after changing it)"
    );
    let backend = llama();
    let codes = codes(backend);
    let prefix = prefix_tokens(backend);
    let branches = branch_tokens(backend);
    let encoded = backend.encode_prefix(&prefix).unwrap();
    let port = all_reading(&branches, &codes);
    let together = backend.score_branches(&encoded, &port).unwrap();
    let reversed: Vec<Branch<'_>> = port.iter().rev().copied().collect();
    let mut backwards = backend.score_branches(&encoded, &reversed).unwrap();
    backwards.reverse();
    assert_eq!(together, backwards);
    for (i, branch) in port.iter().enumerate() {
        let alone = backend.score_branches(&encoded, &[*branch]).unwrap();
        assert_eq!(alone[0], together[i], "branch {i}");
    }
}
