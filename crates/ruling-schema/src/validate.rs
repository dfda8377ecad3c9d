//! Turning a request body into a [`ValidRequest`], reporting every problem at once.
//!
//! Validation walks the JSON value rather than relying on serde's typed deserialisation, which
//! stops at the first problem and cannot say where it was. Errors follow pydantic v2 (what
//! FastAPI servers return and existing clients parse):
//!
//! - `loc` starts with `"body"` and then follows the JSON path: object keys as strings, array
//!   indices as integers, e.g. `["body", "questions", "q1", "choice", "criteria", "yes"]`.
//! - Inside a tagged union member (a question, an asset) the tag comes right after the member's
//!   own key, as pydantic's discriminated unions put it: `["body", "questions", "q1", "score",
//!   "criteria", 3]`, `["body", "assets", "<img>", "image", "format"]`. Problems with the member
//!   as a whole (no `type`, unknown `type`, not an object, a box question for a text-only model)
//!   sit at the member's own key, without a tag.
//! - Problems found while reading the raw JSON (a repeated key, a number beyond the `f64` range)
//!   follow the document path only, with no tag, since they are found before any type is known.
//! - A body that is not JSON at all is reported at `["body"]` as `json_invalid`, with the line
//!   and column in `ctx`.
//! - `type` is pydantic's name where one fits (`missing`, `json_invalid`, `dict_type`,
//!   `string_type`, `list_type`, `bool_type`, `union_tag_invalid`, `union_tag_not_found`,
//!   `extra_forbidden`, `too_short`, `too_long`, `string_too_short`, `literal_error`,
//!   `finite_number`); everything else is `value_error`.
//! - Capacity refusals carry the phrases of [`crate::capacity`] in `msg`, which clients search for.
//!
//! Unknown fields at the top level of the body are ignored (clients written for other System
//! One servers may send more), but inside questions, noul criteria and assets they are refused,
//! since a misspelt `critera` would otherwise silently change the question.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::capacity;
use crate::error::{ErrorDetail, LocItem, ValidationErrors};
use crate::json::{self, ParseFailure};
use crate::text::{State, Text, kind_name, render_text};
use crate::valid::{
    AssetData, ChoiceOption, QuestionKind, ValidAsset, ValidQuestion, ValidRequest,
};
use crate::wire::{ImageFormat, SystemOneRequest};

/// Fewest options a choice may have; System One v1 fixes it.
pub const MIN_CHOICE_OPTIONS: usize = 2;
/// Most options a choice may have under System One v1.
pub const MAX_CHOICE_OPTIONS: usize = 255;

/// Images one request may carry unless the server says otherwise: each becomes up to a
/// thousand tokens of prefix, so a handful already makes a long prompt.
pub const DEFAULT_MAX_IMAGES: usize = 8;
/// Fewest levels a score may have.
pub const MIN_SCORE_LEVELS: usize = 2;
/// Most levels a score may have.
pub const MAX_SCORE_LEVELS: usize = 10;

/// The question types System One v1 defines, in the order error messages list them.
pub const QUESTION_TYPES: [&str; 4] = ["noul", "choice", "score", "box"];

/// What the serving model can take, which bounds what a valid request may ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether the model reads images (assets and `box` questions).
    pub vision: bool,
    /// Most images one request may carry on a vision model.
    pub max_images: usize,
    /// Most options one choice may have, at most [`MAX_CHOICE_OPTIONS`] in practice.
    pub max_choice_options: usize,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            vision: false,
            max_images: DEFAULT_MAX_IMAGES,
            max_choice_options: MAX_CHOICE_OPTIONS,
        }
    }
}

impl Capabilities {
    /// A model that reads images, with the default option limit.
    pub fn vision() -> Self {
        Self {
            vision: true,
            ..Self::default()
        }
    }
}

