//! `EncoderEngine` through the `Engine` port: answers that are bit-identical whatever else a
//! request asks and in whatever order, limits refused before any forward pass with the marker
//! clients look for, wide choices in one pass, and checkpoints refused with what is wrong.

mod common;

use std::path::{Path, PathBuf};

use ruling_backend::{Engine, EngineError};
use ruling_encoder::checkpoint::{CONFIG_FILE, META_FILE, WEIGHTS_FILE};
use ruling_encoder::{EncoderEngine, EncoderError, EncoderOptions};
use ruling_schema::{Answer, Capabilities, SystemOneRequest, SystemOneResponse};
use serde_json::{Value, json};

fn engine_over(base: &Path) -> (tempfile::TempDir, EncoderEngine) {
    let dir = tempfile::tempdir().unwrap();
    common::decision_checkpoint(base, dir.path(), "test-encoder");
    let engine = EncoderEngine::load(dir.path(), EncoderOptions::default()).expect("loads");
    (dir, engine)
}

fn tiny() -> (tempfile::TempDir, EncoderEngine) {
    engine_over(&common::fixtures().join("tiny-bert"))
}

fn ask(engine: &EncoderEngine, body: Value) -> Result<SystemOneResponse, EngineError> {
    let request: SystemOneRequest = serde_json::from_value(body).unwrap();
    // Validation would refuse a box question for a text model before the engine sees it; let
    // it through so the engine's own refusal is what is tested.
    let capabilities = Capabilities {
        vision: true,
        ..Capabilities::default()
    };
    let valid = request.validate(&capabilities).expect("a valid request");
    engine.evaluate(&valid)
}

const STATE: &str = "Hi, my card was charged twice for the March invoice. Please refund one.";

fn billing() -> Value {
    json!({"type": "noul", "instructions": "Is this ticket about billing?"})
}

