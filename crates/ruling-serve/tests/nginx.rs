//! Replicas behind nginx, as `deploy/nginx/nginx.conf` runs them: two `ruling-serve`
//! processes on loopback serving the default judge, Debian's nginx in front (least
//! connections, a retry on the other replica when one fails to answer), a burst of requests,
//! and one replica killed in the middle of it. No request may be lost: each is answered 200,
//! or refused with a retryable status and answered on retry; and every answer through nginx
//! equals the one the surviving replica gives directly.
//!
//! `cargo xtask ci` installs nginx with the other system packages; without it this test fails
//! saying so.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A child process stopped (killed) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `ruling-serve` replica on a free loopback port, serving the default judge.
fn replica() -> (Process, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ruling-serve"))
        .args(["--port", "0", "--host", "127.0.0.1"])
        .env("RULING_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ruling-serve starts");
    let stderr = child.stderr.take().expect("its stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut address = None;
    for line in lines.by_ref() {
        let line = line.expect("a log line");
        if let Some(at) = line.find("address=") {
            let rest = &line[at + "address=".len()..];
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '\u{1b}')
                .unwrap_or(rest.len());
            address = Some(rest[..end].to_owned());
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let address = address.expect("the replica logs where it listens");
    (Process(child), address)
}

fn nginx_binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect(
            "nginx is not installed: `cargo xtask ci` installs it (Debian: apt-get install nginx)",
        )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `deploy/nginx/nginx.conf` with these replicas, this port and this folder for its files.
fn nginx_config(dir: &Path, replicas: [&str; 2], port: u16) -> PathBuf {
    let template = std::fs::read_to_string(common::workspace().join("deploy/nginx/nginx.conf"))
        .expect("deploy/nginx/nginx.conf");
    let scratch = dir.display().to_string();
    let text = template
        .replace("127.0.0.1:8001", replicas[0])
        .replace("127.0.0.1:8002", replicas[1])
        .replace("listen 127.0.0.1:8080", &format!("listen 127.0.0.1:{port}"))
        .replace("/tmp/ruling-nginx", &format!("{scratch}/nginx"));
    assert!(
        text.contains(replicas[0]) && text.contains(&format!(":{port}")),
        "the template's addresses changed"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, text).expect("the config is written");
    path
}

fn request(i: usize) -> Value {
    json!({
        "model": "jev-latest",
        "state": format!("Ticket {i}: my card was charged twice for invoice {i}. Please refund one."),
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
            "team": {"type": "choice", "instructions": "Which team should handle it?",
                     "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["can wait", "this week", "today"]}
        }
    })
}

/// Ask until answered, as a client that honours retryable statuses does; `None` after too
/// many tries.
async fn ask_until_answered(client: &reqwest::Client, url: &str, body: &Value) -> Option<Value> {
    for _ in 0..20 {
        match client.post(url).json(body).send().await {
            Ok(response) if response.status() == 200 => return response.json().await.ok(),
            Ok(response) => {
                let status = response.status().as_u16();
                assert!(
                    [408, 429, 502, 503, 504].contains(&status),
                    "{status} is not a status a client retries: {}",
                    response.text().await.unwrap_or_default()
                );
                let wait = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                    .unwrap_or(1)
                    .min(2);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    None
}

async fn wait_ready(client: &reqwest::Client, base: &str) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        if let Ok(response) = client.get(format!("{base}/ready")).send().await
            && response.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{base} never became ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_burst_loses_no_request() {
    let nginx = nginx_binary();
    let dir = tempfile::tempdir().unwrap();
    let (doomed, first) = replica();
    let (_survivor, second) = replica();
    let client = reqwest::Client::new();
    for address in [&first, &second] {
        wait_ready(&client, &format!("http://{address}")).await;
    }
    let port = free_port();
    let config = nginx_config(dir.path(), [&first, &second], port);
    let _nginx = Process(
        Command::new(&nginx)
            .args(["-p", &dir.path().display().to_string(), "-c"])
            .arg(&config)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts"),
    );
    let front = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while client
        .get(format!("{front}/nginx-health"))
        .send()
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "nginx never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // 240 requests from 24 clients at once; the first replica is killed once 60 are answered.
    let total = 240;
    let answered = Arc::new(AtomicUsize::new(0));
    let doomed = Arc::new(std::sync::Mutex::new(Some(doomed)));
    let url = format!("{front}/v1/systemone");
    let next = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..24 {
        let (client, url, next, answered, doomed) = (
            client.clone(),
            url.clone(),
            Arc::clone(&next),
            Arc::clone(&answered),
            Arc::clone(&doomed),
        );
        clients.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    return got;
                }
                let answer = ask_until_answered(&client, &url, &request(i)).await;
                if answered.fetch_add(1, Ordering::SeqCst) + 1 == 60 {
                    // Killed, not stopped: connections in flight are cut.
                    drop(doomed.lock().unwrap().take());
                }
                got.push((i, answer));
            }
        }));
    }
    let mut answers = Vec::new();
    for handle in clients {
        answers.extend(handle.await.unwrap());
    }
    assert!(
        doomed.lock().unwrap().is_none(),
        "the replica was killed mid-burst"
    );
    assert_eq!(answers.len(), total);
    let lost: Vec<usize> = answers
        .iter()
        .filter(|(_, a)| a.is_none())
        .map(|(i, _)| *i)
        .collect();
    assert!(lost.is_empty(), "requests never answered: {lost:?}");

    // Through nginx, the same answers as the surviving replica gives directly.
    let direct = format!("http://{second}/v1/systemone");
    for (i, answer) in answers.iter().step_by(7) {
        let through = answer.as_ref().expect("answered");
        let own = client
            .post(&direct)
            .json(&request(*i))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(through["answers"], own["answers"], "request {i}");
    }
}