/// Parses and validates a raw request body.
///
/// Unlike [`validate()`], this also reports keys that appear twice in one object and numbers
/// beyond the `f64` range, which a parsed `serde_json::Value` can no longer show.
pub fn parse_request(body: &[u8], caps: &Capabilities) -> Result<ValidRequest, ValidationErrors> {
    let parsed = match json::parse(body) {
        Ok(parsed) => parsed,
        Err(ParseFailure::NonFinite { path, error }) => {
            let detail = ErrorDetail::new(
                body_loc(path),
                "finite_number",
                format!(
                    "Input should be a finite number: this number is beyond the 64-bit float range \
                     (line {}, column {})",
                    error.line(),
                    error.column()
                ),
            )
            .with_ctx(json!({"line": error.line(), "column": error.column()}));
            return Err(ValidationErrors::new(vec![detail]));
        }
        Err(ParseFailure::Syntax(error)) => {
            let detail = ErrorDetail::new(
                vec![LocItem::from("body")],
                "json_invalid",
                format!("JSON decode error: {error}"),
            )
            .with_ctx(json!({
                "error": error.to_string(),
                "line": error.line(),
                "column": error.column(),
            }));
            return Err(ValidationErrors::new(vec![detail]));
        }
    };
    let mut v = Validator::new(caps);
    for path in parsed.duplicates {
        let key = match path.last() {
            Some(LocItem::Key(key)) => key.clone(),
            _ => String::new(),
        };
        v.errors.push(
            ErrorDetail::new(
                body_loc(path),
                "value_error",
                format!(
                    "Value error, duplicate key {key:?}: a JSON object must not repeat a key \
                     (question ids, option keys and fields are each unique)"
                ),
            )
            .with_ctx(json!({"key": key})),
        );
    }
    v.request(&parsed.value)
}

/// Validates an already parsed request body.
pub fn validate(value: &Value, caps: &Capabilities) -> Result<ValidRequest, ValidationErrors> {
    Validator::new(caps).request(value)
}

impl SystemOneRequest {
    /// Validates this wire request against `caps`.
    pub fn validate(&self, caps: &Capabilities) -> Result<ValidRequest, ValidationErrors> {
        match serde_json::to_value(self) {
            Ok(value) => validate(&value, caps),
            // Only non-string map keys make serialisation fail, and every map here is keyed
            // by `String`; still, a typed error beats a panic in a library.
            Err(error) => Err(ValidationErrors::new(vec![ErrorDetail::new(
                vec![LocItem::from("body")],
                "value_error",
                format!("Value error, request does not serialise: {error}"),
            )])),
        }
    }
}

fn body_loc(path: Vec<LocItem>) -> Vec<LocItem> {
    let mut loc = Vec::with_capacity(path.len() + 1);
    loc.push(LocItem::from("body"));
    loc.extend(path);
    loc
}

fn at(loc: &[LocItem], item: impl Into<LocItem>) -> Vec<LocItem> {
    let mut out = loc.to_vec();
    out.push(item.into());
    out
}

/// A short, bounded rendering of a value for messages; the full value goes in `input`.
fn preview(value: &Value) -> String {
    const LIMIT: usize = 60;
    let s = value.to_string();
    match s.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s,
    }
}

/// The request's assets: those that passed, and how many were sent.
struct Assets {
    valid: Vec<ValidAsset>,
    sent: usize,
}

struct Validator<'c> {
    caps: &'c Capabilities,
    errors: Vec<ErrorDetail>,
}

impl<'c> Validator<'c> {
    fn new(caps: &'c Capabilities) -> Self {
        Self {
            caps,
            errors: Vec::new(),
        }
    }

    fn push(&mut self, detail: ErrorDetail) {
        self.errors.push(detail);
    }

    fn missing(&mut self, loc: Vec<LocItem>, what: &str) {
        self.push(ErrorDetail::new(
            loc,
            "missing",
            format!("Field required: {what}"),
        ));
    }

    fn wrong_type(
        &mut self,
        loc: Vec<LocItem>,
        kind: &str,
        expected: &str,
        field: &str,
        got: &Value,
    ) {
        self.push(
            ErrorDetail::new(
                loc,
                kind,
                format!(
                    "Input should be {expected}: `{field}` got {} {}",
                    kind_name(got),
                    preview(got)
                ),
            )
            .with_input(got.clone()),
        );
    }

