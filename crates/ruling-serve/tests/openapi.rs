//! `docs/openapi.json` is the document the server generates from the wire types; this fails
//! when they drift. Regenerate with `UPDATE_OPENAPI=1 cargo test -p ruling-serve --test openapi`.

use std::path::PathBuf;

use serde_json::Value;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

fn generated() -> String {
    let mut text = serde_json::to_string_pretty(&ruling_serve::openapi::document())
        .expect("the document serialises");
    text.push('\n');
    text
}

#[test]
fn docs_openapi_json_is_the_generated_document() {
    let path = checked_in();
    let fresh = generated();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &fresh).expect("docs/openapi.json is written");
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == fresh,
        "{} is out of date with the wire types; regenerate it with \
         `UPDATE_OPENAPI=1 cargo test -p ruling-serve --test openapi` and review the diff",
        path.display()
    );
}

/// Every `$ref` points at something the document defines.
#[test]
fn every_reference_resolves() {
    let document = ruling_serve::openapi::document();
    let mut refs = Vec::new();
    collect_refs(&document, &mut refs);
    assert!(refs.len() > 10, "the document uses references: {refs:?}");
    for reference in refs {
        let pointer = reference
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("a local reference: {reference}"));
        assert!(
            document.pointer(pointer).is_some(),
            "{reference} does not resolve"
        );
    }
}

#[test]
fn the_document_covers_the_routes_and_the_error_shapes() {
    let document = ruling_serve::openapi::document();
    assert_eq!(document["openapi"], "3.1.0");
    for path in [
        "/v1/systemone",
        "/v1/models",
        "/health",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(document["paths"].get(path).is_some(), "{path}");
    }
    let schemas = &document["components"]["schemas"];
    for name in [
        "SystemOneRequest",
        "SystemOneResponse",
        "ValidationErrorBody",
        "ErrorMessage",
        "ModelsList",
        "Health",
        "Question",
        "Answer",
    ] {
        assert!(schemas.get(name).is_some(), "components/schemas/{name}");
    }
    let post = &document["paths"]["/v1/systemone"]["post"];
    for status in ["200", "401", "413", "422", "429", "503"] {
        assert!(
            post["responses"].get(status).is_some(),
            "POST /v1/systemone {status}"
        );
    }
    assert!(
        post["requestBody"]["content"]
            .get("multipart/form-data")
            .is_some()
    );
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}
