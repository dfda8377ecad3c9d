//! The outermost layer: a request id on every request and response, one access-log line and
//! the request metrics per request, and a JSON body on every error response.
//!
//! The id is the client's `x-request-id` (or `x-typesafe-request-id`, the header typesafe-sdk
//! reads back) when it is a short printable token, else a fresh random one; the response
//! carries it under both names. Headers are never logged, so neither is the API key.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use tracing::Instrument;

use crate::error::message_response;
use crate::metrics::{RequestLabels, RouteLabels};
use crate::state::AppState;

/// `x-request-id`.
pub(crate) static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// What typesafe-sdk reads a response's request id from.
pub(crate) static TYPESAFE_REQUEST_ID: HeaderName =
    HeaderName::from_static("x-typesafe-request-id");

/// The id of the request being handled, for handlers and the worker's log lines.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub String);

const MAX_CLIENT_ID: usize = 128;

fn client_id(headers: &HeaderMap) -> Option<String> {
    [&REQUEST_ID, &TYPESAFE_REQUEST_ID]
        .into_iter()
        .filter_map(|name| headers.get(name))
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .find(|id| {
            !id.is_empty() && id.len() <= MAX_CLIENT_ID && id.bytes().all(|b| b.is_ascii_graphic())
        })
        .map(str::to_owned)
}

fn fresh_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

pub(crate) async fn layer(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id = client_id(request.headers()).unwrap_or_else(fresh_id);
    request.extensions_mut().insert(RequestId(id.clone()));
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    // Unmatched paths share one label, so random URLs cannot grow the metric families.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let span = tracing::info_span!("request", request_id = %id);

    let response = next.run(request).instrument(span.clone()).await;
    let mut response = json_error_body(response).await;

    // Validated above as visible ASCII, or our own hex.
    if let Ok(value) = HeaderValue::from_str(&id) {
        response
            .headers_mut()
            .insert(REQUEST_ID.clone(), value.clone());
        response
            .headers_mut()
            .insert(TYPESAFE_REQUEST_ID.clone(), value);
    }
    let status = response.status();
    let elapsed = started.elapsed();
    let metrics = state.metrics();
    metrics
        .requests
        .get_or_create(&RequestLabels {
            route: route.clone(),
            method: method.to_string(),
            status: status.as_u16(),
        })
        .inc();
    metrics
        .latency
        .get_or_create(&RouteLabels {
            route: route.clone(),
        })
        .observe(elapsed.as_secs_f64());
    let latency_ms = elapsed.as_secs_f64() * 1e3;
    if route == "/health" || route == "/metrics" {
        tracing::debug!(parent: &span, %method, %path, status = status.as_u16(), latency_ms, "answered");
    } else {
        tracing::info!(parent: &span, %method, %path, status = status.as_u16(), latency_ms, "answered");
    }
    response
}

/// Errors from layers and the router (404, 405, 415, ...) come with an empty or plain-text
/// body; clients parse error bodies as JSON, so give them `{"detail": ...}`.
async fn json_error_body(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match http_body_util::Limited::new(body, 64 * 1024)
        .collect()
        .await
    {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes())
            .trim()
            .to_owned(),
        Err(_) => String::new(),
    };
    let detail = if text.is_empty() {
        default_detail(status)
    } else {
        text
    };
    let fresh = message_response(status, detail);
    let (fresh_parts, fresh_body) = fresh.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(fresh_parts.headers);
    Response::from_parts(parts, fresh_body)
}

fn default_detail(status: StatusCode) -> String {
    match status {
        StatusCode::NOT_FOUND => "no such route; see /openapi.json".to_owned(),
        StatusCode::METHOD_NOT_ALLOWED => "this route does not take this method".to_owned(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            "unsupported content-encoding; send the body as is, or zstd or gzip".to_owned()
        }
        other => other
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_owned(),
    }
}
