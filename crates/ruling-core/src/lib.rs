//! ruling in-process: load a model, then answer typed questions about a piece of content with
//! calibrated probabilities read from the model's logits, with no text generated.
//!
//! A complete program (it pulls SmolLM2-135M, 93 MB, on first use):
//!
//! ```
//! use ruling_core::{Options, Ruling};
//! use ruling_schema::{Answer, SystemOneRequest};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ruling = Ruling::load("smollm2-135m", &Options::default())?;
//!
//! let request: SystemOneRequest = serde_json::from_value(serde_json::json!({
//!     "model": "smollm2-135m",
//!     "state": "Hi, my card was charged twice for the March invoice. Please refund one.",
//!     "questions": {
//!         "billing": {"type": "noul", "instructions": "Is this ticket about billing?"},
//!         "team": {"type": "choice", "instructions": "Which team should handle it?",
//!                  "criteria": {"billing": "refunds and invoices", "tech": "bugs and log-in", "other": null}},
//!         "urgency": {"type": "score", "instructions": "How urgent is it?",
//!                     "criteria": ["can wait", "this week", "today"]}
//!     }
//! }))?;
//! let response = ruling.evaluate(&request)?;
//!
//! if let Answer::Choice { choice, confidence, .. } = &response.answers["team"] {
//!     println!("team: {choice} ({confidence:.2})");
//! }
//! if let Answer::Noul { noul } = &response.answers["billing"] {
//!     assert!((0.0..=1.0).contains(noul));
//! }
//! println!("{} tokens read", response.usage.input_tokens);
//! # Ok(())
//! # }
//! ```
//!
//! [`Ruling`] is `Send + Sync`: one loaded model serves concurrent callers.
//!
//! A decoder on the candle backend can also answer through LoRA adapters: one adapted model
//! with [`Options::adapter`], or the base beside several adapters, its weights loaded once,
//! with [`Ruling::load_with_adapters`] (`adapter.rs`).

mod adapter;
mod remote;
mod settings;
mod writer;

use std::path::{Path, PathBuf};

pub use adapter::{ADAPTER_CALIBRATION_FILE, AdapterCalibration, AdapterChoice, AdapterInfo};
pub use remote::RemoteOptions;
pub use ruling_backend::{
    AdaptiveRotations, Cancel, CancelOnDrop, ChatMessage, Finish, Layout, Role, Sampling, Stopped,
};
use ruling_backend::{DecoderEngine, Engine, EngineError, EngineInfo, EngineOptions};
use ruling_calibration::{Calibration, CalibrationError};
use ruling_candle::{AdapterError, CandleBackend, LoadError, LoadOptions};
use ruling_encoder::{EncoderEngine, EncoderError, EncoderOptions, Kernels};
use ruling_models::{LocalModel, ModelSpec, PullError, PullOptions, SpecError};
use ruling_schema::{SystemOneRequest, SystemOneResponse, ValidRequest, ValidationErrors};
pub use settings::{CalibrationSource, Settings};
pub use writer::{Writer, Written};

/// The precision the candle backend keeps weight matrices at (`Options::dtype`), named here so
/// callers choose it without depending on the backend crate.
pub use ruling_candle::WeightDtype;

pub use ruling_backend::EngineInfo as Info;

/// The spec prefix that names a decision checkpoint directory: `encoder:PATH`.
pub const ENCODER_PREFIX: &str = "encoder:";
pub use ruling_backend::PrefixCacheStats;

/// What runs a decoder's forward passes. Decision encoders always run on their own engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecoderBackend {
    /// candle's CPU kernels: pure Rust, GGUF or safetensors weights.
    #[default]
    Candle,
    /// llama.cpp's CPU kernels, GGUF weights only; needs the `llama-cpp` feature.
    Llama,
}

impl DecoderBackend {
    /// Whether this build has the llama.cpp backend.
    pub const LLAMA_BUILT: bool = cfg!(feature = "llama-cpp");

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Candle => "candle",
            Self::Llama => "llama",
        }
    }
}

impl std::fmt::Display for DecoderBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DecoderBackend {
    type Err = String;

