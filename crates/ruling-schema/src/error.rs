//! The 422 error body, shaped like FastAPI/pydantic v2's so existing clients parse it unchanged.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One step of an error location: an object key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum LocItem {
    Index(usize),
    Key(String),
}

impl fmt::Display for LocItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Index(i) => write!(f, "{i}"),
            Self::Key(k) => f.write_str(k),
        }
    }
}

impl From<&str> for LocItem {
    fn from(s: &str) -> Self {
        Self::Key(s.to_owned())
    }
}

impl From<String> for LocItem {
    fn from(s: String) -> Self {
        Self::Key(s)
    }
}

impl From<&String> for LocItem {
    fn from(s: &String) -> Self {
        Self::Key(s.clone())
    }
}

impl From<usize> for LocItem {
    fn from(i: usize) -> Self {
        Self::Index(i)
    }
}

/// One problem with a request: where it is, what kind it is, and what was given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// Path to the offending value, starting at `"body"`.
    pub loc: Vec<LocItem>,
    pub msg: String,
    /// Machine-readable kind, using pydantic v2's names where one fits.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctx: Option<Value>,
}

impl ErrorDetail {
    pub fn new(loc: Vec<LocItem>, kind: impl Into<String>, msg: impl Into<String>) -> Self {
        Self {
            loc,
            msg: msg.into(),
            kind: kind.into(),
            input: None,
            ctx: None,
        }
    }

    #[must_use]
    pub fn with_input(mut self, input: Value) -> Self {
        self.input = Some(input);
        self
    }

    #[must_use]
    pub fn with_ctx(mut self, ctx: Value) -> Self {
        self.ctx = Some(ctx);
        self
    }
}

impl fmt::Display for ErrorDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.loc.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{item}")?;
        }
        write!(f, ": {} [{}]", self.msg, self.kind)
    }
}

/// The JSON body of a 422 response: `{"detail": [...]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ValidationErrorBody {
    pub detail: Vec<ErrorDetail>,
}

/// Every problem found in one request. Never empty when returned by validation.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidationErrors(Vec<ErrorDetail>);

impl ValidationErrors {
    pub fn new(details: Vec<ErrorDetail>) -> Self {
        Self(details)
    }

    pub fn details(&self) -> &[ErrorDetail] {
        &self.0
    }

    pub fn into_details(self) -> Vec<ErrorDetail> {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The 422 body for these errors.
    pub fn into_body(self) -> ValidationErrorBody {
        ValidationErrorBody { detail: self.0 }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "{n} validation error{}", if n == 1 { "" } else { "s" })?;
        for detail in &self.0 {
            write!(f, "; {detail}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

impl From<ValidationErrors> for ValidationErrorBody {
    fn from(errors: ValidationErrors) -> Self {
        errors.into_body()
    }
}

impl IntoIterator for ValidationErrors {
    type Item = ErrorDetail;
    type IntoIter = std::vec::IntoIter<ErrorDetail>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
