//! `ruling-train encoder`: full fine-tuning of a decision encoder (seed
//! `ruling/decision_train.py`).
//!
//! Each example is a whole record: its state and every labelled question, packed exactly as
//! `EncoderEngine` packs a request. The loss is cross-entropy against each question's target
//! (soft where raters disagreed). AdamW with a higher learning rate for the fresh head than
//! for the pretrained encoder, linear warm-up and cosine decay, gradient clipping; batches by a
//! token budget, grouped by length. Validation every `--eval-every` steps (loss, accuracy, ECE,
//! coverage at 5% error); the best checkpoint by validation loss is the output.
//!
//! A run can be killed at any moment and resumed with the same command: the run state (weights,
//! AdamW moments, the data stream's position, the history) is saved at every validation into a
//! new step directory, and a `latest` pointer written last names the complete one. Resuming
//! gives bit-identical weights to a run that was never stopped.

mod examples;
mod soup;

pub use soup::{SoupArgs, run as soup};

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use candle_core::{DType, Device};
use ruling_calibration::argmax_or_first;
use ruling_calibration::temperature::FIT_ECE_BINS;
use ruling_encoder::checkpoint::{
    BaseIdentity, CheckpointMeta, META_FILE, NewCheckpoint, safetensors_bytes, write_atomic,
};
use ruling_encoder::train::{
    AdamW, Example, Freeze, GroupSettings, TrainBatch, Trainable, schedule,
};
use ruling_encoder::{DecisionModel, EncoderFiles, Kernels, Limits};
use serde::{Deserialize, Serialize};

use crate::data::{self, DataArgs, DataFile, parse_weight};
use crate::state::{self, Validation};
use crate::steps;

type RunState = state::RunState<TrainConfig>;

/// Arguments of `ruling-train encoder`.
#[derive(Debug, Clone, clap::Args)]
pub struct EncoderArgs {
    /// The encoder to fine-tune: a catalog name (`minilm-l6`) or a directory with config.json,
    /// tokenizer.json and model.safetensors.
    #[arg(long, default_value = "minilm-l6")]
    pub base: String,
    /// Where the trained checkpoint goes (and the run state, under `run/`). Rerunning the same
    /// command resumes a killed run.
    #[arg(long)]
    pub output: PathBuf,
    /// The checkpoint's name: what responses, reports and calibration files call it.
    #[arg(long, default_value = "ruling-judge-minilm-l6")]
    pub name: String,
    #[command(flatten)]
    pub data: DataArgs,
    /// Optimiser steps.
    #[arg(long, default_value_t = 1200)]
    pub steps: u64,
    /// Tokens per batch (records are laid end to end, so this is the work of one step).
    #[arg(long, default_value_t = 4096)]
    pub batch_tokens: usize,
    /// Peak learning rate of the encoder.
    #[arg(long, default_value_t = 5e-5)]
    pub learning_rate: f64,
    /// Peak learning rate of the fresh score head.
    #[arg(long, default_value_t = 1e-3)]
    pub head_learning_rate: f64,
    #[arg(long, default_value_t = 0.01)]
    pub weight_decay: f64,
    /// Steps of linear warm-up.
    #[arg(long, default_value_t = 60)]
    pub warmup: u64,
    /// Gradients are scaled down to this global norm.
    #[arg(long, default_value_t = 1.0)]
    pub max_grad_norm: f64,
    /// Records packing to more tokens than this are left out.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// Share of records (by a hash of the state) held out for validation.
    #[arg(long, default_value_t = 0.02)]
    pub valid_fraction: f64,
    /// At most this many validation records are scored at each validation.
    #[arg(long, default_value_t = 600)]
    pub valid_records: usize,
    /// A share of one source's records (by a hash of the state, apart from validation) kept
    /// out of training and used only to fit the temperatures (repeatable): `boolq=0.5`. For a
    /// source the model does not learn, this is the only way its calibration sees it unseen.
    #[arg(long = "calibration-share", value_parser = parse_weight)]
    pub calibration_shares: Vec<(String, f64)>,
    /// Validate, keep the best checkpoint and save the run state every this many steps.
    #[arg(long, default_value_t = 100)]
    pub eval_every: u64,
    /// Seeds the data sample, the split order and every batch.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Train the token embedding table too (by default it stays as the base has it: on a CPU
    /// its dense gradient costs more than the rest of the backward pass).
    #[arg(long)]
    pub train_embeddings: bool,
    /// Precision of the written checkpoint's weights: f16 (half the size) or f32.
    #[arg(long, default_value = "f16")]
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
    pub base_weights_sha256: String,
    pub name: String,
    pub datasets: Vec<String>,
    pub per_source: Option<usize>,
    #[serde(default)]
    pub caps: std::collections::BTreeMap<String, usize>,
    pub data: Vec<DataFile>,
    /// `--weight`: multipliers of record weights by source.
    #[serde(default)]
    pub weights: std::collections::BTreeMap<String, f64>,
    /// `--coherence`: the share of records given a coherence twin.
    #[serde(default)]
    pub coherence: f64,
    pub records_sha256: String,
    pub steps: u64,
    pub batch_tokens: usize,
    pub learning_rate: f64,
    pub head_learning_rate: f64,
    pub weight_decay: f64,
    pub warmup: u64,
    pub max_grad_norm: f64,
    pub max_tokens: usize,
    pub valid_fraction: f64,
    pub valid_records: usize,
    #[serde(default)]
    pub calibration_shares: std::collections::BTreeMap<String, f64>,
    pub eval_every: u64,
    pub seed: u64,
    pub dtype: String,
    pub train_embeddings: bool,
}

