//! The metamorphic relations a calibrated judge must obey (`docs/coherence.md`): ways to
//! rewrite a question whose answer follows from the original's by the rules of probability.
//!
//! A program that asks several questions about one state combines the answers: it negates
//! them, merges options, thresholds scores. That only works when "Is it about X?" and its
//! negation sum to one, when an option asked twice splits its mass, when a score's levels at
//! or above `k` hold what "is it at least `k`?" answers. Each [`Relation`] turns an original
//! question into a [`Variant`] (a new question and what its answer must be, an
//! [`Expectation`] over the original's answer keys), so the same transformations serve two
//! callers: `ruling-eval coherence` asks both and measures how far the answers stray, and the
//! trainer asks the variant with the target [`Variant::target`] derives from the original's.
//!
//! Everything here is deterministic given the `ChaCha8Rng` passed in, and pure: no model, no
//! file. The wordings (natural negations, paraphrases, the French, Spanish and German
//! translations) cover the instruction templates of the taxonomy (`taxonomy.rs`) and of the
//! labelled sources; a relation that has no wording for a question does not apply to it
//! ([`variant`] returns `None`).

use std::fmt;
use std::str::FromStr;

use indexmap::IndexMap;
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use ruling_schema::{NoulCriteria, Question, Text};
use serde::{Deserialize, Serialize};

use crate::dataset::ParseNameError;
use crate::record::{NOUL_KEYS, Target, answer_keys};

/// The groups an outside suite reports relations under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dimension {
    /// A question's answer does not depend on what else one request asks.
    Batch,
    /// A choice's answer does not depend on options that do not bear on it, or their order.
    ChoiceSet,
    /// Answers respect logical consequence: conjunctions, thresholds, stronger statements.
    Logical,
    /// The same question written another way gets the same answer.
    Representation,
    /// Probabilities add up as a measure does: complements, unions, copies.
    Measure,
}

impl Dimension {
    pub const ALL: [Dimension; 5] = [
        Dimension::Batch,
        Dimension::ChoiceSet,
        Dimension::Logical,
        Dimension::Representation,
        Dimension::Measure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Batch => "batch",
            Self::ChoiceSet => "choice-set",
            Self::Logical => "logical",
            Self::Representation => "representation",
            Self::Measure => "measure",
        }
    }

    /// What the dimension asks, in a line.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Batch => {
                "batch independence: a question alone, with others, reordered, duplicated"
            }
            Self::ChoiceSet => {
                "choice-set coherence: irrelevant options, independence of irrelevant \
                 alternatives, option order"
            }
            Self::Logical => {
                "logical coherence: conjunction and disjunction bounds, thresholds, \
                 entailment strength"
            }
            Self::Representation => {
                "representation: paraphrase, renamed options, swapped descriptions, opaque \
                 keys, typos, another language, the same question as noul, choice or score"
            }
            Self::Measure => {
                "probability measure: negations sum to one, merged options add, complements, \
                 option clones and splits share mass"
            }
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One metamorphic relation: a way to rewrite a question (or, for the batch relations, to
/// ask it) whose answer the original's answer determines or bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Relation {
    /// Asked alone in its own request.
    Alone,
    /// Asked among many other questions.
    WithOthers,
    /// Asked with the request's questions in reverse order.
    Reordered,
    /// Asked twice in one request under two ids.
    Duplicated,
    /// A choice with an option added that bears on nothing.
    IrrelevantOption,
    /// A choice with one option removed: the others keep their ratios.
    Iia,
    /// A choice with its options in reverse order.
    OptionOrder,
    /// Two nouls asked as one "both" noul.
    Conjunction,
    /// Two nouls asked as one "at least one" noul.
    Disjunction,
    /// A score asked as "is it level `k` or higher?", for every `k`.
    Threshold,
    /// A noul made stronger ("only if the text says so outright").
    Entailment,
    /// The instructions reworded.
    Paraphrase,
    /// A choice's keys rewritten in another style.
    Rename,
    /// A choice's keys and descriptions swapped.
    DescriptionSwap,
    /// A choice's keys made letters, the old key leading the description.
    OpaqueKeys,
    /// The instructions with a few adjacent letters swapped.
    Typos,
    /// The instructions in French, Spanish or German.
    Language,
    /// A noul asked as a choice of yes and no.
    NoulAsChoice,
    /// A noul asked as a two-level score, no then yes.
    NoulAsScore,
    /// A noul wrapped in a negation ("Answer the opposite: ...").
    NegationWrapper,
    /// A noul negated in its own words ("Is this not about X?").
    NegationNatural,
    /// A choice asked as "is it anything other than `k`?".
    ChoiceComplement,
    /// A score asked as "is it below level `k`?".
    ScoreComplement,
    /// Two options of a choice merged into one.
    Merge,
    /// One option of a choice split into two that partition it.
    Split,
    /// One option of a choice offered twice under two keys.
    Clone,
}

impl Relation {
    pub const ALL: [Relation; 26] = [
        Relation::Alone,
        Relation::WithOthers,
        Relation::Reordered,
        Relation::Duplicated,
        Relation::IrrelevantOption,
        Relation::Iia,
        Relation::OptionOrder,
        Relation::Conjunction,
        Relation::Disjunction,
        Relation::Threshold,
        Relation::Entailment,
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

    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alone => "alone",
            Self::WithOthers => "with-others",
            Self::Reordered => "reordered",
            Self::Duplicated => "duplicated",
            Self::IrrelevantOption => "irrelevant-option",
            Self::Iia => "iia",
            Self::OptionOrder => "option-order",
            Self::Conjunction => "conjunction",
            Self::Disjunction => "disjunction",
            Self::Threshold => "threshold",
            Self::Entailment => "entailment",
            Self::Paraphrase => "paraphrase",
            Self::Rename => "rename",
            Self::DescriptionSwap => "description-swap",
            Self::OpaqueKeys => "opaque-keys",
            Self::Typos => "typos",
            Self::Language => "language",
            Self::NoulAsChoice => "noul-as-choice",
            Self::NoulAsScore => "noul-as-score",
            Self::NegationWrapper => "negation-wrapper",
            Self::NegationNatural => "negation-natural",
            Self::ChoiceComplement => "choice-complement",
            Self::ScoreComplement => "score-complement",
            Self::Merge => "merge",
            Self::Split => "split",
            Self::Clone => "clone",
        }
    }

    pub fn dimension(self) -> Dimension {
        match self {
            Self::Alone | Self::WithOthers | Self::Reordered | Self::Duplicated => Dimension::Batch,
            Self::IrrelevantOption | Self::Iia | Self::OptionOrder => Dimension::ChoiceSet,
            Self::Conjunction | Self::Disjunction | Self::Threshold | Self::Entailment => {
                Dimension::Logical
            }
            Self::Paraphrase
            | Self::Rename
            | Self::DescriptionSwap
            | Self::OpaqueKeys
            | Self::Typos
            | Self::Language
            | Self::NoulAsChoice
            | Self::NoulAsScore => Dimension::Representation,
            Self::NegationWrapper
            | Self::NegationNatural
            | Self::ChoiceComplement
            | Self::ScoreComplement
            | Self::Merge
            | Self::Split
            | Self::Clone => Dimension::Measure,
        }
    }

    /// What the relation asks and what it expects, in a line.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Alone => "a question asked alone gets the answer it gets among the others",
            Self::WithOthers => {
                "a question asked among many more questions gets the answer it gets among a few"
            }
            Self::Reordered => "reversing the order of a request's questions changes no answer",
            Self::Duplicated => "a question asked twice in one request gets one answer twice",
            Self::IrrelevantOption => {
                "adding an option that bears on nothing keeps the ratios between the others"
            }
            Self::Iia => "removing an option keeps the ratios between the remaining ones",
            Self::OptionOrder => "reversing a choice's options changes no option's probability",
            Self::Conjunction => {
                "P(A and B) lies within max(0, P(A) + P(B) - 1) and min(P(A), P(B))"
            }
            Self::Disjunction => "P(A or B) lies within max(P(A), P(B)) and min(1, P(A) + P(B))",
            Self::Threshold => {
                "P(level k or higher) is the score's mass on levels k and above, for every k"
            }
            Self::Entailment => {
                "a stronger statement (said outright) is no more likely than the original"
            }
            Self::Paraphrase => "reworded instructions get the same answer",
            Self::Rename => "option keys written in another style get the same probabilities",
            Self::DescriptionSwap => {
                "swapping each option's key and description keeps every option's probability"
            }
            Self::OpaqueKeys => {
                "letters for keys, the old key leading the description, keep every probability"
            }
            Self::Typos => "a few swapped letters in the instructions change no answer",
            Self::Language => "the instructions in French, Spanish or German get the same answer",
            Self::NoulAsChoice => "a noul asked as a choice of yes and no gets the same P(yes)",
            Self::NoulAsScore => "a noul asked as a score of no then yes gets the same P(yes)",
            Self::NegationWrapper => "a noul and its wrapped negation sum to one",
            Self::NegationNatural => "a noul and its negation in its own words sum to one",
            Self::ChoiceComplement => "P(anything other than k) is one minus the choice's P(k)",
            Self::ScoreComplement => "P(below level k) is the score's mass on the levels below k",
            Self::Merge => "two options merged into one hold their summed probability",
            Self::Split => "an option split into two exhaustive cases shares its mass between them",
            Self::Clone => "an option offered twice shares its mass between its two copies",
        }
    }

    /// Whether the relation takes two nouls ([`pair_variant`]) rather than one question.
    pub fn is_pair(self) -> bool {
        matches!(self, Self::Conjunction | Self::Disjunction)
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Relation {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|relation| relation.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|r| r.as_str()).collect();
                ParseNameError::new("relation", s, format!("one of {}", names.join(", ")))
            })
    }
}

