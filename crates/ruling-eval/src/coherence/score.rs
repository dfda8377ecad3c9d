//! Scores from the tests: per relation, the share of tests whose deviation is within the
//! tolerance; per dimension, the mean of its relations' shares; overall, the mean of the
//! dimensions; each from 0 to 100 with a 95% bootstrap interval.
//!
//! The interval resamples *states*, not tests: the tests of one state share its text and its
//! base questions, so they are not independent, and resampling them one by one would give an
//! interval narrower than the data supports. Each resample draws as many states as were
//! measured, with replacement (ChaCha8, seeded), and recomputes every score on them; the
//! interval's ends are the 2.5% and 97.5% quantiles (`ruling_calibration::quantile`).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ruling_calibration::quantile;
use ruling_corpus::coherence::{Dimension, Relation};
use serde::{Deserialize, Serialize};

use super::measure::StateOutcome;

/// Resamples of the bootstrap: enough for stable 2.5% and 97.5% points.
pub const RESAMPLES: usize = 2_000;
/// The interval's confidence level.
pub const LEVEL: f64 = 0.95;

/// A score from 0 to 100 with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub score: f64,
    pub lower: f64,
    pub upper: f64,
}

/// One relation's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelationScore {
    pub relation: Relation,
    pub dimension: Dimension,
    pub tests: usize,
    pub passed: usize,
    /// `None` when no test was made.
    pub score: Option<Interval>,
    pub mean_deviation: Option<f64>,
    pub max_deviation: Option<f64>,
    /// Variants refused for capacity, and tests without a defined deviation.
    pub refused: usize,
    pub undefined: usize,
}

/// One dimension's result: the mean of its relations with tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DimensionScore {
    pub dimension: Dimension,
    /// Relations with tests.
    pub relations: usize,
    pub score: Option<Interval>,
}

/// Every score of a suite run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    pub tolerance: f64,
    pub relations: Vec<RelationScore>,
    pub dimensions: Vec<DimensionScore>,
    /// The mean of the dimensions with tests.
    pub overall: Option<Interval>,
}

/// Passed and total tests per state, per relation (in `relations`' order).
struct Counts {
    per_state: Vec<Vec<(u32, u32)>>,
}

impl Counts {
    fn shares(
        &self,
        states: impl Iterator<Item = usize> + Clone,
        relations: usize,
    ) -> Vec<Option<f64>> {
        (0..relations)
            .map(|r| {
                let (passed, total) = states
                    .clone()
                    .map(|s| self.per_state[s][r])
                    .fold((0u32, 0u32), |(p, t), (a, b)| (p + a, t + b));
                (total > 0).then(|| f64::from(passed) / f64::from(total))
            })
            .collect()
    }
}

/// The scores of `outcomes` for `relations` at `tolerance`, the interval seeded by `seed`.
pub fn score(
    outcomes: &[StateOutcome],
    relations: &[Relation],
    tolerance: f64,
    seed: u64,
) -> Scores {
    let measured: Vec<&StateOutcome> = outcomes.iter().filter(|o| o.skipped.is_none()).collect();
    let index = |relation: Relation| relations.iter().position(|r| *r == relation);
    let mut counts = Counts {
        per_state: vec![vec![(0, 0); relations.len()]; measured.len()],
    };
    for (s, outcome) in measured.iter().enumerate() {
        for test in &outcome.tests {
            if let Some(r) = index(test.relation) {
                let cell = &mut counts.per_state[s][r];
                cell.0 += u32::from(test.deviation <= tolerance);
                cell.1 += 1;
            }
        }
    }

    let estimate = summarise(
        &counts.shares(0..measured.len(), relations.len()),
        relations,
    );
    let mut resampled: Vec<Summary> = Vec::with_capacity(RESAMPLES);
    if !measured.is_empty() {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..RESAMPLES {
            let drawn: Vec<usize> = (0..measured.len())
                .map(|_| rng.random_range(0..measured.len()))
                .collect();
            resampled.push(summarise(
                &counts.shares(drawn.iter().copied(), relations.len()),
                relations,
            ));
        }
    }
    let interval = |score: Option<f64>, pick: &dyn Fn(&Summary) -> Option<f64>| {
        let score = score?;
        let values: Vec<f64> = resampled.iter().filter_map(pick).collect();
        let tail = (1.0 - LEVEL) / 2.0;
        Some(Interval {
            score,
            lower: quantile(&values, tail).unwrap_or(score),
            upper: quantile(&values, 1.0 - tail).unwrap_or(score),
        })
    };

    let relation_scores = relations
        .iter()
        .enumerate()
        .map(|(r, &relation)| {
            let deviations: Vec<f64> = measured
                .iter()
                .flat_map(|o| &o.tests)
                .filter(|t| t.relation == relation)
                .map(|t| t.deviation)
                .collect();
            let (passed, tests) = counts.per_state.iter().fold((0, 0), |(p, t), row| {
                (p + row[r].0 as usize, t + row[r].1 as usize)
            });
            let tally =
                |pick: fn(&StateOutcome) -> &std::collections::BTreeMap<Relation, usize>| {
                    outcomes.iter().filter_map(|o| pick(o).get(&relation)).sum()
                };
            RelationScore {
                relation,
                dimension: relation.dimension(),
                tests,
                passed,
                score: interval(estimate.relations[r], &|s| s.relations[r]),
                mean_deviation: (!deviations.is_empty())
                    .then(|| deviations.iter().sum::<f64>() / deviations.len() as f64),
                max_deviation: deviations.iter().copied().reduce(f64::max),
                refused: tally(|o| &o.refused),
                undefined: tally(|o| &o.undefined),
            }
        })
        .collect();
    let dimensions = Dimension::ALL
        .iter()
        .enumerate()
        .filter(|(_, d)| relations.iter().any(|r| r.dimension() == **d))
        .map(|(i, &dimension)| DimensionScore {
            dimension,
            relations: relations
                .iter()
                .zip(&estimate.relations)
                .filter(|(r, s)| r.dimension() == dimension && s.is_some())
                .count(),
            score: interval(estimate.dimensions[i], &|s| s.dimensions[i]),
        })
        .collect();
    Scores {
        tolerance,
        relations: relation_scores,
        dimensions,
        overall: interval(estimate.overall, &|s| s.overall),
    }
}

