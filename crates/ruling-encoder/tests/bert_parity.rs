//! BERT on the real all-MiniLM-L6-v2 weights equals candle-transformers' `bert` under a full
//! mask with positions 0..n, the one setting both implementations can express.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use ruling_encoder::bert::Bert;
use ruling_encoder::layout::LayoutPlan;
use ruling_encoder::model::FamilyConfig;
use ruling_encoder::ops::GroupedMask;
use ruling_encoder::{AttentionMask, EncoderFiles, Kernels};

#[test]
fn bert_matches_candle_transformers_on_minilm() {
    let dir = common::minilm();
    let files = EncoderFiles::open(&dir).expect("minilm opens");
    let FamilyConfig::Bert(config) = &files.config else {
        panic!("minilm is a BERT model");
    };
    let text = "Hi, my card was charged twice for the March invoice. Please refund one.";
    let ids = files.tokenizer.encode(text).unwrap();
    let n = ids.len();
    let device = Device::Cpu;
    let tokens = Tensor::from_slice(&ids, (1, n), &device).unwrap();

    let reference_config: candle_transformers::models::bert::Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let vb = VarBuilder::from_tensors(files.tensors.clone(), DType::F32, &device);
    let reference = candle_transformers::models::bert::BertModel::load(vb, &reference_config)
        .unwrap()
        .forward(&tokens, &tokens.zeros_like().unwrap(), None)
        .unwrap();

    let positions = Tensor::arange(0u32, n as u32, &device)
        .unwrap()
        .reshape((1, n))
        .unwrap();
    let dense = AttentionMask::Dense(Tensor::zeros((1, n, n), DType::F32, &device).unwrap());
    let grouped = AttentionMask::Grouped(GroupedMask::new(&LayoutPlan::full(n), &device).unwrap());
    for kernels in [Kernels::Fused, Kernels::Differentiable] {
        for mask in [&dense, &grouped] {
            let vb = VarBuilder::from_tensors(files.tensors.clone(), DType::F32, &device);
            let ours = Bert::load(vb, config, kernels)
                .unwrap()
                .forward(&tokens, &positions, mask)
                .unwrap();
            let diff = common::max_abs_diff(&ours, &reference);
            assert!(
                diff < 1e-4,
                "{kernels:?}, {mask:?}: max abs difference {diff}"
            );
        }
    }

    // Serving's bf16 products (on AMX tiles or AVX-512 BF16, where this CPU has either) round
    // every dense layer's inputs to 8 significant bits: measured here, the hidden states move
    // by 0.013 at most against entries of up to 5.4, and they must stay within 0.05 of the f32
    // ones.
    let vb = VarBuilder::from_tensors(files.tensors.clone(), DType::F32, &device);
    let bf16 = Bert::load(vb, config, Kernels::FusedBf16)
        .unwrap()
        .forward(&tokens, &positions, &grouped)
        .unwrap();
    let diff = common::max_abs_diff(&bf16, &reference);
    let largest = reference
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let unit = ruling_encoder::tiles::unit().map_or_else(
        || "f32: no bf16 unit on this CPU".to_owned(),
        |u| u.to_string(),
    );
    eprintln!("bf16 products ({unit}): max abs difference {diff:e}, largest entry {largest}");
    assert!(diff < 0.05, "bf16 products: max abs difference {diff}");
}
