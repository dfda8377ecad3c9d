//! Validate a System One request the way the server does, and show what an engine receives.
//!
//! ```sh
//! cargo run -p ruling-schema --example validate -- request.json [--vision]
//! cargo run -p ruling-schema --example validate -- - < request.json
//! ```
//!
//! A valid request prints the rendered state and each question with its options; an invalid
//! one prints the 422 body a client would get and exits with status 1.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Read;
use std::process::ExitCode;

use ruling_schema::{Capabilities, QuestionKind, ValidationErrorBody, parse_request};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let vision = args.iter().any(|a| a == "--vision");
    let Some(path) = args.iter().find(|a| !a.starts_with("--") || *a == "-") else {
        eprintln!("usage: validate <request.json | -> [--vision]");
        return ExitCode::from(2);
    };
    let body = if path == "-" {
        let mut buffer = Vec::new();
        std::io::stdin().read_to_end(&mut buffer).map(|_| buffer)
    } else {
        std::fs::read(path)
    };
    let body = match body {
        Ok(body) => body,
        Err(err) => {
            eprintln!("cannot read {path}: {err}");
            return ExitCode::from(2);
        }
    };
    let caps = if vision {
        Capabilities::vision()
    } else {
        Capabilities::default()
    };
    match parse_request(&body, &caps) {
        Ok(request) => {
            println!("valid request for model {:?}\n", request.model());
            println!(
                "state, as the model reads it:\n{}\n",
                indent(&request.state().render())
            );
            for question in request.questions() {
                let kind = question.kind();
                println!(
                    "{} ({}): {}",
                    question.id(),
                    kind.type_name(),
                    kind.instructions().render()
                );
                match kind {
                    QuestionKind::Choice { options, .. } => {
                        for option in options {
                            let description = option
                                .description
                                .as_ref()
                                .map(|d| d.render())
                                .unwrap_or_default();
                            println!("    option {:?} {}", option.key, description);
                        }
                    }
                    QuestionKind::Score { levels, .. } => {
                        for (index, level) in levels.iter().enumerate() {
                            println!("    level {index}: {}", level.render());
                        }
                    }
                    QuestionKind::Noul { .. } | QuestionKind::Box { .. } => {}
                }
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            let body: ValidationErrorBody = errors.into();
            println!("422 Unprocessable Entity");
            println!(
                "{}",
                serde_json::to_string_pretty(&body).unwrap_or_default()
            );
            ExitCode::from(1)
        }
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}
