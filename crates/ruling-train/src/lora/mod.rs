//! `ruling-train lora`: LoRA fine-tuning of a decoder's letter readout (seed
//! `ruling/train.py`).
//!
//! Every labelled question is one example, put to the model exactly as the engine puts it at
//! inference (`DecoderEngine::question_prompt`: the same system turn, seam, codes and tail),
//! with its options in a fresh random order each time it is seen: a Choice shuffled, a Noul or
//! Score either way round. The model reads the whole prompt; only the answer position goes
//! through the head, and only the shown codes' rows of it. The loss is in [`objective`].
//!
//! Only the adapter's A and B matrices train. The base stays as loaded below the lowest
//! adapted layer; from there up its matrices are dequantized to f32, because candle's
//! quantized matmul (like its fused norm, rotary and softmax kernels) passes no gradient.
//!
//! AdamW, linear warm-up and cosine decay, gradient clipping, length-grouped deterministic
//! batches; validation (loss, accuracy, ECE, coverage at 5% error) every `--eval-every`
//! steps, the best adapter by validation loss written atomically; the run state saved at
//! every validation, so a killed run resumes to bit-identical weights with the same command.
//! At the end one temperature per answer type is fitted on the validation questions and
//! written beside the adapter as `calibration.json`, naming the adapter's digest.
//!
//! The seed warns that a learning rate of 1e-4 collapses the readout toward uniform answers;
//! the default is 1e-5 (docs/lora.md has what this trainer measured).

mod objective;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use candle_core::{Device, Tensor, Var};
use ruling_backend::{DecoderEngine, EngineOptions, QuestionPrompt};
use ruling_calibration::{AnswerType, argmax_or_first};
use ruling_candle::lora::{ADAPTER_FORMAT, SplitMix, adapter_bytes};
use ruling_candle::{
    Adapter, AdapterMeta, CandleBackend, LoraConfig, LoraWeights, Projection, WeightDtype,
};
use ruling_corpus::Record;
use ruling_encoder::checkpoint::write_atomic;
use ruling_encoder::train::{AdamW, GroupSettings, schedule};
use ruling_schema::{Capabilities, QuestionKind, ValidRequest};
use serde::{Deserialize, Serialize};

use crate::data::{self, DataArgs, DataFile};
use crate::state::{self, Validation};
use crate::steps;
use objective::{Targets, Terms};

type RunState = state::RunState<TrainConfig>;

/// The adapter file in the output directory.
pub const ADAPTER_FILE: &str = "adapter.safetensors";
/// The calibration fitted for the adapter, beside it.
pub const CALIBRATION_FILE: &str = "calibration.json";
/// The run's settings and validation history, rewritten at every validation.
pub const TRAINING_FILE: &str = "training.json";