impl state::RunConfig for TrainConfig {
    fn differences(&self, other: &TrainConfig) -> Vec<&'static str> {
        state::differing_fields!(
            self,
            other,
            base,
            base_weights_sha256,
            name,
            datasets,
            per_source,
            caps,
            data,
            weights,
            coherence,
            records_sha256,
            batch_tokens,
            learning_rate,
            head_learning_rate,
            weight_decay,
            warmup,
            max_grad_norm,
            max_tokens,
            valid_fraction,
            valid_records,
            calibration_shares,
            eval_every,
            seed,
            dtype,
            train_embeddings
        )
    }
}

pub fn run(args: &EncoderArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let dtype = weights_dtype(&args.dtype)?;
    let base = open_base(&args.base, args.cache_dir.as_deref())?;
    let (datasets, gathered) = args.data.gather(args.seed)?;
    let config = TrainConfig::new(args, &datasets, &base, &gathered);
    let saved = state::resume(&args.output, &config, META_FILE, "a checkpoint")?;
    eprintln!(
        "data: {} records ({})",
        gathered.records.len(),
        gathered.families_line()
    );
    let sides = Sides::new(gathered.records, &config, &base)?;

    let freeze = if config.train_embeddings {
        Freeze::Nothing
    } else {
        Freeze::TokenEmbeddings
    };
    let trainable = Trainable::new(&base, freeze)?;
    let (mut state, optimiser) = steps::start(&args.output, saved, &config, trainable.vars())?;
    let output = Output {
        dir: &args.output,
        base: &base,
        config: &config,
        dtype,
    };
    let lengths: Vec<usize> = sides.train.iter().map(|e| e.packed.len()).collect();
    let mut trainer = EncoderTrainer {
        output: &output,
        trainable: &trainable,
        optimiser,
        sides: &sides,
    };
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

    let best = std::fs::read(state::best_weights(&args.output))?;
    write_checkpoint(&args.output, &base, &best, &config, &state)?;
    calibrate(&args.output, &sides.unseen(), &Device::Cpu)?;
    eprintln!(
        "done: best validation loss {:.4} at step {} ({} steps, {} tokens, {:.0?}); checkpoint \
         in {}",
        state.best_loss,
        state.best_step,
        state.step,
        state.tokens_seen,
        started.elapsed(),
        args.output.display()
    );
    Ok(())
}

/// The precision a checkpoint's weights are written at, by its `--dtype` name.
fn weights_dtype(name: &str) -> anyhow::Result<DType> {
    match name {
        "f16" => Ok(DType::F16),
        "f32" => Ok(DType::F32),
        other => bail!("--dtype {other:?}: expected f16 or f32"),
    }
}

