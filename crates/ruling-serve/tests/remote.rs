//! `systemone:URL#MODEL`: a ruling-serve in front of another System One server.
//!
//! - In front of a second ruling-serve (the tiny fixture), the answers come back bit for bit.
//! - Against a scripted upstream on loopback: a malformed request is refused here and never
//!   reaches it; its 429 stays a 429 with its retry-after; garbage, a failure or a server that
//!   went away is a 502 saying what happened; one too slow is a 504.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{TICKET, TestServer, json_of, three_questions, tiny};
use ruling_core::{Options, RemoteOptions};
use ruling_serve::{Config, Loader};
use serde_json::{Value, json};

/// A server in front of `upstream`'s `model`, with `remote` settings.
async fn front(upstream: &str, model: &str, remote: RemoteOptions) -> TestServer {
    let options = Options {
        remote,
        ..Options::default()
    };
    TestServer::ready(
        Config::default(),
        Loader::from_spec(format!("systemone:{upstream}#{model}"), options),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn in_front_of_another_ruling_serve_the_answers_come_back_bit_for_bit() {
    let upstream = TestServer::ready(Config::default(), tiny()).await;
    let (_, _, models) = json_of(upstream.get("/v1/models").await).await;
    let model = models["models"][0]["name"].as_str().unwrap().to_owned();
    let front = front(&upstream.base, &model, RemoteOptions::default()).await;

    for trace in [false, true] {
        let mut request = three_questions(&model, TICKET);
        request["trace"] = json!(trace);
        let (status, _, direct) = json_of(upstream.post_json(&request).await).await;
        assert_eq!(status, 200);
        let (status, _, relayed) = json_of(front.post_json(&request).await).await;
        assert_eq!(status, 200, "{relayed}");
        // Every number is the upstream's own (serde_json reads and writes f64 exactly).
        assert_eq!(relayed["answers"], direct["answers"]);
        assert_eq!(relayed["usage"], direct["usage"]);
        assert_eq!(relayed["evaluation_trace"], direct["evaluation_trace"]);
    }
    front.stop().await.unwrap();
    upstream.stop().await.unwrap();
}

/// What the scripted upstream does with a `POST /v1/systemone`.
#[derive(Clone, Copy)]
enum Behaviour {
    Busy,
    Garbage,
    Broken,
    Slow,
    Answer,
}

/// A System One server on loopback listing model `m` and answering every POST as
/// `behaviour` says; returns its base URL and how many POSTs reached it.
fn scripted(behaviour: Behaviour) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let posts = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&posts);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || answer(stream, behaviour, &counted));
        }
    });
    (base, posts)
}

fn answer(stream: std::net::TcpStream, behaviour: Behaviour, posts: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header.trim().is_empty() {
            break;
        }
        if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    let respond = |status: &str, headers: &str, body: &str| {
        let mut stream = &stream;
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
            body.len()
        );
    };
    if line.starts_with("GET /v1/models") {
        return respond(
            "200 OK",
            "",
            r#"{"models": [{"name": "m", "description": "scripted", "release_date": "2026-12-03"}]}"#,
        );
    }
    posts.fetch_add(1, Ordering::SeqCst);
    match behaviour {
        Behaviour::Busy => respond(
            "429 Too Many Requests",
            "retry-after: 7\r\n",
            r#"{"detail": "busy"}"#,
        ),
        Behaviour::Garbage => respond("200 OK", "", r#"{"answers": "not answers"}"#),
        Behaviour::Broken => respond("500 Internal Server Error", "", r#"{"detail": "boom"}"#),
        Behaviour::Slow => {
            std::thread::sleep(Duration::from_secs(3));
            respond("200 OK", "", "{}");
        }
        Behaviour::Answer => {
            let request: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                request["model"], "m",
                "the upstream is asked for its own model"
            );
            respond(
                "200 OK",
                "",
                &json!({"model": "m", "answers": {"q": {"type": "noul", "noul": 0.25}},
                        "usage": {"input_tokens": 3, "output_tokens": 0}})
                .to_string(),
            );
        }
    }
}

fn quick() -> RemoteOptions {
    RemoteOptions {
        timeout: Duration::from_secs(1),
        retries: 1,
        ..RemoteOptions::default()
    }
}

fn one_noul() -> Value {
    json!({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": "Yes?"}}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_request_is_refused_here_and_never_reaches_the_upstream() {
    let (base, posts) = scripted(Behaviour::Answer);
    let front = front(&base, "m", quick()).await;
    let bad = json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {"only": null}}}});
    let (status, _, body) = json_of(front.post_json(&bad).await).await;
    assert_eq!(status, 422);
    assert!(body.to_string().contains("at least two options"), "{body}");
    assert_eq!(posts.load(Ordering::SeqCst), 0);

    let (status, _, body) = json_of(front.post_json(&one_noul()).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["answers"]["q"]["noul"], 0.25);
    assert_eq!(posts.load(Ordering::SeqCst), 1);
    front.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_failures_become_the_status_a_client_should_act_on() {
    for (behaviour, expected, retry_after, says) in [
        (Behaviour::Busy, 429, Some("7"), "busy"),
        (Behaviour::Garbage, 502, None, "not a System One response"),
        (Behaviour::Broken, 502, None, "500"),
        (Behaviour::Slow, 504, None, "no answer within"),
    ] {
        let (base, _) = scripted(behaviour);
        let front = front(&base, "m", quick()).await;
        let response = front.post_json(&one_noul()).await;
        let header = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let (status, _, body) = json_of(response).await;
        assert_eq!(status, expected, "{body}");
        assert_eq!(header.as_deref(), retry_after, "{body}");
        assert!(body["detail"].as_str().unwrap().contains(says), "{body}");
        front.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_without_the_model_or_gone_fails_clearly() {
    // Asked for a model it does not serve: the server does not start, naming what it serves.
    let (base, _) = scripted(Behaviour::Answer);
    let options = Options {
        remote: quick(),
        ..Options::default()
    };
    let server = TestServer::start(
        Config::default(),
        Loader::from_spec(format!("systemone:{base}#other"), options),
    )
    .await;
    let error = server.finished().await.unwrap_err().to_string();
    assert!(
        error.contains("no model \"other\"") && error.contains("\"m\""),
        "{error}"
    );

    // Gone after the start: a 502, not a hang or a panic.
    let upstream = TestServer::ready(Config::default(), tiny()).await;
    let (_, _, models) = json_of(upstream.get("/v1/models").await).await;
    let model = models["models"][0]["name"].as_str().unwrap().to_owned();
    let front = front(&upstream.base, &model, quick()).await;
    upstream.stop().await.unwrap();
    let (status, _, body) = json_of(front.post_json(&three_questions(&model, TICKET)).await).await;
    assert_eq!(status, 502, "{body}");
    front.stop().await.unwrap();
}
