//! Reading a request body whole, under the size limit, after decompression.
//!
//! The limit applies to the decompressed bytes (the decompression layer sits before this
//! reader), so a small zstd bomb cannot expand past it. A body over the limit is refused with
//! 413 without being kept; what is left of it is read and discarded (up to 64 MiB) so that the
//! client, still sending, gets to read the answer rather than a reset connection.

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_LENGTH;
use http_body_util::BodyExt;

use crate::error::ApiError;

/// Past the limit the rest of a body is still read and thrown away, up to this many bytes in
/// all, so the client finishes sending and reads its 413 instead of a reset connection.
const DRAIN_CAP: u64 = 64 * 1024 * 1024;

pub(crate) async fn read(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        if declared.is_some_and(|n| n <= DRAIN_CAP) {
            drain(body, DRAIN_CAP).await;
        }
        return Err(ApiError::TooLarge { limit });
    }
    let mut body = body;
    let mut collected = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            ApiError::BadRequest(format!(
                "the request body could not be read: {}",
                chain(&error)
            ))
        })?;
        if let Ok(data) = frame.into_data() {
            if collected.len() + data.len() > limit {
                drain(body, DRAIN_CAP.saturating_sub(collected.len() as u64)).await;
                return Err(ApiError::TooLarge { limit });
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(collected))
}

/// Read and discard up to `cap` more bytes of `body`, giving up at the first error.
async fn drain(mut body: Body, cap: u64) {
    let mut seen = 0u64;
    while seen <= cap {
        match body.frame().await {
            Some(Ok(frame)) => {
                seen += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            _ => return,
        }
    }
}

/// An error and its causes, `: `-separated.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut current = error.source();
    while let Some(e) = current {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        current = e.source();
    }
    out
}