impl TrainConfig {
    fn new(
        args: &EncoderArgs,
        datasets: &[ruling_corpus::TrainingSource],
        base: &EncoderFiles,
        gathered: &data::Gathered,
    ) -> Self {
        TrainConfig {
            base: args.base.clone(),
            base_weights_sha256: base_identity(base).weights_sha256,
            name: args.name.clone(),
            datasets: datasets.iter().map(ToString::to_string).collect(),
            per_source: args.data.per_source,
            caps: args.data.caps.iter().cloned().collect(),
            data: gathered.files.clone(),
            weights: args.data.weights.iter().cloned().collect(),
            coherence: args.data.coherence,
            records_sha256: gathered.records_sha256.clone(),
            steps: args.steps,
            batch_tokens: args.batch_tokens,
            learning_rate: args.learning_rate,
            head_learning_rate: args.head_learning_rate,
            weight_decay: args.weight_decay,
            warmup: args.warmup,
            max_grad_norm: args.max_grad_norm,
            max_tokens: args.max_tokens,
            valid_fraction: args.valid_fraction,
            valid_records: args.valid_records,
            calibration_shares: args.calibration_shares.iter().cloned().collect(),
            eval_every: args.eval_every.max(1),
            seed: args.seed,
            dtype: args.dtype.clone(),
            train_embeddings: args.train_embeddings,
        }
    }
}

/// The run's examples, packed as the engine packs them, on each side of the split.
struct Sides {
    train: Vec<Example>,
    /// The sampled validation examples and the family of each.
    valid: Vec<Example>,
    valid_families: Vec<String>,
    /// Never trained on nor validated: only the temperatures see them.
    calibration: Vec<Example>,
    calibration_families: Vec<String>,
}

impl Sides {
    /// The examples no training step saw (validation, then calibration), with their families.
    fn unseen(&self) -> Vec<(&Example, &str)> {
        let valid = self.valid.iter().zip(&self.valid_families);
        let calibration = self.calibration.iter().zip(&self.calibration_families);
        valid
            .chain(calibration)
            .map(|(e, f)| (e, f.as_str()))
            .collect()
    }

    fn new(
        records: Vec<ruling_corpus::Record>,
        config: &TrainConfig,
        base: &EncoderFiles,
    ) -> anyhow::Result<Self> {
        let split = data::split(records, config.valid_fraction, &config.calibration_shares)?;
        let limits = Limits {
            max_positions: base.config.max_positions(),
            max_tokens: config.max_tokens,
            max_state_tokens: ruling_encoder::DEFAULT_MAX_STATE_TOKENS,
        };
        let (train, _, skipped) = examples::examples(&split.train, &base.tokenizer, limits)?;
        let (valid, valid_families, _) = examples::examples(&split.valid, &base.tokenizer, limits)?;
        let (valid, valid_families) =
            sample_valid(valid, valid_families, config.valid_records, config.seed);
        let (calibration, calibration_families, _) =
            examples::examples(&split.calibration, &base.tokenizer, limits)?;
        if !calibration.is_empty() {
            eprintln!(
                "data: {} records kept for calibration only ({} examples)",
                split.calibration.len(),
                calibration.len()
            );
        }
        if train.is_empty() || valid.is_empty() {
            bail!(
                "training needs labelled records on both sides of the split: {} train and {} \
                 validation examples",
                train.len(),
                valid.len()
            );
        }
        let train_tokens: usize = train.iter().map(|e| e.packed.len()).sum();
        eprintln!(
            "data: {} train examples ({} tokens), {} validation; left out {} unlabelled, {} \
             over {} tokens, {} with weight 0",
            train.len(),
            train_tokens,
            valid.len(),
            skipped.unlabelled,
            skipped.too_long,
            config.max_tokens,
            skipped.weightless
        );
        Ok(Sides {
            train,
            valid,
            valid_families,
            calibration,
            calibration_families,
        })
    }
}

/// Where and how a run writes its best checkpoint.
struct Output<'a> {
    dir: &'a Path,
    base: &'a EncoderFiles,
    config: &'a TrainConfig,
    dtype: DType,
}