    fn from_str(given: &str) -> Result<Self, String> {
        match given {
            "candle" => Ok(Self::Candle),
            "llama" => Ok(Self::Llama),
            _ => Err(format!(
                "unknown backend {given:?}; expected candle or llama"
            )),
        }
    }
}

/// How to load and run a model. `Default` is what the server uses without flags.
#[derive(Debug, Clone)]
pub struct Options {
    /// What runs a decoder (a decision encoder ignores it).
    pub backend: DecoderBackend,
    /// Threads that may evaluate at once (the server's engine workers); the llama backend
    /// gives each its own context.
    pub workers: usize,
    /// Orderings averaged per question (1: as given; 2: both directions for Noul and Score).
    /// `None`: the model's serving profile (see [`Options::profile`]), else 1.
    pub rotations: Option<u32>,
    /// Subtract the content-free prior of each option count. `None`: the serving profile's
    /// choice, else off.
    pub prior: Option<bool>,
    /// A calibration file fitted for this model and these settings (the base's, when
    /// adapters are served beside it; an adapter's is [`AdapterChoice::calibration`]).
    /// `None`: the serving profile's calibration, when the rotations and prior are the
    /// profile's.
    pub calibration: Option<PathBuf>,
    /// Fill the settings left `None` from the catalog model's serving profile, the settings
    /// development measurements chose for it (`ruling_models::profile`). On by default; off,
    /// or for a model without a profile, they take the engine's defaults. Adapters always run
    /// at the settings given (their calibration is fitted for those).
    pub profile: bool,
    /// Answer through this LoRA adapter over the base (candle backend only): [`Ruling::load`]
    /// then loads the adapted model alone, served under the adapter's name and calibrated by
    /// its own calibration, so `calibration` must be left unset.
    pub adapter: Option<AdapterChoice>,
    /// The precision matrices are kept at. A decision encoder takes `Auto` (its dense layers
    /// multiplied in bf16 where the CPU has AMX tiles or AVX-512 BF16, f32 elsewhere) or `F32`.
    pub dtype: WeightDtype,
    /// The model cache (default: `RULING_CACHE`, else the platform cache directory).
    pub cache_dir: Option<PathBuf>,
    /// The name responses carry (default: the model's id). Adapters are served under their
    /// own names.
    pub served_name: Option<String>,
    /// Longest prefix plus branch, in tokens, for a decoder (default: the model's own limit);
    /// longest state, in tokens, for the decision encoder (default
    /// [`ruling_encoder::DEFAULT_MAX_STATE_TOKENS`]).
    pub max_context: Option<usize>,
    /// Most tokens one request may put through the model.
    pub max_request_tokens: usize,
    /// Bytes of encoded states kept across requests, so follow-up questions about the same
    /// state skip its prefill (0 turns the cache off; answers are the same either way).
    pub prefix_cache_bytes: usize,
    /// Skip a question's remaining rotations once it is decided (decoders only; off by
    /// default). See [`AdaptiveRotations`].
    pub adaptive: Option<AdaptiveRotations>,
    /// Encode each question's stem once over the state and branch only its options (on by
    /// default; see `ruling_backend::EngineOptions::shared_stems`).
    pub shared_stems: bool,
    /// Most options a decoder shows in one pass (default and most: 255, as far as the
    /// tokenizer proves answer codes); a wider Choice is asked in two stages.
    pub max_options_per_pass: usize,
    /// Where a decoder puts a question relative to the state: [`Layout::Auto`] asks a long
    /// question about a short state question-first, so its head is encoded once across
    /// requests.
    pub layout: Layout,
    /// How a remote engine (`openai:URL#MODEL`, `systemone:URL#MODEL`) reaches its server.
    pub remote: RemoteOptions,
    /// The vision projector of a vision-language GGUF (llama.cpp's `mmproj` file), on the
    /// llama backend: with it the model reads the images of a request.
    pub mmproj: Option<PathBuf>,
    /// Most tokens one image may become on a vision model: each image is resized to fit.
    pub max_image_tokens: u32,
    /// Most images one request may carry on a vision model.
    pub max_images: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            backend: DecoderBackend::default(),
            workers: 1,
            rotations: None,
            prior: None,
            calibration: None,
            profile: true,
            adapter: None,
            dtype: WeightDtype::Auto,
            cache_dir: None,
            served_name: None,
            max_context: None,
            max_request_tokens: EngineOptions::default().max_request_tokens,
            prefix_cache_bytes: EngineOptions::default().prefix_cache_bytes,
            adaptive: None,
            shared_stems: true,
            max_options_per_pass: EngineOptions::default().max_options_per_pass,
            layout: Layout::default(),
            remote: RemoteOptions::default(),
            mmproj: None,
            max_image_tokens: ruling_backend::DEFAULT_MAX_IMAGE_TOKENS,
            max_images: ruling_schema::DEFAULT_MAX_IMAGES,
        }
    }
}

