//! The coherence report: `report.json` (every score and the settings it was measured under),
//! `report.md` (the same as tables) and `coherence.svg` (each relation's score with its
//! interval, coloured by dimension), like the other reports of this crate.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use ruling_corpus::coherence::{Dimension, Relation};
use serde::{Deserialize, Serialize};

use super::Manifest;
use super::score::{Interval, LEVEL, RESAMPLES, Scores};
use crate::results::write_atomic;

pub const FIGURE: &str = "coherence.svg";

/// What `report.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub manifest: Manifest,
    /// States measured, and those the engine refused whole.
    pub states: usize,
    pub skipped_states: usize,
    /// Base questions left out because the engine refused them even alone.
    pub dropped_questions: usize,
    /// States per dataset.
    pub datasets: Vec<(String, usize)>,
    pub requests: usize,
    pub resamples: usize,
    pub level: f64,
    #[serde(flatten)]
    pub scores: Scores,
}

/// Writes `report.json`, `report.md` and the figure into `out`.
pub fn write(out: &Path, report: &Report) -> anyhow::Result<()> {
    write_atomic(
        &out.join("report.json"),
        &serde_json::to_vec_pretty(report)?,
    )?;
    write_atomic(&out.join("report.md"), markdown(report).as_bytes())?;
    write_atomic(&out.join(FIGURE), figure(&report.scores)?.as_bytes())?;
    Ok(())
}

pub fn report(
    manifest: Manifest,
    outcomes: &[super::measure::StateOutcome],
    scores: Scores,
) -> Report {
    let mut datasets: Vec<(String, usize)> = Vec::new();
    for outcome in outcomes {
        match datasets.iter_mut().find(|(d, _)| *d == outcome.dataset) {
            Some((_, n)) => *n += 1,
            None => datasets.push((outcome.dataset.clone(), 1)),
        }
    }
    Report {
        manifest,
        states: outcomes.len(),
        skipped_states: outcomes.iter().filter(|o| o.skipped.is_some()).count(),
        dropped_questions: outcomes.iter().map(|o| o.dropped.len()).sum(),
        datasets,
        requests: outcomes.iter().map(|o| o.requests).sum(),
        resamples: RESAMPLES,
        level: LEVEL,
        scores,
    }
}

fn cell(score: Option<Interval>) -> String {
    score.map_or_else(
        || "-".to_owned(),
        |s| format!("{:.1} [{:.1}, {:.1}]", s.score, s.lower, s.upper),
    )
}

fn markdown(report: &Report) -> String {
    let m = &report.manifest;
    let scores = &report.scores;
    let mut md = String::new();
    let _ = writeln!(md, "# Coherence: {}\n", m.model);
    let _ = writeln!(
        md,
        "`ruling-eval coherence`, {} ({}{}); {}. {} development states ({}), {} skipped, {} \
         requests; base questions per state {} or more ({} refused by the engine even alone, \
         left out), at most {} questions a request; seed {}.\n",
        m.mode,
        m.model,
        m.url.as_ref().map_or(String::new(), |u| format!(" at {u}")),
        m.settings,
        report.states,
        report
            .datasets
            .iter()
            .map(|(d, n)| format!("{d} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        report.skipped_states,
        report.requests,
        m.questions,
        report.dropped_questions,
        m.batch,
        m.seed,
    );
    let _ = writeln!(
        md,
        "A test passes when its deviation is at most {} (for distributions the largest \
         absolute difference over the compared groups; for bounds, how far the answer lies \
         outside them). Scores are the share of passing tests, 0 to 100, with a {:.0}% \
         bootstrap interval over states ({} resamples); a dimension is the mean of its \
         relations. What each relation asks: `docs/coherence.md`.\n",
        scores.tolerance,
        report.level * 100.0,
        report.resamples
    );
    let _ = writeln!(md, "![relation scores]({FIGURE})\n");
    let _ = writeln!(md, "| dimension | relations | score [95% interval] |");
    let _ = writeln!(md, "|---|---:|---|");
    for d in &scores.dimensions {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            d.dimension,
            d.relations,
            cell(d.score)
        );
    }
    let _ = writeln!(md, "| **overall** | | {} |\n", cell(scores.overall));
    let _ = writeln!(
        md,
        "| relation | dimension | tests | passed | score [95% interval] | mean deviation | max \
         deviation | refused | undefined |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---|---:|---:|---:|---:|");
    let number = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"));
    for r in &scores.relations {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.relation,
            r.dimension,
            r.tests,
            r.passed,
            cell(r.score),
            number(r.mean_deviation),
            number(r.max_deviation),
            r.refused,
            r.undefined
        );
    }
    md
}

/// Okabe-Ito colours, one per dimension.
fn colour(dimension: Dimension) -> RGBColor {
    match dimension {
        Dimension::Batch => RGBColor(0, 114, 178),
        Dimension::ChoiceSet => RGBColor(230, 159, 0),
        Dimension::Logical => RGBColor(0, 158, 115),
        Dimension::Representation => RGBColor(204, 121, 167),
        Dimension::Measure => RGBColor(86, 180, 233),
    }
}

/// A horizontal bar per relation with a score, its interval as a whisker.
fn figure(scores: &Scores) -> anyhow::Result<String> {
    let rows: Vec<(Relation, Dimension, Interval)> = scores
        .relations
        .iter()
        .filter_map(|r| Some((r.relation, r.dimension, r.score?)))
        .rev() // plotters counts rows from the bottom: the first relation on top
        .collect();
    let names: Vec<&'static str> = rows.iter().map(|(r, _, _)| r.as_str()).collect();
    let n = rows.len().max(1);
    let height = 120 + 22 * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, height)).into_drawing_area();
        root.fill(&WHITE)?;
        // The key gets a strip of its own below the chart, where it hides no bar.
        let (plot, key) = root.split_vertically(height - 32);
        for (i, dimension) in Dimension::ALL.into_iter().enumerate() {
            let x = 152 + 110 * i as i32;
            key.draw(&Rectangle::new(
                [(x, 8), (x + 12, 20)],
                colour(dimension).filled(),
            ))?;
            key.draw(&Text::new(
                dimension.as_str(),
                (x + 18, 8),
                ("sans-serif", 13),
            ))?;
        }
        let mut chart = ChartBuilder::on(&plot)
            .caption(
                format!("Coherence (tolerance {})", scores.tolerance),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(140)
            .build_cartesian_2d(0f64..100f64, (0usize..n).into_segmented())?;
        chart
            .configure_mesh()
            .x_desc("share of tests within the tolerance (%)")
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    names.get(*i).copied().unwrap_or("").to_owned()
                }
                SegmentValue::Last => String::new(),
            })
            .disable_y_mesh()
            // Not `max_light_lines(0)`: plotters overflows computing no key points on a
            // segmented axis.
            .light_line_style(TRANSPARENT)
            .draw()?;
        chart.draw_series(rows.iter().enumerate().map(|(i, (_, dimension, s))| {
            let mut bar = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (s.score, SegmentValue::Exact(i + 1)),
                ],
                colour(*dimension).filled(),
            );
            bar.set_margin(3, 3, 0, 0);
            bar
        }))?;
        chart.draw_series(rows.iter().enumerate().map(|(i, (_, _, s))| {
            PathElement::new(
                vec![
                    (s.lower, SegmentValue::CenterOf(i)),
                    (s.upper, SegmentValue::CenterOf(i)),
                ],
                BLACK.stroke_width(2),
            )
        }))?;
        root.present()?;
    }
    Ok(svg)
}
