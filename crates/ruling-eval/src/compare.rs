//! `ruling-eval compare A B`: two result sets side by side per dataset and question type,
//! with the difference A - B of accuracy and of ECE and a paired bootstrap interval for each.
//!
//! Questions are paired by record id and question id; only questions labelled and answered in
//! both count. Accuracy's interval is `ruling_calibration::paired_bootstrap` over the paired
//! right/wrong indicators. ECE is not a mean of per-item values, so its interval resamples the
//! paired questions the same way (n draws with replacement, ChaCha8 from the seed), recomputes
//! both ECEs on each resample, and takes the percentiles of their difference (linear
//! interpolation between order statistics, as the accuracy interval does).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use ruling_calibration::{
    AnswerType, BootstrapInterval, BootstrapOptions, expected_calibration_error, paired_bootstrap,
};
use serde::Serialize;

use crate::derive::argmax;
use crate::results::{ResultSet, RunManifest};
use crate::summary::{Column, ECE_BINS, Scaling, ece_bootstrap};

#[derive(Debug, clap::Args)]
#[command(after_help = "Example:
  ruling-eval compare runs/raw runs/debiased --column answer")]
pub struct CompareArgs {
    /// The first results directory (A).
    a: PathBuf,
    /// The second results directory (B).
    b: PathBuf,
    /// Which distribution of each side to compare: answer (what each run's engine returned),
    /// raw, prior-corrected, rotated, or calibrated (each run's own calibration).
    #[arg(long, default_value = "answer")]
    column: String,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 10_000)]
    resamples: usize,
    /// Seeds the bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print JSON instead of a markdown table.
    #[arg(long)]
    json: bool,
}

/// One metric on both sides, with the interval of A - B.
#[derive(Debug, Clone, Serialize)]
pub struct Sides {
    pub a: f64,
    pub b: f64,
    pub difference: BootstrapInterval,
}

/// One dataset and question type.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub dataset: String,
    pub question_type: AnswerType,
    pub paired: usize,
    pub only_a: usize,
    pub only_b: usize,
    pub accuracy: Sides,
    pub ece: Sides,
}

#[derive(Debug, Serialize)]
struct Output<'a> {
    a: &'a RunManifest,
    b: &'a RunManifest,
    column: &'static str,
    level: f64,
    resamples: usize,
    seed: u64,
    comparisons: &'a [Comparison],
}

/// Confidence and correctness of each labelled question, keyed by (record id, question id).
type Answers = HashMap<(String, String), (AnswerType, f64, bool)>;

fn answers(set: &ResultSet, dataset: &str, column: Column) -> anyhow::Result<Answers> {
    let scaling = set
        .manifest
        .calibration
        .as_ref()
        .map(|c| Scaling::rotated(c.temperatures));
    if column == Column::Calibrated && scaling.is_none() {
        bail!(
            "{} ran without a calibration, so it has no calibrated column to compare",
            set.dir.display()
        );
    }
    let mut out = Answers::new();
    let Some((_, lines)) = set.datasets.iter().find(|(d, _)| d == dataset) else {
        return Ok(out);
    };
    for line in lines {
        for (question_id, q) in &line.questions {
            let Some(label) = &q.label else { continue };
            let Some(dist) = column.dist(q, scaling.as_ref()) else {
                continue;
            };
            let best = argmax(&dist);
            let right = dist.keys().nth(best) == Some(label);
            out.insert(
                (line.id.clone(), question_id.clone()),
                (q.kind, dist[best].clamp(0.0, 1.0), right),
            );
        }
    }
    Ok(out)
}

