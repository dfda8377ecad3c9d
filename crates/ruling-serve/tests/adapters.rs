//! LoRA adapters served beside their base by one process, on the generated tiny Qwen2 GGUF
//! with adapters written by the test (`common::write_adapter`, random B): each name answers
//! with its own probabilities, exactly what a `Ruling` loaded with just that adapter answers;
//! `/v1/models` lists every name; and every setup that cannot be served (an adapter for another
//! base, a calibration for another adapter, names that collide, a missing file, the llama
//! backend) stops the server at start with what was wrong.

mod common;

use common::{
    TICKET, TestServer, adapter_digest, fixture_spec, json_of, messages, three_questions,
    write_adapter, write_calibration,
};
use ruling_core::{AdapterCalibration, AdapterChoice, DecoderBackend, Options, Ruling};
use ruling_schema::{Answer, SystemOneRequest, SystemOneResponse};
use ruling_serve::{Config, Loader};
use serde_json::{Value, json};

const BASE: &str = "tiny-qwen2.gguf";

/// Every probability of a response, in question and option order.
fn numbers(response: &SystemOneResponse) -> Vec<f64> {
    response
        .answers
        .values()
        .flat_map(|answer| match answer {
            Answer::Noul { noul } => vec![*noul],
            Answer::Choice { probabilities, .. } | Answer::Score { probabilities, .. } => {
                probabilities.values().copied().collect()
            }
            Answer::Box { .. } => Vec::new(),
        })
        .collect()
}

fn close(a: &[f64], b: &[f64], tolerance: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tolerance)
}

async fn answered(server: &TestServer, request: &Value) -> SystemOneResponse {
    let (status, _, body) = json_of(server.post_json(request).await).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).expect("the wire shape")
}

/// The error a server stops with when its models cannot be served.
async fn refused(loader: Loader) -> String {
    refused_with(Config::default(), loader).await
}

