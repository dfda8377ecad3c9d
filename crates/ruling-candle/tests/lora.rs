//! LoRA on the generated fixtures: the training pass's gradient against finite differences,
//! the training pass against the serving path with the adapter applied, and adapter files
//! refused for another base or a broken layout.

mod common;

use std::collections::HashMap;

use candle_core::{Device, Tensor, Var};
use ruling_candle::lora::{ADAPTER_FORMAT, SplitMix, adapter_bytes, tensor_names};
use ruling_candle::{
    Adapter, AdapterError, AdapterMeta, BaseModel, Decoder, LoraConfig, LoraWeights, Projection,
    WeightDtype,
};

fn every_projection(layers: usize) -> LoraConfig {
    LoraConfig {
        rank: 2,
        scale: 2.0,
        dropout: 0.0,
        projections: Projection::ALL.to_vec(),
        layers,
    }
}

/// Adapter matrices as variables, B seeded nonzero too (a zero B would zero A's gradient).
fn variables(lora: &LoraConfig, decoder: &Decoder, seed: u64) -> Vec<(String, Var)> {
    let mut rng = SplitMix(seed);
    LoraWeights::init(lora, decoder.config(), seed, &Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(name, t)| {
            let t = if name.ends_with("lora_b") {
                let values: Vec<f32> = (0..t.elem_count())
                    .map(|_| ((rng.unit() - 0.5) * 0.1) as f32)
                    .collect();
                Tensor::from_vec(values, t.shape(), &Device::Cpu).unwrap()
            } else {
                t
            };
            (name, Var::from_tensor(&t).unwrap())
        })
        .collect()
}

fn weights(lora: &LoraConfig, decoder: &Decoder, vars: &[(String, Var)]) -> LoraWeights {
    let tensors: HashMap<String, Tensor> = vars
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect();
    LoraWeights::from_tensors(lora, decoder.config(), &tensors).unwrap()
}

fn rows() -> Vec<Vec<u32>> {
    vec![
        vec![5, 17, 99, 3, 250, 41, 7],
        vec![8, 120, 33, 64],
        vec![300, 2, 19, 77, 401, 12, 6, 90, 11],
    ]
}

const CODES: [u32; 3] = [40, 41, 42];

/// A scalar of the code logits with uneven weights, so every logit matters.
fn objective(logits: &Tensor) -> Tensor {
    let (r, k) = logits.dims2().unwrap();
    let w: Vec<f32> = (0..r * k).map(|i| 0.3 + 0.17 * i as f32).collect();
    (logits * Tensor::from_vec(w, (r, k), &Device::Cpu).unwrap())
        .unwrap()
        .sum_all()
        .unwrap()
}

fn decoders() -> Vec<(String, Decoder)> {
    let dir = common::fixtures();
    let cpu = Device::Cpu;
    let mut out = Vec::new();
    for stem in ["tiny-llama", "tiny-qwen2", "tiny-gemma3", "tiny-qwen3"] {
        let d = Decoder::from_hf_dir(&dir.join(stem), WeightDtype::F32, &cpu).unwrap();
        out.push((stem.to_owned(), d));
    }
    // Quantized blocks pass no gradient: the trained-through layers are dequantized first.
    let mut q =
        Decoder::from_gguf(&dir.join("tiny-qwen2.gguf"), WeightDtype::Native, &cpu).unwrap();
    q.dequantize_from(0).unwrap();
    out.push(("tiny-qwen2.gguf dequantized".to_owned(), q));
    out
}