/// Why a model could not be loaded or a request answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Pull(#[from] PullError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
    #[error(transparent)]
    Encoder(#[from] EncoderError),
    /// An `openai:` or `systemone:` spec that cannot be read.
    #[error(transparent)]
    RemoteSpec(#[from] ruling_remote::SpecError),
    /// A setting that a `systemone:` engine cannot honour: its upstream answers whole requests.
    #[error(
        "{model} forwards whole requests to another System One server, which chooses its own \
         rotations, prior and calibration; drop {setting}"
    )]
    NotForPassThrough {
        model: String,
        setting: &'static str,
    },
    #[cfg(feature = "llama-cpp")]
    #[error(transparent)]
    Llama(#[from] ruling_llama::LoadError),
    /// A vision projector given for a backend that cannot read images.
    #[error(
        "images are read on the llama backend only (through llama.cpp's multimodal library); \
         serve {model} with --backend llama to use its vision projector"
    )]
    VisionNeedsLlama { model: String },
    /// `DecoderBackend::Llama` asked of a build without the `llama-cpp` feature.
    #[error(
        "this build has no llama.cpp backend (the `llama-cpp` feature of ruling-core is off); \
         use the candle backend or rebuild with the feature"
    )]
    LlamaNotBuilt,
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The request broke the wire format or this model's limits.
    #[error("invalid request: {0}")]
    Invalid(#[from] ValidationErrors),
    /// A decoder setting given for a decision encoder, which answers in one pass.
    #[error(
        "{model} is a decision encoder: it answers every question in one pass, with no rotations \
         and no prior; drop {setting}"
    )]
    NotForEncoder {
        model: String,
        setting: &'static str,
    },
    /// A decision encoder asked to write text.
    #[error(
        "{model} is a decision encoder: it answers questions but cannot write text; use a decoder"
    )]
    CannotWrite { model: String },
    /// An adapter file that cannot be read or does not fit the base.
    #[error(transparent)]
    Adapter(#[from] AdapterError),
    /// Loading one adapter failed; `source` says why.
    #[error("adapter {name}: {source}")]
    ForAdapter {
        name: String,
        #[source]
        source: Box<CoreError>,
    },
    /// An adapter's calibration was fitted for something else (another adapter, model or
    /// settings); the source names the field that differs.
    #[error("adapter {name}: the calibration {} does not fit it: {source}", path.display())]
    AdapterCalibration {
        name: String,
        path: PathBuf,
        #[source]
        source: CalibrationError,
    },
    /// Adapters asked of a model or backend without a LoRA path.
    #[error("LoRA adapters run on the candle backend over a decoder, but {given}")]
    AdaptersNeedCandle { given: String },
    /// An adapter name that cannot be served.
    #[error("adapter name {name:?}: {problem}")]
    AdapterName { name: String, problem: String },
    /// Two settings that cannot both hold with adapters.
    #[error("{0}")]
    AdapterConflict(&'static str),
}

/// A loaded model with its engine, ready to answer requests.
pub struct Ruling {
    engine: Box<dyn Engine>,
    /// The LoRA adapter every forward pass applies, if any.
    adapter: Option<AdapterInfo>,
    /// What a decoder runs with (`None` for a decision encoder or a wrapped engine).
    settings: Option<Settings>,
}

impl std::fmt::Debug for Ruling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ruling")
            .field("info", self.engine.info())
            .field("adapter", &self.adapter)
            .field("settings", &self.settings)
            .finish()
    }
}