async fn refused_with(config: Config, loader: Loader) -> String {
    let server = TestServer::start(config, loader).await;
    let error = server
        .finished()
        .await
        .expect_err("the server refuses to start");
    // The whole chain, as the binary prints it.
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base_and_two_adapters_answer_side_by_side_each_as_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let support = write_adapter(dir.path(), BASE, "support", 1);
    let billing = write_adapter(dir.path(), BASE, "billing", 2);
    // The support adapter's own calibration, where the trainer puts it.
    let beside = support.with_file_name("calibration.json");
    write_calibration(&beside, BASE, Some(&adapter_digest(&support)), 1.7);
    let adapters = vec![
        AdapterChoice::new("support", &support),
        AdapterChoice::new("billing", &billing),
    ];
    let loader =
        Loader::from_spec_with_adapters(fixture_spec(BASE), Options::default(), adapters.clone());
    let server = TestServer::ready(Config::default(), loader).await;

    let (status, _, body) = json_of(server.get("/v1/models").await).await;
    assert_eq!(status, 200, "{body}");
    let models = body["models"].as_array().expect("a list");
    let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, [BASE, "jev-latest", "support", "billing"]);
    for (model, path) in models[2..].iter().zip([&support, &billing]) {
        let description = model["description"].as_str().expect("a description");
        let digest = adapter_digest(path);
        assert!(
            description.contains("LoRA adapter of tiny-qwen2.gguf")
                && description.contains(&digest[..12]),
            "{description}"
        );
    }

    // Each name answers under its own name; asking the first adapter again after the others
    // (no reload between) gives its first answer again.
    let mut served = Vec::new();
    for name in [BASE, "support", "billing", "support", "jev-latest"] {
        let response = answered(&server, &three_questions(name, TICKET)).await;
        let expected = if name == "jev-latest" { BASE } else { name };
        assert_eq!(response.model, expected);
        served.push(numbers(&response));
    }
    let [base, first, second, first_again, alias] = served.try_into().expect("five answers");
    assert!(
        close(&first, &first_again, 0.0),
        "{first:?} vs {first_again:?}"
    );
    assert!(close(&base, &alias, 0.0));
    for (a, b, what) in [
        (&base, &first, "the base and support"),
        (&base, &second, "the base and billing"),
        (&first, &second, "support and billing"),
    ] {
        assert!(!close(a, b, 1e-4), "{what} answer alike: {a:?} vs {b:?}");
    }

    // What one process serves is what each model answers loaded alone.
    let request: SystemOneRequest =
        serde_json::from_value(three_questions("any", TICKET)).expect("a request");
    let alone = Ruling::load(&fixture_spec(BASE), &Options::default()).expect("the base loads");
    assert!(close(
        &numbers(&alone.evaluate(&request).expect("answered")),
        &base,
        1e-12
    ));
    for (choice, from_server) in adapters.into_iter().zip([&first, &second]) {
        let name = choice.name.clone();
        let options = Options {
            adapter: Some(choice),
            ..Options::default()
        };
        let alone = Ruling::load(&fixture_spec(BASE), &options).expect("the adapted model loads");
        let response = alone.evaluate(&request).expect("answered");
        assert_eq!(response.model, name);
        assert!(
            close(&numbers(&response), from_server, 1e-12),
            "{name}: alone {:?}, served {from_server:?}",
            numbers(&response)
        );
        let adapter = alone.adapter().expect("an adapter");
        if name == "support" {
            assert_eq!(adapter.calibration.as_deref(), Some(beside.as_path()));
        } else {
            assert_eq!(adapter.calibration, None);
        }
    }

    // An unknown name is the usual 422, listing every served name.
    let (status, _, body) =
        json_of(server.post_json(&three_questions("refunds", TICKET)).await).await;
    assert_eq!(status, 422, "{body}");
    let msg = messages(&body);
    assert!(
        msg.contains("refunds") && msg.contains("support") && msg.contains("billing"),
        "{msg}"
    );
    assert_eq!(
        body["detail"][0]["ctx"]["known"],
        json!([BASE, "jev-latest", "support", "billing"])
    );
    server.stop().await.expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_adapter_for_another_base_is_refused_at_start_naming_what_differs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llamas = write_adapter(dir.path(), "tiny-llama", "llamas", 3);
    let loader = Loader::from_spec_with_adapters(
        fixture_spec(BASE),
        Options::default(),
        vec![AdapterChoice::new("llamas", &llamas)],
    );
    let error = refused(loader).await;
    assert!(
        error.contains("adapter llamas")
            && error.contains("trained for another base")
            && error.contains(r#"model_id: trained on "tiny-llama", loaded "tiny-qwen2.gguf""#),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_calibration_for_another_adapter_is_refused_at_start_naming_adapter_digest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let support = write_adapter(dir.path(), BASE, "support", 1);
    let billing = write_adapter(dir.path(), BASE, "billing", 2);
    let for_support = dir.path().join("support-calibration.json");
    write_calibration(&for_support, BASE, Some(&adapter_digest(&support)), 1.5);
    let loader = Loader::from_spec_with_adapters(
        fixture_spec(BASE),
        Options::default(),
        vec![
            AdapterChoice::new("support", &support),
            AdapterChoice {
                calibration: AdapterCalibration::File(for_support.clone()),
                ..AdapterChoice::new("billing", &billing)
            },
        ],
    );
    let error = refused(loader).await;
    assert!(
        error.contains("adapter billing")
            && error.contains(&for_support.display().to_string())
            && error.contains("adapter_digest")
            && error.contains(&adapter_digest(&billing)),
        "{error}"
    );

    // The base's calibration (no adapter) does not fit an adapter either.
    let for_base = dir.path().join("base-calibration.json");
    write_calibration(&for_base, BASE, None, 1.5);
    std::fs::copy(&for_base, support.with_file_name("calibration.json")).expect("copy");
    let loader = Loader::from_spec_with_adapters(
        fixture_spec(BASE),
        Options::default(),
        vec![AdapterChoice::new("support", &support)],
    );
    let error = refused(loader).await;
    assert!(
        error.contains("adapter support") && error.contains("adapter_digest = none"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn adapters_that_cannot_be_served_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let support = write_adapter(dir.path(), BASE, "support", 1);
    let with = |adapters: Vec<AdapterChoice>, options: Options| {
        Loader::from_spec_with_adapters(fixture_spec(BASE), options, adapters)
    };

    let twice = refused(with(
        vec![
            AdapterChoice::new("support", &support),
            AdapterChoice::new("support", &support),
        ],
        Options::default(),
    ))
    .await;
    assert!(
        twice.contains(r#""support""#) && twice.contains("two adapters"),
        "{twice}"
    );

    let base_name = refused(with(
        vec![AdapterChoice::new(BASE, &support)],
        Options::default(),
    ))
    .await;
    assert!(
        base_name.contains("base model's served name"),
        "{base_name}"
    );

    let alias = refused(with(
        vec![AdapterChoice::new("jev-latest", &support)],
        Options::default(),
    ))
    .await;
    assert!(
        alias.contains(r#""jev-latest""#) && alias.contains("alias"),
        "{alias}"
    );

    let missing = dir.path().join("nowhere/adapter.safetensors");
    let gone = refused(with(
        vec![AdapterChoice::new("gone", &missing)],
        Options::default(),
    ))
    .await;
    assert!(
        gone.contains("adapter gone") && gone.contains(&missing.display().to_string()),
        "{gone}"
    );

    let not_an_adapter = dir.path().join("notes.safetensors");
    std::fs::write(&not_an_adapter, b"not a safetensors file").expect("write");
    let broken = refused(with(
        vec![AdapterChoice::new("notes", &not_an_adapter)],
        Options::default(),
    ))
    .await;
    assert!(broken.contains("is not an adapter file"), "{broken}");

    let llama = refused(with(
        vec![AdapterChoice::new("support", &support)],
        Options {
            backend: DecoderBackend::Llama,
            ..Options::default()
        },
    ))
    .await;
    assert!(
        llama.contains("adapters run on the candle backend") && llama.contains("llama"),
        "{llama}"
    );
}
