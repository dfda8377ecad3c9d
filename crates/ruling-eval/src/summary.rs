//! Every figure of a report, computed from result lines: per dataset and question type, each
//! column's accuracy, macro-F1, ECE with its reliability bins, Brier, log loss, coverage at 5%
//! error, flip rate, the MAE of the expected level (scores), the KL divergence from soft
//! targets; per dataset the latency and tokens per request.
//!
//! Definitions (every metric comes from `ruling_calibration::metrics`):
//! - a question counts for the hard metrics when it has a label; its prediction is the argmax
//!   of the column's distribution (the earliest key on a tie), its confidence the largest
//!   probability (for a score too: the engine's entropy-based score confidence is not what a
//!   reliability diagram of the argmax level measures);
//! - ECE: [`ECE_BINS`] equal-width confidence bins, answer-weighted mean |accuracy - mean
//!   confidence|; Brier: `sum_k (p_k - y_k)^2` over every answer key (0 to 2); log loss:
//!   `-ln p(label)`, `inf` when the label got probability 0;
//! - flip rate: share of questions (with a reversed reading) whose argmax differs between
//!   the options as given and reversed, mapped back to the same keys;
//! - KL: `KL(target || p)` in nats over the questions with a soft target, `p` floored at 1e-12.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use ruling_calibration::temperature::FIT_ECE_BINS;
use ruling_calibration::{
    AnswerType, BootstrapInterval, BootstrapOptions, MetricError, Provenance, ReliabilityDiagram,
    Temperatures, accuracy, brier_score, coverage_at_error, expected_calibration_error,
    expected_level, flip_rate, log_loss, macro_f1, mean_absolute_error, mean_kl_divergence,
    quantile, reliability_diagram, runs_bootstrap,
};
use serde::{Serialize, Serializer};

use crate::derive::{Dist, argmax, log_scores, scaled};
use crate::results::{QuestionResult, ResultLine};

/// Confidence bins of the ECE and the reliability diagram: the calibration crate's fitting
/// reports its ECE with the same bins, so the two agree.
pub const ECE_BINS: usize = FIT_ECE_BINS;
/// The error rate coverage is reported at.
pub const COVERAGE_ERROR: f64 = 0.05;

/// What makes the calibrated column: temperatures, and the column whose scores they divide
/// (the rotated one for a calibration fitted for the run's own settings; the raw one for a
/// calibration fitted for one rotation without the prior, as `ruling-serve` runs by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaling {
    pub temperatures: Temperatures,
    pub base: Column,
}

impl Scaling {
    /// Temperatures for the rotated scores, as the engine applies them.
    pub fn rotated(temperatures: Temperatures) -> Self {
        Self {
            temperatures,
            base: Column::Rotated,
        }
    }
}

/// The four ways of reading one traced question, side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Column {
    Raw,
    PriorCorrected,
    Rotated,
    Calibrated,
    /// The engine's own answer (what the run's settings return); compare uses it.
    Answer,
}

impl Column {
    pub const SIDE_BY_SIDE: [Column; 4] = [
        Column::Raw,
        Column::PriorCorrected,
        Column::Rotated,
        Column::Calibrated,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Column::Raw => "raw",
            Column::PriorCorrected => "prior-corrected",
            Column::Rotated => "rotated",
            Column::Calibrated => "calibrated",
            Column::Answer => "answer",
        }
    }

    pub fn parse(given: &str) -> Option<Column> {
        [
            Column::Raw,
            Column::PriorCorrected,
            Column::Rotated,
            Column::Calibrated,
            Column::Answer,
        ]
        .into_iter()
        .find(|c| c.name() == given)
    }

    /// The settings under which the engine answers as this column reads, given the run's
    /// own: raw is one rotation without the prior, prior-corrected one rotation with it,
    /// rotated (and calibrated) the run's settings. `None` for the engine's answer.
    pub fn settings(self, run: &Provenance) -> Option<Provenance> {
        let (rotations, prior) = match self {
            Column::Raw => (1, false),
            Column::PriorCorrected => (1, true),
            Column::Rotated | Column::Calibrated => (run.rotations, run.prior),
            Column::Answer => return None,
        };
        Some(Provenance {
            rotations,
            prior,
            ..run.clone()
        })
    }

    /// The question's distribution under this column; `None` where the run cannot give it
    /// (no prior, no temperatures).
    pub fn dist(self, q: &QuestionResult, scaling: Option<&Scaling>) -> Option<Dist> {
        match self {
            Column::Raw => Some(q.raw.clone()),
            Column::PriorCorrected => q.prior.clone(),
            Column::Rotated => Some(q.rotated.clone()),
            Column::Calibrated => {
                let scaling = scaling?;
                let base = scaling.base.dist(q, None)?;
                let keys: Vec<String> = base.keys().cloned().collect();
                scaled(&keys, &log_scores(&base), scaling.temperatures.get(q.kind)).ok()
            }
            Column::Answer => Some(q.answer.clone()),
        }
    }

    /// The reversed reading under this column. A temperature never moves an argmax, so the
    /// calibrated column flips exactly when the column it scales does.
    fn reversed(self, q: &QuestionResult, scaling: Option<&Scaling>) -> Option<Dist> {
        let reversed = q.reversed.as_ref()?;
        match self {
            Column::Raw => Some(reversed.raw.clone()),
            Column::PriorCorrected => reversed.prior.clone(),
            Column::Rotated => Some(reversed.rotated.clone()),
            Column::Calibrated => scaling?.base.reversed(q, None),
            Column::Answer => None,
        }
    }
}

