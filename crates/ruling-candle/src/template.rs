//! A model's own chat template, compiled once and rendered as Hugging Face renders it.
//!
//! Hugging Face `transformers` renders chat templates with Jinja2 in a sandbox with
//! `trim_blocks=True, lstrip_blocks=True`, the `loopcontrols` extension, a `raise_exception`
//! function, a `strftime_now` function and a `tojson` filter that writes Python's
//! `json.dumps` (`", "`/`": "` separators, non-ASCII and `<>&'` left as they are). Templates
//! also call Python string and dict methods (`.strip()`, `.startswith()`, `.items()`), which
//! `minijinja_contrib::pycompat` provides. [`ChatTemplate`] sets up minijinja the same way, so
//! a template renders to the exact string the model was trained on.
//!
//! The context holds `messages` (maps with `role` and `content`), `add_generation_prompt`,
//! `bos_token`, `eos_token`, and `enable_thinking = false` (read by Qwen3 templates; the
//! answer is to be the next token, not a thought).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value as GgufValue};
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value, context};
use ruling_backend::ChatMessage;

/// The GGUF metadata key holding the chat template.
pub const GGUF_KEY: &str = "tokenizer.chat_template";

const TEMPLATE_NAME: &str = "chat_template";

/// Why a chat template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The model ships no chat template (a base model such as gemma-3-270m).
    #[error("the model has no chat template ({origin})")]
    Missing { origin: String },
    #[error("{origin} should hold {expected}, found {found}")]
    WrongType {
        origin: String,
        expected: &'static str,
        found: String,
    },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the chat template does not compile: {source:#}")]
    Compile {
        #[source]
        source: Error,
    },
    /// The template itself refused the conversation through `raise_exception(message)`.
    #[error("the chat template refused the conversation: {message}")]
    Raised { message: String },
    #[error("the chat template failed to render: {source:#}")]
    Render {
        #[source]
        source: Error,
    },
}

/// The message a template passed to `raise_exception`, carried as the render error's source.
#[derive(Debug)]
struct RaisedException(String);

impl std::fmt::Display for RaisedException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedException {}

