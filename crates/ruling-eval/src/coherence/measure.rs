//! One state through the suite: its base questions and their variants asked in as few
//! requests as fit, and one test per relation and base question (or pair of nouls), each a
//! deviation: how far the variant's answer strays from what the originals' answers imply.
//!
//! The requests of one state:
//! - the base questions together: the reference every batch relation compares against;
//! - each base question alone (`alone`), and the base questions in reverse order
//!   (`reordered`);
//! - the base questions with as many variants as `--batch` allows, repeated until every
//!   variant is asked. A variant is compared with its originals *in the same request*, so a
//!   batch effect cannot pass for a failed relation; the base questions of the first such
//!   request, asked among many others, are the `with-others` test, and each base question
//!   asked again under another id is the `duplicated` one.
//!
//! A request the engine refuses for capacity (a long state, a wide choice) is split in two
//! and each half asked again; a variant refused alone is counted as refused, never as a
//! failed test.

use std::collections::BTreeMap;

use anyhow::{Context as _, ensure};
use indexmap::IndexMap;
use ruling_corpus::coherence::{Relation, Variant, pair_variant, variants};
use ruling_corpus::{Target, answer_keys};
use ruling_schema::{Answer, Question, SystemOneRequest};
use serde::{Deserialize, Serialize};

use super::states::{SuiteState, seeded};
use crate::client::{Client, Reply};

/// What one state gave: a line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateOutcome {
    pub id: String,
    pub dataset: String,
    /// Base questions asked.
    pub questions: usize,
    /// Base questions the engine refused even alone (too long for its context), left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// Requests sent.
    pub requests: usize,
    /// Why no test was made (the engine refused the base questions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub tests: Vec<TestOutcome>,
    /// Per relation, variants the engine refused for capacity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<Relation, usize>,
    /// Per relation, tests without a defined deviation (ratios over keys the original gave no
    /// mass).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub undefined: BTreeMap<Relation, usize>,
}

/// One test: a relation on one base question (or a pair, `a+b`) and its deviation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestOutcome {
    pub relation: Relation,
    pub question: String,
    pub deviation: f64,
}

/// A variant to ask, under its own id, and the base questions it is compared with.
struct Planned {
    id: String,
    variant: Variant,
    originals: Vec<String>,
}

/// Answers by question id, each a distribution over the question's answer keys.
type Answers = IndexMap<String, Target>;

/// What measuring a state needs.
pub struct Measure<'a> {
    pub client: &'a Client,
    pub model: &'a str,
    pub relations: &'a [Relation],
    /// Most questions one request asks.
    pub batch: usize,
    pub seed: u64,
}

