//! `ruling-eval batch` in process on the shipped judge: every request answered once, ids kept;
//! a run cut short (its output truncated mid-line, as a kill leaves it) resumed to exactly one
//! line per request; a request the engine refuses written as refused, not retried.

mod common;

use std::collections::HashMap;
use std::io::Write as _;

use common::{ruling_eval, succeed};
use serde_json::{Value, json};

fn input(dir: &std::path::Path, count: usize) -> std::path::PathBuf {
    let path = dir.join("requests.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    for i in 0..count {
        let request = json!({
            "model": "jev-latest",
            "state": format!("Ticket {i}: I was charged twice for invoice {i}."),
            "questions": {"billing": {"type": "noul", "instructions": "Is this about billing?"}}
        });
        // Every third line bare (its id is its line number), the others named.
        let line = if i % 3 == 0 {
            request
        } else {
            json!({"id": format!("ticket-{i}"), "request": request})
        };
        writeln!(file, "{line}").unwrap();
    }
    // A request no engine takes: a choice of one option.
    let bad = json!({"id": "bad", "request": {"model": "jev-latest", "state": "s",
        "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {"only": null}}}}});
    writeln!(file, "{bad}").unwrap();
    path
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn batch(input: &std::path::Path, output: &std::path::Path) {
    succeed(
        ruling_eval()
            .args(["batch", "--model", "ruling-judge-minilm-l6", "--input"])
            .arg(input)
            .arg("--output")
            .arg(output)
            .output()
            .unwrap(),
    );
}

#[test]
fn every_request_is_answered_exactly_once_across_a_resume() {
    let dir = std::env::temp_dir().join(format!("ruling-batch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = input(&dir, 30);
    let output = dir.join("answers.jsonl");
    batch(&input, &output);
    let whole = lines(&output);
    assert_eq!(whole.len(), 31);

    // A run killed after 12 lines, the 13th half written.
    let text = std::fs::read_to_string(&output).unwrap();
    let mut cut: String = text.lines().take(12).map(|l| format!("{l}\n")).collect();
    let thirteenth = text.lines().nth(12).unwrap();
    cut.push_str(&thirteenth[..thirteenth.len() / 2]);
    std::fs::write(&output, cut).unwrap();
    batch(&input, &output);
    let resumed = lines(&output);
    assert_eq!(resumed.len(), 31, "one line per request");

    let by_id = |lines: &[Value]| -> HashMap<String, Value> {
        lines
            .iter()
            .map(|l| (l["id"].to_string(), l.clone()))
            .collect()
    };
    let (first, second) = (by_id(&whole), by_id(&resumed));
    assert_eq!(second.len(), 31, "no id twice");
    for (id, line) in &first {
        assert_eq!(
            second[id]["response"]["answers"], line["response"]["answers"],
            "{id}: the same answer after a resume"
        );
    }
    assert_eq!(
        second["1"]["status"], 200,
        "a bare request's id is its line number"
    );
    assert_eq!(second["\"ticket-1\""]["status"], 200);
    let bad = &second["\"bad\""];
    assert_eq!(bad["status"], 422);
    assert!(
        bad["detail"].to_string().contains("at least two options"),
        "{bad}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