/// A compiled chat template and the special-token strings it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the strings the template sees (empty
    /// when the model has none).
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        env.set_syntax(
            syntax
                .build()
                .map_err(|source| TemplateError::Compile { source })?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        let source = source.into();
        env.add_template_owned(TEMPLATE_NAME, source.clone())
            .map_err(|source| TemplateError::Compile { source })?;
        Ok(Self {
            env,
            source,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The template in a GGUF file's `tokenizer.chat_template`, with the BOS/EOS strings
    /// looked up from `tokenizer.ggml.{bos,eos}_token_id` in `tokenizer.ggml.tokens`. A file
    /// without one (a base model's) gets its architecture's official template where this
    /// crate has it ([`family_template`]).
    pub fn from_gguf(content: &Content) -> Result<Self, TemplateError> {
        let source = match content.metadata.get(GGUF_KEY) {
            None => {
                let architecture = match content.metadata.get("general.architecture") {
                    Some(GgufValue::String(a)) => a.as_str(),
                    _ => "",
                };
                match family_template(architecture) {
                    Some(template) => template.to_owned(),
                    None => {
                        return Err(TemplateError::Missing {
                            origin: format!(
                                "the GGUF metadata has no {GGUF_KEY:?}, and architecture \
                                 {architecture:?} has no official template here (gemma3 has)"
                            ),
                        });
                    }
                }
            }
            Some(GgufValue::String(s)) => s.clone(),
            Some(other) => {
                return Err(TemplateError::WrongType {
                    origin: format!("GGUF metadata {GGUF_KEY:?}"),
                    expected: "a string",
                    found: format!("{:?}", other.value_type()),
                });
            }
        };
        let token = |key: &str| -> String {
            let id = match content.metadata.get(key) {
                Some(GgufValue::U32(id)) => *id as usize,
                Some(GgufValue::I32(id)) if *id >= 0 => *id as usize,
                _ => return String::new(),
            };
            match content.metadata.get("tokenizer.ggml.tokens") {
                Some(GgufValue::Array(tokens)) => match tokens.get(id) {
                    Some(GgufValue::String(t)) => t.clone(),
                    _ => String::new(),
                },
                _ => String::new(),
            }
        };
        Self::new(
            source,
            token("tokenizer.ggml.bos_token_id"),
            token("tokenizer.ggml.eos_token_id"),
        )
    }

    /// The template of a Hugging Face `tokenizer_config.json`: its `chat_template` string, or
    /// from a list of named templates the one named `"default"`; failing both, a
    /// `chat_template.jinja` file beside it (where newer `transformers` saves it).
    pub fn from_tokenizer_config(path: impl AsRef<Path>) -> Result<Self, TemplateError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| TemplateError::Io {
            path: path.to_owned(),
            source,
        })?;
        let config: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|source| TemplateError::Json {
                path: path.to_owned(),
                source,
            })?;
        let origin = || format!("{}: \"chat_template\"", path.display());
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .ok_or_else(|| TemplateError::Missing {
                    origin: format!("{} has no template named \"default\"", origin()),
                })?
                .to_owned(),
            None | Some(serde_json::Value::Null) => {
                let jinja = path.with_file_name("chat_template.jinja");
                match std::fs::read_to_string(&jinja) {
                    Ok(s) => s,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(TemplateError::Missing {
                            origin: format!(
                                "{} has no \"chat_template\" and there is no {}",
                                path.display(),
                                jinja.display()
                            ),
                        });
                    }
                    Err(source) => {
                        return Err(TemplateError::Io {
                            path: jinja,
                            source,
                        });
                    }
                }
            }
            Some(other) => {
                return Err(TemplateError::WrongType {
                    origin: origin(),
                    expected: "a string or a list of named templates",
                    found: other.to_string(),
                });
            }
        };
        let special = |key: &str| -> String {
            match config.get(key) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Object(o)) => o
                    .get("content")
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                _ => String::new(),
            }
        };
        Self::new(source, special("bos_token"), special("eos_token"))
    }

    /// Whether the template takes a system turn (templates that do not raise on one).
    pub fn accepts_system_role(&self) -> bool {
        self.render(
            &[
                ChatMessage::new(ruling_backend::Role::System, "s"),
                ChatMessage::new(ruling_backend::Role::User, "u"),
            ],
            true,
        )
        .is_ok()
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends where the assistant's
    /// reply begins.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| context! { role => m.role.as_str(), content => m.content.as_str() })
            .collect();
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|source| TemplateError::Render { source })?;
        template
            .render(context! {
                messages,
                add_generation_prompt,
                bos_token => self.bos_token.as_str(),
                eos_token => self.eos_token.as_str(),
                enable_thinking => false,
            })
            .map_err(classify_render_error)
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

/// A render error caused by `raise_exception` becomes [`TemplateError::Raised`].
fn classify_render_error(err: Error) -> TemplateError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = cause {
        if let Some(raised) = e.downcast_ref::<RaisedException>() {
            return TemplateError::Raised {
                message: raised.0.clone(),
            };
        }
        cause = e.source();
    }
    TemplateError::Render { source: err }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedException(message)))
}

/// `strftime_now(format)` as `transformers` defines it, for UTC, supporting the directives
/// templates use (`%Y %y %m %d %e %B %b %A %a %H %M %S %j %%`); others are kept verbatim.
fn strftime_now(format: String) -> Result<Value, Error> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Value::from(strftime(&format, secs)))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Formats `secs` since the Unix epoch (UTC) with a subset of C `strftime`.
fn strftime(format: &str, secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_march = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_march + 2) / 153;
    let day = doy_march - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cumulative[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let month_name = MONTHS[(month - 1) as usize];

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let _ = match d {
            'Y' => write!(out, "{year}"),
            'y' => write!(out, "{:02}", year.rem_euclid(100)),
            'm' => write!(out, "{month:02}"),
            'd' => write!(out, "{day:02}"),
            'e' => write!(out, "{day:2}"),
            'B' => write!(out, "{month_name}"),
            'b' => write!(out, "{}", &month_name[..3]),
            'A' => write!(out, "{}", WEEKDAYS[weekday]),
            'a' => write!(out, "{}", &WEEKDAYS[weekday][..3]),
            'H' => write!(out, "{:02}", rem / 3600),
            'M' => write!(out, "{:02}", rem / 60 % 60),
            'S' => write!(out, "{:02}", rem % 60),
            'j' => write!(out, "{yday:03}"),
            '%' => write!(out, "%"),
            other => write!(out, "%{other}"),
        };
    }
    out
}

