//! What the trainer tests share: the workspace, running `ruling-train`, and reading a run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run a trainer command to success, or fail the test with its stderr.
pub fn run(mut command: Command) -> Output {
    let output = command.output().expect("ruling-train starts");
    assert!(
        output.status.success(),
        "ruling-train failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Run a trainer command that must be refused; its stderr.
pub fn fails(mut command: Command) -> String {
    let output = command.output().expect("ruling-train starts");
    assert!(!output.status.success(), "ruling-train should have refused");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn sha256(path: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

/// The latest saved step of a run, if it has saved one.
pub fn latest_step(output: &Path) -> Option<u64> {
    let name = std::fs::read_to_string(output.join("run/latest")).ok()?;
    name.trim().strip_prefix("step-")?.parse().ok()
}

/// `count` labelled records about short support tickets, no held-out states: a three-way
/// choice ("team") and a noul ("money"), and with `score` a three-level score ("urgency").
/// Written to `dir/records.jsonl`.
pub fn ticket_records(dir: &Path, count: usize, score: bool) -> PathBuf {
    let topics = [
        ("my card was charged twice", "billing"),
        ("the app crashes when i log in", "tech"),
        ("where is my parcel", "shipping"),
        ("i want a refund for the invoice", "billing"),
        ("the screen stays black", "tech"),
        ("the courier never came", "shipping"),
    ];
    let mut lines = Vec::new();
    for i in 0..count {
        let (text, team) = topics[i % topics.len()];
        let mut record = serde_json::json!({
            "id": format!("toy:{i}"),
            "family": "toy",
            "state": format!("{text} (ticket {i})"),
            "questions": {
                "team": {"type": "choice", "instructions": "which team should handle it?",
                         "criteria": {"billing": "refunds and invoices", "tech": "bugs", "shipping": "parcels"}},
                "money": {"type": "noul", "instructions": "is it about money?"}
            },
            "labels": {"team": team, "money": team == "billing"}
        });
        if score {
            record["questions"]["urgency"] = serde_json::json!({
                "type": "score", "instructions": "how urgent is it?",
                "criteria": ["not urgent", "soon", "right now"]
            });
            record["labels"]["urgency"] = serde_json::json!(i % 3);
        }
        lines.push(record.to_string());
    }
    let path = dir.join("records.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}
