//! `ruling-train encoder` as a user runs it, on the generated tiny encoders and a small record
//! file: it trains and writes a checkpoint the engine serves; a run killed for real resumes to
//! bit-identical weights; two runs average into one checkpoint; bad input is refused before
//! anything is written.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{fails, latest_step, run, sha256, ticket_records, workspace};

fn fixture(name: &str) -> PathBuf {
    let dir = workspace().join("fixtures/generated").join(name);
    assert!(dir.is_dir(), "fixtures missing: run `cargo xtask fixtures`");
    dir
}

/// The tickets the trainer learns from (without a score question).
fn records(dir: &Path) -> PathBuf {
    ticket_records(dir, 90, false)
}

fn train(data: &Path, output: &Path, base: &Path, steps: u64, eval_every: u64) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruling-train"));
    command
        .args(["encoder", "--datasets", "none", "--dtype", "f32"])
        .arg("--base")
        .arg(base)
        .arg("--data")
        .arg(data)
        .arg("--output")
        .arg(output)
        .args(["--steps", &steps.to_string()])
        .args(["--eval-every", &eval_every.to_string()])
        .args([
            "--batch-tokens",
            "600",
            "--valid-fraction",
            "0.2",
            "--learning-rate",
            "1e-3",
            "--warmup",
            "5",
        ]);
    command
}

fn final_weights(output: &Path, steps: u64) -> String {
    sha256(&output.join(format!("run/step-{steps:06}/weights.safetensors")))
}

#[test]
fn trains_a_checkpoint_the_engine_serves() {
    let scratch = tempfile::tempdir().unwrap();
    let data = records(scratch.path());
    let output = scratch.path().join("out");
    let mut command = train(&data, &output, &fixture("tiny-bert"), 40, 20);
    command.args(["--calibration-share", "toy=0.2"]);
    let done = run(command);
    let log = String::from_utf8_lossy(&done.stderr);
    assert!(log.contains("validation loss"), "{log}");
    // A fifth of the records is neither trained on nor validated: only the temperatures see it.
    assert!(log.contains("kept for calibration only"), "{log}");
    assert!(log.contains("calibration: choice temperature"), "{log}");
    // And each family's ECE on the questions no step saw.
    assert!(log.contains("calibration: toy over"), "{log}");
    for file in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "decision.json",
        "calibration.json",
    ] {
        assert!(output.join(file).is_file(), "{file} written");
    }
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("decision.json")).unwrap())
            .unwrap();
    let history = meta["training"]["history"].as_array().unwrap();
    assert_eq!(history.len(), 3, "validations at steps 0, 20, 40");
    assert_eq!(
        meta["training"]["config"]["data"][0]["sha256"],
        sha256(&data),
        "the data's digest is recorded"
    );
    let first = history[0]["loss"].as_f64().unwrap();
    let best = history
        .iter()
        .map(|h| h["loss"].as_f64().unwrap())
        .fold(f64::MAX, f64::min);
    assert!(best < first, "validation loss falls: {first} -> {best}");

    // The engine serves it, with the calibration the run fitted.
    let engine = ruling_encoder::EncoderEngine::load(&output, Default::default()).unwrap();
    use ruling_backend::Engine;
    let request: ruling_schema::SystemOneRequest = serde_json::from_value(serde_json::json!({
        "model": "m", "state": "my card was charged twice (ticket 1000)",
        "questions": {"team": {"type": "choice", "instructions": "which team should handle it?",
                      "criteria": {"billing": "refunds and invoices", "tech": "bugs", "shipping": "parcels"}}}
    }))
    .unwrap();
    let valid = request.validate(&Default::default()).unwrap();
    let response = engine.evaluate(&valid).unwrap();
    let ruling_schema::Answer::Choice { choice, .. } = &response.answers["team"] else {
        panic!()
    };
    assert_eq!(choice, "billing", "it learned the toy task");
}

#[test]
fn a_killed_run_resumes_to_bit_identical_weights() {
    let scratch = tempfile::tempdir().unwrap();
    let data = records(scratch.path());
    let base = fixture("tiny-bert");
    let steps = 300;
    let straight = scratch.path().join("straight");
    run(train(&data, &straight, &base, steps, 10));

    let killed = scratch.path().join("killed");
    let mut child = train(&data, &killed, &base, steps, 10)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if latest_step(&killed).is_some_and(|s| s >= 40) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the run never saved step 40"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed mid-run");
    let at_kill = latest_step(&killed).unwrap();
    assert!(at_kill < steps, "killed before the end (at step {at_kill})");

    let resumed = run(train(&data, &killed, &base, steps, 10));
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(log.contains("resuming"), "{log}");
    assert_eq!(
        final_weights(&killed, steps),
        final_weights(&straight, steps),
        "resumed from step {at_kill}"
    );
    assert_eq!(
        sha256(&killed.join("model.safetensors")),
        sha256(&straight.join("model.safetensors"))
    );
}

