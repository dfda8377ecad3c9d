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
use crate::routes::{Health, Readiness};

/// The document, as served at `/openapi.json`.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let schemas = Schemas {
        request: generator.subschema_for::<SystemOneRequest>(),
        response: generator.subschema_for::<SystemOneResponse>(),
        validation: generator.subschema_for::<ValidationErrorBody>(),
        message: generator.subschema_for::<ErrorMessage>(),
        models: generator.subschema_for::<ModelsList>(),
        health: generator.subschema_for::<Health>(),
        readiness: generator.subschema_for::<Readiness>(),
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "ruling: System One v1",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Typed questions about a state, answered with calibrated probabilities read from a local model's logits.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": {
            "/v1/systemone": system_one(&schemas),
            "/v1/models": models(&schemas),
            "/health": health(&schemas),
            "/ready": ready(&schemas),
            "/metrics": metrics(&schemas),
            "/openapi.json": openapi(),
        },
        "components": components(generator.take_definitions(true)),
    })
}

/// The references to the wire types' schemas that the paths use; their definitions go under
/// `components/schemas`.
struct Schemas {
    request: schemars::Schema,
    response: schemars::Schema,
    validation: schemars::Schema,
    message: schemars::Schema,
    models: schemars::Schema,
    health: schemars::Schema,
    readiness: schemars::Schema,
}

impl Schemas {
    /// A response with the request id header and `schema` as its JSON body.
    fn body(description: &str, schema: &schemars::Schema) -> Value {
        json!({
            "description": description,
            "headers": {"x-request-id": {"$ref": "#/components/headers/RequestId"}},
            "content": {"application/json": {"schema": schema}},
        })
    }

    /// A response that may be retried: the request id and `retry-after` headers.
    fn retryable_body(description: &str, schema: &schemars::Schema) -> Value {
        json!({
            "description": description,
            "headers": {
                "x-request-id": {"$ref": "#/components/headers/RequestId"},
                "retry-after": {"$ref": "#/components/headers/RetryAfter"},
            },
            "content": {"application/json": {"schema": schema}},
        })
    }

    fn error(&self, description: &str) -> Value {
        Self::body(description, &self.message)
    }

    fn retryable(&self, description: &str) -> Value {
        Self::retryable_body(description, &self.message)
    }
}

const UNAUTHORIZED: &str = "An API key is configured and was not sent, or is wrong";

/// Every route but `/health` and `/openapi.json` takes the key when one is configured.
fn bearer() -> Value {
    json!([{"bearer": []}, {}])
}

fn system_one(s: &Schemas) -> Value {
    json!({
        "post": {
            "operationId": "systemOne",
            "summary": "Answer typed questions (noul, choice, score, box) about a state",
            "description": "The body may be sent `Content-Encoding: zstd` or `gzip`. Images go inline (`data_base64`) or as `multipart/form-data`: a JSON part named `request` and one part per image, named by its asset's `part`.",
            "security": bearer(),
            "parameters": [{"$ref": "#/components/parameters/RequestId"}],
            "requestBody": {
                "required": true,
                "content": {
                    "application/json": {"schema": s.request},
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "required": ["request"],
                            "properties": {"request": s.request},
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
                "200": Schemas::body("Every question answered", &s.response),
                "400": s.error("The body could not be read (broken compression or multipart framing)"),
                "401": s.error(UNAUTHORIZED),
                "408": s.error("The body did not arrive whole within the server's body timeout"),
                "413": s.error("The body, decompressed, is over the server's limit"),
                "415": s.error("A content-encoding other than zstd or gzip"),
                "422": Schemas::body(
                    &format!("The request is malformed, names an unknown model, or asks beyond the model's capacity (the message then contains {})", capacity_phrases()),
                    &s.validation,
                ),
                "429": s.retryable("Every worker is busy and the queue is full"),
                "500": s.error("The engine failed on a valid request"),
                "503": s.retryable("The model is still loading, or the request was not answered within the server's timeout"),
            },
        },
    })
}

fn models(s: &Schemas) -> Value {
    json!({
        "get": {
            "operationId": "listModels",
            "summary": "The served model and its aliases",
            "security": bearer(),
            "parameters": [{"$ref": "#/components/parameters/RequestId"}],
            "responses": {
                "200": Schemas::body("The names the `model` field may carry", &s.models),
                "401": s.error(UNAUTHORIZED),
                "503": s.retryable("The model is still loading"),
            },
        },
    })
}

fn health(s: &Schemas) -> Value {
    json!({
        "get": {
            "operationId": "health",
            "summary": "Whether the model is loaded (never needs a key)",
            "responses": {
                "200": Schemas::body("The model is loaded and answering", &s.health),
                "503": Schemas::retryable_body("The model is still loading", &s.health),
            },
        },
    })
}

fn ready(s: &Schemas) -> Value {
    json!({
        "get": {
            "operationId": "ready",
            "summary": "Whether a request would be admitted now: a load balancer's readiness probe (never needs a key)",
            "responses": {
                "200": Schemas::body("A request would be admitted now", &s.readiness),
                "503": Schemas::retryable_body("Loading, or the estimated wait is past the bound; retry-after is that wait", &s.readiness),
            },
        },
    })
}

fn metrics(s: &Schemas) -> Value {
    json!({
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics (text format 0.0.4)",
            "security": bearer(),
            "responses": {
                "200": {
                    "description": "Requests by route and status, latency, queue depth, workers, tokens, prefix cache",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "401": s.error(UNAUTHORIZED),
            },
        },
    })
}

fn openapi() -> Value {
    json!({
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
    })
}

/// Shared definitions: the wire types' schemas, the bearer scheme, the request id parameter
/// and the headers responses carry.
fn components(schemas: serde_json::Map<String, Value>) -> Value {
    json!({
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
    })
}

/// The capacity phrases as the 422's description lists them: "`a`, `b`, `c` or `d`".
fn capacity_phrases() -> String {
    let quoted: Vec<String> = capacity::ALL.iter().map(|p| format!("`{p}`")).collect();
    let (last, rest) = quoted.split_last().expect("there are capacity phrases");
    format!("{} or {last}", rest.join(", "))
}
