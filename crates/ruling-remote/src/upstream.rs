//! One upstream server over HTTP: JSON posted and read with a timeout, retried with backoff
//! on 429 and 5xx, and every failure typed for what a client should do about it.

use std::time::Duration;

use ruling_backend::{UpstreamError, UpstreamFailure};
use serde_json::Value;

/// How an upstream server is called.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// The longest one call may take, connection included.
    pub timeout: Duration,
    /// Calls after the first when the server answers 429, 5xx or cannot be reached.
    pub retries: u32,
    /// The wait before the first retry; it doubles after each (a `retry-after` the server
    /// sends is honoured instead, up to [`UpstreamOptions::max_wait`]).
    pub backoff: Duration,
    /// The longest wait between two calls.
    pub max_wait: Duration,
    /// Sent as `Authorization: Bearer KEY` when set.
    pub api_key: Option<String>,
    /// Calls one engine may have in flight at once.
    pub concurrency: usize,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        Self {
            // Under ruling-serve's own 30 s per request, so an upstream that hangs is a 504
            // with its reason rather than the server's 503.
            timeout: Duration::from_secs(20),
            retries: 2,
            backoff: Duration::from_millis(250),
            max_wait: Duration::from_secs(5),
            api_key: None,
            concurrency: 4,
        }
    }
}

/// A server at a base URL.
#[derive(Debug, Clone)]
pub struct Upstream {
    agent: ureq::Agent,
    base: String,
    options: UpstreamOptions,
}

/// What one attempt came to.
enum Attempt {
    Done(Value),
    /// Worth another try, after the server's `retry-after` when it gave one.
    Again(UpstreamError, Option<u64>),
    Final(UpstreamError),
}

impl Upstream {
    pub fn new(base: impl Into<String>, options: UpstreamOptions) -> Self {
        let agent = ureq::AgentBuilder::new().timeout(options.timeout).build();
        Self {
            agent,
            base: base.into(),
            options,
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn options(&self) -> &UpstreamOptions {
        &self.options
    }

    /// `GET base+path`, read as JSON.
    pub fn get(&self, path: &str) -> Result<Value, UpstreamError> {
        self.call(path, None)
    }

    /// `POST base+path` with a JSON body, the answer read as JSON.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, UpstreamError> {
        self.call(path, Some(body))
    }

    fn call(&self, path: &str, body: Option<&Value>) -> Result<Value, UpstreamError> {
        let mut wait = self.options.backoff;
        let mut attempt = 0;
        loop {
            match self.attempt(path, body) {
                Attempt::Done(value) => return Ok(value),
                Attempt::Final(error) => return Err(error),
                Attempt::Again(error, _) if attempt >= self.options.retries => return Err(error),
                Attempt::Again(_, retry_after) => {
                    let pause = retry_after.map_or(wait, Duration::from_secs);
                    std::thread::sleep(pause.min(self.options.max_wait));
                    wait = (wait * 2).min(self.options.max_wait);
                    attempt += 1;
                }
            }
        }
    }

    fn attempt(&self, path: &str, body: Option<&Value>) -> Attempt {
        let url = format!("{}{path}", self.base);
        let mut request = match body {
            Some(_) => self.agent.post(&url),
            None => self.agent.get(&url),
        };
        if let Some(key) = &self.options.api_key {
            request = request.set("authorization", &format!("Bearer {key}"));
        }
        let sent = match body {
            Some(body) => request
                .set("content-type", "application/json")
                .send_string(&body.to_string()),
            None => request.call(),
        };
        let response = match sent {
            Ok(response) => response,
            Err(ureq::Error::Status(status, response)) => return self.refusal(status, response),
            Err(ureq::Error::Transport(transport)) => {
                let timed_out = is_timeout(&transport);
                let error = self.error(
                    if timed_out {
                        UpstreamFailure::Timeout
                    } else {
                        UpstreamFailure::Failed
                    },
                    if timed_out {
                        format!(
                            "{path}: no answer within {:.1} s",
                            self.options.timeout.as_secs_f64()
                        )
                    } else {
                        format!("{path}: {transport}")
                    },
                );
                // A timed-out call has used its time already; an unreachable server may be
                // coming back.
                return if timed_out {
                    Attempt::Final(error)
                } else {
                    Attempt::Again(error, None)
                };
            }
        };
        let text = match response.into_string() {
            Ok(text) => text,
            Err(error) => {
                let timed_out = matches!(
                    error.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                );
                return Attempt::Final(self.error(
                    if timed_out {
                        UpstreamFailure::Timeout
                    } else {
                        UpstreamFailure::Failed
                    },
                    format!("{path}: reading the answer: {error}"),
                ));
            }
        };
        match serde_json::from_str(&text) {
            Ok(value) => Attempt::Done(value),
            Err(error) => Attempt::Final(self.error(
                UpstreamFailure::Failed,
                format!(
                    "{path}: the answer is not JSON ({error}): {}",
                    excerpt(&text)
                ),
            )),
        }
    }

    /// A 4xx or 5xx answer: 429 and 503 ask for a retry, other 5xx may pass, 4xx stay.
    fn refusal(&self, status: u16, response: ureq::Response) -> Attempt {
        let retry_after = response
            .header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok());
        let body = response.into_string().unwrap_or_default();
        let message = format!("answered {status}: {}", excerpt(&body));
        match status {
            429 | 503 => Attempt::Again(
                self.error(
                    UpstreamFailure::Busy {
                        status,
                        retry_after,
                    },
                    message,
                ),
                retry_after,
            ),
            500..=599 => Attempt::Again(self.error(UpstreamFailure::Failed, message), None),
            _ => Attempt::Final(UpstreamError {
                server: self.base.clone(),
                failure: UpstreamFailure::Refused { status },
                // The body stays whole: a 422's details are read from it.
                message: body,
            }),
        }
    }

