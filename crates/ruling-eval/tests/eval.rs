//! `ruling-eval run`, `calibrate`, `report` and `compare` end to end, with the built binary
//! and the generated tiny fixture (random weights: only shapes, bookkeeping and agreement
//! between derivations are checked, never how good the answers are) on a few rows of the
//! shared datasets.

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ruling_calibration::Calibration;
use ruling_core::{AdapterCalibration, AdapterChoice, Options, Ruling};
mod common;

use common::{ruling_eval, succeed, tiny_llama, tiny_llama_adapter};
use serde_json::Value;

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ruling-eval-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fail(output: Output) -> String {
    assert!(
        !output.status.success(),
        "ruling-eval should have failed:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `ruling-eval run` on the tiny fixture with the given datasets, limit and extra flags.
fn run(out: &Path, datasets: &str, split: &str, limit: usize, extra: &[&str]) -> Command {
    let mut command = ruling_eval();
    command.args([
        "run",
        "--model",
        &tiny_llama(),
        "--dataset",
        datasets,
        "--split",
        split,
        "--limit",
        &limit.to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    command.args(extra);
    command
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn close(a: &Value, b: &Value, tolerance: f64) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k).is_some_and(|w| match (v.as_f64(), w.as_f64()) {
                (Some(x), Some(y)) => (x - y).abs() <= tolerance,
                _ => false,
            })
        })
}

/// `ruling-eval calibrate` on `results`, writing `out`, with `extra` arguments; its output.
fn calibrate(results: &Path, out: &Path, extra: &[&str]) -> Output {
    ruling_eval()
        .arg("calibrate")
        .arg("--results")
        .arg(results)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// `ruling-eval report` on `results` with a calibration file, into `out` when given; its
/// output.
fn report_with(results: &Path, calibration: &Path, out: Option<&Path>) -> Output {
    let mut command = ruling_eval();
    command
        .arg("report")
        .arg("--results")
        .arg(results)
        .arg("--calibration")
        .arg(calibration);
    if let Some(out) = out {
        command.arg("--out").arg(out);
    }
    command.output().unwrap()
}

#[test]
fn run_writes_results_report_and_figures() {
    let out = scratch("run");
    let (_, stderr) = succeed(
        run(
            &out,
            "boolq,chaosnli-snli,sst5",
            "dev",
            4,
            &["--rotations", "2", "--prior"],
        )
        .output()
        .unwrap(),
    );
    assert!(stderr.contains("boolq: 4/4 records"), "{stderr}");

    for (dataset, kind, keys) in [
        ("boolq", "noul", vec!["yes", "no"]),
        (
            "chaosnli-snli",
            "choice",
            vec!["entailment", "neutral", "contradiction"],
        ),
        ("sst5", "score", vec!["0", "1", "2", "3", "4"]),
    ] {
        let rows = lines(&out.join(format!("results/{dataset}.jsonl")));
        assert_eq!(rows.len(), 4, "{dataset}");
        for row in &rows {
            assert_eq!(row["split"], "dev");
            assert!(row["latency_ms"].as_f64().unwrap() > 0.0);
            assert!(row["usage"]["input_tokens"].as_u64().unwrap() > 0);
            let (_, q) = row["questions"].as_object().unwrap().iter().next().unwrap();
            assert_eq!(q["type"], kind);
            assert!(q["label"].is_string(), "{q}");
            assert_eq!(q["rotations"], 2);
            for column in ["answer", "raw", "prior", "rotated"] {
                let got: Vec<&String> = q[column].as_object().unwrap().keys().collect();
                assert_eq!(got, keys, "{dataset} {column} keys in canonical order");
            }
            assert!(q["calibrated"].is_null(), "no calibration given");
            // Without a calibration the engine's answer is the rotated column.
            assert!(close(&q["answer"], &q["rotated"], 1e-9), "{q}");
            assert!(!close(&q["raw"], &q["prior"], 1e-12), "the prior moves raw");
            for column in ["raw", "prior", "rotated"] {
                assert!(q["reversed"][column].is_object(), "{dataset}: {q}");
            }
            if kind == "noul" {
                assert!(
                    close(&q["reversed"]["rotated"], &q["rotated"], 0.0),
                    "a noul's rotated reading holds both orders"
                );
            } else {
                assert!(row["reversal"]["input_tokens"].as_u64().unwrap() > 0);
            }
        }
        if dataset == "chaosnli-snli" {
            assert!(rows[0]["questions"]["relation"]["target"].is_object());
        }
        for figure in ["reliability", "confidence"] {
            let path = out.join(format!("figures/{dataset}-{kind}-{figure}.svg"));
            let svg = std::fs::read_to_string(&path).unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert!(svg.contains("prior-corrected"), "{}", path.display());
        }
    }

    let markdown = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "## boolq (dev)",
        "## chaosnli-snli (dev)",
        "## sst5 (dev)",
        "| column | accuracy | macro-F1 | ECE | Brier | log loss | coverage@5% | flip rate |",
        "MAE (levels)",
        "KL (nats)",
        "| raw |",
        "| prior-corrected |",
        "| rotated |",
        "| calibrated (T = ",
        "latency p50",
        "input tokens per request",
        "in-sample",
        "figures/boolq-noul-reliability.svg",
    ] {
        assert!(markdown.contains(needle), "{needle:?} missing:\n{markdown}");
    }

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["calibration"]["source"], "in-sample");
    assert_eq!(report["ece_bins"], 15);
    assert_eq!(report["datasets"].as_array().unwrap().len(), 3);
    for dataset in report["datasets"].as_array().unwrap() {
        assert!(dataset["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
        assert!(dataset["input_tokens_per_request"].as_f64().unwrap() > 0.0);
        let group = &dataset["groups"][0];
        let columns = group["columns"].as_array().unwrap();
        let names: Vec<&str> = columns
            .iter()
            .map(|c| c["column"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["raw", "prior-corrected", "rotated", "calibrated"]);
        for column in columns {
            for metric in [
                "accuracy",
                "macro_f1",
                "ece",
                "brier",
                "log_loss",
                "coverage_at_5pct_error",
                "flip_rate",
            ] {
                assert!(column[metric].is_number(), "{metric}: {column}");
            }
            assert_eq!(column["reliability"]["bins"].as_array().unwrap().len(), 15);
            assert_eq!(column["flip_items"], 4);
        }
        match group["question_type"].as_str().unwrap() {
            "score" => assert!(columns[0]["mean_absolute_error"].is_number()),
            "choice" => assert!(columns[0]["kl_divergence"].is_number()),
            _ => assert!(columns[0]["kl_divergence"].is_null()),
        }
    }

    // `report` rewrites the same files from the results alone.
    std::fs::remove_file(out.join("report.md")).unwrap();
    succeed(
        ruling_eval()
            .args(["report", "--results", &out.display().to_string()])
            .output()
            .unwrap(),
    );
    assert_eq!(
        std::fs::read_to_string(out.join("report.md")).unwrap(),
        markdown
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_killed_run_resumes_without_duplicates() {
    let out = scratch("resume");
    let file = out.join("results/boolq.jsonl");
    succeed(run(&out, "boolq", "dev", 4, &[]).output().unwrap());
    let first: Vec<String> = lines(&file)
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(first.len(), 4);

    // What a kill mid-write leaves: half of a line, no newline.
    let text = std::fs::read_to_string(&file).unwrap();
    let last = text.lines().last().unwrap();
    let mut cut = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    cut.write_all(&last.as_bytes()[..last.len() / 2]).unwrap();
    drop(cut);

    // Reading it (report) ignores the cut line and leaves the file alone.
    let (_, stderr) = succeed(
        ruling_eval()
            .args(["report", "--results", &out.display().to_string()])
            .output()
            .unwrap(),
    );
    assert!(stderr.contains("unterminated last line"), "{stderr}");

    let (_, stderr) = succeed(run(&out, "boolq", "dev", 8, &[]).output().unwrap());
    assert!(
        stderr.contains("dropped an unterminated last line"),
        "{stderr}"
    );
    let rows = lines(&file);
    assert_eq!(rows.len(), 8, "4 kept, 4 added, the cut line dropped");
    let ids: HashSet<&str> = rows.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 8, "no record twice");
    assert!(
        first.iter().all(|id| ids.contains(id.as_str())),
        "the sample nests"
    );

    // Nothing left to do: a rerun appends nothing.
    let (_, stderr) = succeed(run(&out, "boolq", "dev", 8, &[]).output().unwrap());
    assert!(stderr.contains("all 8 records already done"), "{stderr}");
    assert_eq!(lines(&file).len(), 8);

    // Other settings into the same directory are refused rather than mixed in.
    let stderr = fail(
        run(&out, "boolq", "dev", 8, &["--rotations", "2"])
            .output()
            .unwrap(),
    );
    assert!(
        stderr.contains("holds results of another run (rotations"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_run_killed_for_real_resumes_to_the_full_sample() {
    let out = scratch("kill");
    let file = out.join("results/boolq.jsonl");
    let mut child = run(&out, "boolq", "dev", 40, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once a few lines are written (or let it finish, if it is faster than the poll).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let written = std::fs::read_to_string(&file).map_or(0, |t| t.lines().count());
        if written >= 3 || child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no progress");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().ok();
    child.wait().unwrap();
    succeed(run(&out, "boolq", "dev", 40, &[]).output().unwrap());
    let rows = lines(&file);
    let ids: HashSet<&str> = rows.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!((rows.len(), ids.len()), (40, 40));
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn calibrate_writes_a_loadable_calibration_and_refuses_held_out() {
    let dir = scratch("calibrate");
    let dev = dir.join("dev");
    succeed(
        run(
            &dev,
            "boolq,sst5,chaosnli-snli",
            "dev",
            6,
            &["--rotations", "2"],
        )
        .output()
        .unwrap(),
    );
    let file = dir.join("calibration.json");
    let (_, stderr) = succeed(calibrate(&dev, &file, &[]));
    assert!(stderr.contains("noul: temperature"), "{stderr}");
    let calibration = Calibration::load(&file).unwrap();
    assert_eq!(calibration.provenance.model_id, "tiny-llama.gguf");
    assert_eq!(calibration.provenance.rotations, 2);
    assert!(!calibration.provenance.prior);
    assert!(calibration.created.is_some());
    let fitted = calibration.fitted.as_ref().unwrap();
    assert_eq!(fitted.per_type.len(), 3, "{fitted:?}");

    // The engine takes it: the provenance is the one it computes itself.
    let options = Options {
        rotations: Some(2),
        calibration: Some(file.clone()),
        ..Options::default()
    };
    Ruling::load(&tiny_llama(), &options).expect("the calibration fits this engine");
    let refused = Ruling::load(
        &tiny_llama(),
        &Options {
            calibration: Some(file.clone()),
            ..Options::default()
        },
    );
    assert!(
        refused.is_err(),
        "one rotation is not what it was fitted for"
    );

    // A run with it: the engine's answer is the calibrated column.
    let calibrated = dir.join("calibrated");
    succeed(
        run(
            &calibrated,
            "boolq",
            "dev",
            3,
            &[
                "--rotations",
                "2",
                "--calibration",
                &file.display().to_string(),
            ],
        )
        .output()
        .unwrap(),
    );
    for row in lines(&calibrated.join("results/boolq.jsonl")) {
        let q = &row["questions"]["answer"];
        assert!(close(&q["answer"], &q["calibrated"], 1e-9), "{q}");
        let t = q["temperature"].as_f64().unwrap();
        assert!(
            (t - calibration
                .temperatures
                .get(ruling_calibration::AnswerType::Noul))
            .abs()
                < 1e-12
        );
    }
    let markdown = std::fs::read_to_string(calibrated.join("report.md")).unwrap();
    assert!(markdown.contains("the run's own calibration"), "{markdown}");

    // Held-out results never fit a temperature, but a dev calibration may be reported on them.
    let held_out = dir.join("held-out");
    succeed(
        run(&held_out, "boolq", "held-out", 3, &["--rotations", "2"])
            .output()
            .unwrap(),
    );
    assert!(
        lines(&held_out.join("results/boolq.jsonl"))
            .iter()
            .all(|l| l["split"] == "held-out")
    );
    let stderr = fail(calibrate(&held_out, &dir.join("never.json"), &[]));
    assert!(stderr.contains("held-out results"), "{stderr}");
    assert!(!dir.join("never.json").exists());
    let markdown = std::fs::read_to_string(held_out.join("report.md")).unwrap();
    assert!(
        markdown.contains("held-out rows never fit a temperature"),
        "{markdown}"
    );
    assert!(!markdown.contains("| calibrated"), "{markdown}");
    succeed(report_with(&held_out, &file, None));
    let markdown = std::fs::read_to_string(held_out.join("report.md")).unwrap();
    assert!(markdown.contains("| calibrated (T = "), "{markdown}");
    // The report says how much the temperature moved the ECE, with an interval.
    assert!(
        markdown.contains("## What calibration did to the ECE"),
        "{markdown}"
    );
    assert!(
        markdown.contains("calibration moved the ECE from"),
        "{markdown}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(held_out.join("report.json")).unwrap())
            .unwrap();
    let group = &report["datasets"][0]["groups"][0];
    let effect = &group["calibration_effect"];
    let columns = group["columns"].as_array().unwrap();
    let ece = |name: &str| {
        columns.iter().find(|c| c["column"] == name).unwrap()["ece"]
            .as_f64()
            .unwrap()
    };
    assert!((effect["raw_ece"].as_f64().unwrap() - ece("raw")).abs() < 1e-12);
    assert!((effect["calibrated_ece"].as_f64().unwrap() - ece("calibrated")).abs() < 1e-12);
    let versus_raw = &effect["versus_raw"];
    let estimate = versus_raw["estimate"].as_f64().unwrap();
    assert!((estimate - (ece("calibrated") - ece("raw"))).abs() < 1e-12);
    assert!(versus_raw["lower"].as_f64().unwrap() <= estimate);
    assert!(estimate <= versus_raw["upper"].as_f64().unwrap());
    // A calibration fitted for other settings is refused by report too.
    let one = dir.join("one");
    succeed(run(&one, "boolq", "dev", 2, &[]).output().unwrap());
    let stderr = fail(report_with(&one, &file, None));
    assert!(stderr.contains("rotations"), "{stderr}");
    // And by run, before a record is asked or a file written (in process, by the engine).
    let refused = dir.join("refused");
    let stderr = fail(
        run(
            &refused,
            "boolq",
            "held-out",
            2,
            &["--calibration", &file.display().to_string()],
        )
        .output()
        .unwrap(),
    );
    assert!(
        stderr.contains("calibration was fitted for rotations = 2"),
        "{stderr}"
    );
    assert!(!refused.join("run.json").exists());

    // `--column raw` fits the options-as-given scores and writes the file for one rotation
    // without the prior, which the default engine takes.
    let raw_file = dir.join("raw.json");
    let (_, stderr) = succeed(calibrate(&dev, &raw_file, &["--column", "raw"]));
    assert!(stderr.contains("for rotations 1, prior off"), "{stderr}");
    let raw = Calibration::load(&raw_file).unwrap();
    assert_eq!((raw.provenance.rotations, raw.provenance.prior), (1, false));
    Ruling::load(
        &tiny_llama(),
        &Options {
            calibration: Some(raw_file.clone()),
            ..Options::default()
        },
    )
    .expect("the default engine takes a raw-column calibration");
    // Reported on the two-rotation held-out run, it scales the raw column; the figures are
    // those of a one-rotation run whose engine applies the same file.
    let raw_report = |dir: &Path| -> Value {
        succeed(report_with(dir, &raw_file, None));
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
    };
    let two = raw_report(&held_out);
    let markdown = std::fs::read_to_string(held_out.join("report.md")).unwrap();
    assert!(markdown.contains("divide the **raw** scores"), "{markdown}");
    assert_eq!(two["calibration"]["scales"], "raw");
    let served = dir.join("served");
    succeed(
        run(
            &served,
            "boolq",
            "held-out",
            3,
            &["--calibration", &raw_file.display().to_string()],
        )
        .output()
        .unwrap(),
    );
    let one = raw_report(&served);
    let calibrated = |report: &Value| -> Value {
        report["datasets"][0]["groups"][0]["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["column"] == "calibrated")
            .unwrap()
            .clone()
    };
    let (a, b) = (calibrated(&two), calibrated(&one));
    for metric in ["accuracy", "ece", "brier", "log_loss"] {
        let (x, y) = (a[metric].as_f64().unwrap(), b[metric].as_f64().unwrap());
        assert!((x - y).abs() < 1e-9, "{metric}: {x} vs {y}");
    }
    let stderr = fail(calibrate(
        &dev,
        &dir.join("never.json"),
        &["--column", "prior-corrected"],
    ));
    assert!(stderr.contains("without --prior"), "{stderr}");

    // `--out` writes the report elsewhere and leaves the results directory's own alone.
    let before = std::fs::read(held_out.join("report.md")).unwrap();
    let elsewhere = dir.join("elsewhere");
    succeed(report_with(&held_out, &file, Some(&elsewhere)));
    let markdown = std::fs::read_to_string(elsewhere.join("report.md")).unwrap();
    assert!(markdown.contains("| calibrated (T = "), "{markdown}");
    assert!(elsewhere.join("report.json").is_file());
    assert!(
        elsewhere
            .join("figures/boolq-noul-reliability.svg")
            .is_file()
    );
    assert_eq!(std::fs::read(held_out.join("report.md")).unwrap(), before);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compare_prints_paired_intervals() {
    let dir = scratch("compare");
    let (a, b) = (dir.join("a"), dir.join("b"));
    succeed(run(&a, "boolq,sst5", "dev", 6, &[]).output().unwrap());
    succeed(
        run(&b, "boolq,sst5", "dev", 6, &["--rotations", "2"])
            .output()
            .unwrap(),
    );
    let (stdout, _) = succeed(
        ruling_eval()
            .args([
                "compare",
                &a.display().to_string(),
                &b.display().to_string(),
                "--resamples",
                "2000",
            ])
            .output()
            .unwrap(),
    );
    for needle in [
        "A - B [95% interval]",
        "| boolq | noul | 6 |",
        "| sst5 | score | 6 |",
        "95% paired bootstrap",
        "rotations 1",
        "rotations 2",
    ] {
        assert!(stdout.contains(needle), "{needle:?} missing:\n{stdout}");
    }
    let (stdout, _) = succeed(
        ruling_eval()
            .args([
                "compare",
                &a.display().to_string(),
                &b.display().to_string(),
                "--json",
                "--column",
                "raw",
            ])
            .output()
            .unwrap(),
    );
    let output: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(output["column"], "raw");
    for c in output["comparisons"].as_array().unwrap() {
        assert_eq!(c["paired"], 6);
        // Both runs read the same first order: their raw columns agree item by item.
        let d = &c["accuracy"]["difference"];
        assert!(d["estimate"].as_f64().unwrap().abs() < 1e-12, "{c}");
        assert!(d["lower"].as_f64().unwrap() <= d["upper"].as_f64().unwrap());
        assert_eq!(d["level"], 0.95);
    }
    // Each side as the mean of two runs: the same two runs on both sides differ by nothing.
    let (a, b) = (a.display().to_string(), b.display().to_string());
    let (both, swapped) = (format!("{a},{b}"), format!("{b},{a}"));
    let (stdout, _) = succeed(
        ruling_eval()
            .args(["compare", &both, &swapped, "--json", "--resamples", "500"])
            .output()
            .unwrap(),
    );
    let output: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(output["a"].as_array().unwrap().len(), 2, "{output}");
    for c in output["comparisons"].as_array().unwrap() {
        let d = &c["accuracy"]["difference"];
        assert!(d["estimate"].as_f64().unwrap().abs() < 1e-12, "{c}");
        assert_eq!(c["accuracy"]["a"], c["accuracy"]["b"], "{c}");
    }
    let (stdout, _) = succeed(
        ruling_eval()
            .args(["compare", &both, &b, "--resamples", "500"])
            .output()
            .unwrap(),
    );
    assert!(stdout.contains("A: the mean of 2 runs"), "{stdout}");
    assert!(stdout.contains("also draws its runs"), "{stdout}");
    let missing = dir.join("missing").display().to_string();
    let output = ruling_eval()
        .args(["compare", &format!("{a},{missing}"), &b])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&missing), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `ruling-serve` itself, on a thread of its own with its own runtime, serving the tiny
/// fixture with a bearer key; returns its base URL once it is ready.
fn serve(key: &'static str, rotations: u32, prior: bool) -> String {
    let loader = ruling_serve::Loader::from_spec(
        tiny_llama(),
        Options {
            rotations: Some(rotations),
            prior: Some(prior),
            ..Options::default()
        },
    );
    let config = ruling_serve::Config {
        api_key: ruling_serve::ApiKey::new(key),
        ..ruling_serve::Config::default()
    };
    let (sender, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            sender.send(listener.local_addr().unwrap()).unwrap();
            ruling_serve::serve(config, listener, loader, std::future::pending::<()>())
                .await
                .unwrap();
        });
    });
    let base = format!("http://{}", address.recv().unwrap());
    for _ in 0..600 {
        if ureq::get(&format!("{base}/health")).call().is_ok() {
            return base;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("ruling-serve did not become ready in 30 s");
}

#[test]
fn url_mode_gives_the_in_process_answers() {
    let dir = scratch("url");
    let url = serve("sesame", 2, true);
    let (local, remote) = (dir.join("local"), dir.join("remote"));
    let datasets = "boolq,chaosnli-snli,sst5";
    let settings = ["--rotations", "2", "--prior"];
    succeed(run(&local, datasets, "dev", 3, &settings).output().unwrap());
    let mut command = ruling_eval();
    command.args([
        "run",
        "--url",
        &url,
        "--api-key",
        "sesame",
        "--dataset",
        datasets,
        "--split",
        "dev",
        "--limit",
        "3",
        "--out",
        &remote.display().to_string(),
    ]);
    command.args(settings);
    succeed(command.output().unwrap());

    let manifest = |dir: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
    };
    assert_eq!(manifest(&remote)["mode"], "http");
    assert_eq!(
        manifest(&remote)["provenance"],
        manifest(&local)["provenance"],
        "a calibration fitted on either fits the same engine"
    );
    for dataset in datasets.split(',') {
        let path = format!("results/{dataset}.jsonl");
        let (a, b) = (lines(&local.join(&path)), lines(&remote.join(&path)));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x["id"], y["id"]);
            assert_eq!(x["usage"], y["usage"]);
            for (id, q) in x["questions"].as_object().unwrap() {
                let r = &y["questions"][id];
                for column in ["answer", "raw", "prior", "rotated"] {
                    assert!(close(&q[column], &r[column], 1e-9), "{dataset} {column}");
                }
                for column in ["raw", "prior", "rotated"] {
                    assert!(close(&q["reversed"][column], &r["reversed"][column], 1e-9));
                }
            }
        }
    }

    // A wrong key stops the run with the server's answer.
    let stderr = fail(
        ruling_eval()
            .args([
                "run",
                "--url",
                &url,
                "--api-key",
                "wrong",
                "--dataset",
                "boolq",
                "--split",
                "dev",
                "--limit",
                "1",
                "--out",
                &dir.join("denied").display().to_string(),
            ])
            .output()
            .unwrap(),
    );
    assert!(stderr.contains("401"), "{stderr}");
    // Settings that are not the server's are caught in its traces.
    let stderr = fail(
        ruling_eval()
            .args([
                "run",
                "--url",
                &url,
                "--api-key",
                "sesame",
                "--dataset",
                "boolq",
                "--split",
                "dev",
                "--limit",
                "1",
                "--rotations",
                "2",
                "--out",
                &dir.join("mismatch").display().to_string(),
            ])
            .output()
            .unwrap(),
    );
    assert!(
        stderr.contains("this run says --prior is false"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_adapter_run_records_its_digest_and_calibrates_for_that_adapter() {
    let dir = scratch("adapter");
    let adapter = tiny_llama_adapter(&dir.join("support"), "support");
    let digest = ruling_candle::Adapter::load(&adapter).unwrap().digest;
    let adapter_arg = adapter.display().to_string();
    let dev = dir.join("dev");
    let (_, stderr) = succeed(
        run(&dev, "boolq,sst5", "dev", 4, &["--adapter", &adapter_arg])
            .output()
            .unwrap(),
    );
    assert!(stderr.contains("in-process support"), "{stderr}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dev.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["model"], "support",
        "answers carry the adapter's name"
    );
    assert_eq!(manifest["provenance"]["model_id"], "tiny-llama.gguf");
    assert_eq!(manifest["provenance"]["adapter_digest"], digest.as_str());
    let markdown = std::fs::read_to_string(dev.join("report.md")).unwrap();
    assert!(
        markdown.contains(&format!("LoRA adapter sha256 `{digest}`")),
        "{markdown}"
    );

    // Resuming without the adapter is another run.
    let other = fail(run(&dev, "boolq", "dev", 4, &[]).output().unwrap());
    assert!(other.contains("adapter_digest"), "{other}");

    // The calibration is the adapter's: the adapted model takes it, the base refuses it.
    let file = dir.join("calibration.json");
    succeed(calibrate(&dev, &file, &["--min-likelihood-ratio", "0"]));
    let calibration = Calibration::load(&file).unwrap();
    assert_eq!(
        calibration.provenance.adapter_digest.as_deref(),
        Some(digest.as_str())
    );
    let adapted = Options {
        adapter: Some(AdapterChoice {
            calibration: AdapterCalibration::File(file.clone()),
            ..AdapterChoice::new("support", &adapter)
        }),
        ..Options::default()
    };
    Ruling::load(&tiny_llama(), &adapted).expect("the calibration fits the adapted model");
    let refused = Ruling::load(
        &tiny_llama(),
        &Options {
            calibration: Some(file.clone()),
            ..Options::default()
        },
    )
    .expect_err("the base is not what it was fitted for");
    assert!(refused.to_string().contains("adapter_digest"), "{refused}");

    // And a run through the adapter applies it.
    let calibrated = dir.join("calibrated");
    succeed(
        run(
            &calibrated,
            "boolq",
            "dev",
            2,
            &[
                "--adapter",
                &adapter_arg,
                "--calibration",
                &file.display().to_string(),
            ],
        )
        .output()
        .unwrap(),
    );
    let without = fail(
        run(
            &dir.join("base-calibrated"),
            "boolq",
            "dev",
            2,
            &["--calibration", &file.display().to_string()],
        )
        .output()
        .unwrap(),
    );
    assert!(without.contains("adapter_digest"), "{without}");
}
