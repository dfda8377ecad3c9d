//! `ruling-eval batch`: a JSONL file of System One requests in, a JSONL file of their
//! responses out, in process or against one or more servers.
//!
//! Each input line is a request, or `{"id": ..., "request": {...}}` to name it; a bare
//! request's id is its line number. Each output line is `{"id", "status", "response"}` for an
//! answer, or `{"id", "status", "detail"}` for a request the server refused for good (a 422, a
//! 401) or that still failed after `--retries` tries. The output is an append-only journal
//! (whole lines, synced): rerunning the same command after a kill skips every id already in it
//! and cuts off a line the kill left unfinished, so each request is written exactly once.
//!
//! Against servers, `--concurrency` clients send one request at a time each, spread over the
//! `--url`s; a 408, 429, 5xx or dropped connection is retried as clients do (after the
//! server's `retry-after`, else with backoff), each try on the next server. In process, the
//! loaded model answers `--concurrency` requests at once (one already uses every core).

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use ruling_core::{Options, Ruling};
use ruling_corpus::journal::{Appender, read_journal, repair};
use ruling_schema::SystemOneRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  ruling-eval batch --input tickets.jsonl --output answers.jsonl --url http://10.0.0.1:8000 --url http://10.0.0.2:8000
  ruling-eval batch --input tickets.jsonl --output answers.jsonl --model ruling-judge-minilm-l6")]
pub struct BatchArgs {
    /// Requests, one per line: a System One request, or {\"id\": ..., \"request\": {...}}.
    #[arg(long)]
    input: PathBuf,
    /// Where the responses go, one line per request; rerunning into it resumes.
    #[arg(long)]
    output: PathBuf,
    /// System One servers to send to (repeatable); requests are spread over them.
    #[arg(long = "url", conflicts_with = "model")]
    urls: Vec<String>,
    /// In process instead: a catalog name, `encoder:PATH`, `hf:org/repo` or a local path.
    #[arg(long, required_unless_present = "urls")]
    model: Option<String>,
    /// Bearer key for the servers.
    #[arg(long, env = "RULING_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Requests in flight at once [default: 4 per server; 1 in process].
    #[arg(long)]
    concurrency: Option<usize>,
    /// Tries of a request that may succeed later (408, 429, 5xx, a dropped connection) before
    /// it is written as failed.
    #[arg(long, default_value_t = 10)]
    retries: u32,
    /// Seconds one try may take.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// The model cache (in process).
    #[arg(long, env = "RULING_CACHE")]
    cache: Option<PathBuf>,
}

/// One input line, as read.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Line {
    Named { id: Value, request: Value },
    Bare(Value),
}

/// One output line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub id: Value,
    /// The HTTP status (200 for an answer; in process, 200 or 422).
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// What answers: a model here, or servers.
enum Target {
    InProcess(Box<Ruling>),
    Servers {
        agent: ureq::Agent,
        urls: Vec<String>,
        api_key: Option<String>,
    },
}

pub fn run(args: BatchArgs) -> anyhow::Result<()> {
    let requests = read_input(&args.input)?;
    let journal = read_journal::<Outcome>(&args.output)?;
    let cut = repair(&args.output, &journal)?;
    if cut > 0 {
        eprintln!("batch: dropped {cut} bytes of a line a killed run left unfinished");
    }
    let done: HashSet<String> = journal.lines.iter().map(|o| o.id.to_string()).collect();
    let pending: Vec<&(Value, Value)> = requests
        .iter()
        .filter(|(id, _)| !done.contains(&id.to_string()))
        .collect();
    eprintln!(
        "batch: {} requests, {} already written, {} to send",
        requests.len(),
        requests.len() - pending.len(),
        pending.len()
    );
    if pending.is_empty() {
        return summary(&args.output, Duration::ZERO, 0);
    }
    let target = if let Some(model) = &args.model {
        let ruling = Ruling::load(
            model,
            &Options {
                cache_dir: args.cache.clone(),
                ..Options::default()
            },
        )
        .with_context(|| format!("loading {model}"))?;
        Target::InProcess(Box::new(ruling))
    } else {
        if args.urls.is_empty() {
            bail!("give --url (one or more servers) or --model");
        }
        Target::Servers {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(10))
                .timeout(Duration::from_secs_f64(args.timeout.max(1.0)))
                .build(),
            urls: args
                .urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect(),
            api_key: args.api_key.clone(),
        }
    };
    let concurrency = args
        .concurrency
        .unwrap_or(match &target {
            Target::InProcess(_) => 1,
            Target::Servers { urls, .. } => 4 * urls.len(),
        })
        .max(1);

    let bar = if console_is_terminal() {
        let bar = ProgressBar::new(requests.len() as u64).with_position(done.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} eta {eta} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut out = Appender::open(&args.output)?;
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let (sender, receiver) = mpsc::channel::<Outcome>();
    let written = std::thread::scope(|scope| -> anyhow::Result<usize> {
        for worker in 0..concurrency {
            let (sender, next, pending, target) = (sender.clone(), &next, &pending, &target);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some((id, request)) = pending.get(i) else {
                        return;
                    };
                    let outcome = answer(target, worker + i, id, request, args.retries);
                    if sender.send(outcome).is_err() {
                        return;
                    }
                }
            });
        }
        drop(sender);
        let mut written = 0;
        let mut failed = 0;
        for outcome in receiver {
            if outcome.status != 200 {
                failed += 1;
            }
            out.append(&outcome)?;
            written += 1;
            bar.inc(1);
            bar.set_message(format!("{failed} not answered"));
            if bar.is_hidden() && written % 500 == 0 {
                eprintln!(
                    "batch: {} of {} written, {failed} not answered, {:.1}/s",
                    done.len() + written,
                    requests.len(),
                    written as f64 / started.elapsed().as_secs_f64().max(1e-9)
                );
            }
        }
        Ok(written)
    })?;
    bar.finish_and_clear();
    summary(&args.output, started.elapsed(), written)
}

