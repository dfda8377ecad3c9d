//! The shared-prefix paths against the naive full recompute, on the generated fixtures: the
//! same numbers must come out however the work is laid out.

mod common;

use candle_core::Device;
use ruling_candle::{BranchBudget, BranchLayout, Decoder, WeightDtype};

/// Every fixture in both formats, with matrices dequantized to f32 (where the paths differ only
/// by float summation order) or kept as Q8_0 blocks.
fn models_at(dtype: WeightDtype) -> Vec<(String, Decoder)> {
    let dir = common::fixtures();
    let cpu = Device::Cpu;
    let mut out = Vec::new();
    for stem in ["tiny-llama", "tiny-qwen2"] {
        let gguf = Decoder::from_gguf(&dir.join(format!("{stem}.gguf")), dtype, &cpu).unwrap();
        out.push((format!("{stem}.gguf {dtype:?}"), gguf));
        let hf = Decoder::from_hf_dir(&dir.join(stem), dtype, &cpu).unwrap();
        out.push((format!("{stem} {dtype:?}"), hf));
    }
    out
}

fn models() -> Vec<(String, Decoder)> {
    models_at(WeightDtype::F32)
}

/// How far the shared-prefix and naive paths may differ. In f32 only the order of float sums
/// differs. Quantized matmuls also quantize each activation row to 8 bits, and a last-bit
/// difference upstream can move a value across a rounding step, which the following layers
/// carry: measured below 5e-4 on the fixtures.
fn tolerance(dtype: WeightDtype) -> f32 {
    if dtype == WeightDtype::Native {
        2e-3
    } else {
        1e-4
    }
}

fn branches(count: usize, vocab: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..count)
        .map(|i| {
            let len = 1 + (i * 7 + 3) % 23;
            let codes: Vec<u32> = (0..2 + i % 5).map(|c| (30 + c * 3) as u32).collect();
            (common::tokens(100 + i as u64, len, vocab), codes)
        })
        .collect()
}

fn assert_close(what: &str, a: &[f32], b: &[f32], tolerance: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tolerance,
            "{what}: element {i}: {x} vs {y} (tolerance {tolerance})"
        );
    }
}

#[test]
fn shared_prefix_scoring_equals_the_naive_path() {
    for dtype in [WeightDtype::F32, WeightDtype::Native] {
        shared_prefix_matches_naive(dtype);
    }
}

fn shared_prefix_matches_naive(dtype: WeightDtype) {
    let tolerance = tolerance(dtype);
    for (name, decoder) in models_at(dtype) {
        let vocab = decoder.config().vocab_size.min(700);
        let prefix = common::tokens(7, 57, vocab);
        let mut cache = decoder.empty_cache();
        decoder.prefill(&mut cache, &prefix).unwrap();
        for count in [1, 7, 33] {
            let owned = branches(count, vocab);
            let borrowed: Vec<(&[u32], &[u32])> = owned
                .iter()
                .map(|(t, c)| (t.as_slice(), c.as_slice()))
                .collect();
            for layout in [BranchLayout::Rows, BranchLayout::Packed] {
                // A small budget forces several groups, so grouping and reordering are exercised.
                let budget = BranchBudget {
                    max_tokens: 96,
                    ..BranchBudget::default()
                };
                let shared = decoder
                    .score_branches(&cache, &borrowed, layout, budget)
                    .unwrap();
                assert_eq!(shared.len(), count);
                for (i, ((branch, codes), got)) in owned.iter().zip(&shared).enumerate() {
                    let naive = decoder.score_naive(&prefix, branch, codes).unwrap();
                    let what = format!("{name} {layout:?} {count} branches, branch {i}");
                    assert_close(&what, &got.logits, &naive.logits, tolerance);
                    assert_close(
                        &what,
                        &[got.log_normalizer],
                        &[naive.log_normalizer],
                        tolerance,
                    );
                }
            }
        }
    }
}

#[test]
fn chunked_prefill_equals_one_shot_prefill() {
    for (name, decoder) in models() {
        let vocab = decoder.config().vocab_size.min(700);
        let prefix = common::tokens(11, 80, vocab);
        let mut whole = decoder.empty_cache();
        let one_shot = decoder
            .prefill_chunked(&mut whole, &prefix, 1024)
            .unwrap()
            .unwrap();
        for chunk in [1, 7, 32] {
            let mut pieces = decoder.empty_cache();
            let chunked = decoder
                .prefill_chunked(&mut pieces, &prefix, chunk)
                .unwrap()
                .unwrap();
            assert_close(
                &format!("{name} chunk {chunk} logits"),
                &chunked,
                &one_shot,
                1e-4,
            );
            assert_eq!(pieces.len(), whole.len());
            // The caches must also continue the same way.
            let owned = branches(5, vocab);
            let borrowed: Vec<(&[u32], &[u32])> = owned
                .iter()
                .map(|(t, c)| (t.as_slice(), c.as_slice()))
                .collect();
            let a = decoder
                .score_branches(
                    &whole,
                    &borrowed,
                    BranchLayout::Rows,
                    BranchBudget::default(),
                )
                .unwrap();
            let b = decoder
                .score_branches(
                    &pieces,
                    &borrowed,
                    BranchLayout::Rows,
                    BranchBudget::default(),
                )
                .unwrap();
            for (x, y) in a.iter().zip(&b) {
                assert_close(
                    &format!("{name} chunk {chunk} branches"),
                    &x.logits,
                    &y.logits,
                    1e-4,
                );
            }
        }
    }
}

#[test]
fn gguf_and_safetensors_fixtures_are_the_same_model() {
    let dir = common::fixtures();
    let cpu = Device::Cpu;
    for stem in ["tiny-llama", "tiny-qwen2"] {
        let gguf =
            Decoder::from_gguf(&dir.join(format!("{stem}.gguf")), WeightDtype::F32, &cpu).unwrap();
        let hf = Decoder::from_hf_dir(&dir.join(stem), WeightDtype::F32, &cpu).unwrap();
        let prefix = common::tokens(3, 40, 700);
        let codes: Vec<u32> = (30..40).collect();
        let a = gguf.score_naive(&prefix, &[5, 6, 7], &codes).unwrap();
        let b = hf.score_naive(&prefix, &[5, 6, 7], &codes).unwrap();
        // The GGUF matrices are Q8_0, the safetensors f32: equal up to quantization error.
        assert_close(
            &format!("{stem} gguf vs safetensors"),
            &a.logits,
            &b.logits,
            2e-2,
        );
    }
}

#[test]
fn positions_past_the_context_are_refused() {
    let (_, decoder) = models().remove(0);
    let mut cache = decoder.empty_cache();
    let too_long = vec![5u32; decoder.max_positions() + 1];
    let err = decoder.prefill(&mut cache, &too_long).unwrap_err();
    assert!(err.to_string().contains("maximum context length"), "{err}");
}
