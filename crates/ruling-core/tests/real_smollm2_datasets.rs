//! Debiasing on real data with SmolLM2-135M: accuracy and flip rate under option reversal on
//! 60 BoolQ development rows (noul) and 60 ChaosNLI-SNLI rows (3-way choice).
//!
//! SmolLM2-135M is near chance on both tasks (shared/MODELS.md), so these tests measure what
//! the engine's debiasing does to a weak model's position bias rather than how well it judges.
//! Every figure is printed (`cargo test -p ruling-core --test real_smollm2_datasets -- --nocapture`).
//!
//! What is measured, exactly:
//!
//! - *raw*: `rotations: 1, prior: false`: the options are shown once, in the given order, and
//!   the answer is the argmax of the code log-probabilities.
//! - *debiased*: `prior: true` (the content-free log-prior of each code position is subtracted
//!   from every shown order) and `rotations: 2` for the noul (yes-first and no-first averaged)
//!   or `rotations: 3` for the 3-way choice (all three cyclic shifts averaged).
//! - Each row is evaluated once, by the debiased engine with `"trace": true`. The trace
//!   (`evaluation_trace.questions[q].rotations`) holds, per shown order, the log-probabilities after
//!   prior subtraction and the prior itself; adding the prior back gives that order's raw
//!   log-probabilities, so the raw answer is the argmax of the first (unrotated) order with its
//!   prior restored. That this is exactly what a `rotations: 1, prior: false` engine answers is
//!   checked against such an engine on the first `CROSS_CHECK` (10) rows of each dataset (same
//!   argmax; P(yes) within 1e-4, measured 4.4e-6: one branch and two are not bit-identical). Deriving it keeps the file within a few minutes on
//!   two cores.
//! - *accuracy*: the share of rows whose answer (P(yes) > 0.5 for the noul; the chosen key for
//!   the choice, against ChaosNLI's `majority_label` of 100 votes) matches the label.
//! - *flip rate, choice*: each row asks the same choice twice in one request, criteria in the
//!   given order (entailment, neutral, contradiction) and reversed; a flip is a row whose two
//!   answers differ (raw: the two unrotated orders' raw argmaxes; debiased: the two answers the
//!   engine gives, each averaged over its own three cyclic shifts). An answer does not depend
//!   on the other questions asked with it (`tests/concurrent.rs`).
//! - *flip rate, noul*: a noul has no criteria order to reverse; its two orders are the ones
//!   the engine shows (yes as A then no as B, and no as A then yes as B). A raw flip is a row
//!   whose two orders' raw argmaxes differ; a debiased flip is the same after prior
//!   subtraction, per order. The averaged debiased answer itself cannot flip under reversal
//!   (both orders are in it), so the per-order figure is the honest one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use ruling_core::{Options, Ruling};
use ruling_schema::{Answer, RotationTrace, SystemOneRequest, SystemOneResponse};
use serde_json::{Value, json};

const ROWS: usize = 60;
/// Rows per dataset on which the derived raw answer is compared with a raw engine's.
const CROSS_CHECK: usize = 10;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

fn dataset(relative: &str) -> Vec<Value> {
    let path = workspace().join("../shared/datasets").join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn load(rotations: u32, prior: bool) -> Ruling {
    let options = Options {
        rotations: Some(rotations),
        prior: Some(prior),
        cache_dir: Some(workspace().join("target/ruling-cache")),
        ..Options::default()
    };
    Ruling::load("smollm2-135m", &options).expect("smollm2-135m loads from target/ruling-cache")
}

/// One engine per setting, loaded once for every test in this file.
fn raw() -> &'static Ruling {
    static ENGINE: OnceLock<Ruling> = OnceLock::new();
    ENGINE.get_or_init(|| load(1, false))
}

fn debiased_noul() -> &'static Ruling {
    static ENGINE: OnceLock<Ruling> = OnceLock::new();
    ENGINE.get_or_init(|| load(2, true))
}

fn debiased_choice() -> &'static Ruling {
    static ENGINE: OnceLock<Ruling> = OnceLock::new();
    ENGINE.get_or_init(|| load(3, true))
}

fn evaluate(ruling: &Ruling, body: &Value, trace: bool) -> SystemOneResponse {
    let mut body = body.clone();
    body["trace"] = json!(trace);
    let request: SystemOneRequest = serde_json::from_value(body).expect("a wire request");
    let response = ruling.evaluate(&request).expect("the request is answered");
    response.check().expect("the response keeps its invariants");
    response
}

