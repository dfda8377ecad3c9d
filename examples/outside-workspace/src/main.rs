//! Answer README.md's ticket request in-process, with ruling-core as a crates.io dependency.
//!
//! `outside-workspace [MODEL]` (default `smollm2-135m`, pulled on first use) prints each answer
//! and exits non-zero unless every question got a well-formed one.

use std::process::ExitCode;

use ruling_core::{Options, Ruling};
use ruling_schema::{Answer, SystemOneRequest};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("outside-workspace: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let model = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2-135m".to_owned());
    let ruling = Ruling::load(&model, &Options::default())?;
    let request: SystemOneRequest = serde_json::from_value(serde_json::json!({
        "model": model,
        "state": "Hi, my card was charged twice for the March invoice. Please refund one.",
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
            "team": {"type": "choice", "instructions": "Which team should handle it?",
                     "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["can wait", "this week", "today"]}
        }
    }))?;
    let response = ruling.evaluate(&request)?;
    for (id, answer) in &response.answers {
        match answer {
            Answer::Noul { noul } if (0.0..=1.0).contains(noul) => println!("{id}: {noul:.3}"),
            Answer::Choice {
                choice, confidence, ..
            } => println!("{id}: {choice} ({confidence:.3})"),
            Answer::Score {
                score, confidence, ..
            } => println!("{id}: {score:.3} ({confidence:.3})"),
            other => return Err(format!("{id}: unexpected answer {other:?}").into()),
        }
    }
    if response.answers.len() != 3 {
        return Err(format!("3 questions, {} answers", response.answers.len()).into());
    }
    println!("{} input tokens", response.usage.input_tokens);
    Ok(())
}
