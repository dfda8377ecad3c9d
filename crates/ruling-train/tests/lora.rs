//! `ruling-train lora` as a user runs it, on a generated tiny decoder and a small record file:
//! it trains an adapter whose prompts and numbers are the engine's own, with a calibration
//! tied to that adapter; a run killed for real resumes to bit-identical weights; bad input is
//! refused before anything is written.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{fails, latest_step, run, sha256, ticket_records, workspace};

use ruling_backend::{DecoderEngine, Engine, EngineOptions};
use ruling_calibration::Calibration;
use ruling_candle::Adapter;

fn base() -> PathBuf {
    let path = workspace().join("fixtures/generated/tiny-llama.gguf");
    assert!(
        path.is_file(),
        "fixtures missing: run `cargo xtask fixtures`"
    );
    path
}

/// The tickets the trainer learns from (with a score question).
fn records(dir: &Path) -> PathBuf {
    ticket_records(dir, 60, true)
}

fn train(data: &Path, output: &Path, steps: u64, eval_every: u64) -> Command {
    train_with(
        data,
        output,
        steps,
        eval_every,
        &["--layers", "2", "--rank", "4"],
    )
}

fn train_with(data: &Path, output: &Path, steps: u64, eval_every: u64, layout: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruling-train"));
    command
        .args(["lora", "--datasets", "none"])
        .args(layout)
        .arg("--base")
        .arg(base())
        .arg("--data")
        .arg(data)
        .arg("--output")
        .arg(output)
        .args(["--steps", &steps.to_string()])
        .args(["--eval-every", &eval_every.to_string()])
        .args([
            "--batch-tokens",
            "500",
            "--valid-fraction",
            "0.2",
            "--learning-rate",
            "3e-3",
            "--warmup",
            "3",
            "--dropout",
            "0.1",
        ]);
    command
}

fn request(state: &str) -> ruling_schema::ValidRequest {
    let request: ruling_schema::SystemOneRequest = serde_json::from_value(serde_json::json!({
        "model": "m", "state": state,
        "questions": {
            "team": {"type": "choice", "instructions": "which team should handle it?",
                     "criteria": {"billing": "refunds and invoices", "tech": "bugs", "shipping": "parcels"}},
            "money": {"type": "noul", "instructions": "is it about money?"}
        }
    }))
    .unwrap();
    request.validate(&Default::default()).unwrap()
}

