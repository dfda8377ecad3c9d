//! The decoder against candle-transformers' Hugging Face implementations of the same families
//! (`llama`, `qwen2`, `qwen3`, `gemma3`) on the generated safetensors fixtures: full-vocabulary
//! logits after a sequence longer than Gemma 3's sliding window must agree. Then, on the qwen3
//! and gemma3 fixtures, the shared-prefix branch paths against the naive recompute, with
//! prefixes on both sides of the window so the prefix mask is exercised.
//!
//! candle-transformers 0.11.1's `gemma3` departs from transformers' `Gemma3ForCausalLM` in two
//! places, and the reference is given an equivalent model rather than the decoder being bent to
//! it (both are checked to matter, see [`gemma3_reference_quirks_are_real`]):
//! - it scales attention scores by `head_dim ** -0.5` where transformers uses
//!   `query_pre_attn_scalar ** -0.5`. Scores are linear in the query, and the query passes through
//!   `q_norm`'s `(1 + w)` just before rope (also linear), so the reference gets `q_norm` weights
//!   `(1 + w) * sqrt(head_dim / query_pre_attn_scalar) - 1`, which gives transformers' scores;
//! - its local layers let a query see `sliding_window + 1` keys (it masks `j + w < i`), where
//!   transformers (and llama.cpp) let it see `sliding_window` keys, its own included
//!   (`i - j < w`). The reference gets `sliding_window - 1`.

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::{gemma3, llama, qwen2, qwen3};
use ruling_candle::{BranchBudget, BranchLayout, Decoder, WeightDtype};

/// Float summation order is all that differs between two f32 implementations of one model.
const TOLERANCE: f32 = 1e-4;

/// The test sequence: longer than Gemma's window (8) several times over.
const SEQUENCE: usize = 40;

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn spread(a: &[f32]) -> f32 {
    let (lo, hi) = a
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    hi - lo
}

fn fixture(stem: &str) -> std::path::PathBuf {
    common::fixtures().join(stem)
}

fn ours(stem: &str) -> Decoder {
    Decoder::from_hf_dir(&fixture(stem), WeightDtype::F32, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{stem}: {e}"))
}

/// Our full-vocabulary logits after `ids`, prefilled in chunks of `chunk` tokens.
fn our_logits(decoder: &Decoder, ids: &[u32], chunk: usize) -> Vec<f32> {
    let mut cache = decoder.empty_cache();
    decoder
        .prefill_chunked(&mut cache, ids, chunk)
        .unwrap()
        .expect("a non-empty sequence has logits")
}

fn config_json(stem: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(stem).join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn safetensors(stem: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(stem).join("model.safetensors"), &Device::Cpu).unwrap()
}

fn var_builder(tensors: HashMap<String, Tensor>) -> candle_nn::VarBuilder<'static> {
    candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu)
}

/// Last-position logits from candle-transformers, flattened to one vocabulary row.
fn reference_logits(stem: &str, ids: &[u32]) -> Vec<f32> {
    let device = Device::Cpu;
    let input = Tensor::new(ids, &device).unwrap().unsqueeze(0).unwrap();
    let config = config_json(stem);
    let logits = match config["model_type"].as_str().unwrap() {
        "llama" => {
            let cfg = serde_json::from_value::<llama::LlamaConfig>(config)
                .unwrap()
                .into_config(false);
            let model = llama::Llama::load(var_builder(safetensors(stem)), &cfg).unwrap();
            let mut cache = llama::Cache::new(false, DType::F32, &cfg, &device).unwrap();
            model.forward(&input, 0, &mut cache).unwrap()
        }
        "qwen2" => {
            let cfg: qwen2::Config = serde_json::from_value(config).unwrap();
            qwen2::ModelForCausalLM::new(&cfg, var_builder(safetensors(stem)))
                .unwrap()
                .forward(&input, 0)
                .unwrap()
        }
        "qwen3" => {
            let cfg: qwen3::Config = serde_json::from_value(config).unwrap();
            qwen3::ModelForCausalLM::new(&cfg, var_builder(safetensors(stem)))
                .unwrap()
                .forward(&input, 0)
                .unwrap()
        }
        "gemma3_text" => gemma3_reference(stem, &input, true, true),
        other => panic!("no reference for {other}"),
    };
    logits.flatten_all().unwrap().to_vec1().unwrap()
}