fn rate(count: usize, of: usize) -> f64 {
    count as f64 / of as f64
}

/// One traced rotation's keys in shown order and its log-probabilities with `prior_sign`
/// times the prior added (0: as traced, after prior subtraction; 1: raw).
fn traced_scores(rotation: &RotationTrace, prior_sign: f64) -> (Vec<String>, Vec<f64>) {
    let prior = rotation
        .prior
        .as_ref()
        .unwrap_or_else(|| panic!("the debiased engine traces its prior: {rotation:?}"));
    let scores = rotation
        .log_probabilities
        .iter()
        .zip(prior)
        .map(|(l, p)| l + prior_sign * p)
        .collect();
    (rotation.order.clone(), scores)
}

fn traced_argmax(rotation: &RotationTrace, prior_sign: f64) -> String {
    let (order, scores) = traced_scores(rotation, prior_sign);
    let best = (0..scores.len())
        .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
        .expect("at least one option");
    order[best].clone()
}

/// The raw P(yes) of a traced rotation: the softmax of its prior-restored log-probabilities.
fn traced_raw_yes(rotation: &RotationTrace) -> f64 {
    let (order, raw) = traced_scores(rotation, 1.0);
    let norm: f64 = raw.iter().map(|v| v.exp()).sum();
    let yes = order.iter().position(|k| k == "yes").expect("a yes option");
    raw[yes].exp() / norm
}

#[derive(Debug)]
struct BoolqFigures {
    majority_rate: f64,
    raw_accuracy: f64,
    debiased_accuracy: f64,
    raw_flip_rate: f64,
    debiased_flip_rate: f64,
    /// Largest |raw engine P(yes) - derived raw P(yes)| over the cross-checked rows.
    cross_check: f64,
}

fn boolq() -> &'static BoolqFigures {
    static FIGURES: OnceLock<BoolqFigures> = OnceLock::new();
    FIGURES.get_or_init(|| {
        let started = Instant::now();
        let rows: Vec<Value> = dataset("boolq/val.jsonl")
            .into_iter()
            .filter(|r| r["idx"].as_u64().expect("idx") % 2 == 0)
            .take(ROWS)
            .collect();
        assert_eq!(rows.len(), ROWS);
        let (mut raw_right, mut debiased_right, mut raw_flips, mut debiased_flips) = (0, 0, 0, 0);
        let mut yes = 0;
        let (mut cross_check, mut checked): (f64, usize) = (0.0, 0);
        let (mut raw_said_yes, mut debiased_said_yes) = (0, 0);
        for row in &rows {
            let label = match row["label"].as_str() {
                Some("true") => true,
                Some("false") => false,
                other => panic!("BoolQ label {other:?}"),
            };
            yes += usize::from(label);
            let question = row["question"].as_str().expect("question");
            let body = json!({
                "model": "smollm2-135m",
                "state": row["passage"],
                "questions": {"q": {"type": "noul", "instructions": format!("{question}?")}},
            });
            let debiased = evaluate(debiased_noul(), &body, true);
            let trace = debiased.evaluation_trace.as_ref().expect("traced");
            let rotations = &trace.questions["q"].rotations;
            assert_eq!(rotations.len(), 2, "yes-first and no-first");
            assert_eq!(rotations[0].order, ["yes", "no"]);
            assert_eq!(rotations[1].order, ["no", "yes"]);
            let raw_yes = traced_raw_yes(&rotations[0]);
            if checked < CROSS_CHECK {
                let engine_yes = noul(&evaluate(raw(), &body, false));
                assert_eq!(engine_yes > 0.5, raw_yes > 0.5, "raw engine vs trace");
                cross_check = cross_check.max((engine_yes - raw_yes).abs());
                checked += 1;
            }
            raw_said_yes += usize::from(raw_yes > 0.5);
            debiased_said_yes += usize::from(noul(&debiased) > 0.5);
            raw_right += usize::from((raw_yes > 0.5) == label);
            debiased_right += usize::from((noul(&debiased) > 0.5) == label);
            raw_flips += usize::from(
                traced_argmax(&rotations[0], 1.0) != traced_argmax(&rotations[1], 1.0),
            );
            debiased_flips += usize::from(
                traced_argmax(&rotations[0], 0.0) != traced_argmax(&rotations[1], 0.0),
            );
        }
        let figures = BoolqFigures {
            majority_rate: rate(yes.max(ROWS - yes), ROWS),
            raw_accuracy: rate(raw_right, ROWS),
            debiased_accuracy: rate(debiased_right, ROWS),
            raw_flip_rate: rate(raw_flips, ROWS),
            debiased_flip_rate: rate(debiased_flips, ROWS),
            cross_check,
        };
        eprintln!(
            "BoolQ dev (first {ROWS} even-idx rows of val.jsonl, {yes} true): majority-class rate {:.3}; \
             accuracy raw {:.3} ({raw_right}/{ROWS}), debiased {:.3} ({debiased_right}/{ROWS}); \
             flip rate under yes/no order reversal raw {:.3} ({raw_flips}/{ROWS}), \
             debiased per order {:.3} ({debiased_flips}/{ROWS}); \
             answered yes raw {raw_said_yes}/{ROWS}, debiased {debiased_said_yes}/{ROWS}; \
             raw engine vs derived raw on {checked} rows: max |dP(yes)| {:.2e}; {:.1} s",
            figures.majority_rate,
            figures.raw_accuracy,
            figures.debiased_accuracy,
            figures.raw_flip_rate,
            figures.debiased_flip_rate,
            figures.cross_check,
            started.elapsed().as_secs_f64(),
        );
        figures
    })
}

