//! What training a decision model needs from the tensor side: the model's weights as trainable
//! variables, the loss of a batch of packed records, and AdamW with a state that can be saved
//! and restored exactly.
//!
//! The loss is the seed's (`ruling/decision_train.py`): cross-entropy between each question's
//! softmax over its slots and its target distribution (soft where raters disagreed, one-hot
//! otherwise), a proper scoring rule, weighted by the record's weight and averaged over the
//! questions of the batch. The model runs its differentiable kernels (`Kernels::
//! Differentiable`): candle's fused layer norm and softmax carry no gradient.

use std::collections::HashMap;

use candle_core::{D, DType, Device, Result, Tensor, Var};
use candle_nn::VarBuilder;

use crate::checkpoint::EncoderFiles;
use crate::model::{BatchTensors, DecisionModel, FamilyConfig};
use crate::ops::Kernels;
use crate::pack::Packed;

/// Where a padded slot's score comes from: low enough that its probability is exactly zero.
const ABSENT: f32 = -1e9;

/// A decision model whose weights are trainable variables, but for those `frozen` names, which
/// stay constants and take no gradient.
#[derive(Debug)]
pub struct Trainable {
    model: DecisionModel,
    config: FamilyConfig,
    /// Sorted by name, so every walk over them (gradient norm, updates, saving) has one order.
    vars: Vec<(String, Var)>,
    frozen: HashMap<String, Tensor>,
}

/// Which weights a run keeps fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Freeze {
    /// Train every weight.
    #[default]
    Nothing,
    /// Keep the token embedding table fixed: on a CPU its dense gradient and optimiser update
    /// (a third of MiniLM's weights) cost more than the rest of the backward pass, and the
    /// table is what a few thousand records move least.
    TokenEmbeddings,
}

impl Freeze {
    pub fn keeps(self, name: &str) -> bool {
        match self {
            Self::Nothing => false,
            Self::TokenEmbeddings => {
                name.ends_with("word_embeddings.weight") || name.ends_with("tok_embeddings.weight")
            }
        }
    }
}

impl Trainable {
    /// The encoder's weights as variables, with a zero score head where the files have none.
    pub fn new(files: &EncoderFiles, freeze: Freeze) -> Result<Self> {
        Self::from_tensors(&files.config, &files.tensors, freeze)
    }

    pub fn from_tensors(
        config: &FamilyConfig,
        tensors: &HashMap<String, Tensor>,
        freeze: Freeze,
    ) -> Result<Self> {
        let mut available = HashMap::new();
        let mut frozen = HashMap::new();
        for (name, tensor) in tensors {
            let tensor = tensor.to_dtype(DType::F32)?;
            if freeze.keeps(name) {
                frozen.insert(name.clone(), tensor);
            } else {
                available.insert(name.clone(), tensor);
            }
        }
        let backend = std::sync::Arc::new(TrainBackend {
            available: std::sync::Mutex::new(available),
            vars: std::sync::Mutex::new(HashMap::new()),
            frozen: frozen.clone(),
        });
        let vb = VarBuilder::from_backend(
            Box::new(SharedTrainBackend(backend.clone())),
            DType::F32,
            Device::Cpu,
        );
        let model = DecisionModel::load(vb, config, Kernels::Differentiable)?;
        let mut vars: Vec<(String, Var)> = backend
            .vars
            .lock()
            .map_err(|_| candle_core::Error::Msg("the variables are poisoned".into()))?
            .iter()
            .map(|(name, var)| (name.clone(), var.clone()))
            .collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        // What the model never asked for (a masked-LM decoder bias) is kept as it was, so a
        // saved checkpoint still holds it.
        let unused = std::mem::take(
            &mut *backend
                .available
                .lock()
                .map_err(|_| candle_core::Error::Msg("the variables are poisoned".into()))?,
        );
        frozen.extend(unused);
        Ok(Self {
            model,
            config: config.clone(),
            vars,
            frozen,
        })
    }

