//! `openai:URL#MODEL` and `systemone:URL#MODEL`: which server, and which of its models.

/// The prefix of an OpenAI-compatible completions server's spec.
pub const OPENAI_PREFIX: &str = "openai:";
/// The prefix of another System One server's spec.
pub const SYSTEMONE_PREFIX: &str = "systemone:";

/// A remote engine named by its spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteSpec {
    /// `openai:URL#MODEL`: `URL` is the API base (`http://host:8080/v1`), completions are
    /// posted to `URL/completions` naming `MODEL`.
    OpenAi { base: String, model: String },
    /// `systemone:URL#MODEL`: `URL` is the server (`http://host:8000`), requests are posted
    /// to `URL/v1/systemone` naming `MODEL`.
    SystemOne { base: String, model: String },
}

/// Why a remote spec could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "model spec {spec:?}: {problem}; expected openai:URL#MODEL or systemone:URL#MODEL, URL starting http:// or https://"
)]
pub struct SpecError {
    pub spec: String,
    pub problem: &'static str,
}

impl RemoteSpec {
    /// The remote engine `spec` names, `None` when it names no remote engine at all.
    pub fn parse(spec: &str) -> Option<Result<Self, SpecError>> {
        let (rest, openai) = if let Some(rest) = spec.strip_prefix(OPENAI_PREFIX) {
            (rest, true)
        } else {
            (spec.strip_prefix(SYSTEMONE_PREFIX)?, false)
        };
        let error = |problem| {
            Some(Err(SpecError {
                spec: spec.to_owned(),
                problem,
            }))
        };
        let Some((url, model)) = rest.rsplit_once('#') else {
            return error("no #MODEL after the URL");
        };
        if model.trim().is_empty() {
            return error("the model after # is empty");
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return error("the URL is not http:// or https://");
        }
        let base = url.trim_end_matches('/').to_owned();
        if base.split("://").nth(1).is_none_or(str::is_empty) {
            return error("the URL names no host");
        }
        let model = model.to_owned();
        Some(Ok(if openai {
            Self::OpenAi { base, model }
        } else {
            Self::SystemOne { base, model }
        }))
    }

    /// The model the server is asked for.
    pub fn model(&self) -> &str {
        match self {
            Self::OpenAi { model, .. } | Self::SystemOne { model, .. } => model,
        }
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        match self {
            Self::OpenAi { base, .. } | Self::SystemOne { base, .. } => base,
        }
    }
}

impl std::fmt::Display for RemoteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OpenAi { base, model } => write!(f, "{OPENAI_PREFIX}{base}#{model}"),
            Self::SystemOne { base, model } => write!(f, "{SYSTEMONE_PREFIX}{base}#{model}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_parse_and_print_back() {
        let openai = RemoteSpec::parse("openai:http://127.0.0.1:8080/v1/#smollm2-135m")
            .unwrap()
            .unwrap();
        assert_eq!(
            openai,
            RemoteSpec::OpenAi {
                base: "http://127.0.0.1:8080/v1".into(),
                model: "smollm2-135m".into()
            }
        );
        assert_eq!(
            openai.to_string(),
            "openai:http://127.0.0.1:8080/v1#smollm2-135m"
        );
        let one = RemoteSpec::parse("systemone:https://judge.example#jev-latest")
            .unwrap()
            .unwrap();
        assert_eq!(one.base(), "https://judge.example");
        assert_eq!(one.model(), "jev-latest");
    }

    #[test]
    fn other_specs_are_not_remote_and_broken_ones_say_why() {
        assert!(RemoteSpec::parse("smollm2-135m").is_none());
        assert!(RemoteSpec::parse("encoder:models/x").is_none());
        for (spec, problem) in [
            ("openai:http://h:1/v1", "no #MODEL"),
            ("openai:http://h:1/v1#", "empty"),
            ("systemone:ftp://h#m", "not http"),
            ("systemone:http://#m", "no host"),
        ] {
            let error = RemoteSpec::parse(spec).unwrap().unwrap_err();
            assert!(error.to_string().contains(problem), "{spec}: {error}");
        }
    }
}