/// Every score of one sample of states, from 0 to 100.
struct Summary {
    relations: Vec<Option<f64>>,
    /// In [`Dimension::ALL`]'s order.
    dimensions: Vec<Option<f64>>,
    overall: Option<f64>,
}

fn summarise(shares: &[Option<f64>], relations: &[Relation]) -> Summary {
    let mean = |values: &mut dyn Iterator<Item = f64>| {
        let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
        (n > 0).then(|| sum / n as f64)
    };
    let relations_100: Vec<Option<f64>> = shares.iter().map(|s| s.map(|v| v * 100.0)).collect();
    let dimensions: Vec<Option<f64>> = Dimension::ALL
        .iter()
        .map(|&d| {
            mean(
                &mut relations
                    .iter()
                    .zip(&relations_100)
                    .filter(|(r, _)| r.dimension() == d)
                    .filter_map(|(_, s)| *s),
            )
        })
        .collect();
    let overall = mean(&mut dimensions.iter().filter_map(|d| *d));
    Summary {
        relations: relations_100,
        dimensions,
        overall,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::coherence::measure::TestOutcome;

    fn outcome(id: &str, tests: &[(Relation, f64)]) -> StateOutcome {
        StateOutcome {
            id: id.to_owned(),
            dataset: "d".to_owned(),
            questions: 1,
            dropped: Vec::new(),
            requests: 1,
            skipped: None,
            tests: tests
                .iter()
                .map(|&(relation, deviation)| TestOutcome {
                    relation,
                    question: "q".to_owned(),
                    deviation,
                })
                .collect(),
            refused: BTreeMap::from([(Relation::Language, 2)]),
            undefined: BTreeMap::new(),
        }
    }

    #[test]
    fn shares_pass_within_the_tolerance_and_dimensions_average_relations() {
        let outcomes = vec![
            outcome(
                "a",
                &[
                    (Relation::Alone, 0.0),
                    (Relation::Merge, 0.01),
                    (Relation::Clone, 0.2),
                ],
            ),
            outcome(
                "b",
                &[
                    (Relation::Alone, 0.0),
                    (Relation::Merge, 0.3),
                    (Relation::Clone, 0.04),
                ],
            ),
        ];
        let relations = [
            Relation::Alone,
            Relation::Merge,
            Relation::Clone,
            Relation::Language,
        ];
        let scores = score(&outcomes, &relations, 0.05, 1);
        let by = |r: Relation| scores.relations.iter().find(|s| s.relation == r).unwrap();
        let alone = by(Relation::Alone).score.unwrap();
        assert!((alone.score - 100.0).abs() < 1e-9 && (alone.lower - 100.0).abs() < 1e-9);
        let merge = by(Relation::Merge).score.unwrap();
        assert!((merge.score - 50.0).abs() < 1e-9);
        assert!(merge.lower <= 50.0 && merge.upper >= 50.0 && merge.lower < merge.upper);
        assert_eq!(by(Relation::Language).score, None);
        assert_eq!(by(Relation::Language).refused, 4);
        let measure = scores
            .dimensions
            .iter()
            .find(|d| d.dimension == Dimension::Measure)
            .unwrap();
        assert_eq!(measure.relations, 2);
        assert!((measure.score.unwrap().score - 50.0).abs() < 1e-9);
        let batch = scores
            .dimensions
            .iter()
            .find(|d| d.dimension == Dimension::Batch)
            .unwrap();
        assert!((batch.score.unwrap().score - 100.0).abs() < 1e-9);
        // Representation has a relation asked but no test: no score, not a zero.
        let representation = scores
            .dimensions
            .iter()
            .find(|d| d.dimension == Dimension::Representation)
            .unwrap();
        assert_eq!(representation.score, None);
        assert!((scores.overall.unwrap().score - 75.0).abs() < 1e-9);
        assert_eq!(score(&outcomes, &relations, 0.05, 1), scores, "seeded");
    }
}
