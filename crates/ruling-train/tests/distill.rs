//! `ruling-train distill write` and `distill answer` as a user runs them, on the generated tiny
//! decoder (on llama.cpp, as the reference run uses): a stage stopped part way and rerun,
//! even with its journal's last line cut in half as a kill leaves it, ends with exactly the
//! records of an uninterrupted run; changed settings, held-out states and single-order
//! answering are refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fails, run, workspace};

fn tiny() -> PathBuf {
    let path = workspace().join("fixtures/generated/tiny-llama.gguf");
    assert!(
        path.is_file(),
        "fixtures missing: run `cargo xtask fixtures`"
    );
    path
}

fn states(dir: &Path) -> PathBuf {
    let lines: Vec<String> = (0..8)
        .map(|i| {
            serde_json::json!({"state": format!("ticket {i}: my parcel number {i} never came")})
                .to_string()
        })
        .collect();
    let path = dir.join("states.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn write(dir: &Path, states: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruling-train"));
    command
        .args([
            "distill",
            "write",
            "--datasets",
            "none",
            "--backend",
            "llama",
        ])
        .args(["--batch", "3", "--max-tokens", "24", "--temperature", "0.9"])
        .arg("--writer")
        .arg(tiny())
        .arg("--states")
        .arg(states)
        .arg("--dir")
        .arg(dir)
        .args(extra);
    command
}

fn answer(dir: &Path, extra: &[&str]) -> Command {
    answer_at(dir, "2", extra)
}

fn answer_at(dir: &Path, rotations: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruling-train"));
    command
        .args([
            "distill",
            "answer",
            "--backend",
            "llama",
            "--rotations",
            rotations,
        ])
        .args(["--calibration", "none"])
        .arg("--teacher")
        .arg(tiny())
        .arg("--dir")
        .arg(dir)
        .args(extra);
    command
}

/// Cut the last line of `path` in half, as a kill during its write leaves it.
fn cut_last_line(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let body = text.trim_end_matches('\n');
    let start = body.rfind('\n').map_or(0, |i| i + 1);
    let cut = start + (body.len() - start) / 2;
    std::fs::write(path, &text[..cut]).unwrap();
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_stopped_and_cut_writer_run_resumes_to_the_same_journal() {
    let scratch = tempfile::tempdir().unwrap();
    let states = states(scratch.path());
    let whole = scratch.path().join("whole");
    let resumed = scratch.path().join("resumed");
    run(write(&whole, &states, &[]));

    run(write(&resumed, &states, &["--stop-after", "2"]));
    let first = lines(&resumed.join("written.jsonl"));
    assert_eq!(first.len(), 3, "a stop falls at the end of a batch of 3");
    cut_last_line(&resumed.join("written.jsonl"));
    run(write(&resumed, &states, &[]));

    let a = lines(&whole.join("written.jsonl"));
    let b = lines(&resumed.join("written.jsonl"));
    assert_eq!(a.len(), 8);
    let keys = |l: &[serde_json::Value]| {
        let mut k: Vec<String> = l.iter().map(|v| v["key"].to_string()).collect();
        k.sort();
        k
    };
    assert_eq!(keys(&a), keys(&b));
    for line in &a {
        let other = b.iter().find(|o| o["key"] == line["key"]).unwrap();
        assert_eq!(
            line, other,
            "a state written again after a kill reads the same"
        );
        // A random tiny decoder writes no JSON: every reply is dropped whole, and counted.
        assert!(line["record"].is_null());
        assert_eq!(line["dropped"]["not_json"], 1, "{line}");
    }
    let stats = std::fs::read_to_string(whole.join("stats.md")).unwrap();
    assert!(
        stats.contains("8 states, 0 with at least one question kept"),
        "{stats}"
    );

    let refused = fails(write(&whole, &states, &["--seed", "1"]));
    assert!(
        refused.contains("seed = 0") && refused.contains("gives 1"),
        "{refused}"
    );
}

#[test]
fn held_out_states_are_never_written_about() {
    let scratch = tempfile::tempdir().unwrap();
    // A BoolQ row with an odd idx: held out (shared/datasets/README.md).
    let boolq = workspace().join("../shared/datasets/boolq/val.jsonl");
    let row = std::fs::read_to_string(&boolq)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["idx"].as_u64().is_some_and(|i| i % 2 == 1))
        .unwrap();
    let path = scratch.path().join("held.jsonl");
    std::fs::write(
        &path,
        serde_json::json!({"state": row["passage"]}).to_string() + "\n",
    )
    .unwrap();
    let stderr = fails(write(&scratch.path().join("d"), &path, &[]));
    assert!(stderr.contains("held-out"), "{stderr}");
    let stderr = fails(write(
        &scratch.path().join("e"),
        &states(scratch.path()),
        &["--datasets", "banking77"],
    ));
    assert!(
        stderr.contains("banking77 has no development split"),
        "{stderr}"
    );
}

