//! The calibration file: fitted temperatures plus the provenance they were fitted for.
//!
//! A temperature is only right for the exact readout it was fitted on: another model, another
//! revision, a different number of rotations, the prior switched on or off, or another adapter
//! all move the logits. So a [`Calibration`] carries its [`Provenance`], and
//! [`Calibration::check`] refuses any difference, naming the field, rather than silently
//! applying a temperature to logits it was never fitted on.
//!
//! On disk it is one JSON object:
//!
//! ```json
//! {
//!   "format_version": 1,
//!   "provenance": {"model_id": "...", "revision": null, "rotations": 4, "prior": true,
//!                  "adapter_digest": null},
//!   "temperatures": {"noul": 1.3, "choice": 1.1, "score": 0.9},
//!   "fitted": {"choice": {"temperature": 1.1, "samples": 500, ...}},
//!   "created": "2025-01-01T00:00:00Z"
//! }
//! ```
//!
//! Unknown fields are refused, so a misspelt `adapter_digest` cannot quietly read as "none"
//! and pass the provenance check. Optional values (`revision`, `adapter_digest`, `fitted`,
//! `created`) are written as `null` and read as absent when `null` or left out.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::answer::{AnswerType, InvalidTemperature, Temperatures, TemperaturesRecord};
use crate::temperature::{FitSummary, TemperatureFit};

/// The file format this crate writes and the only one it reads.
pub const FORMAT_VERSION: u32 = 1;

/// What a calibration was fitted for: everything that changes the logits it calibrates.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The model's identifier (for instance its registry name).
    pub model_id: String,
    /// The model's revision (commit or tag), when known.
    pub revision: Option<String>,
    /// How many rotations of the option order are averaged.
    pub rotations: u32,
    /// Whether the content-free prior is subtracted.
    pub prior: bool,
    /// Digest of the LoRA adapter applied, if any.
    pub adapter_digest: Option<String>,
}

/// A field of [`Provenance`], as named in a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProvenanceField {
    /// [`Provenance::model_id`].
    ModelId,
    /// [`Provenance::revision`].
    Revision,
    /// [`Provenance::rotations`].
    Rotations,
    /// [`Provenance::prior`].
    Prior,
    /// [`Provenance::adapter_digest`].
    AdapterDigest,
}

impl ProvenanceField {
    /// The field's name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            ProvenanceField::ModelId => "model_id",
            ProvenanceField::Revision => "revision",
            ProvenanceField::Rotations => "rotations",
            ProvenanceField::Prior => "prior",
            ProvenanceField::AdapterDigest => "adapter_digest",
        }
    }
}

impl fmt::Display for ProvenanceField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Provenance {
    /// The first field (in declaration order) that differs from `other`, with both values
    /// rendered for a message (`none` for an absent optional value).
    pub fn first_difference(
        &self,
        other: &Provenance,
    ) -> Option<(ProvenanceField, String, String)> {
        fn optional(value: &Option<String>) -> String {
            value.clone().unwrap_or_else(|| "none".to_owned())
        }
        if self.model_id != other.model_id {
            return Some((
                ProvenanceField::ModelId,
                self.model_id.clone(),
                other.model_id.clone(),
            ));
        }
        if self.revision != other.revision {
            return Some((
                ProvenanceField::Revision,
                optional(&self.revision),
                optional(&other.revision),
            ));
        }
        if self.rotations != other.rotations {
            return Some((
                ProvenanceField::Rotations,
                self.rotations.to_string(),
                other.rotations.to_string(),
            ));
        }
        if self.prior != other.prior {
            return Some((
                ProvenanceField::Prior,
                self.prior.to_string(),
                other.prior.to_string(),
            ));
        }
        if self.adapter_digest != other.adapter_digest {
            return Some((
                ProvenanceField::AdapterDigest,
                optional(&self.adapter_digest),
                optional(&other.adapter_digest),
            ));
        }
        None
    }
}