/// candle-transformers' gemma3 on the fixture, given transformers' attention scale and window
/// (see the module comment) unless told not to.
fn gemma3_reference(stem: &str, input: &Tensor, fix_scale: bool, fix_window: bool) -> Tensor {
    let mut config = config_json(stem);
    let window = config["sliding_window"].as_u64().unwrap();
    if fix_window {
        config["sliding_window"] = (window - 1).into();
    }
    let cfg: gemma3::Config = serde_json::from_value(config).unwrap();
    let mut tensors = safetensors(stem);
    if fix_scale {
        let factor = (cfg.head_dim as f64 / cfg.query_pre_attn_scalar as f64).sqrt();
        for (name, tensor) in tensors.iter_mut() {
            if name.ends_with("self_attn.q_norm.weight") {
                let one_plus = (&*tensor + 1.0).unwrap();
                *tensor = ((one_plus * factor).unwrap() - 1.0).unwrap();
            }
        }
    }
    gemma3::Model::new(false, &cfg, var_builder(tensors))
        .unwrap()
        .forward(input, 0)
        .unwrap()
}

#[test]
fn last_position_logits_match_candle_transformers() {
    for stem in ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"] {
        let decoder = ours(stem);
        let vocab = decoder.config().vocab_size;
        let ids = common::tokens(41, SEQUENCE, vocab.min(700));
        let reference = reference_logits(stem, &ids);
        assert_eq!(reference.len(), vocab, "{stem}");
        // In one pass, and in chunks that straddle the window so cached prefixes are masked.
        for chunk in [SEQUENCE, 5] {
            let got = our_logits(&decoder, &ids, chunk);
            let diff = max_abs_diff(&got, &reference);
            eprintln!(
                "{stem} chunk {chunk}: logit spread {:.4}, max |ours - candle-transformers| {diff:.2e}",
                spread(&reference)
            );
            assert!(
                diff <= TOLERANCE,
                "{stem} chunk {chunk}: logits differ by {diff}"
            );
        }
        // The naive path reads the same row (asked for every code).
        let every: Vec<u32> = (0..vocab as u32).collect();
        let naive = decoder
            .score_naive(&ids[..SEQUENCE - 3], &ids[SEQUENCE - 3..], &every)
            .unwrap();
        let diff = max_abs_diff(&naive.logits, &reference);
        assert!(diff <= TOLERANCE, "{stem} naive: logits differ by {diff}");
    }
}

/// The adjustments made to candle-transformers' gemma3 are needed: without either, it computes
/// another model, and the fixture is sensitive enough to tell.
#[test]
fn gemma3_reference_quirks_are_real() {
    let stem = "tiny-gemma3";
    let decoder = ours(stem);
    let ids = common::tokens(41, SEQUENCE, 700);
    let got = our_logits(&decoder, &ids, SEQUENCE);
    let input = Tensor::new(ids.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let row = |t: Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let fixed = max_abs_diff(&got, &row(gemma3_reference(stem, &input, true, true)));
    let raw_scale = max_abs_diff(&got, &row(gemma3_reference(stem, &input, false, true)));
    let raw_window = max_abs_diff(&got, &row(gemma3_reference(stem, &input, true, false)));
    eprintln!(
        "{stem}: adjusted {fixed:.2e}, head_dim scale {raw_scale:.2e}, window + 1 {raw_window:.2e}"
    );
    assert!(fixed <= TOLERANCE);
    for (what, diff) in [
        ("scaled by head_dim", raw_scale),
        ("a window one wider", raw_window),
    ] {
        assert!(
            diff > 20.0 * TOLERANCE,
            "{stem}: {what} changes the logits by only {diff}"
        );
    }
}

fn branches(count: usize, vocab: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..count)
        .map(|i| {
            // 1 to 23 tokens: many are longer than Gemma's window on their own.
            let len = 1 + (i * 7 + 3) % 23;
            let codes: Vec<u32> = (0..2 + i % 5).map(|c| (30 + c * 3) as u32).collect();
            (common::tokens(100 + i as u64, len, vocab), codes)
        })
        .collect()
}

