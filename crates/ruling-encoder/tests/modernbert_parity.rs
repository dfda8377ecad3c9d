//! ModernBERT on the generated tiny-modernbert equals candle-transformers' `modernbert` under a
//! full mask with positions 0..n, the one setting both implementations can express. There the
//! local layers' window, which ruling-encoder measures in positions and candle-transformers in
//! sequence indices, is the same window; the input is longer than the window, so the local
//! layers are compared too.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use ruling_encoder::layout::LayoutPlan;
use ruling_encoder::model::FamilyConfig;
use ruling_encoder::modernbert::{ModernBert, ModernBertConfig};
use ruling_encoder::ops::GroupedMask;
use ruling_encoder::{AttentionMask, EncoderFiles, Kernels};

const TOLERANCE: f32 = 1e-4;

fn ours(
    files: &EncoderFiles,
    config: &ModernBertConfig,
    kernels: Kernels,
    tokens: &Tensor,
    positions: &Tensor,
    mask: &AttentionMask,
) -> Tensor {
    let vb = VarBuilder::from_tensors(files.tensors.clone(), DType::F32, &Device::Cpu);
    ModernBert::load(vb, config, kernels)
        .unwrap()
        .forward(tokens, positions, mask)
        .unwrap()
}

#[test]
fn modernbert_matches_candle_transformers_on_tiny_modernbert() {
    let dir = common::fixtures().join("tiny-modernbert");
    let files = EncoderFiles::open(&dir).expect("tiny-modernbert opens");
    let FamilyConfig::ModernBert(config) = &files.config else {
        panic!("tiny-modernbert is a ModernBERT model");
    };
    assert_eq!(
        files.problems(false).unwrap(),
        Vec::<String>::new(),
        "tiny-modernbert lacks tensors the encoder reads"
    );
    let special = files.tokenizer.special();
    let text = "Is the sky blue on a clear day? A. Yes B. No Answer:";
    let mut ids = vec![special.cls];
    ids.extend(files.tokenizer.encode(text).unwrap());
    ids.push(special.sep);
    let n = ids.len();
    eprintln!("{n} tokens: {ids:?}");
    assert!(
        (16..=24).contains(&n) && n > config.local_attention,
        "{n} tokens, window {}",
        config.local_attention
    );
    let device = Device::Cpu;
    let tokens = Tensor::from_slice(&ids, (1, n), &device).unwrap();

    let reference_config: candle_transformers::models::modernbert::Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let vb = VarBuilder::from_tensors(files.tensors.clone(), DType::F32, &device);
    let reference =
        candle_transformers::models::modernbert::ModernBert::load(vb, &reference_config)
            .unwrap()
            .forward(&tokens, &tokens.ones_like().unwrap())
            .unwrap();

    let positions = Tensor::arange(0u32, n as u32, &device)
        .unwrap()
        .reshape((1, n))
        .unwrap();
    let dense = AttentionMask::Dense(Tensor::zeros((1, n, n), DType::F32, &device).unwrap());
    let grouped = AttentionMask::Grouped(GroupedMask::new(&LayoutPlan::full(n), &device).unwrap());
    for kernels in [Kernels::Fused, Kernels::Differentiable] {
        for (name, mask) in [("dense", &dense), ("grouped", &grouped)] {
            let diff = common::max_abs_diff(
                &ours(&files, config, kernels, &tokens, &positions, mask),
                &reference,
            );
            eprintln!("tiny-modernbert, {kernels:?}, {name} mask: max abs difference {diff:e}");
            assert!(
                diff < TOLERANCE,
                "{kernels:?}, {name} mask: max abs difference {diff}"
            );
        }
    }

    // The window matters on this input: with every layer global, the result moves by far more
    // than the tolerance (attention reaches the residual stream through `Wo` at 0.02, so it
    // moves by hundredths, against parity errors below 1e-6).
    let mut global = config.clone();
    global.local_attention = 4 * n;
    let unwindowed = common::max_abs_diff(
        &ours(&files, &global, Kernels::Fused, &tokens, &positions, &dense),
        &reference,
    );
    eprintln!("tiny-modernbert without the window: max abs difference {unwindowed:e}");
    assert!(
        unwindowed > 10.0 * TOLERANCE,
        "the sliding window does not change the result ({unwindowed})"
    );

    // Rotary positions are relative and so is the window: shifting every position by the
    // same amount changes nothing but rounding.
    let shifted = (&positions + 7.0).unwrap();
    for (name, mask) in [("dense", &dense), ("grouped", &grouped)] {
        let diff = common::max_abs_diff(
            &ours(&files, config, Kernels::Fused, &tokens, &shifted, mask),
            &reference,
        );
        eprintln!("tiny-modernbert, positions 7..n+7, {name} mask: max abs difference {diff:e}");
        assert!(diff < TOLERANCE, "{name} mask, shifted positions: {diff}");
    }
}
