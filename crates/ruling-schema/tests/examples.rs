//! Requests and responses written from DESIGN.md's wire format: each request parses, validates
//! and round-trips; each response round-trips and holds (or, when broken on purpose, fails)
//! the response invariants.

use ruling_schema::{
    Answer, AssetData, Capabilities, ImageFormat, InvariantError, QuestionKind, SystemOneRequest,
    SystemOneResponse, Text, ValidRequest, parse_request,
};
use serde_json::{Value, json};

const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==";

/// Parses `body` as a client would send it, checks the wire types reproduce it exactly, and
/// that the validated request converts back to the same wire request.
fn round_trip(body: &Value, caps: &Capabilities) -> ValidRequest {
    let bytes = serde_json::to_vec(body).expect("a Value serialises");
    let valid = match parse_request(&bytes, caps) {
        Ok(valid) => valid,
        Err(errors) => panic!("example should be valid: {errors}"),
    };

    let wire: SystemOneRequest = serde_json::from_value(body.clone()).expect("wire types parse");
    let again = serde_json::to_value(&wire).expect("wire types serialise");
    assert_eq!(&again, body, "serialising the wire request changed it");
    let wire_again: SystemOneRequest = serde_json::from_value(again).expect("reparse");
    assert_eq!(wire_again, wire);

    assert_eq!(
        valid.to_wire(),
        wire,
        "ValidRequest::to_wire lost something"
    );
    assert_eq!(wire.validate(caps).expect("wire validates"), valid);
    valid
}

#[test]
fn noul_with_criteria() {
    let body = json!({
        "model": "ruling-small",
        "state": "The invoice total is 1,240 EUR, due 2024-07-01.",
        "questions": {
            "overdue": {
                "type": "noul",
                "instructions": "Is the invoice overdue as of 2024-08-15?",
                "criteria": {"true": "The due date has passed", "false": "It is not yet due"}
            }
        }
    });
    let valid = round_trip(&body, &Capabilities::default());
    assert_eq!(valid.model(), "ruling-small");
    assert!(!valid.trace());
    let [q] = valid.questions() else {
        panic!("one question")
    };
    assert_eq!(q.id(), "overdue");
    match q.kind() {
        QuestionKind::Noul {
            if_true, if_false, ..
        } => {
            assert_eq!(
                if_true.as_ref().map(Text::render).as_deref(),
                Some("The due date has passed")
            );
            assert_eq!(
                if_false.as_ref().map(Text::render).as_deref(),
                Some("It is not yet due")
            );
        }
        other => panic!("expected noul, got {other:?}"),
    }
}

#[test]
fn choice_with_null_descriptions_keeps_option_order() {
    let body = json!({
        "model": "ruling-small",
        "state": "Customer: my card was charged twice for one order.",
        "questions": {
            "route": {
                "type": "choice",
                "instructions": "Which team should handle this ticket?",
                "criteria": {
                    "billing": "Payments, refunds, invoices",
                    "shipping": null,
                    "technical": "Bugs and outages",
                    "other": null
                }
            }
        }
    });
    let valid = round_trip(&body, &Capabilities::default());
    let QuestionKind::Choice { options, .. } = valid.questions()[0].kind() else {
        panic!("expected a choice")
    };
    let keys: Vec<&str> = options.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["billing", "shipping", "technical", "other"]);
    assert!(options[1].description.is_none());
    assert!(options[3].description.is_none());
    assert_eq!(
        options[0].description.as_ref().map(Text::render).as_deref(),
        Some("Payments, refunds, invoices")
    );
}

#[test]
fn score_of_five_levels() {
    let body = json!({
        "model": "ruling-small",
        "state": "The food was fine but we waited an hour.",
        "questions": {
            "satisfaction": {
                "type": "score",
                "instructions": "How satisfied is the reviewer?",
                "criteria": ["very unhappy", "unhappy", "neutral", "happy", "very happy"]
            }
        },
        "trace": true
    });
    let valid = round_trip(&body, &Capabilities::default());
    assert!(valid.trace());
    let QuestionKind::Score { levels, .. } = valid.questions()[0].kind() else {
        panic!("expected a score")
    };
    assert_eq!(levels.len(), 5);
    assert_eq!(levels[0].render(), "very unhappy");
    assert_eq!(levels[4].render(), "very happy");
}

