//! `systemone:URL#MODEL`: another System One server behind this one.
//!
//! The request has been validated here already (so a malformed one never reaches the
//! upstream); it is forwarded as the wire format has it, naming the upstream's model, and the
//! upstream's answers come back as they were, under this server's model name. An answer that
//! does not answer what was asked (a missing question, a probability out of range) is the
//! upstream's failure, reported as such, never passed on.

use ruling_backend::{Cancel, Engine, EngineError, EngineInfo, UpstreamFailure};
use ruling_schema::{
    Capabilities, ErrorDetail, SystemOneResponse, ValidRequest, ValidationErrorBody,
    ValidationErrors,
};

use crate::upstream::{Upstream, UpstreamOptions, excerpt};

/// Answers by asking another System One server.
#[derive(Debug)]
pub struct SystemOneEngine {
    upstream: Upstream,
    /// The model the upstream is asked for.
    model: String,
    info: EngineInfo,
}

impl SystemOneEngine {
    /// An engine forwarding to `base` (the server, as in `http://host:8000`) for its `model`,
    /// answering under `served_name`. The upstream is asked for its models once, so a wrong
    /// address or model fails here rather than on the first request.
    pub fn connect(
        base: &str,
        model: &str,
        served_name: String,
        capabilities: Capabilities,
        options: UpstreamOptions,
    ) -> Result<Self, EngineError> {
        let upstream = Upstream::new(base, options);
        let listed = upstream
            .get("/v1/models")
            .map_err(|e| EngineError::Backend(e.into()))?;
        let names: Vec<&str> = listed["models"]
            .as_array()
            .map(|models| models.iter().filter_map(|m| m["name"].as_str()).collect())
            .unwrap_or_default();
        if !names.contains(&model) {
            return Err(EngineError::Backend(
                upstream
                    .error(
                        UpstreamFailure::Failed,
                        format!(
                            "it serves no model {model:?} (its /v1/models lists {names:?}); name one of them after #"
                        ),
                    )
                    .into(),
            ));
        }
        Ok(Self {
            upstream,
            model: model.to_owned(),
            info: EngineInfo {
                model: served_name,
                capabilities,
                // Lengths are the upstream's to judge: it refuses what it cannot take.
                max_context: usize::MAX,
            },
        })
    }
}

impl Engine for SystemOneEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn evaluate(&self, request: &ValidRequest) -> Result<SystemOneResponse, EngineError> {
        self.evaluate_until(request, &Cancel::never())
    }

    fn evaluate_until(
        &self,
        request: &ValidRequest,
        cancel: &Cancel,
    ) -> Result<SystemOneResponse, EngineError> {
        cancel.check()?;
        let mut wire = request.to_wire();
        wire.model = self.model.clone();
        let body = serde_json::to_value(&wire).map_err(|e| {
            EngineError::Backend(
                self.upstream
                    .error(UpstreamFailure::Failed, format!("writing the request: {e}"))
                    .into(),
            )
        })?;
        let answer = match self.upstream.post("/v1/systemone", &body) {
            Ok(answer) => answer,
            Err(error) => {
                return Err(match error.failure {
                    UpstreamFailure::Refused { status: 422 } => refusal(&error.message)
                        .map_or_else(|| EngineError::Backend(error.into()), EngineError::Refused),
                    _ => EngineError::Backend(error.into()),
                });
            }
        };
        let garbage = |why: String| {
            EngineError::Backend(self.upstream.error(UpstreamFailure::Failed, why).into())
        };
        let mut response: SystemOneResponse =
            serde_json::from_value(answer.clone()).map_err(|e| {
                garbage(format!(
                    "its answer is not a System One response ({e}): {}",
                    excerpt(&answer.to_string())
                ))
            })?;
        response
            .check_against(request)
            .map_err(|e| garbage(format!("its answer does not answer the request: {e}")))?;
        response.model = self.info.model.clone();
        Ok(response)
    }
}

/// The details of a System One 422 body, when it is one.
fn refusal(body: &str) -> Option<ValidationErrors> {
    let parsed: ValidationErrorBody = serde_json::from_str(body).ok()?;
    let details: Vec<ErrorDetail> = parsed.detail;
    (!details.is_empty()).then(|| ValidationErrors::new(details))
}