fn noul(response: &SystemOneResponse) -> f64 {
    match &response.answers["q"] {
        Answer::Noul { noul } => *noul,
        other => panic!("a noul answered as {other:?}"),
    }
}

#[derive(Debug)]
struct SnliFigures {
    majority_rate: f64,
    raw_accuracy: f64,
    debiased_accuracy: f64,
    raw_flip_rate: f64,
    debiased_flip_rate: f64,
}

/// ChaosNLI's label code and the option key it stands for.
const NLI: [(&str, &str); 3] = [
    ("e", "entailment"),
    ("n", "neutral"),
    ("c", "contradiction"),
];

fn snli() -> &'static SnliFigures {
    static FIGURES: OnceLock<SnliFigures> = OnceLock::new();
    FIGURES.get_or_init(|| {
        let started = Instant::now();
        let rows: Vec<Value> = dataset("chaosnli/chaosNLI_snli.jsonl")
            .into_iter()
            .take(ROWS)
            .collect();
        let criteria = |reverse: bool| -> serde_json::Map<String, Value> {
            let mut options: Vec<_> = NLI.iter().collect();
            if reverse {
                options.reverse();
            }
            options
                .into_iter()
                .map(|(_, key)| ((*key).to_owned(), Value::Null))
                .collect()
        };
        let instructions = "Does the premise entail the hypothesis (entailment), \
                            contradict it (contradiction), or neither (neutral)?";
        let mut labels: BTreeMap<&str, usize> = BTreeMap::new();
        let mut right = [0usize; 2];
        let mut flips = [0usize; 2];
        let mut checked = 0;
        let mut chosen: [BTreeMap<String, usize>; 2] = Default::default();
        for row in &rows {
            let code = row["majority_label"].as_str().expect("majority_label");
            let label = NLI
                .iter()
                .find(|(c, _)| *c == code)
                .map(|(_, key)| *key)
                .unwrap_or_else(|| panic!("ChaosNLI label {code:?}"));
            *labels.entry(label).or_default() += 1;
            let body = json!({
                "model": "smollm2-135m",
                "state": format!(
                    "Premise: {}\nHypothesis: {}",
                    row["example"]["premise"].as_str().expect("premise"),
                    row["example"]["hypothesis"].as_str().expect("hypothesis"),
                ),
                "questions": {
                    "given": {"type": "choice", "instructions": instructions, "criteria": criteria(false)},
                    "reversed": {"type": "choice", "instructions": instructions, "criteria": criteria(true)},
                },
            });
            let response = evaluate(debiased_choice(), &body, true);
            let trace = response.evaluation_trace.as_ref().expect("traced");
            let given = &trace.questions["given"].rotations[0];
            let reversed = &trace.questions["reversed"].rotations[0];
            let raw_given = traced_argmax(given, 1.0);
            let raw_reversed = traced_argmax(reversed, 1.0);
            assert_eq!(given.order, ["entailment", "neutral", "contradiction"]);
            assert_eq!(reversed.order, ["contradiction", "neutral", "entailment"]);
            if checked < CROSS_CHECK {
                let engine = evaluate(raw(), &body, false);
                assert_eq!(choice(&engine, "given"), raw_given, "raw engine vs trace");
                assert_eq!(choice(&engine, "reversed"), raw_reversed, "raw engine vs trace");
                checked += 1;
            }
            let answers = [
                (raw_given.as_str(), raw_reversed.as_str()),
                (choice(&response, "given"), choice(&response, "reversed")),
            ];
            for (setting, (given, reversed)) in answers.into_iter().enumerate() {
                *chosen[setting].entry(given.to_owned()).or_default() += 1;
                right[setting] += usize::from(given == label);
                flips[setting] += usize::from(given != reversed);
            }
        }
        let figures = SnliFigures {
            majority_rate: rate(labels.values().copied().max().unwrap_or(0), ROWS),
            raw_accuracy: rate(right[0], ROWS),
            debiased_accuracy: rate(right[1], ROWS),
            raw_flip_rate: rate(flips[0], ROWS),
            debiased_flip_rate: rate(flips[1], ROWS),
        };
        eprintln!(
            "ChaosNLI-SNLI (first {ROWS} rows, majority_label counts {labels:?}): majority-class rate {:.3}; \
             accuracy raw {:.3} ({}/{ROWS}), debiased {:.3} ({}/{ROWS}); \
             flip rate under criteria reversal raw {:.3} ({}/{ROWS}), debiased {:.3} ({}/{ROWS}); \
             answers in the given order raw {:?}, debiased {:?}; \
             raw engine agreed with the derived raw answers on {checked} rows; {:.1} s",
            figures.majority_rate,
            figures.raw_accuracy,
            right[0],
            figures.debiased_accuracy,
            right[1],
            figures.raw_flip_rate,
            flips[0],
            figures.debiased_flip_rate,
            flips[1],
            chosen[0],
            chosen[1],
            started.elapsed().as_secs_f64(),
        );
        figures
    })
}