    /// Refuses every key of `object` not in `allowed`.
    fn forbid_extra(
        &mut self,
        object: &Map<String, Value>,
        allowed: &[&str],
        loc: &[LocItem],
        whose: &str,
    ) {
        for (key, value) in object {
            if !allowed.contains(&key.as_str()) {
                self.push(
                    ErrorDetail::new(
                        at(loc, key),
                        "extra_forbidden",
                        format!(
                            "Extra inputs are not permitted: {whose} takes only {}; got {key:?}",
                            allowed
                                .iter()
                                .map(|k| format!("{k:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                    .with_input(value.clone()),
                );
            }
        }
    }

    fn request(mut self, value: &Value) -> Result<ValidRequest, ValidationErrors> {
        let body = vec![LocItem::from("body")];
        let Some(object) = value.as_object() else {
            self.wrong_type(body, "dict_type", "a valid dictionary", "body", value);
            return Err(ValidationErrors::new(self.errors));
        };
        let model = self.model(object.get("model"), &body);
        let state = self.state(object.get("state"), &body);
        let (questions, raw_questions) = self.questions(object.get("questions"), &body);
        let assets = self.assets(object, &raw_questions, &body);
        let model_name = model.as_deref().unwrap_or("this model");
        self.capabilities(model_name, assets.sent, &questions, &body);
        let trace = self.trace(object.get("trace"), &body);
        match (model, state) {
            (Some(model), Some(state)) if self.errors.is_empty() => Ok(ValidRequest {
                model,
                state,
                questions,
                assets: assets.valid,
                trace,
            }),
            _ => Err(ValidationErrors::new(self.errors)),
        }
    }

    /// `model`: a non-empty string.
    fn model(&mut self, value: Option<&Value>, body: &[LocItem]) -> Option<String> {
        match value {
            None => {
                self.missing(
                    at(body, "model"),
                    "the request needs `model`, the model to ask",
                );
                None
            }
            Some(Value::String(s)) if s.is_empty() => {
                self.push(
                    ErrorDetail::new(
                        at(body, "model"),
                        "string_too_short",
                        "String should have at least 1 character: `model` is empty",
                    )
                    .with_input(json!(""))
                    .with_ctx(json!({"min_length": 1})),
                );
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.wrong_type(
                    at(body, "model"),
                    "string_type",
                    "a valid string",
                    "model",
                    other,
                );
                None
            }
        }
    }

    /// `state`: a string, a dictionary or a list.
    fn state(&mut self, value: Option<&Value>, body: &[LocItem]) -> Option<State> {
        let Some(value) = value else {
            self.missing(
                at(body, "state"),
                "the request needs `state`, the content to ask about",
            );
            return None;
        };
        match State::new(value.clone()) {
            Ok(state) => Some(state),
            Err(other) => {
                self.wrong_type(
                    at(body, "state"),
                    "string_type",
                    "a valid string, dictionary or list",
                    "state",
                    &other,
                );
                None
            }
        }
    }

    /// `questions`: a non-empty map from id to question. Returns the valid questions and every
    /// question as sent (the asset check reads their strings).
    fn questions<'v>(
        &mut self,
        value: Option<&'v Value>,
        body: &[LocItem],
    ) -> (Vec<ValidQuestion>, Vec<&'v Value>) {
        let loc = at(body, "questions");
        let (mut questions, mut raw) = (Vec::new(), Vec::new());
        match value {
            None => self.missing(
                loc,
                "the request needs `questions`, a map from id to question",
            ),
            Some(Value::Object(map)) => {
                if map.is_empty() {
                    self.push(
                        ErrorDetail::new(
                            loc.clone(),
                            "too_short",
                            "Dictionary should have at least 1 item: `questions` is empty; ask at least one question",
                        )
                        .with_input(json!({}))
                        .with_ctx(json!({"field_type": "Dictionary", "min_length": 1, "actual_length": 0})),
                    );
                }
                for (id, q) in map {
                    raw.push(q);
                    if let Some(question) = self.question(&loc, id, q) {
                        questions.push(question);
                    }
                }
            }
            Some(other) => {
                self.wrong_type(loc, "dict_type", "a valid dictionary", "questions", other)
            }
        }
        (questions, raw)
    }

    /// `assets`: absent, null, or a map from placeholder to image, each placeholder written in
    /// some string of the state or of a question.
    fn assets(
        &mut self,
        object: &Map<String, Value>,
        raw_questions: &[&Value],
        body: &[LocItem],
    ) -> Assets {
        let loc = at(body, "assets");
        let mut assets = Assets {
            valid: Vec::new(),
            sent: 0,
        };
        match object.get("assets") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                assets.sent = map.len();
                for (placeholder, a) in map {
                    if let Some(asset) = self.asset(&loc, placeholder, a) {
                        assets.valid.push(asset);
                    }
                    if !placeholder.is_empty()
                        && !mentions(object.get("state"), placeholder)
                        && !raw_questions
                            .iter()
                            .any(|q| question_mentions(q, placeholder))
                    {
                        self.push(
                            ErrorDetail::new(
                                at(&loc, placeholder),
                                "value_error",
                                format!(
                                    "Value error, asset placeholder {placeholder:?} appears in no \
                                     string of the state, instructions or criteria, so no question \
                                     can refer to this image"
                                ),
                            )
                            .with_ctx(json!({"placeholder": placeholder})),
                        );
                    }
                }
            }
            Some(other) => self.wrong_type(loc, "dict_type", "a valid dictionary", "assets", other),
        }
        assets
    }

    /// What the model can read: images only on a vision model, and at most its number of them;
    /// box questions only on a vision model.
    fn capabilities(
        &mut self,
        model_name: &str,
        images: usize,
        questions: &[ValidQuestion],
        body: &[LocItem],
    ) {
        let assets_loc = at(body, "assets");
        if self.caps.vision {
            if images > self.caps.max_images {
                self.push(
                    ErrorDetail::new(
                        assets_loc,
                        "value_error",
                        format!(
                            "Value error, {images} images sent, over the {} one request may \
                             carry on model {model_name:?}",
                            self.caps.max_images
                        ),
                    )
                    .with_ctx(json!({"max_images": self.caps.max_images, "assets": images})),
                );
            }
            return;
        }
        if images > 0 {
            self.push(
                ErrorDetail::new(
                    assets_loc,
                    "value_error",
                    format!(
                        "Value error, model {model_name:?} reads text only; got \
                         {images} image asset(s). Send images to a vision model."
                    ),
                )
                .with_ctx(json!({"vision": false, "assets": images})),
            );
        }
        let questions_loc = at(body, "questions");
        for q in questions {
            if matches!(q.kind, QuestionKind::Box { .. }) {
                self.push(
                    ErrorDetail::new(
                        at(&questions_loc, &q.id),
                        "value_error",
                        format!(
                            "Value error, question {:?} is a box question, and box questions \
                             need a vision model; model {model_name:?} reads text only",
                            q.id
                        ),
                    )
                    .with_ctx(json!({"vision": false, "type": "box"})),
                );
            }
        }
    }

    /// `trace`: absent, null or a boolean.
    fn trace(&mut self, value: Option<&Value>, body: &[LocItem]) -> bool {
        match value {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.wrong_type(
                    at(body, "trace"),
                    "bool_type",
                    "a valid boolean",
                    "trace",
                    other,
                );
                false
            }
        }
    }