#[test]
fn shared_prefix_branches_equal_the_naive_path_on_qwen3_and_gemma3() {
    for stem in ["tiny-qwen3", "tiny-gemma3"] {
        let decoder = ours(stem);
        let vocab = decoder.config().vocab_size.min(700);
        let owned = branches(9, vocab);
        let borrowed: Vec<(&[u32], &[u32])> = owned
            .iter()
            .map(|(t, c)| (t.as_slice(), c.as_slice()))
            .collect();
        // A prefix shorter than the window (only long branches reach past it) and one several
        // windows long (every branch token has prefix keys hidden), prefilled in chunks.
        for prefix_len in [5, 29] {
            let prefix = common::tokens(7, prefix_len, vocab);
            let mut cache = decoder.empty_cache();
            decoder.prefill_chunked(&mut cache, &prefix, 6).unwrap();
            for layout in [BranchLayout::Rows, BranchLayout::Packed] {
                let budget = BranchBudget {
                    max_tokens: 48,
                    ..BranchBudget::default()
                };
                let shared = decoder
                    .score_branches(&cache, &borrowed, layout, budget)
                    .unwrap();
                let mut worst = 0f32;
                for (i, ((branch, codes), got)) in owned.iter().zip(&shared).enumerate() {
                    let naive = decoder.score_naive(&prefix, branch, codes).unwrap();
                    let diff = max_abs_diff(&got.logits, &naive.logits)
                        .max((got.log_normalizer - naive.log_normalizer).abs());
                    assert!(
                        diff <= TOLERANCE,
                        "{stem} prefix {prefix_len} {layout:?} branch {i} ({} tokens): {diff}",
                        branch.len()
                    );
                    worst = worst.max(diff);
                }
                eprintln!("{stem} prefix {prefix_len} {layout:?}: max diff {worst:.2e}");
            }
        }
    }
}

/// The fixtures carry the switches this file is about, read the way the decoder reads them.
#[test]
fn qwen3_and_gemma3_configs_switch_the_decoder() {
    let qwen3 = ours("tiny-qwen3");
    let c = qwen3.config();
    assert!(c.qk_norm && !c.sandwich_norms && !c.norm_weight_offset);
    assert_ne!(c.head_dim, c.hidden_size / c.num_heads);
    assert_eq!(c.sliding_window, None);

    let gemma = ours("tiny-gemma3");
    let c = gemma.config();
    assert!(c.qk_norm && c.sandwich_norms && c.norm_weight_offset && c.tie_word_embeddings);
    assert_eq!(c.activation, ruling_candle::Activation::GeluTanh);
    assert_eq!(c.embedding_scale, Some(8.0));
    assert_eq!(c.sliding_window, Some(8));
    assert!((c.query_pre_attn_scalar - 16.0).abs() < 1e-12);
    let local: Vec<bool> = (0..c.num_layers).map(|i| c.is_local_layer(i)).collect();
    assert_eq!(local, [true, true, false, true, true]);
    let thetas: Vec<f64> = (0..c.num_layers).map(|i| c.layer_rope_theta(i)).collect();
    assert_eq!(thetas, [1e4, 1e4, 1e6, 1e4, 1e4]);
}
