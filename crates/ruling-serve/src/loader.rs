//! How the served model comes to be: a spec pulled and loaded by `ruling-core` (with any LoRA
//! adapters served beside it), or, for tests and embedders, any function that returns a
//! [`Ruling`].

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use ruling_core::{AdapterChoice, CoreError, Options, Ruling};
use ruling_models::{LocalModel, ModelSpec, ProgressMode, PullOptions};

/// What `GET /v1/models` says about the served model besides its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMeta {
    pub description: String,
    /// `YYYY-MM-DD`.
    pub release_date: String,
}

impl ModelMeta {
    /// A description, dated today.
    pub fn today(description: impl Into<String>) -> Self {
        Self {
            description: description.into(),
            release_date: iso_date(SystemTime::now()),
        }
    }
}

/// A loaded model and what to list about it.
#[derive(Debug)]
pub struct Loaded {
    /// The base model: answers its served name and the aliases.
    pub ruling: Ruling,
    pub meta: ModelMeta,
    /// Adapted models served beside the base, each under its own name
    /// ([`Ruling::load_with_adapters`]).
    pub adapters: Vec<Ruling>,
    /// How long one small request took right after loading, when one was asked: the queue's
    /// first estimate of this model's time per request.
    pub warmup: Option<Duration>,
}

impl Loaded {
    /// A model served alone.
    pub fn alone(ruling: Ruling, meta: ModelMeta) -> Self {
        Self {
            ruling,
            meta,
            adapters: Vec::new(),
            warmup: None,
        }
    }
}

/// The request asked after loading to time the model: the README's questions, one of each
/// type, about a state of its own (so it never stands in the prefix cache for a client's).
const WARMUP_REQUEST: &str = r#"{"model": "warmup",
  "state": "Warm-up: my card was charged twice for the March invoice. Please refund one.",
  "questions": {
    "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
    "team": {"type": "choice", "instructions": "Which team should handle it?",
             "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["can wait", "this week", "today"]}
  }}"#;

/// The time of one warm-up request (the second of two: the first pays for first-use
/// allocations); `None` when the model cannot answer it (a remote engine that is down, say).
fn warm_up(ruling: &Ruling) -> Option<Duration> {
    let mut request: ruling_schema::SystemOneRequest =
        serde_json::from_str(WARMUP_REQUEST).expect("the warm-up request parses");
    request.model = ruling.info().model.clone();
    ruling.evaluate(&request).ok()?;
    let started = Instant::now();
    ruling.evaluate(&request).ok()?;
    Some(started.elapsed())
}

/// Why the model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("loading model {spec}: {source}")]
    Core {
        spec: String,
        #[source]
        source: Box<CoreError>,
    },
    #[error("loading the model: {0}")]
    Other(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the model loader panicked")]
    Panicked,
}

type LoadFn = Box<dyn FnOnce() -> Result<Loaded, LoadError> + Send>;

/// Produces the served model, on a thread of its own, after the port is bound.
pub struct Loader {
    describe: String,
    load: LoadFn,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("model", &self.describe)
            .finish_non_exhaustive()
    }
}

impl Loader {
    /// Pull (if needed) and load a model spec with `ruling-core`.
    pub fn from_spec(spec: impl Into<String>, options: Options) -> Self {
        Self::from_spec_with_adapters(spec, options, Vec::new())
    }

