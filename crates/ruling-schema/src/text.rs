//! Free-form text as the wire carries it, and how it becomes prompt text.
//!
//! Instructions, criteria, score levels and the state may each be a string or structured JSON.
//! Engines never see the JSON: they see [`render_text`]'s output, which must be byte-for-byte
//! stable because prefix caches and calibration are keyed on the exact prompt. Objects keep
//! the key order the client sent (`serde_json`'s `preserve_order`), and non-ASCII text stays
//! as written so a model reads "café", not "caf\u00e9".

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Renders a JSON value as prompt text: a string as is, null as nothing, anything else as
/// pretty JSON with a two-space indent and the keys in the order given.
pub fn render_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
        Value::Object(_) | Value::Array(_) => {
            // Serialising a `Value` into memory has no failure mode (its keys are strings);
            // the fallback only keeps this function total without an unwrap.
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        }
    }
}

/// A short name for a JSON value's kind, for error messages.
pub(crate) fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `value` with [`replace_all`] applied to every string in it (object keys left alone).
fn replace_in_strings(value: &Value, pairs: &[(&str, &str)]) -> Value {
    match value {
        Value::String(s) => Value::String(replace_all(s, pairs)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| replace_in_strings(v, pairs)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), replace_in_strings(v, pairs)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `text` with each `from` replaced by its `to`, scanning once from the start: at each place
/// the longest `from` that matches there is replaced, and the scan goes on after it.
pub fn replace_all(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let found = pairs
            .iter()
            .filter(|(from, _)| !from.is_empty() && rest.starts_with(from))
            .max_by_key(|(from, _)| from.len());
        match found {
            Some((from, to)) => {
                out.push_str(to);
                rest = &rest[from.len()..];
            }
            None => {
                let step = rest.chars().next().map_or(1, char::len_utf8);
                out.push_str(&rest[..step]);
                rest = &rest[step..];
            }
        }
    }
    out
}

/// The impls `Text` and `State` share: a JSON value of a few accepted kinds, rendered to
/// prompt text by [`render_text`], refused with a message naming the accepted kinds.
macro_rules! json_text {
    ($name:ident, $($accepted:pat_param)|+, $kinds:literal, [$($type:literal),+], $description:literal) => {
        impl $name {
            #[doc = concat!("Wraps `value` if it is ", $kinds, "; gives it back otherwise.")]
            pub fn new(value: Value) -> Result<Self, Value> {
                match value {
                    $($accepted)|+ => Ok(Self(value)),
                    other => Err(other),
                }
            }

            pub fn as_value(&self) -> &Value {
                &self.0
            }

            pub fn into_value(self) -> Value {
                self.0
            }

            /// The prompt text, as [`render_text`] renders it.
            pub fn render(&self) -> String {
                render_text(&self.0)
            }

            /// The same value with every occurrence of each `(from, to)` pair's `from` in its
            /// strings (not object keys) replaced by `to`, in one pass: where several match at
            /// one place the longest wins, and replaced text is never searched again.
            pub fn replacing(&self, pairs: &[(&str, &str)]) -> Self {
                Self(replace_in_strings(&self.0, pairs))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(Value::String(s.to_owned()))
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(Value::String(s))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = Value::deserialize(deserializer)?;
                $name::new(value).map_err(|v| {
                    serde::de::Error::custom(format!(
                        concat!("expected ", $kinds, ", got {}"),
                        kind_name(&v)
                    ))
                })
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({"description": $description, "type": [$($type),+]})
            }
        }
    };
}

/// Text a client wrote for a question: a string, an object, an array or null.
///
/// Numbers and booleans are refused at construction so that every `Text` renders to something
/// a client plausibly meant as prose or structure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Text(Value);

json_text!(
    Text,
    Value::String(_) | Value::Object(_) | Value::Array(_) | Value::Null,
    "a string, object, array or null",
    ["string", "object", "array", "null"],
    "Free text: a string, or JSON (object or array) rendered as pretty JSON; null renders as nothing."
);

impl Text {
    /// The null text, which renders as nothing.
    pub fn null() -> Self {
        Self(Value::Null)
    }

    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }
}

/// The content questions are asked about: a string, an object or an array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct State(Value);

json_text!(
    State,
    Value::String(_) | Value::Object(_) | Value::Array(_),
    "a string, object or array",
    ["string", "object", "array"],
    "The content the questions are about: a string, or JSON (object or array) rendered as pretty JSON."
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn strings_render_as_is_and_null_as_nothing() {
        assert_eq!(render_text(&json!("Is it raining?")), "Is it raining?");
        assert_eq!(render_text(&Value::Null), "");
    }

    #[test]
    fn objects_keep_key_order_two_space_indent_and_non_ascii() {
        let value: Value = serde_json::from_str(r#"{"zeta": "café", "alpha": [1, "日本"]}"#)
            .expect("literal JSON parses");
        assert_eq!(
            render_text(&value),
            "{\n  \"zeta\": \"café\",\n  \"alpha\": [\n    1,\n    \"日本\"\n  ]\n}"
        );
    }

    #[test]
    fn text_refuses_numbers_and_booleans() {
        assert!(Text::new(json!(3)).is_err());
        assert!(Text::new(json!(true)).is_err());
        assert!(State::new(Value::Null).is_err());
        assert!(serde_json::from_str::<Text>("1.5").is_err());
        assert_eq!(
            serde_json::from_str::<Text>("null").expect("null is text"),
            Text::null()
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("\\PC{0,6}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn rendering_is_deterministic_and_structured_text_reparses(value in arb_json()) {
            let first = render_text(&value);
            let second = render_text(&value.clone());
            prop_assert_eq!(&first, &second);
            if value.is_object() || value.is_array() {
                let back: Value = serde_json::from_str(&first).expect("pretty JSON parses");
                prop_assert_eq!(back, value);
            }
        }
    }

    #[test]
    fn replacing_is_one_pass_and_the_longest_match_wins() {
        let pairs = [
            ("<img>", "<image 1>"),
            ("<img>2", "<image 2>"),
            ("image", "X"),
        ];
        assert_eq!(
            replace_all("see <img> and <img>2, an image", &pairs),
            "see <image 1> and <image 2>, an X"
        );
        // Replaced text is not searched again, and other text (multibyte too) is kept.
        assert_eq!(replace_all("é<img>ü", &pairs[..1]), "é<image 1>ü");
        assert_eq!(replace_all("nothing here", &[]), "nothing here");
    }
}
