//! The run state under `OUTPUT/run/`: everything a killed run needs to continue exactly.
//!
//! Each save goes into a fresh `step-NNNNNN/` directory (f32 weights, AdamW moments, and
//! `state.json` with the step, the data stream's epoch and position, and the history); only
//! when all three are on disk is the `latest` pointer rewritten (atomically) to name it, and
//! older step directories removed. A kill at any moment leaves `latest` naming a complete
//! state.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use candle_core::{DType, Device, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use ruling_encoder::checkpoint::{safetensors_bytes, write_atomic};
use serde::{Deserialize, Serialize};

const RUN_DIR: &str = "run";
const LATEST: &str = "latest";
const WEIGHTS: &str = "weights.safetensors";
const OPTIMISER: &str = "optimiser.safetensors";
const STATE: &str = "state.json";

/// One validation's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    pub step: u64,
    pub loss: f64,
    pub accuracy: f64,
    pub expected_calibration_error: f64,
    pub coverage_at_5pct_error: f64,
    pub questions: usize,
    /// Accuracy per record family.
    pub families: std::collections::BTreeMap<String, f64>,
    #[serde(default)]
    pub train_loss: Option<f64>,
    #[serde(default)]
    pub tokens_per_second: Option<f64>,
}

/// A validation's questions, added one at a time as they are scored.
#[derive(Debug, Default)]
pub struct Tally {
    losses: Vec<f64>,
    confidences: Vec<f64>,
    correct: Vec<bool>,
    /// Right and total per record family.
    families: std::collections::BTreeMap<String, (usize, usize)>,
}

impl Tally {
    pub fn add(&mut self, family: &str, loss: f64, confidence: f64, right: bool) {
        self.losses.push(loss);
        self.confidences.push(confidence);
        self.correct.push(right);
        let entry = self.families.entry(family.to_owned()).or_default();
        entry.0 += usize::from(right);
        entry.1 += 1;
    }

    /// Mean loss, accuracy, ECE over the evaluator's bins and coverage at 5% error.
    pub fn validation(self, step: u64) -> anyhow::Result<Validation> {
        let n = self.losses.len().max(1) as f64;
        Ok(Validation {
            step,
            loss: self.losses.iter().sum::<f64>() / n,
            accuracy: self.correct.iter().filter(|c| **c).count() as f64 / n,
            expected_calibration_error: ruling_calibration::expected_calibration_error(
                &self.confidences,
                &self.correct,
                ruling_calibration::temperature::FIT_ECE_BINS,
            )?,
            coverage_at_5pct_error: ruling_calibration::coverage_at_error(
                &self.confidences,
                &self.correct,
                0.05,
            )?,
            questions: self.losses.len(),
            families: self
                .families
                .into_iter()
                .map(|(family, (right, total))| (family, right as f64 / total.max(1) as f64))
                .collect(),
            train_loss: None,
            tokens_per_second: None,
        })
    }
}

/// A trainer's bookkeeping, with the settings `C` that decide its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState<C> {
    pub config: C,
    /// Optimiser steps taken.
    pub step: u64,
    /// The data stream: which epoch, and how many of its batches have been used.
    pub epoch: u64,
    pub cursor: usize,
    pub tokens_seen: u64,
    pub best_loss: f64,
    pub best_step: u64,
    pub history: Vec<Validation>,
}

impl<C> RunState<C> {
    pub fn new(config: C) -> Self {
        Self {
            config,
            step: 0,
            epoch: 0,
            cursor: 0,
            tokens_seen: 0,
            best_loss: f64::MAX,
            best_step: 0,
            history: Vec::new(),
        }
    }
}

/// A saved state, read back.
#[derive(Debug)]
pub struct Saved<C> {
    pub state: RunState<C>,
    pub weights: HashMap<String, Tensor>,
    pub optimiser: HashMap<String, Tensor>,
}

/// The best weights so far, kept in the run directory so the checkpoint can always be rewritten
/// from them.
pub fn best_weights(output: &Path) -> PathBuf {
    output.join(RUN_DIR).join("best.safetensors")
}

/// The names of the listed fields that differ between two configs, for
/// [`RunConfig::differences`]. Floats are compared exactly: a resumed run continues only with
/// the very settings it started with.
macro_rules! differing_fields {
    ($a:expr, $b:expr, $($field:ident),+ $(,)?) => {{
        let mut out = Vec::new();
        $(
            #[allow(clippy::float_cmp)]
            if $a.$field != $b.$field {
                out.push(stringify!($field));
            }
        )+
        out
    }};
}
pub(crate) use differing_fields;

/// A trainer's settings: a resumed run must match them in every field but the step count.
pub trait RunConfig: serde::de::DeserializeOwned {
    /// The fields `other` sets differently, the step count aside.
    fn differences(&self, other: &Self) -> Vec<&'static str>;
}

