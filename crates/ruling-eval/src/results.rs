//! A results directory: `run.json` (the settings every line was produced under) and
//! `results/<dataset>.jsonl` (one line per evaluated record, appended as the run goes).
//!
//! Lines are appended with one write each, newline last, so a run killed mid-write leaves at
//! most one unterminated line at the end of a file. Readers ignore it; [`repair`] cuts it off
//! before a rerun appends, so a record is never half-written and never written twice.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use indexmap::IndexMap;
use ruling_calibration::{AnswerType, Provenance, Temperatures};
use ruling_schema::Usage;
use serde::{Deserialize, Serialize};

use crate::derive::Dist;

/// The version of `run.json` and of the result lines this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The settings file of a results directory.
pub const RUN_FILE: &str = "run.json";
/// The folder of per-dataset result files.
pub const RESULTS_DIR: &str = "results";

/// What a run was: every line of its results was produced under these settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunManifest {
    pub format_version: u32,
    /// `in-process` or `http`.
    pub mode: String,
    /// The name requests carry: in-process the engine's model id, over http the served name.
    pub model: String,
    /// The server's base URL in http mode.
    pub url: Option<String>,
    /// Model, revision, rotations and prior: what a calibration fitted on these results is
    /// for.
    pub provenance: Provenance,
    /// `dev` or `held-out`.
    pub split: String,
    /// The sampling seed.
    pub seed: u64,
    /// Whether choice and score questions were asked a second time with their options
    /// reversed (for the flip rate).
    pub reversal: bool,
    /// The calibration the engine applied, if any.
    pub calibration: Option<RunCalibration>,
    /// Datasets evaluated into this directory, in the order first asked for.
    pub datasets: Vec<String>,
    /// The adaptive-rotation margin the engine stopped rotations at, if any (then a question
    /// may average fewer orders than `--rotations` asks for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive_margin: Option<f64>,
    /// The most options the engine showed in one pass, when the run set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_options_per_pass: Option<u64>,
    /// The layout the run fixed, when it fixed one (`auto`, `state-first`,
    /// `question-first`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
}

/// The calibration a run's engine applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCalibration {
    /// The file, as given.
    pub path: String,
    pub temperatures: Temperatures,
}

impl RunManifest {
    /// The first setting in which `self` (found on disk) and `other` (asked for now) differ,
    /// as `(name, on disk, asked for)`; datasets may differ.
    pub fn difference(&self, other: &RunManifest) -> Option<(&'static str, String, String)> {
        let show = |v: &dyn std::fmt::Debug| format!("{v:?}");
        if let Some((field, a, b)) = self.provenance.first_difference(&other.provenance) {
            return Some((field.as_str(), a, b));
        }
        let fields: [(&'static str, String, String); 8] = [
            ("mode", show(&self.mode), show(&other.mode)),
            ("model", show(&self.model), show(&other.model)),
            ("split", show(&self.split), show(&other.split)),
            ("seed", show(&self.seed), show(&other.seed)),
            ("reversal", show(&self.reversal), show(&other.reversal)),
            (
                "max_options_per_pass",
                show(&self.max_options_per_pass),
                show(&other.max_options_per_pass),
            ),
            ("layout", show(&self.layout), show(&other.layout)),
            (
                "calibration",
                show(&self.calibration.as_ref().map(|c| c.temperatures)),
                show(&other.calibration.as_ref().map(|c| c.temperatures)),
            ),
        ];
        fields.into_iter().find(|(_, a, b)| a != b)
    }

    pub fn is_held_out(&self) -> bool {
        self.split != "dev"
    }
}

/// One evaluated record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    /// The record's id.
    pub id: String,
    pub dataset: String,
    /// `dev` or `held-out`, repeated on every line so a file read alone still says it.
    pub split: String,
    /// Why the engine refused the record (a state over the context, say); no questions then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the request, in milliseconds (in http mode, as the client saw it).
    pub latency_ms: f64,
    /// The usage the response reported.
    pub usage: Usage,
    /// What the reversal request cost, when one was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reversal: Option<ReversalCost>,
    /// Per question, in the order asked.
    #[serde(default)]
    pub questions: IndexMap<String, QuestionResult>,
}

