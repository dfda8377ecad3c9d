//! The one place that decides a failure's status code and body.
//!
//! | status | when | body |
//! |---|---|---|
//! | 400 | the body could not be read (broken compression, broken multipart framing) | `{"detail": msg}` |
//! | 401 | a key is configured and the request lacks it or has another | `{"detail": msg}` |
//! | 408 | the body did not arrive whole within `--body-timeout` of the request head | `{"detail": msg}` |
//! | 413 | the body, after decompression, is over `--max-body-bytes` | `{"detail": msg}` |
//! | 422 | validation, an unknown model name, too many questions, or a capacity refusal | `{"detail": [{"loc", "msg", "type", ...}]}` |
//! | 429 | the queue is full | `{"detail": msg}`, `retry-after` |
//! | 503 | the model is still loading, or the request was not answered within `--timeout` | `{"detail": msg}`, `retry-after` |
//! | 500 | the engine failed (or panicked) on a valid request | `{"detail": msg}` |
//! | 502 | a remote engine's upstream failed, could not be reached, or answered garbage | `{"detail": msg}` |
//! | 504 | a remote engine's upstream did not answer in time | `{"detail": msg}` |
//!
//! A remote engine's upstream that is busy (429, or 503 with `retry-after`) is answered with
//! its own status and `retry-after`, after this server's retries; its 422 with its details.
//!
//! Clients retry 408, 429 and 5xx, so every one of those means "try again"; every 4xx other
//! than 429 means "this request will never succeed as sent".

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ruling_backend::{BackendError, ContractError, EngineError, UpstreamError, UpstreamFailure};
use ruling_core::CoreError;
use ruling_schema::{ErrorDetail, LocItem, ValidationErrors};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The body of every error response but 422: FastAPI's `{"detail": "..."}`, which
/// typesafe-sdk and other System One clients read their message from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorMessage {
    /// What went wrong, for humans.
    pub detail: String,
}

/// A request that failed, as the client will see it.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// 422 with every problem found.
    Invalid(ValidationErrors),
    /// 400: the body could not be read at all.
    BadRequest(String),
    /// 401.
    Unauthorized(&'static str),
    /// 408: the body was still arriving when its time ran out.
    BodyTimedOut { after: Duration },
    /// 413.
    TooLarge { limit: usize },
    /// 429: no room in the queue.
    Overloaded { retry_after: u64 },
    /// 503: the model is not loaded yet.
    Loading { retry_after: u64 },
    /// 503: not answered within the per-request timeout.
    TimedOut { after: Duration, retry_after: u64 },
    /// 503: the server is shutting down and takes no new work.
    ShuttingDown,
    /// 500: the engine failed on a valid request.
    Internal(String),
    /// 429, 502, 503 or 504: a remote engine's upstream failed as `UpstreamError` says.
    Upstream(UpstreamError),
}

impl ApiError {
    /// One detail at `loc`, as a 422.
    pub(crate) fn at(loc: Vec<LocItem>, kind: &str, msg: impl Into<String>) -> Self {
        Self::Invalid(ValidationErrors::new(vec![ErrorDetail::new(
            loc, kind, msg,
        )]))
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::BodyTimedOut { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Loading { .. } | Self::TimedOut { .. } | Self::ShuttingDown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Upstream(error) => match error.failure {
                UpstreamFailure::Busy { status: 429, .. } => StatusCode::TOO_MANY_REQUESTS,
                UpstreamFailure::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
                UpstreamFailure::Timeout => StatusCode::GATEWAY_TIMEOUT,
                UpstreamFailure::Failed | UpstreamFailure::Refused { .. } => {
                    StatusCode::BAD_GATEWAY
                }
            },
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::Overloaded { retry_after }
            | Self::Loading { retry_after }
            | Self::TimedOut { retry_after, .. } => Some(*retry_after),
            Self::ShuttingDown => Some(1),
            Self::Upstream(UpstreamError {
                failure: UpstreamFailure::Busy { retry_after, .. },
                ..
            }) => Some(retry_after.unwrap_or(1)),
            _ => None,
        }
    }
}