/// Serialises a number, writing `"inf"` for an infinite one (JSON has no infinity).
fn number<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) if v.is_finite() => serializer.serialize_f64(*v),
        Some(v) if v.is_infinite() && *v > 0.0 => serializer.serialize_str("inf"),
        Some(v) if v.is_infinite() => serializer.serialize_str("-inf"),
        _ => serializer.serialize_none(),
    }
}

/// One column's figures over one group of questions.
#[derive(Debug, Clone, Serialize)]
pub struct ColumnMetrics {
    pub column: Column,
    /// Questions with a label.
    pub labelled: usize,
    pub accuracy: Option<f64>,
    pub macro_f1: Option<f64>,
    pub ece: Option<f64>,
    pub brier: Option<f64>,
    #[serde(serialize_with = "number")]
    pub log_loss: Option<f64>,
    /// Labelled questions whose label got probability 0 (log loss `inf`).
    pub ruled_out: usize,
    pub coverage_at_5pct_error: Option<f64>,
    pub flip_rate: Option<f64>,
    /// Questions the flip rate is over.
    pub flip_items: usize,
    /// Scores only: mean |expected level - label level|.
    pub mean_absolute_error: Option<f64>,
    /// Questions with a soft target: mean KL(target || p).
    pub kl_divergence: Option<f64>,
    pub soft_items: usize,
    /// The bins behind the ECE; their counts are the confidence histogram.
    pub reliability: Option<ReliabilityDiagram>,
}

/// How much the calibrated column moved the ECE: the difference calibrated minus raw, and
/// calibrated minus rotated (the column the temperature divides), each with a paired bootstrap
/// 95% interval over the labelled questions. Negative is better calibrated.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationEffect {
    /// Labelled questions the differences are over.
    pub questions: usize,
    pub raw_ece: f64,
    pub rotated_ece: f64,
    pub calibrated_ece: f64,
    pub versus_raw: BootstrapInterval,
    pub versus_rotated: BootstrapInterval,
}

/// One question type of one dataset.
#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    pub question_type: AnswerType,
    pub questions: usize,
    pub labelled: usize,
    pub soft_targets: usize,
    /// Questions asked in two stages (more options than answer codes).
    pub two_stage: usize,
    /// Mean candidate mass over every traced order.
    pub candidate_mass: Option<f64>,
    /// The temperature of the calibrated column, when there is one.
    pub temperature: Option<f64>,
    /// Columns the run can give, in side-by-side order.
    pub columns: Vec<ColumnMetrics>,
    /// What the temperature did to the ECE, when there is a calibrated column.
    pub calibration_effect: Option<CalibrationEffect>,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

/// What the reversal requests cost.
#[derive(Debug, Clone, Serialize)]
pub struct ReversalSummary {
    pub requests: usize,
    pub latency_ms: Latency,
    pub input_tokens_per_request: f64,
}

/// One dataset of a result set.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetSummary {
    pub dataset: String,
    pub split: String,
    pub records: usize,
    /// Records the engine refused (over the context, say).
    pub refused: usize,
    pub latency_ms: Option<Latency>,
    pub input_tokens_per_request: Option<f64>,
    pub output_tokens_per_request: Option<f64>,
    pub reversal: Option<ReversalSummary>,
    pub groups: Vec<GroupSummary>,
}