fn choice<'a>(response: &'a SystemOneResponse, id: &str) -> &'a str {
    match &response.answers[id] {
        Answer::Choice { choice, .. } => choice,
        other => panic!("a choice answered as {other:?}"),
    }
}

#[test]
fn boolq_raw_engine_matches_the_derived_raw_answer() {
    let figures = boolq();
    assert!(
        figures.cross_check < 1e-4,
        "raw engine vs derived raw answer: {figures:?}"
    );
}

/// Holds (raw 60/60 flips, debiased 7/60), but read it with the answers printed beside it:
/// the raw engine picks whatever is shown first, and the debiased engine answers
/// "contradiction" on every row in the given order, so its stability is a collapse onto one
/// key rather than judgement (accuracy 0.10, the share of contradiction labels).
#[test]
fn snli_debiasing_lowers_the_flip_rate() {
    let figures = snli();
    assert!(
        figures.debiased_flip_rate < figures.raw_flip_rate,
        "{figures:?}"
    );
}

/// The flip-rate acceptance, on both datasets together: BoolQ alone is degenerate
/// with this model (see `boolq_per_order_prior_over_corrects_smollm2`).
#[test]
fn debiasing_lowers_the_combined_flip_rate() {
    let (boolq, snli) = (boolq(), snli());
    let raw = (boolq.raw_flip_rate + snli.raw_flip_rate) / 2.0;
    let debiased = (boolq.debiased_flip_rate + snli.debiased_flip_rate) / 2.0;
    eprintln!("combined flip rate over 120 rows: raw {raw:.3}, debiased {debiased:.3}");
    assert!(debiased < raw, "{boolq:?} {snli:?}");
}

// Not asserted, measured (issue 4 stays open on it): SmolLM2-135M's yes/no answer is decided
// by the letter's position in both orders (BoolQ raw per-order flip rate 0.78), and the
// content-free prior, measured on an "N/A" state, is stronger than the bias on real passages,
// so after subtracting it each order prefers the other letter instead (per-order flip rate
// 1.0). The averaged debiased answer cannot flip, but it is hardly informative (yes on 58 of
// 60 rows). A better prior (per position, or measured on real states) should fix this; then
// assert that the debiased BoolQ flip rate is below raw.

/// The issue asks for BoolQ accuracy above the majority-class rate; SmolLM2-135M does not get
/// there (last measured: majority 0.650, raw 0.500, debiased 0.617: the debiased engine mostly
/// answers yes), so issue 4 stays open on it. What holds, and is asserted, is that debiasing
/// does not lower accuracy below the raw engine's.
#[test]
fn boolq_debiasing_does_not_lower_accuracy() {
    let figures = boolq();
    assert!(
        figures.debiased_accuracy >= figures.raw_accuracy,
        "{figures:?}"
    );
}
