//! Malformed requests: each must be refused with the exact location, pydantic type and, for
//! capacity refusals, the marker text clients search for.

use ruling_schema::{Capabilities, ErrorDetail, ValidationErrorBody, parse_request};
use serde_json::{Value, json};

fn errors_with(body: &[u8], caps: &Capabilities) -> Vec<ErrorDetail> {
    match parse_request(body, caps) {
        Ok(valid) => panic!("expected errors, got {valid:?}"),
        Err(errors) => errors.into_details(),
    }
}

fn errors(body: &Value) -> Vec<ErrorDetail> {
    errors_with(
        &serde_json::to_vec(body).expect("serialises"),
        &Capabilities::default(),
    )
}

/// The single error a request produced.
fn only(details: Vec<ErrorDetail>) -> ErrorDetail {
    match <[ErrorDetail; 1]>::try_from(details) {
        Ok([detail]) => detail,
        Err(details) => panic!("expected exactly one error, got {details:#?}"),
    }
}

fn assert_error(detail: &ErrorDetail, loc: Value, kind: &str, marker: &str) {
    assert_eq!(
        serde_json::to_value(&detail.loc).expect("loc serialises"),
        loc,
        "{detail}"
    );
    assert_eq!(detail.kind, kind, "{detail}");
    assert!(
        detail.msg.contains(marker),
        "{:?} should contain {marker:?}",
        detail.msg
    );
}

/// A valid request with `question` as its only question, under id `q1`.
fn with_question(question: Value) -> Value {
    json!({"model": "m", "state": "some text", "questions": {"q1": question}})
}

fn choice_with(n: usize) -> Value {
    let criteria: serde_json::Map<String, Value> =
        (0..n).map(|i| (format!("opt{i}"), Value::Null)).collect();
    with_question(json!({"type": "choice", "instructions": "pick", "criteria": criteria}))
}

fn score_with(n: usize) -> Value {
    let levels: Vec<Value> = (0..n).map(|i| json!(format!("level {i}"))).collect();
    with_question(json!({"type": "score", "instructions": "rate", "criteria": levels}))
}

#[test]
fn truncated_json() {
    let detail = only(errors_with(
        br#"{"model": "m", "state": "#,
        &Capabilities::default(),
    ));
    assert_error(
        &detail,
        json!(["body"]),
        "json_invalid",
        "JSON decode error",
    );
    assert!(detail.ctx.is_some_and(|ctx| ctx.get("line").is_some()));
}

#[test]
fn empty_body_and_trailing_garbage() {
    let detail = only(errors_with(b"", &Capabilities::default()));
    assert_error(&detail, json!(["body"]), "json_invalid", "");
    let detail = only(errors_with(b"{} {}", &Capabilities::default()));
    assert_error(&detail, json!(["body"]), "json_invalid", "trailing");
}

#[test]
fn non_object_body() {
    let detail = only(errors(&json!(["model", "m"])));
    assert_error(&detail, json!(["body"]), "dict_type", "an array");
}

#[test]
fn missing_model_state_and_questions_are_all_reported() {
    let details = errors(&json!({"modle": "m"}));
    assert_eq!(details.len(), 3, "{details:#?}");
    assert_error(
        &details[0],
        json!(["body", "model"]),
        "missing",
        "Field required",
    );
    assert_error(
        &details[1],
        json!(["body", "state"]),
        "missing",
        "Field required",
    );
    assert_error(
        &details[2],
        json!(["body", "questions"]),
        "missing",
        "Field required",
    );
}

#[test]
fn model_of_the_wrong_type() {
    let mut body = with_question(json!({"type": "noul", "instructions": "?"}));
    body["model"] = json!(7);
    let detail = only(errors(&body));
    assert_error(
        &detail,
        json!(["body", "model"]),
        "string_type",
        "`model` got a number 7",
    );
    assert_eq!(detail.input, Some(json!(7)));
}

#[test]
fn state_that_is_a_number() {
    let mut body = with_question(json!({"type": "noul", "instructions": "?"}));
    body["state"] = json!(3.5);
    let detail = only(errors(&body));
    assert_error(
        &detail,
        json!(["body", "state"]),
        "string_type",
        "dictionary or list",
    );
}

#[test]
fn empty_questions_map() {
    let detail = only(errors(
        &json!({"model": "m", "state": "s", "questions": {}}),
    ));
    assert_error(
        &detail,
        json!(["body", "questions"]),
        "too_short",
        "at least 1",
    );
}

#[test]
fn empty_question_id() {
    let body = json!({"model": "m", "state": "s", "questions": {"": {"type": "noul", "instructions": "?"}}});
    let detail = only(errors(&body));
    assert_error(
        &detail,
        json!(["body", "questions", ""]),
        "string_too_short",
        "question id",
    );
}