/// The saved state to resume with `config`, if `output` holds one, carrying `config` (which
/// may only have more steps). A run saved with other settings is refused naming them, and so
/// is an output that holds a finished product (the file `product`, described as `what`) but no
/// run state.
pub fn resume<C: RunConfig + Clone>(
    output: &Path,
    config: &C,
    product: &str,
    what: &str,
) -> anyhow::Result<Option<Saved<C>>> {
    let mut saved = latest::<C>(output)?;
    match &mut saved {
        Some(saved) => {
            let differences = saved.state.config.differences(config);
            if !differences.is_empty() {
                anyhow::bail!(
                    "{} holds a run with different {}: resume it with the settings it was \
                     started with, or choose another --output",
                    output.display(),
                    differences.join(", ")
                );
            }
            saved.state.config = config.clone();
        }
        None if output.join(product).exists() => anyhow::bail!(
            "{} already holds {what} but no run state to resume; choose another --output",
            output.display()
        ),
        None => {}
    }
    Ok(saved)
}

/// The state `latest` names, if the output has one.
pub fn latest<C: serde::de::DeserializeOwned>(output: &Path) -> anyhow::Result<Option<Saved<C>>> {
    let run = output.join(RUN_DIR);
    let pointer = run.join(LATEST);
    let name = match std::fs::read_to_string(&pointer) {
        Ok(name) => name.trim().to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", pointer.display())),
    };
    let dir = run.join(&name);
    let missing: Vec<&str> = [WEIGHTS, OPTIMISER, STATE]
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() || !best_weights(output).is_file() {
        anyhow::bail!(
            "the run state {} is incomplete (it lacks {}); remove {} to start over",
            dir.display(),
            if missing.is_empty() {
                "the best weights".to_owned()
            } else {
                missing.join(", ")
            },
            run.display()
        );
    }
    let state: RunState<C> = serde_json::from_str(
        &std::fs::read_to_string(dir.join(STATE))
            .with_context(|| format!("reading {}", dir.join(STATE).display()))?,
    )
    .with_context(|| format!("parsing {}", dir.join(STATE).display()))?;
    let load = |file: &str| {
        candle_core::safetensors::load(dir.join(file), &Device::Cpu)
            .with_context(|| format!("reading {}", dir.join(file).display()))
    };
    Ok(Some(Saved {
        state,
        weights: load(WEIGHTS)?,
        optimiser: load(OPTIMISER)?,
    }))
}

/// Save the state at its step and point `latest` at it.
pub fn save<C: Serialize>(
    output: &Path,
    state: &RunState<C>,
    weights: &HashMap<String, Tensor>,
    optimiser: &HashMap<String, Tensor>,
) -> anyhow::Result<()> {
    let run = output.join(RUN_DIR);
    let name = format!("step-{:06}", state.step);
    let dir = run.join(&name);
    write_atomic(&dir.join(WEIGHTS), &safetensors_bytes(weights, DType::F32)?)?;
    write_atomic(
        &dir.join(OPTIMISER),
        &safetensors_bytes(optimiser, DType::F32)?,
    )?;
    write_atomic(
        &dir.join(STATE),
        format!("{}\n", serde_json::to_string_pretty(state)?).as_bytes(),
    )?;
    write_atomic(&run.join(LATEST), format!("{name}\n").as_bytes())?;
    for entry in std::fs::read_dir(&run)? {
        let entry = entry?;
        let other = entry.file_name().to_string_lossy().into_owned();
        if other.starts_with("step-") && other != name && entry.path().is_dir() {
            std::fs::remove_dir_all(entry.path())
                .with_context(|| format!("removing the old state {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// One validation as a log line.
pub fn log_validation(entry: &Validation) {
    let families: Vec<String> = entry
        .families
        .iter()
        .map(|(f, a)| format!("{f} {a:.3}"))
        .collect();
    eprintln!(
        "step {:>5}: validation loss {:.4}, accuracy {:.3}, ECE {:.3}, coverage@5% {:.3} over {} \
         questions{}; {}",
        entry.step,
        entry.loss,
        entry.accuracy,
        entry.expected_calibration_error,
        entry.coverage_at_5pct_error,
        entry.questions,
        entry
            .train_loss
            .map(|l| format!(", train loss {l:.4}"))
            .unwrap_or_default(),
        families.join(", ")
    );
}

/// The training progress bar, resumed at `done`.
pub fn progress(total: u64, done: u64) -> ProgressBar {
    let bar = self::bar(total, done, "steps");
    bar.set_prefix("training");
    bar
}

/// A progress bar counting `unit`, with a message and an ETA.
pub fn bar(total: u64, done: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(total).with_position(done);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{prefix}} [{{bar:30}}] {{pos}}/{{len}} {unit}  {{msg}}  {{elapsed_precise}} ETA {{eta_precise}}"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar
}
