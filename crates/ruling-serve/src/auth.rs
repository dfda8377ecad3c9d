//! The optional API key: `Authorization: Bearer KEY`, as typesafe-sdk sends it.
//!
//! Only the key's SHA-256 is kept, so no `Debug`, log line or panic message can show the key,
//! and the comparison runs over two 32-byte digests in constant time, so neither the key's
//! contents nor its length leak through response timing.

use std::fmt;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::state::AppState;

/// A bearer key the server requires.
#[derive(Clone)]
pub struct ApiKey {
    digest: [u8; 32],
}

impl ApiKey {
    /// `None` for an empty key (after trimming), which would otherwise lock every client out
    /// or, worse, let an empty bearer through.
    pub fn new(key: &str) -> Option<Self> {
        let key = key.trim();
        (!key.is_empty()).then(|| Self {
            digest: Sha256::digest(key.as_bytes()).into(),
        })
    }

    /// Whether `presented` is the key, in time independent of both.
    pub fn verify(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        digest.ct_eq(&self.digest).into()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// The bearer token of an `Authorization` header, if it has one (scheme case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
}

/// Refuses a request without the configured key with 401; passes everything when no key is
/// configured.
pub(crate) async fn require_key(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(key) = state.config().api_key.as_ref() else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()));
    match presented {
        Some(token) if key.verify(token) => next.run(request).await,
        Some(_) => ApiError::Unauthorized("the API key is not valid").into_response(),
        None => {
            ApiError::Unauthorized("an API key is required: send `Authorization: Bearer <key>`")
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_verifies_and_nothing_else_does() {
        let key = ApiKey::new(" s3cret ").expect("non-empty");
        assert!(key.verify(b"s3cret"));
        assert!(!key.verify(b"s3cre"));
        assert!(!key.verify(b"s3cret "));
        assert!(!key.verify(b""));
        assert!(ApiKey::new("  ").is_none());
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
    }

    #[test]
    fn bearer_reads_the_token() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer"), None);
    }
}
