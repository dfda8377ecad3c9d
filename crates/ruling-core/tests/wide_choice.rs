//! A Choice wider than the 26 letters on the real SmolLM2-135M: one pass per rotation with
//! the two-letter codes its tokenizer proves, on every decoder backend this build has; and
//! the two-stage path when one pass is limited to the letters.

use std::path::PathBuf;

use ruling_core::{DecoderBackend, Options, Ruling};
use ruling_schema::{Answer, SystemOneRequest, SystemOneResponse};
use serde_json::json;

/// Seventy-seven intents, as wide as BANKING77.
const INTENTS: usize = 77;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

fn load(backend: DecoderBackend, rotations: u32, max_options_per_pass: Option<usize>) -> Ruling {
    let mut options = Options {
        backend,
        rotations: Some(rotations),
        cache_dir: Some(workspace().join("target/ruling-cache")),
        ..Options::default()
    };
    if let Some(n) = max_options_per_pass {
        options.max_options_per_pass = n;
    }
    Ruling::load("smollm2-135m", &options).expect("smollm2-135m loads from target/ruling-cache")
}

fn keys() -> Vec<String> {
    (0..INTENTS).map(|i| format!("intent_{i:02}")).collect()
}

fn wide_request() -> SystemOneRequest {
    let criteria: serde_json::Map<String, serde_json::Value> = keys()
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, json!(format!("request number {i}"))))
        .collect();
    serde_json::from_value(json!({
        "model": "smollm2-135m",
        "state": "I would like to move money from my savings account to my current account.",
        "trace": true,
        "questions": {"intent": {"type": "choice", "instructions": "Which intent is this?", "criteria": criteria}}
    }))
    .expect("a wire request")
}

fn evaluate(ruling: &Ruling) -> SystemOneResponse {
    let request = wide_request();
    let response = ruling.evaluate(&request).expect("the request is answered");
    let valid = request
        .validate(&ruling.info().capabilities)
        .expect("valid");
    response
        .check_against(&valid)
        .expect("a well-formed answer");
    response
}

fn backends() -> Vec<DecoderBackend> {
    let mut all = vec![DecoderBackend::Candle];
    if DecoderBackend::LLAMA_BUILT {
        all.push(DecoderBackend::Llama);
    }
    all
}

#[test]
fn seventy_seven_options_are_one_pass_per_rotation() {
    for backend in backends() {
        let response = evaluate(&load(backend, 2, None));
        let trace = &response
            .evaluation_trace
            .as_ref()
            .expect("traced")
            .questions["intent"];
        assert!(trace.stage_one.is_none(), "{backend}: asked in one pass");
        assert_eq!(trace.rotations.len(), 2, "{backend}");
        for rotation in &trace.rotations {
            assert_eq!(
                rotation.order.len(),
                INTENTS,
                "{backend}: every option shown"
            );
        }
        let Answer::Choice { probabilities, .. } = &response.answers["intent"] else {
            panic!("{backend}: a choice answer");
        };
        assert!(
            probabilities.values().all(|&p| p > 0.0),
            "{backend}: no option is ruled out in one pass"
        );
    }
}

#[test]
fn limited_to_the_letters_it_takes_two_stages() {
    let response = evaluate(&load(DecoderBackend::Candle, 1, Some(26)));
    let trace = &response
        .evaluation_trace
        .as_ref()
        .expect("traced")
        .questions["intent"];
    assert_eq!(trace.stage_one.as_ref().map(Vec::len), Some(INTENTS));
    let Answer::Choice { probabilities, .. } = &response.answers["intent"] else {
        panic!("a choice answer");
    };
    assert_eq!(
        probabilities.values().filter(|&&p| p == 0.0).count(),
        INTENTS - 8
    );
}

fn about(state: &str) -> SystemOneRequest {
    let mut request = wide_request();
    request.state = serde_json::from_value(json!(state)).expect("a state");
    request
}

#[test]
fn a_wide_question_about_short_states_is_asked_question_first_its_head_reused() {
    for backend in backends() {
        let ruling = load(backend, 1, None);
        let evaluate = |state: &str| {
            let response = ruling.evaluate(&about(state)).expect("answered");
            let trace = response.evaluation_trace.clone().expect("traced");
            (response, trace)
        };
        let (first, trace) = evaluate("Move 50 pounds to savings.");
        let question = &trace.questions["intent"];
        assert_eq!(question.question_prefix_tokens.len(), 1, "{backend}");
        assert_eq!(
            trace.prefix_cached, None,
            "{backend}: the state is in the branch"
        );
        let hits = ruling.prefix_cache_stats().expect("a prefix cache").hits;
        evaluate("What is my balance?");
        let (again, _) = evaluate("Move 50 pounds to savings.");
        assert_eq!(
            ruling.prefix_cache_stats().expect("a prefix cache").hits,
            hits + 2,
            "{backend}: the head came from the cache for both later requests"
        );
        assert_eq!(
            first.answers, again.answers,
            "{backend}: a cached head answers bit for bit as a fresh one"
        );
    }
}