/// A rewritten question and what its answer must be, given the original's.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub relation: Relation,
    pub question: Question,
    pub expect: Expectation,
}

/// What a variant's answer must be, in terms of the original's answer keys
/// ([`answer_keys`]: `yes`/`no`, option keys, level indices as text).
#[derive(Clone, Debug, PartialEq)]
pub enum Expectation {
    /// For each `(variant keys, original keys)`, the variant's probabilities over its keys sum
    /// to the original's over its keys. The groups partition both key sets.
    Groups(Vec<(Vec<String>, Vec<String>)>),
    /// The ratios between these original keys are the same in the variant's answer; the
    /// variant may have other keys (an added option) or lack original ones (a removed one).
    Ratios(Vec<String>),
    /// The variant's P(yes) lies within a bound of the originals' P(yes).
    Bounds(Bound),
}

/// A bound on a noul variant's P(yes), given the P(yes) of its originals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The variant entails its one original: P(variant) <= P(original).
    Implies,
    /// Both of two originals (Fréchet bounds): max(0, a + b - 1) <= P <= min(a, b).
    Conjunction,
    /// At least one of two originals: max(a, b) <= P <= min(1, a + b).
    Disjunction,
}

impl Bound {
    /// The interval P(yes) of the variant must lie in, given the originals' P(yes); `None`
    /// when the number of originals is not the bound's.
    pub fn interval(self, originals: &[f64]) -> Option<(f64, f64)> {
        match (self, originals) {
            (Self::Implies, [a]) => Some((0.0, *a)),
            (Self::Conjunction, [a, b]) => Some(((a + b - 1.0).max(0.0), a.min(*b))),
            (Self::Disjunction, [a, b]) => Some((a.max(*b), (a + b).min(1.0))),
            _ => None,
        }
    }
}

impl Variant {
    /// The distribution the variant's answer should have when the original's is `original`
    /// (over the variant's answer keys, in canonical order): for [`Expectation::Groups`] each
    /// group's original mass, split equally over its variant keys; for
    /// [`Expectation::Ratios`] the original renormalised over the kept keys, an added key at
    /// 0. `None` for [`Expectation::Bounds`] (no one distribution follows), or when the
    /// original gives the kept keys no mass.
    pub fn target(&self, original: &Target) -> Option<Target> {
        let keys = answer_keys(&self.question);
        let mass = |ks: &[String]| -> f64 { ks.iter().filter_map(|k| original.get(k)).sum() };
        match &self.expect {
            Expectation::Groups(groups) => {
                let mut target: Target = keys.into_iter().map(|k| (k, 0.0)).collect();
                for (variant_keys, original_keys) in groups {
                    let share = mass(original_keys) / variant_keys.len().max(1) as f64;
                    for key in variant_keys {
                        *target.get_mut(key)? += share;
                    }
                }
                Some(target)
            }
            Expectation::Ratios(kept) => {
                let total = mass(kept);
                if total <= f64::MIN_POSITIVE {
                    return None;
                }
                Some(
                    keys.into_iter()
                        .map(|k| {
                            let p = if kept.contains(&k) {
                                original.get(&k).copied().unwrap_or(0.0) / total
                            } else {
                                0.0
                            };
                            (k, p)
                        })
                        .collect(),
                )
            }
            Expectation::Bounds(_) => None,
        }
    }

    /// How far `answer` (the variant's) strays from what `originals` (the original's answer,
    /// or both originals' for a pair) imply: for groups, the largest absolute difference
    /// between a group's two sums; for ratios, the largest absolute difference between the
    /// two answers renormalised over the kept keys; for bounds, how far P(yes) lies outside
    /// its interval (0 inside). `None` when an answer lacks a key the expectation names, the
    /// number of originals is wrong, or the kept keys hold no mass.
    pub fn deviation(&self, answer: &Target, originals: &[&Target]) -> Option<f64> {
        let sum = |dist: &Target, keys: &[String]| -> Option<f64> {
            keys.iter().map(|k| dist.get(k).copied()).sum()
        };
        match &self.expect {
            Expectation::Groups(groups) => {
                let [original] = originals else { return None };
                groups.iter().try_fold(0.0f64, |worst, (v, o)| {
                    Some(worst.max((sum(answer, v)? - sum(original, o)?).abs()))
                })
            }
            Expectation::Ratios(kept) => {
                let [original] = originals else { return None };
                let (a, b) = (sum(answer, kept)?, sum(original, kept)?);
                if a <= f64::MIN_POSITIVE || b <= f64::MIN_POSITIVE {
                    return None;
                }
                kept.iter().try_fold(0.0f64, |worst, k| {
                    Some(worst.max((answer.get(k)? / a - original.get(k)? / b).abs()))
                })
            }
            Expectation::Bounds(bound) => {
                let yes = NOUL_KEYS[0];
                let p = *answer.get(yes)?;
                let given: Option<Vec<f64>> =
                    originals.iter().map(|o| o.get(yes).copied()).collect();
                let (low, high) = bound.interval(&given?)?;
                Some((low - p).max(p - high).max(0.0))
            }
        }
    }
}

/// Every variant of `question` under `relation`: one for most relations, one per level
/// boundary for [`Relation::Threshold`] (the sweep), none where it does not apply.
pub fn variants(relation: Relation, question: &Question, rng: &mut ChaCha8Rng) -> Vec<Variant> {
    match (relation, question) {
        (Relation::Threshold, Question::Score { criteria, .. }) => (1..criteria.len())
            .filter_map(|k| threshold(question, k, Side::AtLeast))
            .map(|(question, expect)| Variant {
                relation,
                question,
                expect,
            })
            .collect(),
        _ => variant(relation, question, rng).into_iter().collect(),
    }
}

/// One variant of `question` under `relation`, its wording and any choice it involves drawn
/// with `rng`; `None` when the relation does not apply (a choice relation to a noul, a
/// wording relation to instructions it has no wording for, the pair relations, which take
/// two nouls: [`pair_variant`]).
///
/// The batch relations give the question itself with the identity expectation: what they
/// change is the request around it, which is the caller's to build.
pub fn variant(relation: Relation, question: &Question, rng: &mut ChaCha8Rng) -> Option<Variant> {
    if matches!(question, Question::Box { .. }) {
        return None;
    }
    let (rewritten, expect) = match relation {
        Relation::Alone | Relation::WithOthers | Relation::Reordered | Relation::Duplicated => {
            (question.clone(), same(question))
        }
        Relation::Conjunction | Relation::Disjunction => return None,
        Relation::IrrelevantOption => irrelevant_option(question, rng)?,
        Relation::Iia => without_one(question, rng)?,
        Relation::OptionOrder => reversed_options(question)?,
        Relation::Threshold => {
            let Question::Score { criteria, .. } = question else {
                return None;
            };
            let k = rng.random_range(1..criteria.len().max(2));
            threshold(question, k, Side::AtLeast)?
        }
        Relation::Entailment => outright(question)?,
        Relation::Paraphrase => reworded(question, |text| paraphrase(text, rng))?,
        Relation::Rename => renamed(question)?,
        Relation::DescriptionSwap => descriptions_swapped(question)?,
        Relation::OpaqueKeys => opaque_keys(question)?,
        Relation::Typos => reworded(question, |text| typos(text, rng))?,
        Relation::Language => reworded(question, |text| translate(text, rng))?,
        Relation::NoulAsChoice => noul_as_choice(question)?,
        Relation::NoulAsScore => noul_as_score(question)?,
        Relation::NegationWrapper => negated(question, |text| {
            let wrapper = NEGATION_WRAPPERS.choose(rng)?;
            Some(wrapper.replace("{q}", text))
        })?,
        Relation::NegationNatural => negated(question, natural_negation)?,
        Relation::ChoiceComplement => choice_complement(question, rng)?,
        Relation::ScoreComplement => {
            let Question::Score { criteria, .. } = question else {
                return None;
            };
            let k = rng.random_range(1..criteria.len().max(2));
            threshold(question, k, Side::Below)?
        }
        Relation::Merge => merged(question, rng)?,
        Relation::Split => split(question, rng)?,
        Relation::Clone => cloned(question, rng)?,
    };
    Some(Variant {
        relation,
        question: rewritten,
        expect,
    })
}

