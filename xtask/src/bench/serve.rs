//! `cargo xtask bench serve`: what a client of `ruling-serve` waits, per model.
//!
//! For each model spec, the release `ruling-serve` binary is started on a free port (`--workers`
//! engine workers, otherwise its default settings) and driven over HTTP as a user's program
//! would drive it: the README's three-question request and a BANKING77 request with all 77
//! intents as options (held-out rows), one at a time, and a mixed set of held-out requests
//! (BoolQ, SST-5, CLINC150-20, TREC, AG News) sent by `--clients` clients at once, whose wall
//! time gives the throughput. The server's peak resident memory is
//! read from `/proc` before it is stopped. Medians, not means: these machines are shared and a
//! single slow request says little. Writes `docs/bench/serve.md` and `.json`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ruling_calibration::quantile;
use ruling_corpus::{Dataset, LoadOptions, Split};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, clap::Args)]
pub struct ServeBenchArgs {
    /// Model specs to serve, comma separated (catalog names, `encoder:DIR`, paths).
    #[arg(long, default_value = "ruling-judge-minilm-l6,qwen2.5-coder-1.5b")]
    models: String,
    /// Times the README request is sent.
    #[arg(long, default_value_t = 50)]
    readme: usize,
    /// BANKING77 held-out rows sent, each with all 77 intents as options (0 to skip; models
    /// named in --skip-wide skip it).
    #[arg(long, default_value_t = 30)]
    banking77: usize,
    /// Models too slow for the 77-way requests, comma separated.
    #[arg(long, default_value = "qwen2.5-coder-1.5b,qwen2.5-coder-0.5b")]
    skip_wide: String,
    /// Held-out rows per dataset in the mixed throughput set.
    #[arg(long, default_value_t = 6)]
    mixed: usize,
    /// Engine workers each server runs (`ruling-serve --workers`).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Clients sending the mixed set at once, each one request at a time (the README and
    /// BANKING77 latencies always use one).
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Where the report goes (`.json` beside it).
    #[arg(long, default_value = "docs/bench/serve.md")]
    out: PathBuf,
    /// The `ruling-serve` binary (built with `cargo build --release -p ruling-serve`).
    #[arg(long, default_value = "target/release/ruling-serve")]
    server: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct ModelRun {
    model: String,
    load_s: f64,
    readme: Option<Timings>,
    banking77: Option<Timings>,
    mixed: Option<Throughput>,
    peak_rss_mib: f64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Timings {
    requests: usize,
    median_ms: f64,
    p90_ms: f64,
    min_ms: f64,
    input_tokens: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Throughput {
    requests: usize,
    #[serde(default = "one")]
    clients: usize,
    wall_s: f64,
    requests_per_s: f64,
    median_ms: f64,
}

fn one() -> usize {
    1
}

const README_REQUEST: &str = r#"{
  "model": "jev-latest",
  "state": "Hi, my card was charged twice for the March invoice. Please refund one.",
  "questions": {
    "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
    "team": {"type": "choice", "instructions": "Which team should handle it?",
             "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["can wait", "this week", "today"]}
  }
}"#;

pub fn run(args: &ServeBenchArgs) -> anyhow::Result<()> {
    if !args.server.is_file() {
        bail!(
            "{} is missing: build it first with `cargo build --release -p ruling-serve`",
            args.server.display()
        );
    }
    let held_out = |dataset: &str, limit: usize| -> anyhow::Result<Vec<Value>> {
        let dataset: Dataset = dataset.parse()?;
        let records = ruling_corpus::load(
            dataset,
            Split::HeldOut,
            &LoadOptions {
                limit: Some(limit),
                seed: 0,
                ..LoadOptions::default()
            },
        )?;
        Ok(records
            .iter()
            .map(|r| serde_json::to_value(r.to_request("jev-latest")))
            .collect::<Result<_, _>>()?)
    };
    let wide = held_out("banking77", args.banking77)?;
    let mut mixed = Vec::new();
    for dataset in ["boolq", "sst5", "clinc150-20", "trec", "ag-news"] {
        mixed.extend(held_out(dataset, args.mixed)?);
    }
    let skip_wide: Vec<&str> = args.skip_wide.split(',').collect();
    let mut runs = Vec::new();
    for model in args.models.split(',').filter(|m| !m.is_empty()) {
        eprintln!("bench: serving {model}");
        let server = Server::start(&args.server, model, args.workers)?;
        let readme: Value = serde_json::from_str(README_REQUEST)?;
        let readme = (args.readme > 0)
            .then(|| timings(&server, &vec![readme; args.readme]))
            .transpose()?;
        let banking77 = (args.banking77 > 0 && !skip_wide.contains(&model))
            .then(|| timings(&server, &wide))
            .transpose()?;
        let mixed = (!mixed.is_empty())
            .then(|| throughput(&server, &mixed, args.clients))
            .transpose()?;
        let peak_rss_mib = server.peak_rss_mib();
        runs.push(ModelRun {
            model: model.to_owned(),
            load_s: server.load_s,
            readme,
            banking77,
            mixed,
            peak_rss_mib,
        });
        drop(server);
    }
    write_report(&args.out, &runs, args)
}

/// A `ruling-serve` child on a free port, stopped when dropped.
pub(super) struct Server {
    child: Child,
    base: String,
    load_s: f64,
}

impl Server {
    pub(super) fn start(binary: &Path, model: &str, workers: usize) -> anyhow::Result<Self> {
        let started = Instant::now();
        let mut child = Command::new(binary)
            .args([
                "--model",
                model,
                "--port",
                "0",
                "--served-name",
                "jev-latest",
                "--workers",
                &workers.to_string(),
            ])
            .env("RULING_CACHE", Path::new("target/ruling-cache"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stderr = child.stderr.take().context("the server's stderr")?;
        // The server logs the address it bound (`listening address=HOST:PORT`); read lines
        // until it does.
        let mut lines = BufReader::new(stderr).lines();
        let mut base = None;
        for line in lines.by_ref() {
            let line = strip_ansi(&line?);
            if line.contains("listening")
                && let Some(at) = line.find("address=")
            {
                let address: String = line[at + "address=".len()..]
                    .chars()
                    .take_while(|c| !c.is_whitespace())
                    .collect();
                base = Some(format!("http://{address}"));
                break;
            }
        }
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let base = base.context("the server exited before saying where it listens")?;
        let agent = agent();
        loop {
            if agent
                .get(&format!("{base}/health"))
                .call()
                .is_ok_and(|r| r.status() == 200)
            {
                break;
            }
            if started.elapsed() > Duration::from_secs(900) {
                bail!("{model} did not become healthy within 15 minutes");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Self {
            child,
            base,
            load_s: started.elapsed().as_secs_f64(),
        })
    }

    /// Send one request; its wall time and the input tokens the server counted.
    pub(super) fn ask(&self, body: &Value) -> anyhow::Result<(Duration, u64)> {
        let started = Instant::now();
        let response = agent()
            .post(&format!("{}/v1/systemone", self.base))
            .set("content-type", "application/json")
            .send_string(&body.to_string());
        let elapsed = started.elapsed();
        let response = match response {
            Ok(response) => response,
            Err(ureq::Error::Status(status, response)) => bail!(
                "the server answered {status}: {}",
                response.into_string().unwrap_or_default()
            ),
            Err(other) => return Err(other.into()),
        };
        let answer: Value = serde_json::from_str(&response.into_string()?)?;
        let tokens = answer["usage"]["input_tokens"].as_u64().unwrap_or(0);
        Ok((elapsed, tokens))
    }

    pub(super) fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A log line without its terminal colour codes.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .build()
}

fn timings(server: &Server, requests: &[Value]) -> anyhow::Result<Timings> {
    // One request first, untimed: the first pass allocates what later ones reuse.
    server.ask(&requests[0])?;
    let mut times = Vec::with_capacity(requests.len());
    let mut tokens = 0;
    for request in requests {
        let (elapsed, used) = server.ask(request)?;
        times.push(elapsed.as_secs_f64() * 1e3);
        tokens += used;
    }
    times.sort_by(f64::total_cmp);
    Ok(Timings {
        requests: times.len(),
        median_ms: quantile(&times, 0.5).unwrap_or(f64::NAN),
        p90_ms: quantile(&times, 0.9).unwrap_or(f64::NAN),
        min_ms: times[0],
        input_tokens: tokens / times.len().max(1) as u64,
    })
}

/// The mixed set's wall time with `clients` clients taking the next request as each finishes.
fn throughput(server: &Server, requests: &[Value], clients: usize) -> anyhow::Result<Throughput> {
    server.ask(&requests[0])?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    let mut times = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients.max(1))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<Vec<f64>> {
                    let mut times = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(request) = requests.get(i) else {
                            return Ok(times);
                        };
                        times.push(server.ask(request)?.0.as_secs_f64() * 1e3);
                    }
                })
            })
            .collect();
        let mut all = Vec::with_capacity(requests.len());
        for handle in handles {
            all.extend(
                handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("a client panicked"))??,
            );
        }
        anyhow::Ok(all)
    })?;
    let wall_s = started.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    Ok(Throughput {
        requests: requests.len(),
        clients: clients.max(1),
        wall_s,
        requests_per_s: requests.len() as f64 / wall_s,
        median_ms: quantile(&times, 0.5).unwrap_or(f64::NAN),
    })
}