impl Output<'_> {
    /// Write the current weights as the run's checkpoint: tokenizer and config copied from the
    /// base, weights at `dtype`, `decision.json` (written last) naming their digests and the
    /// training record.
    fn save_best(&self, trainable: &Trainable, state: &RunState) -> anyhow::Result<()> {
        let weights = safetensors_bytes(&trainable.tensors()?, self.dtype)?;
        write_atomic(&state::best_weights(self.dir), &weights)?;
        write_checkpoint(self.dir, self.base, &weights, self.config, state)
    }
}

/// The encoder's side of the shared step loop.
struct EncoderTrainer<'a> {
    output: &'a Output<'a>,
    trainable: &'a Trainable,
    optimiser: AdamW,
    sides: &'a Sides,
}

impl steps::Trainer for EncoderTrainer<'_> {
    type Config = TrainConfig;

    fn step(&mut self, batch: &[usize], step: u64) -> anyhow::Result<(f64, usize)> {
        let examples: Vec<&Example> = batch.iter().map(|&i| &self.sides.train[i]).collect();
        one_step(
            self.output.config,
            self.trainable,
            &mut self.optimiser,
            &examples,
            step,
        )
    }

    fn validate(&self, step: u64) -> anyhow::Result<Validation> {
        let model = DecisionModel::from_tensors(
            self.trainable.tensors()?,
            self.trainable.config(),
            Kernels::Fused,
        )?;
        validate(
            &model,
            &self.sides.valid,
            &self.sides.valid_families,
            step,
            &Device::Cpu,
        )
    }

    fn save_best(&self, state: &RunState) -> anyhow::Result<()> {
        self.output.save_best(self.trainable, state)
    }

    /// The run state, and the history in decision.json, which follows the run even when the
    /// weights do not.
    fn save_state(&self, state: &RunState) -> anyhow::Result<()> {
        state::save(
            self.output.dir,
            state,
            &self.trainable.tensors()?,
            &self.optimiser.state(self.trainable.vars()),
        )?;
        refresh_history(self.output.dir, state)
    }
}

/// One optimiser step on one batch: its loss and its token count.
fn one_step(
    config: &TrainConfig,
    trainable: &Trainable,
    optimiser: &mut AdamW,
    examples: &[&Example],
    step: u64,
) -> anyhow::Result<(f64, usize)> {
    let batch = TrainBatch::new(examples, &Device::Cpu)?;
    let loss = batch.loss(trainable.model())?;
    let grads = loss.backward()?;
    let body = schedule(config.learning_rate, step, config.warmup, config.steps);
    let head = schedule(config.head_learning_rate, step, config.warmup, config.steps);
    let head_prefix = format!("{}.", DecisionModel::HEAD);
    optimiser.update(trainable.vars(), &grads, config.max_grad_norm, |name| {
        if name.starts_with(&head_prefix) {
            GroupSettings {
                learning_rate: head,
                weight_decay: 0.0,
            }
        } else {
            GroupSettings {
                learning_rate: body,
                weight_decay: config.weight_decay,
            }
        }
    })?;
    Ok((f64::from(loss.to_scalar::<f32>()?), batch.tokens))
}

/// The base encoder, refused when its directory lacks a file or a tensor its config needs.
fn open_base(spec: &str, cache: Option<&Path>) -> anyhow::Result<EncoderFiles> {
    let dir = resolve_base(spec, cache)?;
    let base = EncoderFiles::open(&dir)
        .with_context(|| format!("opening the base encoder {}", dir.display()))?;
    let problems = base.problems(false)?;
    if !problems.is_empty() {
        bail!(
            "the base encoder {} is incomplete or not of its config's shape: it lacks {}",
            dir.display(),
            problems.join(", ")
        );
    }
    Ok(base)
}

/// A catalog name is pulled into the cache; anything else is a directory.
fn resolve_base(spec: &str, cache: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = Path::new(spec);
    if path.is_dir() {
        return Ok(path.to_owned());
    }
    if ruling_models::catalog::get(spec).is_none() {
        bail!("--base {spec:?} is neither a directory nor a catalog model");
    }
    let mut options = match cache {
        Some(dir) => ruling_models::PullOptions::new(dir),
        None => ruling_models::PullOptions::from_env()?,
    };
    options.hub = options.hub && std::env::var_os("RULING_NO_HUB").is_none();
    match ruling_models::pull_str(spec, &options)? {
        ruling_models::LocalModel::Directory { path } => Ok(path),
        other => bail!("{spec} is not an encoder directory but {other:?}"),
    }
}