/// The one noul a pair relation asks of two nouls, `first` and `second` in that order (the
/// order [`Variant::deviation`] takes their answers in); `None` for other relations or
/// questions.
pub fn pair_variant(
    relation: Relation,
    first: &Question,
    second: &Question,
    rng: &mut ChaCha8Rng,
) -> Option<Variant> {
    let (a, b) = (noul_text(first)?, noul_text(second)?);
    let (wordings, bound) = match relation {
        Relation::Conjunction => (CONJUNCTIONS, Bound::Conjunction),
        Relation::Disjunction => (DISJUNCTIONS, Bound::Disjunction),
        _ => return None,
    };
    let wording = wordings.choose(rng)?;
    Some(Variant {
        relation,
        question: noul(wording.replace("{a}", &a).replace("{b}", &b)),
        expect: Expectation::Bounds(bound),
    })
}

// ---------------------------------------------------------------------------------------------
// The transformations. Each gives the rewritten question and its expectation, or `None`.

type Rewritten = (Question, Expectation);

fn same(question: &Question) -> Expectation {
    identity(&answer_keys(question))
}

fn identity(keys: &[String]) -> Expectation {
    Expectation::Groups(
        keys.iter()
            .map(|k| (vec![k.clone()], vec![k.clone()]))
            .collect(),
    )
}

fn noul(instructions: String) -> Question {
    Question::Noul {
        instructions: Text::from(instructions),
        criteria: None,
    }
}

fn yes_no_swapped() -> Expectation {
    let [yes, no] = NOUL_KEYS.map(str::to_owned);
    Expectation::Groups(vec![
        (vec![yes.clone()], vec![no.clone()]),
        (vec![no], vec![yes]),
    ])
}

/// A noul's instructions as one line of text (JSON instructions rendered), when not empty.
fn noul_text(question: &Question) -> Option<String> {
    let Question::Noul { instructions, .. } = question else {
        return None;
    };
    let text = instructions.render();
    (!text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The question with its string instructions rewritten by `rewrite` (the same expectation);
/// `None` for instructions that are not a string or that `rewrite` has nothing for.
fn reworded(
    question: &Question,
    rewrite: impl FnOnce(&str) -> Option<String>,
) -> Option<Rewritten> {
    let text = instructions(question)?.as_value().as_str()?;
    let new = rewrite(text)?;
    if new == text {
        return None;
    }
    let rewritten = with_instructions(question, Text::from(new));
    Some((rewritten, same(question)))
}

fn instructions(question: &Question) -> Option<&Text> {
    match question {
        Question::Noul { instructions, .. }
        | Question::Choice { instructions, .. }
        | Question::Score { instructions, .. } => Some(instructions),
        Question::Box { .. } => None,
    }
}

fn with_instructions(question: &Question, text: Text) -> Question {
    let mut question = question.clone();
    match &mut question {
        Question::Noul { instructions, .. }
        | Question::Choice { instructions, .. }
        | Question::Score { instructions, .. }
        | Question::Box { instructions } => *instructions = text,
    }
    question
}

/// A noul's negation: its instructions rewritten by `negate`, what true and false mean
/// swapped, yes and no exchanged.
fn negated(question: &Question, negate: impl FnOnce(&str) -> Option<String>) -> Option<Rewritten> {
    let Question::Noul { criteria, .. } = question else {
        return None;
    };
    let text = noul_text(question)?;
    let negation = negate(&text)?;
    let criteria = criteria.as_ref().map(|c| NoulCriteria {
        if_true: c.if_false.clone(),
        if_false: c.if_true.clone(),
    });
    Some((
        Question::Noul {
            instructions: Text::from(negation),
            criteria,
        },
        yes_no_swapped(),
    ))
}

fn noul_as_choice(question: &Question) -> Option<Rewritten> {
    let Question::Noul {
        instructions,
        criteria,
    } = question
    else {
        return None;
    };
    noul_text(question)?;
    let described = |text: Option<&Text>| text.cloned().unwrap_or_else(Text::null);
    let criteria = criteria.as_ref();
    let options: IndexMap<String, Text> = [
        (
            NOUL_KEYS[0].to_owned(),
            described(criteria.and_then(|c| c.if_true.as_ref())),
        ),
        (
            NOUL_KEYS[1].to_owned(),
            described(criteria.and_then(|c| c.if_false.as_ref())),
        ),
    ]
    .into_iter()
    .collect();
    Some((
        Question::Choice {
            instructions: instructions.clone(),
            criteria: options,
        },
        same(question),
    ))
}

fn noul_as_score(question: &Question) -> Option<Rewritten> {
    let Question::Noul { instructions, .. } = question else {
        return None;
    };
    noul_text(question)?;
    let [yes, no] = NOUL_KEYS.map(str::to_owned);
    Some((
        Question::Score {
            instructions: instructions.clone(),
            criteria: vec![Text::from("no"), Text::from("yes")],
        },
        Expectation::Groups(vec![
            (vec!["0".into()], vec![no]),
            (vec!["1".into()], vec![yes]),
        ]),
    ))
}

/// A noul that holds only when the original's yes is said outright: it entails the original.
fn outright(question: &Question) -> Option<Rewritten> {
    let text = noul_text(question)?;
    Some((
        noul(format!(
            "{text} Answer yes only if the text says so outright; if it is only suggested, or \
             unclear, answer no."
        )),
        Expectation::Bounds(Bound::Implies),
    ))
}

/// Which side of a score's level `k` a threshold noul asks about.
#[derive(Clone, Copy)]
enum Side {
    AtLeast,
    Below,
}

/// A score asked as a noul about its level `k` (1 to levels - 1): "level k or higher?" holds
/// the mass on levels `k..`, "below level k?" the mass on `..k`.
fn threshold(question: &Question, k: usize, side: Side) -> Option<Rewritten> {
    let Question::Score {
        instructions,
        criteria,
    } = question
    else {
        return None;
    };
    if k == 0 || k >= criteria.len() {
        return None;
    }
    let asked = instructions.render();
    let levels: Vec<String> = criteria.iter().map(|l| one_line(&l.render())).collect();
    let scale = levels
        .iter()
        .map(|l| format!("\"{l}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let level = &levels[k];
    let ask = match side {
        Side::AtLeast => format!("Is the answer \"{level}\" or higher on this scale?"),
        Side::Below => format!("Is the answer lower on this scale than \"{level}\"?"),
    };
    let text = format!("{}\nThe scale, lowest first: {scale}.\n{ask}", asked.trim());
    let indices = |range: std::ops::Range<usize>| range.map(|i| i.to_string()).collect::<Vec<_>>();
    let (below, at_least) = (indices(0..k), indices(k..criteria.len()));
    let [yes, no] = NOUL_KEYS.map(str::to_owned);
    let groups = match side {
        Side::AtLeast => vec![(vec![yes], at_least), (vec![no], below)],
        Side::Below => vec![(vec![yes], below), (vec![no], at_least)],
    };
    Some((noul(text), Expectation::Groups(groups)))
}

type Options = IndexMap<String, Text>;

fn choice_parts(question: &Question) -> Option<(&Text, &Options)> {
    match question {
        Question::Choice {
            instructions,
            criteria,
        } => Some((instructions, criteria)),
        _ => None,
    }
}

fn choice(instructions: &Text, criteria: Options) -> Question {
    Question::Choice {
        instructions: instructions.clone(),
        criteria,
    }
}

/// A choice asked as "is the answer anything other than `k`?" about one drawn option.
fn choice_complement(question: &Question, rng: &mut ChaCha8Rng) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let keys: Vec<String> = options.keys().cloned().collect();
    let key = keys.choose(rng)?.clone();
    let listing = options
        .iter()
        .map(|(k, d)| match one_line(&d.render()) {
            d if d.is_empty() => format!("- {k}"),
            d => format!("- {k}: {d}"),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let text = format!(
        "{}\nThe options are:\n{listing}\nIs the right option anything other than \"{key}\"?",
        instructions.render().trim()
    );
    let others: Vec<String> = keys.iter().filter(|k| **k != key).cloned().collect();
    let [yes, no] = NOUL_KEYS.map(str::to_owned);
    Some((
        noul(text),
        Expectation::Groups(vec![(vec![yes], others), (vec![no], vec![key])]),
    ))
}

/// Options that bear on nothing a text is likely to be about.
const IRRELEVANT: &[(&str, &str)] = &[
    ("a recipe for banana bread", "how to bake banana bread"),
    (
        "the rules of cricket",
        "how a game of cricket is played and scored",
    ),
    (
        "bicycle tyre pressure",
        "how hard to pump up a bicycle's tyres",
    ),
    (
        "the moons of Jupiter",
        "the natural satellites of the planet Jupiter",
    ),
    ("knitting patterns", "instructions for knitting a jumper"),
    (
        "the boiling point of mercury",
        "the temperature at which mercury boils",
    ),
    ("medieval siege engines", "catapults and trebuchets"),
    ("the migration of eels", "how eels cross the ocean to spawn"),
];

fn described(options: &Options) -> bool {
    options.values().any(|d| !d.is_null())
}

fn irrelevant_option(question: &Question, rng: &mut ChaCha8Rng) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let fresh: Vec<&(&str, &str)> = IRRELEVANT
        .iter()
        .filter(|(key, _)| !options.contains_key(*key))
        .collect();
    let (key, description) = **fresh.choose(rng)?;
    let mut criteria = options.clone();
    let text = if described(options) {
        Text::from(description)
    } else {
        Text::null()
    };
    criteria.insert(key.to_owned(), text);
    Some((
        choice(instructions, criteria),
        Expectation::Ratios(options.keys().cloned().collect()),
    ))
}

/// The choice without one drawn option (three options or more, so two remain).
fn without_one(question: &Question, rng: &mut ChaCha8Rng) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    if options.len() < 3 {
        return None;
    }
    let dropped = rng.random_range(0..options.len());
    let criteria: Options = options
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != dropped)
        .map(|(_, (k, d))| (k.clone(), d.clone()))
        .collect();
    let kept = criteria.keys().cloned().collect();
    Some((choice(instructions, criteria), Expectation::Ratios(kept)))
}

fn reversed_options(question: &Question) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let criteria: Options = options
        .iter()
        .rev()
        .map(|(k, d)| (k.clone(), d.clone()))
        .collect();
    Some((choice(instructions, criteria), same(question)))
}

/// The choice with its keys replaced by `new_keys` (and descriptions by `new_descriptions`),
/// each new key holding its old key's probability. `None` when the new keys repeat or are
/// the old ones.
fn rekeyed(
    instructions: Text,
    options: &Options,
    new_keys: Vec<String>,
    new_descriptions: Vec<Text>,
) -> Option<Rewritten> {
    let old: Vec<&String> = options.keys().collect();
    let distinct: std::collections::HashSet<&String> = new_keys.iter().collect();
    if distinct.len() != new_keys.len()
        || new_keys.iter().any(|k| k.trim().is_empty())
        || new_keys.iter().zip(&old).all(|(n, o)| n == *o)
    {
        return None;
    }
    let groups = new_keys
        .iter()
        .zip(&old)
        .map(|(n, o)| (vec![n.clone()], vec![(*o).clone()]))
        .collect();
    let criteria: Options = new_keys.into_iter().zip(new_descriptions).collect();
    Some((
        Question::Choice {
            instructions,
            criteria,
        },
        Expectation::Groups(groups),
    ))
}

/// Keys in another style: `snake_case` as words, words as `snake_case`, a single word with
/// its first letter's case changed. Where the instructions name a key as a word of their
/// own, they name the new key.
fn renamed(question: &Question) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let new_keys: Vec<String> = options.keys().map(|k| restyled(k)).collect();
    let pairs: Vec<(&str, &str)> = options
        .keys()
        .zip(&new_keys)
        .map(|(o, n)| (o.as_str(), n.as_str()))
        .collect();
    let instructions = match instructions.as_value().as_str() {
        Some(text) => Text::from(replace_words(text, &pairs)),
        None => instructions.clone(),
    };
    rekeyed(
        instructions,
        options,
        new_keys,
        options.values().cloned().collect(),
    )
}

