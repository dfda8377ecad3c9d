//! Encoder directories on disk: a base encoder to train from, and a trained decision
//! checkpoint to serve.
//!
//! Both hold the checkpoint's own `config.json`, `tokenizer.json` and `model.safetensors`. A
//! decision checkpoint adds the score head's tensors to the weights and a `decision.json` that
//! names it, the base it was trained from, the sha256 of each of its files, and the trainer's
//! record (data digests, settings, validation history). Opening one refuses, listing what is
//! wrong: a missing file, a file whose digest is not the one recorded (copied in from another
//! base or half-written), a tensor missing or of the wrong shape.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::EncoderError;
use crate::model::{DecisionModel, FamilyConfig, expected_tensors};
use crate::ops::Kernels;
use crate::tokenizer::EncoderTokenizer;

pub const CONFIG_FILE: &str = "config.json";
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const META_FILE: &str = "decision.json";
/// A calibration fitted for the checkpoint, applied by default when present.
pub const CALIBRATION_FILE: &str = "calibration.json";

/// The version of `decision.json` this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// What a decision checkpoint says about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointMeta {
    pub format_version: u32,
    /// The checkpoint's name: what responses, reports and calibrations call it.
    pub name: String,
    /// `bert` or `modernbert`.
    pub family: String,
    /// What it was fine-tuned from.
    pub base: BaseIdentity,
    pub config_sha256: String,
    pub tokenizer_sha256: String,
    pub weights_sha256: String,
    /// The precision the weights are stored at (`f32` or `f16`); they are computed in f32.
    pub weights_dtype: String,
    /// The trainer's record: settings, the sha256 of every data file, validation history.
    #[serde(default)]
    pub training: serde_json::Value,
}

/// A base encoder by name and the digest of its weights.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseIdentity {
    pub name: String,
    pub weights_sha256: String,
}

/// The files of an encoder directory, read and checked.
#[derive(Debug)]
pub struct EncoderFiles {
    pub dir: PathBuf,
    pub config: FamilyConfig,
    pub config_sha256: String,
    pub tokenizer: EncoderTokenizer,
    pub tokenizer_sha256: String,
    /// Every tensor, converted to f32.
    pub tensors: HashMap<String, Tensor>,
    pub weights_sha256: String,
    /// Present for a trained decision checkpoint.
    pub meta: Option<CheckpointMeta>,
}

impl EncoderFiles {
    /// Read a base encoder or a decision checkpoint, refusing an incomplete directory.
    pub fn open(dir: &Path) -> Result<Self, EncoderError> {
        let missing: Vec<String> = [CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE]
            .iter()
            .filter(|f| !dir.join(f).is_file())
            .map(|f| (*f).to_owned())
            .collect();
        if !missing.is_empty() {
            return Err(EncoderError::Incomplete {
                dir: dir.to_owned(),
                missing,
            });
        }
        let meta = read_meta(dir)?;
        let read = |name: &str| fs::read(dir.join(name)).map_err(EncoderError::io(dir.join(name)));
        let config_bytes = read(CONFIG_FILE)?;
        let tokenizer_bytes = read(TOKENIZER_FILE)?;
        let weights_bytes = read(WEIGHTS_FILE)?;
        let digests = [
            (CONFIG_FILE, sha256_hex(&config_bytes)),
            (TOKENIZER_FILE, sha256_hex(&tokenizer_bytes)),
            (WEIGHTS_FILE, sha256_hex(&weights_bytes)),
        ];
        if let Some(meta) = &meta {
            check_digests(dir, meta, &digests)?;
        }
        let config_text = String::from_utf8(config_bytes).map_err(|e| {
            EncoderError::Config(format!(
                "{} is not UTF-8: {e}",
                dir.join(CONFIG_FILE).display()
            ))
        })?;
        let config = FamilyConfig::from_json(&config_text)?;
        if let Some(meta) = &meta
            && meta.family != config.family()
        {
            return Err(EncoderError::Mismatch {
                dir: dir.to_owned(),
                message: format!(
                    "{META_FILE} says family {:?} but {CONFIG_FILE} is a {} model",
                    meta.family,
                    config.family()
                ),
            });
        }
        let tokenizer = EncoderTokenizer::load(&dir.join(TOKENIZER_FILE))?;
        let tensors = candle_core::safetensors::load_buffer(&weights_bytes, &Device::Cpu)?
            .into_iter()
            .map(|(name, tensor)| Ok((name, tensor.to_dtype(DType::F32)?)))
            .collect::<Result<HashMap<_, _>, candle_core::Error>>()?;
        let [
            (_, config_sha256),
            (_, tokenizer_sha256),
            (_, weights_sha256),
        ] = digests;
        Ok(Self {
            dir: dir.to_owned(),
            config,
            config_sha256,
            tokenizer,
            tokenizer_sha256,
            tensors,
            weights_sha256,
            meta,
        })
    }

    /// Every tensor the model reads that the weights lack or hold at another shape; with
    /// `head` false, the score head may be absent (a base encoder).
    pub fn problems(&self, head: bool) -> Result<Vec<String>, EncoderError> {
        let names: std::collections::HashSet<String> = self.tensors.keys().cloned().collect();
        let expected = expected_tensors(&self.config, move |name| names.contains(name))?;
        let mut problems = Vec::new();
        for (name, shape) in expected {
            let is_head = name.starts_with(&format!("{}.", DecisionModel::HEAD));
            match self.tensors.get(&name) {
                None if is_head && !head => {}
                None => problems.push(format!("tensor {name}")),
                Some(t) if t.shape() != &shape => problems.push(format!(
                    "tensor {name} of shape {:?} (expected {:?}: another base?)",
                    t.dims(),
                    shape.dims()
                )),
                Some(_) => {}
            }
        }
        Ok(problems)
    }

