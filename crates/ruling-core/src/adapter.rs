//! LoRA adapters over a loaded decoder base: which adapter to apply, which calibration it
//! answers with, and how a base and several adapters become one [`Ruling`] each while the
//! base's weights are loaded once.
//!
//! An adapter changes every key and value above its lowest adapted layer, so each adapted
//! model gets a `DecoderEngine` (and prefix cache) of its own; what they share is the base's
//! tensors, tokenizer and template (`CandleBackend::with_adapter` copies none of them).
//! Adapters run on the candle backend only: llama.cpp's kernels and the decision encoder have
//! no LoRA path, and are refused with [`CoreError::AdaptersNeedCandle`].

use std::path::{Path, PathBuf};

use ruling_backend::{DecoderEngine, EngineError};
use ruling_calibration::Calibration;
use ruling_candle::{Adapter, CandleBackend};

use crate::{CoreError, DecoderBackend, ENCODER_PREFIX, Options, Pulled, Ruling};

/// The file beside an adapter that holds its calibration (what the trainer writes there).
pub const ADAPTER_CALIBRATION_FILE: &str = "calibration.json";

/// One LoRA adapter to apply over the base: the name it is served under, its file, and its
/// calibration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterChoice {
    /// The name responses carry and requests ask for.
    pub name: String,
    /// The adapter file (safetensors with the adapter's metadata).
    pub path: PathBuf,
    pub calibration: AdapterCalibration,
}

/// Which calibration an adapted model answers with. Whatever the source, a calibration fitted
/// for another adapter, model or settings is refused at load, naming the field that differs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AdapterCalibration {
    /// [`ADAPTER_CALIBRATION_FILE`] in the adapter file's directory when there is one, else
    /// none.
    #[default]
    Beside,
    /// This file.
    File(PathBuf),
    /// None: every temperature 1.
    Uncalibrated,
}

impl AdapterCalibration {
    /// The file to apply for the adapter at `adapter`, if any.
    pub fn file_for(&self, adapter: &Path) -> Option<PathBuf> {
        match self {
            Self::Beside => {
                let beside = adapter
                    .parent()
                    .unwrap_or_else(|| Path::new(""))
                    .join(ADAPTER_CALIBRATION_FILE);
                beside.is_file().then_some(beside)
            }
            Self::File(path) => Some(path.clone()),
            Self::Uncalibrated => None,
        }
    }
}

impl AdapterChoice {
    /// The adapter at `path` with the calibration beside it, served under `name`.
    pub fn new(name: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            path: path.into(),
            calibration: AdapterCalibration::Beside,
        }
    }

    /// The adapter at `path` under the name its own metadata gives it.
    pub fn from_file(path: impl Into<PathBuf>) -> Result<Self, CoreError> {
        let path = path.into();
        let adapter = Adapter::load(&path)?;
        Ok(Self::new(adapter.meta.name, path))
    }
}

/// What a loaded adapted model applies, for listings and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterInfo {
    /// The name it is served under.
    pub name: String,
    pub path: PathBuf,
    /// sha256 of the adapter file, in hex (what calibration files name as `adapter_digest`).
    pub digest: String,
    /// The calibration file applied, if any.
    pub calibration: Option<PathBuf>,
}

/// The base a set of adapters goes over: a decoder spec on the candle backend.
pub(crate) fn adapter_base(spec: &str, options: &Options) -> Result<CandleBackend, CoreError> {
    if spec.starts_with(ENCODER_PREFIX) {
        return Err(CoreError::AdaptersNeedCandle {
            given: format!("{spec} is a decision encoder"),
        });
    }
    if options.backend != DecoderBackend::Candle {
        return Err(CoreError::AdaptersNeedCandle {
            given: format!(
                "the {} backend was chosen (serve adapters with --backend candle)",
                options.backend
            ),
        });
    }
    let model = Pulled::pull(spec, options)?;
    if model.is_encoder() {
        return Err(CoreError::AdaptersNeedCandle {
            given: format!("{spec} is a decision encoder"),
        });
    }
    model.candle(options)
}