fn restyled(key: &str) -> String {
    if key.contains('_') {
        key.replace('_', " ")
    } else if key.contains(' ') {
        key.replace(' ', "_")
    } else {
        let mut chars = key.chars();
        match chars.next() {
            Some(first) if first.is_lowercase() => first.to_uppercase().chain(chars).collect(),
            Some(first) => first.to_lowercase().chain(chars).collect(),
            None => String::new(),
        }
    }
}

/// `text` with every whole-word occurrence of each `from` replaced by its `to`: a key named
/// in the instructions ("Answer oos if ...") follows its rename, "no" inside "not" does not.
fn replace_words(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut previous: Option<char> = None;
    'scan: while let Some(c) = rest.chars().next() {
        let at_start = previous.is_none_or(|p| !p.is_alphanumeric());
        if at_start {
            for (from, to) in pairs {
                if from.is_empty() || !rest.starts_with(from) {
                    continue;
                }
                let after = rest[from.len()..].chars().next();
                if after.is_none_or(|a| !a.is_alphanumeric()) {
                    out.push_str(to);
                    rest = &rest[from.len()..];
                    previous = from.chars().last();
                    continue 'scan;
                }
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
        previous = Some(c);
    }
    out
}

/// Each described option's description becomes its key and its key its description
/// (options without one, or whose description is too long or repeats, keep their key).
fn descriptions_swapped(question: &Question) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let mut taken: std::collections::HashSet<String> = options.keys().cloned().collect();
    let mut new_keys = Vec::new();
    let mut new_descriptions = Vec::new();
    for (key, description) in options {
        let text = one_line(&description.render());
        let usable = !text.is_empty() && text.chars().count() <= 80 && !taken.contains(&text);
        if usable {
            taken.insert(text.clone());
            new_keys.push(text);
            new_descriptions.push(Text::from(key.clone()));
        } else {
            new_keys.push(key.clone());
            new_descriptions.push(description.clone());
        }
    }
    rekeyed(instructions.clone(), options, new_keys, new_descriptions)
}

/// Letters for keys (`A`..`Z`, then `AA`, `AB`, ...), each description led by the old key.
fn opaque_keys(question: &Question) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let new_keys = (0..options.len()).map(letters).collect();
    let new_descriptions = options
        .iter()
        .map(|(key, description)| match one_line(&description.render()) {
            d if d.is_empty() => Text::from(key.clone()),
            d => Text::from(format!("{key}: {d}")),
        })
        .collect();
    rekeyed(instructions.clone(), options, new_keys, new_descriptions)
}

fn letters(index: usize) -> String {
    let letter = |i: usize| char::from(b'A' + (i % 26) as u8);
    if index < 26 {
        letter(index).to_string()
    } else {
        format!("{}{}", letter(index / 26 - 1), letter(index))
    }
}

/// Two drawn options merged into one, in the first one's place.
fn merged(question: &Question, rng: &mut ChaCha8Rng) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    if options.len() < 3 {
        return None;
    }
    let mut picked: Vec<usize> = (0..options.len()).collect::<Vec<_>>();
    picked.shuffle(rng);
    let (mut i, mut j) = (picked[0], picked[1]);
    if j < i {
        std::mem::swap(&mut i, &mut j);
    }
    let (a, da) = options.get_index(i)?;
    let (b, db) = options.get_index(j)?;
    let key = format!("{a} or {b}");
    if options.contains_key(&key) {
        return None;
    }
    let description = match (one_line(&da.render()), one_line(&db.render())) {
        (x, y) if x.is_empty() && y.is_empty() => Text::null(),
        (x, y) => Text::from(format!(
            "{}; or {}",
            if x.is_empty() { a.clone() } else { x },
            if y.is_empty() { b.clone() } else { y }
        )),
    };
    let mut criteria = Options::new();
    let mut groups = Vec::new();
    for (index, (k, d)) in options.iter().enumerate() {
        if index == i {
            criteria.insert(key.clone(), description.clone());
            groups.push((vec![key.clone()], vec![a.clone(), b.clone()]));
        } else if index != j {
            criteria.insert(k.clone(), d.clone());
            groups.push((vec![k.clone()], vec![k.clone()]));
        }
    }
    Some((choice(instructions, criteria), Expectation::Groups(groups)))
}

/// One drawn option replaced by two cases that partition it: said outright, only implied.
fn split(question: &Question, rng: &mut ChaCha8Rng) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let index = rng.random_range(0..options.len());
    let (key, description) = options.get_index(index)?;
    let what = match one_line(&description.render()) {
        d if d.is_empty() => key.clone(),
        d => d,
    };
    let cases = [
        (
            format!("{key} (explicit)"),
            format!("{what}, said outright in the text"),
        ),
        (
            format!("{key} (implicit)"),
            format!("{what}, only implied, never said outright"),
        ),
    ];
    if cases.iter().any(|(k, _)| options.contains_key(k)) {
        return None;
    }
    let mut criteria = Options::new();
    let mut groups = Vec::new();
    for (i, (k, d)) in options.iter().enumerate() {
        if i == index {
            for (case, text) in &cases {
                criteria.insert(case.clone(), Text::from(text.clone()));
            }
            groups.push((
                cases.iter().map(|(k, _)| k.clone()).collect(),
                vec![key.clone()],
            ));
        } else {
            criteria.insert(k.clone(), d.clone());
            groups.push((vec![k.clone()], vec![k.clone()]));
        }
    }
    Some((choice(instructions, criteria), Expectation::Groups(groups)))
}