fn base_identity(base: &EncoderFiles) -> BaseIdentity {
    match &base.meta {
        // Continuing from a trained checkpoint keeps the original base's identity.
        Some(meta) => meta.base.clone(),
        None => BaseIdentity {
            name: base
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            weights_sha256: base.weights_sha256.clone(),
        },
    }
}

fn sample_valid(
    valid: Vec<Example>,
    families: Vec<String>,
    limit: usize,
    seed: u64,
) -> (Vec<Example>, Vec<String>) {
    let keep = data::sample_indices(valid.len(), limit, seed);
    let mut valid: Vec<Option<Example>> = valid.into_iter().map(Some).collect();
    keep.into_iter()
        .filter_map(|i| valid[i].take().map(|e| (e, families[i].clone())))
        .unzip()
}

/// Loss, accuracy, ECE and coverage at 5% error over the validation questions, with the
/// serving kernels.
fn validate(
    model: &DecisionModel,
    valid: &[Example],
    families: &[String],
    step: u64,
    device: &Device,
) -> anyhow::Result<Validation> {
    let mut tally = state::Tally::default();
    let mut start = 0;
    while start < valid.len() {
        let mut end = start;
        let mut tokens = 0;
        while end < valid.len() && (end == start || tokens + valid[end].packed.len() <= 8192) {
            tokens += valid[end].packed.len();
            end += 1;
        }
        let examples: Vec<&Example> = valid[start..end].iter().collect();
        let batch = TrainBatch::new(&examples, device)?;
        let log_probs = batch.log_probs(model)?;
        let per_question: Vec<f32> = batch.cross_entropy(&log_probs)?.to_vec1()?;
        let log_probs: Vec<Vec<f32>> = log_probs.to_vec2()?;
        let mut q = 0;
        for (offset, example) in examples.iter().enumerate() {
            let family = families[start + offset].as_str();
            for target in &example.targets {
                let probs: Vec<f64> = log_probs[q][..target.len()]
                    .iter()
                    .map(|&lp| f64::from(lp).exp())
                    .collect();
                let predicted = argmax_or_first(&probs);
                let right = predicted == argmax_or_first(target);
                tally.add(family, f64::from(per_question[q]), probs[predicted], right);
                q += 1;
            }
        }
        start = end;
    }
    tally.validation(step)
}

/// The checkpoint from the best weights' bytes (see `ruling_encoder::checkpoint::
/// write_checkpoint`: a checkpoint cut short is refused until this runs again, which the end
/// of every run does).
fn write_checkpoint(
    output: &Path,
    base: &EncoderFiles,
    weights: &[u8],
    config: &TrainConfig,
    state: &RunState,
) -> anyhow::Result<()> {
    ruling_encoder::checkpoint::write_checkpoint(
        output,
        NewCheckpoint {
            name: &config.name,
            base,
            base_identity: base_identity(base),
            weights,
            weights_dtype: &config.dtype,
            training: training_record(config, state)?,
        },
    )?;
    Ok(())
}