/// Compares `a` and `b` on every dataset both hold.
pub fn compare_sets(
    a: &ResultSet,
    b: &ResultSet,
    column: Column,
    options: &BootstrapOptions,
) -> anyhow::Result<Vec<Comparison>> {
    let mut comparisons = Vec::new();
    for (dataset, _) in &a.datasets {
        if !b.datasets.iter().any(|(d, _)| d == dataset) {
            continue;
        }
        let left = answers(a, dataset, column)?;
        let right = answers(b, dataset, column)?;
        for kind in AnswerType::ALL {
            let mut keys: Vec<&(String, String)> = left
                .iter()
                .filter(|(k, v)| v.0 == kind && right.get(*k).is_some_and(|w| w.0 == kind))
                .map(|(k, _)| k)
                .collect();
            if keys.is_empty() {
                continue;
            }
            keys.sort();
            let count = |side: &Answers| side.values().filter(|v| v.0 == kind).count();
            let pick = |side: &Answers| -> (Vec<f64>, Vec<bool>) {
                keys.iter().map(|k| (side[*k].1, side[*k].2)).unzip()
            };
            let (conf_a, right_a) = pick(&left);
            let (conf_b, right_b) = pick(&right);
            let indicator =
                |r: &[bool]| -> Vec<f64> { r.iter().map(|&x| f64::from(u8::from(x))).collect() };
            let (acc_a, acc_b) = (indicator(&right_a), indicator(&right_b));
            let accuracy = Sides {
                a: acc_a.iter().sum::<f64>() / acc_a.len() as f64,
                b: acc_b.iter().sum::<f64>() / acc_b.len() as f64,
                difference: paired_bootstrap(&acc_a, &acc_b, options)?,
            };
            let ece = Sides {
                a: expected_calibration_error(&conf_a, &right_a, ECE_BINS)?,
                b: expected_calibration_error(&conf_b, &right_b, ECE_BINS)?,
                difference: ece_bootstrap(&conf_a, &right_a, &conf_b, &right_b, options)?,
            };
            comparisons.push(Comparison {
                dataset: dataset.clone(),
                question_type: kind,
                paired: keys.len(),
                only_a: count(&left) - keys.len(),
                only_b: count(&right) - keys.len(),
                accuracy,
                ece,
            });
        }
    }
    Ok(comparisons)
}

fn describe(set: &ResultSet) -> String {
    let m = &set.manifest;
    format!(
        "{} (`{}`, rotations {}, prior {}, calibration {}, {} split)",
        set.dir.display(),
        m.model,
        m.provenance.rotations,
        if m.provenance.prior { "on" } else { "off" },
        m.calibration.as_ref().map_or("none", |c| c.path.as_str()),
        m.split
    )
}

fn interval(i: &BootstrapInterval) -> String {
    format!(
        "{:+.3} [{:+.3}, {:+.3}]{}",
        i.estimate,
        i.lower,
        i.upper,
        if i.excludes_zero() { " *" } else { "" }
    )
}

/// The markdown form of a comparison.
pub fn render(
    a: &ResultSet,
    b: &ResultSet,
    column: Column,
    options: &BootstrapOptions,
    rows: &[Comparison],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {}", describe(a));
    let _ = writeln!(out, "B: {}", describe(b));
    let _ = writeln!(
        out,
        "\nColumn `{}`; questions paired by record and question id; {:.0}% paired bootstrap \
         intervals of A - B over {} resamples (seed {}); * marks an interval that leaves out 0.\n",
        column.name(),
        options.level * 100.0,
        options.resamples,
        options.seed
    );
    let _ = writeln!(
        out,
        "| dataset | type | paired | accuracy A | accuracy B | A - B [95% interval] | ECE A | ECE B | A - B [95% interval] |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for c in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {:.3} | {} | {:.3} | {:.3} | {} |",
            c.dataset,
            c.question_type,
            c.paired,
            c.accuracy.a,
            c.accuracy.b,
            interval(&c.accuracy.difference),
            c.ece.a,
            c.ece.b,
            interval(&c.ece.difference),
        );
    }
    let unpaired: Vec<String> = rows
        .iter()
        .filter(|c| c.only_a + c.only_b > 0)
        .map(|c| {
            format!(
                "{} {}: {} only in A, {} only in B",
                c.dataset, c.question_type, c.only_a, c.only_b
            )
        })
        .collect();
    if !unpaired.is_empty() {
        let _ = writeln!(out, "\nLeft out (not in both): {}.", unpaired.join("; "));
    }
    out
}

pub fn compare(args: CompareArgs) -> anyhow::Result<()> {
    let column = Column::parse(&args.column).with_context(|| {
        format!(
            "unknown column {:?}: expected answer, raw, prior-corrected, rotated or calibrated",
            args.column
        )
    })?;
    let a = ResultSet::read(&args.a)?;
    let b = ResultSet::read(&args.b)?;
    let options = BootstrapOptions {
        resamples: args.resamples,
        seed: args.seed,
        ..BootstrapOptions::default()
    };
    let rows = compare_sets(&a, &b, column, &options)?;
    if rows.is_empty() {
        bail!(
            "{} and {} share no labelled question (same dataset, record and question id)",
            args.a.display(),
            args.b.display()
        );
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let output = Output {
            a: &a.manifest,
            b: &b.manifest,
            column: column.name(),
            level: options.level,
            resamples: options.resamples,
            seed: options.seed,
            comparisons: &rows,
        };
        serde_json::to_writer_pretty(&mut stdout, &output)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", render(&a, &b, column, &options, &rows))?;
    }
    Ok(())
}