/// One drawn option offered again right after itself, under another key, with the same text.
fn cloned(question: &Question, rng: &mut ChaCha8Rng) -> Option<Rewritten> {
    let (instructions, options) = choice_parts(question)?;
    let index = rng.random_range(0..options.len());
    let (key, description) = options.get_index(index)?;
    let copy = format!("{key} (copy)");
    if options.contains_key(&copy) {
        return None;
    }
    // With no description the key is the option's text: the copy shows it as its description.
    let text = if description.is_null() {
        Text::from(key.clone())
    } else {
        description.clone()
    };
    let mut criteria = Options::new();
    let mut groups = Vec::new();
    for (i, (k, d)) in options.iter().enumerate() {
        criteria.insert(k.clone(), d.clone());
        if i == index {
            criteria.insert(copy.clone(), text.clone());
            groups.push((vec![k.clone(), copy.clone()], vec![k.clone()]));
        } else {
            groups.push((vec![k.clone()], vec![k.clone()]));
        }
    }
    Some((choice(instructions, criteria), Expectation::Groups(groups)))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// Wordings.

/// Negations that wrap any yes/no question; `{q}` is the question.
const NEGATION_WRAPPERS: &[&str] = &[
    "Answer the opposite: {q}",
    "Is the answer to the following question no? {q}",
    "Is it false that the answer to this question is yes? {q}",
    "Answer yes if the answer to this question is no, and no if it is yes: {q}",
];

const CONJUNCTIONS: &[&str] = &[
    "Is the answer to both of these questions yes?\n1. {a}\n2. {b}",
    "Answer yes only if both of the following are true.\n1. {a}\n2. {b}",
];

const DISJUNCTIONS: &[&str] = &[
    "Is the answer to at least one of these questions yes?\n1. {a}\n2. {b}",
    "Answer yes if either of the following is true, or both.\n1. {a}\n2. {b}",
];

/// Verbs a yes/no question starts with, after which "not" follows the subject.
const AUXILIARIES: &[&str] = &[
    "is", "are", "was", "were", "does", "do", "did", "has", "have",
];

/// Subjects of the taxonomy's and the sources' yes/no questions, after which "not" goes.
const SUBJECTS: &[&str] = &[
    "it",
    "there",
    "this",
    "this text",
    "this message",
    "this e-mail",
    "this comment",
    "this code",
    "this implementation",
    "this question",
    "the text",
    "the writer",
    "the message",
    "the language",
    "the language of this text",
    "the tone of this text",
    "the sentiment of this text",
    "the sentiment of this sentence from a movie review",
    "the subject of this text",
    "the answer to this",
];

/// "Is this about X?" as "Is this not about X?": "not" after the subject of a question that
/// starts with an auxiliary verb and a subject of [`SUBJECTS`] ("Is there a bug" becomes "Is
/// there no bug"). Modal questions ("Would ...", "Could ...") are left alone: their negation
/// reads as a rhetorical question or changes what is asked.
fn natural_negation(question: &str) -> Option<String> {
    let question = question.trim();
    if !question.ends_with('?') {
        return None;
    }
    let lead = "According to the text, ";
    let (lead, rest) = match question.strip_prefix(lead) {
        Some(rest) => (lead, rest),
        None => ("", question),
    };
    let (auxiliary, after) = rest.split_once(' ')?;
    if !AUXILIARIES
        .iter()
        .any(|a| a.eq_ignore_ascii_case(auxiliary))
    {
        return None;
    }
    let lower = after.to_lowercase();
    let subject = SUBJECTS
        .iter()
        .filter(|s| lower.starts_with(**s) && lower[s.len()..].starts_with(' '))
        .max_by_key(|s| s.len())?;
    let (said, tail) = after.split_at(subject.len());
    let tail = tail.trim_start();
    if tail.starts_with("not ") || tail.starts_with("no ") {
        return None;
    }
    if *subject == "there" {
        let tail = tail
            .strip_prefix("a ")
            .or_else(|| tail.strip_prefix("an "))?;
        return Some(format!("{lead}{auxiliary} {said} no {tail}"));
    }
    Some(format!("{lead}{auxiliary} {said} not {tail}"))
}

/// Groups of instructions that ask the same thing, one per line, groups apart by a blank
/// line; `{x}` is the entry asked about.
const PARAPHRASES: &str = "\
Is this text about {x}?
Does this text deal with {x}?
Is {x} what this text is about?
Would you say this text is about {x}?

Does the text mention {x}?
Is {x} mentioned in the text?
Does the text refer to {x} anywhere?
Does {x} come up anywhere in the text?

Does the writer ask for {x}?
Does the message ask for {x}?
Is the writer asking for {x}?

Does the writer sound {x}?
Is the tone of this text {x}?
Does the writing come across as {x}?

Is this text mainly about {x}?
Is the subject of this text {x}?
Is this text chiefly about {x}?

Does this question ask for {x}?
Is this question looking for {x}?
Is {x} what this question asks for?

Does the text say that {x}?
According to the text, is it true that {x}?
Does the text state that {x}?

Is this text written in {x}?
Is the language of this text {x}?
Is {x} the language this text is written in?

Does this comment express {x}?
Is {x} expressed in this comment?
Does this comment show {x}?

Is this e-mail spam?
Is this e-mail unsolicited bulk mail, that is, spam?
Would a spam filter be right to catch this e-mail?

Is this message spam?
Is this message unsolicited spam?
Should this message be classed as spam?

Is the sentiment of this sentence from a movie review positive?
Does this sentence from a movie review express a positive sentiment?
Is this movie-review sentence positive in sentiment?

Is the sentiment of this text positive?
Is this text positive in sentiment?
Does this text express a positive sentiment?

Is this urgent?
Does this need urgent attention?
Is this a matter of urgency?

Is this written formally?
Is the writing formal?
Is this text written in a formal style?

Does this text contain offensive language?
Is there offensive language in this text?
Does the text use offensive words?

What is this text about?
Which topic does this text belong to?
Classify the text by its subject.
Which category fits this text best?
File this text under one of these topics.

What kind of text is this?
What sort of document is this?
Which genre does this text belong to?

What is the tone of this text?
How does the writer sound?
Which word best describes the writer's mood?

What does the writer ask for?
What does this message request?
What does the sender want from the reader?

Who or what is this text mainly about?
What is the main subject of the text?
The text is chiefly about which of these?

What is the asker looking for?
Which sort of information does this question want?
What kind of answer does this question want?

Which language is this text written in?
What language is this?
Identify the language of the text.

What is the overall sentiment of the text?
What sentiment does the text express overall?

What kind of message is this?
What sort of message is this?

What is this message to a chatbot about?
What topic is this message to a chatbot on?
Which topic does this message to a chatbot concern?

Which category of quotations does this one belong to?
Under which category of quotations would this one be filed?
Which quotation category fits this one?

Which kind of patient condition is this medical abstract about?
What kind of condition do the patients in this medical abstract have?
Which class of patient condition does this medical abstract concern?

Which intent does this request to a virtual assistant express? Answer oos if it expresses none of the listed intents.
What does the user want from the virtual assistant with this request? Answer oos if it expresses none of the listed intents.

Which party did the president who gave this address belong to?
What was the party of the president who gave this address?

How positive or negative is the sentiment of this sentence from a movie review?
Rate the sentiment of this sentence from a movie review, from negative to positive.
On a scale from negative to positive, where does this movie-review sentence fall?

How positive is this text?
Rate how positive this text is.
How positive does this text read?

How urgent is this?
Rate the urgency of this.
How pressing is this?

How much is this text about {x}?
To what degree does this text concern {x}?
How far is this text about {x}?

How formal is the writing?
Rate the formality of the writing.

How likely is this message to be spam?
How probable is it that this message is spam?

How harmful is this text?
Rate how harmful this text is.
";

/// The groups of [`PARAPHRASES`].
fn paraphrase_groups() -> impl Iterator<Item = Vec<&'static str>> {
    PARAPHRASES.split("\n\n").map(|group| {
        group
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect()
    })
}

/// Frames that reword any instructions without changing what they ask, for instructions no
/// group of [`PARAPHRASES`] holds.
const FRAMES: &[&str] = &[
    "Here is a question about the text. {q}",
    "Read the text, then answer: {q}",
    "Answer from the text: {q}",
];

/// `{x}` of `template` in `text`: `Some("")` for a template without a slot that is `text`.
fn slot<'t>(template: &str, text: &'t str) -> Option<&'t str> {
    match template.split_once("{x}") {
        None => (template == text).then_some(""),
        Some((head, tail)) => {
            let middle = text.strip_prefix(head)?.strip_suffix(tail)?;
            (!middle.is_empty()).then_some(middle)
        }
    }
}

/// Another wording of `text` from its paraphrase group, or a neutral frame around it.
fn paraphrase(text: &str, rng: &mut ChaCha8Rng) -> Option<String> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    for group in paraphrase_groups() {
        for (index, template) in group.iter().enumerate() {
            if let Some(x) = slot(template, text) {
                let others: Vec<&&str> = group
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != index)
                    .map(|(_, t)| t)
                    .collect();
                return Some(others.choose(rng)?.replace("{x}", x));
            }
        }
    }
    Some(FRAMES.choose(rng)?.replace("{q}", text))
}