/// Arguments of `ruling-train lora`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoraArgs {
    /// The decoder to adapt: a catalog name, `hf:org/repo`, a `.gguf` file or a model
    /// directory, loaded exactly as `ruling-serve --model` loads it.
    #[arg(long, default_value = "smollm2-135m")]
    pub base: String,
    /// Where the adapter goes (and the run state, under `run/`). Rerunning the same command
    /// resumes a killed run.
    #[arg(long)]
    pub output: PathBuf,
    /// The adapter's name, as its metadata records it.
    #[arg(long, default_value = "ruling-lora")]
    pub name: String,
    #[command(flatten)]
    pub data: DataArgs,
    /// Optimiser steps.
    #[arg(long, default_value_t = 400)]
    pub steps: u64,
    /// Prompt tokens per batch (questions of similar length are batched together).
    #[arg(long, default_value_t = 2048)]
    pub batch_tokens: usize,
    /// Peak learning rate. The seed found 1e-4 collapses the readout toward uniform answers.
    #[arg(long, default_value_t = 1e-5)]
    pub learning_rate: f64,
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Steps of linear warm-up.
    #[arg(long, default_value_t = 40)]
    pub warmup: u64,
    /// Gradients are scaled down to this global norm.
    #[arg(long, default_value_t = 1.0)]
    pub max_grad_norm: f64,
    /// Questions whose prompt is longer than this many tokens are left out.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// LoRA rank.
    #[arg(long, default_value_t = 8)]
    pub rank: usize,
    /// Multiplies the adapter's update B·A·x.
    #[arg(long, default_value_t = 20.0)]
    pub scale: f64,
    /// Dropout on the adapter's input while training.
    #[arg(long, default_value_t = 0.0)]
    pub dropout: f64,
    /// Projections to adapt (comma-separated): q, k, v, o, gate, up, down.
    #[arg(long, default_value = "q,k,v,o,gate,up,down", value_delimiter = ',')]
    pub projections: Vec<String>,
    /// How many layers from the top carry adapters.
    #[arg(long, default_value_t = 16)]
    pub layers: usize,
    /// Share of the uniform distribution mixed into every target.
    #[arg(long, default_value_t = 0.0)]
    pub label_smoothing: f64,
    /// Weight of the Brier term.
    #[arg(long, default_value_t = 0.0)]
    pub brier_weight: f64,
    /// Weight of the confidence-ranking term.
    #[arg(long, default_value_t = 0.0)]
    pub ranking_weight: f64,
    #[arg(long, default_value_t = 0.05)]
    pub ranking_margin: f64,
    /// Share of records (by a hash of the state) held out for validation.
    #[arg(long, default_value_t = 0.02)]
    pub valid_fraction: f64,
    /// At most this many validation questions are scored at each validation.
    #[arg(long, default_value_t = 300)]
    pub valid_questions: usize,
    /// Validate, keep the best adapter and save the run state every this many steps.
    #[arg(long, default_value_t = 50)]
    pub eval_every: u64,
    /// Seeds the data sample, the batches, the option orders, the initial A and the dropout.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Precision of the base's matrices below the adapted layers (auto, native, f32, f16,
    /// q8_0); the adapted layers are always f32. f32 is the fastest here too: on SmolLM2-135M
    /// a 2,000-token forward pass took 7 s with f32 matrices and 12 s with its Q8_0 blocks.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// The model cache [default: `RULING_CACHE`, else the platform cache directory].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

/// Everything that decides a run's result; a resumed run must match it (the step count may
/// grow, to continue a finished run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub base: String,
    pub base_model_id: String,
    pub base_revision: Option<String>,
    pub name: String,
    pub lora: LoraConfig,
    pub datasets: Vec<String>,
    pub per_source: Option<usize>,
    pub caps: BTreeMap<String, usize>,
    pub data: Vec<DataFile>,
    pub records_sha256: String,
    pub steps: u64,
    pub batch_tokens: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub warmup: u64,
    pub max_grad_norm: f64,
    pub max_tokens: usize,
    pub label_smoothing: f64,
    pub brier_weight: f64,
    pub ranking_weight: f64,
    pub ranking_margin: f64,
    pub valid_fraction: f64,
    pub valid_questions: usize,
    pub eval_every: u64,
    pub seed: u64,
    pub dtype: String,
}

impl state::RunConfig for TrainConfig {
    fn differences(&self, other: &TrainConfig) -> Vec<&'static str> {
        state::differing_fields!(
            self,
            other,
            base,
            base_model_id,
            base_revision,
            name,
            lora,
            datasets,
            per_source,
            caps,
            data,
            records_sha256,
            batch_tokens,
            learning_rate,
            weight_decay,
            warmup,
            max_grad_norm,
            max_tokens,
            label_smoothing,
            brier_weight,
            ranking_weight,
            ranking_margin,
            valid_fraction,
            valid_questions,
            eval_every,
            seed,
            dtype
        )
    }
}

/// One labelled question: which record, which question, its weight and family, and the
/// length of its prompt in canonical order (for grouping batches by length).
#[derive(Debug, Clone)]
struct Example {
    record: usize,
    question: usize,
    weight: f32,
    tokens: usize,
}

/// Checked requests and their records, and the examples they give.
struct Side {
    records: Vec<Record>,
    requests: Vec<ValidRequest>,
    examples: Vec<Example>,
}

#[derive(Debug, Default)]
struct Skipped {
    unlabelled: usize,
    too_wide: usize,
    too_long: usize,
    weightless: usize,
}