/// Why a calibration could not be read, written or used.
#[derive(Debug, Error)]
pub enum CalibrationError {
    /// Reading or writing the file failed.
    #[error("calibration file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON of the expected shape.
    #[error("calibration file {}: {source}", path.display())]
    Json {
        /// The file (empty when parsing from a string).
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The file was written in a format version this build does not read.
    #[error("calibration format version {found} is not supported (this build reads {supported})")]
    UnsupportedFormatVersion {
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A temperature in the file was not finite and greater than zero.
    #[error(transparent)]
    InvalidTemperature(#[from] InvalidTemperature),
    /// The calibration was fitted for a different readout than the engine's.
    #[error(
        "calibration was fitted for {field} = {calibrated_for}, but the engine has {field} = {engine}"
    )]
    ProvenanceMismatch {
        /// The first field that differs.
        field: ProvenanceField,
        /// The calibration file's value.
        calibrated_for: String,
        /// The engine's value.
        engine: String,
    },
}

/// Temperatures per answer type, with the provenance they are valid for and how they were
/// fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// What the temperatures were fitted for.
    pub provenance: Provenance,
    /// One temperature per answer type.
    pub temperatures: Temperatures,
    /// The fit behind the temperatures; `None` for an identity or hand-written calibration.
    pub fitted: Option<FitSummary>,
    /// When the calibration was made, as the caller wrote it (RFC 3339 by convention; this
    /// crate does not parse it).
    pub created: Option<String>,
}

/// The on-disk shape, before the temperatures are checked.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CalibrationRecord {
    format_version: u32,
    provenance: Provenance,
    temperatures: TemperaturesRecord,
    #[serde(default)]
    fitted: Option<FitSummary>,
    #[serde(default)]
    created: Option<String>,
}

/// Only the version, read first so a future format is reported as such rather than as
/// whatever field it renamed.
#[derive(Deserialize)]
struct VersionProbe {
    format_version: u32,
}

impl Calibration {
    /// A calibration that changes nothing (every temperature 1.0) for `provenance`.
    pub fn identity(provenance: Provenance) -> Self {
        Calibration {
            provenance,
            temperatures: Temperatures::default(),
            fitted: None,
            created: None,
        }
    }

    /// A calibration from a fit.
    pub fn from_fit(provenance: Provenance, fit: TemperatureFit, created: Option<String>) -> Self {
        Calibration {
            provenance,
            temperatures: fit.temperatures,
            fitted: Some(fit.summary),
            created,
        }
    }

    /// The temperature for one answer type.
    pub fn temperature(&self, answer_type: AnswerType) -> f64 {
        self.temperatures.get(answer_type)
    }

    /// Refuses to be used by an engine whose provenance differs in any field.
    pub fn check(&self, engine: &Provenance) -> Result<(), CalibrationError> {
        match self.provenance.first_difference(engine) {
            None => Ok(()),
            Some((field, calibrated_for, engine)) => Err(CalibrationError::ProvenanceMismatch {
                field,
                calibrated_for,
                engine,
            }),
        }
    }

    /// Parses a calibration from JSON text.
    pub fn from_json(text: &str) -> Result<Self, CalibrationError> {
        Self::parse(text, Path::new(""))
    }

    /// The calibration as pretty-printed JSON text.
    pub fn to_json(&self) -> Result<String, CalibrationError> {
        serde_json::to_string_pretty(&self.record()).map_err(|source| CalibrationError::Json {
            path: PathBuf::new(),
            source,
        })
    }

    /// Reads a calibration file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CalibrationError> {
        let path = path.as_ref();
        let text = fs::read_to_string(path).map_err(|source| CalibrationError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Reads a calibration file and checks it against the engine's provenance.
    pub fn load_checked(
        path: impl AsRef<Path>,
        engine: &Provenance,
    ) -> Result<Self, CalibrationError> {
        let calibration = Self::load(path)?;
        calibration.check(engine)?;
        Ok(calibration)
    }

    /// Writes the calibration atomically: to a temporary file in the same directory, flushed
    /// to disk, then renamed over `path`, so a reader sees the old file or the new one and
    /// never half of one. The temporary file is removed if anything fails.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CalibrationError> {
        let path = path.as_ref();
        let mut text = serde_json::to_string_pretty(&self.record()).map_err(|source| {
            CalibrationError::Json {
                path: path.to_owned(),
                source,
            }
        })?;
        text.push('\n');

        let temporary = temporary_path(path);
        let io_error = |source| CalibrationError::Io {
            path: path.to_owned(),
            source,
        };
        let written =
            write_synced(&temporary, text.as_bytes()).and_then(|()| fs::rename(&temporary, path));
        if let Err(source) = written {
            // Best effort: the write error is the one worth reporting.
            let _ = fs::remove_file(&temporary);
            return Err(io_error(source));
        }
        Ok(())
    }

    fn record(&self) -> CalibrationRecord {
        CalibrationRecord {
            format_version: FORMAT_VERSION,
            provenance: self.provenance.clone(),
            temperatures: self.temperatures.into(),
            fitted: self.fitted.clone(),
            created: self.created.clone(),
        }
    }