/// A writer journal with questions of every type, one record twice, one too long to answer.
fn written(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let questions = serde_json::json!({
        "late": {"type": "noul", "instructions": "Is the parcel late?"},
        "team": {"type": "choice", "instructions": "Which team?",
                 "criteria": {"shipping": "parcels", "billing": "money", "tech": "bugs"}},
        "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "cross", "furious"]}
    });
    let mut lines = Vec::new();
    for i in 0..6 {
        let state = if i == 5 {
            "word ".repeat(5000)
        } else {
            format!("parcel {} never came", i % 5)
        };
        let record = serde_json::json!({
            "id": format!("distill:toy:{i}"), "family": "distill_toy",
            "state": state, "questions": questions
        });
        lines.push(
            serde_json::json!({
                "key": format!("k{i}"), "source": "toy", "batch": 0, "prompt_tokens": 1,
                "reply_tokens": 1, "finish": "stop", "reply": "", "dropped": {},
                "record": if i == 4 { serde_json::json!(null) } else { record }
            })
            .to_string(),
        );
    }
    // Record 0 again: answered once.
    lines.push(lines[0].clone());
    std::fs::write(dir.join("written.jsonl"), lines.join("\n") + "\n").unwrap();
}

#[test]
fn a_stopped_and_cut_answer_run_resumes_to_the_same_records() {
    let scratch = tempfile::tempdir().unwrap();
    let whole = scratch.path().join("whole");
    let resumed = scratch.path().join("resumed");
    written(&whole);
    written(&resumed);
    run(answer(&whole, &[]));
    run(answer(&resumed, &["--stop-after", "2"]));
    assert_eq!(lines(&resumed.join("answered.jsonl")).len(), 2);
    cut_last_line(&resumed.join("answered.jsonl"));
    run(answer(&resumed, &[]));

    let a = lines(&whole.join("answered.jsonl"));
    assert_eq!(a, lines(&resumed.join("answered.jsonl")));
    let ids: Vec<&str> = a.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "distill:toy:0",
            "distill:toy:1",
            "distill:toy:2",
            "distill:toy:3"
        ]
    );
    for record in &a {
        let refs = &record["references"];
        let late = &refs["late"]["target"];
        let sum = late["yes"].as_f64().unwrap() + late["no"].as_f64().unwrap();
        assert!((sum - 1.0).abs() < 1e-9, "{late}");
        let team: Vec<&String> = refs["team"]["target"].as_object().unwrap().keys().collect();
        assert_eq!(team, ["shipping", "billing", "tech"]);
        let anger: Vec<&String> = refs["anger"]["target"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(anger, ["0", "1", "2"]);
    }
    let skipped = lines(&whole.join("skipped.jsonl"));
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["id"], "distill:toy:5");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("maximum context length")
    );
    assert_eq!(lines(&resumed.join("skipped.jsonl")), skipped);

    let stderr = fails(answer_at(&whole, "1", &[]));
    assert!(stderr.contains("at least 2"), "{stderr}");
    let stderr = fails(answer_at(&whole, "3", &[]));
    assert!(stderr.contains("rotations = 2"), "{stderr}");
}