impl Measure<'_> {
    pub fn state(&self, state: &SuiteState) -> anyhow::Result<StateOutcome> {
        let mut outcome = StateOutcome {
            id: state.id.clone(),
            dataset: state.dataset.clone(),
            questions: state.questions.len(),
            dropped: Vec::new(),
            requests: 0,
            skipped: None,
            tests: Vec::new(),
            refused: BTreeMap::new(),
            undefined: BTreeMap::new(),
        };
        let Some((state, base)) = self.base(state, &mut outcome)? else {
            return Ok(outcome);
        };
        let state = &state;
        if self.wants(Relation::Alone) {
            for (id, question) in &state.questions {
                let alone = IndexMap::from([(id.clone(), question.clone())]);
                match self.ask(state, alone, &mut outcome)? {
                    Some(answers) => same_test(&mut outcome, Relation::Alone, id, &answers, &base),
                    None => refused(&mut outcome, Relation::Alone),
                }
            }
        }
        if self.wants(Relation::Reordered) {
            let reversed = state
                .questions
                .iter()
                .rev()
                .map(|(id, q)| (id.clone(), q.clone()))
                .collect();
            match self.ask(state, reversed, &mut outcome)? {
                Some(answers) => {
                    for id in state.questions.keys() {
                        same_test(&mut outcome, Relation::Reordered, id, &answers, &base);
                    }
                }
                None => refused(&mut outcome, Relation::Reordered),
            }
        }
        let planned = self.plan(state);
        let room = self.batch.saturating_sub(state.questions.len()).max(1);
        let mut with_others = self.wants(Relation::WithOthers);
        for chunk in planned.chunks(room) {
            self.ask_variants(state, chunk, &base, &mut with_others, &mut outcome)?;
        }
        Ok(outcome)
    }

    /// The base questions' answers, asked together. When the engine refuses them (a question
    /// too long for its context), each is asked alone and those it refuses alone are left out
    /// of the state's suite, recorded in `outcome.dropped`; `None` when none is left.
    fn base(
        &self,
        state: &SuiteState,
        outcome: &mut StateOutcome,
    ) -> anyhow::Result<Option<(SuiteState, Answers)>> {
        if let Some(answers) = self.ask(state, state.questions.clone(), outcome)? {
            return Ok(Some((state.clone(), answers)));
        }
        let mut kept = state.clone();
        for (id, question) in &state.questions {
            let alone = IndexMap::from([(id.clone(), question.clone())]);
            if self.ask(state, alone, outcome)?.is_none() {
                kept.questions.shift_remove(id);
                outcome.dropped.push(id.clone());
            }
        }
        outcome.questions = kept.questions.len();
        let answers = if kept.questions.is_empty() {
            None
        } else {
            self.ask(&kept, kept.questions.clone(), outcome)?
        };
        Ok(match answers {
            Some(answers) => Some((kept, answers)),
            None => {
                outcome.skipped = Some("the engine refused the base questions".to_owned());
                None
            }
        })
    }

    fn wants(&self, relation: Relation) -> bool {
        self.relations.contains(&relation)
    }

    /// Every variant of the state's base questions under the relations asked for, each drawn
    /// with a generator of its own (so choosing fewer relations changes no variant), and the
    /// pair relations over each two consecutive nouls.
    fn plan(&self, state: &SuiteState) -> Vec<Planned> {
        let mut planned = Vec::new();
        let skip = [Relation::Alone, Relation::WithOthers, Relation::Reordered];
        for (id, question) in &state.questions {
            for &relation in self.relations {
                if relation.is_pair() || skip.contains(&relation) {
                    continue;
                }
                let mut rng = seeded(
                    self.seed,
                    &format!("coherence:{}:{id}:{relation}", state.id),
                );
                let drawn = variants(relation, question, &mut rng);
                let numbered = drawn.len() > 1;
                for (i, variant) in drawn.into_iter().enumerate() {
                    let variant_id = if numbered {
                        format!("{id}~{relation}-{}", i + 1)
                    } else {
                        format!("{id}~{relation}")
                    };
                    planned.push(Planned {
                        id: variant_id,
                        variant,
                        originals: vec![id.clone()],
                    });
                }
            }
        }
        let nouls: Vec<(&String, &Question)> = state
            .questions
            .iter()
            .filter(|(_, q)| matches!(q, Question::Noul { .. }))
            .collect();
        for pair in nouls.windows(2) {
            let [(a, first), (b, second)] = pair else {
                continue;
            };
            for &relation in self.relations.iter().filter(|r| r.is_pair()) {
                let mut rng = seeded(
                    self.seed,
                    &format!("coherence:{}:{a}+{b}:{relation}", state.id),
                );
                if let Some(variant) = pair_variant(relation, first, second, &mut rng) {
                    planned.push(Planned {
                        id: format!("{a}+{b}~{relation}"),
                        variant,
                        originals: vec![(*a).clone(), (*b).clone()],
                    });
                }
            }
        }
        planned
    }

    /// The base questions with `chunk`'s variants in one request, each variant tested against
    /// its originals' answers in it; a refused request is split in two and asked again.
    fn ask_variants(
        &self,
        state: &SuiteState,
        chunk: &[Planned],
        base: &Answers,
        with_others: &mut bool,
        outcome: &mut StateOutcome,
    ) -> anyhow::Result<()> {
        let mut questions = state.questions.clone();
        for planned in chunk {
            questions.insert(planned.id.clone(), planned.variant.question.clone());
        }
        let Some(answers) = self.ask(state, questions, outcome)? else {
            if let [planned] = chunk {
                refused(outcome, planned.variant.relation);
            } else {
                let (first, second) = chunk.split_at(chunk.len() / 2);
                self.ask_variants(state, first, base, with_others, outcome)?;
                self.ask_variants(state, second, base, with_others, outcome)?;
            }
            return Ok(());
        };
        if std::mem::take(with_others) {
            for id in state.questions.keys() {
                same_test(outcome, Relation::WithOthers, id, &answers, base);
            }
        }
        for planned in chunk {
            let originals: Vec<&Target> = planned.originals.iter().map(|o| &answers[o]).collect();
            let relation = planned.variant.relation;
            match planned.variant.deviation(&answers[&planned.id], &originals) {
                Some(deviation) => outcome.tests.push(TestOutcome {
                    relation,
                    question: planned.originals.join("+"),
                    deviation,
                }),
                None => *outcome.undefined.entry(relation).or_default() += 1,
            }
        }
        Ok(())
    }

    /// One request of `questions` about the state: every answer as a distribution over its
    /// question's answer keys, or `None` when the engine refused it for capacity.
    fn ask(
        &self,
        state: &SuiteState,
        questions: IndexMap<String, Question>,
        outcome: &mut StateOutcome,
    ) -> anyhow::Result<Option<Answers>> {
        let request = SystemOneRequest {
            model: self.model.to_owned(),
            state: state.state.clone(),
            questions,
            assets: None,
            trace: None,
        };
        outcome.requests += 1;
        let response = match self.client.answer(&request)? {
            Reply::Answered(response) => response,
            Reply::Refused(_) => return Ok(None),
        };
        let mut answers = Answers::new();
        for (id, question) in &request.questions {
            let answer = response
                .answers
                .get(id)
                .with_context(|| format!("the response has no answer to question {id:?}"))?;
            let keys = answer_keys(question);
            let dist = distribution(&keys, answer);
            let total: f64 = dist.values().sum();
            ensure!(
                (total - 1.0).abs() < 1e-4,
                "question {id:?}: the answer's probabilities sum to {total}, not 1"
            );
            answers.insert(id.clone(), dist);
        }
        Ok(Some(answers))
    }
}

