//! `ruling-train soup`: the element-wise mean of checkpoints one recipe trained with different
//! seeds (a "model soup", Wortsman et al. 2022).
//!
//! Runs fine-tuned from the same base with the same settings stay close in weight space, and
//! their mean answers much as their ensemble would at the cost of one model. The soup is refused
//! unless every checkpoint shares the base, the files and every training setting but the seed.
//! Its temperatures are fitted, as the trainer fits a run's, on the first checkpoint's
//! validation rows (the split is by a hash of the state, so no checkpoint trained on them),
//! rebuilt from its recorded settings and checked against its recorded data digest. The
//! validation loss of every checkpoint and of the soup is printed and recorded, so whether
//! averaging helped is read on development rows.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use candle_core::{DType, Tensor};
use ruling_encoder::checkpoint::{NewCheckpoint, safetensors_bytes};
use ruling_encoder::{DecisionModel, EncoderFiles, Kernels};

use super::{Sides, TrainConfig, calibrate, validate, weights_dtype};
use crate::data::DataArgs;
use crate::state::{RunConfig, Validation};

/// Arguments of `ruling-train soup`.
#[derive(Debug, Clone, clap::Args)]
pub struct SoupArgs {
    /// The checkpoints to average, two or more: trained from one base with the same settings
    /// and data, differing only in `--seed`.
    #[arg(required = true, num_args = 2..)]
    pub checkpoints: Vec<PathBuf>,
    /// Where the averaged checkpoint goes.
    #[arg(long)]
    pub output: PathBuf,
    /// The datasets folder the checkpoints were trained from [default: `RULING_DATASETS`,
    /// else `shared/datasets` beside the workspace].
    #[arg(long)]
    pub datasets_root: Option<PathBuf>,
}

/// One checkpoint to average: where it is, its files and the settings it was trained with.
struct Ingredient {
    dir: PathBuf,
    files: EncoderFiles,
    config: TrainConfig,
}

