//! A writer's reply read as questions: what is valid is kept exactly as written, anything else
//! is dropped and counted by reason. Nothing is repaired: a question the teacher did not write
//! well is not one the encoder should learn from.

use std::collections::BTreeMap;
use std::fmt;

use indexmap::IndexMap;
use ruling_schema::{Capabilities, ErrorDetail, Question, State, capacity};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Why a reply, or one question in it, was dropped. The names are what the statistics and the
/// journal print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dropped {
    /// The reply holds no JSON object (or it ends before the object does).
    NotJson,
    /// The object has no `questions` object.
    NoQuestions,
    /// The same question id appears more than once: every copy is dropped.
    IdCollision,
    /// A choice with fewer than two options.
    OneOption,
    /// A choice with more options than the teacher reads.
    TooManyOptions,
    /// A score outside 2 to 10 levels.
    ScoreLevels,
    /// A question type the teacher cannot answer (box questions need an image).
    Unsupported,
    /// Any other reason the question is not a valid System One question.
    Invalid,
}

impl Dropped {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotJson => "not_json",
            Self::NoQuestions => "no_questions",
            Self::IdCollision => "id_collision",
            Self::OneOption => "one_option",
            Self::TooManyOptions => "too_many_options",
            Self::ScoreLevels => "score_levels",
            Self::Unsupported => "unsupported",
            Self::Invalid => "invalid",
        }
    }

    /// Whether the whole reply was unusable (as opposed to one question in it).
    pub fn is_reply_level(self) -> bool {
        matches!(self, Self::NotJson | Self::NoQuestions)
    }

    /// The reason a validation error gives, by the markers the schema's messages carry.
    fn from_error(error: &ErrorDetail) -> Self {
        let msg = &error.msg;
        if msg.contains(capacity::TOO_FEW_OPTIONS) {
            Self::OneOption
        } else if msg.contains(capacity::TOO_MANY_OPTIONS) {
            Self::TooManyOptions
        } else if msg.contains(capacity::SCORE_LEVELS) {
            Self::ScoreLevels
        } else if error.kind == "union_tag_invalid" || msg.contains("box") {
            Self::Unsupported
        } else {
            Self::Invalid
        }
    }
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The questions a reply yields and what it lost.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Parsed {
    pub questions: IndexMap<String, Question>,
    pub dropped: BTreeMap<Dropped, usize>,
}

impl Parsed {
    fn drop(&mut self, reason: Dropped) {
        *self.dropped.entry(reason).or_default() += 1;
    }
}

/// Reads the questions of `reply`, written about `state`, each checked exactly as a request
/// would be under `caps`.
pub fn parse_reply(reply: &str, state: &State, caps: &Capabilities) -> Parsed {
    let mut parsed = Parsed::default();
    let text = strip_thinking(reply);
    let Some(object) = outer_object(&text) else {
        parsed.drop(Dropped::NotJson);
        return parsed;
    };
    let payload: Payload = match serde_json::from_str(object) {
        Ok(payload) => payload,
        Err(e) if e.is_data() => {
            parsed.drop(Dropped::NoQuestions);
            return parsed;
        }
        Err(_) => {
            parsed.drop(Dropped::NotJson);
            return parsed;
        }
    };
    let Some(Entries(entries)) = payload.questions else {
        parsed.drop(Dropped::NoQuestions);
        return parsed;
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (id, _) in &entries {
        *seen.entry(id.as_str()).or_default() += 1;
    }
    for (id, spec) in &entries {
        if seen[id.as_str()] > 1 {
            parsed.drop(Dropped::IdCollision);
            continue;
        }
        match check_question(id, spec, state, caps) {
            Ok(question) => {
                parsed.questions.insert(id.clone(), question);
            }
            Err(reason) => parsed.drop(reason),
        }
    }
    if parsed.questions.is_empty() && entries.is_empty() {
        parsed.drop(Dropped::NoQuestions);
    }
    parsed
}

/// One question validated on its own, as the only question of a request about `state`.
fn check_question(
    id: &str,
    spec: &Value,
    state: &State,
    caps: &Capabilities,
) -> Result<Question, Dropped> {
    let body = json!({"model": "distill", "state": state, "questions": {id: spec}});
    if let Err(errors) = ruling_schema::validate(&body, caps) {
        let first = errors
            .details()
            .first()
            .map_or(Dropped::Invalid, Dropped::from_error);
        return Err(first);
    }
    let question: Question = serde_json::from_value(spec.clone()).map_err(|_| Dropped::Invalid)?;
    if matches!(question, Question::Box { .. }) {
        return Err(Dropped::Unsupported);
    }
    // A request may leave a noul's instructions out, but a written question without them
    // asks nothing the teacher's answer could teach.
    if spec.get("instructions").is_none() {
        return Err(Dropped::Invalid);
    }
    Ok(question)
}

/// The reply without reasoning blocks; an unclosed one takes the rest of the reply with it.
fn strip_thinking(reply: &str) -> String {
    let mut out = String::with_capacity(reply.len());
    let mut rest = reply;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// From the first `{` to the last `}`: the object, with any prose or code fence around it cut.
fn outer_object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    (end > start).then(|| &text[start..=end])
}

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    questions: Option<Entries>,
}

