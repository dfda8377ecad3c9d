//! `ruling-eval ask` end to end: the built binary against the generated tiny fixture (random
//! weights, so only the shape of the output is checked) and against SmolLM2-135M from the
//! test cache.

use std::io::Write as _;
use std::process::{Command, Stdio};

mod common;

use common::{ruling_eval, succeed, tiny_llama};
use ruling_schema::{Answer, EngineKind, SystemOneResponse};

const QUESTIONS: [&str; 3] = [
    "billing=noul:Is this ticket about billing?",
    "team=choice:Which team should handle it?:billing,tech,other",
    "urgency=score:How urgent is it?:can wait,this week,today",
];

fn ask(model: &str, extra: &[&str]) -> Command {
    let mut command = ruling_eval();
    command.args(["ask", "--model", model]);
    for q in QUESTIONS {
        command.args(["--question", q]);
    }
    command.args(extra);
    command
}

fn parse_response(stdout: &str) -> SystemOneResponse {
    let response: SystemOneResponse = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("--json output is not a System One response ({e}):\n{stdout}"));
    response.check().expect("the response keeps its invariants");
    assert_eq!(
        response.answers.keys().collect::<Vec<_>>(),
        ["billing", "team", "urgency"]
    );
    match &response.answers["team"] {
        Answer::Choice { probabilities, .. } => {
            assert_eq!(
                probabilities.keys().collect::<Vec<_>>(),
                ["billing", "tech", "other"]
            );
        }
        other => panic!("team answered as {other:?}"),
    }
    match &response.answers["urgency"] {
        Answer::Score { legend, .. } => {
            assert_eq!(legend["0"], "can wait");
            assert_eq!(legend["2"], "today");
        }
        other => panic!("urgency answered as {other:?}"),
    }
    assert!(response.usage.input_tokens > 0);
    response
}

#[test]
fn tiny_fixture_json_output_is_a_checked_response() {
    let stdout = succeed(
        ask(
            &tiny_llama(),
            &["--state", "My card was charged twice.", "--json"],
        )
        .output()
        .unwrap(),
    )
    .0;
    let response = parse_response(&stdout);
    assert!(response.evaluation_trace.is_none());
}

#[test]
fn tiny_fixture_table_names_every_question_and_the_timings() {
    let stdout = succeed(
        ask(
            &tiny_llama(),
            &[
                "--state",
                "My card was charged twice.",
                "--rotations",
                "2",
                "--prior",
            ],
        )
        .output()
        .unwrap(),
    )
    .0;
    for needle in [
        "question",
        "billing   noul",
        "P(yes) = ",
        "team      choice",
        "urgency   score",
        "can wait",
        "loaded in ",
        "evaluated in ",
        "tokens read",
    ] {
        assert!(
            stdout.contains(needle),
            "{needle:?} missing from:\n{stdout}"
        );
    }
}

#[test]
fn state_from_a_json_file_and_from_stdin_with_trace() {
    let dir = std::env::temp_dir().join(format!("ruling-eval-ask-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ticket.json");
    std::fs::write(
        &file,
        r#"{"subject": "Double charge", "body": "Refund one, please."}"#,
    )
    .unwrap();
    let state = format!("@{}", file.display());
    let stdout = succeed(
        ask(
            &tiny_llama(),
            &["--state", &state, "--json", "--trace", "--dtype", "f32"],
        )
        .output()
        .unwrap(),
    )
    .0;
    let response = parse_response(&stdout);
    let trace = response.evaluation_trace.expect("--trace asks for a trace");
    assert_eq!(trace.engine, EngineKind::Decoder);
    assert_eq!(
        trace.questions.keys().collect::<Vec<_>>(),
        ["billing", "team", "urgency"]
    );
    assert_eq!(trace.questions["billing"].rotations.len(), 1, "{trace:?}");
    // The printed JSON is the wire shape: questions under "questions", beside the engine.
    let printed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let printed = &printed["evaluation_trace"];
    assert_eq!(printed["engine"], "decoder", "{printed}");
    assert!(
        printed["questions"]["billing"]["rotations"].is_array(),
        "{printed}"
    );
    assert!(printed["prefix_tokens"].as_u64().is_some_and(|n| n > 0));

    let mut child = ask(&tiny_llama(), &["--state", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"plain text from stdin, not JSON")
        .unwrap();
    parse_response(&succeed(child.wait_with_output().unwrap()).0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_questions_fail_with_the_expected_form() {
    let output = ruling_eval()
        .args([
            "ask",
            "--model",
            &tiny_llama(),
            "--state",
            "s",
            "--question",
            "team=choice:Which team?",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("ID=choice:TEXT:KEY,KEY"), "{stderr}");
    assert!(stderr.contains("option keys after the text"), "{stderr}");

    let output = ruling_eval()
        .args([
            "ask",
            "--model",
            &tiny_llama(),
            "--state",
            "s",
            "-q",
            "a=noul:x?",
            "-q",
            "a=noul:y?",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"a\" is given twice"), "{stderr}");

    let output = ruling_eval()
        .args([
            "ask",
            "--model",
            &tiny_llama(),
            "--state",
            "s",
            "-q",
            "a=noul:x?",
            "--dtype",
            "q4",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("expected one of auto, native, f32, f16, q8_0")
    );
}

#[test]
fn smollm2_answers_from_the_test_cache() {
    let stdout = succeed(
        ask(
            "smollm2-135m",
            &[
                "--state",
                "Hi, my card was charged twice for the March invoice. Please refund one.",
                "--json",
            ],
        )
        .output()
        .unwrap(),
    )
    .0;
    let response = parse_response(&stdout);
    assert_eq!(response.model, "smollm2-135m");
}
