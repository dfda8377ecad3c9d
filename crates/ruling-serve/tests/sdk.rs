//! typesafe-sdk, the PyPI client of the hosted System One API, unchanged against ruling-serve:
//! `tests/sdk/test_sdk.py` runs in a virtual environment under `target/` (made and filled with
//! `pip install "typesafe-sdk[zstd]==0.7.5"` on first run, like the real-model tests' registry
//! packages) against two in-process servers: the tiny fixture model, and a held test engine
//! for the SDK's retry of a 429.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::engine::TestEngine;
use common::{TestServer, metric, tiny};
use ruling_serve::{ApiKey, Config, Loader, ModelMeta};

const SDK: &str = "typesafe-sdk[zstd]==0.7.5";
const KEY: &str = "sdk-test-key";

/// The SDK in its own virtual environment (shared with `tests/openai.rs`).
pub fn python_with_sdk() -> PathBuf {
    common::python_venv(
        "typesafe-sdk-0.7.5-venv",
        &[SDK],
        "import typesafe_sdk, backports.zstd",
        &[],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn typesafe_sdk_works_unchanged() {
    let python = tokio::task::spawn_blocking(python_with_sdk)
        .await
        .expect("the venv is made");

    let config = Config {
        api_key: ApiKey::new(KEY),
        ..Config::default()
    };
    let model = TestServer::ready(config.clone(), tiny()).await;
    let (ruling, control) = TestEngine::gated();
    let busy_config = Config {
        workers: 1,
        queue: 0,
        ..config
    };
    let busy = TestServer::ready(
        busy_config,
        Loader::ready(ruling, ModelMeta::today("a held test engine")),
    )
    .await;

    // Let the held request go once the SDK has been refused with 429.
    let metrics_url = busy.url("/metrics");
    let client = busy.client.clone();
    let opener = {
        let control = std::sync::Arc::clone(&control);
        tokio::spawn(async move {
            for _ in 0..1200 {
                let text = client
                    .get(&metrics_url)
                    .bearer_auth(KEY)
                    .send()
                    .await
                    .expect("metrics")
                    .text()
                    .await
                    .expect("metrics text");
                let refused = metric(
                    &text,
                    r#"ruling_rejected_requests_total{reason="queue_full"}"#,
                );
                if refused.is_some_and(|n| n >= 1.0) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            control.gate.open();
        })
    };

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/test_sdk.py");
    let (base, busy_base) = (model.base.clone(), busy.base.clone());
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .args([&base, KEY, &busy_base])
            .env_remove("TYPESAFE_API_KEY")
            .env_remove("TYPESAFE_BASE_URL")
            .env_remove("TYPESAFE_DEFAULT_MODEL")
            .output()
            .expect("python runs")
    })
    .await
    .expect("the script finished");
    control.gate.open();
    opener.await.expect("the opener finished");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}");
    assert!(
        output.status.success(),
        "the SDK script failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all SDK checks passed"), "{stdout}");
    model.stop().await.expect("a clean stop");
    busy.stop().await.expect("a clean stop");
}
