//! What every handler shares: the settings, the metrics, and, once loaded, the models (the
//! base and any adapters over it) with the one worker pool that answers for all of them.

use std::sync::{Arc, OnceLock};

use ruling_core::Ruling;

use crate::config::Config;
use crate::error::ApiError;
use crate::loader::{Loaded, ModelMeta};
use crate::metrics::{Metrics, Models};
use crate::queue::{Admission, Pool};

/// The loaded models and the workers answering with them.
#[derive(Debug)]
pub(crate) struct Ready {
    /// The base model first, then each adapter over it.
    pub models: Vec<Arc<Ruling>>,
    pub meta: ModelMeta,
    pub pool: Pool,
    /// Every name a request may ask for, in the order `/v1/models` lists them (the served
    /// name, the aliases, the adapters), each with the index in `models` that answers it.
    pub names: Vec<(String, usize)>,
}

impl Ready {
    pub(crate) fn base(&self) -> &Arc<Ruling> {
        &self.models[0]
    }

    pub(crate) fn served_name(&self) -> &str {
        &self.base().info().model
    }

    /// The model a request's `model` field asks for.
    pub(crate) fn model(&self, name: &str) -> Option<&Arc<Ruling>> {
        self.names
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, index)| &self.models[index])
    }

    /// Every name served, in listing order.
    pub(crate) fn name_list(&self) -> Vec<String> {
        self.names.iter().map(|(n, _)| n.clone()).collect()
    }
}

/// Why loaded models could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("starting the engine workers: {0}")]
    Workers(#[source] std::io::Error),
    /// An adapter named like the base model or one of its aliases.
    #[error(
        "the adapter name {name:?} is already the base model's {taken_as}; give the adapter \
         another name"
    )]
    NameTaken {
        name: String,
        taken_as: &'static str,
    },
}

#[derive(Debug)]
struct Inner {
    config: Config,
    /// What is being loaded, for `/health` while loading.
    loading: String,
    metrics: Arc<Metrics>,
    models: Models,
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
        let models: Models = Arc::new(OnceLock::new());
        let metrics = Arc::new(Metrics::new(
            config.queue,
            config.workers.max(1),
            Arc::clone(&models),
        ));
        Self {
            inner: Arc::new(Inner {
                config,
                loading: loading.into(),
                metrics,
                models,
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

    /// Start the workers for the loaded models and start answering with them. An adapter
    /// named like the base or one of its aliases is refused.
    pub fn install(&self, loaded: Loaded) -> Result<(), InstallError> {
        let config = self.config();
        let served = loaded.ruling.info().model.clone();
        let mut names = vec![(served.clone(), 0)];
        for alias in &config.aliases {
            if !alias.is_empty() && !names.iter().any(|(n, _)| n == alias) {
                names.push((alias.clone(), 0));
            }
        }
        for (index, adapter) in loaded.adapters.iter().enumerate() {
            let name = &adapter.info().model;
            if let Some((taken, _)) = names.iter().find(|(n, _)| n == name) {
                return Err(InstallError::NameTaken {
                    name: name.clone(),
                    taken_as: if *taken == served {
                        "served name"
                    } else {
                        "alias"
                    },
                });
            }
            names.push((name.clone(), index + 1));
        }
        let models: Vec<Arc<Ruling>> = std::iter::once(loaded.ruling)
            .chain(loaded.adapters)
            .map(Arc::new)
            .collect();
        let pool = Pool::start(
            Admission {
                workers: config.workers,
                queue: config.queue,
                bound: config.max_wait.unwrap_or(config.timeout),
            },
            Arc::clone(&self.inner.metrics),
        )
        .map_err(InstallError::Workers)?;
        if let Some(took) = loaded.warmup {
            for model in &models {
                pool.seed_estimate(&model.info().model, took);
            }
        }
        let _ = self.inner.models.set(models.clone());
        let ready = Ready {
            models,
            meta: loaded.meta,
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
