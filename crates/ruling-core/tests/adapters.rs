//! What `ruling-core` refuses about LoRA adapters before reading any adapter file: a model or
//! backend without a LoRA path, and settings that cannot both hold. (Adapters served side by
//! side, their answers and their calibrations are tested through the server, in
//! `crates/ruling-serve/tests/adapters.rs`.)

use std::path::PathBuf;

use ruling_core::{AdapterChoice, CoreError, DecoderBackend, Options, Ruling};

fn tiny_qwen2() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/generated/tiny-qwen2.gguf");
    assert!(path.exists(), "run `cargo xtask fixtures`");
    path.display().to_string()
}

fn some_adapter() -> AdapterChoice {
    AdapterChoice::new("support", "/nowhere/adapter.safetensors")
}

#[test]
fn adapters_need_a_decoder_on_the_candle_backend() {
    let encoder = Ruling::load_with_adapters(
        "encoder:/some/checkpoint",
        &Options::default(),
        &[some_adapter()],
    )
    .expect_err("an encoder has no LoRA path");
    assert!(
        matches!(encoder, CoreError::AdaptersNeedCandle { .. })
            && encoder.to_string().contains("decision encoder"),
        "{encoder}"
    );
    let llama = Options {
        backend: DecoderBackend::Llama,
        adapter: Some(some_adapter()),
        ..Options::default()
    };
    let error = Ruling::load(&tiny_qwen2(), &llama).expect_err("llama.cpp has no LoRA path");
    let message = error.to_string();
    assert!(
        message.contains("candle backend") && message.contains("llama backend"),
        "{message}"
    );
}

#[test]
fn adapter_settings_that_cannot_both_hold_are_refused() {
    let both = Options {
        adapter: Some(some_adapter()),
        calibration: Some("/nowhere/calibration.json".into()),
        ..Options::default()
    };
    let error = Ruling::load(&tiny_qwen2(), &both).expect_err("two calibrations");
    assert!(
        error.to_string().contains("AdapterChoice::calibration"),
        "{error}"
    );

    let single = Options {
        adapter: Some(some_adapter()),
        ..Options::default()
    };
    let error = Ruling::load_with_adapters(&tiny_qwen2(), &single, &[some_adapter()])
        .expect_err("one adapted model or a served set, not both");
    assert!(matches!(error, CoreError::AdapterConflict(_)), "{error}");

    // No adapters: the base alone, as `Ruling::load` gives it.
    let alone = Ruling::load_with_adapters(&tiny_qwen2(), &Options::default(), &[])
        .expect("the base loads");
    assert_eq!(alone.len(), 1);
    assert!(alone[0].adapter().is_none());
}