/// Instruction templates in French, Spanish and German: the English template, then a line
/// per language, templates apart by a blank line. `{x}`, where there is one, stays the
/// English entry, as option keys and levels stay English.
const TRANSLATIONS: &str = "\
Is this text about {x}?
fr: Ce texte parle-t-il de {x} ?
es: ¿Este texto trata sobre {x}?
de: Handelt dieser Text von {x}?

Does this text deal with {x}?
fr: Ce texte traite-t-il de {x} ?
es: ¿Este texto aborda {x}?
de: Befasst sich dieser Text mit {x}?

Does the text mention {x}?
fr: Le texte mentionne-t-il {x} ?
es: ¿El texto menciona {x}?
de: Erwähnt der Text {x}?

Is {x} mentioned in the text?
fr: Le texte fait-il mention de {x} ?
es: ¿Se menciona {x} en el texto?
de: Wird {x} im Text erwähnt?

Does the writer ask for {x}?
fr: L'auteur demande-t-il {x} ?
es: ¿El autor pide {x}?
de: Bittet der Verfasser um {x}?

Does the writer sound {x}?
fr: L'auteur semble-t-il {x} ?
es: ¿El autor parece {x}?
de: Klingt der Verfasser {x}?

Is the tone of this text {x}?
fr: Le ton de ce texte est-il {x} ?
es: ¿Es {x} el tono de este texto?
de: Ist der Ton dieses Textes {x}?

Is this text mainly about {x}?
fr: Ce texte porte-t-il principalement sur {x} ?
es: ¿Trata este texto principalmente sobre {x}?
de: Geht es in diesem Text hauptsächlich um {x}?

Does this question ask for {x}?
fr: Cette question demande-t-elle {x} ?
es: ¿Esta pregunta pide {x}?
de: Fragt diese Frage nach {x}?

Does the text say that {x}?
fr: Le texte dit-il que {x} ?
es: ¿Dice el texto que {x}?
de: Sagt der Text, dass {x}?

Is this text written in {x}?
fr: Ce texte est-il écrit en {x} ?
es: ¿Está este texto escrito en {x}?
de: Ist dieser Text auf {x} geschrieben?

Does this comment express {x}?
fr: Ce commentaire exprime-t-il {x} ?
es: ¿Expresa este comentario {x}?
de: Drückt dieser Kommentar {x} aus?

Is this e-mail spam?
fr: Cet e-mail est-il un spam ?
es: ¿Es este correo electrónico spam?
de: Ist diese E-Mail Spam?

Is this message spam?
fr: Ce message est-il un spam ?
es: ¿Es este mensaje spam?
de: Ist diese Nachricht Spam?

Is this urgent?
fr: Est-ce urgent ?
es: ¿Es esto urgente?
de: Ist das dringend?

Is the sentiment of this text positive?
fr: Le sentiment exprimé dans ce texte est-il positif ?
es: ¿Es positivo el sentimiento de este texto?
de: Ist die Stimmung dieses Textes positiv?

Is the sentiment of this sentence from a movie review positive?
fr: Le sentiment de cette phrase tirée d'une critique de film est-il positif ?
es: ¿Es positivo el sentimiento de esta frase de una crítica de cine?
de: Ist die Stimmung dieses Satzes aus einer Filmkritik positiv?

Is this written formally?
fr: Ce texte est-il écrit dans un registre soutenu ?
es: ¿Está escrito esto de manera formal?
de: Ist das förmlich geschrieben?

Does this text contain offensive language?
fr: Ce texte contient-il des propos offensants ?
es: ¿Contiene este texto lenguaje ofensivo?
de: Enthält dieser Text beleidigende Sprache?

Is there a bug in this code?
fr: Y a-t-il un bogue dans ce code ?
es: ¿Hay un error en este código?
de: Enthält dieser Code einen Fehler?

What is this text about?
fr: De quoi parle ce texte ?
es: ¿De qué trata este texto?
de: Worum geht es in diesem Text?

Which topic does this text belong to?
fr: À quel sujet ce texte appartient-il ?
es: ¿A qué tema pertenece este texto?
de: Zu welchem Thema gehört dieser Text?

Which category fits this text best?
fr: Quelle catégorie convient le mieux à ce texte ?
es: ¿Qué categoría se ajusta mejor a este texto?
de: Welche Kategorie passt am besten zu diesem Text?

Classify the text by its subject.
fr: Classez le texte selon son sujet.
es: Clasifica el texto según su tema.
de: Ordne den Text nach seinem Thema ein.

What kind of text is this?
fr: Quel genre de texte est-ce ?
es: ¿Qué tipo de texto es este?
de: Was für ein Text ist das?

What is the tone of this text?
fr: Quel est le ton de ce texte ?
es: ¿Cuál es el tono de este texto?
de: Welchen Ton hat dieser Text?

What does the writer ask for?
fr: Que demande l'auteur ?
es: ¿Qué pide el autor?
de: Worum bittet der Verfasser?

Which language is this text written in?
fr: Dans quelle langue ce texte est-il écrit ?
es: ¿En qué idioma está escrito este texto?
de: In welcher Sprache ist dieser Text geschrieben?

What language is this?
fr: Quelle est cette langue ?
es: ¿Qué idioma es este?
de: Welche Sprache ist das?

What is the overall sentiment of the text?
fr: Quel est le sentiment général du texte ?
es: ¿Cuál es el sentimiento general del texto?
de: Wie ist die Gesamtstimmung des Textes?

What is this message to a chatbot about?
fr: De quoi parle ce message adressé à un chatbot ?
es: ¿De qué trata este mensaje a un chatbot?
de: Worum geht es in dieser Nachricht an einen Chatbot?

Which category of quotations does this one belong to?
fr: À quelle catégorie de citations celle-ci appartient-elle ?
es: ¿A qué categoría de citas pertenece esta?
de: Zu welcher Kategorie von Zitaten gehört dieses?

Which kind of patient condition is this medical abstract about?
fr: De quel type d'affection ce résumé médical traite-t-il ?
es: ¿Sobre qué tipo de afección trata este resumen médico?
de: Um welche Art von Erkrankung geht es in dieser medizinischen Zusammenfassung?

Which intent does this request to a virtual assistant express? Answer oos if it expresses none of the listed intents.
fr: Quelle intention cette demande adressée à un assistant virtuel exprime-t-elle ? Répondez oos si elle n'exprime aucune des intentions proposées.
es: ¿Qué intención expresa esta petición a un asistente virtual? Responde oos si no expresa ninguna de las intenciones de la lista.
de: Welche Absicht drückt diese Anfrage an einen virtuellen Assistenten aus? Antworte oos, wenn sie keine der aufgeführten Absichten ausdrückt.

What kind of message is this?
fr: De quel type de message s'agit-il ?
es: ¿Qué tipo de mensaje es este?
de: Was für eine Nachricht ist das?

How positive or negative is the sentiment of this sentence from a movie review?
fr: À quel point le sentiment de cette phrase tirée d'une critique de film est-il positif ou négatif ?
es: ¿Qué tan positivo o negativo es el sentimiento de esta frase de una crítica de cine?
de: Wie positiv oder negativ ist die Stimmung dieses Satzes aus einer Filmkritik?

How positive is this text?
fr: À quel point ce texte est-il positif ?
es: ¿Qué tan positivo es este texto?
de: Wie positiv ist dieser Text?

How urgent is this?
fr: À quel point est-ce urgent ?
es: ¿Qué tan urgente es esto?
de: Wie dringend ist das?

How much is this text about {x}?
fr: Dans quelle mesure ce texte parle-t-il de {x} ?
es: ¿En qué medida trata este texto sobre {x}?
de: Wie sehr handelt dieser Text von {x}?

How formal is the writing?
fr: À quel point le style est-il soutenu ?
es: ¿Qué tan formal es la redacción?
de: Wie förmlich ist der Text geschrieben?

How likely is this message to be spam?
fr: Quelle est la probabilité que ce message soit un spam ?
es: ¿Qué probabilidad hay de que este mensaje sea spam?
de: Wie wahrscheinlich ist diese Nachricht Spam?

How harmful is this text?
fr: À quel point ce texte est-il nuisible ?
es: ¿Qué tan dañino es este texto?
de: Wie schädlich ist dieser Text?

Rate the text's sentiment.
fr: Évaluez le sentiment du texte.
es: Califica el sentimiento del texto.
de: Bewerte die Stimmung des Textes.
";

/// The templates of [`TRANSLATIONS`]: each English one with its translations.
fn translations() -> impl Iterator<Item = (&'static str, Vec<&'static str>)> {
    TRANSLATIONS.split("\n\n").filter_map(|block| {
        let mut lines = block.lines().map(str::trim).filter(|l| !l.is_empty());
        let english = lines.next()?;
        let translated = lines
            .filter_map(|line| line.split_once(": ").map(|(_, text)| text))
            .collect();
        Some((english, translated))
    })
}

