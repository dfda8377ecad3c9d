//! BERT on the generated tiny-bert equals candle-transformers' `bert` under a full mask with
//! positions 0..n, as `bert_parity.rs` checks on the real all-MiniLM-L6-v2; this one needs no
//! download and also checks that the explicit positions are the ones used.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use ruling_encoder::bert::Bert;
use ruling_encoder::layout::LayoutPlan;
use ruling_encoder::model::FamilyConfig;
use ruling_encoder::ops::GroupedMask;
use ruling_encoder::{AttentionMask, EncoderFiles, Kernels};

const TOLERANCE: f32 = 1e-4;

#[test]
fn tiny_bert() {
    let dir = common::fixtures().join("tiny-bert");
    let files = EncoderFiles::open(&dir).expect("tiny-bert opens");
    let FamilyConfig::Bert(config) = &files.config else {
        panic!("tiny-bert is a BERT model");
    };
    assert_eq!(
        files.problems(false).unwrap(),
        Vec::<String>::new(),
        "tiny-bert lacks tensors the encoder reads"
    );
    let special = files.tokenizer.special();
    let text = "Is the sky blue on a clear day? A. Yes B. No Answer:";
    let mut ids = vec![special.cls];
    ids.extend(files.tokenizer.encode(text).unwrap());
    ids.push(special.sep);
    let n = ids.len();
    eprintln!("{n} tokens: {ids:?}");
    assert!((16..=24).contains(&n), "{n} tokens");
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
    let load = |kernels| {
        let vb = VarBuilder::from_tensors(files.tensors.clone(), DType::F32, &device);
        Bert::load(vb, config, kernels).unwrap()
    };
    for kernels in [Kernels::Fused, Kernels::Differentiable] {
        let model = load(kernels);
        for (name, mask) in [("dense", &dense), ("grouped", &grouped)] {
            let diff = common::max_abs_diff(
                &model.forward(&tokens, &positions, mask).unwrap(),
                &reference,
            );
            eprintln!("tiny-bert, {kernels:?}, {name} mask: max abs difference {diff:e}");
            assert!(
                diff < TOLERANCE,
                "{kernels:?}, {name} mask: max abs difference {diff}"
            );
        }
    }

    // Absolute positions: the same tokens at positions 1..n+1 give other hidden states.
    let shifted = (&positions + 1.0).unwrap();
    let moved = common::max_abs_diff(
        &load(Kernels::Fused)
            .forward(&tokens, &shifted, &dense)
            .unwrap(),
        &reference,
    );
    eprintln!("tiny-bert, positions 1..n+1: max abs difference {moved:e}");
    assert!(
        moved > 100.0 * TOLERANCE,
        "positions do not reach the model ({moved})"
    );
}

/// Answering runs attention token by token over key lists, projects queries, keys and values
/// in one product, and runs the last layer only at the slots; training runs the batched,
/// padded form of the same mask. Both must compute the same function.
#[test]
fn the_answering_path_computes_what_training_computes() {
    use ruling_encoder::model::BatchTensors;
    use ruling_encoder::{Limits, QuestionTokens, pack};

    let dir = common::fixtures().join("tiny-bert");
    let files = EncoderFiles::open(&dir).expect("tiny-bert opens");
    let FamilyConfig::Bert(config) = &files.config else {
        panic!("tiny-bert is a BERT model");
    };
    let encode = |text: &str| files.tokenizer.encode(text).unwrap();
    let questions = vec![
        QuestionTokens {
            text: encode("Is this ticket about billing?"),
            options: vec![encode("true"), encode("false")],
        },
        QuestionTokens {
            text: encode("Which team should handle it?"),
            options: (0..12)
                .map(|i| encode(&format!("team number {i}, which handles case {i}")))
                .collect(),
        },
    ];
    let packed = pack(
        &encode("My card was charged twice for the March invoice. Please refund one."),
        &questions,
        files.tokenizer.special(),
        Limits {
            max_positions: config.max_position_embeddings,
            max_tokens: 4096,
            max_state_tokens: 4096,
        },
    )
    .unwrap();
    let device = Device::Cpu;
    let batch = BatchTensors::new(&[&packed], &device).unwrap();
    let slots = batch.slot_indices(&[&packed]);
    let slots = Tensor::from_slice(&slots, slots.len(), &device).unwrap();
    let load = |kernels| {
        let vb = VarBuilder::from_tensors(files.tensors.clone(), DType::F32, &device);
        Bert::load(vb, config, kernels).unwrap()
    };
    let (answering, training) = (load(Kernels::Fused), load(Kernels::Differentiable));
    let every = |model: &Bert| {
        model
            .forward(&batch.tokens, &batch.positions, &batch.mask)
            .unwrap()
    };
    let diff = common::max_abs_diff(&every(&answering), &every(&training));
    eprintln!("every token: max abs difference {diff:e}");
    assert!(diff < 1e-5, "every token: {diff}");
    let at_slots = answering
        .forward_at(&batch.tokens, &batch.positions, &batch.mask, &slots)
        .unwrap();
    let reference = every(&training)
        .squeeze(0)
        .unwrap()
        .index_select(&slots, 0)
        .unwrap();
    let diff = common::max_abs_diff(&at_slots, &reference);
    eprintln!("slots only: max abs difference {diff:e}");
    assert!(diff < 1e-5, "slots only: {diff}");
}
