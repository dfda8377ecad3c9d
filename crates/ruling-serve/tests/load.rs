//! A bounded load test on loopback: 8 concurrent clients against the tiny fixture model for
//! 20 s (`RULING_LOAD_SECS` to change it), one worker and a queue of 4, so the server both
//! answers and sheds load. Every request must be answered 200 or 429 (never 5xx, never a
//! dropped connection), and the process's resident memory must come back near where it was
//! before the load (with the prefix cache off, since it keeps encoded states by design). It
//! prints latency percentiles, throughput and memory; it asserts no timings (STYLE.md: tests
//! assert behaviour).

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, json_of, tiny_loader};
use ruling_core::Options;
use ruling_serve::Config;
use serde_json::json;

const CLIENTS: usize = 8;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn request(client: usize, i: usize) -> serde_json::Value {
    json!({
        "model": "jev-latest",
        "state": format!("Ticket {client}-{i}: my card was charged twice for invoice {i}; please refund one of them."),
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
            "team": {"type": "choice", "instructions": "Which team should handle it?",
                     "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["can wait", "this week", "today"]}
        }
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_clients_get_200_or_429_and_memory_returns() {
    let seconds: u64 = std::env::var("RULING_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let config = Config {
        workers: 1,
        queue: 4,
        ..Config::default()
    };
    // The prefix cache keeps up to its byte budget of encoded states on purpose; off here, so
    // any growth left after the load is memory the server failed to give back.
    let options = Options {
        prefix_cache_bytes: 0,
        ..Options::default()
    };
    let server = TestServer::ready(config, tiny_loader(options)).await;
    // Warm up allocator arenas and caches before the baseline.
    for i in 0..20 {
        let (status, _, body) = json_of(server.post_json(&request(99, i)).await).await;
        assert_eq!(status, 200, "{body}");
    }
    let baseline = rss_kib();

    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let http = reqwest::Client::new();
        let url = server.url("/v1/systemone");
        clients.push(tokio::spawn(async move {
            let mut ok = Vec::new();
            let mut shed = 0usize;
            let mut i = 0;
            while Instant::now() < deadline {
                let sent = Instant::now();
                let response = http
                    .post(&url)
                    .json(&request(client, i))
                    .send()
                    .await
                    .unwrap_or_else(|e| {
                        panic!("client {client}: request {i} got no response: {e}")
                    });
                let status = response.status().as_u16();
                let body = response.bytes().await.expect("the body arrives");
                match status {
                    200 => ok.push(sent.elapsed()),
                    429 => {
                        shed += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => panic!(
                        "client {client}: request {i} answered {other}: {}",
                        String::from_utf8_lossy(&body)
                    ),
                }
                i += 1;
            }
            (ok, shed)
        }));
    }
    let mut latencies = Vec::new();
    let mut shed = 0;
    for client in clients {
        let (ok, s) = client.await.expect("a client task finished");
        latencies.extend(ok);
        shed += s;
    }
    let elapsed = started.elapsed();
    latencies.sort();

    // Let the last responses and connections wind down, then measure again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib();
    let text = server.metrics().await;
    assert_eq!(common::metric(&text, "ruling_queue_depth"), Some(0.0));
    assert_eq!(common::metric(&text, "ruling_busy_workers"), Some(0.0));

    eprintln!(
        "load: {CLIENTS} clients, {:.1} s: {} answered 200 ({:.1}/s), {shed} shed with 429; \
         latency of 200s p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; RSS {} MiB before, {} MiB after",
        elapsed.as_secs_f64(),
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 50.0).as_secs_f64() * 1e3,
        percentile(&latencies, 99.0).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        baseline / 1024,
        after / 1024,
    );
    assert!(!latencies.is_empty(), "some requests were answered");
    // Nothing per request may be kept: allow allocator slack, not growth with the request count.
    assert!(
        after <= baseline + 64 * 1024,
        "RSS grew from {} MiB to {} MiB under load",
        baseline / 1024,
        after / 1024
    );
    server.stop().await.expect("a clean stop after the load");
}