    fn question(
        &mut self,
        questions_loc: &[LocItem],
        id: &str,
        value: &Value,
    ) -> Option<ValidQuestion> {
        let qloc = at(questions_loc, id);
        let mut ok = true;
        if id.is_empty() {
            self.push(
                ErrorDetail::new(
                    qloc.clone(),
                    "string_too_short",
                    "String should have at least 1 character: a question id is empty",
                )
                .with_ctx(json!({"min_length": 1})),
            );
            ok = false;
        }
        let Some(object) = value.as_object() else {
            self.wrong_type(
                qloc,
                "dict_type",
                "a valid dictionary",
                &format!("questions.{id}"),
                value,
            );
            return None;
        };
        let tag = self.question_tag(&qloc, id, value)?;
        let tloc = at(&qloc, tag);
        let allowed: &[&str] = if tag == "box" {
            &["type", "instructions"]
        } else {
            &["type", "instructions", "criteria"]
        };
        let before = self.errors.len();
        self.forbid_extra(object, allowed, &tloc, &format!("a {tag} question"));

        let instructions = match object.get("instructions") {
            // The specification lets a noul leave its instructions out: the question is then
            // whatever its criteria (or the state) make of yes and no, as with null.
            None if tag == "noul" => Some(Text::null()),
            None => {
                self.missing(
                    at(&tloc, "instructions"),
                    &format!(
                        "a {tag} question needs `instructions` (null is allowed, absence is not; \
                         only a noul may leave them out)"
                    ),
                );
                None
            }
            Some(v) => self.text(v, at(&tloc, "instructions"), "instructions"),
        };

        let kind = self.question_kind(
            tag,
            instructions,
            object.get("criteria"),
            &at(&tloc, "criteria"),
        );
        let kind = kind.filter(|_| ok && self.errors.len() == before)?;
        Some(ValidQuestion {
            id: id.to_owned(),
            kind,
        })
    }