/// Every adapter name must be non-empty, unique and other than the base's served name.
pub(crate) fn check_names(base: Option<&str>, adapters: &[AdapterChoice]) -> Result<(), CoreError> {
    for (i, choice) in adapters.iter().enumerate() {
        let refuse = |problem: String| {
            Err(CoreError::AdapterName {
                name: choice.name.clone(),
                problem,
            })
        };
        if choice.name.trim().is_empty() {
            return refuse(format!(
                "the adapter {} needs a non-empty name",
                choice.path.display()
            ));
        }
        if base == Some(choice.name.as_str()) {
            return refuse("it is the base model's served name; choose another".to_owned());
        }
        if adapters[..i].iter().any(|other| other.name == choice.name) {
            return refuse("two adapters are given this name; each needs its own".to_owned());
        }
    }
    Ok(())
}

/// `choice` applied over `base`, under its own engine and calibration. Every failure names
/// the adapter.
pub(crate) fn adapted(
    base: &CandleBackend,
    choice: &AdapterChoice,
    options: &Options,
) -> Result<Ruling, CoreError> {
    let named = |source: CoreError| CoreError::ForAdapter {
        name: choice.name.clone(),
        source: Box::new(source),
    };
    let adapter = Adapter::load(&choice.path).map_err(|e| named(e.into()))?;
    let backend = base.with_adapter(&adapter).map_err(|e| named(e.into()))?;
    let calibration_file = choice.calibration.file_for(&choice.path);
    let calibration = calibration_file
        .as_ref()
        .map(Calibration::load)
        .transpose()
        .map_err(|e| named(e.into()))?;
    let mut settings = crate::settings::explicit(options);
    if let Some(path) = &calibration_file {
        settings.calibration = crate::CalibrationSource::File(path.clone());
    }
    let engine_options = crate::engine_options(options, &settings, Some(choice.name.clone()));
    let engine =
        DecoderEngine::new(backend, engine_options, calibration).map_err(|error| {
            match (error, &calibration_file) {
                (EngineError::Calibration(source), Some(path)) => CoreError::AdapterCalibration {
                    name: choice.name.clone(),
                    path: path.clone(),
                    source,
                },
                (other, _) => named(other.into()),
            }
        })?;
    Ok(Ruling {
        engine: Box::new(engine),
        adapter: Some(AdapterInfo {
            name: choice.name.clone(),
            path: choice.path.clone(),
            digest: adapter.digest,
            calibration: calibration_file,
        }),
        settings: Some(settings),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_set_unique_and_not_the_base() {
        let a = AdapterChoice::new("a", "/x/a.safetensors");
        let b = AdapterChoice::new("b", "/x/b.safetensors");
        assert!(check_names(Some("base"), &[a.clone(), b.clone()]).is_ok());
        let message = |adapters: &[AdapterChoice]| {
            check_names(Some("base"), adapters)
                .expect_err("refused")
                .to_string()
        };
        let twice = message(&[a.clone(), b, a.clone()]);
        assert!(
            twice.contains("\"a\"") && twice.contains("two adapters"),
            "{twice}"
        );
        let base = message(&[AdapterChoice::new("base", "/x/c.safetensors")]);
        assert!(base.contains("base model's served name"), "{base}");
        let empty = message(&[AdapterChoice::new(" ", "/x/c.safetensors")]);
        assert!(
            empty.contains("/x/c.safetensors") && empty.contains("non-empty"),
            "{empty}"
        );
    }

    #[test]
    fn the_calibration_beside_is_used_only_when_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        let adapter = dir.path().join("adapter.safetensors");
        assert_eq!(AdapterCalibration::Beside.file_for(&adapter), None);
        std::fs::write(dir.path().join(ADAPTER_CALIBRATION_FILE), "{}").unwrap();
        assert_eq!(
            AdapterCalibration::Beside.file_for(&adapter),
            Some(dir.path().join(ADAPTER_CALIBRATION_FILE))
        );
        assert_eq!(AdapterCalibration::Uncalibrated.file_for(&adapter), None);
        let other = PathBuf::from("/elsewhere/c.json");
        assert_eq!(
            AdapterCalibration::File(other.clone()).file_for(&adapter),
            Some(other)
        );
    }
}
