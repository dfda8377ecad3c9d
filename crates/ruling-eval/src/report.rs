//! `ruling-eval report`: `report.md` (a table per dataset and question type with the raw,
//! prior-corrected, rotated and calibrated columns side by side, and the figures),
//! `report.json` (every figure) and `figures/*.svg`, each written atomically.
//!
//! The calibrated column's temperatures come from, in order: `--calibration FILE` (checked
//! against the run's provenance); the calibration the run's engine applied; a fit on these
//! very rows when they are development rows (in-sample, so optimistic, and labelled so); for
//! held-out rows without a calibration there is no calibrated column.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ruling_calibration::{
    AnswerType, BootstrapInterval, Calibration, ReliabilityDiagram, Temperatures,
};
use serde::Serialize;

use crate::figures;
use crate::results::{ResultSet, RunManifest, write_atomic};
use crate::summary::{
    COVERAGE_ERROR, Column, ColumnMetrics, DatasetSummary, ECE_BINS, GroupSummary, Scaling,
    summarise,
};

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A results directory written by `ruling-eval run`.
    #[arg(long)]
    results: PathBuf,
    /// Temperatures for the calibrated column (fitted on dev results of the same settings).
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Where to write report.md, report.json and figures/ (default: the results directory),
    /// so one run can be reported under several calibrations.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Where the calibrated column's temperatures came from.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "source", rename_all = "kebab-case")]
pub enum CalibrationUsed {
    /// `report --calibration FILE`, fitted either for the run's settings (it scales the
    /// rotated column) or for one rotation with or without the prior (it scales the raw or
    /// prior-corrected column, which is what the engine answers with those settings).
    File {
        path: String,
        temperatures: Temperatures,
        scales: Column,
    },
    /// The calibration the run's engine applied.
    Run {
        path: String,
        temperatures: Temperatures,
    },
    /// Fitted on these rows themselves (development rows only).
    InSample {
        temperatures: Temperatures,
        questions: usize,
        left_out: usize,
    },
    /// No calibrated column.
    None { reason: String },
}

impl CalibrationUsed {
    pub fn scaling(&self) -> Option<Scaling> {
        match self {
            Self::File {
                temperatures,
                scales,
                ..
            } => Some(Scaling {
                temperatures: *temperatures,
                base: *scales,
            }),
            Self::Run { temperatures, .. } | Self::InSample { temperatures, .. } => {
                Some(Scaling::rotated(*temperatures))
            }
            Self::None { .. } => None,
        }
    }
}

/// Everything `report.json` holds.
#[derive(Debug, Serialize)]
pub struct Report {
    pub format_version: u32,
    pub run: RunManifest,
    pub calibration: CalibrationUsed,
    pub ece_bins: usize,
    pub coverage_error: f64,
    pub datasets: Vec<DatasetSummary>,
}

pub fn report(args: ReportArgs) -> anyhow::Result<()> {
    let written = write_to(
        &args.results,
        args.out.as_deref().unwrap_or(&args.results),
        args.calibration.as_deref(),
    )?;
    eprintln!("wrote {}", written.display());
    Ok(())
}

/// Builds the report of a results directory and writes it there; returns `report.md`'s path.
pub fn write(dir: &Path, calibration: Option<&Path>) -> anyhow::Result<PathBuf> {
    write_to(dir, dir, calibration)
}

/// Builds the report of the results in `results` and writes it into `dir`; returns
/// `report.md`'s path.
pub fn write_to(results: &Path, dir: &Path, calibration: Option<&Path>) -> anyhow::Result<PathBuf> {
    let set = ResultSet::read(results)?;
    let report = build(&set, calibration)?;
    let figures_dir = dir.join("figures");
    std::fs::create_dir_all(&figures_dir)
        .with_context(|| format!("creating {}", figures_dir.display()))?;
    for dataset in &report.datasets {
        for group in &dataset.groups {
            let diagrams: Vec<(&str, &ReliabilityDiagram)> = group
                .columns
                .iter()
                .filter_map(|c| Some((c.column.name(), c.reliability.as_ref()?)))
                .collect();
            if diagrams.is_empty() {
                continue;
            }
            let stem = figure_stem(&dataset.dataset, group.question_type);
            let title = format!(
                "{} ({}, {})",
                dataset.dataset, group.question_type, dataset.split
            );
            write_atomic(
                &figures_dir.join(format!("{stem}-reliability.svg")),
                figures::reliability(&format!("reliability: {title}"), &diagrams)?.as_bytes(),
            )?;
            write_atomic(
                &figures_dir.join(format!("{stem}-confidence.svg")),
                figures::confidence(&format!("confidence: {title}"), &diagrams)?.as_bytes(),
            )?;
        }
    }
    let mut json = serde_json::to_vec_pretty(&report)?;
    json.push(b'\n');
    write_atomic(&dir.join("report.json"), &json)?;
    let markdown = dir.join("report.md");
    write_atomic(&markdown, render(&report).as_bytes())?;
    Ok(markdown)
}

