//! A catalog model is served with its serving profile unless a setting is given: what it runs
//! with shows in `/v1/models`' description, and a given setting overrides the profile's.

mod common;

use common::{TestServer, workspace};
use ruling_core::Options;
use ruling_serve::{Config, Loader};

/// `/v1/models`' description of SmolLM2-135M served with `options`.
async fn description(options: Options) -> String {
    let options = Options {
        cache_dir: Some(workspace().join("target/ruling-cache")),
        ..options
    };
    let server = TestServer::ready(
        Config::default(),
        Loader::from_spec("smollm2-135m", options),
    )
    .await;
    let models: serde_json::Value = server
        .client
        .get(server.url("/v1/models"))
        .send()
        .await
        .expect("GET /v1/models")
        .json()
        .await
        .expect("a JSON body");
    server.stop().await.expect("a clean stop");
    models["models"][0]["description"]
        .as_str()
        .expect("a description")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_serving_profile_applies_unless_a_setting_is_given() {
    let profile = ruling_models::profile("smollm2-135m").expect("smollm2-135m has a profile");
    let on_off = |on: bool| if on { "on" } else { "off" };

    let served = description(Options::default()).await;
    let expected = format!(
        "rotations {}, prior {}",
        profile.rotations,
        on_off(profile.prior)
    );
    assert!(served.contains(&expected), "{served}");
    assert!(served.contains(profile.measured), "{served}");

    let given = description(Options {
        prior: Some(!profile.prior),
        ..Options::default()
    })
    .await;
    assert!(
        given.contains(&format!("prior {}", on_off(!profile.prior))),
        "{given}"
    );

    let raw = description(Options {
        profile: false,
        ..Options::default()
    })
    .await;
    assert!(
        raw.contains("rotations 1, prior off, uncalibrated"),
        "{raw}"
    );
    assert!(!raw.contains("serving profile"), "{raw}");
}
