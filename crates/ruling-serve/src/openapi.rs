//! The OpenAPI 3.1 document of the server, generated from the wire types.
//!
//! The schemas come from the same `schemars` derives as `ruling_schema::request_schema()` and
//! friends, generated together so shared definitions (`Question`, `Text`, `LocItem`, ...)
//! appear once under `components/schemas`. `docs/openapi.json` is this document, checked in;
//! `tests/openapi.rs` fails when the two drift (`UPDATE_OPENAPI=1 cargo test -p ruling-serve
//! --test openapi` rewrites it).

use ruling_schema::{
    ModelsList, SystemOneRequest, SystemOneResponse, ValidationErrorBody, capacity,
};
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::error::ErrorMessage;
use crate::routes::Health;

/// The document, as served at `/openapi.json`.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let request = generator.subschema_for::<SystemOneRequest>();
    let response = generator.subschema_for::<SystemOneResponse>();
    let validation = generator.subschema_for::<ValidationErrorBody>();
    let message = generator.subschema_for::<ErrorMessage>();
    let models = generator.subschema_for::<ModelsList>();
    let health = generator.subschema_for::<Health>();
    let schemas = generator.take_definitions(true);

    let error = |description: &str| {
        json!({
            "description": description,
            "headers": {"x-request-id": {"$ref": "#/components/headers/RequestId"}},
            "content": {"application/json": {"schema": message}},
        })
    };
    let retryable = |description: &str| {
        json!({
            "description": description,
            "headers": {
                "x-request-id": {"$ref": "#/components/headers/RequestId"},
                "retry-after": {"$ref": "#/components/headers/RetryAfter"},
            },
            "content": {"application/json": {"schema": message}},
        })
    };
    let ok = |description: &str, schema: &schemars::Schema| {
        json!({
            "description": description,
            "headers": {"x-request-id": {"$ref": "#/components/headers/RequestId"}},
            "content": {"application/json": {"schema": schema}},
        })
    };
    let bearer = json!([{"bearer": []}, {}]);

    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "ruling: System One v1",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Typed questions about a state, answered with calibrated probabilities read from a local model's logits.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": {
            "/v1/systemone": {
                "post": {
                    "operationId": "systemOne",
                    "summary": "Answer typed questions (noul, choice, score, box) about a state",
                    "description": "The body may be sent `Content-Encoding: zstd` or `gzip`. Images go inline (`data_base64`) or as `multipart/form-data`: a JSON part named `request` and one part per image, named by its asset's `part`.",
                    "security": bearer,
                    "parameters": [{"$ref": "#/components/parameters/RequestId"}],
                    "requestBody": {
                        "required": true,
                        "content": {
                            "application/json": {"schema": request},
                            "multipart/form-data": {
                                "schema": {
                                    "type": "object",
                                    "required": ["request"],
                                    "properties": {"request": request},
                                    "additionalProperties": {
                                        "type": "string",
                                        "contentMediaType": "application/octet-stream",
                                        "description": "An image (PNG or JPEG), claimed by the asset whose `part` is this part's name",
                                    },
                                },
                                "encoding": {"request": {"contentType": "application/json"}},
                            },
                        },
                    },
                    "responses": {
                        "200": ok("Every question answered", &response),
                        "400": error("The body could not be read (broken compression or multipart framing)"),
                        "401": error("An API key is configured and was not sent, or is wrong"),
                        "408": error("The body did not arrive whole within the server's body timeout"),
                        "413": error("The body, decompressed, is over the server's limit"),
                        "415": error("A content-encoding other than zstd or gzip"),
                        "422": {
                            "description": format!("The request is malformed, names an unknown model, or asks beyond the model's capacity (the message then contains {})", capacity_phrases()),
                            "headers": {"x-request-id": {"$ref": "#/components/headers/RequestId"}},
                            "content": {"application/json": {"schema": validation}},
                        },
                        "429": retryable("Every worker is busy and the queue is full"),
                        "500": error("The engine failed on a valid request"),
                        "503": retryable("The model is still loading, or the request was not answered within the server's timeout"),
                    },
                },
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": "The served model and its aliases",
                    "security": bearer,
                    "parameters": [{"$ref": "#/components/parameters/RequestId"}],
                    "responses": {
                        "200": ok("The names the `model` field may carry", &models),
                        "401": error("An API key is configured and was not sent, or is wrong"),
                        "503": retryable("The model is still loading"),
                    },
                },
            },
            "/health": {
                "get": {
                    "operationId": "health",
                    "summary": "Whether the model is loaded (never needs a key)",
                    "responses": {
                        "200": ok("The model is loaded and answering", &health),
                        "503": {
                            "description": "The model is still loading",
                            "headers": {
                                "x-request-id": {"$ref": "#/components/headers/RequestId"},
                                "retry-after": {"$ref": "#/components/headers/RetryAfter"},
                            },
                            "content": {"application/json": {"schema": health}},
                        },
                    },
                },
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics (text format 0.0.4)",
                    "security": bearer,
                    "responses": {
                        "200": {
                            "description": "Requests by route and status, latency, queue depth, workers, tokens, prefix cache",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": error("An API key is configured and was not sent, or is wrong"),
                    },
                },
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": {
                        "200": {
                            "description": "The OpenAPI 3.1 document",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                    },
                },
            },
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Required only when the server runs with --api-key (RULING_API_KEY)",
                },
            },
            "parameters": {
                "RequestId": {
                    "name": "x-request-id",
                    "in": "header",
                    "required": false,
                    "description": "Echoed back when it is 1 to 128 printable ASCII characters; otherwise the server makes one",
                    "schema": {"type": "string", "maxLength": 128},
                },
            },
            "headers": {
                "RequestId": {
                    "description": "The request's id (also sent as x-typesafe-request-id)",
                    "schema": {"type": "string"},
                },
                "RetryAfter": {
                    "description": "Seconds to wait before retrying",
                    "schema": {"type": "integer", "minimum": 1},
                },
            },
        },
    })
}

/// The capacity phrases as the 400's description lists them: "`a`, `b`, `c` or `d`".
fn capacity_phrases() -> String {
    let quoted: Vec<String> = capacity::ALL.iter().map(|p| format!("`{p}`")).collect();
    let (last, rest) = quoted.split_last().expect("there are capacity phrases");
    format!("{} or {last}", rest.join(", "))
}