/// Fit one temperature per answer type on the validation questions and those kept for
/// calibration (development rows the model never trained on), scored by the checkpoint exactly
/// as it will be served, and write them as the checkpoint's `calibration.json`, which the engine
/// applies by default. A temperature is kept only where a likelihood-ratio test supports it
/// (`ruling_calibration::FitOptions`). The log gives each type's ECE on those questions before
/// and after, and each family's with 50 questions or more after.
fn calibrate(output: &Path, examples: &[(&Example, &str)], device: &Device) -> anyhow::Result<()> {
    use ruling_calibration::{
        AnswerType, CHI_SQUARED_1_95, Calibration, FitOptions, LabelledLogits, Target,
        fit_temperatures_with,
    };
    let files = EncoderFiles::open(output)?;
    let meta = files
        .meta
        .clone()
        .context("the written checkpoint has no decision.json")?;
    let model = files.serving_model(ruling_encoder::EncoderOptions::default().kernels)?;
    let mut samples = Vec::new();
    let mut families = Vec::new();
    for chunk in examples.chunks(32) {
        let batch_examples: Vec<&Example> = chunk.iter().map(|(e, _)| *e).collect();
        let batch = TrainBatch::new(&batch_examples, device)?;
        let log_probs: Vec<Vec<f32>> = batch.log_probs(&model)?.to_vec2()?;
        let mut q = 0;
        for (example, family) in chunk {
            for (target, kind) in example.targets.iter().zip(&example.kinds) {
                families.push(*family);
                let logits = log_probs[q][..target.len()]
                    .iter()
                    .map(|&l| f64::from(l))
                    .collect();
                let target = Target::Soft(target.iter().map(|&t| f64::from(t)).collect());
                samples.push((*kind, LabelledLogits { logits, target }));
                q += 1;
            }
        }
    }
    let fit = fit_temperatures_with(
        &samples,
        &FitOptions {
            min_likelihood_ratio: CHI_SQUARED_1_95,
        },
    )?;
    let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let calibration = Calibration::from_fit(ruling_encoder::provenance(&meta), fit, Some(created));
    calibration.save(output.join(ruling_encoder::checkpoint::CALIBRATION_FILE))?;
    eprintln!("calibration: from {} unseen questions", samples.len());
    for kind in AnswerType::ALL {
        let temperature = calibration.temperature(kind);
        let of_kind: Vec<&LabelledLogits> = samples
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, s)| s)
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let at =
            |t: f64| -> Vec<(&LabelledLogits, f64)> { of_kind.iter().map(|s| (*s, t)).collect() };
        eprintln!(
            "calibration: {kind} temperature {temperature:.3} over {} questions, ECE {:.3} before, \
             {:.3} after",
            of_kind.len(),
            unseen_ece(&at(1.0))?,
            unseen_ece(&at(temperature))?
        );
    }
    let mut by_family: std::collections::BTreeMap<&str, Vec<(&LabelledLogits, f64)>> =
        std::collections::BTreeMap::new();
    for ((kind, sample), family) in samples.iter().zip(&families) {
        by_family
            .entry(family)
            .or_default()
            .push((sample, calibration.temperature(*kind)));
    }
    for (family, of_family) in by_family.iter().filter(|(_, v)| v.len() >= 50) {
        eprintln!(
            "calibration: {family} over {} unseen questions, ECE {:.3} after",
            of_family.len(),
            unseen_ece(of_family)?
        );
    }
    Ok(())
}

/// The expected calibration error (the evaluator's bins) of the top answer of each sample at
/// its temperature, right when it is the target's own top answer.
fn unseen_ece(samples: &[(&ruling_calibration::LabelledLogits, f64)]) -> anyhow::Result<f64> {
    let mut confidences = Vec::with_capacity(samples.len());
    let mut correct = Vec::with_capacity(samples.len());
    for (sample, temperature) in samples {
        let probs = ruling_calibration::softmax_with_temperature(&sample.logits, *temperature)?;
        let predicted = argmax_or_first(&probs);
        confidences.push(probs[predicted]);
        let right = match &sample.target {
            ruling_calibration::Target::Hard(index) => *index,
            ruling_calibration::Target::Soft(target) => argmax_or_first(target),
        };
        correct.push(predicted == right);
    }
    Ok(ruling_calibration::expected_calibration_error(
        &confidences,
        &correct,
        FIT_ECE_BINS,
    )?)
}

fn training_record(config: &TrainConfig, state: &RunState) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::json!({
        "config": config,
        "best_step": state.best_step,
        "steps_run": state.step,
        "tokens_seen": state.tokens_seen,
        "history": state.history,
    }))
}

fn refresh_history(output: &Path, state: &RunState) -> anyhow::Result<()> {
    let path = output.join(META_FILE);
    let mut meta: CheckpointMeta = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )?;
    meta.training = training_record(&state.config, state)?;
    write_atomic(
        &path,
        format!("{}\n", serde_json::to_string_pretty(&meta)?).as_bytes(),
    )?;
    Ok(())
}