#[test]
fn trains_an_adapter_the_engine_serves_with_its_own_calibration() {
    let scratch = tempfile::tempdir().unwrap();
    let data = records(scratch.path());
    let output = scratch.path().join("out");
    let done = run(train(&data, &output, 40, 20));
    let log = String::from_utf8_lossy(&done.stderr);
    assert!(log.contains("validation loss"), "{log}");
    for file in ["adapter.safetensors", "calibration.json", "training.json"] {
        assert!(output.join(file).is_file(), "{file} written");
    }
    let training: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("training.json")).unwrap())
            .unwrap();
    let history = training["history"].as_array().unwrap();
    assert_eq!(history.len(), 3, "validations at steps 0, 20, 40");
    // The random-weight fixture barely learns a task whose answer depends on the state (its
    // attention cannot find the state yet); the reference runs on SmolLM2 show learning
    // (docs/lora.md). Here: the validations ran and every figure is finite.
    for entry in history {
        assert!(entry["loss"].as_f64().unwrap().is_finite(), "{entry}");
    }

    let adapter = Adapter::load(&output.join("adapter.safetensors")).unwrap();
    assert_eq!(
        adapter.meta.training["config"]["data"][0]["sha256"],
        sha256(&data),
        "the data's digest is recorded"
    );
    assert_eq!(adapter.meta.lora.layers, 2);
    let options = ruling_core::Options::default();
    let plain = ruling_core::load_candle(base().to_str().unwrap(), &options).unwrap();
    assert_eq!(adapter.meta.base, plain.base_model());

    // The calibration names the adapter: it serves with it, and is refused without it.
    let calibration = Calibration::load(output.join("calibration.json")).unwrap();
    let adapted = plain.with_adapter(&adapter).unwrap();
    let engine =
        DecoderEngine::new(adapted, EngineOptions::default(), Some(calibration.clone())).unwrap();
    let refused = DecoderEngine::new(plain, EngineOptions::default(), Some(calibration))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("adapter_digest"), "{refused}");

    // What the trainer read is what the engine reads: the training pass over the engine's
    // own prompt gives the engine's probabilities (identity calibration here). The best
    // adapter may be the untrained one on this fixture, so the last step's weights are used.
    let last = candle_core::safetensors::load(
        output.join("run/step-000040/weights.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let moved = last
        .iter()
        .filter(|(name, _)| name.ends_with("lora_b"))
        .any(|(_, t)| {
            t.abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
                > 0.0
        });
    assert!(moved, "training moved the adapter's B matrices");
    let mut tensors: Vec<(String, candle_core::Tensor)> = last.into_iter().collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let trained = scratch.path().join("last.safetensors");
    std::fs::write(
        &trained,
        ruling_candle::lora::adapter_bytes(&adapter.meta, &tensors).unwrap(),
    )
    .unwrap();
    let adapter = Adapter::load(&trained).unwrap();
    // Dense f32 matrices, so the two paths differ only in the order of float sums (quantized
    // matmuls also round each activation row, which amplifies that).
    let f32_options = ruling_core::Options {
        dtype: ruling_candle::WeightDtype::F32,
        ..Default::default()
    };
    let plain = ruling_core::load_candle(base().to_str().unwrap(), &f32_options).unwrap();
    let weights = adapter
        .weights_for(plain.decoder().config(), &plain.base_model())
        .unwrap();
    let served = DecoderEngine::new(
        plain.with_adapter(&adapter).unwrap(),
        EngineOptions::default(),
        None,
    )
    .unwrap();
    let valid = request("my card was charged twice (ticket 1000)");
    let response = served.evaluate(&valid).unwrap();
    let base_engine = DecoderEngine::new(
        ruling_core::load_candle(base().to_str().unwrap(), &f32_options).unwrap(),
        EngineOptions::default(),
        None,
    )
    .unwrap();
    assert_ne!(
        serde_json::to_value(&base_engine.evaluate(&valid).unwrap().answers).unwrap(),
        serde_json::to_value(&response.answers).unwrap(),
        "the adapter moved the answers away from the base's"
    );
    for question in valid.questions() {
        let n = match question.kind() {
            ruling_schema::QuestionKind::Choice { options, .. } => options.len(),
            _ => 2,
        };
        let order: Vec<usize> = (0..n).collect();
        let prompt = served
            .question_prompt(valid.state(), question.kind(), &order)
            .unwrap();
        let logits: Vec<f32> = plain
            .decoder()
            .train_code_logits(
                std::slice::from_ref(&prompt.tokens),
                &prompt.codes,
                &weights,
                None,
            )
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1()
            .unwrap();
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        let probs: Vec<f64> = logits
            .iter()
            .map(|l| f64::from((l - max).exp() / sum))
            .collect();
        let answered = match &response.answers[question.id()] {
            ruling_schema::Answer::Choice { probabilities, .. } => prompt
                .keys
                .iter()
                .map(|k| probabilities[k.as_str()])
                .collect::<Vec<f64>>(),
            ruling_schema::Answer::Noul { noul, .. } => vec![*noul, 1.0 - *noul],
            other => panic!("unexpected answer {other:?}"),
        };
        for (a, b) in probs.iter().zip(&answered) {
            assert!(
                (a - b).abs() < 1e-4,
                "{}: trained {a} vs served {b}",
                question.id()
            );
        }
    }
    drop(engine);
}

#[test]
fn a_killed_run_resumes_to_bit_identical_weights() {
    let scratch = tempfile::tempdir().unwrap();
    let data = records(scratch.path());
    let steps = 60;
    let straight = scratch.path().join("straight");
    run(train(&data, &straight, steps, 5));

    let killed = scratch.path().join("killed");
    let mut child = train(&data, &killed, steps, 5)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if latest_step(&killed).is_some_and(|s| s >= 10) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the run never saved step 10"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed mid-run");
    let at_kill = latest_step(&killed).unwrap();
    assert!(at_kill < steps, "killed before the end (at step {at_kill})");

    let resumed = run(train(&data, &killed, steps, 5));
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(log.contains("resuming"), "{log}");
    let weights =
        |dir: &Path| sha256(&dir.join(format!("run/step-{steps:06}/weights.safetensors")));
    assert_eq!(
        weights(&killed),
        weights(&straight),
        "resumed from step {at_kill}"
    );
    assert_eq!(
        sha256(&killed.join("run/best.safetensors")),
        sha256(&straight.join("run/best.safetensors"))
    );
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let scratch = tempfile::tempdir().unwrap();
    let data = records(scratch.path());

    // A layout the base cannot take.
    let output = scratch.path().join("out-layers");
    let message = fails(train_with(&data, &output, 5, 5, &["--layers", "9"]));
    assert!(
        message.contains("9 adapted layers, but the model has 2"),
        "{message}"
    );
    assert!(!output.exists(), "nothing written");

    let message = fails(train_with(
        &data,
        &output,
        5,
        5,
        &["--layers", "2", "--projections", "q,qkv"],
    ));
    assert!(
        message.contains("\"qkv\"") && message.contains("gate"),
        "{message}"
    );
    assert!(!output.exists());

    // A held-out state (a BoolQ passage with an odd idx) in a record file.
    let line = std::fs::read_to_string(workspace().join("../shared/datasets/boolq/val.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|row| row["idx"].as_u64().is_some_and(|i| i % 2 == 1))
        .unwrap();
    let leaked = scratch.path().join("leaked.jsonl");
    let record = serde_json::json!({
        "family": "leak", "state": line["passage"],
        "questions": {"q": {"type": "noul", "instructions": "is it?"}}, "labels": {"q": true}
    });
    let good = std::fs::read_to_string(&data).unwrap();
    std::fs::write(&leaked, format!("{good}{record}\n")).unwrap();
    let output = scratch.path().join("out-leaked");
    let message = fails(train(&leaked, &output, 5, 5));
    assert!(message.contains("held-out"), "{message}");
    assert!(!output.exists());

    // A run resumed with another LoRA layout.
    let output = scratch.path().join("out");
    run(train(&data, &output, 2, 2));
    let message = fails(train_with(
        &data,
        &output,
        4,
        2,
        &["--layers", "2", "--rank", "8"],
    ));
    assert!(message.contains("different lora"), "{message}");
}