    pub fn model(&self) -> &DecisionModel {
        &self.model
    }

    pub fn config(&self) -> &FamilyConfig {
        &self.config
    }

    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }

    /// The current weights, by name, frozen ones included.
    pub fn tensors(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = self.frozen.clone();
        for (name, var) in &self.vars {
            // A copy: a variable is updated in place, and what was saved must not change.
            out.insert(name.clone(), var.as_tensor().copy()?);
        }
        Ok(out)
    }

    /// Overwrite every weight from `tensors`, which must hold each one at its shape.
    pub fn restore(&self, tensors: &HashMap<String, Tensor>) -> Result<()> {
        for (name, var) in &self.vars {
            let tensor = tensors
                .get(name)
                .ok_or_else(|| candle_core::Error::Msg(format!("the saved weights lack {name}")))?;
            var.set(tensor)?;
        }
        Ok(())
    }
}

/// Trainable weights from a map of variables (made on first request, with the request's
/// initialisation, for weights the files lack: the score head), frozen ones from constants.
struct TrainBackend {
    /// Weights from the files not yet asked for.
    available: std::sync::Mutex<HashMap<String, Tensor>>,
    vars: std::sync::Mutex<HashMap<String, Var>>,
    frozen: HashMap<String, Tensor>,
}

struct SharedTrainBackend(std::sync::Arc<TrainBackend>);

impl candle_nn::var_builder::SimpleBackend for SharedTrainBackend {
    fn get(
        &self,
        shape: candle_core::Shape,
        name: &str,
        init: candle_nn::Init,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        if let Some(tensor) = self.0.frozen.get(name) {
            return Ok(tensor.clone());
        }
        let mut vars = self
            .0
            .vars
            .lock()
            .map_err(|_| candle_core::Error::Msg("the variables are poisoned".into()))?;
        let var = match vars.get(name) {
            Some(var) => var.clone(),
            None => {
                let loaded = self
                    .0
                    .available
                    .lock()
                    .map_err(|_| candle_core::Error::Msg("the variables are poisoned".into()))?
                    .remove(name);
                let var = match loaded {
                    Some(tensor) => Var::from_tensor(&tensor)?,
                    None => init.var(shape.clone(), dtype, device)?,
                };
                vars.insert(name.to_owned(), var.clone());
                var
            }
        };
        if var.shape() != &shape {
            candle_core::bail!(
                "weight {name} has shape {:?}, the model expects {:?}",
                var.dims(),
                shape.dims()
            );
        }
        Ok(var.as_tensor().clone())
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> Result<Tensor> {
        candle_core::bail!("weight {name} requested without a shape")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.0.frozen.contains_key(name)
            || self
                .0
                .vars
                .lock()
                .map(|v| v.contains_key(name))
                .unwrap_or(false)
            || self
                .0
                .available
                .lock()
                .map(|v| v.contains_key(name))
                .unwrap_or(false)
    }
}

/// One record ready to train on: its packed layout and, per packed question, the target
/// probability of each slot in packed order.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub packed: Packed,
    pub targets: Vec<Vec<f32>>,
    /// Each packed question's type (which temperature calibrates it).
    pub kinds: Vec<ruling_calibration::AnswerType>,
    pub weight: f32,
}

/// A batch of examples laid end to end, with its targets as tensors.
#[derive(Debug, Clone)]
pub struct TrainBatch {
    pub tensors: BatchTensors,
    slots: Tensor,
    /// `[questions * widest]` indices into the slot scores, with the absent score appended.
    pick: Tensor,
    /// `[questions, widest]`.
    targets: Tensor,
    /// `[questions]`.
    weights: Tensor,
    pub questions: usize,
    pub widest: usize,
    pub tokens: usize,
}

