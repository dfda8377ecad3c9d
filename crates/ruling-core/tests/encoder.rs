//! `Ruling::load` picks the decision encoder from the spec: `encoder:PATH`, or any model
//! directory that holds a trained checkpoint's `decision.json`; decoder-only settings are
//! refused for it with a message that says why. The shipped judge, `ruling-judge-minilm-l6`,
//! loads by its catalog name from the repository (no download) and answers the README's request
//! as a user would see it.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use ruling_core::{CoreError, Options, Ruling};
use ruling_encoder::EncoderFiles;
use ruling_encoder::checkpoint::{
    BaseIdentity, NewCheckpoint, safetensors_bytes, write_checkpoint,
};
use ruling_schema::{Answer, SystemOneRequest};

/// A checkpoint of the tiny BERT fixture with a zero score head: untrained, so every answer is
/// uniform, which is all loading needs.
fn checkpoint(out: &Path) -> PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/generated/tiny-bert");
    assert!(
        base.is_dir(),
        "fixtures missing: run `cargo xtask fixtures`"
    );
    let files = EncoderFiles::open(&base).unwrap();
    let mut tensors = files.tensors.clone();
    let hidden = files.config.hidden_size();
    tensors.insert(
        "score.weight".into(),
        Tensor::zeros((1, hidden), DType::F32, &Device::Cpu).unwrap(),
    );
    tensors.insert(
        "score.bias".into(),
        Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap(),
    );
    let weights = safetensors_bytes(&tensors, DType::F16).unwrap();
    write_checkpoint(
        out,
        NewCheckpoint {
            name: "tiny-judge",
            base: &files,
            base_identity: BaseIdentity {
                name: "tiny-bert".into(),
                weights_sha256: files.weights_sha256.clone(),
            },
            weights: &weights,
            weights_dtype: "f16",
            training: serde_json::Value::Null,
        },
    )
    .unwrap();
    out.to_owned()
}

fn readme_request(model: &str) -> SystemOneRequest {
    serde_json::from_value(serde_json::json!({
        "model": model,
        "state": "Hi, my card was charged twice for the March invoice. Please refund one.",
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
            "team": {"type": "choice", "instructions": "Which team should handle it?",
                     "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["can wait", "this week", "today"]}
        }
    }))
    .unwrap()
}

#[test]
fn an_encoder_spec_and_a_checkpoint_directory_load_the_encoder() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = checkpoint(scratch.path());
    for spec in [
        format!("encoder:{}", dir.display()),
        dir.display().to_string(),
    ] {
        let ruling = Ruling::load(&spec, &Options::default()).unwrap();
        assert_eq!(ruling.info().model, "tiny-judge");
        assert_eq!(ruling.provenance().rotations, 1);
        let response = ruling.evaluate(&readme_request("tiny-judge")).unwrap();
        let Answer::Noul { noul } = response.answers["billing"] else {
            panic!("a noul answer")
        };
        assert!(
            (noul - 0.5).abs() < 1e-6,
            "an untrained head answers uniformly: {noul}"
        );
        assert!(
            ruling.prefix_cache_stats().is_none(),
            "one pass: nothing to cache"
        );
    }
}

#[test]
fn decoder_settings_are_refused_for_an_encoder() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = checkpoint(scratch.path());
    let spec = format!("encoder:{}", dir.display());
    let rotated = Options {
        rotations: Some(3),
        ..Options::default()
    };
    let err = Ruling::load(&spec, &rotated).unwrap_err();
    assert!(
        matches!(
            err,
            CoreError::NotForEncoder {
                setting: "--rotations",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("one pass"), "{err}");
    let err = Ruling::load(
        &format!("encoder:{}", scratch.path().join("nope").display()),
        &Options::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("config.json"),
        "names what is missing: {err}"
    );
}

#[test]
fn the_shipped_judge_answers_the_readme_request() {
    let ruling = Ruling::load("ruling-judge-minilm-l6", &Options::default()).expect("it loads");
    assert_eq!(ruling.info().model, "ruling-judge-minilm-l6");
    assert_eq!(
        ruling.provenance().revision.as_deref(),
        ruling_models::catalog::get("ruling-judge-minilm-l6").map(|e| e.files[0].sha256),
        "the calibration is tied to the shipped weights"
    );
    let response = ruling
        .evaluate(&readme_request("ruling-judge-minilm-l6"))
        .unwrap();
    let Answer::Noul { noul } = response.answers["billing"] else {
        panic!("a noul answer")
    };
    assert!(
        noul > 0.5,
        "a double charge is about billing: P(yes) = {noul}"
    );
    let Answer::Choice { choice, .. } = &response.answers["team"] else {
        panic!("a choice answer")
    };
    assert_eq!(choice, "billing");
    assert!(response.usage.input_tokens > 0);
}