    pub(crate) fn error(&self, failure: UpstreamFailure, message: String) -> UpstreamError {
        UpstreamError {
            server: self.base.clone(),
            failure,
            message,
        }
    }
}

/// Whether a transport error is a timeout (ureq reports it as an I/O error).
fn is_timeout(transport: &ureq::Transport) -> bool {
    let mut source = std::error::Error::source(transport);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            );
        }
        source = error.source();
    }
    transport.to_string().contains("timed out")
}

/// The start of a body, for a message.
pub(crate) fn excerpt(text: &str) -> String {
    const MAX: usize = 300;
    let trimmed = text.trim();
    match trimmed.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &trimmed[..at]),
        None => trimmed.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A server on loopback answering its `n`-th connection with `answer(n)` (a whole HTTP
    /// response), after `delay`; returns its base URL and the count of calls.
    fn serve(
        answer: impl Fn(usize) -> String + Send + 'static,
        delay: Duration,
    ) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let n = counted.fetch_add(1, Ordering::SeqCst);
                let mut buffer = [0u8; 8192];
                let _ = stream.read(&mut buffer);
                std::thread::sleep(delay);
                let _ = stream.write_all(answer(n).as_bytes());
            }
        });
        (base, calls)
    }

    fn http(status: &str, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
            body.len()
        )
    }

    fn quick() -> UpstreamOptions {
        UpstreamOptions {
            timeout: Duration::from_millis(500),
            retries: 2,
            backoff: Duration::from_millis(10),
            max_wait: Duration::from_millis(50),
            ..UpstreamOptions::default()
        }
    }

    #[test]
    fn a_busy_server_is_retried_until_it_answers() {
        let (base, calls) = serve(
            |n| {
                if n < 2 {
                    http("429 Too Many Requests", "retry-after: 0\r\n", "{}")
                } else {
                    http("200 OK", "", r#"{"ok": true}"#)
                }
            },
            Duration::ZERO,
        );
        let answer = Upstream::new(base, quick()).post("/x", &serde_json::json!({}));
        assert_eq!(answer.unwrap()["ok"], true);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn failures_say_what_a_client_should_do() {
        let busy = serve(
            |_| http("429 Too Many Requests", "retry-after: 7\r\n", "slow down"),
            Duration::ZERO,
        );
        let error = Upstream::new(busy.0, quick()).get("/x").unwrap_err();
        assert_eq!(
            error.failure,
            UpstreamFailure::Busy {
                status: 429,
                retry_after: Some(7)
            }
        );
        assert_eq!(
            busy.1.load(Ordering::SeqCst),
            3,
            "the first call and two retries"
        );

        let broken = serve(
            |_| http("500 Internal Server Error", "", "boom"),
            Duration::ZERO,
        );
        let error = Upstream::new(broken.0, quick()).get("/x").unwrap_err();
        assert_eq!(error.failure, UpstreamFailure::Failed);
        assert!(error.message.contains("500"), "{error}");

        let garbage = serve(|_| http("200 OK", "", "<html>not json"), Duration::ZERO);
        let error = Upstream::new(garbage.0, quick()).get("/x").unwrap_err();
        assert_eq!(error.failure, UpstreamFailure::Failed);
        assert!(error.message.contains("not JSON"), "{error}");

        let refused = serve(
            |_| http("404 Not Found", "", "no such route"),
            Duration::ZERO,
        );
        let error = Upstream::new(refused.0, quick()).get("/x").unwrap_err();
        assert_eq!(error.failure, UpstreamFailure::Refused { status: 404 });
        assert_eq!(refused.1.load(Ordering::SeqCst), 1, "a 404 is not retried");

        let slow = serve(|_| http("200 OK", "", "{}"), Duration::from_secs(2));
        let error = Upstream::new(slow.0, quick()).get("/x").unwrap_err();
        assert_eq!(error.failure, UpstreamFailure::Timeout, "{error}");
    }

    #[test]
    fn an_unreachable_server_fails_after_its_retries() {
        // A port nothing listens on: bound, then closed.
        let base = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let error = Upstream::new(base, quick()).get("/x").unwrap_err();
        assert_eq!(error.failure, UpstreamFailure::Failed, "{error}");
    }
}