#[test]
fn all_three_types_with_object_state_and_object_instructions() {
    let body = json!({
        "model": "ruling-base",
        "state": {"subject": "Refund request", "body": "Bitte erstatten Sie meine Bestellung.", "lines": [1, 2]},
        "questions": {
            "is_refund": {"type": "noul", "instructions": {"task": "Is this a refund request?", "strict": true}},
            "language": {
                "type": "choice",
                "instructions": null,
                "criteria": {"de": "German", "en": "English", "fr": null}
            },
            "urgency": {
                "type": "score",
                "instructions": ["Rate the urgency.", "Consider deadlines."],
                "criteria": ["low", {"level": "medium"}, "high"]
            }
        }
    });
    let valid = round_trip(&body, &Capabilities::default());
    let ids: Vec<&str> = valid.questions().iter().map(|q| q.id()).collect();
    assert_eq!(ids, ["is_refund", "language", "urgency"]);
    let types: Vec<&str> = valid.questions().iter().map(|q| q.type_name()).collect();
    assert_eq!(types, ["noul", "choice", "score"]);
    assert_eq!(
        valid.state().render(),
        "{\n  \"subject\": \"Refund request\",\n  \"body\": \"Bitte erstatten Sie meine Bestellung.\",\n  \"lines\": [\n    1,\n    2\n  ]\n}"
    );
    assert_eq!(
        valid.questions()[0].kind().instructions().render(),
        "{\n  \"task\": \"Is this a refund request?\",\n  \"strict\": true\n}"
    );
    assert_eq!(valid.questions()[1].kind().instructions().render(), "");
}

#[test]
fn box_with_inline_png_on_a_vision_model() {
    let body = json!({
        "model": "ruling-vision",
        "state": "Photo of the shelf: <img_1>",
        "questions": {
            "where": {"type": "box", "instructions": "Where is the red box?"}
        },
        "assets": {
            "<img_1>": {"type": "image", "format": "png", "data_base64": PNG_1X1}
        }
    });
    let valid = round_trip(&body, &Capabilities::vision());
    let [asset] = valid.assets() else {
        panic!("one asset")
    };
    assert_eq!(asset.placeholder(), "<img_1>");
    assert_eq!(asset.format(), ImageFormat::Png);
    match asset.data() {
        AssetData::Inline(bytes) => assert!(bytes.starts_with(b"\x89PNG")),
        other => panic!("expected inline data, got {other:?}"),
    }
}

#[test]
fn multipart_asset_referenced_from_an_option_key() {
    let body = json!({
        "model": "ruling-vision",
        "state": "Two photos.",
        "questions": {
            "sharper": {
                "type": "choice",
                "instructions": "Which photo is sharper?",
                "criteria": {"<a>": null, "<b>": null}
            }
        },
        "assets": {
            "<a>": {"type": "image", "format": "jpg", "part": "photo_a"},
            "<b>": {"type": "image", "format": "jpeg", "part": "photo_b"}
        }
    });
    let valid = round_trip(&body, &Capabilities::vision());
    assert_eq!(valid.assets()[0].data(), &AssetData::Part("photo_a".into()));
    assert_eq!(valid.assets()[1].format(), ImageFormat::Jpeg);
}

fn response(answers: Value) -> Value {
    json!({
        "model": "ruling-small",
        "answers": answers,
        "usage": {"input_tokens": 120, "output_tokens": 3}
    })
}

fn response_round_trip(body: &Value) -> SystemOneResponse {
    let parsed: SystemOneResponse = serde_json::from_value(body.clone()).expect("response parses");
    assert_eq!(&serde_json::to_value(&parsed).expect("serialises"), body);
    parsed
}

#[test]
fn every_answer_type_round_trips_and_holds_the_invariants() {
    let body = response(json!({
        "overdue": {"type": "noul", "noul": 0.93},
        "route": {
            "type": "choice",
            "choice": "billing",
            "confidence": 0.8,
            "probabilities": {"billing": 0.8, "shipping": 0.05, "technical": 0.1, "other": 0.05}
        },
        "satisfaction": {
            "type": "score",
            "score": 1.7,
            "confidence": 0.5,
            "legend": {"0": "very unhappy", "1": "unhappy", "2": "neutral", "3": "happy", "4": "very happy"},
            "probabilities": {"0": 0.1, "1": 0.2, "2": 0.5, "3": 0.15, "4": 0.05}
        },
        "where": {"type": "box", "box": {"top": 0.1, "bottom": 0.4, "left": 0.2, "right": 0.6}, "confidence": null},
        "where2": {"type": "box", "box": {"top": 10.0, "bottom": 40.0, "left": 20.0, "right": 60.0}, "confidence": 0.7}
    }));
    let parsed = response_round_trip(&body);
    parsed.check().expect("invariants hold");
    assert_eq!(parsed.answers["route"].type_name(), "choice");

    let mut traced = body.clone();
    traced["evaluation_trace"] = json!({
        "engine": "decoder",
        "questions": {"route": {
            "rotations": [{"order": ["billing", "shipping", "technical", "other"],
                           "log_probabilities": [-0.2, -3.0, null, -2.3], "prior": null}],
            "temperature": 1.0,
        }},
        "prefix_tokens": 12,
        "prefix_cached": true,
    });
    let parsed = response_round_trip(&traced);
    parsed.check().expect("a trace changes nothing");
    let trace = parsed.evaluation_trace.expect("the trace is kept");
    let dropped = trace.questions["route"].rotations[0].log_probabilities[2];
    assert!(
        dropped.is_infinite() && dropped < 0.0,
        "null reads back as -inf, not {dropped}"
    );
}