fn team(order: &[&str]) -> Value {
    let descriptions =
        json!({"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null});
    let criteria: serde_json::Map<String, Value> = order
        .iter()
        .map(|k| ((*k).to_owned(), descriptions[*k].clone()))
        .collect();
    json!({"type": "choice", "instructions": "Which team should handle it?", "criteria": criteria})
}

fn urgency() -> Value {
    json!({"type": "score", "instructions": "How urgent is it?", "criteria": ["can wait", "this week", "today"]})
}

/// The same scale written highest first: its level `i` is `urgency`'s level `2 - i`.
fn urgency_reversed() -> Value {
    json!({"type": "score", "instructions": "How urgent is it?", "criteria": ["today", "this week", "can wait"]})
}

fn request(questions: Value) -> Value {
    request_about(STATE, questions)
}

fn request_about(state: &str, questions: Value) -> Value {
    json!({"model": "test-encoder", "state": state, "questions": questions})
}

/// A ticket history far longer than any position table: read in windows.
fn long_state(words: usize) -> String {
    let lines = [
        "Customer wrote that the March invoice was charged twice to the card ending 4242.",
        "Agent replied that the billing team would look into the duplicate charge today.",
        "Customer asked again whether the refund had been sent, and when it would arrive.",
        "Agent said the second payment was reversed and should appear within five days.",
    ];
    let mut text = String::new();
    let mut i = 0;
    while text.split_whitespace().count() < words {
        text.push_str(lines[i % lines.len()]);
        text.push(' ');
        i += 1;
    }
    text
}

fn probabilities(answer: &Answer) -> Vec<(String, f64)> {
    match answer {
        Answer::Noul { noul } => vec![("yes".into(), *noul)],
        Answer::Choice { probabilities, .. } | Answer::Score { probabilities, .. } => {
            let mut pairs: Vec<(String, f64)> =
                probabilities.iter().map(|(k, p)| (k.clone(), *p)).collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            pairs
        }
        other => panic!("unexpected answer {other:?}"),
    }
}

fn invariance_holds(engine: &EncoderEngine) {
    invariance_holds_about(engine, STATE);
}

fn invariance_holds_about(engine: &EncoderEngine, state: &str) {
    let request = |questions: Value| request_about(state, questions);
    let all = ask(
        engine,
        request(json!({"billing": billing(), "team": team(&["billing", "tech", "other"]), "urgency": urgency()})),
    )
    .unwrap();
    let reordered = ask(
        engine,
        request(json!({"urgency": urgency(), "team": team(&["other", "billing", "tech"]), "billing": billing()})),
    )
    .unwrap();
    let alone = |id: &str, question: Value| {
        ask(engine, request(json!({ id: question })))
            .unwrap()
            .answers[id]
            .clone()
    };
    let singles = [
        ("billing", alone("billing", billing())),
        ("team", alone("team", team(&["tech", "other", "billing"]))),
        ("urgency", alone("urgency", urgency())),
    ];
    for (id, single) in &singles {
        let expected = probabilities(&all.answers[*id]);
        // Bit for bit: f64 equality, not a tolerance.
        assert_eq!(
            probabilities(&reordered.answers[*id]),
            expected,
            "{id} reordered"
        );
        assert_eq!(probabilities(single), expected, "{id} alone");
    }
    // A reversed scale: level i's probability is the original level n - 1 - i's, bit for bit.
    let Answer::Score { probabilities, .. } = &alone("urgency", urgency_reversed()) else {
        panic!("a score answer")
    };
    let Answer::Score {
        probabilities: original,
        ..
    } = &all.answers["urgency"]
    else {
        panic!("a score answer")
    };
    let n = original.len();
    for i in 0..n {
        assert_eq!(
            probabilities[&i.to_string()].to_bits(),
            original[&(n - 1 - i).to_string()].to_bits(),
            "urgency reversed, level {i}"
        );
    }
    let Answer::Choice { probabilities, .. } = &all.answers["team"] else {
        panic!()
    };
    let distinct: std::collections::HashSet<u64> =
        probabilities.values().map(|p| p.to_bits()).collect();
    assert_eq!(
        distinct.len(),
        3,
        "the head gives the options different scores"
    );
}

#[test]
fn answers_are_bit_identical_whatever_else_is_asked_in_any_order() {
    let (_dir, engine) = tiny();
    invariance_holds(&engine);
}

#[test]
fn answers_are_bit_identical_on_minilm_too() {
    let (_dir, engine) = engine_over(&common::minilm());
    invariance_holds(&engine);
}

#[test]
fn a_long_state_is_read_in_windows_with_the_same_invariances() {
    let (_dir, engine) = tiny();
    // tiny-bert has 128 positions: 600 words are a dozen or more windows.
    let state = long_state(600);
    invariance_holds_about(&engine, &state);
    let response = ask(
        &engine,
        request_about(&state, json!({"billing": billing()})),
    )
    .unwrap();
    response.check().expect("a well-formed answer");
    assert!(response.usage.input_tokens > 600);
}

#[test]
fn a_long_state_keeps_the_invariances_on_minilm_too() {
    let (_dir, engine) = engine_over(&common::minilm());
    // About 2,100 tokens: six windows of MiniLM-L6's 382 state tokens.
    invariance_holds_about(&engine, &long_state(1_800));
}

#[test]
fn sixteen_thousand_tokens_are_answered_and_more_than_the_limit_is_refused() {
    let (_dir, engine) = engine_over(&common::minilm());
    let three = json!({"billing": billing(), "team": team(&["billing", "tech", "other"]), "urgency": urgency()});
    let tokenizer =
        ruling_encoder::EncoderTokenizer::load(&common::minilm().join("tokenizer.json")).unwrap();
    let tokens = |text: &str| tokenizer.encode(text).unwrap().len();
    // Just over 16,000 tokens of state, under the default limit of 16,384.
    let state = long_state(13_800);
    assert!(
        (16_000..16_384).contains(&tokens(&state)),
        "{}",
        tokens(&state)
    );
    let response = ask(&engine, request_about(&state, three.clone())).unwrap();
    assert_eq!(response.answers.len(), 3);
    response.check().expect("a well-formed answer");
    // About 20,000 tokens: refused, naming the limit, before any forward pass.
    let longer = long_state(17_000);
    assert!(tokens(&longer) > 19_500, "{}", tokens(&longer));
    let err = ask(&engine, request_about(&longer, three)).unwrap_err();
    assert!(
        matches!(err, EngineError::InputTooLong { question: None, .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("maximum context length") && message.contains("16384"),
        "{message}"
    );
}

#[test]
fn answers_have_the_wire_shape_and_a_typed_trace() {
    let (_dir, engine) = tiny();
    let mut body = request(
        json!({"billing": billing(), "team": team(&["billing", "tech", "other"]), "urgency": urgency()}),
    );
    body["trace"] = json!(true);
    let response = ask(&engine, body).unwrap();
    assert_eq!(response.model, "test-encoder");
    response
        .check()
        .expect("probabilities sum to one and name the options");
    let Answer::Score { score, legend, .. } = &response.answers["urgency"] else {
        panic!("a score answer")
    };
    assert!((0.0..=2.0).contains(score));
    assert_eq!(legend["2"], "today");
    let trace = response.evaluation_trace.expect("a trace was asked for");
    assert_eq!(trace.engine, ruling_schema::EngineKind::Encoder);
    assert_eq!(trace.prefix_tokens as u64, response.usage.input_tokens);
    let team = &trace.questions["team"];
    assert_eq!(team.rotations.len(), 1, "one pass, no rotations");
    assert!(team.rotations[0].prior.is_none());
    assert!((team.temperature - 1.0).abs() < 1e-12);
}

#[test]
fn confidences_follow_the_reference_formulas_and_a_noul_may_omit_instructions() {
    let (_dir, engine) = tiny();
    let response = ask(
        &engine,
        request(json!({
            "bare": {"type": "noul"},
            "team": team(&["billing", "tech", "other"]),
            "urgency": urgency()
        })),
    )
    .unwrap();
    let Answer::Noul { noul } = response.answers["bare"] else {
        panic!("a noul answer")
    };
    assert!((0.0..=1.0).contains(&noul));
    let Answer::Choice {
        confidence,
        probabilities,
        ..
    } = &response.answers["team"]
    else {
        panic!("a choice answer")
    };
    let k = probabilities.len() as f64;
    let top = probabilities.values().copied().fold(0.0, f64::max);
    assert!(
        (confidence - (top - 1.0 / k) / (1.0 - 1.0 / k)).abs() < 1e-9,
        "{confidence}"
    );
    let Answer::Score {
        confidence,
        probabilities,
        ..
    } = &response.answers["urgency"]
    else {
        panic!("a score answer")
    };
    let p: Vec<f64> = (0..probabilities.len())
        .map(|i| probabilities[&i.to_string()])
        .collect();
    let mode = (0..p.len()).fold(0, |m, i| if p[i] > p[m] { i } else { m });
    let spread: f64 = p
        .iter()
        .enumerate()
        .map(|(i, q)| q * i.abs_diff(mode) as f64)
        .sum();
    let uniform: f64 = (0..p.len())
        .map(|i| i.abs_diff(mode) as f64 / p.len() as f64)
        .sum();
    let expected = (1.0 - spread / uniform).max(0.0);
    assert!(
        (confidence - expected).abs() < 1e-9,
        "{confidence} against {expected}"
    );
}

#[test]
fn a_wide_choice_is_one_pass_and_positions_do_not_grow() {
    let (_dir, engine) = tiny();
    let criteria: serde_json::Map<String, Value> = (0..255)
        .map(|i| {
            (
                format!("intent_{i}"),
                json!(format!("the customer asks about thing {i}")),
            )
        })
        .collect();
    let response = ask(
        &engine,
        request(json!({"intent": {"type": "choice", "instructions": "Which intent?", "criteria": criteria}})),
    )
    .unwrap();
    let Answer::Choice { probabilities, .. } = &response.answers["intent"] else {
        panic!()
    };
    assert_eq!(probabilities.len(), 255);
    // Far more tokens than tiny-bert's 64 positions: the options share theirs.
    assert!(
        response.usage.input_tokens > 1000,
        "{}",
        response.usage.input_tokens
    );
}

#[test]
fn limits_are_refused_with_the_marker_and_the_question() {
    let dir = tempfile::tempdir().unwrap();
    common::decision_checkpoint(
        &common::fixtures().join("tiny-bert"),
        dir.path(),
        "test-encoder",
    );
    let options = EncoderOptions {
        max_state_tokens: 150,
        ..EncoderOptions::default()
    };
    let engine = EncoderEngine::load(dir.path(), options).expect("loads");
    let long_state = "word ".repeat(200);
    let err = ask(
        &engine,
        json!({"model": "m", "state": long_state, "questions": {"q": billing()}}),
    )
    .unwrap_err();
    assert!(
        matches!(err, EngineError::InputTooLong { question: None, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("maximum context length"), "{err}");

    let long_option = "very ".repeat(80);
    let err = ask(
        &engine,
        request(json!({"fine": billing(), "wide": {"type": "choice", "instructions": "Which?", "criteria": {"a": long_option, "b": null}}})),
    )
    .unwrap_err();
    match &err {
        EngineError::InputTooLong { question, message } => {
            assert_eq!(question.as_deref(), Some("wide"));
            assert!(
                message.contains("maximum context length") && message.contains("\"wide\""),
                "{message}"
            );
        }
        other => panic!("{other}"),
    }
}

#[test]
fn box_questions_are_refused_clearly() {
    let (_dir, engine) = tiny();
    let err = ask(
        &engine,
        request(json!({"where": {"type": "box", "instructions": "Where is the logo?"}})),
    )
    .unwrap_err();
    assert!(matches!(err, EngineError::Unsupported(_)));
    assert!(err.to_string().contains("vision"), "{err}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn load_error(dir: &Path) -> String {
    EncoderEngine::load(dir, EncoderOptions::default())
        .expect_err("refused")
        .to_string()
}

#[test]
fn bad_checkpoints_are_refused_with_what_is_wrong() {
    let (good, _) = tiny();
    let scratch = tempfile::tempdir().unwrap();
    let case = |name: &str| -> PathBuf {
        let dir = scratch.path().join(name);
        copy_dir(good.path(), &dir);
        dir
    };

    let missing = case("missing");
    std::fs::remove_file(missing.join(WEIGHTS_FILE)).unwrap();
    let message = load_error(&missing);
    assert!(message.contains("model.safetensors"), "{message}");

    let base = common::fixtures().join("tiny-bert");
    let message = load_error(&base);
    assert!(
        message.contains("decision.json") && message.contains("ruling-train encoder"),
        "{message}"
    );

    // Another base's config dropped into the checkpoint.
    let other = case("other-base");
    std::fs::copy(
        common::fixtures().join("tiny-modernbert").join(CONFIG_FILE),
        other.join(CONFIG_FILE),
    )
    .unwrap();
    let message = load_error(&other);
    assert!(message.contains("config.json has sha256"), "{message}");

    // A checkpoint whose weights lack the head, with decision.json updated to match them.
    let headless = case("headless");
    let files = ruling_encoder::EncoderFiles::open(&headless).unwrap();
    let mut tensors = files.tensors.clone();
    tensors.remove("score.weight");
    let bytes =
        ruling_encoder::checkpoint::safetensors_bytes(&tensors, candle_core::DType::F32).unwrap();
    std::fs::write(headless.join(WEIGHTS_FILE), &bytes).unwrap();
    let mut meta: Value =
        serde_json::from_str(&std::fs::read_to_string(headless.join(META_FILE)).unwrap()).unwrap();
    meta["weights_sha256"] = json!(ruling_encoder::checkpoint::sha256_hex(&bytes));
    std::fs::write(headless.join(META_FILE), meta.to_string()).unwrap();
    let message = load_error(&headless);
    assert!(message.contains("tensor score.weight"), "{message}");
}

#[test]
fn a_calibration_for_other_weights_is_refused() {
    let (dir, engine) = tiny();
    let mut provenance = engine.provenance();
    provenance.revision = Some("0".repeat(64));
    let calibration = ruling_calibration::Calibration::identity(provenance);
    let err = EncoderEngine::load(
        dir.path(),
        EncoderOptions {
            calibration: Some(calibration),
            ..Default::default()
        },
    )
    .expect_err("refused");
    assert!(matches!(err, EncoderError::Calibration(_)), "{err}");
    assert!(err.to_string().contains("revision"), "{err}");
}
