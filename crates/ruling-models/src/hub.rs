//! The model hub, through the `hf-hub` crate's blocking client (ureq, rustls). Catalog files
//! fetched here are copied out of the client's cache through the same sha256 check as mirror
//! files; `hf:` specs, which have no recorded digest, are used from the client's cache as they are.

use std::path::{Path, PathBuf};

use hf_hub::api::sync::{Api, ApiBuilder, ApiError};
use hf_hub::{Repo, RepoType};

use crate::assemble::copy_verified;
use crate::catalog::{HubSource, ModelFile};
use crate::error::{HubError, PullError};
use crate::progress::{ProgressMode, Reporter};
use crate::pull::PullOptions;
use crate::spec::{HubRepo, LocalModel};

/// Where the hub client keeps its files inside our cache root.
pub(crate) fn hub_cache(cache_root: &Path) -> PathBuf {
    cache_root.join("hub")
}

fn api(options: &PullOptions, reporter: &Reporter) -> Result<Api, HubError> {
    // `from_env` honours HF_ENDPOINT and the user's token; the cache is ours.
    let token = hf_hub::Cache::from_env().token();
    let mut builder = ApiBuilder::from_env();
    if let Some(endpoint) = &options.hub_endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    builder
        .with_cache_dir(hub_cache(&options.cache_dir))
        .with_token(token)
        .with_progress(reporter.mode() == ProgressMode::Bars)
        .build()
        .map_err(|e| classify("", "", e))
}

/// Network trouble reads as "unreachable" (try another source); anything else is a failure.
fn classify(repo: &str, file: &str, error: ApiError) -> HubError {
    let mut inner = &error;
    while let ApiError::TooManyRetries(next) = inner {
        inner = next;
    }
    if let ApiError::RequestError(request) = inner
        && let ureq::Error::Transport(transport) = request.as_ref()
    {
        let detail = match transport.kind() {
            ureq::ErrorKind::Dns => Some("dns error"),
            ureq::ErrorKind::ConnectionFailed => Some("connection failed"),
            ureq::ErrorKind::Io => Some("network error"),
            ureq::ErrorKind::ProxyConnect => Some("proxy connection failed"),
            _ => None,
        };
        if let Some(detail) = detail {
            let host = transport
                .url()
                .and_then(|url| url.host_str())
                .unwrap_or("huggingface.co")
                .to_owned();
            return HubError::Unreachable {
                host,
                detail: detail.to_owned(),
            };
        }
    }
    HubError::Request {
        repo: repo.to_owned(),
        file: file.to_owned(),
        source: Box::new(error),
    }
}

/// Fetches catalog `files` from `source` into `model_dir`, verified.
pub(crate) fn fetch_catalog(
    source: &HubSource,
    files: &[&ModelFile],
    model_dir: &Path,
    options: &PullOptions,
    reporter: &Reporter,
) -> Result<(), PullError> {
    let api = api(options, reporter)?;
    let repo = Repo::with_revision(
        source.repo.to_owned(),
        RepoType::Model,
        source.revision.to_owned(),
    );
    let client = api.repo(repo.clone());
    let fetch_all = || -> Result<(), PullError> {
        for file in files {
            reporter.step(&format!(
                "hub: downloading {}/{}",
                source.repo, file.hub_path
            ));
            let fetched = client
                .get(file.hub_path)
                .map_err(|e| classify(source.repo, file.hub_path, e))?;
            let dest = model_dir.join(file.name);
            copy_verified(&fetched, &dest, file.sha256, file.size, reporter)?;
            reporter.step(&format!(
                "verified {} (sha256 {})",
                dest.display(),
                file.sha256
            ));
        }
        Ok(())
    };
    let result = fetch_all();
    // Our verified copies are what we keep; the client's copies would double the disk use,
    // and a copy that failed verification must not be found in its cache next time.
    let _ = std::fs::remove_dir_all(hub_cache(&options.cache_dir).join(repo.folder_name()));
    result
}

fn hub_repo(spec: &HubRepo) -> Repo {
    match &spec.revision {
        Some(rev) => Repo::with_revision(spec.repo.clone(), RepoType::Model, rev.clone()),
        None => Repo::new(spec.repo.clone(), RepoType::Model),
    }
}