#[test]
fn unknown_question_type_lists_the_allowed_ones() {
    let detail = only(errors(&with_question(
        json!({"type": "rank", "instructions": "?"}),
    )));
    assert_error(
        &detail,
        json!(["body", "questions", "q1"]),
        "union_tag_invalid",
        "'rank'",
    );
    for tag in ["'noul'", "'choice'", "'score'", "'box'"] {
        assert!(detail.msg.contains(tag), "{} lists {tag}", detail.msg);
    }
}

#[test]
fn missing_question_type() {
    let detail = only(errors(&with_question(json!({"instructions": "?"}))));
    assert_error(
        &detail,
        json!(["body", "questions", "q1"]),
        "union_tag_not_found",
        "'type'",
    );
}

#[test]
fn missing_instructions_but_null_is_fine() {
    let detail = only(errors(&with_question(
        json!({"type": "choice", "criteria": {"a": null, "b": null}}),
    )));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "choice", "instructions"]),
        "missing",
        "null is allowed",
    );
    for question in [
        json!({"type": "score", "instructions": null, "criteria": ["low", "high"]}),
        json!({"type": "noul", "instructions": null}),
        // The specification lets a noul leave them out: it reads as null.
        json!({"type": "noul"}),
        json!({"type": "noul", "criteria": {"true": "it rains"}}),
    ] {
        let body = with_question(question.clone());
        let valid = parse_request(
            &serde_json::to_vec(&body).expect("serialises"),
            &Capabilities::default(),
        )
        .unwrap_or_else(|e| panic!("{question}: {e:?}"));
        assert_eq!(valid.questions().len(), 1);
    }
}

#[test]
fn instructions_of_the_wrong_type() {
    let detail = only(errors(&with_question(
        json!({"type": "box", "instructions": false}),
    )));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "box", "instructions"]),
        "string_type",
        "a boolean",
    );
}

#[test]
fn missing_choice_and_score_criteria() {
    let detail = only(errors(&with_question(
        json!({"type": "choice", "instructions": "?"}),
    )));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "choice", "criteria"]),
        "missing",
        "criteria",
    );
    let detail = only(errors(&with_question(
        json!({"type": "score", "instructions": "?"}),
    )));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "score", "criteria"]),
        "missing",
        "criteria",
    );
}

#[test]
fn unknown_field_in_a_question() {
    let body =
        with_question(json!({"type": "noul", "instructions": "?", "critera": {"true": "yes"}}));
    let detail = only(errors(&body));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "noul", "critera"]),
        "extra_forbidden",
        "\"critera\"",
    );
    // Box questions take no criteria at all.
    let body = with_question(json!({"type": "box", "instructions": "?", "criteria": ["a", "b"]}));
    let detail = only(errors_with(
        &serde_json::to_vec(&body).expect("serialises"),
        &Capabilities::vision(),
    ));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "box", "criteria"]),
        "extra_forbidden",
        "",
    );
}

#[test]
fn unknown_field_in_noul_criteria() {
    let body = with_question(
        json!({"type": "noul", "instructions": "?", "criteria": {"true": "y", "maybe": "m"}}),
    );
    let detail = only(errors(&body));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "noul", "criteria", "maybe"]),
        "extra_forbidden",
        "\"true\", \"false\"",
    );
}

#[test]
fn choice_with_one_option() {
    let detail = only(errors(&choice_with(1)));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "choice", "criteria"]),
        "too_short",
        "a choice needs at least two options",
    );
}

#[test]
fn choice_with_256_options() {
    let detail = only(errors(&choice_with(256)));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "choice", "criteria"]),
        "too_long",
        "options per choice",
    );
    assert!(
        detail.msg.contains("255") && detail.msg.contains("256"),
        "{}",
        detail.msg
    );
    // The limits themselves are fine.
    for n in [2, 255] {
        let body = serde_json::to_vec(&choice_with(n)).expect("serialises");
        assert!(
            parse_request(&body, &Capabilities::default()).is_ok(),
            "{n} options"
        );
    }
}

#[test]
fn model_with_a_lower_option_limit() {
    let caps = Capabilities {
        max_choice_options: 26,
        ..Capabilities::default()
    };
    let body = serde_json::to_vec(&choice_with(27)).expect("serialises");
    let detail = only(errors_with(&body, &caps));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "choice", "criteria"]),
        "too_long",
        "at most 26 options per choice",
    );
}

#[test]
fn empty_option_key() {
    let body = with_question(
        json!({"type": "choice", "instructions": "?", "criteria": {"": "blank", "b": null}}),
    );
    let detail = only(errors(&body));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "choice", "criteria", ""]),
        "string_too_short",
        "option key",
    );
}

