//! A JSON reader that notices what `serde_json::Value` hides.
//!
//! `serde_json` keeps the last of two identical keys without a word and reports an overflowing
//! number (`1e400`) only as a position. A client that sends either deserves an error naming the
//! path, so request bodies are read through this visitor, which builds the same `Value` while
//! recording the path of each repeated key and of the value being read when parsing fails.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::LocItem;

/// A parsed document and the paths (below the document root) of every repeated key.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub value: Value,
    pub duplicates: Vec<Vec<LocItem>>,
}

/// Why a document could not be read.
#[derive(Debug)]
pub(crate) enum ParseFailure {
    /// A number beyond the finite `f64` range, at this path.
    NonFinite {
        path: Vec<LocItem>,
        error: serde_json::Error,
    },
    /// Anything else: bad syntax, truncation, trailing characters, invalid UTF-8.
    Syntax(serde_json::Error),
}

#[derive(Default)]
struct Tracker {
    duplicates: Vec<Vec<LocItem>>,
    /// The path of the value the parser was last asked to read.
    current: Vec<LocItem>,
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, ParseFailure> {
    let tracker = RefCell::new(Tracker::default());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let result = Node {
        tracker: &tracker,
        path: Vec::new(),
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    let tracker = tracker.into_inner();
    match result {
        Ok(value) => Ok(Parsed {
            value,
            duplicates: tracker.duplicates,
        }),
        // serde_json has no error code accessor; its message for an overflowing number is
        // stable ("number out of range at line L column C").
        Err(error) if error.to_string().starts_with("number out of range") => {
            Err(ParseFailure::NonFinite {
                path: tracker.current,
                error,
            })
        }
        Err(error) => Err(ParseFailure::Syntax(error)),
    }
}

struct Node<'t> {
    tracker: &'t RefCell<Tracker>,
    path: Vec<LocItem>,
}

impl Node<'_> {
    fn child(&self, item: LocItem) -> Self {
        let mut path = self.path.clone();
        path.push(item);
        self.tracker.borrow_mut().current.clone_from(&path);
        Node {
            tracker: self.tracker,
            path,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let child = self.child(LocItem::Index(items.len()));
            match seq.next_element_seed(child)? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.child(LocItem::Key(key.clone()));
            let path = child.path.clone();
            let value = map.next_value_seed(child)?;
            if object.insert(key, value).is_some() {
                self.tracker.borrow_mut().duplicates.push(path);
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_value_as_serde_json() {
        let text = br#"{"b": [1, -2, 3.5, true, null, "x"], "a": {"c": {}}}"#;
        let parsed = parse(text).expect("valid JSON");
        let reference: Value = serde_json::from_slice(text).expect("valid JSON");
        assert_eq!(parsed.value, reference);
        assert!(parsed.duplicates.is_empty());
    }

    #[test]
    fn repeated_keys_are_recorded_with_their_path() {
        let parsed = parse(br#"{"q": {"a": 1, "a": 2}, "l": [{"k": 0, "k": 1}]}"#).expect("valid");
        assert_eq!(
            parsed.duplicates,
            vec![
                vec![LocItem::from("q"), LocItem::from("a")],
                vec![LocItem::from("l"), LocItem::Index(0), LocItem::from("k")],
            ]
        );
    }

    #[test]
    fn overflowing_number_reports_its_path() {
        match parse(br#"{"a": [0, {"b": 1e400}]}"#) {
            Err(ParseFailure::NonFinite { path, .. }) => assert_eq!(
                path,
                vec![LocItem::from("a"), LocItem::Index(1), LocItem::from("b")]
            ),
            other => panic!("expected a non-finite failure, got {other:?}"),
        }
    }

    #[test]
    fn trailing_characters_are_a_syntax_failure() {
        assert!(matches!(parse(b"{} x"), Err(ParseFailure::Syntax(_))));
    }
}