fn write_report(out: &Path, runs: &[ModelRun], args: &ServeBenchArgs) -> anyhow::Result<()> {
    let mut md = format!(
        "# Serving benchmark\n\nWritten by `cargo xtask bench serve` (`xtask/src/bench/serve.rs`): \
         each model served by the release `ruling-serve` ({} engine worker(s), otherwise default \
         settings) on this machine, over loopback HTTP. Latencies are wall times at the client \
         (HTTP included), one request at a time; throughput is the mixed held-out set's requests \
         over its wall time, with {} client(s) each sending its next request as the last one is \
         answered.\n\n",
        args.workers, args.clients
    );
    md.push_str(&format!(
        "Machine: {} cores; {}.\n\n",
        std::thread::available_parallelism().map_or(0, usize::from),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    ));
    md.push_str(
        "| model | load s | README request median ms (p90) | BANKING77 77-way median ms (p90) | mixed held-out req/s (median ms) | peak RSS MiB |\n|---|---|---|---|---|---|\n",
    );
    let cell = |t: &Option<Timings>| {
        t.as_ref().map_or("—".to_owned(), |t| {
            format!(
                "{:.1} ({:.1}), {} tokens",
                t.median_ms, t.p90_ms, t.input_tokens
            )
        })
    };
    for run in runs {
        md.push_str(&format!(
            "| {} | {:.1} | {} | {} | {} | {:.0} |\n",
            run.model,
            run.load_s,
            cell(&run.readme),
            cell(&run.banking77),
            run.mixed.as_ref().map_or("—".to_owned(), |m| format!(
                "{:.2} ({:.0}), {} requests",
                m.requests_per_s, m.median_ms, m.requests
            )),
            run.peak_rss_mib
        ));
    }
    if let [first, rest @ ..] = runs {
        for other in rest {
            if let (Some(a), Some(b)) = (&first.mixed, &other.mixed) {
                md.push_str(&format!(
                    "\nOn the same mixed held-out requests, {} answers {:.0} times the requests per \
                     second of {}.\n",
                    first.model,
                    a.requests_per_s / b.requests_per_s,
                    other.model
                ));
            }
        }
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, md)?;
    std::fs::write(
        out.with_extension("json"),
        serde_json::to_vec_pretty(&json!(runs))?,
    )?;
    eprintln!("bench: wrote {}", out.display());
    Ok(())
}
