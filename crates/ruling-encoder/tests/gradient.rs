//! The training loss backpropagates: on both tiny fixtures, the gradient candle computes
//! through the differentiable kernels agrees with a central finite difference of the loss
//! along a fixed direction through every weight (head, layers, norms, embeddings).

mod common;

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use ruling_encoder::train::{Example, Freeze, TrainBatch, Trainable};
use ruling_encoder::{EncoderFiles, EncoderQuestion, Limits, prepare};
use ruling_schema::{Capabilities, SystemOneRequest};
use serde_json::json;

fn examples(files: &EncoderFiles) -> Vec<Example> {
    let request: SystemOneRequest = serde_json::from_value(json!({
        "model": "m",
        "state": "my card was charged twice for the march invoice",
        "questions": {
            "billing": {"type": "noul", "instructions": "is this about billing?"},
            "team": {"type": "choice", "instructions": "which team?", "criteria": {"billing": "refunds", "tech": "bugs", "other": null}},
            "urgency": {"type": "score", "instructions": "how urgent?", "criteria": ["can wait", "this week", "today"]}
        }
    }))
    .unwrap();
    let valid = request.validate(&Capabilities::default()).unwrap();
    let questions: Vec<EncoderQuestion> = valid
        .questions()
        .iter()
        .map(|q| EncoderQuestion::from_valid(q).unwrap())
        .collect();
    let limits = Limits {
        max_positions: files.config.max_positions(),
        max_tokens: 4096,
        max_state_tokens: 4096,
    };
    let prepared = prepare(
        &files.tokenizer,
        &valid.state().render(),
        &questions,
        limits,
    )
    .unwrap();
    // Soft and hard targets, per packed question, options in packed order.
    let targets: Vec<Vec<f32>> = prepared
        .order
        .iter()
        .map(|&q| match questions[q].options.len() {
            2 => vec![0.7, 0.3],
            _ => vec![0.0, 1.0, 0.0],
        })
        .collect();
    let kinds = prepared.order.iter().map(|&q| questions[q].kind).collect();
    let short = prepare(&files.tokenizer, "the app crashes", &questions[..1], limits).unwrap();
    vec![
        Example {
            packed: prepared.packed,
            targets,
            kinds,
            weight: 1.0,
        },
        Example {
            packed: short.packed,
            targets: vec![vec![0.0, 1.0]],
            kinds: vec![questions[0].kind],
            weight: 2.0,
        },
    ]
}

/// A fixed direction: one deterministic tensor per weight, unit norm overall.
fn direction(weights: &HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    let mut raw = HashMap::new();
    let mut squares = 0f64;
    let mut names: Vec<&String> = weights.keys().collect();
    names.sort();
    for (k, name) in names.into_iter().enumerate() {
        let tensor = &weights[name];
        let values: Vec<f32> = (0..tensor.elem_count())
            .map(|i| ((i as f64 * 12.9898 + k as f64 * 78.233).sin() * 43758.5453).fract() as f32)
            .collect();
        squares += values
            .iter()
            .map(|v| f64::from(*v) * f64::from(*v))
            .sum::<f64>();
        raw.insert(name.clone(), (values, tensor.dims().to_vec()));
    }
    let scale = (1.0 / squares.sqrt()) as f32;
    raw.into_iter()
        .map(|(name, (values, dims))| {
            let values: Vec<f32> = values.into_iter().map(|v| v * scale).collect();
            (name, Tensor::from_vec(values, dims, &Device::Cpu).unwrap())
        })
        .collect()
}

fn check(fixture: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let dir = common::decision_checkpoint(&common::fixtures().join(fixture), scratch.path(), "fd");
    let files = EncoderFiles::open(&dir).unwrap();
    let trainable = Trainable::new(&files, Freeze::Nothing).unwrap();
    let examples = examples(&files);
    let refs: Vec<&Example> = examples.iter().collect();
    let batch = TrainBatch::new(&refs, &Device::Cpu).unwrap();

    let loss = batch.loss(trainable.model()).unwrap();
    let grads = loss.backward().unwrap();
    let weights = trainable.tensors().unwrap();
    // Along a random direction alone the loss moves too little to difference in f32, so the
    // direction is half the (normalised) gradient and half a fixed random direction: a wrong
    // gradient changes the finite difference along it, so it cannot pass by agreeing with itself.
    let random = direction(&weights);
    let mut gradient = HashMap::new();
    let mut touched = 0;
    let mut squares = 0f64;
    for (name, var) in trainable.vars() {
        let g = grads
            .get(var)
            .unwrap_or_else(|| panic!("no gradient reaches {name}"));
        let norm: f32 = g.sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
        touched += usize::from(norm > 0.0);
        squares += f64::from(norm);
        gradient.insert(name.clone(), g.clone());
    }
    let scale = 1.0 / squares.sqrt();
    let mut u: HashMap<String, Tensor> = random.clone();
    for (name, g) in &gradient {
        u.insert(
            name.clone(),
            ((g * scale).unwrap() + &random[name]).unwrap(),
        );
    }
    let mut analytic = 0f64;
    for (name, g) in &gradient {
        let dot: f32 = (g * &u[name])
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        analytic += f64::from(dot);
    }
    assert!(
        touched * 10 >= trainable.vars().len() * 9,
        "gradients reach most weights: {touched} of {}",
        trainable.vars().len()
    );

    let shifted = |h: f32| -> f64 {
        let moved: HashMap<String, Tensor> = weights
            .iter()
            .map(|(name, w)| {
                (
                    name.clone(),
                    (w + (&u[name] * f64::from(h)).unwrap()).unwrap(),
                )
            })
            .collect();
        trainable.restore(&moved).unwrap();
        let value: f32 = batch.loss(trainable.model()).unwrap().to_scalar().unwrap();
        f64::from(value)
    };
    let h = 1e-3;
    let numeric = (shifted(h) - shifted(-h)) / (2.0 * f64::from(h));
    trainable.restore(&weights).unwrap();
    let relative = (analytic - numeric).abs() / analytic.abs().max(numeric.abs()).max(1e-6);
    eprintln!(
        "{fixture}: analytic {analytic:.6e}, finite difference {numeric:.6e}, relative error {relative:.2e}"
    );
    assert!(
        relative < 1e-2,
        "{fixture}: analytic directional derivative {analytic}, finite difference {numeric} (relative error {relative})"
    );
    assert!(
        analytic.abs() > 1e-4,
        "a direction the loss actually moves along: {analytic}"
    );
}

#[test]
fn bert_gradients_match_finite_differences() {
    check("tiny-bert");
}

#[test]
fn modernbert_gradients_match_finite_differences() {
    check("tiny-modernbert");
}