/// The cost of the second request that asks choice and score questions reversed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReversalCost {
    pub latency_ms: f64,
    pub input_tokens: u64,
}

/// One question of one record: its truth and the distributions the columns compare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionResult {
    #[serde(rename = "type")]
    pub kind: AnswerType,
    /// The answer key of the label (`yes`/`no`, an option key, a level index).
    pub label: Option<String>,
    /// The soft target over the answer keys, where the dataset has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Dist>,
    /// The temperature the engine applied.
    pub temperature: f64,
    /// How many orders the engine averaged.
    pub rotations: usize,
    /// Whether it was asked in two stages (a choice with more options than codes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub two_stage: bool,
    /// Share of the full-vocabulary probability on the codes, per order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_mass: Vec<f64>,
    /// The engine's answer as a distribution.
    pub answer: Dist,
    pub raw: Dist,
    pub prior: Option<Dist>,
    pub rotated: Dist,
    /// The rotated scores at the run's calibration temperatures; `None` without one.
    pub calibrated: Option<Dist>,
    /// The same question with its options reversed, mapped back to canonical keys.
    pub reversed: Option<Reversed>,
    /// With two or more orders: each order's log-probabilities (prior subtracted) by canonical
    /// key, in the order read (`null` for a key an order did not show), so how rotations
    /// combine can be replayed offline (docs/debiasing.md's adaptive-rotation measurements).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orders: Vec<Vec<Option<f64>>>,
}

/// A question's distributions with the options shown in reverse order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reversed {
    pub raw: Dist,
    pub prior: Option<Dist>,
    pub rotated: Dist,
}

/// Reads `run.json` of a results directory.
pub fn read_manifest(dir: &Path) -> anyhow::Result<RunManifest> {
    let path = dir.join(RUN_FILE);
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is {} a results directory written by `ruling-eval run`?)",
            path.display(),
            dir.display()
        )
    })?;
    let manifest: RunManifest =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if manifest.format_version != FORMAT_VERSION {
        bail!(
            "{} has format version {}; this build reads {FORMAT_VERSION}",
            path.display(),
            manifest.format_version
        );
    }
    Ok(manifest)
}

/// The result file of one dataset.
pub fn results_path(dir: &Path, dataset: &str) -> PathBuf {
    dir.join(RESULTS_DIR).join(format!("{dataset}.jsonl"))
}

/// A result file read back: its complete lines, and the unterminated tail a cut write left.
pub type ReadBack = ruling_corpus::journal::ReadBack<ResultLine>;
pub use ruling_corpus::journal::Appender;

/// Reads one result file (a journal: `ruling_corpus::journal`). A missing file reads as
/// empty. A complete line that is not a result, or a record id seen twice, is an error naming
/// the line: those are not what a killed run leaves behind.
pub fn read_results(path: &Path) -> anyhow::Result<ReadBack> {
    let read = ruling_corpus::journal::read_journal::<ResultLine>(path).map_err(|e| match e {
        ruling_corpus::CorpusError::Json { path, line, source } => {
            anyhow::anyhow!("{}:{line}: not a result line: {source}", path.display())
        }
        other => other.into(),
    })?;
    let mut seen = HashSet::new();
    for (index, result) in read.lines.iter().enumerate() {
        if !seen.insert(result.id.clone()) {
            bail!(
                "{}:{}: record {:?} appears a second time",
                path.display(),
                index + 1,
                result.id
            );
        }
    }
    Ok(read)
}

/// Cuts an unterminated last line off a result file (what a killed run leaves), so appending
/// starts on a fresh line. Returns how many bytes were dropped.
pub fn repair(path: &Path, read: &ReadBack) -> anyhow::Result<u64> {
    Ok(ruling_corpus::journal::repair(path, read)?)
}