/// An object's entries in order, repeated keys included (a map would keep only the last).
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of questions keyed by id")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State::new(json!("My card was charged twice for one order.")).unwrap()
    }

    fn parse(reply: &str) -> Parsed {
        parse_reply(reply, &state(), &Capabilities::default())
    }

    fn reasons(parsed: &Parsed) -> Vec<(&'static str, usize)> {
        parsed
            .dropped
            .iter()
            .map(|(r, n)| (r.as_str(), *n))
            .collect()
    }

    #[test]
    fn every_valid_type_is_kept_in_order_around_prose_fences_and_thinking() {
        let reply = r#"<think>let me plan</think>Here you go:
```json
{"questions": {
  "is_billing": {"type": "noul", "instructions": "Is this about billing?"},
  "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "tech": "bugs"}},
  "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]}
}}
```"#;
        let parsed = parse(reply);
        assert_eq!(
            parsed.questions.keys().collect::<Vec<_>>(),
            ["is_billing", "team", "urgency"]
        );
        assert!(parsed.dropped.is_empty(), "{:?}", parsed.dropped);
    }

    #[test]
    fn a_reply_without_json_or_questions_is_dropped_whole() {
        assert_eq!(
            reasons(&parse("I cannot help with that.")),
            [("not_json", 1)]
        );
        assert_eq!(
            reasons(&parse("{\"questions\": {\"a\": ")),
            [("not_json", 1)]
        );
        assert_eq!(
            reasons(&parse("<think>{\"questions\": {}}")),
            [("not_json", 1)]
        );
        assert_eq!(reasons(&parse("{\"items\": []}")), [("no_questions", 1)]);
        assert_eq!(
            reasons(&parse("{\"questions\": [1, 2]}")),
            [("no_questions", 1)]
        );
        assert_eq!(
            reasons(&parse("{\"questions\": {}}")),
            [("no_questions", 1)]
        );
    }

    #[test]
    fn bad_questions_are_dropped_by_reason_and_the_rest_kept() {
        let reply = r#"{"questions": {
  "one": {"type": "choice", "instructions": "Pick", "criteria": {"only": "the one"}},
  "wide": {"type": "score", "instructions": "Rate", "criteria": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17","18","19","20"]},
  "dup": {"type": "noul", "instructions": "First?"},
  "fine": {"type": "noul", "instructions": "Is it a complaint?"},
  "dup": {"type": "noul", "instructions": "Second?"},
  "odd": {"type": "poll", "instructions": "?"},
  "empty": {"type": "noul"}
}}"#;
        let parsed = parse(reply);
        assert_eq!(parsed.questions.keys().collect::<Vec<_>>(), ["fine"]);
        assert_eq!(
            reasons(&parsed),
            [
                ("id_collision", 2),
                ("one_option", 1),
                ("score_levels", 1),
                ("unsupported", 1),
                ("invalid", 1)
            ]
        );
    }

    #[test]
    fn a_choice_wider_than_the_teacher_reads_is_dropped() {
        let caps = Capabilities {
            max_choice_options: 2,
            ..Capabilities::default()
        };
        let reply = r#"{"questions": {"q": {"type": "choice", "instructions": "Pick", "criteria": {"a": "", "b": "", "c": ""}}}}"#;
        let parsed = parse_reply(reply, &state(), &caps);
        assert_eq!(reasons(&parsed), [("too_many_options", 1)]);
    }
}