fn figure_stem(dataset: &str, kind: AnswerType) -> String {
    let safe: String = dataset
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-{kind}")
}

pub fn build(set: &ResultSet, calibration: Option<&Path>) -> anyhow::Result<Report> {
    let used = calibration_used(set, calibration)?;
    let scaling = used.scaling();
    let datasets = set
        .datasets
        .iter()
        .map(|(name, lines)| summarise(name, &set.manifest.split, lines, scaling.as_ref()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Report {
        format_version: crate::results::FORMAT_VERSION,
        run: set.manifest.clone(),
        calibration: used,
        ece_bins: ECE_BINS,
        coverage_error: COVERAGE_ERROR,
        datasets,
    })
}

fn calibration_used(set: &ResultSet, file: Option<&Path>) -> anyhow::Result<CalibrationUsed> {
    if let Some(path) = file {
        let calibration = Calibration::load(path)?;
        let run = &set.manifest.provenance;
        // The run's own settings first, then the single-order columns its trace also holds.
        let scales = [Column::Rotated, Column::Raw, Column::PriorCorrected]
            .into_iter()
            .filter(|c| *c != Column::PriorCorrected || run.prior)
            .find(|c| {
                c.settings(run)
                    .is_some_and(|settings| calibration.check(&settings).is_ok())
            });
        let Some(scales) = scales else {
            let mismatch = calibration.check(run).err();
            return Err(anyhow::anyhow!(
                "{} was not fitted for the run in {}, nor for one rotation of it with or \
                 without the prior{}",
                path.display(),
                set.dir.display(),
                mismatch.map(|e| format!(": {e}")).unwrap_or_default()
            ));
        };
        return Ok(CalibrationUsed::File {
            path: path.display().to_string(),
            temperatures: calibration.temperatures,
            scales,
        });
    }
    if let Some(run) = &set.manifest.calibration {
        return Ok(CalibrationUsed::Run {
            path: run.path.clone(),
            temperatures: run.temperatures,
        });
    }
    if set.manifest.is_held_out() {
        return Ok(CalibrationUsed::None {
            reason: "held-out rows never fit a temperature; pass --calibration with one fitted \
                     on dev results"
                .to_owned(),
        });
    }
    Ok(match crate::calibrate::fit(set) {
        Ok((fit, left_out)) => CalibrationUsed::InSample {
            questions: fit.summary.per_type.values().map(|r| r.samples).sum(),
            temperatures: fit.temperatures,
            left_out,
        },
        Err(error) => CalibrationUsed::None {
            reason: format!("no temperature could be fitted: {error:#}"),
        },
    })
}

fn cell(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_infinite() => "inf".to_owned(),
        Some(v) => format!("{v:.3}"),
        None => "—".to_owned(),
    }
}