/// [`ruling_models::files::write_atomic`], naming the file when it fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    ruling_models::files::write_atomic(path, bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// A results directory read whole: its settings and every dataset's lines, in the order of
/// `run.json`'s datasets.
#[derive(Debug)]
pub struct ResultSet {
    pub dir: PathBuf,
    pub manifest: RunManifest,
    pub datasets: Vec<(String, Vec<ResultLine>)>,
}

impl ResultSet {
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let manifest = read_manifest(dir)?;
        let mut datasets = Vec::new();
        for dataset in &manifest.datasets {
            let path = results_path(dir, dataset);
            let read = read_results(&path)?;
            if read.partial_bytes > 0 {
                eprintln!(
                    "warning: {}: ignoring an unterminated last line of {} bytes (a run cut \
                     short; the next `run` drops it)",
                    path.display(),
                    read.partial_bytes
                );
            }
            if let Some(line) = read.lines.iter().find(|l| l.split != manifest.split) {
                bail!(
                    "{}: record {:?} is from the {} split but {} says {}",
                    path.display(),
                    line.id,
                    line.split,
                    dir.join(RUN_FILE).display(),
                    manifest.split
                );
            }
            datasets.push((dataset.clone(), read.lines));
        }
        Ok(Self {
            dir: dir.to_owned(),
            manifest,
            datasets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str) -> ResultLine {
        ResultLine {
            id: id.to_owned(),
            dataset: "boolq".to_owned(),
            split: "dev".to_owned(),
            error: None,
            latency_ms: 1.5,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 0,
            },
            reversal: None,
            questions: IndexMap::new(),
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ruling-eval-results-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_cut_last_line_is_ignored_then_repaired() {
        let dir = scratch("cut");
        let path = dir.join("boolq.jsonl");
        let mut out = Appender::open(&path).unwrap();
        out.append(&line("boolq:0")).unwrap();
        out.append(&line("boolq:2")).unwrap();
        drop(out);
        let whole = fs::read(&path).unwrap();
        let mut cut = whole.clone();
        let third = serde_json::to_vec(&line("boolq:4")).unwrap();
        cut.extend_from_slice(&third[..third.len() / 2]);
        fs::write(&path, &cut).unwrap();

        let read = read_results(&path).unwrap();
        assert_eq!(read.lines.len(), 2);
        assert_eq!(read.partial_bytes as usize, third.len() / 2);
        assert_eq!(repair(&path, &read).unwrap() as usize, third.len() / 2);
        assert_eq!(
            fs::read(&path).unwrap(),
            whole,
            "only the cut line is dropped"
        );
        let mut out = Appender::open(&path).unwrap();
        out.append(&line("boolq:4")).unwrap();
        let ids: Vec<String> = read_results(&path)
            .unwrap()
            .lines
            .into_iter()
            .map(|l| l.id)
            .collect();
        assert_eq!(ids, ["boolq:0", "boolq:2", "boolq:4"]);
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_duplicate_or_corrupt_complete_line_is_an_error() {
        let dir = scratch("dup");
        let path = dir.join("boolq.jsonl");
        let mut out = Appender::open(&path).unwrap();
        out.append(&line("boolq:0")).unwrap();
        out.append(&line("boolq:0")).unwrap();
        let err = read_results(&path).unwrap_err().to_string();
        assert!(
            err.contains(":2: record \"boolq:0\" appears a second time"),
            "{err}"
        );
        fs::write(&path, "{\"id\": 1}\n").unwrap();
        let err = read_results(&path).unwrap_err().to_string();
        assert!(err.contains(":1: not a result line"), "{err}");
        assert!(
            read_results(&dir.join("missing.jsonl"))
                .unwrap()
                .lines
                .is_empty()
        );
        fs::remove_dir_all(&dir).ok();
    }
}