impl TrainBatch {
    pub fn new(examples: &[&Example], device: &Device) -> Result<Self> {
        let rows: Vec<&Packed> = examples.iter().map(|e| &e.packed).collect();
        // Row by row is a few large products, but its mask is a row's length squared: a row
        // whose state is read in windows (thousands of tokens) trains part by part instead.
        let windowed = rows.iter().any(|p| {
            p.segments
                .iter()
                .any(|s| matches!(s, crate::pack::Segment::State(w) if *w > 0))
        });
        let tensors = if windowed {
            BatchTensors::new(&rows, device)?
        } else {
            BatchTensors::per_row(&rows, device)?
        };
        let slots = tensors.slot_indices(&rows);
        let total = slots.len();
        let widest = examples
            .iter()
            .flat_map(|e| e.targets.iter().map(Vec::len))
            .max()
            .unwrap_or(1);
        let mut pick = Vec::new();
        let mut targets = Vec::new();
        let mut weights = Vec::new();
        let mut cursor = 0u32;
        for example in examples {
            for target in &example.targets {
                for o in 0..widest {
                    if o < target.len() {
                        pick.push(cursor + o as u32);
                        targets.push(target[o]);
                    } else {
                        pick.push(total as u32);
                        targets.push(0.0);
                    }
                }
                cursor += target.len() as u32;
                weights.push(example.weight);
            }
        }
        let questions = weights.len();
        let tokens = rows.iter().map(|p| p.len()).sum();
        Ok(Self {
            tensors,
            slots: Tensor::from_vec(slots, total, device)?,
            pick: Tensor::from_vec(pick, questions * widest, device)?,
            targets: Tensor::from_vec(targets, (questions, widest), device)?,
            weights: Tensor::from_vec(weights, questions, device)?,
            questions,
            widest,
            tokens,
        })
    }

    /// Log-probabilities `[questions, widest]` (padding at about -1e9).
    pub fn log_probs(&self, model: &DecisionModel) -> Result<Tensor> {
        let scores = model.slot_scores(&self.tensors, &self.slots)?;
        let absent = Tensor::new(&[ABSENT], scores.device())?;
        let padded = Tensor::cat(&[&scores, &absent], 0)?
            .index_select(&self.pick, 0)?
            .reshape((self.questions, self.widest))?;
        let max = padded.max_keepdim(D::Minus1)?.detach();
        let shifted = padded.broadcast_sub(&max)?;
        let normaliser = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
        shifted.broadcast_sub(&normaliser)
    }

    /// Per-question cross-entropy `[questions]` against the targets.
    pub fn cross_entropy(&self, log_probs: &Tensor) -> Result<Tensor> {
        (log_probs * &self.targets)?.sum(D::Minus1)?.neg()
    }

    /// The weighted mean cross-entropy of the batch: what training minimises.
    pub fn loss(&self, model: &DecisionModel) -> Result<Tensor> {
        let per_question = self.cross_entropy(&self.log_probs(model)?)?;
        let total = self.weights.sum_all()?;
        (per_question * &self.weights)?
            .sum_all()?
            .broadcast_div(&total)
    }

    pub fn targets(&self) -> &Tensor {
        &self.targets
    }

    pub fn weights(&self) -> &Tensor {
        &self.weights
    }
}

/// AdamW's settings for one group of weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupSettings {
    pub learning_rate: f64,
    pub weight_decay: f64,
}

/// AdamW (Loshchilov and Hutter, 2019) with decoupled weight decay, two groups (the fresh head
/// and the pretrained encoder, which learn at different rates), and a moment state that saves
/// and restores bit for bit.
#[derive(Debug)]
pub struct AdamW {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Updates taken so far (for bias correction).
    pub step: u64,
    first: Vec<Tensor>,
    second: Vec<Tensor>,
}