    fn parse(text: &str, path: &Path) -> Result<Self, CalibrationError> {
        let json_error = |source| CalibrationError::Json {
            path: path.to_owned(),
            source,
        };
        let probe: VersionProbe = serde_json::from_str(text).map_err(json_error)?;
        if probe.format_version != FORMAT_VERSION {
            return Err(CalibrationError::UnsupportedFormatVersion {
                found: probe.format_version,
                supported: FORMAT_VERSION,
            });
        }
        let record: CalibrationRecord = serde_json::from_str(text).map_err(json_error)?;
        Ok(Calibration {
            provenance: record.provenance,
            temperatures: Temperatures::try_from(record.temperatures)?,
            fitted: record.fitted,
            created: record.created,
        })
    }
}

/// A name next to `path` that no other writer (thread or process) picks at the same time.
fn temporary_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "calibration".to_owned());
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{unique}.tmp", std::process::id()))
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(bytes)?;
    // Without the sync a crash after the rename could leave an empty file in place.
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance() -> Provenance {
        Provenance {
            model_id: "Qwen/Qwen3-0.6B".to_owned(),
            revision: Some("abc123".to_owned()),
            rotations: 4,
            prior: true,
            adapter_digest: None,
        }
    }

    #[test]
    fn identity_round_trips_through_json() {
        let calibration = Calibration::identity(provenance());
        let text = calibration.to_json().expect("serialisable");
        assert!(text.contains("\"format_version\": 1"));
        let back = Calibration::from_json(&text).expect("parses");
        assert_eq!(back, calibration);
        assert!((back.temperature(AnswerType::Score) - 1.0).abs() < f64::EPSILON);
    }

    #[test]
    fn every_field_is_checked() {
        let file = provenance();
        let calibration = Calibration::identity(file.clone());
        calibration.check(&file).expect("same provenance");

        let mut cases: Vec<(Provenance, ProvenanceField, &str, &str)> = Vec::new();
        let mut p = file.clone();
        p.model_id = "other".to_owned();
        cases.push((p, ProvenanceField::ModelId, "Qwen/Qwen3-0.6B", "other"));
        let mut p = file.clone();
        p.revision = None;
        cases.push((p, ProvenanceField::Revision, "abc123", "none"));
        let mut p = file.clone();
        p.rotations = 1;
        cases.push((p, ProvenanceField::Rotations, "4", "1"));
        let mut p = file.clone();
        p.prior = false;
        cases.push((p, ProvenanceField::Prior, "true", "false"));
        let mut p = file.clone();
        p.adapter_digest = Some("sha256:ff".to_owned());
        cases.push((p, ProvenanceField::AdapterDigest, "none", "sha256:ff"));

        for (engine, want_field, want_file, want_engine) in cases {
            match calibration.check(&engine) {
                Err(CalibrationError::ProvenanceMismatch {
                    field,
                    calibrated_for,
                    engine,
                }) => {
                    assert_eq!(field, want_field);
                    assert_eq!(calibrated_for, want_file);
                    assert_eq!(engine, want_engine);
                }
                other => panic!("expected a mismatch on {want_field}, got {other:?}"),
            }
        }
    }

    #[test]
    fn mismatch_message_names_field_and_values() {
        let calibration = Calibration::identity(provenance());
        let mut engine = provenance();
        engine.rotations = 2;
        let message = calibration.check(&engine).expect_err("differs").to_string();
        assert_eq!(
            message,
            "calibration was fitted for rotations = 4, but the engine has rotations = 2"
        );
    }

    #[test]
    fn bad_files_are_refused_with_typed_errors() {
        let good = Calibration::identity(provenance())
            .to_json()
            .expect("serialisable");

        let zero = good.replace("\"noul\": 1.0", "\"noul\": 0.0");
        assert!(matches!(
            Calibration::from_json(&zero),
            Err(CalibrationError::InvalidTemperature(InvalidTemperature {
                answer_type: AnswerType::Noul,
                ..
            }))
        ));
        let negative = good.replace("\"score\": 1.0", "\"score\": -2.0");
        assert!(matches!(
            Calibration::from_json(&negative),
            Err(CalibrationError::InvalidTemperature(_))
        ));

        let future = good.replace("\"format_version\": 1", "\"format_version\": 2");
        assert!(matches!(
            Calibration::from_json(&future),
            Err(CalibrationError::UnsupportedFormatVersion {
                found: 2,
                supported: 1
            })
        ));

        let misspelt = good.replace("\"adapter_digest\"", "\"adaptor_digest\"");
        assert!(matches!(
            Calibration::from_json(&misspelt),
            Err(CalibrationError::Json { .. })
        ));
        assert!(matches!(
            Calibration::from_json("{"),
            Err(CalibrationError::Json { .. })
        ));
    }
}
