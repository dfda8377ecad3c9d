//! The records every trainer reads: gathered, checked, split, and batched.
//!
//! Every input is checked before anything is written: a malformed JSONL line names its file and
//! line, a record that is not a valid System One request names its id, and a state that appears
//! in any held-out split of `shared/datasets` stops the run with the count (the builder drops
//! such rows from the datasets; a record file may still carry some). The split into training
//! and validation is by a hash of the state, so it does not depend on the order records come
//! in, and no state is on both sides.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use anyhow::{Context, bail};
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ruling_corpus::coherence::{self, Relation};
use ruling_corpus::{HeldOutStates, Record, TrainingOptions, TrainingSource, state_key};
use ruling_models::files::{hex, sha256_hex};
use ruling_schema::Capabilities;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A record file given with `--data`, and its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    pub path: PathBuf,
    pub sha256: String,
}

/// Where the records come from.
#[derive(Debug, Clone)]
pub struct Sources {
    pub root: PathBuf,
    pub datasets: Vec<TrainingSource>,
    pub per_source: Option<usize>,
    /// Per-source caps that replace `per_source` for the sources they name.
    pub caps: BTreeMap<String, usize>,
    pub files: Vec<PathBuf>,
    /// Multipliers of record weights by source: a key applies to the family it names and to
    /// every family it prefixes with `_` (`distill` weighs `distill_boolq`, `distill_snips`).
    pub weights: BTreeMap<String, f64>,
    /// The share of records given a coherence twin ([`add_twins`]).
    pub coherence: f64,
    pub seed: u64,
}

/// The flags both trainers take for their records.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// Training sources from the development side of the datasets (comma-separated, or `none`):
    /// `all` is clinc150, hwu64, snips, boolq, sst5, chaosnli-snli, chaosnli-mnli, snli, cb,
    /// rte, goemotions, medical-abstracts (the shipped judge's); `added` is spamassassin, sotu,
    /// udhr, wordnet, chatterbot, fortunes.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub datasets: Vec<String>,
    /// At most this many rows of each source (a seeded sample).
    #[arg(long)]
    pub per_source: Option<usize>,
    /// A cap for one source that replaces --per-source for it (repeatable): `clinc150=600`.
    #[arg(long = "cap", value_parser = parse_cap)]
    pub caps: Vec<(String, usize)>,
    /// More training records, as JSONL files of DESIGN.md's record format (repeatable).
    #[arg(long = "data")]
    pub files: Vec<PathBuf>,
    /// A weight for one source's records (repeatable), multiplying theirs: `distill=0.5`
    /// weighs every `distill_*` family, `boolq=2` the BoolQ records.
    #[arg(long = "weight", value_parser = parse_weight)]
    pub weights: Vec<(String, f64)>,
    /// The datasets folder [default: `RULING_DATASETS`, else `shared/datasets` beside the
    /// workspace].
    #[arg(long)]
    pub datasets_root: Option<PathBuf>,
    /// The share of records (0 to 1) given a coherence twin: one of their questions asked
    /// again transformed (negated, as another type, its options renamed, merged, cloned ...;
    /// `docs/coherence.md`) with the target the transformation implies.
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub coherence: f64,
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("expected a share from 0 to 1, got {text:?}")),
    }
}

impl DataArgs {
    /// The sources named, and their records gathered with per-source samples drawn by `seed`.
    pub fn gather(&self, seed: u64) -> anyhow::Result<(Vec<TrainingSource>, Gathered)> {
        let datasets = parse_sources(&self.datasets)?;
        let gathered = gather(&Sources {
            root: self
                .datasets_root
                .clone()
                .unwrap_or_else(ruling_corpus::default_root),
            datasets: datasets.clone(),
            per_source: self.per_source,
            caps: self.caps.iter().cloned().collect(),
            files: self.files.clone(),
            weights: self.weights.iter().cloned().collect(),
            coherence: self.coherence,
            seed,
        })?;
        Ok((datasets, gathered))
    }
}

