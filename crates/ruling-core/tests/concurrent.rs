//! One loaded model serves concurrent callers, and an answer does not depend on what else is
//! asked with it.
//!
//! - Four threads share one `Ruling` on the generated tiny Qwen2 fixture, each evaluating a
//!   request all threads ask and one of its own, several times; every response keeps its
//!   invariants and equals, bit for bit, the response the same request got alone on one
//!   thread before.
//! - On SmolLM2-135M, each question asked alone gets exactly the answer it gets when asked
//!   together with others about the same state.

use std::path::PathBuf;
use std::sync::OnceLock;

use ruling_core::{Options, Ruling};
use ruling_schema::{Answer, SystemOneRequest, SystemOneResponse};
use serde_json::{Value, json};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

fn request(body: Value) -> SystemOneRequest {
    serde_json::from_value(body).expect("a wire request")
}

fn evaluate(ruling: &Ruling, request: &SystemOneRequest) -> SystemOneResponse {
    let response = ruling.evaluate(request).expect("the request is answered");
    let valid = request
        .validate(&ruling.info().capabilities)
        .expect("valid");
    response
        .check_against(&valid)
        .expect("the response keeps its invariants and answers what was asked");
    response
}

/// Every probability of a response as raw bits, so equality means bit-identical.
fn bits(response: &SystemOneResponse) -> Vec<(String, Vec<u64>)> {
    response
        .answers
        .iter()
        .map(|(id, answer)| {
            (
                id.clone(),
                numbers(answer).iter().map(|v| v.to_bits()).collect(),
            )
        })
        .collect()
}

fn numbers(answer: &Answer) -> Vec<f64> {
    match answer {
        Answer::Noul { noul } => vec![*noul],
        Answer::Choice {
            confidence,
            probabilities,
            ..
        } => std::iter::once(*confidence)
            .chain(probabilities.values().copied())
            .collect(),
        Answer::Score {
            score,
            confidence,
            probabilities,
            ..
        } => [*score, *confidence]
            .into_iter()
            .chain(probabilities.values().copied())
            .collect(),
        Answer::Box { region, confidence } => vec![
            region.top,
            region.bottom,
            region.left,
            region.right,
            confidence.unwrap_or(f64::NAN),
        ],
    }
}

const THREADS: usize = 4;
const ROUNDS: usize = 3;

