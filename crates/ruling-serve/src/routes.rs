//! The routes and their handlers.
//!
//! | route | auth | what |
//! |---|---|---|
//! | `POST /v1/systemone` | key | answer a System One request (JSON, or multipart with images) |
//! | `GET /v1/models` | key | the served name, its aliases and the adapters served beside it |
//! | `GET /metrics` | key | Prometheus text |
//! | `GET /health` | open | 200 once the model is loaded, 503 before (alive) |
//! | `GET /ready` | open | 200 while a request would be admitted now, 503 while loading or while the estimated wait is past the bound (ready to answer) |
//! | `GET /openapi.json` | open | the OpenAPI 3.1 document of these routes |

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router, middleware};
use ruling_core::Cancel;
use ruling_schema::{ErrorDetail, LocItem, ModelInfo, ModelsList, ValidRequest, ValidationErrors};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tower_http::decompression::RequestDecompressionLayer;

use crate::config::Config;
use crate::error::ApiError;
use crate::queue::{Failed, Job, Outcome, Rejected};
use crate::request_id::RequestId;
use crate::state::{AppState, Ready};
use crate::{auth, body, metrics, multipart, openapi, request_id};

/// Bodies up to this size are validated on the async thread; larger ones on the blocking pool.
const INLINE_VALIDATION_BYTES: usize = 64 * 1024;

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `ok` once the model answers, `loading` before.
    pub status: String,
    /// The served name once loaded; the model spec being loaded before.
    pub model: String,
}

/// `GET /ready`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Readiness {
    /// `ready` while a request would be admitted now; `busy` while the estimated wait is past
    /// the bound (or the queue is full); `loading` before the model answers.
    pub status: String,
    /// The served name, once loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The wait a request admitted now would meet.
    pub estimated_wait_seconds: f64,
}

/// The whole application: routes, authentication, decompression, request ids, metrics.
pub fn app(state: AppState) -> Router {
    let protected = Router::new()
        .route("/v1/systemone", post(system_one))
        .route("/v1/models", get(models))
        .route("/metrics", get(prometheus))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/openapi.json", get(openapi_json))
        .merge(protected)
        .fallback(not_found)
        .layer(RequestDecompressionLayer::new())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            request_id::layer,
        ))
        .with_state(state)
}

async fn not_found() -> StatusCode {
    StatusCode::NOT_FOUND
}

async fn health(State(state): State<AppState>) -> Response {
    match state.ready() {
        Some(ready) => Json(Health {
            status: "ok".to_owned(),
            model: ready.served_name().to_owned(),
        })
        .into_response(),
        None => {
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Health {
                    status: "loading".to_owned(),
                    model: state.loading().to_owned(),
                }),
            )
                .into_response();
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("5"));
            response
        }
    }
}

/// Whether a request to the base model would be admitted now: a load balancer's readiness
/// probe, which takes a replica out of rotation while it loads and while its queue is full.
async fn ready(State(state): State<AppState>) -> Response {
    let busy = |status: &str, wait: Duration| {
        let retry = wait.as_secs_f64().ceil().clamp(1.0, 300.0) as u64;
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness {
                status: status.to_owned(),
                model: None,
                estimated_wait_seconds: wait.as_secs_f64(),
            }),
        )
            .into_response();
        if let Ok(value) = HeaderValue::from_str(&retry.to_string()) {
            response.headers_mut().insert(RETRY_AFTER, value);
        }
        response
    };
    let Some(ready) = state.ready() else {
        return busy("loading", Duration::from_secs(5));
    };
    let wait = ready.pool.estimated_wait();
    if ready.pool.admits(ready.served_name()) {
        Json(Readiness {
            status: "ready".to_owned(),
            model: Some(ready.served_name().to_owned()),
            estimated_wait_seconds: wait.as_secs_f64(),
        })
        .into_response()
    } else {
        busy("busy", wait)
    }
}

async fn openapi_json() -> Json<Value> {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(openapi::document);
    Json(DOCUMENT.clone())
}