fn temperatures_text(t: &Temperatures) -> String {
    AnswerType::ALL
        .iter()
        .map(|&k| format!("{k} {:.3}", t.get(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The markdown text of a report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Evaluation report\n");
    let _ = writeln!(out, "{}\n", run_line(&report.run));
    let _ = writeln!(
        out,
        "Calibrated column: {}.\n",
        calibration_text(&report.calibration)
    );
    let _ = writeln!(
        out,
        "Columns (one traced pass per record; `docs/eval.md` has the exact rules): **raw** is \
         the options in the given order with no prior; **prior-corrected** the same order with \
         the content-free prior subtracted (runs with `--prior` only); **rotated** the mean \
         over every shown order in log space, as the engine folds them (prior-corrected when \
         the run has the prior); **calibrated** the rotated scores divided by the question \
         type's temperature. Confidence is the largest probability; ECE over {} equal bins; \
         coverage is the largest share answered, most confident first, at most {:.0}% wrong; \
         flip rate compares the options as given and reversed (choice and score: a second \
         request with reversed options; noul: the engine's no-first order, traced when \
         rotations >= 2; a temperature never moves an argmax, so calibrated flips as rotated \
         does).\n",
        report.ece_bins,
        report.coverage_error * 100.0
    );
    render_calibration_effects(&mut out, &report.datasets);
    for dataset in &report.datasets {
        render_dataset(&mut out, dataset);
    }
    out
}

/// The run's settings: model, revision, adapter, mode, rotations, prior, split, seed.
fn run_line(run: &RunManifest) -> String {
    format!(
        "Model `{}` (id `{}`, revision `{}`{}), {}{}; rotations {}, prior {}; split **{}**, \
         seed {}; reversal requests {}.",
        run.model,
        run.provenance.model_id,
        run.provenance.revision.as_deref().unwrap_or("none"),
        run.provenance
            .adapter_digest
            .as_deref()
            .map(|d| format!(", LoRA adapter sha256 `{d}`"))
            .unwrap_or_default(),
        run.mode,
        run.url
            .as_deref()
            .map(|u| format!(" at {u}"))
            .unwrap_or_default(),
        run.provenance.rotations,
        if run.provenance.prior { "on" } else { "off" },
        run.split,
        run.seed,
        if run.reversal { "on" } else { "off" },
    )
}

/// Which temperatures the calibrated column used, and what they are worth.
fn calibration_text(calibration: &CalibrationUsed) -> String {
    match calibration {
        CalibrationUsed::File {
            path,
            temperatures,
            scales,
        } => {
            format!(
                "temperatures from `{path}`: {}{}",
                temperatures_text(temperatures),
                match scales {
                    Column::Rotated => String::new(),
                    other => format!(
                        "; fitted for one rotation {} the prior, so they divide the **{}** \
                         scores (what that engine answers), not the rotated ones",
                        if *other == Column::Raw {
                            "without"
                        } else {
                            "with"
                        },
                        other.name()
                    ),
                }
            )
        }
        CalibrationUsed::Run { path, temperatures } => format!(
            "the run's own calibration `{path}`: {}",
            temperatures_text(temperatures)
        ),
        CalibrationUsed::InSample {
            temperatures,
            questions,
            left_out,
        } => format!(
            "temperatures fitted on these same {questions} questions ({left_out} left out), \
             in-sample and so optimistic: {}. Fit on one dev run with `ruling-eval calibrate` \
             and report another with `--calibration`",
            temperatures_text(temperatures)
        ),
        CalibrationUsed::None { reason } => format!("none ({reason})"),
    }
}

fn interval_text(i: &BootstrapInterval) -> String {
    // Rounding noise under half the last digit shown prints as +0.000, not -0.000.
    let show = |x: f64| if x.abs() < 5e-4 { 0.0 } else { x };
    format!(
        "{:+.3} [{:+.3}, {:+.3}]",
        show(i.estimate),
        show(i.lower),
        show(i.upper)
    )
}

/// The table of what the temperature did to every group's ECE, when there is one.
fn render_calibration_effects(out: &mut String, datasets: &[DatasetSummary]) {
    let rows: Vec<String> = datasets
        .iter()
        .flat_map(|d| d.groups.iter().map(move |g| (d, g)))
        .filter_map(|(d, g)| {
            let e = g.calibration_effect.as_ref()?;
            Some(format!(
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {} | {} |",
                d.dataset,
                g.question_type,
                e.questions,
                e.raw_ece,
                e.rotated_ece,
                e.calibrated_ece,
                interval_text(&e.versus_raw),
                interval_text(&e.versus_rotated),
            ))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## What calibration did to the ECE
"
    );
    let _ = writeln!(
        out,
        "Calibrated minus raw, and calibrated minus rotated (the column the temperature \
         divides), on the same labelled questions; negative is better calibrated. In brackets a \
         paired bootstrap 95% interval (10,000 resamples of the questions, seed 0).\n"
    );
    let _ = writeln!(
        out,
        "| dataset | type | questions | raw ECE | rotated ECE | calibrated ECE | \
         calibrated − raw | calibrated − rotated |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let _ = writeln!(out, "{row}");
    }
    let _ = writeln!(out);
}

fn render_dataset(out: &mut String, dataset: &DatasetSummary) {
    let _ = writeln!(out, "## {} ({})\n", dataset.dataset, dataset.split);
    let _ = writeln!(out, "{}.\n", dataset_facts(dataset));
    for group in &dataset.groups {
        render_group(out, &dataset.dataset, group);
    }
}

/// Records, refusals, latency and tokens of one dataset, as one sentence.
fn dataset_facts(dataset: &DatasetSummary) -> String {
    let mut facts = format!("{} records ({} refused)", dataset.records, dataset.refused);
    if let Some(latency) = &dataset.latency_ms {
        let _ = write!(
            facts,
            "; latency p50 {:.1} ms, p99 {:.1} ms, mean {:.1} ms",
            latency.p50, latency.p99, latency.mean
        );
    }
    if let Some(tokens) = dataset.input_tokens_per_request {
        let _ = write!(facts, "; {tokens:.1} input tokens per request");
    }
    if let Some(reversal) = &dataset.reversal {
        let _ = write!(
            facts,
            "; reversal requests (not counted above): {}, p50 {:.1} ms, {:.1} input tokens each",
            reversal.requests, reversal.latency_ms.p50, reversal.input_tokens_per_request
        );
    }
    facts
}

/// One question type of a dataset: its heading, the table of columns, the notes and the
/// figures.
fn render_group(out: &mut String, dataset: &str, group: &GroupSummary) {
    let mut head = format!(
        "### {}: {} questions, {} labelled",
        group.question_type, group.questions, group.labelled
    );
    if group.soft_targets > 0 {
        let _ = write!(head, ", {} with soft targets", group.soft_targets);
    }
    if group.two_stage > 0 {
        let _ = write!(head, ", {} asked in two stages", group.two_stage);
    }
    let _ = writeln!(out, "{head}\n");
    let score = group.question_type == AnswerType::Score;
    let soft = group.soft_targets > 0;
    let mut header = vec![
        "column",
        "accuracy",
        "macro-F1",
        "ECE",
        "Brier",
        "log loss",
        "coverage@5%",
        "flip rate",
    ];
    if score {
        header.push("MAE (levels)");
    }
    if soft {
        header.push("KL (nats)");
    }
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(header.len() - 1));
    for column in &group.columns {
        let _ = writeln!(out, "{}", row(column, group.temperature, score, soft));
    }
    let _ = writeln!(out, "\n{}.\n", group_notes(group).join("; "));
    let stem = figure_stem(dataset, group.question_type);
    if group.columns.iter().any(|c| c.reliability.is_some()) {
        let _ = writeln!(
            out,
            "![reliability diagram](figures/{stem}-reliability.svg) \
             ![confidence histogram](figures/{stem}-confidence.svg)\n"
        );
    }
}

/// What the table of a group does not say: missing columns, the flip rate's base, what
/// calibration did, labels ruled out, the candidate mass.
fn group_notes(group: &GroupSummary) -> Vec<String> {
    let missing: Vec<&str> = Column::SIDE_BY_SIDE
        .iter()
        .filter(|c| !group.columns.iter().any(|m| m.column == **c))
        .map(|c| c.name())
        .collect();
    let mut notes = Vec::new();
    if !missing.is_empty() {
        notes.push(format!(
            "not available: {} (prior-corrected needs a run with --prior; calibrated needs \
             temperatures)",
            missing.join(", ")
        ));
    }
    match group.columns.first().map(|c| c.flip_items) {
        Some(0) | None => notes.push(
            "no flip rate: no question has a reversed reading (a run without reversal \
             requests)"
                .to_owned(),
        ),
        Some(n) => notes.push(format!("flip rate over {n} questions")),
    }
    if let Some(e) = &group.calibration_effect {
        notes.push(format!(
            "calibration moved the ECE from {:.3} (raw) to {:.3}: {}",
            e.raw_ece,
            e.calibrated_ece,
            interval_text(&e.versus_raw)
        ));
    }
    let ruled_out: Vec<String> = group
        .columns
        .iter()
        .filter(|c| c.ruled_out > 0)
        .map(|c| format!("{} {}", c.column.name(), c.ruled_out))
        .collect();
    if !ruled_out.is_empty() {
        notes.push(format!(
            "questions whose label got probability 0 (log loss inf): {}",
            ruled_out.join(", ")
        ));
    }
    if let Some(mass) = group.candidate_mass {
        notes.push(format!("mean candidate mass {mass:.3}"));
    }
    notes
}

fn row(column: &ColumnMetrics, temperature: Option<f64>, score: bool, soft: bool) -> String {
    let name = match (column.column, temperature) {
        (Column::Calibrated, Some(t)) => format!("calibrated (T = {t:.3})"),
        (c, _) => c.name().to_owned(),
    };
    let mut cells = vec![
        name,
        cell(column.accuracy),
        cell(column.macro_f1),
        cell(column.ece),
        cell(column.brier),
        cell(column.log_loss),
        cell(column.coverage_at_5pct_error),
        cell(column.flip_rate),
    ];
    if score {
        cells.push(cell(column.mean_absolute_error));
    }
    if soft {
        cells.push(cell(column.kl_divergence));
    }
    format!("| {} |", cells.join(" | "))
}