    /// The checkpoint's metadata, refused unless it is trained (has a `decision.json`) and
    /// complete.
    pub fn trained_meta(&self) -> Result<&CheckpointMeta, EncoderError> {
        let Some(meta) = &self.meta else {
            return Err(EncoderError::NotTrained {
                dir: self.dir.clone(),
            });
        };
        let problems = self.problems(true)?;
        if !problems.is_empty() {
            return Err(EncoderError::Incomplete {
                dir: self.dir.clone(),
                missing: problems,
            });
        }
        Ok(meta)
    }

    /// The decision model for serving: the checkpoint must be trained and complete.
    pub fn serving_model(&self, kernels: Kernels) -> Result<DecisionModel, EncoderError> {
        self.trained_meta()?;
        let vb = VarBuilder::from_tensors(self.tensors.clone(), DType::F32, &Device::Cpu);
        Ok(DecisionModel::load(vb, &self.config, kernels)?)
    }
}

/// The checkpoint's metadata, `None` for a base encoder (no metadata file); refused when it
/// does not parse or is of another format version.
fn read_meta(dir: &Path) -> Result<Option<CheckpointMeta>, EncoderError> {
    let meta = match fs::read_to_string(dir.join(META_FILE)) {
        Ok(text) => Some(serde_json::from_str::<CheckpointMeta>(&text).map_err(|e| {
            EncoderError::Metadata {
                path: dir.join(META_FILE),
                message: e.to_string(),
            }
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(EncoderError::io(dir.join(META_FILE))(e)),
    };
    if let Some(meta) = &meta
        && meta.format_version != FORMAT_VERSION
    {
        return Err(EncoderError::Metadata {
            path: dir.join(META_FILE),
            message: format!(
                "format_version {} is not the version this build reads ({FORMAT_VERSION})",
                meta.format_version
            ),
        });
    }
    Ok(meta)
}

/// Refuses files whose digests are not the ones the metadata records.
fn check_digests(
    dir: &Path,
    meta: &CheckpointMeta,
    digests: &[(&str, String); 3],
) -> Result<(), EncoderError> {
    let recorded = [
        &meta.config_sha256,
        &meta.tokenizer_sha256,
        &meta.weights_sha256,
    ];
    let wrong: Vec<String> = digests
        .iter()
        .zip(recorded)
        .filter(|((_, found), recorded)| found != *recorded)
        .map(|((name, found), recorded)| {
            format!("{name} has sha256 {found}, but {META_FILE} records {recorded}")
        })
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    Err(EncoderError::Mismatch {
        dir: dir.to_owned(),
        message: format!(
            "files do not belong to this checkpoint (copied from another base, or \
             half-written): {}",
            wrong.join("; ")
        ),
    })
}

/// What a new decision checkpoint is made of.
#[derive(Debug)]
pub struct NewCheckpoint<'a> {
    pub name: &'a str,
    /// The encoder whose config and tokenizer the checkpoint carries.
    pub base: &'a EncoderFiles,
    pub base_identity: BaseIdentity,
    /// The weights, serialised (see [`safetensors_bytes`]), score head included.
    pub weights: &'a [u8],
    pub weights_dtype: &'a str,
    pub training: serde_json::Value,
}

/// Write a decision checkpoint into `out`: config and tokenizer copied from the base, the
/// weights, and `decision.json` last, naming every file's digest, so a checkpoint cut short
/// by a kill is refused by [`EncoderFiles::open`] rather than served.
pub fn write_checkpoint(
    out: &Path,
    new: NewCheckpoint<'_>,
) -> Result<CheckpointMeta, EncoderError> {
    let read = |name: &str| {
        let path = new.base.dir.join(name);
        fs::read(&path).map_err(EncoderError::io(path))
    };
    let config = read(CONFIG_FILE)?;
    let tokenizer = read(TOKENIZER_FILE)?;
    write_atomic(&out.join(CONFIG_FILE), &config)?;
    write_atomic(&out.join(TOKENIZER_FILE), &tokenizer)?;
    write_atomic(&out.join(WEIGHTS_FILE), new.weights)?;
    let meta = CheckpointMeta {
        format_version: FORMAT_VERSION,
        name: new.name.to_owned(),
        family: new.base.config.family().to_owned(),
        base: new.base_identity,
        config_sha256: sha256_hex(&config),
        tokenizer_sha256: sha256_hex(&tokenizer),
        weights_sha256: sha256_hex(new.weights),
        weights_dtype: new.weights_dtype.to_owned(),
        training: new.training,
    };
    let text = serde_json::to_string_pretty(&meta).map_err(|e| EncoderError::Metadata {
        path: out.join(META_FILE),
        message: e.to_string(),
    })?;
    write_atomic(&out.join(META_FILE), format!("{text}\n").as_bytes())?;
    Ok(meta)
}

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Write `bytes` to `path` through a temporary file in the same directory renamed into place,
/// so a reader never sees half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), EncoderError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(EncoderError::write(dir))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written.map_err(EncoderError::write(path))
}

/// Serialise tensors as safetensors bytes at `dtype`, names sorted so equal weights give
/// equal files.
pub fn safetensors_bytes(
    tensors: &HashMap<String, Tensor>,
    dtype: DType,
) -> Result<Vec<u8>, EncoderError> {
    let mut converted: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(name, t)| Ok((name.clone(), t.to_dtype(dtype)?.contiguous()?)))
        .collect::<Result<_, candle_core::Error>>()?;
    converted.sort_by(|a, b| a.0.cmp(&b.0));
    safetensors::serialize(converted, None)
        .map_err(|e| EncoderError::Candle(candle_core::Error::Msg(e.to_string())))
}