#[test]
fn score_with_one_level_and_with_eleven() {
    let detail = only(errors(&score_with(1)));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "score", "criteria"]),
        "too_short",
        "a score takes 2 to 10 levels",
    );
    let detail = only(errors(&score_with(11)));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "score", "criteria"]),
        "too_long",
        "a score takes 2 to 10 levels",
    );
    for n in [2, 10] {
        let body = serde_json::to_vec(&score_with(n)).expect("serialises");
        assert!(
            parse_request(&body, &Capabilities::default()).is_ok(),
            "{n} levels"
        );
    }
}

#[test]
fn score_with_a_null_level_and_a_repeated_level() {
    let body = with_question(
        json!({"type": "score", "instructions": "?", "criteria": ["low", null, "high", "low"]}),
    );
    let details = errors(&body);
    assert_eq!(details.len(), 2, "{details:#?}");
    assert_error(
        &details[0],
        json!(["body", "questions", "q1", "score", "criteria", 1]),
        "value_error",
        "null",
    );
    assert_error(
        &details[1],
        json!(["body", "questions", "q1", "score", "criteria", 3]),
        "value_error",
        "repeats level 0",
    );
}

#[test]
fn duplicate_question_ids() {
    let body = br#"{"model": "m", "state": "s", "questions": {
        "q1": {"type": "noul", "instructions": "first"},
        "q1": {"type": "noul", "instructions": "second"}}}"#;
    let detail = only(errors_with(body, &Capabilities::default()));
    assert_error(
        &detail,
        json!(["body", "questions", "q1"]),
        "value_error",
        "duplicate key \"q1\"",
    );
}

#[test]
fn duplicate_option_keys() {
    let body = br#"{"model": "m", "state": "s", "questions": {
        "q1": {"type": "choice", "instructions": "?", "criteria": {"yes": null, "no": null, "yes": "again"}}}}"#;
    let detail = only(errors_with(body, &Capabilities::default()));
    assert_error(
        &detail,
        json!(["body", "questions", "q1", "criteria", "yes"]),
        "value_error",
        "duplicate key \"yes\"",
    );
}

#[test]
fn number_beyond_the_f64_range() {
    let body = br#"{"model": "m", "state": {"reading": [1, 1e400]}, "questions": {"q1": {"type": "noul", "instructions": "?"}}}"#;
    let detail = only(errors_with(body, &Capabilities::default()));
    assert_error(
        &detail,
        json!(["body", "state", "reading", 1]),
        "finite_number",
        "finite number",
    );
    let detail = only(errors_with(
        br#"{"model": -1e400}"#,
        &Capabilities::default(),
    ));
    assert_error(&detail, json!(["body", "model"]), "finite_number", "line 1");
}

#[test]
fn asset_placeholder_used_nowhere() {
    let body = json!({
        "model": "m",
        "state": "a photo: <img_1>",
        "questions": {"q1": {"type": "noul", "instructions": "Is it blue?"}},
        "assets": {
            "<img_1>": {"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="},
            "<img_2>": {"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="}
        }
    });
    let detail = only(errors_with(
        &serde_json::to_vec(&body).expect("serialises"),
        &Capabilities::vision(),
    ));
    assert_error(
        &detail,
        json!(["body", "assets", "<img_2>"]),
        "value_error",
        "appears in no string",
    );
}

#[test]
fn assets_and_box_questions_on_a_text_only_model() {
    let body = json!({
        "model": "ruling-small",
        "state": "a photo: <img_1>",
        "questions": {"q1": {"type": "box", "instructions": "Where is the cat?"}},
        "assets": {"<img_1>": {"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="}}
    });
    let details = errors(&body);
    assert_eq!(details.len(), 2, "{details:#?}");
    assert_error(
        &details[0],
        json!(["body", "assets"]),
        "value_error",
        "reads text only",
    );
    assert_error(
        &details[1],
        json!(["body", "questions", "q1"]),
        "value_error",
        "box questions need a vision model",
    );
}

#[test]
fn more_images_than_the_model_takes_in_one_request() {
    let caps = Capabilities {
        max_images: 2,
        ..Capabilities::vision()
    };
    let asset = json!({"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="});
    let body = json!({
        "model": "m",
        "state": "<a> <b> <c>",
        "questions": {"q1": {"type": "noul", "instructions": "Same?"}},
        "assets": {"<a>": asset, "<b>": asset, "<c>": asset}
    });
    let body = serde_json::to_vec(&body).expect("serialises");
    let detail = only(errors_with(&body, &caps));
    assert_error(
        &detail,
        json!(["body", "assets"]),
        "value_error",
        "3 images sent, over the 2 one request may carry",
    );
    let two = json!({
        "model": "m",
        "state": "<a> <b>",
        "questions": {"q1": {"type": "noul", "instructions": "Same?"}},
        "assets": {"<a>": asset, "<b>": asset}
    });
    assert!(parse_request(&serde_json::to_vec(&two).expect("serialises"), &caps).is_ok());
}

