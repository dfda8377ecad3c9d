//! The server over a real socket on 127.0.0.1, in-process: the routes, the status codes and
//! bodies, authentication, body encodings, multipart, and the request id on every response.
//! Model-backed tests use the generated tiny Qwen2 fixture (`cargo xtask fixtures`).

mod common;

use std::io::Write as _;

use common::engine::{TEST_MODEL, TestEngine};
use common::{
    TICKET, TestServer, json_of, locs, messages, multipart, three_questions, tiny, tiny_loader,
    with_engine,
};
use ruling_core::Options;
use ruling_schema::{Capabilities, SystemOneResponse};
use ruling_serve::{ApiKey, Config, Loaded, Loader, ModelMeta};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn answers_noul_choice_and_score_in_one_request() {
    let server = TestServer::ready(Config::default(), tiny()).await;
    let request = three_questions("tiny-qwen2.gguf", TICKET);
    let (status, headers, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.contains_key("x-request-id"));

    let response: SystemOneResponse = serde_json::from_value(body.clone()).expect("the wire shape");
    assert_eq!(response.model, "tiny-qwen2.gguf");
    let ids: Vec<&str> = response.answers.keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        ["billing", "team", "urgency"],
        "answers keep question order"
    );
    let valid = ruling_schema::parse_request(
        &serde_json::to_vec(&request).unwrap(),
        &Capabilities::default(),
    )
    .unwrap();
    response
        .check_against(&valid)
        .expect("probabilities are finite, sum to one, and answer what was asked");
    assert!(response.usage.input_tokens > 0);
    assert_eq!(body["answers"]["billing"]["type"], "noul");
    assert_eq!(body["answers"]["team"]["type"], "choice");
    assert_eq!(body["answers"]["urgency"]["legend"]["2"], "today");
    server.stop().await.expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_alias_is_answered_under_the_served_name() {
    let server = TestServer::ready(Config::default(), tiny()).await;
    let (status, _, body) = json_of(
        server
            .post_json(&three_questions("jev-latest", TICKET))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "tiny-qwen2.gguf");
}