async fn prometheus(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = state
        .metrics()
        .render()
        .map_err(|_| ApiError::Internal("the metrics could not be rendered".to_owned()))?;
    Ok(([(CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

async fn models(State(state): State<AppState>) -> Result<Json<ModelsList>, ApiError> {
    let ready = state.require_ready()?;
    let served = ready.served_name();
    let models = ready
        .names
        .iter()
        .map(|(name, index)| ModelInfo {
            name: name.clone(),
            description: match ready.models[*index].adapter() {
                Some(adapter) => format!(
                    "LoRA adapter of {served} (sha256 {})",
                    adapter.digest.get(..12).unwrap_or(&adapter.digest)
                ),
                None if name == served => ready.meta.description.clone(),
                None => format!("alias of {served}: {}", ready.meta.description),
            },
            release_date: ready.meta.release_date.clone(),
        })
        .collect();
    Ok(Json(ModelsList { models }))
}

/// `POST /v1/systemone`: read and validate the request, queue it for its model's worker, and
/// answer within the deadline (the client going away stops the work).
async fn system_one(
    State(state): State<AppState>,
    Extension(RequestId(request_id)): Extension<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let config = state.config();
    let deadline = Instant::now() + config.timeout;
    let ready = state.require_ready()?;
    let (model, valid) = read_request(ready, config, &headers, body).await?;

    let (reply, answer) = oneshot::channel();
    let cancel = Cancel::with_deadline(deadline).allowing(config.timeout);
    // Dropped with this handler: when the client goes, or once it has its answer or error.
    let _stop_when_gone = cancel.cancel_on_drop();
    let job = Job {
        model,
        request: valid,
        request_id: request_id.clone(),
        deadline,
        cancel,
        reply,
    };
    match ready.pool.submit(job) {
        Ok(()) => {}
        Err(Rejected::Full) => {
            state.metrics().reject("queue_full");
            return Err(ApiError::Overloaded {
                retry_after: ready.pool.retry_after(),
            });
        }
        Err(Rejected::Busy { wait }) => {
            state.metrics().reject("estimated_wait");
            return Err(ApiError::Overloaded {
                retry_after: wait.as_secs_f64().ceil().clamp(1.0, 300.0) as u64,
            });
        }
        Err(Rejected::Closed) => return Err(ApiError::ShuttingDown),
    }
    // Dropping `answer` (on timeout, or when the client goes and this future with it) tells the
    // worker to skip the job if it has not started it, and the guard above to stop it if it
    // has.
    match tokio::time::timeout_at(deadline.into(), answer).await {
        Ok(Ok(outcome)) => respond(&state, outcome),
        // The worker drops a job whose deadline passed while it waited.
        Ok(Err(_)) | Err(_) => {
            state.metrics().reject("timeout");
            Err(ApiError::TimedOut {
                after: config.timeout,
                retry_after: ready.pool.retry_after(),
            })
        }
    }
}

/// The body, read within its time limit, validated against the served base's capabilities,
/// and the model it names; refused when it asks more questions than the server takes.
async fn read_request(
    ready: &Ready,
    config: &Config,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<ruling_core::Ruling>, ValidRequest), ApiError> {
    let bytes = tokio::time::timeout(
        config.body_timeout,
        body::read(headers, body, config.max_body_bytes),
    )
    .await
    .map_err(|_| ApiError::BodyTimedOut {
        after: config.body_timeout,
    })??;
    // Adapters change weights, not capabilities: the base's hold for every served name.
    let valid = parse(headers, bytes, ready.base().info().capabilities).await?;
    let Some(model) = ready.model(valid.model()) else {
        return Err(unknown_model(valid.model(), &ready.name_list()));
    };
    let asked = valid.questions().len();
    if asked > config.max_questions {
        return Err(too_many_questions(asked, config.max_questions));
    }
    Ok((Arc::clone(model), valid))
}

/// The worker's outcome as the HTTP response: the answers with their token counts counted and
/// the queue and engine times in `server-timing`, or the error.
fn respond(state: &AppState, outcome: Outcome) -> Result<Response, ApiError> {
    match outcome {
        Ok(answered) => {
            let usage = answered.response.usage;
            state.metrics().input_tokens.inc_by(usage.input_tokens);
            state.metrics().output_tokens.inc_by(usage.output_tokens);
            let mut response = Json(answered.response).into_response();
            if let Ok(timing) =
                HeaderValue::from_str(&server_timing(answered.queued, answered.engine))
            {
                response.headers_mut().insert("server-timing", timing);
            }
            Ok(response)
        }
        Err(Failed::Engine(error)) => {
            let error = ApiError::from(error);
            if let ApiError::Internal(message) = &error {
                tracing::error!(%message, "the engine failed on a valid request");
            }
            Err(error)
        }
        Err(Failed::Panicked(message)) => Err(ApiError::Internal(format!(
            "the engine panicked: {message}"
        ))),
    }
}

/// Validate a JSON or multipart body into a request; large bodies off the async threads.
async fn parse(
    headers: &HeaderMap,
    bytes: Bytes,
    caps: ruling_schema::Capabilities,
) -> Result<ValidRequest, ApiError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let size = bytes.len();
    let result = if multipart::is_multipart(content_type) {
        let form = multipart::read_form(bytes, content_type).await?;
        off_runtime(size, move || multipart::assemble(form, &caps)).await?
    } else {
        // Any other content type is read as JSON: curl's default form type included.
        off_runtime(size, move || ruling_schema::parse_request(&bytes, &caps)).await?
    };
    result.map_err(ApiError::Invalid)
}

async fn off_runtime<T: Send + 'static>(
    size: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    if size <= INLINE_VALIDATION_BYTES {
        return Ok(work());
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ApiError::Internal("request validation failed unexpectedly".to_owned()))
}

fn unknown_model(given: &str, names: &[String]) -> ApiError {
    let detail = ErrorDetail::new(
        vec![LocItem::from("body"), LocItem::from("model")],
        "value_error",
        format!(
            "Value error, unknown model {given:?}: this server serves {}",
            names
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
    .with_input(json!(given))
    .with_ctx(json!({"known": names}));
    ApiError::Invalid(ValidationErrors::new(vec![detail]))
}

fn too_many_questions(asked: usize, max: usize) -> ApiError {
    let detail = ErrorDetail::new(
        vec![LocItem::from("body"), LocItem::from("questions")],
        "too_long",
        format!(
            "Dictionary should have at most {max} items: this server takes at most {max} questions per request; got {asked}"
        ),
    )
    .with_ctx(json!({"field_type": "Dictionary", "max_length": max, "actual_length": asked}));
    ApiError::Invalid(ValidationErrors::new(vec![detail]))
}

fn server_timing(queued: Duration, engine: Duration) -> String {
    format!(
        "queue;dur={:.1}, engine;dur={:.1}",
        queued.as_secs_f64() * 1e3,
        engine.as_secs_f64() * 1e3
    )
}
