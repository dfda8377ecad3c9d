//! Hostile and broken bodies: each gets a clean 4xx with a JSON body, and the server answers a
//! good request afterwards. Run against the tiny fixture model, so nothing is mocked between
//! the socket and the validator.

mod common;

use common::{TICKET, TestServer, json_of, three_questions, tiny};
use ruling_serve::Config;
use serde_json::{Value, json};

/// Send `body` with `headers`; expect a 4xx (`expected`, when given) with a JSON body; then
/// check that the server still answers a good request.
async fn refused(
    server: &TestServer,
    what: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
    expected: Option<u16>,
) -> Value {
    let (status, response_headers, json) = json_of(server.post_bytes(body, headers).await).await;
    assert!((400..500).contains(&status), "{what}: {status} {json}");
    if let Some(expected) = expected {
        assert_eq!(status, expected, "{what}: {json}");
    }
    assert!(json.get("detail").is_some(), "{what}: {json}");
    assert!(response_headers.contains_key("x-request-id"), "{what}");
    let after = server
        .post_json(&three_questions("jev-latest", TICKET))
        .await
        .status();
    assert_eq!(after, 200, "{what}: the server answers afterwards");
    json
}

fn first_type(body: &Value) -> &str {
    body["detail"][0]["type"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_bodies_get_clean_client_errors() {
    let config = Config {
        max_body_bytes: 8 * 1024 * 1024,
        ..Config::default()
    };
    let server = TestServer::ready(config, tiny()).await;
    let good = serde_json::to_vec(&three_questions("jev-latest", TICKET)).unwrap();

    let truncated = good[..good.len() / 2].to_vec();
    let body = refused(&server, "truncated JSON", truncated, &[], Some(422)).await;
    assert_eq!(first_type(&body), "json_invalid");
    assert_eq!(body["detail"][0]["loc"], json!(["body"]));

    let body = refused(&server, "empty body", Vec::new(), &[], Some(422)).await;
    assert_eq!(first_type(&body), "json_invalid");

    let wrong = json!({"model": 3, "state": true, "questions": [1, 2]});
    let body = refused(
        &server,
        "wrong types",
        serde_json::to_vec(&wrong).unwrap(),
        &[],
        Some(422),
    )
    .await;
    let locs: Vec<&Value> = body["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["loc"])
        .collect();
    for loc in [
        json!(["body", "model"]),
        json!(["body", "state"]),
        json!(["body", "questions"]),
    ] {
        assert!(locs.contains(&&loc), "wrong types: {loc} in {body}");
    }

    let not_object = b"[1, 2, 3]".to_vec();
    let body = refused(&server, "an array body", not_object, &[], Some(422)).await;
    assert_eq!(first_type(&body), "dict_type");

    // 10 MB of state: over this server's 8 MiB body limit it is a 413; under the default
    // 16 MiB limit the engine refuses it from its length alone, without tokenizing it.
    let huge = three_questions("jev-latest", &"lorem ipsum dolor sit amet ".repeat(400_000));
    let huge = serde_json::to_vec(&huge).unwrap();
    assert!(huge.len() > 10_000_000);
    let body = refused(&server, "a 10 MB state", huge.clone(), &[], Some(413)).await;
    assert!(body["detail"].as_str().unwrap().contains("limit"), "{body}");
    let roomy = TestServer::ready(Config::default(), tiny()).await;
    let started = std::time::Instant::now();
    let body = refused(&roomy, "a 10 MB state", huge, &[], Some(422)).await;
    assert!(
        body.to_string().contains("maximum context length"),
        "{body}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "refused in {:?}, as if tokenized",
        started.elapsed()
    );

    let questions: serde_json::Map<String, Value> = (0..1000)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "noul", "instructions": format!("Is it {i}?")}),
            )
        })
        .collect();
    let many = json!({"model": "jev-latest", "state": TICKET, "questions": questions});
    let body = refused(
        &server,
        "1,000 questions",
        serde_json::to_vec(&many).unwrap(),
        &[],
        Some(422),
    )
    .await;
    assert_eq!(first_type(&body), "too_long");

    let nested = format!(
        r#"{{"model": "jev-latest", "state": "s", "questions": {{"q": {{"type": "noul", "instructions": {}{}}}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let body = refused(
        &server,
        "10k nested arrays",
        nested.into_bytes(),
        &[],
        Some(422),
    )
    .await;
    assert_eq!(first_type(&body), "json_invalid");
    assert!(
        body["detail"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("recursion limit"),
        "{body}"
    );

    let bad_base64 = json!({
        "model": "jev-latest",
        "state": "look at <img>",
        "questions": {"q": {"type": "noul", "instructions": "Is <img> red?"}},
        "assets": {"<img>": {"type": "image", "format": "png", "data_base64": "!!not base64!!"}}
    });
    let body = refused(
        &server,
        "invalid base64",
        serde_json::to_vec(&bad_base64).unwrap(),
        &[],
        Some(422),
    )
    .await;
    let locs: Vec<&Value> = body["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["loc"])
        .collect();
    assert!(
        locs.contains(&&json!(["body", "assets", "<img>", "image", "data_base64"])),
        "{body}"
    );

    let mut invalid_utf8 = br#"{"model": "jev-latest", "state": "caf"#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    invalid_utf8
        .extend_from_slice(br#"", "questions": {"q": {"type": "noul", "instructions": "?"}}}"#);
    let body = refused(&server, "invalid UTF-8", invalid_utf8, &[], Some(422)).await;
    assert_eq!(first_type(&body), "json_invalid");

    let huge_number = br#"{"model": "jev-latest", "state": {"n": 1e999}, "questions": {"q": {"type": "noul", "instructions": "?"}}}"#;
    let body = refused(
        &server,
        "a number beyond f64",
        huge_number.to_vec(),
        &[],
        Some(422),
    )
    .await;
    assert_eq!(first_type(&body), "finite_number");

    let duplicate = br#"{"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul", "instructions": "a"}, "q": {"type": "noul", "instructions": "b"}}}"#;
    let body = refused(
        &server,
        "a repeated key",
        duplicate.to_vec(),
        &[],
        Some(422),
    )
    .await;
    assert!(
        body["detail"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("duplicate key"),
        "{body}"
    );

    let nul_bytes = vec![0u8; 4096];
    refused(&server, "NUL bytes", nul_bytes, &[], Some(422)).await;

    let not_multipart = b"--zzz\r\ngarbage".to_vec();
    refused(
        &server,
        "a multipart content type without a boundary",
        not_multipart,
        &[("content-type", "multipart/form-data")],
        Some(400),
    )
    .await;

    let bomb = zstd::encode_all(vec![b' '; 64 * 1024 * 1024].as_slice(), 1).unwrap();
    assert!(bomb.len() < 64 * 1024);
    refused(
        &server,
        "a zstd bomb (64 MiB of spaces in under 64 KiB)",
        bomb,
        &[("content-encoding", "zstd")],
        Some(413),
    )
    .await;
}

/// Read from `stream` until the server closes it or `within` passes; what was read, and
/// whether it closed.
async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    within: std::time::Duration,
) -> (String, bool) {
    use tokio::io::AsyncReadExt as _;
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let closed = tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&received).into_owned(), closed)
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_clients_are_cut_off() {
    use std::time::{Duration, Instant};
    use tokio::io::AsyncWriteExt as _;

    let config = Config {
        header_timeout: Duration::from_millis(500),
        body_timeout: Duration::from_millis(500),
        ..Config::default()
    };
    let server = TestServer::ready(config, tiny()).await;
    let address = server.address;

    // Half a request head, then nothing: the connection is closed once the head's time is up.
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let started = Instant::now();
    stream
        .write_all(b"POST /v1/systemone HTTP/1.1\r\nHost: ruling\r\n")
        .await
        .unwrap();
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    let waited = started.elapsed();
    assert!(closed, "a connection stuck in its head is closed");
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(5),
        "closed after {waited:?}, with a 500 ms header timeout"
    );

    // A whole head announcing 1,000 bytes, then ten: 408 with a JSON body naming the flag.
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            b"POST /v1/systemone HTTP/1.1\r\nHost: ruling\r\nContent-Type: application/json\r\n\
              Content-Length: 1000\r\n\r\n{\"model\": ",
        )
        .await
        .unwrap();
    let (response, _) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("--body-timeout"), "{response}");
    assert!(response.contains("x-request-id"), "{response}");

    // Neither cost the server anything: a good request is answered, and a kept-alive
    // connection that sends its requests promptly is served more than once.
    let good = three_questions("jev-latest", TICKET);
    for _ in 0..2 {
        assert_eq!(server.post_json(&good).await.status(), 200);
    }
}