#[tokio::test(flavor = "multi_thread")]
async fn models_lists_the_served_name_and_its_aliases() {
    let config = Config {
        aliases: vec!["jev-latest".into(), "house-judge".into()],
        ..Config::default()
    };
    let options = Options {
        served_name: Some("tiny".into()),
        ..Options::default()
    };
    let server = TestServer::ready(config, tiny_loader(options)).await;
    let (status, _, body) = json_of(server.get("/v1/models").await).await;
    assert_eq!(status, 200);
    let models = body["models"].as_array().expect("a list");
    let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["tiny", "jev-latest", "house-judge"]);
    for model in models {
        let date = model["release_date"].as_str().expect("a date");
        assert!(
            date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-',
            "YYYY-MM-DD: {date}"
        );
        assert!(model["description"].as_str().is_some_and(|d| !d.is_empty()));
    }
    // Each listed name is accepted.
    for name in names {
        let status = server
            .post_json(&three_questions(name, TICKET))
            .await
            .status();
        assert_eq!(status, 200, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_model_name_is_a_422_listing_the_known_names() {
    let server = TestServer::ready(Config::default(), tiny()).await;
    let (status, _, body) =
        json_of(server.post_json(&three_questions("gpt-5", TICKET)).await).await;
    assert_eq!(status, 422);
    assert_eq!(locs(&body), [json!(["body", "model"])]);
    let msg = messages(&body);
    assert!(
        msg.contains("gpt-5") && msg.contains("tiny-qwen2.gguf") && msg.contains("jev-latest"),
        "{msg}"
    );
    assert_eq!(
        body["detail"][0]["ctx"]["known"],
        json!(["tiny-qwen2.gguf", "jev-latest"])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_is_503_while_loading_and_200_after() {
    let gate = std::sync::Arc::new(common::engine::Gate::default());
    let waiting = std::sync::Arc::clone(&gate);
    let loader = Loader::from_fn("slow-model", move || {
        waiting.wait();
        Ok(Loaded::alone(
            TestEngine::ruling(),
            ModelMeta::today("a test engine"),
        ))
    });
    let server = TestServer::start(Config::default(), loader).await;

    let (status, headers, body) = json_of(server.get("/health").await).await;
    assert_eq!(status, 503);
    assert_eq!(body, json!({"status": "loading", "model": "slow-model"}));
    assert!(headers.contains_key("retry-after"));
    // The API refuses retryably while loading too.
    let response = server.post_json(&three_questions(TEST_MODEL, TICKET)).await;
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let response = server.get("/v1/models").await;
    assert_eq!(response.status(), 503);

    gate.open();
    server.wait_ready().await;
    let (status, _, body) = json_of(server.get("/health").await).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ok", "model": TEST_MODEL}));
    server.stop().await.expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_fails_to_load_stops_the_server_with_the_error() {
    let loader = Loader::from_spec("/no/such/model.gguf", Options::default());
    let server = TestServer::start(Config::default(), loader).await;
    let error = server.finished().await.expect_err("the load fails");
    assert!(error.to_string().contains("/no/such/model.gguf"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_response_carries_a_request_id() {
    let server = with_engine(Config::default(), TestEngine::ruling()).await;
    // A client's id is echoed under both names.
    let response = server
        .client
        .get(server.url("/health"))
        .header("x-request-id", "client-id-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "client-id-42");
    assert_eq!(response.headers()["x-typesafe-request-id"], "client-id-42");
    // Otherwise one is made, different each time.
    let mut seen = std::collections::HashSet::new();
    for path in [
        "/health",
        "/v1/models",
        "/nope",
        "/openapi.json",
        "/metrics",
    ] {
        let response = server.get(path).await;
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(id.len(), 32, "{path}: {id}");
        assert!(seen.insert(id), "{path}: ids are unique");
    }
    // Errors carry one too, and an unusable client id is replaced.
    let response = server
        .post_bytes(b"{".to_vec(), &[("x-request-id", "has spaces in it")])
        .await;
    assert_eq!(response.status(), 422);
    assert_ne!(response.headers()["x-request-id"], "has spaces in it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_422_has_the_pydantic_detail_shape_with_locations() {
    let server = with_engine(Config::default(), TestEngine::ruling()).await;
    let request = json!({
        "model": TEST_MODEL,
        "state": "s",
        "questions": {
            "q1": {"type": "choice", "instructions": "Pick", "criteria": {"only": null}},
            "q2": {"type": "score", "instructions": 7, "criteria": ["a", "b"]},
            "q3": {"type": "maybe", "instructions": "?"}
        }
    });
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 422);
    for detail in body["detail"].as_array().unwrap() {
        assert!(
            detail["msg"].is_string() && detail["type"].is_string(),
            "{detail}"
        );
        assert_eq!(detail["loc"][0], "body", "{detail}");
    }
    let locs = locs(&body);
    assert!(
        locs.contains(&json!(["body", "questions", "q1", "choice", "criteria"])),
        "{locs:?}"
    );
    assert!(
        locs.contains(&json!(["body", "questions", "q2", "score", "instructions"])),
        "{locs:?}"
    );
    assert!(
        locs.contains(&json!(["body", "questions", "q3"])),
        "{locs:?}"
    );
    assert!(messages(&body).contains("a choice needs at least two options"));
    let q2 = body["detail"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["loc"][2] == "q2")
        .unwrap();
    assert_eq!(q2["input"], 7);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_beyond_the_context_is_a_422_with_the_marker() {
    let options = Options {
        max_context: Some(96),
        ..Options::default()
    };
    let server = TestServer::ready(Config::default(), tiny_loader(options)).await;
    let long = "The invoice was charged twice and nobody answered my emails. ".repeat(40);
    let (status, _, body) = json_of(
        server
            .post_json(&three_questions("jev-latest", &long))
            .await,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(messages(&body).contains("maximum context length"), "{body}");
    assert_eq!(body["detail"][0]["loc"][0], "body");
    // Too many options for one choice carries its own marker.
    let criteria: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("o{i}"), Value::Null)).collect();
    let request = json!({"model": "jev-latest", "state": "s", "questions": {
        "wide": {"type": "choice", "instructions": "?", "criteria": criteria}}});
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 422);
    assert!(messages(&body).contains("options per choice"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn too_many_questions_is_a_422() {
    let config = Config {
        max_questions: 3,
        ..Config::default()
    };
    let server = with_engine(config, TestEngine::ruling()).await;
    let questions: serde_json::Map<String, Value> = (0..4)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "noul", "instructions": "?"}),
            )
        })
        .collect();
    let request = json!({"model": TEST_MODEL, "state": "s", "questions": questions});
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], "too_long");
    assert_eq!(body["detail"][0]["loc"], json!(["body", "questions"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_key_is_required_where_configured() {
    let config = Config {
        api_key: ApiKey::new("correct horse"),
        ..Config::default()
    };
    let server = with_engine(config, TestEngine::ruling()).await;
    let request = three_questions(TEST_MODEL, TICKET);
    let send = |auth: Option<&'static str>, path: &'static str| {
        let mut r = if path == "/v1/systemone" {
            server.client.post(server.url(path)).json(&request)
        } else {
            server.client.get(server.url(path))
        };
        if let Some(auth) = auth {
            r = r.header("authorization", auth);
        }
        r.send()
    };
    for path in ["/v1/systemone", "/v1/models", "/metrics"] {
        let (status, headers, body) = json_of(send(None, path).await.unwrap()).await;
        assert_eq!(status, 401, "{path} without a key");
        assert_eq!(headers["www-authenticate"], "Bearer");
        assert!(body["detail"].as_str().unwrap().contains("API key"));
        for wrong in [
            "Bearer wrong",
            "Bearer correct horse!",
            "Basic Y29ycmVjdCBob3JzZQ==",
            "Bearer ",
        ] {
            let status = send(Some(wrong), path).await.unwrap().status();
            assert_eq!(status, 401, "{path} with {wrong:?}");
        }
        let status = send(Some("Bearer correct horse"), path)
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "{path} with the key");
        let status = send(Some("bearer correct horse"), path)
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "{path}: the scheme is case-insensitive");
    }
    // Health and the API description stay open.
    for path in ["/health", "/openapi.json"] {
        let status = send(None, path).await.unwrap().status();
        assert_eq!(status, 200, "{path} is open");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_over_the_limit_is_a_413_even_when_it_arrives_compressed() {
    let config = Config {
        max_body_bytes: 4096,
        ..Config::default()
    };
    let server = with_engine(config, TestEngine::ruling()).await;
    let big = three_questions(TEST_MODEL, &"x".repeat(8192));
    let (status, _, body) = json_of(server.post_json(&big).await).await;
    assert_eq!(status, 413);
    assert!(body["detail"].as_str().unwrap().contains("4096"));
    // Small on the wire, large once decompressed.
    let compressed = zstd::encode_all(serde_json::to_vec(&big).unwrap().as_slice(), 19).unwrap();
    assert!(compressed.len() < 4096);
    let (status, _, _) = json_of(
        server
            .post_bytes(
                compressed,
                &[
                    ("content-type", "application/json"),
                    ("content-encoding", "zstd"),
                ],
            )
            .await,
    )
    .await;
    assert_eq!(status, 413);
    // Under the limit is fine.
    let status = server
        .post_json(&three_questions(TEST_MODEL, TICKET))
        .await
        .status();
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn zstd_and_gzip_bodies_are_accepted() {
    let server = TestServer::ready(Config::default(), tiny()).await;
    let body = serde_json::to_vec(&three_questions("jev-latest", TICKET)).unwrap();
    let plain = json_of(
        server
            .post_bytes(body.clone(), &[("content-type", "application/json")])
            .await,
    )
    .await;
    assert_eq!(plain.0, 200);

    let zstd = zstd::encode_all(body.as_slice(), 3).unwrap();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&body).unwrap();
    let gzip = gzip.finish().unwrap();
    for (encoding, bytes) in [("zstd", zstd), ("gzip", gzip)] {
        let (status, _, answer) = json_of(
            server
                .post_bytes(
                    bytes,
                    &[
                        ("content-type", "application/json"),
                        ("content-encoding", encoding),
                    ],
                )
                .await,
        )
        .await;
        assert_eq!(status, 200, "{encoding}: {answer}");
        assert_eq!(
            answer["answers"], plain.2["answers"],
            "{encoding}: same answers"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_or_unknown_encodings_are_clean_errors() {
    let server = with_engine(Config::default(), TestEngine::ruling()).await;
    let (status, _, body) = json_of(
        server
            .post_bytes(
                b"definitely not zstd".to_vec(),
                &[("content-encoding", "zstd")],
            )
            .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, headers, body) = json_of(
        server
            .post_bytes(b"{}".to_vec(), &[("content-encoding", "br")])
            .await,
    )
    .await;
    assert_eq!(status, 415, "{body}");
    assert!(body["detail"].is_string());
    assert!(headers.contains_key("x-request-id"));
}

#[tokio::test(flavor = "multi_thread")]
async fn multipart_without_images_is_answered_like_json() {
    let server = TestServer::ready(Config::default(), tiny()).await;
    let request = serde_json::to_vec(&three_questions("jev-latest", TICKET)).unwrap();
    let (content_type, body) = multipart(&[("request", "application/json", &request)]);
    let (status, _, answer) = json_of(
        server
            .post_bytes(body, &[("content-type", &content_type)])
            .await,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let plain = json_of(server.post_bytes(request, &[]).await).await;
    assert_eq!(answer["answers"], plain.2["answers"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn multipart_images_are_refused_by_a_text_model() {
    let server = TestServer::ready(Config::default(), tiny()).await;
    // As typesafe-sdk sends it: the asset names its part and gives no format.
    let request = serde_json::to_vec(&json!({
        "model": "jev-latest",
        "state": "What is in <photo>?",
        "questions": {"cat": {"type": "noul", "instructions": "Is there a cat in <photo>?"}},
        "assets": {"<photo>": {"type": "image", "part": "asset-0"}}
    }))
    .unwrap();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-not-really-a-png";
    let (content_type, body) = multipart(&[
        ("request", "application/json", &request),
        ("asset-0", "image/png", png),
    ]);
    let (status, _, answer) = json_of(
        server
            .post_bytes(body, &[("content-type", &content_type)])
            .await,
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert!(messages(&answer).contains("reads text only"), "{answer}");
    // The part was attached (format read from the bytes), so that is the only complaint.
    assert_eq!(locs(&answer), [json!(["body", "assets"])], "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn multipart_parts_must_match_assets() {
    let server = with_engine(Config::default(), TestEngine::ruling()).await;
    let request = serde_json::to_vec(&json!({
        "model": TEST_MODEL,
        "state": "<a>",
        "questions": {"q": {"type": "noul", "instructions": "?"}},
        "assets": {"<a>": {"type": "image", "format": "png", "part": "missing"}}
    }))
    .unwrap();
    let (content_type, body) = multipart(&[
        ("request", "application/json", &request),
        ("stray", "image/png", b"\x89PNG\r\n\x1a\n"),
    ]);
    let (status, _, answer) = json_of(
        server
            .post_bytes(body, &[("content-type", &content_type)])
            .await,
    )
    .await;
    assert_eq!(status, 422);
    let locs = locs(&answer);
    assert!(
        locs.contains(&json!(["body", "assets", "<a>", "image", "part"])),
        "{locs:?}"
    );
    assert!(
        messages(&answer).contains("\"stray\" is claimed by no asset"),
        "{answer}"
    );

    // No `request` part at all.
    let (content_type, body) = multipart(&[("other", "text/plain", b"hello")]);
    let (status, _, answer) = json_of(
        server
            .post_bytes(body, &[("content-type", &content_type)])
            .await,
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(answer["detail"][0]["loc"], json!(["body", "request"]));

    // Broken framing.
    let (status, _, _) = json_of(
        server
            .post_bytes(
                b"--x\r\nno headers here".to_vec(),
                &[("content-type", "multipart/form-data; boundary=x")],
            )
            .await,
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_routes_and_methods_answer_json() {
    let server = with_engine(Config::default(), TestEngine::ruling()).await;
    let (status, _, body) = json_of(server.get("/v2/nothing").await).await;
    assert_eq!(status, 404);
    assert!(body["detail"].is_string());
    let (status, _, body) = json_of(server.get("/v1/systemone").await).await;
    assert_eq!(status, 405);
    assert!(body["detail"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_requests_tokens_and_the_queue() {
    let server = TestServer::ready(Config::default(), tiny()).await;
    for _ in 0..2 {
        let status = server
            .post_json(&three_questions("jev-latest", TICKET))
            .await
            .status();
        assert_eq!(status, 200);
    }
    let status = server.post_bytes(b"{".to_vec(), &[]).await.status();
    assert_eq!(status, 422);
    let response = server.get("/metrics").await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = response.text().await.unwrap();
    let at = |line: &str| common::metric(&text, line);
    assert_eq!(
        at(r#"ruling_http_requests_total{route="/v1/systemone",method="POST",status="200"}"#),
        Some(2.0)
    );
    assert_eq!(
        at(r#"ruling_http_requests_total{route="/v1/systemone",method="POST",status="422"}"#),
        Some(1.0)
    );
    assert!(
        at("ruling_input_tokens_total").is_some_and(|n| n > 0.0),
        "{text}"
    );
    assert_eq!(at("ruling_queue_depth"), Some(0.0));
    assert_eq!(
        at("ruling_queue_capacity"),
        Some(Config::default().queue as f64)
    );
    assert_eq!(at("ruling_model_loaded"), Some(1.0));
    assert!(
        at(r#"ruling_http_request_duration_seconds_count{route="/v1/systemone"}"#) == Some(3.0)
    );
    // The warm-up at load asks about a state of its own twice (a prefill, then a hit); both
    // answered requests were about another state: one prefill, then a cache hit.
    assert_eq!(at("ruling_prefix_cache_misses_total"), Some(2.0), "{text}");
    assert_eq!(at("ruling_prefix_cache_hits_total"), Some(2.0), "{text}");
    assert_eq!(at("ruling_prefix_cache_entries"), Some(2.0), "{text}");
    assert!(
        at("ruling_prefix_cache_bytes").is_some_and(|b| b > 0.0),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn follow_up_questions_answer_the_same_with_the_prefix_cache_on_or_off() {
    let cached = TestServer::ready(Config::default(), tiny()).await;
    let uncached = TestServer::ready(
        Config::default(),
        common::tiny_loader(Options {
            prefix_cache_bytes: 0,
            ..Options::default()
        }),
    )
    .await;
    let follow_up = json!({
        "model": "jev-latest",
        "state": TICKET,
        "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
    });
    for body in [three_questions("jev-latest", TICKET), follow_up] {
        let (a_status, _, a) = json_of(cached.post_json(&body).await).await;
        let (b_status, _, b) = json_of(uncached.post_json(&body).await).await;
        assert_eq!((a_status, b_status), (200, 200));
        assert_eq!(a, b, "the cache changes nothing a client sees");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_served_openapi_document_is_the_generated_one() {
    let server = with_engine(Config::default(), TestEngine::ruling()).await;
    let (status, _, body) = json_of(server.get("/openapi.json").await).await;
    assert_eq!(status, 200);
    assert_eq!(body, ruling_serve::openapi::document());
}
