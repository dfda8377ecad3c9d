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
use ruling_encoder::checkpoint::{safetensors_bytes, write_atomic};
use ruling_encoder::train::{AdamW, Trainable};
use serde::{Deserialize, Serialize};

use super::{TrainConfig, Validation};

const RUN_DIR: &str = "run";
const LATEST: &str = "latest";
const WEIGHTS: &str = "weights.safetensors";
const OPTIMISER: &str = "optimiser.safetensors";
const STATE: &str = "state.json";

/// The trainer's bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub config: TrainConfig,
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

impl RunState {
    pub fn new(config: TrainConfig) -> Self {
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
pub struct Saved {
    pub state: RunState,
    pub weights: HashMap<String, Tensor>,
    pub optimiser: HashMap<String, Tensor>,
}

/// The best weights so far, kept in the run directory so the checkpoint can always be rewritten
/// from them.
pub fn best_weights(output: &Path) -> PathBuf {
    output.join(RUN_DIR).join("best.safetensors")
}

/// The state `latest` names, if the output has one.
pub fn latest(output: &Path) -> anyhow::Result<Option<Saved>> {
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
    let state: RunState = serde_json::from_str(
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
pub fn save(
    output: &Path,
    state: &RunState,
    trainable: &Trainable,
    optimiser: &AdamW,
) -> anyhow::Result<()> {
    let run = output.join(RUN_DIR);
    let name = format!("step-{:06}", state.step);
    let dir = run.join(&name);
    write_atomic(
        &dir.join(WEIGHTS),
        &safetensors_bytes(&trainable.tensors()?, DType::F32)?,
    )?;
    write_atomic(
        &dir.join(OPTIMISER),
        &safetensors_bytes(&optimiser.state(trainable.vars()), DType::F32)?,
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