#[test]
fn one_model_serves_four_threads_with_identical_answers() {
    let path = workspace().join("fixtures/generated/tiny-qwen2.gguf");
    assert!(
        path.exists(),
        "{} is missing; run `cargo xtask fixtures`",
        path.display()
    );
    let ruling = Ruling::load(
        &path.display().to_string(),
        &Options {
            rotations: Some(2),
            ..Options::default()
        },
    )
    .expect("the tiny fixture loads");

    let shared = request(json!({
        "model": "tiny",
        "state": "Hi, my card was charged twice for the March invoice. Please refund one.",
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
            "team": {"type": "choice", "instructions": "Which team should handle it?",
                     "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["can wait", "this week", "today"]}
        }
    }));
    let own: Vec<SystemOneRequest> = (0..THREADS)
        .map(|i| {
            request(json!({
                "model": "tiny",
                "state": {"ticket": i, "text": format!("Thread {i} asks about item number {}.", i * 7)},
                "questions": {
                    "odd": {"type": "noul", "instructions": format!("Is {i} odd?")},
                    "size": {"type": "choice", "instructions": "How big is the number?",
                             "criteria": {"small": null, "medium": null, "large": null, "huge": null}}
                }
            }))
        })
        .collect();

    // The answers each request gets alone, on this thread, before any concurrency.
    let expected_shared = evaluate(&ruling, &shared);
    let expected_own: Vec<SystemOneResponse> = own.iter().map(|r| evaluate(&ruling, r)).collect();

    let ruling = &ruling;
    let results: Vec<Vec<(usize, SystemOneResponse)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let shared = &shared;
                let own = &own;
                scope.spawn(move || {
                    let mut out = Vec::new();
                    for round in 0..ROUNDS {
                        // Alternate the order so threads are in different phases.
                        let asks: [Option<usize>; 2] = if (thread + round) % 2 == 0 {
                            [None, Some(thread)]
                        } else {
                            [Some(thread), None]
                        };
                        for ask in asks {
                            let response = match ask {
                                None => evaluate(ruling, shared),
                                Some(i) => evaluate(ruling, &own[i]),
                            };
                            out.push((ask.map_or(usize::MAX, |i| i), response));
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no thread panicked"))
            .collect()
    });

    let mut checked = 0;
    for (thread, responses) in results.iter().enumerate() {
        assert_eq!(responses.len(), 2 * ROUNDS);
        for (which, response) in responses {
            let expected = if *which == usize::MAX {
                &expected_shared
            } else {
                assert_eq!(*which, thread);
                &expected_own[*which]
            };
            assert_eq!(bits(response), bits(expected), "thread {thread}");
            assert_eq!(response, expected, "thread {thread}");
            checked += 1;
        }
    }
    assert_eq!(checked, THREADS * ROUNDS * 2);
}

fn smollm2() -> &'static Ruling {
    static ENGINE: OnceLock<Ruling> = OnceLock::new();
    ENGINE.get_or_init(|| load_smollm2(ruling_core::DecoderBackend::Candle))
}

fn load_smollm2(backend: ruling_core::DecoderBackend) -> Ruling {
    let options = Options {
        backend,
        rotations: Some(2),
        prior: Some(true),
        cache_dir: Some(workspace().join("target/ruling-cache")),
        ..Options::default()
    };
    Ruling::load("smollm2-135m", &options).expect("smollm2-135m loads from target/ruling-cache")
}

#[test]
fn a_question_alone_and_with_others_gets_the_same_answer() {
    alone_together_and_reordered(smollm2(), "candle");
}

/// The same on llama.cpp, whose kernels are batch-invariant only as this workspace builds and
/// calls them (weights unrepacked, flash attention, calls under 64 rows; docs/llama.md): the
/// backend batches branches and a question still reads only itself.
#[cfg(feature = "llama-cpp")]
#[test]
fn a_question_alone_and_with_others_gets_the_same_answer_on_llama() {
    let ruling = load_smollm2(ruling_core::DecoderBackend::Llama);
    alone_together_and_reordered(&ruling, "llama");
}

fn alone_together_and_reordered(ruling: &Ruling, backend: &str) {
    let state = "Order #4471: the blender arrived with a cracked jug. The customer wants a \
                 replacement before Friday, when she hosts a party, and is otherwise happy.";
    let questions = json!({
        "complaint": {"type": "noul", "instructions": "Is the customer complaining about a product?"},
        "want": {"type": "choice", "instructions": "What does the customer want?",
                 "criteria": {"refund": "money back", "replacement": "a new item",
                              "repair": "fix the item", "nothing": null}},
        "urgency": {"type": "score", "instructions": "How urgent is it?",
                    "criteria": ["can wait", "this week", "today"]},
        "mood": {"type": "choice", "instructions": "How does the customer feel overall?",
                 "criteria": {"angry": null, "neutral": null, "happy": null}}
    });
    let together = evaluate(
        ruling,
        &request(json!({"model": "smollm2-135m", "state": state, "questions": questions})),
    );
    let mut largest: f64 = 0.0;
    for (id, question) in questions.as_object().expect("questions") {
        let alone = evaluate(
            ruling,
            &request(json!({"model": "smollm2-135m", "state": state, "questions": {id: question}})),
        );
        let (a, b) = (numbers(&alone.answers[id]), numbers(&together.answers[id]));
        for (x, y) in a.iter().zip(&b) {
            largest = largest.max((x - y).abs());
        }
        assert_eq!(
            alone.answers[id], together.answers[id],
            "question {id:?} alone vs with the others"
        );
    }
    // The same holds when the questions come in another order.
    let mut reordered = serde_json::Map::new();
    for (id, question) in questions.as_object().expect("questions").iter().rev() {
        reordered.insert(id.clone(), question.clone());
    }
    let backwards = evaluate(
        ruling,
        &request(json!({"model": "smollm2-135m", "state": state, "questions": reordered})),
    );
    for (id, answer) in &together.answers {
        assert_eq!(
            &backwards.answers[id], answer,
            "question {id:?} in reverse order"
        );
    }
    eprintln!(
        "smollm2-135m on {backend}: {} questions alone vs together vs reordered: largest difference {largest:e} (exact equality asserted)",
        together.answers.len()
    );
}

/// A question's stem encoded once over the state (the default) against whole branches: the
/// same computation split at another place, so the log-probabilities agree up to the kernels'
/// rounding, and fewer tokens go through the model.
fn stems_against_whole_branches(backend: ruling_core::DecoderBackend, tolerance: f64) {
    let load = |shared_stems: bool| {
        let options = Options {
            backend,
            rotations: Some(4),
            prior: Some(false),
            shared_stems,
            cache_dir: Some(workspace().join("target/ruling-cache")),
            ..Options::default()
        };
        Ruling::load("smollm2-135m", &options).expect("smollm2-135m loads")
    };
    let body = json!({
        "model": "smollm2-135m",
        "state": "Order #4471: the blender arrived with a cracked jug. The customer wants a replacement.",
        "questions": {
            "complaint": {"type": "noul", "instructions": "Is the customer complaining about a product?"},
            "want": {"type": "choice", "instructions": "What does the customer want?",
                     "criteria": {"refund": "money back", "replacement": "a new item", "repair": "fix the item", "nothing": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["can wait", "this week", "today"]}
        },
        "trace": true
    });
    let stems = evaluate(&load(true), &request(body.clone()));
    let whole = evaluate(&load(false), &request(body));
    assert!(
        stems.usage.input_tokens < whole.usage.input_tokens,
        "stems {} tokens, whole branches {}",
        stems.usage.input_tokens,
        whole.usage.input_tokens
    );
    let (a, b) = (
        stems.evaluation_trace.expect("traced"),
        whole.evaluation_trace.expect("traced"),
    );
    let mut largest: f64 = 0.0;
    for (id, question) in &a.questions {
        let other = &b.questions[id];
        assert_eq!(question.rotations.len(), other.rotations.len());
        for (x, y) in question.rotations.iter().zip(&other.rotations) {
            assert_eq!(x.order, y.order);
            for (p, q) in x.log_probabilities.iter().zip(&y.log_probabilities) {
                largest = largest.max((p - q).abs());
            }
        }
    }
    eprintln!(
        "smollm2-135m on {backend}: stems {} tokens vs whole branches {}; largest log-probability difference {largest:e}",
        stems.usage.input_tokens, whole.usage.input_tokens
    );
    assert!(
        largest <= tolerance,
        "largest difference {largest} over {tolerance}"
    );
}

#[test]
fn a_shared_stem_reads_what_whole_branches_read() {
    stems_against_whole_branches(ruling_core::DecoderBackend::Candle, 0.05);
}

#[cfg(feature = "llama-cpp")]
#[test]
fn a_shared_stem_reads_what_whole_branches_read_on_llama() {
    stems_against_whole_branches(ruling_core::DecoderBackend::Llama, 0.1);
}