    /// The question's `type`, when it is one of the question types; otherwise the error that
    /// names the allowed ones.
    fn question_tag<'v>(
        &mut self,
        qloc: &[LocItem],
        id: &str,
        value: &'v Value,
    ) -> Option<&'v str> {
        let expected_tags = QUESTION_TYPES.map(|t| format!("'{t}'")).join(", ");
        match value.get("type") {
            None => {
                self.push(
                    ErrorDetail::new(
                        qloc.to_vec(),
                        "union_tag_not_found",
                        format!(
                            "Unable to extract tag using discriminator 'type': question {id:?} \
                             needs a \"type\", one of {expected_tags}"
                        ),
                    )
                    .with_input(value.clone())
                    .with_ctx(json!({"discriminator": "'type'"})),
                );
                None
            }
            Some(Value::String(t)) if QUESTION_TYPES.contains(&t.as_str()) => Some(t.as_str()),
            Some(other) => {
                let tag = other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned);
                self.push(
                    ErrorDetail::new(
                        qloc.to_vec(),
                        "union_tag_invalid",
                        format!(
                            "Input tag '{tag}' found using 'type' does not match any of the \
                             expected tags: {expected_tags}"
                        ),
                    )
                    .with_input(value.clone())
                    .with_ctx(json!({
                        "discriminator": "'type'",
                        "tag": tag,
                        "expected_tags": expected_tags,
                    })),
                );
                None
            }
        }
    }

    /// The question of type `tag`, its criteria checked; `None` when they or its instructions
    /// were wrong (the errors are already pushed).
    fn question_kind(
        &mut self,
        tag: &str,
        instructions: Option<Text>,
        criteria: Option<&Value>,
        criteria_loc: &[LocItem],
    ) -> Option<QuestionKind> {
        match tag {
            "noul" => {
                let (if_true, if_false) = self.noul_criteria(criteria, criteria_loc);
                instructions.map(|instructions| QuestionKind::Noul {
                    instructions,
                    if_true,
                    if_false,
                })
            }
            "choice" => {
                let options = self.choice_criteria(criteria, criteria_loc);
                instructions
                    .zip(options)
                    .map(|(instructions, options)| QuestionKind::Choice {
                        instructions,
                        options,
                    })
            }
            "score" => {
                let levels = self.score_criteria(criteria, criteria_loc);
                instructions
                    .zip(levels)
                    .map(|(instructions, levels)| QuestionKind::Score {
                        instructions,
                        levels,
                    })
            }
            _ => instructions.map(|instructions| QuestionKind::Box { instructions }),
        }
    }

    fn text(&mut self, value: &Value, loc: Vec<LocItem>, field: &str) -> Option<Text> {
        match Text::new(value.clone()) {
            Ok(text) => Some(text),
            Err(other) => {
                self.wrong_type(
                    loc,
                    "string_type",
                    "a valid string, dictionary, list or null",
                    field,
                    &other,
                );
                None
            }
        }
    }

    fn noul_criteria(
        &mut self,
        criteria: Option<&Value>,
        loc: &[LocItem],
    ) -> (Option<Text>, Option<Text>) {
        match criteria {
            None | Some(Value::Null) => (None, None),
            Some(Value::Object(map)) => {
                self.forbid_extra(map, &["true", "false"], loc, "noul criteria");
                let mut side = |key: &str| match map.get(key) {
                    None | Some(Value::Null) => None,
                    Some(v) => self.text(v, at(loc, key), &format!("criteria.{key}")),
                };
                let if_true = side("true");
                let if_false = side("false");
                (if_true, if_false)
            }
            Some(other) => {
                self.wrong_type(
                    loc.to_vec(),
                    "dict_type",
                    "a valid dictionary",
                    "criteria",
                    other,
                );
                (None, None)
            }
        }
    }

    fn choice_criteria(
        &mut self,
        criteria: Option<&Value>,
        loc: &[LocItem],
    ) -> Option<Vec<ChoiceOption>> {
        let map = match criteria {
            None => {
                self.missing(
                    loc.to_vec(),
                    "a choice question needs `criteria`, a map from option key to description",
                );
                return None;
            }
            Some(Value::Object(map)) => map,
            Some(other) => {
                self.wrong_type(
                    loc.to_vec(),
                    "dict_type",
                    "a valid dictionary",
                    "criteria",
                    other,
                );
                return None;
            }
        };
        let before = self.errors.len();
        let n = map.len();
        let max = self.caps.max_choice_options;
        if n < MIN_CHOICE_OPTIONS {
            self.push(
                ErrorDetail::new(
                    loc.to_vec(),
                    "too_short",
                    format!("{}; got {n}", capacity::TOO_FEW_OPTIONS),
                )
                .with_ctx(json!({"field_type": "Dictionary", "min_length": MIN_CHOICE_OPTIONS, "actual_length": n})),
            );
        } else if n > max {
            self.push(
                ErrorDetail::new(
                    loc.to_vec(),
                    "too_long",
                    format!(
                        "at most {max} {} are allowed; got {n}",
                        capacity::TOO_MANY_OPTIONS
                    ),
                )
                .with_ctx(
                    json!({"field_type": "Dictionary", "max_length": max, "actual_length": n}),
                ),
            );
        }
        let mut options = Vec::with_capacity(n);
        for (key, description) in map {
            if key.is_empty() {
                self.push(
                    ErrorDetail::new(
                        at(loc, key),
                        "string_too_short",
                        "String should have at least 1 character: an option key is empty",
                    )
                    .with_ctx(json!({"min_length": 1})),
                );
            }
            let description = match description {
                Value::Null => None,
                v => self.text(v, at(loc, key), &format!("criteria.{key}")),
            };
            options.push(ChoiceOption {
                key: key.clone(),
                description,
            });
        }
        (self.errors.len() == before).then_some(options)
    }

    fn score_criteria(&mut self, criteria: Option<&Value>, loc: &[LocItem]) -> Option<Vec<Text>> {
        let list = match criteria {
            None => {
                self.missing(
                    loc.to_vec(),
                    "a score question needs `criteria`, a list of levels, lowest first",
                );
                return None;
            }
            Some(Value::Array(list)) => list,
            Some(other) => {
                self.wrong_type(loc.to_vec(), "list_type", "a valid list", "criteria", other);
                return None;
            }
        };
        let before = self.errors.len();
        let n = list.len();
        if !(MIN_SCORE_LEVELS..=MAX_SCORE_LEVELS).contains(&n) {
            let (kind, bound, value) = if n < MIN_SCORE_LEVELS {
                ("too_short", "min_length", MIN_SCORE_LEVELS)
            } else {
                ("too_long", "max_length", MAX_SCORE_LEVELS)
            };
            self.push(
                ErrorDetail::new(
                    loc.to_vec(),
                    kind,
                    format!("{}; got {n}", capacity::SCORE_LEVELS),
                )
                .with_ctx(json!({"field_type": "List", bound: value, "actual_length": n})),
            );
        }
        let mut levels = Vec::with_capacity(n);
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, level) in list.iter().enumerate() {
            if level.is_null() {
                self.push(ErrorDetail::new(
                    at(loc, i),
                    "value_error",
                    format!("Value error, score level {i} is null; every level needs text"),
                ));
                continue;
            }
            let Some(text) = self.text(level, at(loc, i), &format!("criteria[{i}]")) else {
                continue;
            };
            let rendered = render_text(text.as_value());
            if let Some(first) = seen.get(&rendered) {
                self.push(
                    ErrorDetail::new(
                        at(loc, i),
                        "value_error",
                        format!(
                            "Value error, score level {i} repeats level {first} ({}); levels must differ",
                            preview(level)
                        ),
                    )
                    .with_input(level.clone()),
                );
            } else {
                seen.insert(rendered, i);
            }
            levels.push(text);
        }
        (self.errors.len() == before).then_some(levels)
    }

    fn asset(
        &mut self,
        assets_loc: &[LocItem],
        placeholder: &str,
        value: &Value,
    ) -> Option<ValidAsset> {
        let aloc = at(assets_loc, placeholder);
        let before = self.errors.len();
        if placeholder.is_empty() {
            self.push(
                ErrorDetail::new(
                    aloc.clone(),
                    "string_too_short",
                    "String should have at least 1 character: an asset placeholder is empty \
                     (an empty placeholder would match everywhere)",
                )
                .with_ctx(json!({"min_length": 1})),
            );
        }
        let Some(object) = value.as_object() else {
            self.wrong_type(
                aloc,
                "dict_type",
                "a valid dictionary",
                &format!("assets.{placeholder}"),
                value,
            );
            return None;
        };
        if !self.image_tag(object.get("type"), aloc.clone(), placeholder) {
            return None;
        }
        let iloc = at(&aloc, "image");
        self.forbid_extra(
            object,
            &["type", "format", "data_base64", "part"],
            &iloc,
            "an image asset",
        );

        let format = self.image_format(object.get("format"), &iloc);
        let data = self.image_data(object.get("data_base64"), object.get("part"), iloc);

        let (format, data) = format.zip(data).filter(|_| self.errors.len() == before)?;
        Some(ValidAsset {
            placeholder: placeholder.to_owned(),
            format,
            data,
        })
    }

    /// An asset's `type`, which must be "image"; false (with the error) otherwise.
    fn image_tag(&mut self, tag: Option<&Value>, aloc: Vec<LocItem>, placeholder: &str) -> bool {
        match tag {
            Some(Value::String(t)) if t == "image" => true,
            None => {
                self.push(
                    ErrorDetail::new(
                        aloc,
                        "union_tag_not_found",
                        format!(
                            "Unable to extract tag using discriminator 'type': asset \
                             {placeholder:?} needs \"type\": \"image\""
                        ),
                    )
                    .with_ctx(json!({"discriminator": "'type'"})),
                );
                false
            }
            Some(other) => {
                let tag = other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned);
                self.push(
                    ErrorDetail::new(
                        aloc,
                        "union_tag_invalid",
                        format!(
                            "Input tag '{tag}' found using 'type' does not match any of the \
                             expected tags: 'image'"
                        ),
                    )
                    .with_ctx(
                        json!({"discriminator": "'type'", "tag": tag, "expected_tags": "'image'"}),
                    ),
                );
                false
            }
        }
    }

    /// An image's `format`: 'png', 'jpg' or 'jpeg'.
    fn image_format(&mut self, value: Option<&Value>, iloc: &[LocItem]) -> Option<ImageFormat> {
        match value {
            None => {
                self.missing(
                    at(iloc, "format"),
                    "an image asset needs `format`: 'png', 'jpg' or 'jpeg'",
                );
                None
            }
            Some(v) => {
                let format = v.as_str().and_then(ImageFormat::parse);
                if format.is_none() {
                    self.push(
                        ErrorDetail::new(
                            at(iloc, "format"),
                            "literal_error",
                            format!(
                                "Input should be 'png', 'jpg' or 'jpeg': `format` got {}",
                                preview(v)
                            ),
                        )
                        .with_input(v.clone())
                        .with_ctx(json!({"expected": "'png', 'jpg' or 'jpeg'"})),
                    );
                }
                format
            }
        }
    }

    /// An image's bytes: inline as `data_base64`, or named as a multipart `part`, one of the two.
    fn image_data(
        &mut self,
        inline: Option<&Value>,
        part: Option<&Value>,
        iloc: Vec<LocItem>,
    ) -> Option<AssetData> {
        match (inline, part) {
            (Some(_), Some(_)) => {
                self.push(ErrorDetail::new(
                    iloc,
                    "value_error",
                    "Value error, an image asset takes either `data_base64` (inline) or `part` \
                     (multipart), not both",
                ));
                None
            }
            (None, None) => {
                self.missing(
                    at(&iloc, "data_base64"),
                    "an image asset needs `data_base64` (inline) or `part` (a multipart part name)",
                );
                None
            }
            (Some(Value::String(encoded)), None) => {
                let dloc = at(&iloc, "data_base64");
                match base64::engine::general_purpose::STANDARD.decode(encoded) {
                    Ok(bytes) if bytes.is_empty() => {
                        self.push(ErrorDetail::new(
                            dloc,
                            "value_error",
                            "Value error, `data_base64` decodes to no bytes; an image cannot be empty",
                        ));
                        None
                    }
                    Ok(bytes) => Some(AssetData::Inline(bytes)),
                    Err(error) => {
                        self.push(
                            ErrorDetail::new(
                                dloc,
                                "value_error",
                                format!(
                                    "Value error, `data_base64` is not valid base64 (standard \
                                     alphabet, padded): {error}"
                                ),
                            )
                            .with_ctx(json!({"error": error.to_string()})),
                        );
                        None
                    }
                }
            }
            (Some(other), None) => {
                self.wrong_type(
                    at(&iloc, "data_base64"),
                    "string_type",
                    "a valid string",
                    "data_base64",
                    other,
                );
                None
            }
            (None, Some(Value::String(part))) if part.is_empty() => {
                self.push(
                    ErrorDetail::new(
                        at(&iloc, "part"),
                        "string_too_short",
                        "String should have at least 1 character: `part` is empty",
                    )
                    .with_ctx(json!({"min_length": 1})),
                );
                None
            }
            (None, Some(Value::String(part))) => Some(AssetData::Part(part.clone())),
            (None, Some(other)) => {
                self.wrong_type(
                    at(&iloc, "part"),
                    "string_type",
                    "a valid string",
                    "part",
                    other,
                );
                None
            }
        }
    }
}

/// Whether any string inside `value` contains `needle`.
fn mentions(value: Option<&Value>, needle: &str) -> bool {
    match value {
        Some(Value::String(s)) => s.contains(needle),
        Some(Value::Array(items)) => items.iter().any(|v| mentions(Some(v), needle)),
        Some(Value::Object(map)) => map.values().any(|v| mentions(Some(v), needle)),
        _ => false,
    }
}

/// Whether a raw question's instructions or criteria mention `needle`. Option keys count:
/// a choice between images may name its options by placeholder.
fn question_mentions(question: &Value, needle: &str) -> bool {
    let instructions = question.get("instructions");
    let criteria = question.get("criteria");
    let in_keys = criteria
        .and_then(Value::as_object)
        .is_some_and(|map| map.keys().any(|k| k.contains(needle)));
    mentions(instructions, needle) || mentions(criteria, needle) || in_keys
}
