//! What `run` asks: a model loaded in this process, or a System One server over HTTP. Both
//! take the same request and give back the same response, so a result line does not depend on
//! which one produced it.

use std::io::Read as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use ruling_core::{CoreError, Ruling};
use ruling_schema::{ModelsList, SystemOneRequest, SystemOneResponse, capacity};

/// How many times a request that may succeed later (408, 429, 5xx, a dropped connection) is
/// sent before the run stops.
const ATTEMPTS: u32 = 5;

/// The outcome of one request.
#[derive(Debug)]
pub enum Reply {
    Answered(SystemOneResponse),
    /// A capacity refusal, with its message.
    Refused(String),
}

/// The engine a run evaluates with.
#[derive(Debug)]
pub enum Client {
    InProcess(Box<Ruling>),
    Http(HttpClient),
}

impl Client {
    pub fn answer(&self, request: &SystemOneRequest) -> anyhow::Result<Reply> {
        match self {
            Self::InProcess(ruling) => match ruling.evaluate(request) {
                Ok(response) => Ok(Reply::Answered(response)),
                Err(error) => {
                    // The engine's "too long" refusal and the validation's capacity refusals
                    // carry the markers by contract, as they do on the wire.
                    let message = error.to_string();
                    let capacity = matches!(error, CoreError::Engine(_) | CoreError::Invalid(_))
                        && capacity::is_refusal(&message);
                    if capacity {
                        Ok(Reply::Refused(message))
                    } else {
                        Err(error).context("evaluating a record in-process")
                    }
                }
            },
            Self::Http(http) => http.answer(request),
        }
    }
}

/// A System One server: `POST {base}/v1/systemone` with an optional bearer key.
#[derive(Debug)]
pub struct HttpClient {
    agent: ureq::Agent,
    base: String,
    api_key: Option<String>,
}

impl HttpClient {
    pub fn new(base: &str, api_key: Option<String>) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .timeout(Duration::from_secs(600))
            .build();
        Self {
            agent,
            base: base.trim_end_matches('/').to_owned(),
            api_key,
        }
    }

    /// The first name `GET /v1/models` lists: what requests carry when no `--model` is given.
    pub fn served_model(&self) -> anyhow::Result<String> {
        let url = format!("{}/v1/models", self.base);
        let response = self
            .authorised(self.agent.get(&url))
            .call()
            .map_err(|e| describe(&url, e))?;
        let list: ModelsList = serde_json::from_str(&read_body(response)?)
            .with_context(|| format!("{url} did not answer a models list"))?;
        list.models
            .into_iter()
            .next()
            .map(|m| m.name)
            .with_context(|| format!("{url} lists no model"))
    }

    fn authorised(&self, request: ureq::Request) -> ureq::Request {
        match &self.api_key {
            Some(key) => request.set("authorization", &format!("Bearer {key}")),
            None => request,
        }
    }

    fn answer(&self, request: &SystemOneRequest) -> anyhow::Result<Reply> {
        let url = format!("{}/v1/systemone", self.base);
        let body = serde_json::to_vec(request)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = self
                .authorised(self.agent.post(&url))
                .set("content-type", "application/json")
                .send_bytes(&body);
            let wait = match sent {
                Ok(response) => {
                    let text = read_body(response)?;
                    let response: SystemOneResponse = serde_json::from_str(&text)
                        .with_context(|| format!("{url} answered something not a response"))?;
                    return Ok(Reply::Answered(response));
                }
                Err(ureq::Error::Status(422, response)) => {
                    let text = read_body(response)?;
                    if capacity::is_refusal(&text) {
                        return Ok(Reply::Refused(detail_message(&text)));
                    }
                    bail!("{url} refused the request (422): {text}");
                }
                Err(ureq::Error::Status(code @ (408 | 429 | 500..=599), response))
                    if attempt < ATTEMPTS =>
                {
                    let after = response
                        .header("retry-after")
                        .and_then(|s| s.trim().parse::<f64>().ok());
                    let _ = read_body(response);
                    let backoff = 0.5 * f64::from(1u32 << attempt.min(6));
                    warn(&format!("{url} answered {code}; retrying"));
                    after.unwrap_or(backoff).clamp(0.0, 60.0)
                }
                Err(ureq::Error::Transport(t)) if attempt < ATTEMPTS => {
                    warn(&format!("{t}; retrying"));
                    0.5 * f64::from(1u32 << attempt.min(6))
                }
                Err(error) => return Err(describe(&url, error)),
            };
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }
}

fn warn(message: &str) {
    eprintln!("warning: {message}");
}

fn read_body(response: ureq::Response) -> anyhow::Result<String> {
    let mut text = String::new();
    response
        .into_reader()
        .read_to_string(&mut text)
        .context("reading the response body")?;
    Ok(text)
}

/// The `msg` of a 422 body's first detail, or the body itself.
fn detail_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["detail"][0]["msg"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.to_owned())
}

fn describe(url: &str, error: ureq::Error) -> anyhow::Error {
    match error {
        ureq::Error::Status(code, response) => {
            let text = read_body(response).unwrap_or_default();
            let hint = match code {
                401 | 403 => " (check --api-key)",
                404 => " (is this a System One server?)",
                _ => "",
            };
            anyhow::anyhow!("{url} answered {code}{hint}: {text}")
        }
        // The transport error names the URL itself.
        ureq::Error::Transport(t) => anyhow::anyhow!("{t}"),
    }
}