impl AdamW {
    pub fn new(vars: &[(String, Var)]) -> Result<Self> {
        let zeros = |vars: &[(String, Var)]| {
            vars.iter()
                .map(|(_, v)| v.as_tensor().zeros_like())
                .collect::<Result<Vec<_>>>()
        };
        Ok(Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            step: 0,
            first: zeros(vars)?,
            second: zeros(vars)?,
        })
    }

    /// One update of every variable from `grads`, after scaling them so their global norm is
    /// at most `max_norm`; `settings` picks each variable's group by its name. Returns the
    /// norm before clipping.
    pub fn update(
        &mut self,
        vars: &[(String, Var)],
        grads: &candle_core::backprop::GradStore,
        max_norm: f64,
        settings: impl Fn(&str) -> GroupSettings,
    ) -> Result<f64> {
        let mut squares = 0f64;
        let gradients: Vec<Option<&Tensor>> = vars.iter().map(|(_, v)| grads.get(v)).collect();
        for g in gradients.iter().flatten() {
            squares += f64::from(g.sqr()?.sum_all()?.to_scalar::<f32>()?);
        }
        let norm = squares.sqrt();
        let clip = if norm > max_norm {
            max_norm / (norm + 1e-6)
        } else {
            1.0
        };
        self.step += 1;
        let t = self.step as i32;
        let correction1 = 1.0 - self.beta1.powi(t);
        let correction2 = 1.0 - self.beta2.powi(t);
        for (i, ((name, var), gradient)) in vars.iter().zip(gradients).enumerate() {
            let Some(gradient) = gradient else { continue };
            let g = (gradient * clip)?;
            let group = settings(name);
            self.first[i] = ((&self.first[i] * self.beta1)? + (&g * (1.0 - self.beta1))?)?;
            self.second[i] = ((&self.second[i] * self.beta2)? + (g.sqr()? * (1.0 - self.beta2))?)?;
            let m = (&self.first[i] / correction1)?;
            let v = (&self.second[i] / correction2)?;
            let step = (m / (v.sqrt()? + self.eps)?)?;
            let theta = var.as_tensor();
            let decayed = (theta * (1.0 - group.learning_rate * group.weight_decay))?;
            var.set(&(decayed - (step * group.learning_rate)?)?)?;
        }
        Ok(norm)
    }

    /// The moments by variable name (`first.NAME`, `second.NAME`), for saving.
    pub fn state(&self, vars: &[(String, Var)]) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for (i, (name, _)) in vars.iter().enumerate() {
            out.insert(format!("first.{name}"), self.first[i].clone());
            out.insert(format!("second.{name}"), self.second[i].clone());
        }
        out
    }

    /// Moments saved by [`AdamW::state`], and the step they were saved at.
    pub fn restore(
        vars: &[(String, Var)],
        state: &HashMap<String, Tensor>,
        step: u64,
    ) -> Result<Self> {
        let get = |key: String| {
            state
                .get(&key)
                .cloned()
                .ok_or_else(|| candle_core::Error::Msg(format!("the optimiser state lacks {key}")))
        };
        let mut first = Vec::with_capacity(vars.len());
        let mut second = Vec::with_capacity(vars.len());
        for (name, _) in vars {
            first.push(get(format!("first.{name}"))?);
            second.push(get(format!("second.{name}"))?);
        }
        Ok(Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            step,
            first,
            second,
        })
    }
}

/// The learning rate at `step` (1-based): linear warm-up from 1% of `peak`, then cosine decay
/// to 5% of `peak` at `total`.
pub fn schedule(peak: f64, step: u64, warmup: u64, total: u64) -> f64 {
    if step <= warmup && warmup > 0 {
        let fraction = step as f64 / warmup as f64;
        return peak * (0.01 + 0.99 * fraction);
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let progress = ((step - warmup.min(step)) as f64 / span).min(1.0);
    let floor = peak * 0.05;
    floor + (peak - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_warms_up_then_decays_to_its_floor() {
        assert!((schedule(1.0, 0, 10, 100) - 0.01).abs() < 1e-12);
        assert!((schedule(1.0, 10, 10, 100) - 1.0).abs() < 1e-12);
        assert!(schedule(1.0, 55, 10, 100) < 1.0);
        assert!((schedule(1.0, 100, 10, 100) - 0.05).abs() < 1e-12);
        assert!((schedule(1.0, 200, 10, 100) - 0.05).abs() < 1e-12);
    }
}
