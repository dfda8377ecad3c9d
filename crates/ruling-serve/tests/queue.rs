//! The worker pool behind the bounded queue, with a test engine that waits at a gate so every
//! state (a worker busy, the queue full, a deadline passed) is reached deterministically:
//! 429 with retry-after, 503 on timeout with the expired request skipped unstarted, 500 on an
//! engine failure or panic with the server still answering, and a graceful shutdown that
//! answers what is in flight and queued.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::engine::{Behaviour, Control, TEST_MODEL, TestEngine};
use common::{TICKET, TestServer, json_of, metric, three_questions, with_engine};
use ruling_serve::Config;

fn ask(
    server: &TestServer,
) -> tokio::task::JoinHandle<(u16, reqwest::header::HeaderMap, serde_json::Value)> {
    let request = server
        .client
        .post(server.url("/v1/systemone"))
        .json(&three_questions(TEST_MODEL, TICKET));
    tokio::spawn(async move { json_of(request.send().await.expect("sent")).await })
}

async fn queue_depth(server: &TestServer) -> f64 {
    let text = server.metrics().await;
    metric(&text, "ruling_queue_depth").expect("the queue depth is exported")
}

async fn wait_queue_depth(server: &TestServer, depth: f64) {
    for _ in 0..500 {
        if (queue_depth(server).await - depth).abs() < 0.5 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the queue never reached depth {depth}");
}

/// One worker busy at the gate and `queued` requests waiting behind it.
async fn busy(
    config: Config,
    queued: usize,
) -> (
    TestServer,
    Arc<Control>,
    Vec<tokio::task::JoinHandle<(u16, reqwest::header::HeaderMap, serde_json::Value)>>,
) {
    let (ruling, control) = TestEngine::gated();
    let server = with_engine(config, ruling).await;
    let mut pending = vec![ask(&server)];
    control.wait_started(1).await;
    for i in 0..queued {
        pending.push(ask(&server));
        wait_queue_depth(&server, (i + 1) as f64).await;
    }
    (server, control, pending)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_is_a_429_with_retry_after() {
    let config = Config {
        workers: 1,
        queue: 2,
        ..Config::default()
    };
    let (server, control, pending) = busy(config, 2).await;

    let (status, headers, body) =
        json_of(server.post_json(&three_questions(TEST_MODEL, TICKET)).await).await;
    assert_eq!(status, 429, "{body}");
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry_after));
    assert!(body["detail"].as_str().unwrap().contains("queue is full"));
    assert!(headers.contains_key("x-request-id"));

    control.gate.open();
    for handle in pending {
        let (status, _, body) = handle.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"ruling_rejected_requests_total{reason="queue_full"}"#
        ),
        Some(1.0)
    );
    assert_eq!(control.started(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zero_queue_admits_only_to_an_idle_worker() {
    let config = Config {
        workers: 1,
        queue: 0,
        ..Config::default()
    };
    let (server, control, pending) = busy(config, 0).await;
    let status = server
        .post_json(&three_questions(TEST_MODEL, TICKET))
        .await
        .status();
    assert_eq!(status, 429);
    control.gate.open();
    assert_eq!(pending.into_iter().next().unwrap().await.unwrap().0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_request_is_a_503_and_is_never_started() {
    let config = Config {
        workers: 1,
        queue: 4,
        timeout: Duration::from_millis(400),
        ..Config::default()
    };
    let (server, control, mut pending) = busy(config, 1).await;
    // Both time out: the first is running, the second still waits in the queue.
    let queued = pending.pop().unwrap();
    let running = pending.pop().unwrap();
    for handle in [running, queued] {
        let (status, headers, body) = handle.await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert!(headers.contains_key("retry-after"));
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains("not answered within")
        );
    }
    control.gate.open();
    // The worker finishes the running one (its answer is dropped) and skips the expired one.
    for _ in 0..200 {
        if control.finished.load(std::sync::atomic::Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = server
        .post_json(&three_questions(TEST_MODEL, TICKET))
        .await
        .status();
    assert_eq!(status, 200, "the server still answers");
    assert_eq!(
        control.started(),
        2,
        "the expired request was skipped, not started"
    );
    let text = server.metrics().await;
    assert_eq!(
        metric(&text, r#"ruling_skipped_requests_total{reason="expired"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"ruling_rejected_requests_total{reason="timeout"}"#),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_is_skipped_if_not_started() {
    let config = Config {
        workers: 1,
        queue: 4,
        ..Config::default()
    };
    let (server, control, pending) = busy(config, 0).await;
    // This client gives up after 300 ms while its request waits in the queue.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gone = impatient
        .post(server.url("/v1/systemone"))
        .json(&three_questions(TEST_MODEL, TICKET))
        .send()
        .await;
    assert!(gone.is_err(), "the client timed out");
    // Its handler is dropped with the connection, and with it the reply channel.
    tokio::time::sleep(Duration::from_millis(200)).await;
    control.gate.open();
    assert_eq!(pending.into_iter().next().unwrap().await.unwrap().0, 200);
    let status = server
        .post_json(&three_questions(TEST_MODEL, TICKET))
        .await
        .status();
    assert_eq!(status, 200);
    assert_eq!(
        control.started(),
        2,
        "the abandoned request was never started"
    );
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"ruling_skipped_requests_total{reason="client_gone"}"#
        ),
        Some(1.0),
        "{text}"
    );
}

/// Sixteen noul questions: sixteen forward passes on the slow test engine.
fn sixteen_questions() -> serde_json::Value {
    let questions: serde_json::Map<String, serde_json::Value> = (0..16)
        .map(|i| {
            (
                format!("q{i}"),
                serde_json::json!({"type": "noul", "instructions": format!("Is this question {i}?")}),
            )
        })
        .collect();
    serde_json::json!({"model": TEST_MODEL, "state": TICKET, "questions": questions})
}

/// Wait until no worker is busy (at most 10 s); how long it was since `started`.
async fn wait_idle(server: &TestServer, started: std::time::Instant) -> Duration {
    for _ in 0..1000 {
        let text = server.metrics().await;
        if metric(&text, "ruling_busy_workers") == Some(0.0) {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the worker stayed busy for 10 s");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_mid_evaluation_frees_the_worker_within_one_pass() {
    let pass = Duration::from_millis(250);
    let (ruling, control) = TestEngine::slow(pass);
    let config = Config {
        workers: 1,
        ..Config::default()
    };
    let server = with_engine(config, ruling).await;
    // 16 passes of 250 ms is 4 s of work; this client hangs up after one second.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let gone = impatient
        .post(server.url("/v1/systemone"))
        .json(&sixteen_questions())
        .send()
        .await;
    assert!(gone.is_err(), "the client timed out");
    let idle = wait_idle(&server, started).await;
    assert!(
        idle < Duration::from_secs(1) + 2 * pass,
        "the worker was busy for {idle:?}, more than one pass after the client left"
    );
    assert!(control.passes() <= 6, "{} passes ran", control.passes());
    assert_eq!(
        control.finished(),
        0,
        "the abandoned request never finished"
    );
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"ruling_skipped_requests_total{reason="stopped_client_gone"}"#
        ),
        Some(1.0),
        "{text}"
    );
    // The freed worker answers the next request.
    let response = server.post_json(&three_questions(TEST_MODEL, TICKET)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(control.finished(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deadline_that_passes_mid_evaluation_stops_it_and_answers_503() {
    let pass = Duration::from_millis(200);
    let (ruling, control) = TestEngine::slow(pass);
    let config = Config {
        workers: 1,
        timeout: Duration::from_millis(700),
        ..Config::default()
    };
    let server = with_engine(config, ruling).await;
    let started = std::time::Instant::now();
    let response = server.post_json(&sixteen_questions()).await;
    assert_eq!(response.status(), 503);
    let idle = wait_idle(&server, started).await;
    assert!(
        idle < Duration::from_millis(700) + 2 * pass,
        "busy for {idle:?}"
    );
    assert!(control.passes() <= 5, "{} passes ran", control.passes());
    let text = server.metrics().await;
    let stopped = ["stopped_expired", "stopped_client_gone"]
        .iter()
        .filter_map(|r| {
            metric(
                &text,
                &format!(r#"ruling_skipped_requests_total{{reason="{r}"}}"#),
            )
        })
        .sum::<f64>();
    assert!((stopped - 1.0).abs() < 0.5, "one stop counted: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_engine_failure_is_a_500_with_a_json_body() {
    let server = with_engine(Config::default(), TestEngine::behaving(Behaviour::Fail)).await;
    let (status, _, body) =
        json_of(server.post_json(&three_questions(TEST_MODEL, TICKET)).await).await;
    assert_eq!(status, 500);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("fails on purpose"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_engine_panic_is_a_500_and_the_worker_carries_on() {
    let config = Config {
        workers: 1,
        ..Config::default()
    };
    let server = with_engine(config, TestEngine::behaving(Behaviour::Panic)).await;
    for _ in 0..3 {
        let (status, _, body) =
            json_of(server.post_json(&three_questions(TEST_MODEL, TICKET)).await).await;
        assert_eq!(status, 500);
        assert!(
            body["detail"].as_str().unwrap().contains("panicked"),
            "{body}"
        );
    }
    let status = server.get("/health").await.status();
    assert_eq!(status, 200);
    let text = server.metrics().await;
    assert_eq!(metric(&text, "ruling_engine_panics_total"), Some(3.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn graceful_shutdown_answers_requests_in_flight_and_queued() {
    let config = Config {
        workers: 1,
        queue: 4,
        ..Config::default()
    };
    let (mut server, control, pending) = busy(config, 2).await;
    let address = server.base.clone();
    server.begin_shutdown();
    // New connections are refused once the listener has stopped.
    let refused = async {
        for _ in 0..200 {
            if reqwest::Client::new()
                .get(format!("{address}/health"))
                .send()
                .await
                .is_err()
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    };
    assert!(refused.await, "the listener closes on shutdown");
    control.gate.open();
    for handle in pending {
        let (status, _, body) = handle.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    server
        .finished()
        .await
        .expect("serve returns Ok after a graceful shutdown");
    assert_eq!(control.started(), 3);
}

/// `count` simultaneous requests; their statuses and the retry-after of each 429.
async fn burst(server: &TestServer, count: usize) -> (Vec<u16>, Vec<u64>) {
    let pending: Vec<_> = (0..count).map(|_| ask(server)).collect();
    let (mut statuses, mut retries) = (Vec::new(), Vec::new());
    for handle in pending {
        let (status, headers, body) = handle.await.unwrap();
        if status == 429 {
            let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
            retries.push(retry);
            assert!(
                body["detail"].as_str().unwrap().contains("queue is full"),
                "{body}"
            );
        }
        statuses.push(status);
    }
    (statuses, retries)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_quick_requests_is_queued_and_answered_not_refused() {
    // Three 2 ms passes a request: 64 of them are a fraction of a second of work.
    let (ruling, control) = TestEngine::slow(Duration::from_millis(2));
    let config = Config {
        workers: 1,
        queue: 4096,
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let server = with_engine(config, ruling).await;
    // One request first: the queue's estimate of this model.
    assert_eq!(ask(&server).await.unwrap().0, 200);
    let (statuses, _) = burst(&server, 64).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(
        control.finished.load(std::sync::atomic::Ordering::SeqCst),
        65
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_slow_requests_is_refused_past_what_fits_in_the_timeout() {
    // Three 40 ms passes a request, one second to answer each: about eight fit.
    let (ruling, _control) = TestEngine::slow(Duration::from_millis(40));
    let config = Config {
        workers: 1,
        queue: 4096,
        timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let server = with_engine(config, ruling).await;
    assert_eq!(ask(&server).await.unwrap().0, 200);
    let (statuses, retries) = burst(&server, 40).await;
    let answered = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!(answered + refused, 40, "only 200 and 429: {statuses:?}");
    assert!(
        (3..=12).contains(&answered),
        "{answered} answered: {statuses:?}"
    );
    // A refused client is told to come back when the admitted work is done, not in a second.
    assert!(retries.iter().all(|&r| (1..=2).contains(&r)), "{retries:?}");
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"ruling_rejected_requests_total{reason="estimated_wait"}"#
        ),
        Some(refused as f64)
    );
    assert!(metric(&text, "ruling_queue_estimated_wait_seconds").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn ready_says_whether_a_request_would_be_admitted_now() {
    let config = Config {
        workers: 1,
        queue: 0,
        ..Config::default()
    };
    let (server, control, pending) = busy(config, 0).await;
    let (status, headers, body) = json_of(server.get("/ready").await).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "busy");
    assert!(headers.contains_key("retry-after"));
    // Alive all the same.
    assert_eq!(server.get("/health").await.status(), 200);
    control.gate.open();
    for handle in pending {
        assert_eq!(handle.await.unwrap().0, 200);
    }
    let (status, _, body) = json_of(server.get("/ready").await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ready");
}