/// `tojson` as `transformers` defines it: `json.dumps(x, ensure_ascii=False, indent=indent,
/// sort_keys=sort_keys)`, so `", "`/`": "` separators and no HTML escaping.
fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(indent) => Some(indent),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    // Accepted for compatibility; output is always `ensure_ascii=False`.
    let _ = kwargs.get::<Option<bool>>("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, indent, sort_keys, 0)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(
    out: &mut String,
    value: &Value,
    indent: Option<usize>,
    sort_keys: bool,
    depth: usize,
) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = value.as_i64() {
                let _ = write!(out, "{i}");
            } else {
                let f = f64::try_from(value.clone())?;
                if f.is_finite() {
                    let _ = write!(out, "{f:?}");
                } else {
                    out.push_str(if f.is_nan() {
                        "NaN"
                    } else if f > 0.0 {
                        "Infinity"
                    } else {
                        "-Infinity"
                    });
                }
            }
        }
        ValueKind::String => out.push_str(&json_string(value.as_str().unwrap_or_default())),
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                let key_text = match key.as_str() {
                    Some(s) => s.to_owned(),
                    None => key.to_string(),
                };
                out.push_str(&json_string(&key_text));
                out.push_str(": ");
                write_json(out, &value.get_item(key)?, indent, sort_keys, depth + 1)?;
            }
            newline(out, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_json(out, item, indent, sort_keys, depth + 1)?;
            }
            newline(out, depth);
            out.push(']');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot serialize a {} to JSON", value.kind()),
            ));
        }
    }
    Ok(())
}

/// A JSON string literal as Python writes it with `ensure_ascii=False`.
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// The official chat template of an architecture, for GGUF files that carry none (base models,
/// whose instruction-tuned siblings ship it): Gemma 3's, as Google's `tokenizer_config.json`
/// writes it (`templates/gemma3.jinja`; a system turn becomes the first user turn's opening).
pub fn family_template(architecture: &str) -> Option<&'static str> {
    match architecture {
        "gemma3" | "gemma3_text" => Some(include_str!("templates/gemma3.jinja")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma3_s_official_template_opens_the_first_user_turn_with_the_system_turn() {
        let template =
            ChatTemplate::new(family_template("gemma3").unwrap(), "<bos>", "<eos>").unwrap();
        let message = |role, content: &str| ChatMessage {
            role,
            content: content.to_owned(),
        };
        let text = template
            .render(
                &[
                    message(ruling_backend::Role::System, "Answer with a letter."),
                    message(ruling_backend::Role::User, " Is it red? "),
                ],
                true,
            )
            .unwrap();
        assert_eq!(
            text,
            "<bos><start_of_turn>user\nAnswer with a letter.\n\nIs it red?<end_of_turn>\n\
             <start_of_turn>model\n"
        );
        assert!(family_template("llama").is_none());
    }

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S", t), "2024-02-29 13:05:09");
        assert_eq!(strftime("%d %b %Y", t), "29 Feb 2024");
        assert_eq!(strftime("%A %B %j %% %q", t), "Thursday February 060 % %q");
        assert_eq!(strftime("%d %B %Y", 0), "01 January 1970");
    }

    #[test]
    fn tojson_writes_like_python_json_dumps() {
        let env = {
            let mut env = Environment::new();
            env.add_filter("tojson", tojson);
            env
        };
        let value = Value::from(minijinja::value::Serde(serde_json::json!({
            "name": "f<x>&'é", "args": [1, 2.5, true, null], "empty": {}
        })));
        let render = |src: &str| {
            env.render_str(src, context! { v => value.clone() })
                .unwrap()
        };
        assert_eq!(
            render("{{ v | tojson }}"),
            r#"{"name": "f<x>&'é", "args": [1, 2.5, true, null], "empty": {}}"#
        );
        assert_eq!(
            render("{{ v.args | tojson(indent=2) }}"),
            "[\n  1,\n  2.5,\n  true,\n  null\n]"
        );
        assert_eq!(
            render("{{ v | tojson(sort_keys=true) }}"),
            r#"{"args": [1, 2.5, true, null], "empty": {}, "name": "f<x>&'é"}"#
        );
    }
}