pub fn run(args: &LoraArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let lora = lora_layout(args)?;
    check_ranges(args)?;
    let (engine, base_model) = open_base(args, &lora)?;
    let (datasets, gathered) = args.data.gather(args.seed)?;
    let config = TrainConfig::new(args, lora, &datasets, &base_model, &gathered);
    let saved = state::resume(&args.output, &config, ADAPTER_FILE, "an adapter")?;
    eprintln!(
        "data: {} records ({})",
        gathered.records.len(),
        gathered.families_line()
    );
    let (train, valid) = sides(&engine, gathered.records, &config)?;

    let vars = adapter_vars(&config, engine.backend().decoder().config())?;
    let (mut state, optimiser) = steps::start(&args.output, saved, &config, &vars)?;
    let mut trainer = Trainer {
        engine: &engine,
        config: &config,
        vars: &vars,
        base_model,
        output: &args.output,
        optimiser,
        train: &train,
        valid: &valid,
    };
    let lengths: Vec<usize> = train.examples.iter().map(|e| e.tokens).collect();
    steps::run(
        &mut trainer,
        &mut state,
        &steps::Plan {
            steps: config.steps,
            eval_every: config.eval_every,
            lengths: &lengths,
            batch_tokens: config.batch_tokens,
            seed: config.seed,
        },
    )?;
    trainer.calibrate(&valid)?;
    eprintln!(
        "done: best validation loss {:.4} at step {} ({} steps, {} tokens, {:.0?}); adapter in {}",
        state.best_loss,
        state.best_step,
        state.step,
        state.tokens_seen,
        started.elapsed(),
        args.output.join(ADAPTER_FILE).display()
    );
    Ok(())
}

