//! `ruling-serve route`: several identical `ruling-serve` replicas behind one address.
//!
//! A request is sent to the replica its state hashes to, by rendezvous hashing (each replica
//! scores `sha256(replica, state)`, the highest wins), so every request about one state lands
//! on the same replica and its prefix cache keeps hitting; adding or removing a replica moves
//! only the states that hashed to it. When the chosen replica cannot be reached, the request
//! goes to the next in that state's order. The state is read from the JSON body (after any
//! `zstd`/`gzip` content encoding); a body that is not JSON (a multipart upload, or a
//! malformed request the replica will refuse) is hashed whole. Every other route goes to the
//! replicas in a fixed order, and everything the replica answers (status, `retry-after`,
//! request id, body) comes back unchanged.
//!
//! This is the scale-out recipe's router, kept small on purpose: a load balancer that can
//! hash a JSON field (or a client that sends its own affinity key) does the same job.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tower_http::decompression::RequestDecompressionLayer;

use crate::body;
use crate::error::message_response;

/// Where the replicas are and what a request may be.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Each replica's base URL (`http://host:port`).
    pub replicas: Vec<String>,
    /// Largest request body, after decompression.
    pub max_body_bytes: usize,
    /// The longest a replica may take to answer.
    pub timeout: Duration,
}

struct Replicas {
    config: RouteConfig,
    client: reqwest::Client,
}

/// The router's app, for callers that bring their own server loop.
pub fn route_app(config: RouteConfig) -> Result<Router, String> {
    if config.replicas.is_empty() {
        return Err("route needs at least one --replica URL".into());
    }
    for replica in &config.replicas {
        if !(replica.starts_with("http://") || replica.starts_with("https://")) {
            return Err(format!(
                "replica {replica:?} is not an http:// or https:// URL"
            ));
        }
    }
    let client = reqwest::Client::builder()
        .timeout(config.timeout)
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))?;
    let state = Arc::new(Replicas { config, client });
    Ok(Router::new()
        .fallback(forward)
        .with_state(state)
        .layer(RequestDecompressionLayer::new()))
}

/// Route until `shutdown` completes.
pub async fn route(
    config: RouteConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = route_app(config).map_err(std::io::Error::other)?;
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn forward(State(replicas): State<Arc<Replicas>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match body::read(&parts.headers, body, replicas.config.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(error) => return error.into_response(),
    };
    let key = affinity_key(&parts.method, parts.uri.path(), &bytes);
    let mut failures = Vec::new();
    for replica in rendezvous(&replicas.config.replicas, &key) {
        let url = format!(
            "{}{}",
            replica.trim_end_matches('/'),
            parts.uri.path_and_query().map_or("/", |p| p.as_str())
        );
        let mut outgoing = replicas
            .client
            .request(parts.method.clone(), &url)
            .body(bytes.clone());
        for (name, value) in &parts.headers {
            if forwarded(name) {
                outgoing = outgoing.header(name, value);
            }
        }
        match outgoing.send().await {
            Ok(answer) => return relay(answer).await,
            Err(error) => failures.push(format!("{replica}: {error}")),
        }
    }
    message_response(
        StatusCode::BAD_GATEWAY,
        format!("no replica answered: {}", failures.join("; ")),
    )
}

/// What a request is routed by: the JSON body's `state` for `POST /v1/systemone`, the whole
/// body when it is not JSON, the route for anything else.
fn affinity_key(method: &Method, path: &str, body: &Bytes) -> Vec<u8> {
    if method == Method::POST && path == "/v1/systemone" {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
            return value["state"].to_string().into_bytes();
        }
        return body.to_vec();
    }
    path.as_bytes().to_vec()
}

/// The replicas in the order a request with `key` tries them: highest score first.
fn rendezvous<'a>(replicas: &'a [String], key: &[u8]) -> Vec<&'a String> {
    let mut scored: Vec<([u8; 32], &String)> = replicas
        .iter()
        .map(|replica| {
            let mut hash = Sha256::new();
            hash.update(replica.as_bytes());
            hash.update([0u8]);
            hash.update(key);
            (hash.finalize().into(), replica)
        })
        .collect();
    scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    scored.into_iter().map(|(_, replica)| replica).collect()
}

/// Headers passed to the replica: the body is sent decompressed, and hop-by-hop headers and
/// the length belong to each connection.
fn forwarded(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::HOST
            | header::CONTENT_LENGTH
            | header::CONTENT_ENCODING
            | header::CONNECTION
            | header::TRANSFER_ENCODING
            | header::TE
            | header::UPGRADE
    )
}

/// The replica's answer, as it gave it.
async fn relay(answer: reqwest::Response) -> Response {
    let status = answer.status();
    let mut headers = HeaderMap::new();
    for (name, value) in answer.headers() {
        if forwarded(name) {
            headers.insert(name.clone(), value.clone());
        }
    }
    match answer.bytes().await {
        Ok(bytes) => {
            let mut response = Response::new(Body::from(bytes));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
        Err(error) => message_response(
            StatusCode::BAD_GATEWAY,
            format!("the replica's answer broke off: {error}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_always_goes_to_the_same_replica_and_only_its_own_move() {
        let three: Vec<String> = ["http://a:1", "http://b:1", "http://c:1"]
            .map(String::from)
            .to_vec();
        let two = three[..2].to_vec();
        let mut moved = 0;
        for i in 0..300 {
            let key = format!("\"state {i}\"").into_bytes();
            let first = rendezvous(&three, &key)[0];
            assert_eq!(first, rendezvous(&three, &key)[0], "stable");
            // Removing replica c moves only the states c had.
            if first != &three[2] {
                assert_eq!(first, rendezvous(&two, &key)[0]);
            } else {
                moved += 1;
            }
        }
        assert!((50..150).contains(&moved), "about a third move: {moved}");
    }

    #[test]
    fn the_state_is_the_key_whatever_is_asked_about_it() {
        let a = br#"{"model": "m", "state": {"ticket": 7}, "questions": {"q": {}}}"#;
        let b = br#"{"model": "m", "state": {"ticket": 7}, "questions": {"other": {}}}"#;
        let key = |body: &[u8]| {
            affinity_key(
                &Method::POST,
                "/v1/systemone",
                &Bytes::copy_from_slice(body),
            )
        };
        assert_eq!(key(a), key(b));
        assert_ne!(key(a), key(br#"{"state": {"ticket": 8}}"#));
        assert_eq!(key(b"not json"), b"not json".to_vec());
    }
}
