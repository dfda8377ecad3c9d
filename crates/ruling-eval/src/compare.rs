//! `ruling-eval compare A B`: two result sets side by side per dataset and question type,
//! with the difference A - B of accuracy and of ECE and a paired bootstrap interval for each.
//!
//! Questions are paired by record id and question id; only questions labelled and answered in
//! every result set compared count. A side may be several result sets (`A0,A1`): runs of one
//! recipe, such as checkpoints trained with different seeds. Its accuracy and ECE are then the
//! means over its runs, and the intervals come from `ruling_calibration::runs_bootstrap`, which
//! resamples a side's runs as well as the questions; with one run a side it is the plain paired
//! bootstrap (n draws with replacement, ChaCha8 from the seed, percentiles interpolated between
//! order statistics). ECE is not a mean of per-item values, so each resample recomputes it.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use ruling_calibration::{
    AnswerType, BootstrapInterval, BootstrapOptions, MetricError, runs_bootstrap,
};
use serde::Serialize;

use crate::derive::argmax;
use crate::results::{ResultSet, RunManifest};
use crate::summary::{Column, Scaling, ece_statistic};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  ruling-eval compare runs/raw runs/debiased --column answer
  ruling-eval compare runs/seed0,runs/seed1 runs/new-seed0,runs/new-seed1")]
pub struct CompareArgs {
    /// The first results directory (A), or several separated by commas: runs of one recipe
    /// (training seeds, say), compared by their mean.
    #[arg(value_delimiter = ',', num_args = 1, required = true)]
    a: Vec<PathBuf>,
    /// The second results directory (B), or several separated by commas.
    #[arg(value_delimiter = ',', num_args = 1, required = true)]
    b: Vec<PathBuf>,
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

/// One metric on both sides (each the mean over its runs), with the interval of A - B.
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
    /// Every run of each side, in the order given.
    a: Vec<&'a RunManifest>,
    b: Vec<&'a RunManifest>,
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

/// Compares the runs of `a` with those of `b` on every dataset all of them hold.
pub fn compare_sets(
    a: &[ResultSet],
    b: &[ResultSet],
    column: Column,
    options: &BootstrapOptions,
) -> anyhow::Result<Vec<Comparison>> {
    let mut comparisons = Vec::new();
    let Some(first) = a.first() else {
        bail!("side A has no result set");
    };
    for (dataset, _) in &first.datasets {
        let holds = |set: &ResultSet| set.datasets.iter().any(|(d, _)| d == dataset);
        if !a.iter().chain(b).all(holds) {
            continue;
        }
        let read = |sets: &[ResultSet]| -> anyhow::Result<Vec<Answers>> {
            sets.iter()
                .map(|set| answers(set, dataset, column))
                .collect()
        };
        let (left, right) = (read(a)?, read(b)?);
        for kind in AnswerType::ALL {
            let of_kind = |side: &Answers| -> BTreeSet<(String, String)> {
                side.iter()
                    .filter(|(_, v)| v.0 == kind)
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            let everywhere = |k: &(String, String)| {
                left.iter()
                    .chain(&right)
                    .all(|side| side.get(k).is_some_and(|v| v.0 == kind))
            };
            let keys: Vec<(String, String)> = of_kind(&left[0])
                .into_iter()
                .filter(|k| everywhere(k))
                .collect();
            if keys.is_empty() {
                continue;
            }
            // Questions some run of a side holds that not every run of both sides does.
            let unpaired = |sides: &[Answers]| {
                let all: BTreeSet<_> = sides.iter().flat_map(of_kind).collect();
                all.len() - keys.len()
            };
            let pick = |sides: &[Answers]| -> Vec<Vec<(f64, bool)>> {
                sides
                    .iter()
                    .map(|side| keys.iter().map(|k| (side[k].1, side[k].2)).collect())
                    .collect()
            };
            let (runs_a, runs_b) = (pick(&left), pick(&right));
            let runs_a: Vec<&[(f64, bool)]> = runs_a.iter().map(Vec::as_slice).collect();
            let runs_b: Vec<&[(f64, bool)]> = runs_b.iter().map(Vec::as_slice).collect();
            let accuracy = sides(&runs_a, &runs_b, options, share_right)?;
            let ece = sides(&runs_a, &runs_b, options, ece_statistic)?;
            comparisons.push(Comparison {
                dataset: dataset.clone(),
                question_type: kind,
                paired: keys.len(),
                only_a: unpaired(&left),
                only_b: unpaired(&right),
                accuracy,
                ece,
            });
        }
    }
    Ok(comparisons)
}

/// Accuracy of (confidence, right) pairs, as a statistic for `sides`.
fn share_right() -> impl FnMut(&[(f64, bool)]) -> Result<f64, MetricError> {
    |items| Ok(items.iter().filter(|(_, right)| *right).count() as f64 / items.len() as f64)
}

/// One statistic of (confidence, right) pairs on both sides, each the mean over its runs, and
/// the interval of A - B. `statistic` makes a fresh instance of the statistic.
fn sides<S>(
    a: &[&[(f64, bool)]],
    b: &[&[(f64, bool)]],
    options: &BootstrapOptions,
    statistic: impl Fn() -> S,
) -> anyhow::Result<Sides>
where
    S: FnMut(&[(f64, bool)]) -> Result<f64, MetricError>,
{
    let mean_over = |runs: &[&[(f64, bool)]]| -> Result<f64, MetricError> {
        let mut of = statistic();
        let mut sum = 0.0;
        for run in runs {
            sum += of(run)?;
        }
        Ok(sum / runs.len() as f64)
    };
    Ok(Sides {
        a: mean_over(a)?,
        b: mean_over(b)?,
        difference: runs_bootstrap(a, b, options, statistic())?,
    })
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
    a: &[ResultSet],
    b: &[ResultSet],
    column: Column,
    options: &BootstrapOptions,
    rows: &[Comparison],
) -> String {
    let mut out = String::new();
    for (name, side) in [("A", a), ("B", b)] {
        if let [one] = side {
            let _ = writeln!(out, "{name}: {}", describe(one));
        } else {
            let _ = writeln!(out, "{name}: the mean of {} runs", side.len());
            for set in side {
                let _ = writeln!(out, "- {}", describe(set));
            }
        }
    }
    let runs = if a.len() + b.len() > 2 {
        "; a side of several runs is their mean, and each resample also draws its runs with \
         replacement"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "\nColumn `{}`; questions paired by record and question id; {:.0}% paired bootstrap \
         intervals of A - B over {} resamples (seed {}){runs}; * marks an interval that leaves \
         out 0.\n",
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
    let read = |dirs: &[PathBuf]| -> anyhow::Result<Vec<ResultSet>> {
        dirs.iter().map(|dir| ResultSet::read(dir)).collect()
    };
    let (a, b) = (read(&args.a)?, read(&args.b)?);
    let options = BootstrapOptions {
        resamples: args.resamples,
        seed: args.seed,
        ..BootstrapOptions::default()
    };
    let rows = compare_sets(&a, &b, column, &options)?;
    if rows.is_empty() {
        let list = |dirs: &[PathBuf]| -> String {
            let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            names.join(", ")
        };
        bail!(
            "{} and {} share no labelled question (same dataset, record and question id)",
            list(&args.a),
            list(&args.b)
        );
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let output = Output {
            a: a.iter().map(|set| &set.manifest).collect(),
            b: b.iter().map(|set| &set.manifest).collect(),
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