/// The adapter's layout from the command line.
fn lora_layout(args: &LoraArgs) -> anyhow::Result<LoraConfig> {
    Ok(LoraConfig {
        rank: args.rank,
        scale: args.scale,
        dropout: args.dropout,
        projections: args
            .projections
            .iter()
            .map(|p| {
                Projection::parse(p.trim()).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--projections {p:?}: unknown projection; choose from {}",
                        Projection::NAMES
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?,
        layers: args.layers,
    })
}

/// Refuse a loss setting or learning rate outside its range.
fn check_ranges(args: &LoraArgs) -> anyhow::Result<()> {
    for (flag, value, allowed) in [
        (
            "--label-smoothing",
            args.label_smoothing,
            (0.0..1.0).contains(&args.label_smoothing),
        ),
        (
            "--brier-weight",
            args.brier_weight,
            args.brier_weight >= 0.0,
        ),
        (
            "--ranking-weight",
            args.ranking_weight,
            args.ranking_weight >= 0.0,
        ),
        (
            "--learning-rate",
            args.learning_rate,
            args.learning_rate > 0.0 && args.learning_rate.is_finite(),
        ),
    ] {
        if !allowed {
            bail!("{flag} {value} is out of range");
        }
    }
    Ok(())
}

/// The base decoder as the engine serves it, its matrices dequantized from the lowest adapted
/// layer up (quantized matmuls pass no gradient), and its identity.
fn open_base(
    args: &LoraArgs,
    lora: &LoraConfig,
) -> anyhow::Result<(DecoderEngine<CandleBackend>, ruling_candle::BaseModel)> {
    let dtype: WeightDtype = args
        .dtype
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--dtype: {e}"))?;
    let options = ruling_core::Options {
        dtype,
        cache_dir: args.cache_dir.clone(),
        ..ruling_core::Options::default()
    };
    let mut backend = ruling_core::load_candle(&args.base, &options)
        .with_context(|| format!("loading the base {}", args.base))?;
    let config = backend.decoder().config().clone();
    let problems = lora.problems(&config);
    if !problems.is_empty() {
        bail!(
            "the LoRA layout does not fit {}: {}",
            args.base,
            problems.join("; ")
        );
    }
    backend.dequantize_from(lora.first_layer(config.num_layers))?;
    let base_model = backend.base_model();
    let engine = DecoderEngine::new(backend, EngineOptions::default(), None)
        .context("the base does not keep the engine's prompt contract")?;
    Ok((engine, base_model))
}

impl TrainConfig {
    fn new(
        args: &LoraArgs,
        lora: LoraConfig,
        datasets: &[ruling_corpus::TrainingSource],
        base_model: &ruling_candle::BaseModel,
        gathered: &data::Gathered,
    ) -> Self {
        TrainConfig {
            base: args.base.clone(),
            base_model_id: base_model.model_id.clone(),
            base_revision: base_model.revision.clone(),
            name: args.name.clone(),
            lora,
            datasets: datasets.iter().map(ToString::to_string).collect(),
            per_source: args.data.per_source,
            caps: args.data.caps.iter().cloned().collect(),
            data: gathered.files.clone(),
            records_sha256: gathered.records_sha256.clone(),
            steps: args.steps,
            batch_tokens: args.batch_tokens.max(1),
            learning_rate: args.learning_rate,
            weight_decay: args.weight_decay,
            warmup: args.warmup,
            max_grad_norm: args.max_grad_norm,
            max_tokens: args.max_tokens,
            label_smoothing: args.label_smoothing,
            brier_weight: args.brier_weight,
            ranking_weight: args.ranking_weight,
            ranking_margin: args.ranking_margin,
            valid_fraction: args.valid_fraction,
            valid_questions: args.valid_questions,
            eval_every: args.eval_every.max(1),
            seed: args.seed,
            dtype: args.dtype.clone(),
        }
    }

    fn terms(&self) -> Terms {
        Terms {
            label_smoothing: self.label_smoothing,
            brier_weight: self.brier_weight,
            ranking_weight: self.ranking_weight,
            ranking_margin: self.ranking_margin,
        }
    }
}

/// The training and (sampled) validation sides of the split, as checked examples.
fn sides(
    engine: &DecoderEngine<CandleBackend>,
    records: Vec<Record>,
    config: &TrainConfig,
) -> anyhow::Result<(Side, Side)> {
    let split = data::split(records, config.valid_fraction, &Default::default())?;
    let (train, skipped) = side(engine, split.train, config.max_tokens)?;
    let (mut valid, _) = side(engine, split.valid, config.max_tokens)?;
    sample(&mut valid.examples, config.valid_questions, config.seed);
    if train.examples.is_empty() || valid.examples.is_empty() {
        bail!(
            "training needs labelled questions on both sides of the split: {} train and {} \
             validation",
            train.examples.len(),
            valid.examples.len()
        );
    }
    let train_tokens: usize = train.examples.iter().map(|e| e.tokens).sum();
    eprintln!(
        "data: {} train questions ({} prompt tokens), {} validation; left out {} unlabelled, \
         {} wider than one pass, {} over {} tokens, {} with weight 0",
        train.examples.len(),
        train_tokens,
        valid.examples.len(),
        skipped.unlabelled,
        skipped.too_wide,
        skipped.too_long,
        config.max_tokens,
        skipped.weightless
    );
    Ok((train, valid))
}

/// The adapter's A and B matrices as trainable variables, A drawn from the run's seed.
fn adapter_vars(
    config: &TrainConfig,
    decoder: &ruling_candle::DecoderConfig,
) -> anyhow::Result<Vec<(String, Var)>> {
    let lora = &config.lora;
    let vars: Vec<(String, Var)> = LoraWeights::init(lora, decoder, config.seed, &Device::Cpu)?
        .into_iter()
        .map(|(name, t)| Ok((name, Var::from_tensor(&t)?)))
        .collect::<candle_core::Result<_>>()?;
    let trainable: usize = vars.iter().map(|(_, v)| v.elem_count()).sum();
    eprintln!(
        "lora: rank {}, scale {}, {} of {} layers, projections {}: {trainable} trainable \
         parameters",
        lora.rank,
        lora.scale,
        lora.layers,
        decoder.num_layers,
        lora.projections
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(",")
    );
    Ok(vars)
}

/// Checked records and one example per labelled question a single pass can show.
fn side(
    engine: &DecoderEngine<CandleBackend>,
    records: Vec<Record>,
    max_tokens: usize,
) -> anyhow::Result<(Side, Skipped)> {
    let mut skipped = Skipped::default();
    let mut requests = Vec::with_capacity(records.len());
    let mut examples = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let valid = record.validate(&Capabilities::default())?;
        for (q, question) in valid.questions().iter().enumerate() {
            if record.weight == 0.0 {
                skipped.weightless += 1;
                continue;
            }
            if matches!(question.kind(), QuestionKind::Box { .. })
                || record.target_distribution(question.id()).is_none()
            {
                skipped.unlabelled += 1;
                continue;
            }
            let n = option_count(question.kind());
            if n > engine.max_options_per_pass() {
                skipped.too_wide += 1;
                continue;
            }
            let order: Vec<usize> = (0..n).collect();
            let prompt = engine
                .question_prompt(valid.state(), question.kind(), &order)
                .with_context(|| format!("rendering {} {}", record.display_id(), question.id()))?;
            if prompt.tokens.len() > max_tokens {
                skipped.too_long += 1;
                continue;
            }
            examples.push(Example {
                record: index,
                question: q,
                weight: record.weight as f32,
                tokens: prompt.tokens.len(),
            });
        }
        requests.push(valid);
    }
    Ok((
        Side {
            records,
            requests,
            examples,
        },
        skipped,
    ))
}

fn option_count(kind: &QuestionKind) -> usize {
    match kind {
        QuestionKind::Noul { .. } => 2,
        QuestionKind::Score { levels, .. } => levels.len(),
        QuestionKind::Choice { options, .. } => options.len(),
        QuestionKind::Box { .. } => 0,
    }
}

/// Keep a seeded sample of at most `limit` examples, in their original order.
fn sample(examples: &mut Vec<Example>, limit: usize, seed: u64) {
    *examples = data::sample_indices(examples.len(), limit, seed)
        .into_iter()
        .map(|i| examples[i].clone())
        .collect();
}

/// A random presentation of a question with `n` options: a shuffle for a Choice, either
/// direction for a Noul or Score; the same for the same seed, step and slot.
fn presentation(kind: &QuestionKind, n: usize, seed: u64, step: u64, slot: usize) -> Vec<usize> {
    let mut rng = SplitMix(
        seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (slot as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
    );
    let mut order: Vec<usize> = (0..n).collect();
    match kind {
        QuestionKind::Choice { .. } => {
            for i in (1..n).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
        }
        _ => {
            if rng.next_u64() & 1 == 1 {
                order.reverse();
            }
        }
    }
    order
}

/// What every step and validation needs.
struct Trainer<'a> {
    engine: &'a DecoderEngine<CandleBackend>,
    config: &'a TrainConfig,
    vars: &'a [(String, Var)],
    base_model: ruling_candle::BaseModel,
    output: &'a Path,
    optimiser: AdamW,
    train: &'a Side,
    valid: &'a Side,
}

impl steps::Trainer for Trainer<'_> {
    type Config = TrainConfig;

    /// One optimiser step on a batch; returns its loss and prompt tokens.
    fn step(&mut self, indices: &[usize], step: u64) -> anyhow::Result<(f64, usize)> {
        let seed = self.config.seed;
        let batch = self.render(self.train, indices, |kind, n, slot| {
            presentation(kind, n, seed, step, slot)
        })?;
        let weights = self.weights(false)?;
        let dropout = (self.config.lora.dropout > 0.0)
            .then(|| seed ^ step.wrapping_mul(0xA076_1D64_78BD_642F));
        let logits = self.engine.backend().decoder().train_code_logits(
            &batch.rows,
            &batch.codes,
            &weights,
            dropout,
        )?;
        let loss = objective::loss(&logits, &batch.targets, &self.config.terms())?;
        let grads = loss.backward()?;
        let rate = schedule(
            self.config.learning_rate,
            step,
            self.config.warmup,
            self.config.steps,
        );
        let weight_decay = self.config.weight_decay;
        self.optimiser
            .update(self.vars, &grads, self.config.max_grad_norm, |_| {
                GroupSettings {
                    learning_rate: rate,
                    weight_decay,
                }
            })?;
        let tokens = batch.rows.iter().map(Vec::len).sum();
        Ok((f64::from(loss.to_scalar::<f32>()?), tokens))
    }

    fn validate(&self, step: u64) -> anyhow::Result<Validation> {
        let mut tally = state::Tally::default();
        for s in self.score(self.valid)? {
            let predicted = argmax_or_first(&s.log_probs);
            let right = predicted == argmax_or_first(&s.target);
            let confidence = f64::from(s.log_probs[predicted]).exp();
            tally.add(&s.family, f64::from(s.loss), confidence, right);
        }
        tally.validation(step)
    }

    /// Write the current weights as the adapter (and the run's copy of the best weights).
    fn save_best(&self, state: &RunState) -> anyhow::Result<()> {
        let tensors = self.tensors();
        let map: HashMap<String, Tensor> = tensors.iter().cloned().collect();
        write_atomic(
            &state::best_weights(self.output),
            &ruling_encoder::checkpoint::safetensors_bytes(&map, candle_core::DType::F32)?,
        )?;
        let meta = AdapterMeta {
            format: ADAPTER_FORMAT,
            name: self.config.name.clone(),
            lora: self.config.lora.clone(),
            base: self.base_model.clone(),
            training: serde_json::json!({
                "config": self.config,
                "step": state.step,
                "validation": state.history.last(),
            }),
        };
        write_atomic(
            &self.output.join(ADAPTER_FILE),
            &adapter_bytes(&meta, &tensors)?,
        )?;
        Ok(())
    }

    fn save_state(&self, state: &RunState) -> anyhow::Result<()> {
        let weights: HashMap<String, Tensor> = self.tensors().into_iter().collect();
        state::save(
            self.output,
            state,
            &weights,
            &self.optimiser.state(self.vars),
        )?;
        let record = serde_json::json!({
            "config": state.config,
            "best_step": state.best_step,
            "steps_run": state.step,
            "tokens_seen": state.tokens_seen,
            "history": state.history,
        });
        write_atomic(
            &self.output.join(TRAINING_FILE),
            format!("{}\n", serde_json::to_string_pretty(&record)?).as_bytes(),
        )?;
        Ok(())
    }
}