    /// Pull (if needed) and load a model spec with `ruling-core`, and serve each adapter over
    /// it under the adapter's name, the base's weights loaded once (candle backend only).
    pub fn from_spec_with_adapters(
        spec: impl Into<String>,
        options: Options,
        adapters: Vec<AdapterChoice>,
    ) -> Self {
        let spec = spec.into();
        let describe = spec.clone();
        Self {
            describe,
            load: Box::new(move || {
                let started = Instant::now();
                tracing::info!(model = %spec, adapters = adapters.len(), "loading the model (pulled into the cache first if needed)");
                let mut models = Ruling::load_with_adapters(&spec, &options, &adapters)
                    .map_err(|source| LoadError::Core {
                        spec: spec.clone(),
                        source: Box::new(source),
                    })?
                    .into_iter();
                let ruling = models.next().ok_or_else(|| {
                    LoadError::Other("ruling-core returned no model for the spec".into())
                })?;
                let adapters: Vec<Ruling> = models.collect();
                tracing::info!(
                    model = %spec,
                    served_name = %ruling.info().model,
                    max_context = ruling.info().max_context,
                    seconds = format_args!("{:.1}", started.elapsed().as_secs_f64()),
                    "model loaded"
                );
                if let Some(settings) = ruling.settings() {
                    tracing::info!(settings = %settings.describe(), "answering with");
                    if let Some(note) = &settings.note {
                        tracing::warn!("{note}");
                    }
                }
                for adapted in &adapters {
                    if let Some(adapter) = adapted.adapter() {
                        tracing::info!(
                            name = %adapter.name,
                            path = %adapter.path.display(),
                            sha256 = %adapter.digest,
                            calibration = %adapter
                                .calibration
                                .as_ref()
                                .map_or_else(|| "none".to_owned(), |c| c.display().to_string()),
                            "adapter loaded"
                        );
                    }
                }
                let mut meta = meta_for_spec(&spec, &options);
                if let Some(settings) = ruling.settings() {
                    meta.description = format!("{} ({})", meta.description, settings.describe());
                }
                if ruling.info().max_context < usize::MAX {
                    // The encoder's is the longest state it reads; a decoder's, the longest
                    // prefix plus branch.
                    meta.description = format!(
                        "{}; up to {} tokens of context",
                        meta.description,
                        ruling.info().max_context
                    );
                }
                if ruling.info().capabilities.vision {
                    meta.description = format!(
                        "{}; reads images, up to {} per request",
                        meta.description,
                        ruling.info().capabilities.max_images
                    );
                }
                // A remote engine's time is its upstream's, and a warm-up would be a request
                // the upstream never asked for.
                let remote = spec.starts_with("openai:") || spec.starts_with("systemone:");
                let warmup = if remote { None } else { warm_up(&ruling) };
                if let Some(took) = warmup {
                    tracing::info!(
                        ms = format_args!("{:.1}", took.as_secs_f64() * 1e3),
                        "warm-up request answered: the queue's first estimate"
                    );
                }
                Ok(Loaded {
                    ruling,
                    meta,
                    adapters,
                    warmup,
                })
            }),
        }
    }

    /// Any function that produces a model (a test engine, a model loaded elsewhere).
    pub fn from_fn(
        describe: impl Into<String>,
        load: impl FnOnce() -> Result<Loaded, LoadError> + Send + 'static,
    ) -> Self {
        Self {
            describe: describe.into(),
            load: Box::new(load),
        }
    }

    /// A model already loaded.
    pub fn ready(ruling: Ruling, meta: ModelMeta) -> Self {
        let describe = ruling.info().model.clone();
        Self::from_fn(describe, move || Ok(Loaded::alone(ruling, meta)))
    }

    /// What is being loaded, for logs and `/health` while loading.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    pub(crate) fn load(self) -> Result<Loaded, LoadError> {
        (self.load)()
    }
}

/// The catalog's description, or the spec; dated by when the weights landed on this machine
/// (their file's modification time), since neither the catalog nor a GGUF records a release.
fn meta_for_spec(spec: &str, options: &Options) -> ModelMeta {
    let parsed = ModelSpec::parse(spec).ok();
    let description = match &parsed {
        Some(ModelSpec::Catalog(entry)) => entry.description.to_owned(),
        Some(ModelSpec::Hub(repo)) => format!("hf:{}", repo.repo),
        Some(ModelSpec::Local(_)) | None => format!("local model {spec}"),
    };
    let local = match parsed {
        Some(ModelSpec::Local(local)) => Some(local),
        // Already pulled by the load: this finds the verified cache entry, quietly.
        Some(spec) => pull_options(options).and_then(|o| ruling_models::pull(&spec, &o).ok()),
        None => None,
    };
    let release_date = local
        .as_ref()
        .map(LocalModel::path)
        .and_then(modified)
        .map_or_else(|| iso_date(SystemTime::now()), iso_date);
    ModelMeta {
        description,
        release_date,
    }
}

fn pull_options(options: &Options) -> Option<PullOptions> {
    let mut pull = match &options.cache_dir {
        Some(dir) => PullOptions::new(dir),
        None => PullOptions::from_env().ok()?,
    };
    pull.progress = ProgressMode::Quiet;
    pull.hub = false;
    pull.mirror = false;
    Some(pull)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// `YYYY-MM-DD` (UTC) of a time.
pub(crate) fn iso_date(time: SystemTime) -> String {
    let mut stamp = humantime::format_rfc3339_seconds(time).to_string();
    stamp.truncate("YYYY-MM-DD".len());
    stamp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_are_iso_utc() {
        assert_eq!(iso_date(SystemTime::UNIX_EPOCH), "1970-01-01");
        let at = |secs| iso_date(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(951_782_400), "2000-02-29");
        assert_eq!(at(1_709_251_199), "2024-02-29");
        assert_eq!(at(1_735_689_600), "2025-01-01");
    }
}
