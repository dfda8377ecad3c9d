//! The generated JSON Schemas: a snapshot catches accidental wire changes, and direct checks
//! say what must be there whatever the snapshot holds.

use ruling_schema::{request_schema, response_schema};
use serde_json::Value;

fn tags(schema: &Value, def: &str) -> Vec<String> {
    schema["$defs"][def]["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("{def} is a oneOf"))
        .iter()
        .map(|variant| {
            variant["properties"]["type"]["const"]
                .as_str()
                .unwrap_or_else(|| panic!("{def} variant has a const type: {variant}"))
                .to_owned()
        })
        .collect()
}

#[test]
fn request_schema_has_the_four_question_types() {
    let schema = request_schema().to_value();
    assert_eq!(
        tags(&schema, "Question"),
        ["noul", "choice", "score", "box"]
    );
    assert_eq!(
        schema["required"],
        serde_json::json!(["model", "state", "questions"])
    );
}

#[test]
fn response_schema_has_the_four_answer_types() {
    let schema = response_schema().to_value();
    assert_eq!(tags(&schema, "Answer"), ["noul", "choice", "score", "box"]);
}

#[test]
fn request_schema_snapshot() {
    insta::assert_json_snapshot!("request_schema", request_schema());
}

#[test]
fn response_schema_snapshot() {
    insta::assert_json_snapshot!("response_schema", response_schema());
}
