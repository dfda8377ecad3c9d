//! Shared by the server tests: start a server in-process on 127.0.0.1:0, the tiny fixture
//! model, a controllable test engine, and small HTTP helpers.

#![allow(dead_code)] // each test binary uses its own subset

pub mod engine;

use std::path::PathBuf;
use std::time::Duration;

use ruling_core::{Options, Ruling};
use ruling_serve::{Config, Loader, ModelMeta, ServeError};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// A generated fixture model; `cargo xtask fixtures` writes them.
pub fn fixture(name: &str) -> PathBuf {
    let path = workspace().join("fixtures/generated").join(name);
    assert!(
        path.exists(),
        "{} is missing; run `cargo xtask fixtures`",
        path.display()
    );
    path
}

/// The tiny Qwen2 GGUF, loaded by `ruling-core` exactly as `ruling-serve --model PATH` does.
pub fn tiny_loader(options: Options) -> Loader {
    Loader::from_spec(fixture("tiny-qwen2.gguf").display().to_string(), options)
}

pub fn tiny() -> Loader {
    tiny_loader(Options::default())
}

/// A server running in this process.
pub struct TestServer {
    pub base: String,
    pub address: std::net::SocketAddr,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl TestServer {
    pub async fn start(config: Config, loader: Loader) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(ruling_serve::serve(config, listener, loader, async {
            let _ = stopped.await;
        }));
        Self {
            base: format!("http://{address}"),
            address,
            client: reqwest::Client::new(),
            stop: Some(stop),
            task,
        }
    }

    /// Started and loaded.
    pub async fn ready(config: Config, loader: Loader) -> Self {
        let server = Self::start(config, loader).await;
        server.wait_ready().await;
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn wait_ready(&self) {
        for _ in 0..600 {
            if let Ok(r) = self.client.get(self.url("/health")).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server did not become ready in 30 s");
    }

    /// Ask for a graceful shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Shut down gracefully and return what `serve` returned.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.begin_shutdown();
        tokio::time::timeout(Duration::from_secs(60), &mut self.task)
            .await
            .expect("the server stops within 60 s")
            .expect("the server task did not panic")
    }

    /// Wait for the server to stop on its own (without asking it to).
    pub async fn finished(mut self) -> Result<(), ServeError> {
        tokio::time::timeout(Duration::from_secs(60), &mut self.task)
            .await
            .expect("the server stops within 60 s")
            .expect("the server task did not panic")
    }

    pub async fn post_json(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/systemone"))
            .json(body)
            .send()
            .await
            .expect("the request is sent")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("the request is sent")
    }

    /// The Prometheus text of `/metrics` (on a server without a key).
    pub async fn metrics(&self) -> String {
        self.get("/metrics")
            .await
            .text()
            .await
            .expect("metrics text")
    }

    pub async fn post_bytes(&self, body: Vec<u8>, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.client.post(self.url("/v1/systemone")).body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("the request is sent")
    }
}

/// A server on a ready-made `Ruling` (a test engine).
pub async fn with_engine(config: Config, ruling: Ruling) -> TestServer {
    TestServer::ready(
        config,
        Loader::ready(ruling, ModelMeta::today("a test engine")),
    )
    .await
}

/// A request asking one question of each answer type.
pub fn three_questions(model: &str, state: &str) -> Value {
    json!({
        "model": model,
        "state": state,
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
            "team": {"type": "choice", "instructions": "Which team should handle it?",
                     "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["can wait", "this week", "today"]}
        }
    })
}

pub const TICKET: &str = "Hi, my card was charged twice for the March invoice. Please refund one.";

/// Status, headers and JSON body of a response (the body must be JSON).
pub async fn json_of(response: reqwest::Response) -> (u16, reqwest::header::HeaderMap, Value) {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("the body is read");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "status {status}: the body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, headers, body)
}

/// The `loc`s of a 422 body, each as a JSON array.
pub fn locs(body: &Value) -> Vec<Value> {
    body["detail"]
        .as_array()
        .unwrap_or_else(|| panic!("a detail list: {body}"))
        .iter()
        .map(|d| d["loc"].clone())
        .collect()
}

/// Every `msg` of a 422 body, joined.
pub fn messages(body: &Value) -> String {
    body["detail"]
        .as_array()
        .map(|details| {
            details
                .iter()
                .filter_map(|d| d["msg"].as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// A `multipart/form-data` body as typesafe-sdk writes one: `(content type, bytes)`.
pub fn multipart(parts: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "ruling-test-boundary-7d1f";
    let mut body = Vec::new();
    for (name, content_type, content) in parts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\nContent-Type: {content_type}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// The value of a metric line (`name{labels} value`) in a Prometheus text exposition.
pub fn metric(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