impl Ruling {
    /// Load a model spec, pulling it into the cache first if needed, and build its engine: a
    /// decision encoder for `encoder:PATH` or any directory holding a trained decision
    /// checkpoint (`decision.json`), the decoder engine for everything else (a catalog name,
    /// `hf:org/repo[@rev]`, a `.gguf` file or a model directory). With
    /// [`Options::adapter`], the decoder answers through that adapter (candle only).
    pub fn load(spec: &str, options: &Options) -> Result<Self, CoreError> {
        if let Some(choice) = &options.adapter {
            if options.calibration.is_some() {
                return Err(CoreError::AdapterConflict(
                    "Options::calibration is the base model's; give the adapter's calibration \
                     in AdapterChoice::calibration",
                ));
            }
            adapter::check_names(None, std::slice::from_ref(choice))?;
            let base = adapter::adapter_base(spec, options)?;
            return adapter::adapted(&base, choice, options);
        }
        if let Some(path) = spec.strip_prefix(ENCODER_PREFIX) {
            return Self::load_encoder(Path::new(path), options);
        }
        if let Some(remote) = ruling_remote::RemoteSpec::parse(spec) {
            return remote::load(remote?, options);
        }
        let model = Pulled::pull(spec, options)?;
        if model.is_encoder() {
            return Self::load_encoder(&model.path, options);
        }
        match options.backend {
            DecoderBackend::Candle if options.mmproj.is_some() => {
                Err(CoreError::VisionNeedsLlama {
                    model: spec.to_owned(),
                })
            }
            DecoderBackend::Candle => Self::decoder(spec, model.candle(options)?, options),
            #[cfg(feature = "llama-cpp")]
            DecoderBackend::Llama => Self::decoder(spec, model.llama(options)?, options),
            #[cfg(not(feature = "llama-cpp"))]
            DecoderBackend::Llama => Err(CoreError::LlamaNotBuilt),
        }
    }

    /// The base and every adapter in `adapters`, each its own `Ruling` (the base first, then
    /// the adapters in order) over one load of the base's weights: what a server answering for
    /// several adapters holds. Each adapted model has its own engine and prefix cache, is
    /// served under its [`AdapterChoice::name`] and calibrated by its
    /// [`AdapterChoice::calibration`]; `options.calibration` is the base's. Names must be
    /// non-empty, unique and other than the base's served name. Without adapters this is
    /// [`Ruling::load`] (any model, any backend); with them the base must be a decoder on the
    /// candle backend.
    pub fn load_with_adapters(
        spec: &str,
        options: &Options,
        adapters: &[AdapterChoice],
    ) -> Result<Vec<Self>, CoreError> {
        if options.adapter.is_some() {
            return Err(CoreError::AdapterConflict(
                "Options::adapter loads one adapted model alone; list every adapter served \
                 beside the base in `adapters` instead",
            ));
        }
        if adapters.is_empty() {
            return Ok(vec![Self::load(spec, options)?]);
        }
        let base = adapter::adapter_base(spec, options)?;
        let base_name = options
            .served_name
            .clone()
            .unwrap_or_else(|| ruling_backend::Backend::info(&base).model_id.clone());
        adapter::check_names(Some(&base_name), adapters)?;
        let adapted = adapters
            .iter()
            .map(|choice| adapter::adapted(&base, choice, options))
            .collect::<Result<Vec<_>, _>>()?;
        let mut all = Vec::with_capacity(adapted.len() + 1);
        all.push(Self::decoder(spec, base, options)?);
        all.extend(adapted);
        Ok(all)
    }