#[test]
fn invalid_base64() {
    let body = json!({
        "model": "m",
        "state": "<img>",
        "questions": {"q1": {"type": "noul", "instructions": "?"}},
        "assets": {"<img>": {"type": "image", "format": "png", "data_base64": "not base64!"}}
    });
    let detail = only(errors_with(
        &serde_json::to_vec(&body).expect("serialises"),
        &Capabilities::vision(),
    ));
    assert_error(
        &detail,
        json!(["body", "assets", "<img>", "image", "data_base64"]),
        "value_error",
        "not valid base64",
    );
}

#[test]
fn bad_image_format() {
    let body = json!({
        "model": "m",
        "state": "<img>",
        "questions": {"q1": {"type": "noul", "instructions": "?"}},
        "assets": {"<img>": {"type": "image", "format": "gif", "data_base64": "R0lGODlh"}}
    });
    let detail = only(errors_with(
        &serde_json::to_vec(&body).expect("serialises"),
        &Capabilities::vision(),
    ));
    assert_error(
        &detail,
        json!(["body", "assets", "<img>", "image", "format"]),
        "literal_error",
        "\"gif\"",
    );
}

#[test]
fn asset_without_data_or_with_both_sources() {
    let asset_body = |asset: Value| {
        json!({"model": "m", "state": "<img>", "questions": {"q1": {"type": "noul", "instructions": "?"}},
               "assets": {"<img>": asset}})
    };
    let body = asset_body(json!({"type": "image", "format": "png"}));
    let detail = only(errors_with(
        &serde_json::to_vec(&body).expect("serialises"),
        &Capabilities::vision(),
    ));
    assert_error(
        &detail,
        json!(["body", "assets", "<img>", "image", "data_base64"]),
        "missing",
        "part",
    );
    let body = asset_body(
        json!({"type": "image", "format": "png", "data_base64": "iVBORw0KGgo=", "part": "p"}),
    );
    let detail = only(errors_with(
        &serde_json::to_vec(&body).expect("serialises"),
        &Capabilities::vision(),
    ));
    assert_error(
        &detail,
        json!(["body", "assets", "<img>", "image"]),
        "value_error",
        "not both",
    );
    let body = asset_body(json!({"type": "video", "format": "png", "part": "p"}));
    let detail = only(errors_with(
        &serde_json::to_vec(&body).expect("serialises"),
        &Capabilities::vision(),
    ));
    assert_error(
        &detail,
        json!(["body", "assets", "<img>"]),
        "union_tag_invalid",
        "'image'",
    );
}

#[test]
fn trace_of_the_wrong_type() {
    let mut body = with_question(json!({"type": "noul", "instructions": "?"}));
    body["trace"] = json!("yes");
    let detail = only(errors(&body));
    assert_error(&detail, json!(["body", "trace"]), "bool_type", "`trace`");
}

#[test]
fn several_errors_at_once_are_all_reported() {
    let body = br#"{
        "model": 1,
        "state": "s",
        "questions": {
            "a": {"type": "choice", "instructions": "?", "criteria": {"only": null}},
            "b": {"type": "score", "instructions": "?", "criteria": ["x"]},
            "c": {"type": "poll", "instructions": "?"},
            "d": {"type": "noul", "instructions": "?", "extra": 1},
            "d": {"type": "noul", "instructions": "?"}
        }
    }"#;
    let details = errors_with(body, &Capabilities::default());
    let summary: Vec<(Value, &str)> = details
        .iter()
        .map(|d| (serde_json::to_value(&d.loc).expect("loc"), d.kind.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (json!(["body", "questions", "d"]), "value_error"),
            (json!(["body", "model"]), "string_type"),
            (
                json!(["body", "questions", "a", "choice", "criteria"]),
                "too_short"
            ),
            (
                json!(["body", "questions", "b", "score", "criteria"]),
                "too_short"
            ),
            (json!(["body", "questions", "c"]), "union_tag_invalid"),
        ]
    );
    assert!(
        details[2]
            .msg
            .contains("a choice needs at least two options")
    );
    assert!(details[3].msg.contains("a score takes 2 to 10 levels"));
}

#[test]
fn the_error_body_has_the_fastapi_shape() {
    let errors = parse_request(br#"{"model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": "?", "x": 1}}}"#, &Capabilities::default())
        .expect_err("an extra field is refused");
    let body: ValidationErrorBody = errors.into();
    assert_eq!(
        serde_json::to_value(&body).expect("serialises"),
        json!({"detail": [{
            "loc": ["body", "questions", "q", "noul", "x"],
            "msg": "Extra inputs are not permitted: a noul question takes only \"type\", \"instructions\", \"criteria\"; got \"x\"",
            "type": "extra_forbidden",
            "input": 1
        }]})
    );
}