impl From<CoreError> for ApiError {
    fn from(error: CoreError) -> Self {
        match error {
            CoreError::Invalid(errors) => Self::Invalid(errors),
            CoreError::Engine(error) => error.into(),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let body = || vec![LocItem::from("body")];
        let at = |items: &[&str]| {
            let mut loc = body();
            loc.extend(items.iter().map(|i| LocItem::from(*i)));
            loc
        };
        match error {
            // Capacity refusals: the message carries "maximum context length".
            EngineError::InputTooLong { question, message } => {
                let loc = match &question {
                    Some(id) => at(&["questions", id]),
                    None => at(&["state"]),
                };
                let detail = ErrorDetail::new(loc, "value_error", message)
                    .with_ctx(json!({"question": question}));
                Self::Invalid(ValidationErrors::new(vec![detail]))
            }
            EngineError::Backend(error @ BackendError::ContextExceeded { .. }) => {
                Self::at(body(), "value_error", error.to_string())
            }
            // An image that cannot be read: a 422 naming its placeholder.
            EngineError::Asset {
                placeholder,
                message,
            } => Self::at(at(&["assets", &placeholder]), "value_error", message),
            EngineError::Unsupported(message) => {
                Self::at(at(&["questions"]), "value_error", message)
            }
            EngineError::Contract(error @ ContractError::StateContainsMarker { .. }) => {
                Self::at(at(&["state"]), "value_error", error.to_string())
            }
            EngineError::Refused(errors) => Self::Invalid(errors),
            // A request that cannot be answered in time on this machine: a 422, so that a
            // client changes it rather than retrying it as it would a 503.
            error @ EngineError::TooSlow { .. } => {
                Self::at(at(&["questions"]), "value_error", error.to_string())
            }
            EngineError::Backend(BackendError::Upstream(error)) => Self::Upstream(error),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = self.retry_after();
        let mut response = match self {
            Self::Invalid(errors) => (status, Json(errors.into_body())).into_response(),
            Self::BadRequest(message) => message_response(status, message),
            Self::Unauthorized(message) => {
                let mut response = message_response(status, message.to_owned());
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer"),
                );
                response
            }
            Self::BodyTimedOut { after } => message_response(
                status,
                format!(
                    "the request body did not arrive within {:.1} s of the request head \
                     (--body-timeout); send it whole and retry",
                    after.as_secs_f64()
                ),
            ),
            Self::TooLarge { limit } => message_response(
                status,
                format!("the request body is over the limit of {limit} bytes (after decompression)"),
            ),
            Self::Overloaded { .. } => message_response(
                status,
                "the server is at capacity: every worker is busy and the queue is full; retry after the retry-after header's seconds".to_owned(),
            ),
            Self::Loading { .. } => message_response(
                status,
                "the model is still loading; retry after the retry-after header's seconds".to_owned(),
            ),
            Self::TimedOut { after, .. } => message_response(
                status,
                format!(
                    "the request was not answered within {:.1} s (queue wait included); the server is busy, retry later",
                    after.as_secs_f64()
                ),
            ),
            Self::ShuttingDown => {
                message_response(status, "the server is shutting down".to_owned())
            }
            Self::Internal(message) => {
                message_response(status, format!("internal error: {message}"))
            }
            Self::Upstream(error) => message_response(status, error.to_string()),
        };
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// `{"detail": message}` with `status`.
pub(crate) fn message_response(status: StatusCode, detail: String) -> Response {
    (status, Json(ErrorMessage { detail })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_too_slow_for_the_timeout_is_a_422_with_no_retry_after() {
        let error = ApiError::from(EngineError::TooSlow {
            tokens: 12_000,
            seconds: 140.0,
            rate: 85.7,
            allowed: 30.0,
        });
        assert_eq!(error.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(error.retry_after(), None);
        let ApiError::Invalid(errors) = error else {
            panic!("a validation-shaped refusal");
        };
        let body = serde_json::to_value(errors.into_body()).unwrap();
        let detail = &body["detail"][0];
        assert_eq!(detail["loc"], serde_json::json!(["body", "questions"]));
        let message = detail["msg"].as_str().unwrap();
        assert!(
            message.contains("cannot be answered in time") && message.contains("30.0 s"),
            "{message}"
        );
    }
}