#[test]
fn responses_that_break_the_invariants_fail_check() {
    let cases = [
        (json!({"type": "noul", "noul": 1.2}), "NotAProbability"),
        (json!({"type": "noul", "noul": -0.1}), "NotAProbability"),
        (
            json!({"type": "choice", "choice": "a", "confidence": 0.6, "probabilities": {"a": 0.6, "b": 0.3}}),
            "BadSum",
        ),
        (
            json!({"type": "choice", "choice": "z", "confidence": 0.6, "probabilities": {"a": 0.6, "b": 0.4}}),
            "UnknownChoice",
        ),
        (
            json!({"type": "choice", "choice": "a", "confidence": 1.5, "probabilities": {"a": 0.6, "b": 0.4}}),
            "NotAProbability",
        ),
        (
            json!({"type": "choice", "choice": "a", "confidence": 0.6, "probabilities": {"a": 1.1, "b": -0.1}}),
            "NotAProbability",
        ),
        (
            json!({"type": "score", "score": 2.5, "confidence": 0.5,
                   "legend": {"0": "low", "1": "mid", "2": "high"},
                   "probabilities": {"0": 0.2, "1": 0.3, "2": 0.5}}),
            "ScoreOutOfRange",
        ),
        (
            json!({"type": "score", "score": 1.0, "confidence": 0.5,
                   "legend": {"0": "low", "1": "high"},
                   "probabilities": {"1": 0.5, "0": 0.5}}),
            "ScoreKeys",
        ),
        (
            json!({"type": "box", "box": {"top": 0.1, "bottom": 0.4, "left": 0.2, "right": 0.6}, "confidence": 2.0}),
            "NotAProbability",
        ),
    ];
    for (answer, expected) in cases {
        let parsed = response_round_trip(&response(json!({"q": answer})));
        match parsed.check() {
            Ok(()) => panic!("{answer} should break an invariant"),
            Err(error) => {
                assert!(
                    format!("{error:?}").starts_with(expected),
                    "{answer}: expected {expected}, got {error:?}"
                );
                assert!(
                    error.to_string().contains("\"q\""),
                    "{error} names the answer"
                );
            }
        }
    }

    // Non-finite values cannot come from JSON, but an engine can produce them.
    let nan = SystemOneResponse {
        model: "m".into(),
        answers: [("q".to_owned(), Answer::Noul { noul: f64::NAN })]
            .into_iter()
            .collect(),
        usage: Default::default(),
        evaluation_trace: None,
    };
    assert!(matches!(
        nan.check(),
        Err(InvariantError::NotAProbability { .. })
    ));
}

#[test]
fn check_against_matches_answers_to_questions() {
    let request = parse_request(
        br#"{"model": "m", "state": "s", "questions": {
            "c": {"type": "choice", "instructions": "?", "criteria": {"a": null, "b": null}},
            "n": {"type": "noul", "instructions": "?"}}}"#,
        &Capabilities::default(),
    )
    .expect("valid request");
    let good: SystemOneResponse = serde_json::from_value(response(json!({
        "c": {"type": "choice", "choice": "b", "confidence": 0.7, "probabilities": {"a": 0.3, "b": 0.7}},
        "n": {"type": "noul", "noul": 0.2}
    })))
    .expect("parses");
    good.check_against(&request).expect("matches the request");

    let reordered: SystemOneResponse = serde_json::from_value(response(json!({
        "c": {"type": "choice", "choice": "b", "confidence": 0.7, "probabilities": {"b": 0.7, "a": 0.3}},
        "n": {"type": "noul", "noul": 0.2}
    })))
    .expect("parses");
    assert!(matches!(
        reordered.check_against(&request),
        Err(InvariantError::OptionMismatch { .. })
    ));

    let missing: SystemOneResponse = serde_json::from_value(response(json!({
        "n": {"type": "noul", "noul": 0.2}
    })))
    .expect("parses");
    assert!(matches!(
        missing.check_against(&request),
        Err(InvariantError::Unanswered { .. })
    ));

    let wrong_type: SystemOneResponse = serde_json::from_value(response(json!({
        "c": {"type": "choice", "choice": "b", "confidence": 0.7, "probabilities": {"a": 0.3, "b": 0.7}},
        "n": {"type": "choice", "choice": "b", "confidence": 0.7, "probabilities": {"a": 0.3, "b": 0.7}}
    })))
    .expect("parses");
    assert!(matches!(
        wrong_type.check_against(&request),
        Err(InvariantError::WrongType { .. })
    ));
}

#[test]
fn models_list_round_trips() {
    let body = json!({"models": [{"name": "ruling-small", "description": "Qwen3 0.6B, text", "release_date": "2025-06-01"}]});
    let parsed: ruling_schema::ModelsList = serde_json::from_value(body.clone()).expect("parses");
    assert_eq!(serde_json::to_value(&parsed).expect("serialises"), body);
}