    /// A decoder backend under [`DecoderEngine`], at the settings `options` and the serving
    /// profile of `spec` come to.
    fn decoder<B: ruling_backend::Backend + 'static>(
        spec: &str,
        backend: B,
        options: &Options,
    ) -> Result<Self, CoreError> {
        let (settings, calibration) = settings::resolve(spec, options)?;
        let engine_options = engine_options(options, &settings, options.served_name.clone());
        let engine = DecoderEngine::new(backend, engine_options, calibration)?;
        Ok(Self {
            engine: Box::new(engine),
            adapter: None,
            settings: Some(settings),
        })
    }

    /// A trained decision checkpoint directory behind [`EncoderEngine`]. It applies its own
    /// `calibration.json` unless `options.calibration` names another.
    fn load_encoder(dir: &Path, options: &Options) -> Result<Self, CoreError> {
        let model = dir.display().to_string();
        if options.rotations.is_some_and(|r| r != 1) {
            return Err(CoreError::NotForEncoder {
                model,
                setting: "--rotations",
            });
        }
        if options.prior == Some(true) {
            return Err(CoreError::NotForEncoder {
                model,
                setting: "--prior",
            });
        }
        if options.adaptive.is_some() {
            return Err(CoreError::NotForEncoder {
                model,
                setting: "--adaptive-margin",
            });
        }
        // `auto` multiplies in bf16 where the CPU has AMX tiles or AVX-512 BF16; `f32` keeps
        // every product exact to f32. The encoder has no quantized or f16 form.
        let kernels = match options.dtype {
            WeightDtype::Auto | WeightDtype::Native => Kernels::FusedBf16,
            WeightDtype::F32 => Kernels::Fused,
            WeightDtype::F16 | WeightDtype::Q8_0 => {
                return Err(CoreError::NotForEncoder {
                    model,
                    setting: "--dtype f16 or q8_0 (an encoder runs at auto or f32)",
                });
            }
        };
        let calibration = options
            .calibration
            .as_ref()
            .map(Calibration::load)
            .transpose()?;
        let engine = EncoderEngine::load(
            dir,
            EncoderOptions {
                served_name: options.served_name.clone(),
                calibration,
                max_request_tokens: options
                    .max_request_tokens
                    .min(ruling_encoder::DEFAULT_MAX_REQUEST_TOKENS),
                max_state_tokens: options
                    .max_context
                    .unwrap_or(ruling_encoder::DEFAULT_MAX_STATE_TOKENS),
                kernels,
            },
        )?;
        Ok(Self {
            engine: Box::new(engine),
            adapter: None,
            settings: None,
        })
    }

    /// Wrap an engine built elsewhere (another backend, a test double).
    pub fn from_engine(engine: Box<dyn Engine>) -> Self {
        Self {
            engine,
            adapter: None,
            settings: None,
        }
    }

    pub fn info(&self) -> &EngineInfo {
        self.engine.info()
    }

    /// The LoRA adapter this model answers through, if any.
    pub fn adapter(&self) -> Option<&AdapterInfo> {
        self.adapter.as_ref()
    }

    /// The rotations, prior and calibration a decoder answers with, and where they came from
    /// (`None` for a decision encoder, which has none of them).
    pub fn settings(&self) -> Option<&Settings> {
        self.settings.as_ref()
    }

    /// What a calibration of the loaded engine must have been fitted for.
    pub fn provenance(&self) -> ruling_calibration::Provenance {
        self.engine.provenance()
    }

    /// Hits, misses and occupancy of the engine's prefix cache, when it has one.
    pub fn prefix_cache_stats(&self) -> Option<PrefixCacheStats> {
        self.engine.prefix_cache_stats()
    }

    /// Validate a wire request against this model's capabilities and answer it.
    pub fn evaluate(&self, request: &SystemOneRequest) -> Result<SystemOneResponse, CoreError> {
        let valid = request.validate(&self.info().capabilities)?;
        self.evaluate_valid(&valid)
    }

    /// Parse and validate a raw JSON body (reporting duplicate keys too), then answer it.
    pub fn evaluate_json(&self, body: &[u8]) -> Result<SystemOneResponse, CoreError> {
        let valid = ruling_schema::parse_request(body, &self.info().capabilities)?;
        self.evaluate_valid(&valid)
    }

    pub fn evaluate_valid(&self, request: &ValidRequest) -> Result<SystemOneResponse, CoreError> {
        Ok(self.engine.evaluate(request)?)
    }

    /// [`evaluate_valid`](Self::evaluate_valid), stopping between forward passes once
    /// `cancel` is cancelled or its deadline passes: the error's
    /// [`EngineError::stopped`] then says why. What a server calls, so a request nobody
    /// waits for any more stops holding its worker.
    pub fn evaluate_until(
        &self,
        request: &ValidRequest,
        cancel: &Cancel,
    ) -> Result<SystemOneResponse, CoreError> {
        Ok(self.engine.evaluate_until(request, cancel)?)
    }
}