/// The ECE of (confidence, right) pairs, as a statistic for
/// `ruling_calibration::runs_bootstrap` (it keeps its buffers between calls).
pub fn ece_statistic() -> impl FnMut(&[(f64, bool)]) -> Result<f64, MetricError> {
    let (mut confidences, mut right) = (Vec::new(), Vec::new());
    move |pairs| {
        confidences.clear();
        right.clear();
        for &(c, r) in pairs {
            confidences.push(c);
            right.push(r);
        }
        expected_calibration_error(&confidences, &right, ECE_BINS)
    }
}

/// The percentile bootstrap interval of `ECE(a) - ECE(b)` over paired items: each resample
/// draws the items with replacement and recomputes both ECEs.
pub fn ece_bootstrap(
    conf_a: &[f64],
    right_a: &[bool],
    conf_b: &[f64],
    right_b: &[bool],
    options: &BootstrapOptions,
) -> anyhow::Result<BootstrapInterval> {
    let n = conf_a.len();
    if n == 0 || conf_b.len() != n || right_a.len() != n || right_b.len() != n {
        bail!("the ECE bootstrap needs the same non-zero number of items on both sides");
    }
    let pairs = |c: &[f64], r: &[bool]| -> Vec<(f64, bool)> {
        c.iter().copied().zip(r.iter().copied()).collect()
    };
    let (a, b) = (pairs(conf_a, right_a), pairs(conf_b, right_b));
    Ok(runs_bootstrap(&[&a], &[&b], options, ece_statistic())?)
}