/// `text` in French, Spanish or German (drawn), where [`TRANSLATIONS`] has its template.
fn translate(text: &str, rng: &mut ChaCha8Rng) -> Option<String> {
    let text = text.trim();
    translations().find_map(|(english, translated)| {
        let x = slot(english, text)?;
        Some(translated.choose(rng)?.replace("{x}", x))
    })
}

/// `text` with two adjacent letters swapped inside about one word in four of four letters or
/// more (at least one word), the words and places drawn with `rng`; `None` when no word has
/// two different inner letters to swap.
fn typos(text: &str, rng: &mut ChaCha8Rng) -> Option<String> {
    let mut chars: Vec<char> = text.chars().collect();
    // Each word's swappable places: i where chars i and i + 1 are letters inside the word (not
    // its first or last letter) and differ.
    let mut words: Vec<Vec<usize>> = Vec::new();
    let mut start = None;
    for i in 0..=chars.len() {
        let letter = chars.get(i).is_some_and(|c| c.is_alphabetic());
        match (letter, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let end = i; // one past the word's last letter
                if end - s >= 4 {
                    let places: Vec<usize> = (s + 1..end - 2)
                        .filter(|&p| chars[p] != chars[p + 1])
                        .collect();
                    if !places.is_empty() {
                        words.push(places);
                    }
                }
                start = None;
            }
            _ => {}
        }
    }
    if words.is_empty() {
        return None;
    }
    let count = (words.len() / 4).max(1);
    for places in words.choose_multiple(rng, count) {
        let place = *places.choose(rng)?;
        chars.swap(place, place + 1);
    }
    Some(chars.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use ruling_schema::{Capabilities, validate};
    use serde_json::json;

    use super::*;
    use crate::taxonomy::{Genre, Kind, StateInfo};

    fn rng(seed: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(seed)
    }

    fn question(value: serde_json::Value) -> Question {
        serde_json::from_value(value).expect("a question")
    }

    /// Questions of every type: the taxonomy's drafts over several kinds of state, and the
    /// labelled sources' templates.
    fn questions() -> Vec<Question> {
        let mut out = vec![
            question(json!({"type": "noul", "instructions": "Is this e-mail spam?"})),
            question(
                json!({"type": "noul", "instructions": "Does this comment express anger?",
                            "criteria": {"true": "angry", "false": "not angry"}}),
            ),
            question(json!({"type": "score", "instructions":
                "How positive or negative is the sentiment of this sentence from a movie review?",
                "criteria": ["very negative", "negative", "neutral", "positive", "very positive"]})),
            question(json!({"type": "choice", "instructions":
                "Which intent does this request to a virtual assistant express? Answer oos if it expresses none of the listed intents.",
                "criteria": {"book_flight": null, "play_music": null, "oos": "out of scope: none of the other intents"}})),
            question(
                json!({"type": "choice", "instructions": {"task": "pick one"},
                            "criteria": {"a": null, "b": "bee"}}),
            ),
        ];
        let states = [
            StateInfo::new(Genre::Email, "Please send the invoice by Friday.", true),
            StateInfo::new(Genre::Request, "what time is it in tokyo?", true),
            StateInfo::new(Genre::Review, "A tender, funny film.", true),
        ];
        let mut r = rng(11);
        for kind in Kind::ALL {
            for state in &states {
                if kind.applies(state) {
                    for _ in 0..12 {
                        out.push(kind.draft(state, "a text about sports and money", &mut r));
                    }
                }
            }
        }
        out
    }

    fn validates(questions: &[(&str, &Question)]) {
        let questions: serde_json::Map<String, serde_json::Value> = questions
            .iter()
            .map(|(id, q)| ((*id).to_owned(), serde_json::to_value(q).unwrap()))
            .collect();
        let request = json!({"model": "m", "state": "text", "questions": questions});
        validate(&request, &Capabilities::default())
            .unwrap_or_else(|e| panic!("{e:?}\n{request:#}"));
    }

    /// A distribution over `keys` that differs per key, summing to one.
    fn spread(keys: &[String]) -> Target {
        let total: f64 = (1..=keys.len()).map(|i| i as f64).sum();
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), (i + 1) as f64 / total))
            .collect()
    }

    fn check(variant: &Variant, original: &Question) {
        let what = format!("{}: {:?}", variant.relation, variant.question);
        validates(&[("original", original), ("variant", &variant.question)]);
        let (variant_keys, original_keys) = (answer_keys(&variant.question), answer_keys(original));
        match &variant.expect {
            Expectation::Groups(groups) => {
                let mut seen_v: Vec<&String> = groups.iter().flat_map(|(v, _)| v).collect();
                let mut seen_o: Vec<&String> = groups.iter().flat_map(|(_, o)| o).collect();
                seen_v.sort();
                seen_o.sort();
                let mut want_v: Vec<&String> = variant_keys.iter().collect();
                let mut want_o: Vec<&String> = original_keys.iter().collect();
                want_v.sort();
                want_o.sort();
                assert_eq!(
                    seen_v, want_v,
                    "groups partition the variant's keys: {what}"
                );
                assert_eq!(
                    seen_o, want_o,
                    "groups partition the original's keys: {what}"
                );
            }
            Expectation::Ratios(kept) => {
                assert!(kept.len() >= 2, "{what}");
                for key in kept {
                    assert!(
                        variant_keys.contains(key) && original_keys.contains(key),
                        "{what}"
                    );
                }
            }
            Expectation::Bounds(_) => {
                assert_eq!(variant.question.type_name(), "noul", "{what}");
            }
        }
        let original_answer = spread(&original_keys);
        if let Some(target) = variant.target(&original_answer) {
            let sum: f64 = target.values().sum();
            assert!((sum - 1.0).abs() < 1e-9, "target sums to {sum}: {what}");
            assert_eq!(
                target.keys().cloned().collect::<Vec<_>>(),
                variant_keys,
                "{what}"
            );
            // The answer the relation implies is coherent by definition.
            let deviation = variant
                .deviation(&target, &[&original_answer])
                .expect(&what);
            assert!(deviation < 1e-9, "{deviation}: {what}");
        } else {
            assert!(matches!(variant.expect, Expectation::Bounds(_)), "{what}");
        }
    }

    #[test]
    fn every_variant_is_a_valid_question_with_a_coherent_target() {
        let mut applied: std::collections::BTreeMap<Relation, usize> = Default::default();
        let questions = questions();
        let mut r = rng(3);
        for original in &questions {
            for relation in Relation::ALL {
                for variant in variants(relation, original, &mut r) {
                    assert_eq!(variant.relation, relation);
                    check(&variant, original);
                    *applied.entry(relation).or_default() += 1;
                }
            }
        }
        let nouls: Vec<&Question> = questions
            .iter()
            .filter(|q| q.type_name() == "noul")
            .collect();
        for pair in nouls.windows(2) {
            for relation in [Relation::Conjunction, Relation::Disjunction] {
                let variant = pair_variant(relation, pair[0], pair[1], &mut r).expect("two nouls");
                validates(&[("a", pair[0]), ("b", pair[1]), ("v", &variant.question)]);
                assert!(variant.target(&spread(&answer_keys(pair[0]))).is_none());
                *applied.entry(relation).or_default() += 1;
            }
        }
        for relation in Relation::ALL {
            assert!(
                applied.get(&relation).copied().unwrap_or(0) > 0,
                "{relation} never applied"
            );
        }
    }

    #[test]
    fn names_round_trip_and_match_serde() {
        for relation in Relation::ALL {
            assert_eq!(relation.as_str().parse::<Relation>(), Ok(relation));
            assert_eq!(
                serde_json::to_value(relation).unwrap(),
                json!(relation.as_str())
            );
        }
        for dimension in Dimension::ALL {
            assert_eq!(
                serde_json::to_value(dimension).unwrap(),
                json!(dimension.as_str())
            );
            assert!(
                Relation::ALL.iter().any(|r| r.dimension() == dimension),
                "{dimension}"
            );
        }
        let err = "negation".parse::<Relation>().unwrap_err().to_string();
        assert!(err.contains("negation-wrapper"), "{err}");
    }

    #[test]
    fn natural_negation_inserts_not_after_the_subject() {
        for (given, negated) in [
            ("Is this about sports?", "Is this not about sports?"),
            (
                "Does the text mention a date?",
                "Does the text not mention a date?",
            ),
            (
                "Is this text written in French?",
                "Is this text not written in French?",
            ),
            (
                "Is the sentiment of this text positive?",
                "Is the sentiment of this text not positive?",
            ),
            (
                "Is there a bug in this code?",
                "Is there no bug in this code?",
            ),
            (
                "According to the text, is it true that a price is given?",
                "According to the text, is it not true that a price is given?",
            ),
            (
                "Does this comment express anger?",
                "Does this comment not express anger?",
            ),
        ] {
            assert_eq!(natural_negation(given).as_deref(), Some(negated), "{given}");
        }
        for left in [
            "Would a moderator remove this text?",
            "Is windows movie maker part of windows essentials?",
            "True or false: the writer is unhappy.",
            "Is this not about sports?",
        ] {
            assert_eq!(natural_negation(left), None, "{left}");
        }
    }

    #[test]
    fn negations_swap_yes_and_no_and_the_criteria() {
        let original = questions()[1].clone();
        let variant = variant(Relation::NegationNatural, &original, &mut rng(1)).unwrap();
        let Question::Noul {
            instructions,
            criteria: Some(criteria),
        } = &variant.question
        else {
            panic!("a noul with criteria");
        };
        assert_eq!(
            instructions.render(),
            "Does this comment not express anger?"
        );
        assert_eq!(criteria.if_true.as_ref().unwrap().render(), "not angry");
        let original_answer: Target = [("yes".to_owned(), 0.8), ("no".to_owned(), 0.2)].into();
        let target = variant.target(&original_answer).unwrap();
        assert!((target["yes"] - 0.2).abs() < 1e-12 && (target["no"] - 0.8).abs() < 1e-12);
        let wrapped = variant_of(Relation::NegationWrapper, &original);
        assert!(wrapped.question != original);
    }

    fn variant_of(relation: Relation, question: &Question) -> Variant {
        variant(relation, question, &mut rng(5)).unwrap_or_else(|| panic!("{relation} applies"))
    }

    #[test]
    fn clones_and_splits_share_mass_and_merges_add_it() {
        let original = question(
            json!({"type": "choice", "instructions": "What is this text about?",
            "criteria": {"sports": null, "money": "prices and banking", "music": null}}),
        );
        let original_answer: Target = [
            ("sports".to_owned(), 0.5),
            ("money".to_owned(), 0.3),
            ("music".to_owned(), 0.2),
        ]
        .into();
        for relation in [Relation::Clone, Relation::Split] {
            let variant = variant_of(relation, &original);
            let target = variant.target(&original_answer).unwrap();
            assert_eq!(target.len(), 4, "{relation}");
            let Expectation::Groups(groups) = &variant.expect else {
                panic!()
            };
            let (pair, single) = groups.iter().find(|(v, _)| v.len() == 2).unwrap();
            let p = original_answer[&single[0]];
            for key in pair {
                assert!(
                    (target[key] - p / 2.0).abs() < 1e-12,
                    "{relation}: {target:?}"
                );
            }
        }
        let merge = variant_of(Relation::Merge, &original);
        let target = merge.target(&original_answer).unwrap();
        assert_eq!(target.len(), 2);
        let merged = target.keys().find(|k| k.contains(" or ")).unwrap();
        let Question::Choice { criteria, .. } = &merge.question else {
            panic!()
        };
        assert!(criteria.contains_key(merged));
        let parts: Vec<&str> = merged.split(" or ").collect();
        let sum: f64 = parts.iter().map(|p| original_answer[*p]).sum();
        assert!((target[merged] - sum).abs() < 1e-12);
    }

    #[test]
    fn thresholds_sweep_every_level_boundary() {
        let original = questions()[2].clone();
        let sweep = variants(Relation::Threshold, &original, &mut rng(0));
        assert_eq!(sweep.len(), 4);
        let answer: Target = (0..5).map(|i| (i.to_string(), 0.2)).collect();
        for (k, variant) in sweep.iter().enumerate() {
            let target = variant.target(&answer).unwrap();
            let expected = 0.2 * (4 - k) as f64;
            assert!(
                (target["yes"] - expected).abs() < 1e-12,
                "k={}: {target:?}",
                k + 1
            );
        }
        let complement = variant_of(Relation::ScoreComplement, &original);
        let text = match &complement.question {
            Question::Noul { instructions, .. } => instructions.render(),
            _ => panic!(),
        };
        assert!(text.contains("lower on this scale than"), "{text}");
    }

    #[test]
    fn ratios_and_bounds_measure_what_they_say() {
        let original = question(json!({"type": "choice", "instructions": "Which?",
            "criteria": {"a": null, "b": null, "c": null}}));
        let added = variant_of(Relation::IrrelevantOption, &original);
        let before: Target = [
            ("a".to_owned(), 0.5),
            ("b".to_owned(), 0.25),
            ("c".to_owned(), 0.25),
        ]
        .into();
        let mut after: Target = before.iter().map(|(k, p)| (k.clone(), p * 0.8)).collect();
        let extra = answer_keys(&added.question).pop().unwrap();
        after.insert(extra, 0.2);
        assert!(added.deviation(&after, &[&before]).unwrap() < 1e-12);
        after["a"] = 0.3;
        after["b"] = 0.3;
        assert!(added.deviation(&after, &[&before]).unwrap() > 0.1);

        let (low, high) = Bound::Conjunction.interval(&[0.7, 0.6]).unwrap();
        assert!((low - 0.3).abs() < 1e-12 && (high - 0.6).abs() < 1e-12);
        let a: Target = [("yes".to_owned(), 0.7), ("no".to_owned(), 0.3)].into();
        let b: Target = [("yes".to_owned(), 0.6), ("no".to_owned(), 0.4)].into();
        let both = pair_variant(
            Relation::Conjunction,
            &questions()[0],
            &questions()[1],
            &mut rng(0),
        )
        .unwrap();
        let answer =
            |p: f64| -> Target { [("yes".to_owned(), p), ("no".to_owned(), 1.0 - p)].into() };
        assert!(both.deviation(&answer(0.5), &[&a, &b]).unwrap().abs() < 1e-12);
        assert!((both.deviation(&answer(0.8), &[&a, &b]).unwrap() - 0.2).abs() < 1e-9);
        assert!((both.deviation(&answer(0.1), &[&a, &b]).unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(both.deviation(&answer(0.5), &[&a]), None, "two originals");
    }

    #[test]
    fn typos_are_seeded_and_change_letters_only() {
        let text = "Which category fits this text best?";
        let once = typos(text, &mut rng(9)).unwrap();
        assert_eq!(once, typos(text, &mut rng(9)).unwrap());
        assert_ne!(once, text);
        let mut a: Vec<char> = once.chars().collect();
        let mut b: Vec<char> = text.chars().collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "letters are swapped, none added or lost");
        assert_eq!(typos("Is it ok?", &mut rng(0)), None);
    }

    #[test]
    fn the_wording_tables_are_well_formed() {
        let has_slot = |t: &str| t.matches("{x}").count();
        let groups: Vec<Vec<&str>> = paraphrase_groups().collect();
        assert!(groups.len() > 30);
        for group in &groups {
            assert!(group.len() >= 2, "{group:?}");
            let slots = has_slot(group[0]);
            assert!(
                slots <= 1 && group.iter().all(|t| has_slot(t) == slots),
                "{group:?}"
            );
        }
        let templates: Vec<(&str, Vec<&str>)> = translations().collect();
        assert!(templates.len() > 40);
        for (english, translated) in &templates {
            assert_eq!(translated.len(), 3, "{english}: French, Spanish and German");
            let slots = has_slot(english);
            assert!(translated.iter().all(|t| has_slot(t) == slots), "{english}");
        }
    }

    #[test]
    fn wordings_are_found_for_the_templates() {
        let mut r = rng(2);
        let translated = translate("Does the text mention a date?", &mut r).unwrap();
        assert!(translated.contains("a date"), "{translated}");
        assert_eq!(translate("Is windows movie maker free?", &mut r), None);
        let reworded = paraphrase("Is this text about sports?", &mut r).unwrap();
        assert!(reworded.contains("sports") && reworded != "Is this text about sports?");
        let framed = paraphrase("Is windows movie maker free?", &mut r).unwrap();
        assert!(framed.contains("Is windows movie maker free?"), "{framed}");
    }

    #[test]
    fn renames_follow_into_the_instructions_and_keys_stay_unique() {
        let original = questions()[3].clone();
        let renamed = variant_of(Relation::Rename, &original);
        let Question::Choice {
            instructions,
            criteria,
        } = &renamed.question
        else {
            panic!()
        };
        assert_eq!(
            criteria.keys().collect::<Vec<_>>(),
            ["book flight", "play music", "Oos"]
        );
        assert!(
            instructions.render().contains("Answer Oos if"),
            "{}",
            instructions.render()
        );
        assert_eq!(replace_words("no note, no", &[("no", "No")]), "No note, No");
        let opaque = variant_of(Relation::OpaqueKeys, &original);
        let Question::Choice { criteria, .. } = &opaque.question else {
            panic!()
        };
        assert_eq!(criteria.keys().collect::<Vec<_>>(), ["A", "B", "C"]);
        assert_eq!(
            criteria["C"].render(),
            "oos: out of scope: none of the other intents"
        );
        assert_eq!(letters(27), "AB");
    }
}
