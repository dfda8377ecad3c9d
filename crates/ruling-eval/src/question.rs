//! The command-line form of a question, `ID=TYPE:TEXT[:OPTIONS]`, parsed into its wire JSON.
//!
//! - `billing=noul:Is this about billing?` (the text may contain `:`)
//! - `team=choice:Which team?:billing,tech,other` (option keys, in order)
//! - `urgency=score:How urgent?:low,medium,high` (levels, lowest first)
//!
//! Options come after the last `:` and are split at `,`, so an option may contain neither;
//! the question text may contain both.

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

/// What every question argument looks like, for error messages.
pub const FORMS: &str = "expected ID=noul:TEXT, ID=choice:TEXT:KEY,KEY[,...] or ID=score:TEXT:LEVEL,LEVEL[,...] (lowest level first)";

/// One question as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionArg {
    pub id: String,
    pub text: String,
    pub kind: QuestionArgKind,
}

/// The question's type, with its options where it has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuestionArgKind {
    Noul,
    /// Option keys, in the order the question shows them.
    Choice(Vec<String>),
    /// Levels, lowest first.
    Score(Vec<String>),
}

/// Why a question argument could not be read; the message says which form was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionParseError {
    given: String,
    problem: String,
}

impl fmt::Display for QuestionParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "question {:?}: {}; {FORMS}", self.given, self.problem)
    }
}

impl std::error::Error for QuestionParseError {}

impl QuestionArg {
    /// The question's JSON in the System One wire format.
    pub fn to_wire(&self) -> Value {
        match &self.kind {
            QuestionArgKind::Noul => json!({"type": "noul", "instructions": self.text}),
            QuestionArgKind::Choice(keys) => {
                let criteria: serde_json::Map<String, Value> =
                    keys.iter().map(|k| (k.clone(), Value::Null)).collect();
                json!({"type": "choice", "instructions": self.text, "criteria": criteria})
            }
            QuestionArgKind::Score(levels) => {
                json!({"type": "score", "instructions": self.text, "criteria": levels})
            }
        }
    }
}

impl FromStr for QuestionArg {
    type Err = QuestionParseError;

    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let fail = |problem: String| QuestionParseError {
            given: given.to_owned(),
            problem,
        };
        let (id, rest) = given
            .split_once('=')
            .ok_or_else(|| fail("no `=` after the question id".into()))?;
        let id = id.trim();
        if id.is_empty() {
            return Err(fail("the question id before `=` is empty".into()));
        }
        let (kind, rest) = rest
            .split_once(':')
            .ok_or_else(|| fail("no `:` after the question type".into()))?;
        let kind = kind.trim();
        let (text, options) = match kind {
            "noul" => (rest, None),
            "choice" | "score" => {
                let (text, options) = rest.rsplit_once(':').ok_or_else(|| {
                    fail(format!(
                        "a {kind} question needs `:` and its comma-separated {} after the text",
                        if kind == "choice" {
                            "option keys"
                        } else {
                            "levels"
                        }
                    ))
                })?;
                (text, Some(options))
            }
            "" => return Err(fail("the question type is empty".into())),
            "box" => {
                return Err(fail(
                    "box questions need an image, which `ask` does not send".into(),
                ));
            }
            other => {
                return Err(fail(format!(
                    "unknown question type {other:?} (noul, choice or score)"
                )));
            }
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(fail("the question text is empty".into()));
        }
        let kind = match options {
            None => QuestionArgKind::Noul,
            Some(options) => {
                let items = option_list(kind, options).map_err(fail)?;
                if kind == "choice" {
                    QuestionArgKind::Choice(items)
                } else {
                    QuestionArgKind::Score(items)
                }
            }
        };
        Ok(Self {
            id: id.to_owned(),
            text: text.to_owned(),
            kind,
        })
    }
}

/// A choice's option keys or a score's levels: comma-separated, each non-empty and
/// distinct, at least two.
fn option_list(kind: &str, options: &str) -> Result<Vec<String>, String> {
    let items: Vec<String> = options.split(',').map(|o| o.trim().to_owned()).collect();
    let what = if kind == "choice" {
        "option key"
    } else {
        "level"
    };
    if let Some(position) = items.iter().position(String::is_empty) {
        return Err(format!(
            "{what} {} is empty (option keys and levels may not contain ':' or ',')",
            position + 1
        ));
    }
    if items.len() < 2 {
        return Err(format!(
            "a {kind} question needs at least two {what}s, got {}",
            items.len()
        ));
    }
    if let Some((i, dup)) = items
        .iter()
        .enumerate()
        .find(|(i, item)| items[..*i].contains(item))
    {
        return Err(format!(
            "{what} {dup:?} appears twice (at {} and {})",
            items.iter().position(|x| x == dup).unwrap_or(0) + 1,
            i + 1
        ));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<QuestionArg, QuestionParseError> {
        s.parse()
    }

    fn error(s: &str) -> String {
        parse(s).unwrap_err().to_string()
    }

    #[test]
    fn noul_keeps_colons_in_its_text() {
        let q = parse("billing=noul:Is this about billing: invoices or refunds?").unwrap();
        assert_eq!(q.id, "billing");
        assert_eq!(q.text, "Is this about billing: invoices or refunds?");
        assert_eq!(q.kind, QuestionArgKind::Noul);
        assert_eq!(
            q.to_wire(),
            json!({"type": "noul", "instructions": "Is this about billing: invoices or refunds?"})
        );
    }

    #[test]
    fn choice_options_follow_the_last_colon_in_order() {
        let q = parse("team=choice:Which team: A or B?: billing, tech ,other").unwrap();
        assert_eq!(q.text, "Which team: A or B?");
        assert_eq!(
            q.kind,
            QuestionArgKind::Choice(vec!["billing".into(), "tech".into(), "other".into()])
        );
        let wire = q.to_wire();
        let keys: Vec<&String> = wire["criteria"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["billing", "tech", "other"]);
        assert_eq!(wire["criteria"]["tech"], Value::Null);
    }

    #[test]
    fn score_levels_are_lowest_first() {
        let q = parse("urgency=score:How urgent?:low,medium,high").unwrap();
        assert_eq!(
            q.to_wire(),
            json!({"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]})
        );
    }

    #[test]
    fn every_error_names_the_expected_forms() {
        for bad in [
            "noul:Is it?",
            "=noul:Is it?",
            "x=noul",
            "x=noul:  ",
            "x=maybe:Is it?",
            "x=box:Where?",
            "x=:Is it?",
            "x=choice:Which one?",
            "x=choice:Which?:a",
            "x=choice:Which?:a,,b",
            "x=choice:Which?:a,b,a",
            "x=score:How much?:",
        ] {
            let message = error(bad);
            assert!(message.contains(FORMS), "{bad}: {message}");
            assert!(message.contains(&format!("{bad:?}")), "{bad}: {message}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(error("noul:Is it?").contains("no `=`"));
        assert!(error("x=maybe:Is it?").contains("unknown question type \"maybe\""));
        assert!(error("x=choice:Which one?").contains("option keys after the text"));
        assert!(error("x=choice:Which?:a").contains("at least two option keys"));
        assert!(error("x=score:How?:a,,b").contains("level 2 is empty"));
        assert!(error("x=choice:Which?:a,,b").contains("may not contain ':' or ','"));
        assert!(error("x=choice:Which?:a,b,a").contains("\"a\" appears twice (at 1 and 3)"));
    }
}