/// An answer as a distribution over `keys` (a key the answer leaves out at 0).
fn distribution(keys: &[String], answer: &Answer) -> Target {
    let noul;
    let probabilities = match answer {
        Answer::Noul { noul: p } => {
            noul = IndexMap::from([("yes".to_owned(), *p), ("no".to_owned(), 1.0 - p)]);
            &noul
        }
        Answer::Choice { probabilities, .. } | Answer::Score { probabilities, .. } => probabilities,
        Answer::Box { .. } => return Target::new(),
    };
    keys.iter()
        .map(|k| (k.clone(), probabilities.get(k).copied().unwrap_or(0.0)))
        .collect()
}

/// A batch test: question `id` answered in `answers` as in `base`, its deviation the largest
/// difference of a key's probability.
fn same_test(
    outcome: &mut StateOutcome,
    relation: Relation,
    id: &str,
    answers: &Answers,
    base: &Answers,
) {
    let (a, b) = (&answers[id], &base[id]);
    let deviation = a
        .iter()
        .map(|(k, p)| (p - b.get(k).copied().unwrap_or(0.0)).abs())
        .fold(0.0, f64::max);
    outcome.tests.push(TestOutcome {
        relation,
        question: id.to_owned(),
        deviation,
    });
}

fn refused(outcome: &mut StateOutcome, relation: Relation) {
    *outcome.refused.entry(relation).or_default() += 1;
}
