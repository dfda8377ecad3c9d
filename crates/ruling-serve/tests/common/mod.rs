//! Shared by the server tests: start a server in-process on 127.0.0.1:0, the tiny fixture
//! model, a controllable test engine, and small HTTP helpers.

#![allow(dead_code)] // each test binary uses its own subset

pub mod engine;

use std::path::{Path, PathBuf};
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

/// The spec of a generated fixture, as `--model` would be given it.
pub fn fixture_spec(name: &str) -> String {
    fixture(name).display().to_string()
}

/// Writes a LoRA adapter for the fixture `base` to `dir/NAME/adapter.safetensors` and
/// returns its path. The base is loaded as `ruling-core` loads it, so the adapter names the
/// identity the server will load; every projection of every layer is adapted, and B is drawn
/// from `seed` (not zero, as a fresh adapter's is), so each seed moves the answers its own way.
pub fn write_adapter(dir: &Path, base: &str, name: &str, seed: u64) -> PathBuf {
    use ruling_candle::lora::{ADAPTER_FORMAT, SplitMix, adapter_bytes};
    use ruling_candle::{AdapterMeta, LoraConfig, LoraWeights, Projection};

    let backend = ruling_core::load_candle(&fixture_spec(base), &Options::default())
        .unwrap_or_else(|e| panic!("{base} loads: {e}"));
    let config = backend.decoder().config();
    let lora = LoraConfig {
        rank: 2,
        scale: 2.0,
        dropout: 0.0,
        projections: Projection::ALL.to_vec(),
        layers: config.num_layers,
    };
    let device = candle_core::Device::Cpu;
    let mut rng = SplitMix(seed ^ 0x5eed);
    let tensors: Vec<(String, candle_core::Tensor)> =
        LoraWeights::init(&lora, config, seed, &device)
            .expect("fresh adapter tensors")
            .into_iter()
            .map(|(tensor_name, t)| {
                if !tensor_name.ends_with("lora_b") {
                    return (tensor_name, t);
                }
                let values: Vec<f32> = (0..t.elem_count())
                    .map(|_| ((rng.unit() * 2.0 - 1.0) * 0.2) as f32)
                    .collect();
                let b =
                    candle_core::Tensor::from_vec(values, t.shape(), &device).expect("a B matrix");
                (tensor_name, b)
            })
            .collect();
    let meta = AdapterMeta {
        format: ADAPTER_FORMAT,
        name: name.to_owned(),
        lora,
        base: backend.base_model(),
        training: json!({"test": true, "seed": seed}),
    };
    let bytes = adapter_bytes(&meta, &tensors).expect("adapter bytes");
    let path = dir.join(name).join("adapter.safetensors");
    std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
    std::fs::write(&path, bytes).expect("write the adapter");
    path
}

/// The digest calibration files name an adapter by (`adapter_digest`).
pub fn adapter_digest(path: &Path) -> String {
    ruling_candle::Adapter::load(path)
        .expect("the adapter loads")
        .digest
}

/// A calibration file for `model_id` at the default settings (one rotation, no prior) and
/// `adapter_digest`, with every temperature `temperature`.
pub fn write_calibration(
    path: &Path,
    model_id: &str,
    adapter_digest: Option<&str>,
    temperature: f64,
) {
    let file = json!({
        "format_version": 1,
        "provenance": {
            "model_id": model_id,
            "revision": null,
            "rotations": 1,
            "prior": false,
            "adapter_digest": adapter_digest,
        },
        "temperatures": {"noul": temperature, "choice": temperature, "score": temperature},
    });
    std::fs::write(path, serde_json::to_vec_pretty(&file).expect("json")).expect("write");
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

/// A Python interpreter from a virtual environment under the test target directory, made on
/// first use and filled with `pip install packages` (registry packages, like the real-model
/// tests' models); `imports` is a statement that succeeds once they are installed. `env` is set
/// for pip (a package built from source reads its build options there).
pub fn python_venv(name: &str, packages: &[&str], imports: &str, env: &[(&str, &str)]) -> PathBuf {
    use std::process::Command;
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", imports])
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        return python;
    }
    let interpreter = std::env::var("RULING_PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&interpreter)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap_or_else(|e| panic!("{interpreter} -m venv: {e}"));
    assert!(status.success(), "{interpreter} -m venv failed");
    let status = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--no-cache-dir"])
        .args(packages)
        .envs(env.iter().copied())
        .status()
        .expect("pip runs");
    assert!(
        status.success(),
        "pip install {packages:?} failed (the test needs PyPI, or a PIP_INDEX_URL mirror)"
    );
    assert!(ready(&python), "{packages:?} import after installing");
    python
}
