//! The decision model: an encoder family and the linear head that scores each option slot.
//!
//! Families are one file each (`bert.rs`, `modernbert.rs`); this module only dispatches to
//! them by the checkpoint's `model_type`, and adds the head. The head is one linear unit on a
//! slot's hidden state, zero-initialised, so an untrained model answers every question
//! uniformly; a softmax over a question's slots is its answer.

use candle_core::{DType, Device, Module, Result, Shape, Tensor};
use candle_nn::{Init, VarBuilder};
use serde::Deserialize;

use crate::bert::{Bert, BertConfig};
use crate::error::EncoderError;
use crate::layout::LayoutPlan;
use crate::modernbert::{ModernBert, ModernBertConfig};
use crate::ops::{AttentionMask, GroupedMask};
use crate::ops::{Kernels, Linear};
use crate::pack::Packed;

/// The encoder family and its configuration, read from a checkpoint's `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub enum FamilyConfig {
    Bert(BertConfig),
    ModernBert(ModernBertConfig),
}

#[derive(Deserialize)]
struct ModelType {
    model_type: Option<String>,
}

impl FamilyConfig {
    /// The families this crate implements, as `config.json` names them.
    pub const SUPPORTED: &'static str = "bert, modernbert";

    pub fn from_json(text: &str) -> std::result::Result<Self, EncoderError> {
        let config = |e: serde_json::Error| EncoderError::Config(e.to_string());
        let kind: ModelType = serde_json::from_str(text).map_err(config)?;
        match kind.model_type.as_deref() {
            Some("bert") => Ok(Self::Bert(serde_json::from_str(text).map_err(config)?)),
            Some("modernbert") => Ok(Self::ModernBert(
                serde_json::from_str(text).map_err(config)?,
            )),
            other => Err(EncoderError::UnsupportedFamily {
                found: other.unwrap_or("(no model_type)").to_owned(),
            }),
        }
    }

    /// The family's name, as `config.json` writes it.
    pub fn family(&self) -> &'static str {
        match self {
            Self::Bert(_) => "bert",
            Self::ModernBert(_) => "modernbert",
        }
    }

    pub fn hidden_size(&self) -> usize {
        match self {
            Self::Bert(c) => c.hidden_size,
            Self::ModernBert(c) => c.hidden_size,
        }
    }

    /// Rows of the position table (BERT) or the longest context the model was trained for
    /// (ModernBERT's rotary positions).
    pub fn max_positions(&self) -> usize {
        match self {
            Self::Bert(c) => c.max_position_embeddings,
            Self::ModernBert(c) => c.max_position_embeddings,
        }
    }
}

/// A loaded encoder stack of either family.
#[derive(Debug, Clone)]
pub enum Encoder {
    Bert(Bert),
    ModernBert(ModernBert),
}

impl Encoder {
    pub fn load(vb: VarBuilder<'_>, config: &FamilyConfig, kernels: Kernels) -> Result<Self> {
        Ok(match config {
            FamilyConfig::Bert(c) => Self::Bert(Bert::load(vb, c, kernels)?),
            FamilyConfig::ModernBert(c) => Self::ModernBert(ModernBert::load(vb, c, kernels)?),
        })
    }

    /// Hidden states `[batch, n, hidden]` under explicit positions and an attention mask.
    pub fn forward(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        mask: &AttentionMask,
    ) -> Result<Tensor> {
        match self {
            Self::Bert(m) => m.forward(tokens, positions, mask),
            Self::ModernBert(m) => m.forward(tokens, positions, mask),
        }
    }

    /// Hidden states `[m, hidden]` of the flat token indices `keep` of a one-row sequence.
    pub fn forward_at(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        mask: &AttentionMask,
        keep: &Tensor,
    ) -> Result<Tensor> {
        match self {
            Self::Bert(m) => m.forward_at(tokens, positions, mask, keep),
            Self::ModernBert(m) => crate::ops::rows_at(&m.forward(tokens, positions, mask)?, keep),
        }
    }

    /// What the score head reads from a slot's hidden state: the hidden state itself, or the
    /// family's masked-LM transform where the checkpoint has one (ModernBERT's `head`).
    fn slot_features(&self, hidden: &Tensor) -> Result<Tensor> {
        match self {
            Self::Bert(_) => Ok(hidden.clone()),
            Self::ModernBert(m) => m.slot_features(hidden),
        }
    }
}

/// The tensors of one batch on a device: every packed row laid end to end as one sequence,
/// under the layout's factored mask.
#[derive(Debug, Clone)]
pub struct BatchTensors {
    pub tokens: Tensor,
    pub positions: Tensor,
    pub mask: AttentionMask,
    /// Where each row starts in the sequence.
    pub offsets: Vec<usize>,
}