pub fn run(args: &SoupArgs) -> anyhow::Result<()> {
    let ingredients = args
        .checkpoints
        .iter()
        .map(|dir| open(dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let first = &ingredients[0];
    for other in &ingredients[1..] {
        check_same_recipe(first, other)?;
    }
    let mean = mean_tensors(&ingredients)?;
    let sides = rebuild_sides(first, args.datasets_root.clone())?;

    let mut validations = Vec::new();
    for ingredient in &ingredients {
        let validation = validate_tensors(ingredient.files.tensors.clone(), first, &sides)?;
        eprintln!(
            "validation: {} {}",
            ingredient.dir.display(),
            summary(&validation)
        );
        validations.push(validation);
    }
    let soup = validate_tensors(mean.clone(), first, &sides)?;
    eprintln!("validation: the soup {}", summary(&soup));

    let training = serde_json::json!({
        "soup": ingredients.iter().zip(&validations).map(|(ingredient, validation)| {
            serde_json::json!({
                "checkpoint": ingredient.dir,
                "weights_sha256": ingredient.files.weights_sha256,
                "seed": ingredient.config.seed,
                "validation": validation,
            })
        }).collect::<Vec<_>>(),
        "validation": soup,
        "config": first.config,
    });
    write(&args.output, first, &mean, training)?;
    calibrate(&args.output, &sides.unseen(), &candle_core::Device::Cpu)?;
    eprintln!(
        "done: the mean of {} checkpoints in {}",
        ingredients.len(),
        args.output.display()
    );
    Ok(())
}

/// The mean's checkpoint, at the first run's precision, with the first run's config and
/// tokenizer.
fn write(
    output: &Path,
    first: &Ingredient,
    mean: &HashMap<String, Tensor>,
    training: serde_json::Value,
) -> anyhow::Result<()> {
    let dtype = weights_dtype(&first.config.dtype)?;
    let meta = first.files.meta.as_ref().context("checked when opened")?;
    ruling_encoder::checkpoint::write_checkpoint(
        output,
        NewCheckpoint {
            name: &meta.name,
            base: &first.files,
            base_identity: meta.base.clone(),
            weights: &safetensors_bytes(mean, dtype)?,
            weights_dtype: &first.config.dtype,
            training,
        },
    )?;
    Ok(())
}

/// A trained, complete checkpoint and its recorded settings.
fn open(dir: &Path) -> anyhow::Result<Ingredient> {
    let files = EncoderFiles::open(dir)
        .with_context(|| format!("opening the checkpoint {}", dir.display()))?;
    let meta = files
        .trained_meta()
        .with_context(|| format!("{} is not a trained checkpoint to average", dir.display()))?;
    let config = meta.training.get("config").cloned().with_context(|| {
        format!(
            "{}'s decision.json records no training settings",
            dir.display()
        )
    })?;
    let config: TrainConfig = serde_json::from_value(config).with_context(|| {
        format!(
            "reading the training settings in {}'s decision.json",
            dir.display()
        )
    })?;
    Ok(Ingredient {
        dir: dir.to_owned(),
        files,
        config,
    })
}

/// The first checkpoint's examples, rebuilt from its recorded settings and refused unless the
/// records are the ones it trained on.
fn rebuild_sides(first: &Ingredient, datasets_root: Option<PathBuf>) -> anyhow::Result<Sides> {
    let config = &first.config;
    let data = DataArgs {
        datasets: config.datasets.clone(),
        per_source: config.per_source,
        caps: config.caps.clone().into_iter().collect(),
        files: config.data.iter().map(|f| f.path.clone()).collect(),
        weights: config.weights.clone().into_iter().collect(),
        datasets_root,
        coherence: config.coherence,
    };
    let (_, gathered) = data.gather(config.seed)?;
    if gathered.records_sha256 != config.records_sha256 {
        bail!(
            "the records rebuilt from {}'s settings are not the ones it was trained on (sha256 \
             {}, recorded {}): a dataset or a --data file has changed since, or --datasets-root \
             names another folder",
            first.dir.display(),
            gathered.records_sha256,
            config.records_sha256
        );
    }
    Sides::new(gathered.records, config, &first.files)
}

/// Refuse to average checkpoints that are not one recipe's runs.
fn check_same_recipe(first: &Ingredient, other: &Ingredient) -> anyhow::Result<()> {
    let (a, b) = (
        first.files.meta.as_ref().context("checked when opened")?,
        other.files.meta.as_ref().context("checked when opened")?,
    );
    let mut differing: Vec<&str> = Vec::new();
    if a.base != b.base {
        differing.push("base");
    }
    if a.config_sha256 != b.config_sha256 {
        differing.push("config.json");
    }
    if a.tokenizer_sha256 != b.tokenizer_sha256 {
        differing.push("tokenizer.json");
    }
    differing.extend(
        first
            .config
            .differences(&other.config)
            .into_iter()
            .filter(|field| !matches!(*field, "seed" | "records_sha256")),
    );
    if !differing.is_empty() {
        bail!(
            "{} and {} are not runs of one recipe: they differ in {} (only --seed may differ)",
            first.dir.display(),
            other.dir.display(),
            differing.join(", ")
        );
    }
    Ok(())
}

/// The element-wise mean of every checkpoint's tensors, in f32.
fn mean_tensors(ingredients: &[Ingredient]) -> anyhow::Result<HashMap<String, Tensor>> {
    let scale = 1.0 / ingredients.len() as f64;
    let first = &ingredients[0].files.tensors;
    let mut mean = HashMap::with_capacity(first.len());
    for (name, tensor) in first {
        let mut sum = tensor.to_dtype(DType::F32)?;
        for other in &ingredients[1..] {
            let Some(t) = other.files.tensors.get(name) else {
                bail!("{} has no tensor {name}", other.files.dir.display());
            };
            sum = sum.add(&t.to_dtype(DType::F32)?).with_context(|| {
                format!("{name} has another shape in {}", other.files.dir.display())
            })?;
        }
        mean.insert(name.clone(), sum.affine(scale, 0.0)?);
    }
    for other in &ingredients[1..] {
        if let Some(extra) = other.files.tensors.keys().find(|k| !first.contains_key(*k)) {
            bail!(
                "{} has a tensor {extra} that {} lacks",
                other.files.dir.display(),
                ingredients[0].files.dir.display()
            );
        }
    }
    Ok(mean)
}

fn validate_tensors(
    tensors: HashMap<String, Tensor>,
    first: &Ingredient,
    sides: &Sides,
) -> anyhow::Result<Validation> {
    let model = DecisionModel::from_tensors(tensors, &first.files.config, Kernels::Fused)?;
    validate(
        &model,
        &sides.valid,
        &sides.valid_families,
        0,
        &candle_core::Device::Cpu,
    )
}

fn summary(validation: &Validation) -> String {
    format!(
        "loss {:.4}, accuracy {:.3}, ECE {:.3} over {} questions",
        validation.loss,
        validation.accuracy,
        validation.expected_calibration_error,
        validation.questions
    )
}
