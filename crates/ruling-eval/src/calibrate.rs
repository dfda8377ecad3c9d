//! `ruling-eval calibrate`: one temperature per question type, fitted on development results,
//! written as a calibration file carrying the run's provenance.
//!
//! The logits fitted are the rotated column's scores: what the engine divides by its
//! temperature (after prior subtraction and rotation averaging, with the run's settings).
//! `--column raw` fits the raw column instead, the options as given without the prior, which
//! is what an engine with one rotation and no prior reads (`ruling-serve`'s defaults), and
//! writes the file for those settings; `--column prior-corrected` likewise for one rotation
//! with the prior. One traced dev run thus calibrates either way of serving. A temperature is
//! kept only when a likelihood-ratio test rejects T = 1 at the 5% level ([`FIT_OPTIONS`]). The
//! target of a question is its soft target where the dataset has one (the share of human
//! votes), else its label. A question whose target puts weight on an option the engine ruled
//! out (a two-stage choice that dropped the right intent) cannot be fitted at any temperature
//! and is left out, and counted.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use ruling_calibration::{
    AnswerType, CHI_SQUARED_1_95, Calibration, FitOptions, LabelledLogits, Target, TemperatureFit,
    fit_temperatures_with,
};

use crate::derive::log_scores;
use crate::results::ResultSet;
use crate::summary::Column;

#[derive(Debug, clap::Args)]
#[command(after_help = "Example:
  ruling-eval run --model smollm2-135m --dataset boolq,chaosnli-snli,sst5 --split dev \\
      --limit 500 --out runs/dev
  ruling-eval calibrate --results runs/dev --out calibration.json
  ruling-serve --model smollm2-135m --calibration calibration.json")]
pub struct CalibrateArgs {
    /// A results directory written by `ruling-eval run` on the dev split.
    #[arg(long)]
    results: PathBuf,
    /// The calibration file to write.
    #[arg(long)]
    out: PathBuf,
    /// Which scores to fit: rotated (the run's own settings), raw (one rotation without the
    /// prior: ruling-serve's defaults) or prior-corrected (one rotation with the prior). The
    /// file is written for the settings that column answers with.
    #[arg(long, default_value = "rotated", value_parser = ["rotated", "raw", "prior-corrected"])]
    column: String,
    /// Keep a fitted temperature only when its likelihood ratio against T = 1 reaches this
    /// (default: the 5% point of chi-squared with one degree of freedom); below it the type
    /// stays at 1.0. 0 keeps every fit.
    #[arg(long, default_value_t = CHI_SQUARED_1_95)]
    min_likelihood_ratio: f64,
}

/// The fitting samples of a result set, and how many questions could not be fitted.
pub struct Samples {
    pub samples: Vec<(AnswerType, LabelledLogits)>,
    pub skipped: usize,
}

pub fn samples(set: &ResultSet, column: Column) -> Samples {
    let mut samples = Vec::new();
    let mut skipped = 0;
    for (_, lines) in &set.datasets {
        for question in lines.iter().flat_map(|l| l.questions.values()) {
            let Some(scores) = column.dist(question, None) else {
                continue;
            };
            let logits = log_scores(&scores);
            let target = match (&question.target, &question.label) {
                (Some(target), _) => {
                    let q: Vec<f64> = target.values().copied().collect();
                    if q.iter()
                        .zip(&logits)
                        .any(|(&q, &l)| q > 0.0 && l == f64::NEG_INFINITY)
                    {
                        skipped += 1;
                        continue;
                    }
                    Target::Soft(q)
                }
                (None, Some(label)) => match scores.keys().position(|k| k == label) {
                    Some(i) if logits[i].is_finite() => Target::Hard(i),
                    _ => {
                        skipped += 1;
                        continue;
                    }
                },
                (None, None) => continue,
            };
            samples.push((question.kind, LabelledLogits { logits, target }));
        }
    }
    Samples { samples, skipped }
}

/// How `calibrate` and the report's in-sample fit decide: a temperature is kept only where a
/// likelihood-ratio test rejects T = 1 at the 5% level.
pub const FIT_OPTIONS: FitOptions = FitOptions {
    min_likelihood_ratio: CHI_SQUARED_1_95,
};