/// What the client's cache already holds for `spec`, if it is a whole model.
pub(crate) fn cached(spec: &HubRepo, cache_root: &Path) -> Option<LocalModel> {
    let repo = hub_repo(spec);
    let folder = hub_cache(cache_root).join(repo.folder_name());
    let commit = std::fs::read_to_string(folder.join("refs").join(repo.revision())).ok()?;
    let snapshot = folder.join("snapshots").join(commit.trim());
    let names = list(&snapshot);
    choose(&spec.repo, &names)
        .ok()
        .map(|(model, _)| model.at(&snapshot))
}

fn list(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The shape of a model in a file listing, and the files to fetch for it.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Directory,
    Gguf(String),
}

impl Shape {
    fn at(&self, snapshot: &Path) -> LocalModel {
        match self {
            Shape::Directory => LocalModel::Directory {
                path: snapshot.to_path_buf(),
            },
            Shape::Gguf(name) => LocalModel::Gguf {
                path: snapshot.join(name),
            },
        }
    }
}

fn choose(repo: &str, names: &[String]) -> Result<(Shape, Vec<String>), HubError> {
    let has = |n: &str| names.iter().any(|x| x == n);
    let safetensors: Vec<String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors") && !n.contains('/'))
        .cloned()
        .collect();
    if has("config.json") && has("tokenizer.json") && !safetensors.is_empty() {
        let mut files: Vec<String> = ["config.json", "tokenizer.json", "tokenizer_config.json"]
            .into_iter()
            .chain(["model.safetensors.index.json", "generation_config.json"])
            .filter(|n| has(n))
            .map(str::to_owned)
            .collect();
        files.extend(safetensors);
        return Ok((Shape::Directory, files));
    }
    let ggufs: Vec<String> = names
        .iter()
        .filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
        .cloned()
        .collect();
    match ggufs.as_slice() {
        [] => Err(HubError::NotAModel {
            repo: repo.to_owned(),
        }),
        [one] => Ok((Shape::Gguf(one.clone()), vec![one.clone()])),
        many => {
            // A repository of quantizations: Q4_K_M is the usual default, if there is one.
            let q4km: Vec<&String> = many
                .iter()
                .filter(|n| n.to_ascii_lowercase().contains("q4_k_m"))
                .collect();
            match q4km.as_slice() {
                [one] => Ok((Shape::Gguf((*one).clone()), vec![(*one).clone()])),
                _ => Err(HubError::AmbiguousGguf {
                    repo: repo.to_owned(),
                    files: many.to_vec(),
                }),
            }
        }
    }
}

/// Fetches an `hf:` spec into the client's cache (no digest is known, so none is checked).
pub(crate) fn fetch_repo(
    spec: &HubRepo,
    options: &PullOptions,
    reporter: &Reporter,
) -> Result<LocalModel, PullError> {
    let api = api(options, reporter)?;
    let client = api.repo(hub_repo(spec));
    let info = client.info().map_err(|e| classify(&spec.repo, "", e))?;
    let names: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    let (shape, files) = choose(&spec.repo, &names)?;
    let mut snapshot = None;
    for file in &files {
        reporter.step(&format!("hub: downloading {}/{file}", spec.repo));
        let path = client
            .get(file)
            .map_err(|e| classify(&spec.repo, file, e))?;
        snapshot = path.parent().map(Path::to_path_buf);
    }
    let snapshot = snapshot.ok_or_else(|| HubError::NotAModel {
        repo: spec.repo.clone(),
    })?;
    Ok(shape.at(&snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn listings_choose_a_shape() {
        let dir = names(&[
            "config.json",
            "tokenizer.json",
            "model.safetensors",
            "README.md",
        ]);
        let (shape, files) = choose("a/b", &dir).expect("directory model");
        assert_eq!(shape, Shape::Directory);
        assert_eq!(
            files,
            names(&["config.json", "tokenizer.json", "model.safetensors"])
        );
        let quants = names(&["m-Q8_0.gguf", "m-Q4_K_M.gguf", "README.md"]);
        assert_eq!(
            choose("a/b", &quants).expect("gguf").0,
            Shape::Gguf("m-Q4_K_M.gguf".into())
        );
        let ambiguous = names(&["m-Q8_0.gguf", "m-Q6_K.gguf"]);
        assert!(matches!(
            choose("a/b", &ambiguous),
            Err(HubError::AmbiguousGguf { .. })
        ));
        assert!(matches!(
            choose("a/b", &names(&["README.md"])),
            Err(HubError::NotAModel { .. })
        ));
    }
}