fn soup(output: &Path, checkpoints: &[&Path]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruling-train"));
    command
        .arg("soup")
        .arg("--output")
        .arg(output)
        .args(checkpoints);
    command
}

#[test]
fn averages_one_recipes_runs_into_a_checkpoint_the_engine_serves() {
    let scratch = tempfile::tempdir().unwrap();
    let data = records(scratch.path());
    let base = fixture("tiny-bert");
    let (seed0, seed1) = (scratch.path().join("seed0"), scratch.path().join("seed1"));
    run(train(&data, &seed0, &base, 20, 10));
    let mut second = train(&data, &seed1, &base, 20, 10);
    second.args(["--seed", "1"]);
    run(second);

    let output = scratch.path().join("soup");
    let done = run(soup(&output, &[&seed0, &seed1]));
    let log = String::from_utf8_lossy(&done.stderr);
    assert!(log.contains("validation: the soup loss"), "{log}");
    assert!(log.contains("calibration: choice temperature"), "{log}");

    // Every tensor is the mean of the two runs' (all f32 here).
    let open = |dir: &Path| ruling_encoder::EncoderFiles::open(dir).unwrap();
    let (a, b, mean) = (open(&seed0), open(&seed1), open(&output));
    assert_eq!(mean.tensors.len(), a.tensors.len());
    let values = |t: &candle_core::Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for (name, tensor) in &mean.tensors {
        let (x, y) = (values(&a.tensors[name]), values(&b.tensors[name]));
        let gap = values(tensor)
            .iter()
            .zip(x.iter().zip(&y))
            .map(|(m, (x, y))| (m - (x + y) / 2.0).abs())
            .fold(0f32, f32::max);
        assert!(
            gap <= 1e-6,
            "{name} is the mean of the runs' (off by {gap})"
        );
    }
    let meta = mean.meta.as_ref().unwrap();
    let ingredients = meta.training["soup"].as_array().unwrap();
    assert_eq!(ingredients.len(), 2);
    assert_eq!(ingredients[1]["seed"], 1);
    assert!(ingredients[0]["validation"]["loss"].as_f64().is_some());
    let calibration: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("calibration.json")).unwrap())
            .unwrap();
    assert_eq!(
        calibration["provenance"]["revision"], meta.weights_sha256,
        "the temperatures name the soup's weights"
    );
    ruling_encoder::EncoderEngine::load(&output, Default::default()).unwrap();

    // Runs of different recipes are refused, naming the setting, and nothing is written.
    let other = scratch.path().join("other");
    let mut other_recipe = train(&data, &other, &base, 20, 10);
    other_recipe.args(["--weight-decay", "0.1"]);
    run(other_recipe);
    let refused = scratch.path().join("refused");
    let message = fails(soup(&refused, &[&seed0, &other]));
    assert!(message.contains("weight_decay"), "{message}");
    assert!(!refused.exists(), "nothing written");
    // So is a base encoder, which has no training record.
    let message = fails(soup(&refused, &[&seed0, &base]));
    assert!(message.contains("not a trained checkpoint"), "{message}");
    assert!(!refused.exists());
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let scratch = tempfile::tempdir().unwrap();
    let base = fixture("tiny-bert");

    let broken = scratch.path().join("broken.jsonl");
    let good = std::fs::read_to_string(records(scratch.path())).unwrap();
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(3, "{\"family\": \"toy\", \"state\": ");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    let output = scratch.path().join("out-broken");
    let message = fails(train(&broken, &output, &base, 5, 5));
    assert!(
        message.contains("broken.jsonl:4:"),
        "the file and line are named: {message}"
    );
    assert!(!output.exists(), "nothing written");

    // A base that lacks its weights.
    let incomplete = scratch.path().join("incomplete");
    std::fs::create_dir_all(&incomplete).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(base.join(file), incomplete.join(file)).unwrap();
    }
    let data = scratch.path().join("records.jsonl");
    let output = scratch.path().join("out-incomplete");
    let message = fails(train(&data, &output, &incomplete, 5, 5));
    assert!(message.contains("model.safetensors"), "{message}");
    assert!(!output.exists());

    // A run resumed on another base.
    let output = scratch.path().join("out");
    run(train(&data, &output, &base, 4, 2));
    let message = fails(train(&data, &output, &fixture("tiny-modernbert"), 4, 2));
    assert!(message.contains("base"), "{message}");

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
    std::fs::write(&leaked, format!("{good}{record}\n")).unwrap();
    let output = scratch.path().join("out-leaked");
    let message = fails(train(&leaked, &output, &base, 5, 5));
    assert!(message.contains("held-out"), "{message}");
    assert!(!output.exists());
}
