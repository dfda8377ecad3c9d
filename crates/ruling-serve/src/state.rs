//! What every handler shares: the settings, the metrics, and, once loaded, the model with its
//! worker pool.

use std::sync::{Arc, OnceLock};

use ruling_core::Ruling;

use crate::config::Config;
use crate::error::ApiError;
use crate::loader::ModelMeta;
use crate::metrics::Metrics;
use crate::queue::Pool;

/// The loaded model and the workers answering with it.
#[derive(Debug)]
pub(crate) struct Ready {
    pub ruling: Arc<Ruling>,
    pub meta: ModelMeta,
    pub pool: Pool,
    /// The served name first, then the aliases, without repeats.
    pub names: Vec<String>,
}

impl Ready {
    pub(crate) fn served_name(&self) -> &str {
        &self.ruling.info().model
    }
}

#[derive(Debug)]
struct Inner {
    config: Config,
    /// What is being loaded, for `/health` while loading.
    loading: String,
    metrics: Arc<Metrics>,
    model: Arc<OnceLock<Arc<Ruling>>>,
    ready: OnceLock<Ready>,
}

/// Shared server state; cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

impl AppState {
    /// A server with no model yet: `/health` answers 503 until [`AppState::install`].
    pub fn new(config: Config, loading: impl Into<String>) -> Self {
        let model = Arc::new(OnceLock::new());
        let metrics = Arc::new(Metrics::new(
            config.queue,
            config.workers.max(1),
            Arc::clone(&model),
        ));
        Self {
            inner: Arc::new(Inner {
                config,
                loading: loading.into(),
                metrics,
                model,
                ready: OnceLock::new(),
            }),
        }
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub(crate) fn loading(&self) -> &str {
        &self.inner.loading
    }

    pub(crate) fn ready(&self) -> Option<&Ready> {
        self.inner.ready.get()
    }

    /// The loaded model, or the 503 that says it is still loading.
    pub(crate) fn require_ready(&self) -> Result<&Ready, ApiError> {
        self.ready().ok_or_else(|| {
            self.metrics().reject("loading");
            ApiError::Loading { retry_after: 5 }
        })
    }

    /// Start the workers for a loaded model and start answering with it.
    pub fn install(&self, ruling: Ruling, meta: ModelMeta) -> std::io::Result<()> {
        let ruling = Arc::new(ruling);
        let config = self.config();
        let pool = Pool::start(
            Arc::clone(&ruling),
            config.workers,
            config.queue,
            Arc::clone(&self.inner.metrics),
        )?;
        let mut names = vec![ruling.info().model.clone()];
        for alias in &config.aliases {
            if !alias.is_empty() && !names.contains(alias) {
                names.push(alias.clone());
            }
        }
        let _ = self.inner.model.set(Arc::clone(&ruling));
        let ready = Ready {
            ruling,
            meta,
            pool,
            names,
        };
        if self.inner.ready.set(ready).is_err() {
            tracing::warn!("a model was installed twice; keeping the first");
        }
        self.metrics().model_loaded.set(1);
        Ok(())
    }
}