/// A decoder model spec pulled and loaded on candle, with the identity the engine and its
/// calibration files use: what `ruling-train lora` trains on, so an adapter names the base the
/// server will load.
pub fn load_candle(spec: &str, options: &Options) -> Result<CandleBackend, CoreError> {
    Pulled::pull(spec, options)?.candle(options)
}

/// The engine settings `options` asks for at `settings`, serving under `served_name`.
fn engine_options(
    options: &Options,
    settings: &Settings,
    served_name: Option<String>,
) -> EngineOptions {
    EngineOptions {
        rotations: settings.rotations,
        prior: settings.prior,
        max_request_tokens: options.max_request_tokens,
        served_name,
        prefix_cache_bytes: options.prefix_cache_bytes,
        adaptive: options.adaptive,
        shared_stems: options.shared_stems,
        max_options_per_pass: options.max_options_per_pass,
        layout: options.layout,
        max_images: options.max_images,
        ..EngineOptions::default()
    }
}

/// A model spec pulled into the cache, with the identity its backend reports.
struct Pulled {
    path: PathBuf,
    model_id: String,
    revision: Option<String>,
}

impl Pulled {
    fn pull(spec: &str, options: &Options) -> Result<Self, CoreError> {
        let spec = ModelSpec::parse(spec)?;
        let mut pull = match &options.cache_dir {
            Some(dir) => PullOptions::new(dir),
            None => PullOptions::from_env()?,
        };
        pull.hub = pull.hub && std::env::var_os("RULING_NO_HUB").is_none();
        let local = ruling_models::pull(&spec, &pull)?;
        let (model_id, revision) = model_identity(&spec);
        let path = match local {
            LocalModel::Gguf { path } | LocalModel::Directory { path } => path,
        };
        Ok(Self {
            path,
            model_id,
            revision,
        })
    }

    /// Whether the spec names a trained decision checkpoint directory.
    fn is_encoder(&self) -> bool {
        self.path
            .join(ruling_encoder::checkpoint::META_FILE)
            .is_file()
    }

    fn candle(&self, options: &Options) -> Result<CandleBackend, CoreError> {
        let load = LoadOptions {
            dtype: options.dtype,
            context_length: options.max_context,
            model_id: Some(self.model_id.clone()),
            revision: self.revision.clone(),
            ..LoadOptions::default()
        };
        Ok(CandleBackend::load(&self.path, &load)?)
    }

    #[cfg(feature = "llama-cpp")]
    fn llama(&self, options: &Options) -> Result<ruling_llama::LlamaCppBackend, CoreError> {
        let load = ruling_llama::LoadOptions {
            contexts: options.workers.max(1),
            context_length: options.max_context,
            model_id: Some(self.model_id.clone()),
            revision: self.revision.clone(),
            mmproj: options.mmproj.clone(),
            max_image_tokens: options.max_image_tokens,
            ..ruling_llama::LoadOptions::default()
        };
        Ok(ruling_llama::LlamaCppBackend::load(&self.path, &load)?)
    }
}

/// The identity calibration files and reports use for a model spec: the catalog name and the
/// sha256 the catalog pins, the hub repo and its revision, or a local file's name. It is the
/// `model_id` and `revision` of the [`ruling_calibration::Provenance`] a loaded model checks.
pub fn model_identity(spec: &ModelSpec) -> (String, Option<String>) {
    match spec {
        ModelSpec::Catalog(entry) => (
            entry.name.to_owned(),
            entry.files.first().map(|f| f.sha256.to_owned()),
        ),
        ModelSpec::Hub(repo) => (format!("hf:{}", repo.repo), repo.revision.clone()),
        ModelSpec::Local(local) => (
            local
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            None,
        ),
    }
}