fn console_is_terminal() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal()
}

/// Every input line as (id, request), in order; ids must be unique.
fn read_input(path: &Path) -> anyhow::Result<Vec<(Value, Value)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), index + 1);
        let parsed: Line =
            serde_json::from_str(line).with_context(|| format!("{}: not JSON", at()))?;
        let (id, request) = match parsed {
            Line::Named { id, request } => (id, request),
            Line::Bare(request) => (Value::from(index + 1), request),
        };
        if !request.is_object() {
            bail!("{}: a request is a JSON object", at());
        }
        if !seen.insert(id.to_string()) {
            bail!(
                "{}: the id {id} is used twice; every request needs its own",
                at()
            );
        }
        out.push((id, request));
    }
    Ok(out)
}

/// One request through the target: its outcome line.
fn answer(target: &Target, start: usize, id: &Value, request: &Value, retries: u32) -> Outcome {
    let outcome = |status: u16, response: Option<Value>, detail: Option<Value>| Outcome {
        id: id.clone(),
        status,
        response,
        detail,
    };
    match target {
        Target::InProcess(ruling) => {
            let parsed: Result<SystemOneRequest, _> = serde_json::from_value(request.clone());
            match parsed
                .map_err(|e| e.to_string())
                .and_then(|r| ruling.evaluate(&r).map_err(|e| e.to_string()))
            {
                Ok(response) => outcome(200, serde_json::to_value(response).ok(), None),
                Err(message) => outcome(422, None, Some(Value::from(message))),
            }
        }
        Target::Servers {
            agent,
            urls,
            api_key,
        } => {
            let body = request.to_string();
            let mut last = (0u16, Value::Null);
            for attempt in 0..retries.max(1) {
                let url = format!(
                    "{}/v1/systemone",
                    urls[(start + attempt as usize) % urls.len()]
                );
                let mut call = agent.post(&url).set("content-type", "application/json");
                if let Some(key) = api_key {
                    call = call.set("authorization", &format!("Bearer {key}"));
                }
                let wait = match call.send_string(&body) {
                    Ok(response) => {
                        let text = read(response);
                        return match serde_json::from_str::<Value>(&text) {
                            Ok(value) => outcome(200, Some(value), None),
                            Err(_) => outcome(502, None, Some(Value::from(text))),
                        };
                    }
                    Err(ureq::Error::Status(code @ (408 | 429 | 500..=599), response)) => {
                        let after = response
                            .header("retry-after")
                            .and_then(|s| s.trim().parse::<f64>().ok());
                        last = (code, json_or_text(&read(response)));
                        after.unwrap_or_else(|| backoff(attempt)).min(30.0)
                    }
                    // Refused for good: written as it came.
                    Err(ureq::Error::Status(code, response)) => {
                        return outcome(code, None, Some(json_or_text(&read(response))));
                    }
                    Err(ureq::Error::Transport(t)) => {
                        last = (0, Value::from(t.to_string()));
                        backoff(attempt)
                    }
                };
                std::thread::sleep(Duration::from_secs_f64(wait));
            }
            outcome(last.0, None, Some(last.1))
        }
    }
}

fn backoff(attempt: u32) -> f64 {
    0.25 * f64::from(1u32 << attempt.min(6))
}

fn read(response: ureq::Response) -> String {
    let mut text = String::new();
    let _ = response.into_reader().read_to_string(&mut text);
    text
}

fn json_or_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::from(text))
}

/// The counts of the whole output, and this run's rate.
fn summary(output: &Path, took: Duration, written: usize) -> anyhow::Result<()> {
    let lines = read_journal::<Outcome>(output)?.lines;
    let answered = lines.iter().filter(|o| o.status == 200).count();
    let mut others: std::collections::BTreeMap<u16, usize> = Default::default();
    for line in lines.iter().filter(|o| o.status != 200) {
        *others.entry(line.status).or_default() += 1;
    }
    let rest: Vec<String> = others
        .iter()
        .map(|(status, n)| {
            if *status == 0 {
                format!("{n} unreachable")
            } else {
                format!("{n} answered {status}")
            }
        })
        .collect();
    eprintln!(
        "batch: {} lines in {}: {answered} answered{}{}",
        lines.len(),
        output.display(),
        if rest.is_empty() {
            String::new()
        } else {
            format!(", {}", rest.join(", "))
        },
        if written > 0 {
            format!(
                "; this run wrote {written} in {:.1} s ({:.1}/s)",
                took.as_secs_f64(),
                written as f64 / took.as_secs_f64().max(1e-9)
            )
        } else {
            String::new()
        }
    );
    Ok(())
}