#[test]
fn the_lora_gradient_matches_finite_differences() {
    for (name, decoder) in decoders() {
        let lora = every_projection(decoder.config().num_layers);
        let vars = variables(&lora, &decoder, 7);
        let w = weights(&lora, &decoder, &vars);
        let loss = objective(
            &decoder
                .train_code_logits(&rows(), &CODES, &w, None)
                .unwrap(),
        );
        let grads = loss.backward().unwrap();
        // Small enough that the curvature of GELU and the norms stays out of the difference,
        // large enough that f32 rounding of the loss does not swamp it.
        let eps = 2e-3f32;
        let mut checked = 0;
        for (tensor_name, var) in &vars {
            let grad = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{name}: no gradient reached {tensor_name}"));
            let grad: Vec<f32> = grad.flatten_all().unwrap().to_vec1().unwrap();
            let base: Vec<f32> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            // Three elements of each matrix, spread over it.
            for index in [0, base.len() / 2, base.len() - 1] {
                let at = |delta: f32| {
                    let mut moved = base.clone();
                    moved[index] += delta;
                    var.set(&Tensor::from_vec(moved, var.shape(), &Device::Cpu).unwrap())
                        .unwrap();
                    let logits = decoder
                        .train_code_logits(&rows(), &CODES, &w, None)
                        .unwrap();
                    objective(&logits).to_scalar::<f32>().unwrap()
                };
                let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
                at(0.0);
                let analytic = grad[index];
                let tolerance = 2e-3 + 2e-2 * analytic.abs().max(numeric.abs());
                assert!(
                    (numeric - analytic).abs() <= tolerance,
                    "{name} {tensor_name}[{index}]: analytic {analytic}, finite difference {numeric}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 7 * 6, "{name}: only {checked} elements checked");
    }
}

#[test]
fn training_and_serving_read_the_same_logits_with_an_adapter() {
    for (name, decoder) in decoders() {
        let lora = LoraConfig {
            layers: 1,
            ..every_projection(decoder.config().num_layers)
        };
        let vars = variables(&lora, &decoder, 3);
        let w = weights(&lora, &decoder, &vars);
        let trained: Vec<Vec<f32>> = decoder
            .train_code_logits(&rows(), &CODES, &w, None)
            .unwrap()
            .to_vec2()
            .unwrap();
        let adapted = decoder.with_adapter(w);
        let plain = decoder.clone();
        for (row, expected) in rows().iter().zip(&trained) {
            let (prefix, branch) = row.split_at(2);
            let served = adapted.score_naive(prefix, branch, &CODES).unwrap();
            for (a, b) in served.logits.iter().zip(expected) {
                assert!((a - b).abs() < 1e-4, "{name}: served {a} vs trained {b}");
            }
            // The shared-prefix path reads the same through the adapter.
            let mut cache = adapted.empty_cache();
            adapted.prefill(&mut cache, prefix).unwrap();
            let shared = adapted
                .score_branches(
                    &cache,
                    &[(branch, &CODES)],
                    Default::default(),
                    Default::default(),
                )
                .unwrap();
            for (a, b) in shared[0].logits.iter().zip(expected) {
                assert!(
                    (a - b).abs() < 1e-4,
                    "{name}: shared prefix {a} vs trained {b}"
                );
            }
            // The base it was cloned from is untouched.
            let base = plain.score_naive(prefix, branch, &CODES).unwrap();
            assert_ne!(
                base.logits, served.logits,
                "{name}: the adapter changed nothing"
            );
        }
    }
}

#[test]
fn a_fresh_adapter_reads_as_the_base() {
    let dir = common::fixtures();
    let decoder =
        Decoder::from_hf_dir(&dir.join("tiny-llama"), WeightDtype::F32, &Device::Cpu).unwrap();
    let lora = every_projection(2);
    let tensors: HashMap<String, Tensor> =
        LoraWeights::init(&lora, decoder.config(), 1, &Device::Cpu)
            .unwrap()
            .into_iter()
            .collect();
    let w = LoraWeights::from_tensors(&lora, decoder.config(), &tensors).unwrap();
    let adapted = decoder.with_adapter(w);
    let a = decoder.score_naive(&[5, 6, 7], &[8, 9], &CODES).unwrap();
    let b = adapted.score_naive(&[5, 6, 7], &[8, 9], &CODES).unwrap();
    assert_eq!(a, b);
}

#[test]
fn adapter_files_are_refused_for_another_base_or_layout() {
    let dir = common::fixtures();
    let decoder =
        Decoder::from_hf_dir(&dir.join("tiny-llama"), WeightDtype::F32, &Device::Cpu).unwrap();
    let lora = LoraConfig {
        projections: vec![Projection::Q, Projection::V],
        ..every_projection(1)
    };
    let base = BaseModel::new(decoder.config(), "tiny-llama", Some("abc"));
    let meta = AdapterMeta {
        format: ADAPTER_FORMAT,
        name: "test".into(),
        lora: lora.clone(),
        base: base.clone(),
        training: serde_json::json!({"data": []}),
    };
    let tensors = LoraWeights::init(&lora, decoder.config(), 1, &Device::Cpu).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a.safetensors");
    std::fs::write(&path, adapter_bytes(&meta, &tensors).unwrap()).unwrap();
    let adapter = Adapter::load(&path).unwrap();
    assert_eq!(adapter.meta, meta);
    assert_eq!(adapter.digest.len(), 64);
    adapter.weights_for(decoder.config(), &base).unwrap();

    // Another base: every difference is named.
    let qwen =
        Decoder::from_hf_dir(&dir.join("tiny-qwen2"), WeightDtype::F32, &Device::Cpu).unwrap();
    let other = BaseModel::new(qwen.config(), "tiny-qwen2", None);
    let err = adapter.weights_for(qwen.config(), &other).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, AdapterError::OtherBase { .. }), "{message}");
    assert!(
        message.contains("model_id") && message.contains("revision"),
        "{message}"
    );

    // The same base under another revision.
    let moved = BaseModel {
        revision: Some("def".into()),
        ..base.clone()
    };
    let message = adapter
        .weights_for(decoder.config(), &moved)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("revision: trained on abc, loaded def"),
        "{message}"
    );

    // A layout its tensors do not follow: one matrix missing.
    let (a_name, _) = tensor_names(1, Projection::V);
    let short: Vec<(String, Tensor)> = tensors
        .iter()
        .filter(|(n, _)| *n != a_name)
        .cloned()
        .collect();
    std::fs::write(&path, adapter_bytes(&meta, &short).unwrap()).unwrap();
    let err = Adapter::load(&path)
        .unwrap()
        .weights_for(decoder.config(), &base)
        .unwrap_err();
    assert!(matches!(err, AdapterError::Layout { .. }), "{err}");
    assert!(err.to_string().contains(&a_name), "{err}");

    // Not an adapter at all.
    std::fs::write(&path, b"not safetensors").unwrap();
    let err = Adapter::load(&path).unwrap_err();
    assert!(matches!(err, AdapterError::NotAnAdapter { .. }), "{err}");
}