/// The records of a run, checked, with what they were made from.
#[derive(Debug)]
pub struct Gathered {
    pub records: Vec<Record>,
    pub files: Vec<DataFile>,
    /// sha256 over every record as JSON lines, in order: the run's data identity.
    pub records_sha256: String,
    /// Records per family, for the log.
    pub families: BTreeMap<String, usize>,
}

impl Gathered {
    /// Records per family, for the log: `boolq 600, clinc150 600`.
    pub fn families_line(&self) -> String {
        self.families
            .iter()
            .map(|(family, count)| format!("{family} {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A seeded sample of at most `limit` of `0..len`, in increasing order.
pub fn sample_indices(len: usize, limit: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    order.truncate(limit);
    order.sort_unstable();
    order
}

/// Read the datasets and record files, check every record, refuse held-out states.
pub fn gather(sources: &Sources) -> anyhow::Result<Gathered> {
    let mut records = Vec::new();
    for source in &sources.datasets {
        let built = ruling_corpus::build_training_set(&TrainingOptions {
            root: Some(sources.root.clone()),
            seed: sources.seed,
            per_source: sources
                .caps
                .get(source.as_str())
                .copied()
                .or(sources.per_source),
            sources: vec![*source],
        })
        .with_context(|| format!("building the {source} training records"))?;
        for report in &built.report {
            eprintln!(
                "data: {:<18} {:>6} rows -> {:>6} records, {:>6} questions ({} held-out states dropped)",
                report.source,
                report.rows,
                report.records,
                report.questions,
                report.dropped_held_out
            );
        }
        records.extend(built.records);
    }
    let mut files = Vec::new();
    for path in &sources.files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let read = ruling_corpus::read_jsonl(path)?;
        eprintln!("data: {} records from {}", read.len(), path.display());
        files.push(DataFile {
            path: path.clone(),
            sha256: sha256_hex(&bytes),
        });
        for record in &read {
            record
                .validate(&Capabilities::default())
                .with_context(|| format!("{}", path.display()))?;
        }
        records.extend(read);
    }
    if records.is_empty() {
        bail!("no training records: give --datasets, --data FILE.jsonl, or both");
    }
    let held_out = ruling_corpus::held_out_states(&sources.root)
        .context("reading the held-out splits for the overlap check")?;
    refuse_held_out(&records, &held_out)?;
    apply_weights(&mut records, &sources.weights)?;
    if sources.coherence > 0.0 {
        let twins = add_twins(&mut records, sources.coherence, sources.seed);
        eprintln!("data: {twins} coherence twins added");
    }

    let mut digest = Sha256::new();
    let mut families = BTreeMap::new();
    for record in &records {
        digest.update(serde_json::to_vec(record)?);
        digest.update(b"\n");
        *families.entry(record.family.clone()).or_insert(0) += 1;
    }
    Ok(Gathered {
        records,
        files,
        records_sha256: hex(&digest.finalize()),
        families,
    })
}

/// The relations a twin may take: every one whose expectation gives the twin a target, less
/// those the encoder meets by construction (the batch relations, option order) and the pairs.
const TWIN_RELATIONS: [Relation; 18] = [
    Relation::IrrelevantOption,
    Relation::Iia,
    Relation::Threshold,
    Relation::Paraphrase,
    Relation::Rename,
    Relation::DescriptionSwap,
    Relation::OpaqueKeys,
    Relation::Typos,
    Relation::Language,
    Relation::NoulAsChoice,
    Relation::NoulAsScore,
    Relation::NegationWrapper,
    Relation::NegationNatural,
    Relation::ChoiceComplement,
    Relation::ScoreComplement,
    Relation::Merge,
    Relation::Split,
    Relation::Clone,
];

/// Give a `share` of the records a coherence twin: one question with a target (a label or a
/// soft target) asked again under a relation drawn for it, with the target the relation
/// implies, as one more question of the same record (`ID~RELATION`). Drawn from `seed` and
/// each record's state and family, so the same records always get the same twins. Returns how
/// many were added.
pub fn add_twins(records: &mut [Record], share: f64, seed: u64) -> usize {
    let mut added = 0;
    for record in records.iter_mut() {
        let mut hash = Sha256::new();
        hash.update(seed.to_le_bytes());
        hash.update(record.family.as_bytes());
        hash.update(ruling_corpus::state_key(&record.state).as_bytes());
        let digest = hash.finalize();
        let mut rng = ChaCha8Rng::from_seed(digest.into());
        if !rng.random_bool(share) {
            continue;
        }
        let candidates: Vec<(String, ruling_corpus::Target)> = record
            .questions
            .keys()
            .filter_map(|id| record.target_distribution(id).map(|t| (id.clone(), t)))
            .collect();
        let Some((id, target)) = candidates.choose(&mut rng).cloned() else {
            continue;
        };
        let question = record.questions[&id].clone();
        for _ in 0..4 {
            let relation = *TWIN_RELATIONS.choose(&mut rng).expect("relations");
            let Some(twin) = coherence::variant(relation, &question, &mut rng) else {
                continue;
            };
            let Some(twin_target) = twin.target(&target) else {
                continue;
            };
            let twin_id = format!("{id}~{relation}");
            if record.questions.contains_key(&twin_id) {
                continue;
            }
            record.questions.insert(twin_id.clone(), twin.question);
            record
                .references
                .insert(twin_id, ruling_corpus::Reference::target(twin_target));
            added += 1;
            break;
        }
    }
    added
}

/// Multiply each record's weight by its source's; a weight no record's family matches is a
/// typo, and refused.
fn apply_weights(records: &mut [Record], weights: &BTreeMap<String, f64>) -> anyhow::Result<()> {
    for (source, weight) in weights {
        let mut matched = 0usize;
        for record in records.iter_mut().filter(|r| of_source(&r.family, source)) {
            record.weight *= weight;
            matched += 1;
        }
        if matched == 0 {
            bail!(
                "--weight {source}={weight} matches no record; the families are {}",
                family_list(records)
            );
        }
        eprintln!("data: {matched} records of {source} weighted x{weight}");
    }
    Ok(())
}

/// Whether a record of `family` belongs to the source a `--weight` or `--calibration-share`
/// key names: the family itself, or every family it prefixes with `_`.
fn of_source(family: &str, source: &str) -> bool {
    family == source
        || family
            .strip_prefix(source)
            .is_some_and(|rest| rest.starts_with('_'))
}

/// The distinct families of `records`, sorted, for an error message.
fn family_list(records: &[Record]) -> String {
    let mut families: Vec<&str> = records.iter().map(|r| r.family.as_str()).collect();
    families.sort_unstable();
    families.dedup();
    families.join(", ")
}

/// A `--weight` value: `SOURCE=W`, W finite and not negative.
pub fn parse_weight(text: &str) -> Result<(String, f64), String> {
    let (source, weight) = text
        .split_once('=')
        .ok_or_else(|| format!("expected SOURCE=WEIGHT such as distill=0.5, got {text:?}"))?;
    let weight: f64 = weight
        .parse()
        .map_err(|_| format!("the weight in {text:?} is not a number"))?;
    if !weight.is_finite() || weight < 0.0 || source.is_empty() {
        return Err(format!(
            "expected SOURCE=WEIGHT with a finite weight >= 0, got {text:?}"
        ));
    }
    Ok((source.to_owned(), weight))
}

/// Stop when any record's state is one a held-out split holds, naming a few of them.
pub fn refuse_held_out(records: &[Record], held_out: &HeldOutStates) -> anyhow::Result<()> {
    let overlapping: Vec<&Record> = records
        .iter()
        .filter(|r| held_out.contains(&r.state))
        .collect();
    if !overlapping.is_empty() {
        let examples: Vec<&str> = overlapping.iter().take(5).map(|r| r.display_id()).collect();
        bail!(
            "{} training records have a state that a held-out evaluation split also holds \
             (for instance {}); held-out data is for reporting only: remove them",
            overlapping.len(),
            examples.join(", ")
        );
    }
    Ok(())
}

/// A run's records on the three sides of the split.
#[derive(Debug, Default)]
pub struct Split {
    pub train: Vec<Record>,
    /// Scored at every validation, to pick the best step; the temperatures are fitted on it too.
    pub valid: Vec<Record>,
    /// Kept out of training and used only to fit the temperatures (`--calibration-share`).
    pub calibration: Vec<Record>,
}

/// Split the records by a hash of each state, so no state is on two sides and the split does
/// not depend on the order records come in. A state's hash, read as a number in [0, 1), puts it
/// in validation below `valid_fraction`; a record of a source that `calibration_shares` names
/// goes to calibration in the next `share` of the range; the rest is training.
pub fn split(
    records: Vec<Record>,
    valid_fraction: f64,
    calibration_shares: &BTreeMap<String, f64>,
) -> anyhow::Result<Split> {
    for (source, share) in calibration_shares {
        if !(*share > 0.0 && valid_fraction + share < 1.0) {
            bail!(
                "--calibration-share {source}={share}: the share must be above 0 and leave some \
                 of the source for training beside the validation fraction {valid_fraction}"
            );
        }
        if !records.iter().any(|r| of_source(&r.family, source)) {
            bail!(
                "--calibration-share {source}={share} matches no record; the families are {}",
                family_list(&records)
            );
        }
    }
    let share_of = |record: &Record| {
        calibration_shares
            .iter()
            .find(|(source, _)| of_source(&record.family, source))
            .map_or(0.0, |(_, share)| *share)
    };
    // A state that a reserved source holds is reserved under every source that holds it, so
    // the model never trains on a state its calibration then scores.
    let keys: Vec<String> = records.iter().map(|r| state_key(&r.state)).collect();
    let mut state_shares: HashMap<&str, f64> = HashMap::new();
    for (record, key) in records.iter().zip(&keys) {
        let share = state_shares.entry(key).or_default();
        *share = share.max(share_of(record));
    }
    let mut split = Split::default();
    for (record, key) in records.into_iter().zip(&keys) {
        let place = state_place(key);
        let share = state_shares[key.as_str()];
        if place < valid_fraction {
            split.valid.push(record);
        } else if place < valid_fraction + share {
            split.calibration.push(record);
        } else {
            split.train.push(record);
        }
    }
    Ok(split)
}

/// A state's place in [0, 1): the first eight bytes of the sha256 of its key.
fn state_place(key: &str) -> f64 {
    let digest = Sha256::digest(key.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(head) as f64 / 2f64.powi(64)
}

/// The batches of one epoch, as example indices: a seeded permutation, cut into chunks, each
/// chunk sorted by length (a batch's attention pads every record to its longest) and cut into
/// batches of at most `budget` tokens, the batches shuffled. The same seed and epoch always
/// give the same batches.
pub fn epoch_batches(lengths: &[usize], seed: u64, epoch: u64, budget: usize) -> Vec<Vec<usize>> {
    const CHUNK: usize = 1024;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.shuffle(&mut rng);
    let mut batches = Vec::new();
    for chunk in order.chunks(CHUNK) {
        let mut chunk = chunk.to_vec();
        chunk.sort_by_key(|&i| (lengths[i], i));
        let mut current = Vec::new();
        let mut tokens = 0;
        for i in chunk {
            let len = lengths[i];
            if !current.is_empty() && tokens + len > budget {
                batches.push(std::mem::take(&mut current));
                tokens = 0;
            }
            current.push(i);
            tokens += len;
        }
        if !current.is_empty() {
            batches.push(current);
        }
    }
    batches.shuffle(&mut rng);
    batches
}

pub fn parse_cap(text: &str) -> Result<(String, usize), String> {
    let (source, cap) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected SOURCE=N, for instance clinc150=6000"))?;
    let source: TrainingSource = source.parse().map_err(|e| format!("{e}"))?;
    let cap = cap
        .parse()
        .map_err(|_| format!("{text:?}: the cap must be a whole number"))?;
    Ok((source.as_str().to_owned(), cap))
}

pub fn parse_sources(names: &[String]) -> anyhow::Result<Vec<TrainingSource>> {
    match names {
        [only] if only == "none" => Ok(Vec::new()),
        names => {
            let mut sources = Vec::new();
            for name in names {
                // `all`: the shipped judge's labelled sources; `added`: those added since.
                let group: Vec<TrainingSource> = match name.as_str() {
                    "all" => TrainingSource::ALL.to_vec(),
                    "added" => TrainingSource::ADDED.to_vec(),
                    name => vec![name.parse::<TrainingSource>()?],
                };
                for source in group {
                    if !sources.contains(&source) {
                        sources.push(source);
                    }
                }
            }
            Ok(sources)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn record(family: &str) -> Record {
        serde_json::from_value(serde_json::json!({
            "family": family, "state": "s",
            "questions": {"q": {"type": "noul", "instructions": "?"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_source_weight_covers_its_family_and_the_families_it_prefixes() {
        let mut records = vec![
            record("distill_boolq"),
            record("distill_snips"),
            record("distiller"),
            record("boolq"),
        ];
        let weights = BTreeMap::from([("distill".to_owned(), 0.5), ("boolq".to_owned(), 2.0)]);
        apply_weights(&mut records, &weights).unwrap();
        let got: Vec<f64> = records.iter().map(|r| r.weight).collect();
        assert_eq!(got, [0.5, 0.5, 1.0, 2.0]);
        let typo = BTreeMap::from([("bolq".to_owned(), 2.0)]);
        let error = apply_weights(&mut records, &typo).unwrap_err().to_string();
        assert!(
            error.contains("matches no record") && error.contains("boolq"),
            "{error}"
        );
    }

    fn record_with(family: &str, state: &str) -> Record {
        let mut record = record(family);
        record.state = serde_json::from_value(serde_json::json!(state)).unwrap();
        record
    }

    #[test]
    fn a_calibration_share_takes_only_its_source_and_no_state_twice() {
        let mut records = Vec::new();
        for i in 0..2000 {
            records.push(record_with("boolq", &format!("passage {i}")));
            records.push(record_with("sst5", &format!("review {i}")));
        }
        // The same state under two sources stays on one side.
        records.push(record_with("boolq", "review 7"));
        let shares = BTreeMap::from([("boolq".to_owned(), 0.5)]);
        let split = split(records, 0.1, &shares).unwrap();
        assert!(split.calibration.iter().all(|r| r.family == "boolq"));
        let count =
            |side: &[Record], family: &str| side.iter().filter(|r| r.family == family).count();
        let reserved = count(&split.calibration, "boolq");
        assert!(
            (850..1150).contains(&reserved),
            "{reserved} of 2000 for a share of 0.5"
        );
        let valid = count(&split.valid, "sst5");
        assert!(
            (140..260).contains(&valid),
            "{valid} of 2000 for a fraction of 0.1"
        );
        let keys = |side: &[Record]| -> HashSet<String> {
            side.iter().map(|r| state_key(&r.state)).collect()
        };
        let (train, valid, calibration) = (
            keys(&split.train),
            keys(&split.valid),
            keys(&split.calibration),
        );
        assert!(train.is_disjoint(&valid) && train.is_disjoint(&calibration));
        assert!(valid.is_disjoint(&calibration));
    }

    #[test]
    fn a_calibration_share_that_fits_nothing_is_refused() {
        let records = vec![record_with("boolq", "a"), record_with("sst5", "b")];
        let typo = BTreeMap::from([("bolq".to_owned(), 0.5)]);
        let error = split(records.clone(), 0.1, &typo).unwrap_err().to_string();
        assert!(
            error.contains("matches no record") && error.contains("boolq"),
            "{error}"
        );
        let whole = BTreeMap::from([("boolq".to_owned(), 0.95)]);
        let error = split(records, 0.1, &whole).unwrap_err().to_string();
        assert!(error.contains("leave some"), "{error}");
    }

    #[test]
    fn weights_parse_or_say_what_is_expected() {
        assert_eq!(parse_weight("distill=0.5"), Ok(("distill".into(), 0.5)));
        for bad in ["distill", "distill=x", "distill=-1", "=1", "a=inf"] {
            assert!(parse_weight(bad).is_err(), "{bad}");
        }
    }
}