/// Fits the temperatures of a development result set's rotated column; refuses held-out
/// results.
pub fn fit(set: &ResultSet) -> anyhow::Result<(TemperatureFit, usize)> {
    fit_column(set, Column::Rotated, &FIT_OPTIONS)
}

/// Fits the temperatures of one column (raw, prior-corrected or rotated) of a development
/// result set; refuses held-out results.
pub fn fit_column(
    set: &ResultSet,
    column: Column,
    options: &FitOptions,
) -> anyhow::Result<(TemperatureFit, usize)> {
    refuse_held_out(set)?;
    if column == Column::PriorCorrected && !set.manifest.provenance.prior {
        bail!(
            "{} ran without --prior, so it has no prior-corrected column to fit",
            set.dir.display()
        );
    }
    let Samples { samples, skipped } = samples(set, column);
    if samples.is_empty() {
        bail!(
            "{} holds no labelled questions to fit a temperature on",
            set.dir.display()
        );
    }
    let fit = fit_temperatures_with(&samples, options).context("fitting temperatures")?;
    Ok((fit, skipped))
}

fn refuse_held_out(set: &ResultSet) -> anyhow::Result<()> {
    let held_out = set.manifest.is_held_out()
        || set
            .datasets
            .iter()
            .any(|(_, lines)| lines.iter().any(|l| l.split != "dev"));
    if held_out {
        bail!(
            "{} holds {} results; a temperature is fitted on dev results only \
             (shared/datasets/README.md: a held-out set never fits a temperature). Run the dev \
             split and calibrate on that",
            set.dir.display(),
            set.manifest.split
        );
    }
    Ok(())
}

pub fn calibrate(args: CalibrateArgs) -> anyhow::Result<()> {
    let set = ResultSet::read(&args.results)?;
    let column = Column::parse(&args.column)
        .with_context(|| format!("--column {} is not a column", args.column))?;
    if !(args.min_likelihood_ratio.is_finite() && args.min_likelihood_ratio >= 0.0) {
        bail!(
            "--min-likelihood-ratio must be a finite number >= 0, got {}",
            args.min_likelihood_ratio
        );
    }
    let options = FitOptions {
        min_likelihood_ratio: args.min_likelihood_ratio,
    };
    let (fit, skipped) = fit_column(&set, column, &options)?;
    let settings = column
        .settings(&set.manifest.provenance)
        .context("the engine's answer column has no settings to fit for")?;
    let calibration = Calibration::from_fit(settings.clone(), fit, Some(now()));
    calibration.save(&args.out)?;
    let mut out = String::new();
    for (kind, result) in &calibration
        .fitted
        .as_ref()
        .map(|f| f.per_type.clone())
        .unwrap_or_default()
    {
        let kept = match (
            result.kept_at_one,
            result.maximum_likelihood,
            result.likelihood_ratio,
        ) {
            (true, Some(t), Some(ratio)) => format!(
                " (the best fit, {t:.4}, is kept at 1: likelihood ratio {ratio:.2} < {:.2}, \
                 so these rows do not show a temperature helps)",
                options.min_likelihood_ratio
            ),
            (false, _, Some(ratio)) => format!(" (likelihood ratio {ratio:.2})"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{kind}: temperature {:.4}{kept} on {} questions (log loss {:.4} -> {:.4}, ECE {:.4} -> {:.4}{})\n",
            result.temperature,
            result.samples,
            result.nll_before,
            result.nll_after,
            result.ece_before,
            result.ece_after,
            if result.at_bound { ", at the search bound" } else { "" }
        ));
    }
    if skipped > 0 {
        out.push_str(&format!(
            "{skipped} questions left out: their target is on an option the engine ruled out\n"
        ));
    }
    eprint!("{out}");
    eprintln!(
        "wrote {} (the {} column: for rotations {}, prior {})",
        display(&args.out),
        column.name(),
        settings.rotations,
        if settings.prior { "on" } else { "off" }
    );
    Ok(())
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// The current UTC time as RFC 3339 (`2026-11-30T08:21:12Z`).
pub fn now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(seconds)
}

fn rfc3339(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + std::time::Duration::from_secs(seconds))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