fn latency(values: &[f64]) -> Option<Latency> {
    Some(Latency {
        p50: quantile(values, 0.5)?,
        p99: quantile(values, 0.99)?,
        mean: values.iter().sum::<f64>() / values.len() as f64,
    })
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Summarises one dataset's lines; `scaling` makes the calibrated column.
pub fn summarise(
    dataset: &str,
    split: &str,
    lines: &[ResultLine],
    scaling: Option<&Scaling>,
) -> anyhow::Result<DatasetSummary> {
    let answered: Vec<&ResultLine> = lines.iter().filter(|l| l.error.is_none()).collect();
    let latencies: Vec<f64> = answered.iter().map(|l| l.latency_ms).collect();
    let reversal: Vec<_> = answered.iter().filter_map(|l| l.reversal).collect();
    let mut by_type: BTreeMap<AnswerType, Vec<&QuestionResult>> = BTreeMap::new();
    for line in &answered {
        for question in line.questions.values() {
            by_type.entry(question.kind).or_default().push(question);
        }
    }
    let groups = by_type
        .into_iter()
        .map(|(kind, questions)| {
            group(kind, &questions, scaling).with_context(|| format!("{dataset}, {kind} questions"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(DatasetSummary {
        dataset: dataset.to_owned(),
        split: split.to_owned(),
        records: lines.len(),
        refused: lines.len() - answered.len(),
        latency_ms: latency(&latencies),
        input_tokens_per_request: mean(answered.iter().map(|l| l.usage.input_tokens as f64)),
        output_tokens_per_request: mean(answered.iter().map(|l| l.usage.output_tokens as f64)),
        reversal: latency(&reversal.iter().map(|r| r.latency_ms).collect::<Vec<_>>()).map(
            |latency_ms| ReversalSummary {
                requests: reversal.len(),
                latency_ms,
                input_tokens_per_request: mean(reversal.iter().map(|r| r.input_tokens as f64))
                    .unwrap_or(0.0),
            },
        ),
        groups,
    })
}

fn group(
    kind: AnswerType,
    questions: &[&QuestionResult],
    scaling: Option<&Scaling>,
) -> anyhow::Result<GroupSummary> {
    let mut columns = Vec::new();
    for column in Column::SIDE_BY_SIDE {
        if let Some(metrics) = column_metrics(column, questions, scaling)? {
            columns.push(metrics);
        }
    }
    Ok(GroupSummary {
        question_type: kind,
        questions: questions.len(),
        labelled: questions.iter().filter(|q| q.label.is_some()).count(),
        soft_targets: questions.iter().filter(|q| q.target.is_some()).count(),
        two_stage: questions.iter().filter(|q| q.two_stage).count(),
        candidate_mass: mean(
            questions
                .iter()
                .flat_map(|q| q.candidate_mass.iter().copied()),
        ),
        temperature: scaling.map(|s| s.temperatures.get(kind)),
        columns,
        calibration_effect: calibration_effect(questions, scaling)?,
    })
}

/// The confidence and rightness of each labelled question under `column`, in question order;
/// `None` for a question the column cannot read.
fn readings(
    column: Column,
    questions: &[&QuestionResult],
    scaling: Option<&Scaling>,
) -> Vec<Option<(f64, bool)>> {
    questions
        .iter()
        .map(|q| {
            let label = q.label.as_ref()?;
            let dist = column.dist(q, scaling)?;
            let best = argmax(&dist);
            Some((
                dist[best].clamp(0.0, 1.0),
                dist.keys().nth(best) == Some(label),
            ))
        })
        .collect()
}

/// The calibrated column's ECE against the raw and rotated ones on the same questions.
fn calibration_effect(
    questions: &[&QuestionResult],
    scaling: Option<&Scaling>,
) -> anyhow::Result<Option<CalibrationEffect>> {
    if scaling.is_none() {
        return Ok(None);
    }
    let raw = readings(Column::Raw, questions, scaling);
    let rotated = readings(Column::Rotated, questions, scaling);
    let calibrated = readings(Column::Calibrated, questions, scaling);
    let mut sides: [(Vec<f64>, Vec<bool>); 3] = Default::default();
    for ((r, o), c) in raw.iter().zip(&rotated).zip(&calibrated) {
        if let (Some(r), Some(o), Some(c)) = (r, o, c) {
            for (side, &(confidence, right)) in sides.iter_mut().zip([r, o, c]) {
                side.0.push(confidence);
                side.1.push(right);
            }
        }
    }
    let [(raw_c, raw_r), (rot_c, rot_r), (cal_c, cal_r)] = &sides;
    if cal_c.is_empty() {
        return Ok(None);
    }
    let options = BootstrapOptions::default();
    Ok(Some(CalibrationEffect {
        questions: cal_c.len(),
        raw_ece: expected_calibration_error(raw_c, raw_r, ECE_BINS)?,
        rotated_ece: expected_calibration_error(rot_c, rot_r, ECE_BINS)?,
        calibrated_ece: expected_calibration_error(cal_c, cal_r, ECE_BINS)?,
        versus_raw: ece_bootstrap(cal_c, cal_r, raw_c, raw_r, &options)?,
        versus_rotated: ece_bootstrap(cal_c, cal_r, rot_c, rot_r, &options)?,
    }))
}

/// One column's metrics over `questions`, or `None` when no question has that column.
pub fn column_metrics(
    column: Column,
    questions: &[&QuestionResult],
    scaling: Option<&Scaling>,
) -> anyhow::Result<Option<ColumnMetrics>> {
    let dists: Vec<(&QuestionResult, Dist)> = questions
        .iter()
        .filter_map(|q| column.dist(q, scaling).map(|d| (*q, d)))
        .collect();
    if dists.is_empty() {
        return Ok(None);
    }
    let hard = HardRows::collect(&dists)?;
    let labelled = hard.labels.len();
    let reliability = if labelled > 0 {
        Some(reliability_diagram(
            &hard.confidences,
            &hard.correct,
            ECE_BINS,
        )?)
    } else {
        None
    };
    let when_labelled = |f: &dyn Fn() -> anyhow::Result<f64>| -> anyhow::Result<Option<f64>> {
        if labelled == 0 {
            Ok(None)
        } else {
            f().map(Some)
        }
    };

    // Pairs of rows: (as asked, reversed) for the flip rate, (answer, teacher) for the KL.
    let (mut first, mut second) = (Vec::new(), Vec::new());
    let (mut soft_rows, mut soft_targets) = (Vec::new(), Vec::new());
    for (q, dist) in &dists {
        if let Some(reversed) = column.reversed(q, scaling) {
            first.push(values(dist));
            second.push(values(&reversed));
        }
        if let Some(target) = &q.target {
            soft_rows.push(values(dist));
            soft_targets.push(values(target));
        }
    }

    Ok(Some(ColumnMetrics {
        column,
        labelled,
        accuracy: when_labelled(&|| Ok(accuracy(&hard.predictions, &hard.labels)?))?,
        macro_f1: when_labelled(&|| Ok(macro_f1(&hard.predictions, &hard.labels)?))?,
        ece: reliability.as_ref().map(|r| r.ece),
        brier: when_labelled(&|| Ok(brier_score(&hard.rows, &hard.targets)?))?,
        log_loss: when_labelled(&|| Ok(log_loss(&hard.rows, &hard.targets)?))?,
        ruled_out: hard
            .rows
            .iter()
            .zip(&hard.targets)
            .filter(|(row, t)| row[**t] <= 0.0)
            .count(),
        coverage_at_5pct_error: when_labelled(&|| {
            Ok(coverage_at_error(
                &hard.confidences,
                &hard.correct,
                COVERAGE_ERROR,
            )?)
        })?,
        flip_rate: if first.is_empty() {
            None
        } else {
            Some(flip_rate(&first, &second)?)
        },
        flip_items: first.len(),
        mean_absolute_error: if hard.levels.is_empty() {
            None
        } else {
            Some(mean_absolute_error(&hard.expected, &hard.levels)?)
        },
        kl_divergence: if soft_rows.is_empty() {
            None
        } else {
            Some(mean_kl_divergence(&soft_rows, &soft_targets)?)
        },
        soft_items: soft_rows.len(),
        reliability,
    }))
}

fn values(dist: &Dist) -> Vec<f64> {
    dist.values().copied().collect()
}

/// The labelled questions of one column, row by row: what the hard-label metrics read.
#[derive(Default)]
struct HardRows {
    predictions: Vec<String>,
    labels: Vec<String>,
    /// The top probability, and whether its option is the label.
    confidences: Vec<f64>,
    correct: Vec<bool>,
    /// The whole distribution and the label's index in it.
    rows: Vec<Vec<f64>>,
    targets: Vec<usize>,
    /// Score questions only: the expected level and the labelled level.
    expected: Vec<f64>,
    levels: Vec<usize>,
}

impl HardRows {
    fn collect(dists: &[(&QuestionResult, Dist)]) -> anyhow::Result<Self> {
        let mut out = Self::default();
        for (q, dist) in dists {
            let Some(label) = &q.label else { continue };
            let keys: Vec<&String> = dist.keys().collect();
            let target = keys
                .iter()
                .position(|k| *k == label)
                .with_context(|| format!("label {label:?} is not one of the keys {keys:?}"))?;
            let best = argmax(dist);
            out.predictions.push(keys[best].clone());
            out.labels.push(label.clone());
            out.confidences.push(dist[best].clamp(0.0, 1.0));
            out.correct.push(best == target);
            let row = values(dist);
            if q.kind == AnswerType::Score {
                out.expected.push(expected_level(&row)?);
                out.levels.push(target);
            }
            out.rows.push(row);
            out.targets.push(target);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Reversed;

    fn dist(pairs: &[(&str, f64)]) -> Dist {
        pairs.iter().map(|(k, p)| ((*k).to_owned(), *p)).collect()
    }

    fn noul(p_yes: f64, label: &str, reversed_yes: f64) -> QuestionResult {
        let d = dist(&[("yes", p_yes), ("no", 1.0 - p_yes)]);
        QuestionResult {
            kind: AnswerType::Noul,
            label: Some(label.to_owned()),
            target: None,
            temperature: 1.0,
            rotations: 2,
            two_stage: false,
            candidate_mass: vec![0.5, 0.7],
            answer: d.clone(),
            raw: d.clone(),
            prior: None,
            rotated: d.clone(),
            calibrated: None,
            reversed: Some(Reversed {
                raw: dist(&[("yes", reversed_yes), ("no", 1.0 - reversed_yes)]),
                prior: None,
                rotated: d,
            }),
            orders: Vec::new(),
        }
    }

    #[test]
    fn the_ece_bootstrap_of_identical_sides_is_zero_and_seeded() {
        let conf = [0.9, 0.8, 0.6, 0.55, 0.7, 0.95];
        let right = [true, false, true, false, true, true];
        let options = BootstrapOptions {
            resamples: 500,
            seed: 3,
            ..BootstrapOptions::default()
        };
        let same = ece_bootstrap(&conf, &right, &conf, &right, &options).unwrap();
        assert_eq!((same.estimate, same.lower, same.upper), (0.0, 0.0, 0.0));
        // Always 0.99 sure at 4/6 right (ECE 0.323) against always 0.67 sure (ECE 0.003).
        let sharper = [0.99; 6];
        let honest = [0.67; 6];
        let a = ece_bootstrap(&sharper, &right, &honest, &right, &options).unwrap();
        assert_eq!(
            a,
            ece_bootstrap(&sharper, &right, &honest, &right, &options).unwrap()
        );
        assert!((a.estimate - (0.99 - 4.0 / 6.0 - (0.67 - 4.0 / 6.0))).abs() < 1e-12);
        assert!(a.lower <= a.estimate && a.estimate <= a.upper, "{a:?}");
        assert!(
            a.estimate > 0.0,
            "always 0.99 sure at 4/6 right is the worse calibrated"
        );
        assert!(ece_bootstrap(&[], &[], &[], &[], &options).is_err());
    }

    #[test]
    fn hand_worked_noul_group() {
        // Three nouls: right at 0.9, wrong at 0.8 (says yes, label no), right at 0.6 (no).
        // Reversed raw readings: the second flips to no, the others keep their argmax.
        let questions = [
            noul(0.9, "yes", 0.7),
            noul(0.8, "no", 0.3),
            noul(0.4, "no", 0.2),
        ];
        let refs: Vec<&QuestionResult> = questions.iter().collect();
        let raw = column_metrics(Column::Raw, &refs, None).unwrap().unwrap();
        assert_eq!(raw.labelled, 3);
        assert!((raw.accuracy.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        // Brier: (0.1^2 + 0.1^2) + (0.8^2 + 0.8^2) + (0.4^2 + 0.4^2) = 0.02 + 1.28 + 0.32.
        assert!((raw.brier.unwrap() - 1.62 / 3.0).abs() < 1e-12);
        let log_loss = -(0.9f64.ln() + 0.2f64.ln() + 0.6f64.ln()) / 3.0;
        assert!((raw.log_loss.unwrap() - log_loss).abs() < 1e-12);
        assert!((raw.flip_rate.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // Rotated reads both orders, so it cannot flip.
        let rotated = column_metrics(Column::Rotated, &refs, None)
            .unwrap()
            .unwrap();
        assert_eq!(rotated.flip_rate, Some(0.0));
        assert!(
            column_metrics(Column::PriorCorrected, &refs, None)
                .unwrap()
                .is_none()
        );
        assert!(
            column_metrics(Column::Calibrated, &refs, None)
                .unwrap()
                .is_none()
        );
        // A large temperature flattens every answer toward 0.5 without moving an argmax.
        let hot = Scaling::rotated(Temperatures::new(50.0, 1.0, 1.0).unwrap());
        let calibrated = column_metrics(Column::Calibrated, &refs, Some(&hot))
            .unwrap()
            .unwrap();
        assert_eq!(calibrated.accuracy, raw.accuracy);
        let diagram = calibrated.reliability.unwrap();
        assert!(diagram.bins[7].count == 3, "{diagram:?}");
        // The group's calibration effect is the difference of those two ECEs.
        let summary = group(AnswerType::Noul, &refs, Some(&hot)).unwrap();
        let effect = summary.calibration_effect.unwrap();
        assert_eq!(effect.questions, 3);
        assert!((effect.raw_ece - raw.ece.unwrap()).abs() < 1e-12);
        assert!((effect.calibrated_ece - calibrated.ece.unwrap()).abs() < 1e-12);
        let difference = calibrated.ece.unwrap() - raw.ece.unwrap();
        assert!((effect.versus_raw.estimate - difference).abs() < 1e-12);
        assert!(effect.versus_raw.lower <= difference && difference <= effect.versus_raw.upper);
        assert!(
            group(AnswerType::Noul, &refs, None)
                .unwrap()
                .calibration_effect
                .is_none()
        );
        // Scaling the raw column instead: its argmax and so its flips are the raw column's.
        let over_raw = Scaling {
            base: Column::Raw,
            ..hot
        };
        let calibrated = column_metrics(Column::Calibrated, &refs, Some(&over_raw))
            .unwrap()
            .unwrap();
        assert_eq!(calibrated.accuracy, raw.accuracy);
        assert_eq!(calibrated.flip_rate, raw.flip_rate);
        // At T = 50 the 0.9 answer is ln(9) / 50 in log-odds: about 0.511.
        let flattened = 1.0 / (1.0 + (-(9f64.ln()) / 50.0).exp());
        let first = Column::Calibrated
            .dist(&questions[0], Some(&over_raw))
            .unwrap();
        assert!((first["yes"] - flattened).abs() < 1e-12, "{first:?}");
    }
}