/// Prompts of a batch and their targets over the shown order.
struct Rendered {
    rows: Vec<Vec<u32>>,
    codes: Vec<u32>,
    targets: Targets,
    kinds: Vec<AnswerType>,
    families: Vec<String>,
}

impl Trainer<'_> {
    fn weights(&self, detached: bool) -> anyhow::Result<LoraWeights> {
        let tensors: HashMap<String, Tensor> = self
            .vars
            .iter()
            .map(|(name, var)| {
                let t = var.as_tensor();
                (name.clone(), if detached { t.detach() } else { t.clone() })
            })
            .collect();
        LoraWeights::from_tensors(
            &self.config.lora,
            self.engine.backend().decoder().config(),
            &tensors,
        )
        .map_err(|problems| anyhow::anyhow!("the adapter does not fit: {}", problems.join("; ")))
    }

    /// Render `indices` of `side`, each in the order `order` gives it.
    fn render(
        &self,
        side: &Side,
        indices: &[usize],
        order: impl Fn(&QuestionKind, usize, usize) -> Vec<usize>,
    ) -> anyhow::Result<Rendered> {
        let mut prompts: Vec<QuestionPrompt> = Vec::with_capacity(indices.len());
        let mut targets = Vec::with_capacity(indices.len());
        let mut weights = Vec::with_capacity(indices.len());
        let mut kinds = Vec::with_capacity(indices.len());
        let mut families = Vec::with_capacity(indices.len());
        for (slot, &i) in indices.iter().enumerate() {
            let example = &side.examples[i];
            let record = &side.records[example.record];
            let request = &side.requests[example.record];
            let question = &request.questions()[example.question];
            let kind = question.kind();
            let n = option_count(kind);
            let prompt =
                self.engine
                    .question_prompt(request.state(), kind, &order(kind, n, slot))?;
            let target = record
                .target_distribution(question.id())
                .context("a labelled question lost its target")?;
            targets.push(
                prompt
                    .keys
                    .iter()
                    .map(|k| target.get(k).copied().unwrap_or(0.0) as f32)
                    .collect(),
            );
            weights.push(example.weight);
            kinds.push(match kind {
                QuestionKind::Noul { .. } => AnswerType::Noul,
                QuestionKind::Score { .. } => AnswerType::Score,
                _ => AnswerType::Choice,
            });
            families.push(record.family.clone());
            prompts.push(prompt);
        }
        let widest = prompts
            .iter()
            .max_by_key(|p| p.codes.len())
            .context("an empty batch")?;
        let codes = widest.codes.clone();
        let counts = prompts.iter().map(|p| p.codes.len()).collect();
        Ok(Rendered {
            rows: prompts.into_iter().map(|p| p.tokens).collect(),
            codes,
            targets: Targets {
                counts,
                targets,
                weights,
            },
            kinds,
            families,
        })
    }

    /// Each validation question's log-probabilities over its options in canonical order,
    /// with its target, type and family.
    fn score(&self, valid: &Side) -> anyhow::Result<Vec<Scored>> {
        let weights = self.weights(true)?;
        let decoder = self.engine.backend().decoder();
        let mut out = Vec::with_capacity(valid.examples.len());
        let mut order: Vec<usize> = (0..valid.examples.len()).collect();
        order.sort_by_key(|&i| (valid.examples[i].tokens, i));
        let mut start = 0;
        while start < order.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < order.len()
                && (end == start || tokens + valid.examples[order[end]].tokens <= 4096)
            {
                tokens += valid.examples[order[end]].tokens;
                end += 1;
            }
            let indices = &order[start..end];
            let batch = self.render(valid, indices, |_, n, _| (0..n).collect())?;
            let logits = decoder.train_code_logits(&batch.rows, &batch.codes, &weights, None)?;
            let log_probs = objective::log_probs(&logits, &batch.targets.counts)?;
            let losses: Vec<f32> =
                objective::cross_entropy(&log_probs, &batch.targets)?.to_vec1()?;
            let log_probs: Vec<Vec<f32>> = log_probs.to_vec2()?;
            let raw: Vec<Vec<f32>> = logits.to_vec2()?;
            for (row, &n) in batch.targets.counts.iter().enumerate() {
                out.push(Scored {
                    log_probs: log_probs[row][..n].to_vec(),
                    logits: raw[row][..n].to_vec(),
                    target: batch.targets.targets[row][..n].to_vec(),
                    loss: losses[row],
                    kind: batch.kinds[row],
                    family: batch.families[row].clone(),
                });
            }
            start = end;
        }
        Ok(out)
    }

    fn tensors(&self) -> Vec<(String, Tensor)> {
        self.vars
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().detach()))
            .collect()
    }

    /// Fit one temperature per answer type on the validation questions, read through the
    /// written adapter, and write them beside it with the adapter's digest.
    fn calibrate(&self, valid: &Side) -> anyhow::Result<()> {
        use ruling_calibration::{
            CHI_SQUARED_1_95, Calibration, FitOptions, LabelledLogits, Provenance, Target,
            fit_temperatures_with,
        };
        // The adapter as the server will load it: refused here if it would be refused there.
        let adapter = Adapter::load(&self.output.join(ADAPTER_FILE))?;
        adapter.weights_for(self.engine.backend().decoder().config(), &self.base_model)?;
        let best = candle_core::safetensors::load(state::best_weights(self.output), &Device::Cpu)?;
        for (name, var) in self.vars {
            let tensor = best
                .get(name)
                .with_context(|| format!("the best weights lack {name}"))?;
            var.set(tensor)?;
        }
        let scored = self.score(valid)?;
        let samples: Vec<(AnswerType, LabelledLogits)> = scored
            .into_iter()
            .map(|s| {
                (
                    s.kind,
                    LabelledLogits {
                        logits: s.logits.iter().map(|&l| f64::from(l)).collect(),
                        target: Target::Soft(s.target.iter().map(|&t| f64::from(t)).collect()),
                    },
                )
            })
            .collect();
        let fit = fit_temperatures_with(
            &samples,
            &FitOptions {
                min_likelihood_ratio: CHI_SQUARED_1_95,
            },
        )?;
        let provenance = Provenance {
            model_id: self.base_model.model_id.clone(),
            revision: self.base_model.revision.clone(),
            rotations: EngineOptions::default().rotations,
            prior: EngineOptions::default().prior,
            adapter_digest: Some(adapter.digest.clone()),
        };
        let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let calibration = Calibration::from_fit(provenance, fit, Some(created));
        calibration.save(self.output.join(CALIBRATION_FILE))?;
        eprintln!(
            "calibration: temperatures noul {:.3}, choice {:.3}, score {:.3} from {} validation \
             questions",
            calibration.temperature(AnswerType::Noul),
            calibration.temperature(AnswerType::Choice),
            calibration.temperature(AnswerType::Score),
            samples.len()
        );
        Ok(())
    }
}

/// One validation question, scored.
struct Scored {
    log_probs: Vec<f32>,
    logits: Vec<f32>,
    target: Vec<f32>,
    loss: f32,
    kind: AnswerType,
    family: String,
}