impl BatchTensors {
    /// The batch under the exact, part-by-part layout ([`LayoutPlan::new`]): for answering.
    pub fn new(rows: &[&Packed], device: &Device) -> Result<Self> {
        Self::with_plan(rows, &LayoutPlan::new(rows), device)
    }

    /// The batch under the row-by-row layout ([`LayoutPlan::per_row`]): for training.
    pub fn per_row(rows: &[&Packed], device: &Device) -> Result<Self> {
        Self::with_plan(rows, &LayoutPlan::per_row(rows), device)
    }

    fn with_plan(rows: &[&Packed], plan: &LayoutPlan, device: &Device) -> Result<Self> {
        let mut tokens = Vec::with_capacity(plan.tokens);
        let mut positions = Vec::with_capacity(plan.tokens);
        let mut offsets = Vec::with_capacity(rows.len());
        for packed in rows {
            offsets.push(tokens.len());
            tokens.extend_from_slice(&packed.tokens);
            positions.extend_from_slice(&packed.positions);
        }
        let n = tokens.len();
        Ok(Self {
            tokens: Tensor::from_vec(tokens, (1, n), device)?,
            positions: Tensor::from_vec(positions, (1, n), device)?,
            mask: AttentionMask::Grouped(GroupedMask::new(plan, device)?),
            offsets,
        })
    }

    /// The flat index of every slot of every row, rows in order, questions in order.
    pub fn slot_indices(&self, rows: &[&Packed]) -> Vec<u32> {
        rows.iter()
            .zip(&self.offsets)
            .flat_map(|(p, &offset)| p.slots.iter().flatten().map(move |&s| (offset + s) as u32))
            .collect()
    }
}

/// An encoder with its score head.
#[derive(Debug, Clone)]
pub struct DecisionModel {
    encoder: Encoder,
    score: Linear,
}

impl DecisionModel {
    /// The head's tensor prefix (`score.weight`, `score.bias`).
    pub const HEAD: &'static str = "score";

    /// Load an encoder and its head; a head the weights lack starts at zero (only a trainable
    /// `VarMap` can supply one; a checkpoint loaded for serving must have it).
    pub fn load(vb: VarBuilder<'_>, config: &FamilyConfig, kernels: Kernels) -> Result<Self> {
        let encoder = Encoder::load(vb.clone(), config, kernels)?;
        let head = vb.pp(Self::HEAD);
        let hidden = config.hidden_size();
        let weight = head.get_with_hints((1, hidden), "weight", Init::Const(0.0))?;
        let bias = head.get_with_hints(1, "bias", Init::Const(0.0))?;
        Ok(Self {
            encoder,
            score: Linear::new(weight, Some(bias)),
        })
    }

    /// A model over named tensors (as a checkpoint's weights hold them).
    pub fn from_tensors(
        tensors: std::collections::HashMap<String, Tensor>,
        config: &FamilyConfig,
        kernels: Kernels,
    ) -> Result<Self> {
        Self::load(
            VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu),
            config,
            kernels,
        )
    }

    /// One score per slot: `slots` are flat indices into the batch's sequence.
    pub fn slot_scores(&self, batch: &BatchTensors, slots: &Tensor) -> Result<Tensor> {
        let picked =
            self.encoder
                .forward_at(&batch.tokens, &batch.positions, &batch.mask, slots)?;
        let features = self.encoder.slot_features(&picked)?;
        self.score.forward(&features)?.squeeze(1)
    }

    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }
}

/// Every tensor a model of `config` reads, with its shape, found by loading it against a
/// backend that records requests. `present` answers whether the weights hold a name, which
/// decides prefixes such as BERT's optional `bert.`.
pub fn expected_tensors(
    config: &FamilyConfig,
    present: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> Result<Vec<(String, Shape)>> {
    let recorder = Recorder {
        present: Box::new(present),
        seen: std::sync::Mutex::new(Vec::new()),
    };
    let recorder = std::sync::Arc::new(recorder);
    let vb = VarBuilder::from_backend(
        Box::new(SharedRecorder(recorder.clone())),
        DType::F32,
        Device::Cpu,
    );
    DecisionModel::load(vb, config, Kernels::Differentiable)?;
    let seen = recorder
        .seen
        .lock()
        .map(|seen| seen.clone())
        .unwrap_or_default();
    Ok(seen)
}

struct Recorder {
    present: Box<dyn Fn(&str) -> bool + Send + Sync>,
    seen: std::sync::Mutex<Vec<(String, Shape)>>,
}

struct SharedRecorder(std::sync::Arc<Recorder>);

impl candle_nn::var_builder::SimpleBackend for SharedRecorder {
    fn get(&self, s: Shape, name: &str, _: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        if let Ok(mut seen) = self.0.seen.lock() {
            seen.push((name.to_owned(), s.clone()));
        }
        Tensor::zeros(s, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> Result<Tensor> {
        candle_core::bail!("the recorder cannot give {name} without a shape")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        (self.0.present)(name)
    }
}
