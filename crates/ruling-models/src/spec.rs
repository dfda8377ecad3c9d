//! `ModelSpec`: what a user may write where a model is expected, parsed once at the boundary.
//!
//! Three forms are accepted, tried in this order:
//! 1. a catalog name (`qwen2.5-coder-0.5b`, `smollm2-135m`, ...), see [`crate::catalog`];
//! 2. `hf:org/repo[@revision]`, a hub repository holding either a directory model
//!    (`config.json`, `*.safetensors`, `tokenizer.json`) or a `.gguf` file;
//! 3. a local path: a `.gguf` file, or a directory with `config.json`, `*.safetensors` and
//!    `tokenizer.json`. Local paths are checked here, so a parsed local spec is a real model.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::catalog::{self, CatalogEntry};

/// The forms a model spec may take, for error messages.
pub const SPEC_FORMS: &str = "a catalog name, `hf:org/repo[@revision]`, a path to a `.gguf` file, \
     or a path to a directory with config.json, *.safetensors and tokenizer.json";

/// A model the user asked for, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// An entry of the built-in catalog.
    Catalog(&'static CatalogEntry),
    /// A repository on the model hub.
    Hub(HubRepo),
    /// A model already on disk (checked to exist and to look like a model).
    Local(LocalModel),
}

/// A hub repository and the revision to fetch (`main` when none is given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRepo {
    /// `org/repo`.
    pub repo: String,
    /// A branch, tag or commit; `None` means the hub's default (`main`).
    pub revision: Option<String>,
}

/// Where a usable model lies on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalModel {
    /// A single GGUF file (weights, tokenizer and chat template inside).
    Gguf {
        /// The `.gguf` file.
        path: PathBuf,
    },
    /// A directory with `config.json`, `*.safetensors` and `tokenizer.json`.
    Directory {
        /// The directory.
        path: PathBuf,
    },
}

impl LocalModel {
    /// The file (GGUF) or directory (safetensors) to load.
    pub fn path(&self) -> &Path {
        match self {
            LocalModel::Gguf { path } | LocalModel::Directory { path } => path,
        }
    }
}

/// Why a spec was refused. Every message says which forms are accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    /// Nothing was given.
    #[error(
        "empty model spec: expected {SPEC_FORMS}; catalog names: {}",
        catalog_names()
    )]
    Empty,
    /// Not a catalog name, not `hf:`, not an existing path.
    #[error(
        "unknown model `{given}`: expected {SPEC_FORMS}; catalog names: {}",
        catalog_names()
    )]
    Unknown {
        /// The spec as given.
        given: String,
    },
    /// `hf:` followed by something that is not `org/repo[@revision]`.
    #[error("bad hub spec `{given}`: {reason}; expected `hf:org/repo[@revision]`")]
    BadHubRepo {
        /// The spec as given.
        given: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A path that exists but is neither a `.gguf` file nor a model directory.
    #[error("`{}` is not a model: {reason}; expected {SPEC_FORMS}", path.display())]
    NotAModel {
        /// The path given.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// A path-like spec (contains a separator or ends in `.gguf`) that does not exist.
    #[error("model path `{}` does not exist; expected {SPEC_FORMS}; catalog names: {}", path.display(), catalog_names())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
}

fn catalog_names() -> String {
    catalog::CATALOG
        .iter()
        .map(|entry| entry.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl ModelSpec {
    /// Parses a spec; local paths are checked on disk.
    pub fn parse(given: &str) -> Result<Self, SpecError> {
        let given = given.trim();
        if given.is_empty() {
            return Err(SpecError::Empty);
        }
        if let Some(entry) = catalog::get(given) {
            return Ok(ModelSpec::Catalog(entry));
        }
        if let Some(rest) = given.strip_prefix("hf:") {
            return parse_hub(given, rest).map(ModelSpec::Hub);
        }
        let path = Path::new(given);
        let path_like = given.contains('/')
            || given.contains(std::path::MAIN_SEPARATOR)
            || given.starts_with('.')
            || has_extension(path, "gguf");
        if path.exists() {
            return local_model(path).map(ModelSpec::Local);
        }
        if path_like {
            return Err(SpecError::NotFound {
                path: path.to_path_buf(),
            });
        }
        Err(SpecError::Unknown {
            given: given.to_owned(),
        })
    }
}

impl FromStr for ModelSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelSpec::parse(s)
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSpec::Catalog(entry) => f.write_str(entry.name),
            ModelSpec::Hub(HubRepo { repo, revision }) => match revision {
                Some(rev) => write!(f, "hf:{repo}@{rev}"),
                None => write!(f, "hf:{repo}"),
            },
            ModelSpec::Local(local) => write!(f, "{}", local.path().display()),
        }
    }
}

fn parse_hub(given: &str, rest: &str) -> Result<HubRepo, SpecError> {
    let bad = |reason| SpecError::BadHubRepo {
        given: given.to_owned(),
        reason,
    };
    let (repo, revision) = match rest.split_once('@') {
        Some((_, "")) => return Err(bad("the revision after `@` is empty")),
        Some((repo, rev)) => (repo, Some(rev.to_owned())),
        None => (rest, None),
    };
    let Some((org, name)) = repo.split_once('/') else {
        return Err(bad("the repository must be `org/repo`"));
    };
    if org.is_empty() || name.is_empty() || name.contains('/') {
        return Err(bad("the repository must be `org/repo`"));
    }
    let valid = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if !valid(org) || !valid(name) {
        return Err(bad(
            "repository names use only ASCII letters, digits, `-`, `_` and `.`",
        ));
    }
    Ok(HubRepo {
        repo: repo.to_owned(),
        revision,
    })
}

fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// Checks that `path` is a `.gguf` file or a directory model.
pub(crate) fn local_model(path: &Path) -> Result<LocalModel, SpecError> {
    let not_a_model = |reason: String| SpecError::NotAModel {
        path: path.to_path_buf(),
        reason,
    };
    if path.is_file() {
        return if has_extension(path, "gguf") {
            Ok(LocalModel::Gguf {
                path: path.to_path_buf(),
            })
        } else {
            Err(not_a_model("a model file must end in `.gguf`".to_owned()))
        };
    }
    let entries = std::fs::read_dir(path).map_err(|e| not_a_model(e.to_string()))?;
    let names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut missing = Vec::new();
    for required in ["config.json", "tokenizer.json"] {
        if !names.iter().any(|n| n == required) {
            missing.push(required);
        }
    }
    if !names.iter().any(|n| n.ends_with(".safetensors")) {
        missing.push("*.safetensors");
    }
    if missing.is_empty() {
        Ok(LocalModel::Directory {
            path: path.to_path_buf(),
        })
    } else {
        Err(not_a_model(format!(
            "the directory lacks {}",
            missing.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_specs_parse() {
        let spec = ModelSpec::parse("hf:Qwen/Qwen2.5-Coder-0.5B-Instruct@v1.0")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            spec,
            ModelSpec::Hub(HubRepo {
                repo: "Qwen/Qwen2.5-Coder-0.5B-Instruct".into(),
                revision: Some("v1.0".into())
            })
        );
        assert_eq!(spec.to_string(), "hf:Qwen/Qwen2.5-Coder-0.5B-Instruct@v1.0");
        for bad in [
            "hf:", "hf:org", "hf:org/", "hf:/repo", "hf:a/b/c", "hf:a/b@", "hf:a b/c",
        ] {
            assert!(
                matches!(ModelSpec::parse(bad), Err(SpecError::BadHubRepo { .. })),
                "{bad}"
            );
        }
    }
}
