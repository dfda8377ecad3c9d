//! Scoring a plan: passes grouped by the prefix (and stem) they continue, each group in one
//! backend call; prefixes taken from the cache or encoded once; rotations folded per question,
//! debiased by the content-free prior when it is on; a wide Choice's final stage.

use std::collections::HashMap;
use std::sync::Arc;

use ruling_calibration::log_softmax;
use ruling_schema::{QuestionKind, QuestionTrace, RotationTrace, StageOneScore, ValidQuestion};

use super::plan::{Base, Framed, Pass, Plan, check_branch};
use super::{DecoderEngine, EngineError};
use crate::Cancel;
use crate::backend::{Backend, Branch, BranchLogits};
use crate::error::BackendError;
use crate::prompt::{split_prompt, user_head};
use crate::render::{CONTENT_FREE, ShownOption, render};

/// The prefixes one evaluation scores against: the state's, encoded before scoring when a
/// pass needs it, and each question-first head, from the prefix cache or encoded on first use.
pub(super) struct Bases<'a, P> {
    pub(super) state: Option<Arc<P>>,
    pub(super) heads: &'a [Vec<u32>],
    pub(super) encoded: HashMap<usize, Arc<P>>,
    /// Tokens of the heads used, whether encoded or found in the cache.
    pub(super) head_tokens: usize,
}

/// Per-key mean of debiased log-probabilities over a question's rotations, with what the
/// trace reports.
#[derive(Debug, Default)]
pub(super) struct Combined {
    pub(super) keys: Vec<String>,
    pub(super) scores: Vec<f64>,
    pub(super) candidate_mass: Vec<f64>,
    pub(super) rotations: Vec<RotationTrace>,
    pub(super) branch_tokens: Vec<usize>,
    /// Per rotation asked question-first, the tokens of its head.
    pub(super) head_tokens: Vec<usize>,
}

impl Combined {
    /// What the trace reports of this question.
    pub(super) fn trace(
        &self,
        temperature: f64,
        stage_one: Option<Vec<StageOneScore>>,
    ) -> QuestionTrace {
        QuestionTrace {
            rotations: self.rotations.clone(),
            temperature,
            candidate_mass: self.candidate_mass.clone(),
            branch_tokens: self.branch_tokens.clone(),
            question_prefix_tokens: self.head_tokens.clone(),
            stage_one,
        }
    }
}

/// Stems encoded as prefix extensions during one scoring, and the tokens that took.
pub(super) struct Stems<P> {
    pub(super) encoded: HashMap<usize, P>,
    pub(super) tokens: usize,
    /// The backend said it cannot extend a prefix; stems go inside whole branches.
    pub(super) unsupported: bool,
}

impl<P> Default for Stems<P> {
    fn default() -> Self {
        Self {
            encoded: HashMap::new(),
            tokens: 0,
            unsupported: false,
        }
    }
}

pub(super) fn log_probs(logits: &[f32]) -> Result<Vec<f64>, EngineError> {
    let wide: Vec<f64> = logits.iter().map(|&l| f64::from(l)).collect();
    Ok(log_softmax(&wide)?)
}

impl<B: Backend> DecoderEngine<B> {
    /// The content-free log-prior of each code position for `count` options, computed once.
    pub(super) fn priors(
        &self,
        counts: &[usize],
    ) -> Result<HashMap<usize, Arc<Vec<f64>>>, EngineError> {
        let mut known = self
            .priors
            .lock()
            .map_err(|_| EngineError::Poisoned)?
            .clone();
        let missing: Vec<usize> = counts
            .iter()
            .copied()
            .filter(|c| !known.contains_key(c))
            .collect();
        if !missing.is_empty() {
            let split = split_prompt(
                &self.backend,
                &self.options.system_prompt,
                &user_head(CONTENT_FREE),
            )?;
            let prefix = self
                .backend
                .encode_prefix(&self.backend.encode(&split.prefix)?)?;
            let mut tokens = Vec::with_capacity(missing.len());
            for &count in &missing {
                let options: Vec<ShownOption> = (0..count)
                    .map(|i| ShownOption {
                        key: i.to_string(),
                        line: CONTENT_FREE.to_owned(),
                    })
                    .collect();
                tokens.push(self.encode_branch(
                    &render(CONTENT_FREE, "", &options, self.codes.labels(), 0, false),
                    &split.tail,
                )?);
            }
            let branches: Vec<Branch<'_>> = tokens
                .iter()
                .zip(&missing)
                .map(|(t, &count)| Branch {
                    tokens: t,
                    codes: &self.codes.ids()[..count],
                })
                .collect();
            let scored = self.backend.score_branches(&prefix, &branches)?;
            let mut shared = self.priors.lock().map_err(|_| EngineError::Poisoned)?;
            for (&count, logits) in missing.iter().zip(scored) {
                let prior = Arc::new(log_probs(&logits.logits)?);
                shared.entry(count).or_insert_with(|| prior.clone());
                known.insert(count, prior);
            }
        }
        Ok(known)
    }

    /// Score passes against the prefix and fold them per question; returns the tokens put
    /// through the model (branches, and each stem once). With adaptive rotations, passes go
    /// in rounds by rotation and a decided question's remaining rotations are never scored.
    pub(super) fn score(
        &self,
        bases: &mut Bases<'_, B::Prefix>,
        passes: &[Pass],
        stems: &[Vec<u32>],
        questions: usize,
        cancel: &Cancel,
    ) -> Result<(Vec<Combined>, usize), EngineError> {
        let mut extended = Stems::default();
        let Some(stop) = self.options.adaptive else {
            let all: Vec<usize> = (0..passes.len()).collect();
            let scored = self.score_passes(bases, passes, stems, &all, &mut extended, cancel)?;
            let used = passes.iter().map(|p| p.tokens.len()).sum::<usize>() + extended.tokens;
            return Ok((
                self.fold(passes, bases.heads, &all, &scored, questions)?,
                used,
            ));
        };
        // The rotation index of each pass within its question, in planning order.
        let mut seen = vec![0usize; questions];
        let round_of: Vec<usize> = passes
            .iter()
            .map(|p| {
                let r = seen[p.question];
                seen[p.question] += 1;
                r
            })
            .collect();
        let rounds = seen.iter().copied().max().unwrap_or(0);
        let mut done = vec![false; questions];
        let mut read: Vec<usize> = Vec::with_capacity(passes.len());
        let mut scored = Vec::with_capacity(passes.len());
        for round in 0..rounds {
            let batch: Vec<usize> = (0..passes.len())
                .filter(|&i| round_of[i] == round && !done[passes[i].question])
                .collect();
            if batch.is_empty() {
                break;
            }
            scored.extend(self.score_passes(
                bases,
                passes,
                stems,
                &batch,
                &mut extended,
                cancel,
            )?);
            read.extend(batch);
            if round + 1 < rounds {
                let partial = self.fold(passes, bases.heads, &read, &scored, questions)?;
                for (slot, combined) in partial.iter().enumerate() {
                    done[slot] = done[slot] || stop.decided(combined) || seen[slot] <= round + 1;
                }
                // A finished question's stem is not needed again.
                for pass in passes.iter().filter(|p| done[p.question]) {
                    if let Some(stem) = pass.stem {
                        extended.encoded.remove(&stem);
                    }
                }
            }
        }
        // Folded in planning order, exactly as without adaptive stopping.
        let mut order: Vec<usize> = (0..read.len()).collect();
        order.sort_by_key(|&i| read[i]);
        let read_sorted: Vec<usize> = order.iter().map(|&i| read[i]).collect();
        let scored_sorted: Vec<BranchLogits> = order.iter().map(|&i| scored[i].clone()).collect();
        let used = read.iter().map(|&i| passes[i].tokens.len()).sum::<usize>() + extended.tokens;
        Ok((
            self.fold(passes, bases.heads, &read_sorted, &scored_sorted, questions)?,
            used,
        ))
    }

    /// The backend's logits for the passes named by `which`, in that order: passes without a
    /// stem against the prefix in one call, each stem's passes in one call against the prefix
    /// extended by that stem (encoded on first use; kept for later rounds when rotations are
    /// adaptive, since those come in rounds).
    pub(super) fn score_passes(
        &self,
        bases: &mut Bases<'_, B::Prefix>,
        passes: &[Pass],
        stems: &[Vec<u32>],
        which: &[usize],
        extended: &mut Stems<B::Prefix>,
        cancel: &Cancel,
    ) -> Result<Vec<BranchLogits>, EngineError> {
        // Passes over one prefix (and stem) are scored in one call.
        type Group = ((Base, Option<usize>), Vec<usize>);
        let mut groups: Vec<Group> = Vec::new();
        for &index in which {
            let key = (passes[index].base, passes[index].stem);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(index),
                None => groups.push((key, vec![index])),
            }
        }
        let mut out: Vec<Option<BranchLogits>> = vec![None; passes.len()];
        for ((base, stem), members) in groups {
            let prefix = self.base_prefix(bases, base, cancel)?;
            let scored = match stem {
                None => {
                    let branches: Vec<Branch<'_>> = members
                        .iter()
                        .map(|&i| self.branch(&passes[i], &passes[i].tokens))
                        .collect();
                    self.backend
                        .score_branches_until(&prefix, &branches, cancel)?
                }
                Some(s) => self.score_stemmed(
                    &prefix,
                    &stems[s],
                    s,
                    members.iter().map(|&i| &passes[i]).collect(),
                    extended,
                    cancel,
                )?,
            };
            for (&index, logits) in members.iter().zip(scored) {
                out[index] = Some(logits);
            }
        }
        which
            .iter()
            .map(|&i| {
                out[i].take().ok_or_else(|| {
                    EngineError::Backend(BackendError::Forward {
                        source: "a branch was left unscored".into(),
                    })
                })
            })
            .collect()
    }

    /// `pass`'s branch over `tokens`, read at the codes of its options.
    fn branch<'a>(&'a self, pass: &Pass, tokens: &'a [u32]) -> Branch<'a> {
        Branch {
            tokens,
            codes: &self.codes.ids()[..pass.keys.len()],
        }
    }

    /// Passes that share the stem numbered `index` (`stem`, its tokens), scored against
    /// `prefix` extended by it: the extension is encoded on first use and kept for later rounds
    /// when rotations are adaptive; a backend that cannot extend a prefix scores whole branches
    /// with the stem in each.
    fn score_stemmed(
        &self,
        prefix: &B::Prefix,
        stem: &[u32],
        index: usize,
        members: Vec<&Pass>,
        extended: &mut Stems<B::Prefix>,
        cancel: &Cancel,
    ) -> Result<Vec<BranchLogits>, EngineError> {
        if !extended.encoded.contains_key(&index) && !extended.unsupported {
            cancel.check()?;
            match self.backend.extend_prefix(prefix, stem)? {
                Some(encoded) => {
                    extended.tokens += stem.len();
                    extended.encoded.insert(index, encoded);
                }
                None => extended.unsupported = true,
            }
        }
        if let Some(stemmed) = extended.encoded.get(&index) {
            let branches: Vec<Branch<'_>> = members
                .iter()
                .map(|pass| self.branch(pass, &pass.tokens))
                .collect();
            let scored = self
                .backend
                .score_branches_until(stemmed, &branches, cancel)?;
            if self.options.adaptive.is_none() {
                extended.encoded.remove(&index);
            }
            return Ok(scored);
        }
        let whole: Vec<Vec<u32>> = members
            .iter()
            .map(|pass| [stem, pass.tokens.as_slice()].concat())
            .collect();
        extended.tokens += stem.len() * members.len();
        let branches: Vec<Branch<'_>> = members
            .iter()
            .zip(&whole)
            .map(|(pass, tokens)| self.branch(pass, tokens))
            .collect();
        Ok(self
            .backend
            .score_branches_until(prefix, &branches, cancel)?)
    }

    /// The encoded prefix `base` names: the state's, or a question-first head from the prefix
    /// cache (encoded and kept on a miss).
    pub(super) fn base_prefix(
        &self,
        bases: &mut Bases<'_, B::Prefix>,
        base: Base,
        cancel: &Cancel,
    ) -> Result<Arc<B::Prefix>, EngineError> {
        match base {
            Base::State => bases.state.clone().ok_or_else(|| {
                EngineError::Backend(BackendError::Forward {
                    source: "a state-first pass was planned without the state's prefix".into(),
                })
            }),
            Base::Head(head) => {
                if let Some(found) = bases.encoded.get(&head) {
                    return Ok(Arc::clone(found));
                }
                cancel.check()?;
                let tokens = &bases.heads[head];
                let (prefix, _cached) = self.prefixes.get_or_encode(
                    tokens,
                    || self.backend.encode_prefix(tokens),
                    |p| self.backend.prefix_bytes(p),
                )?;
                bases.head_tokens += tokens.len();
                bases.encoded.insert(head, Arc::clone(&prefix));
                Ok(prefix)
            }
        }
    }

    /// Debias each scored pass and average its question's rotations per key.
    pub(super) fn fold(
        &self,
        passes: &[Pass],
        heads: &[Vec<u32>],
        which: &[usize],
        scored: &[BranchLogits],
        questions: usize,
    ) -> Result<Vec<Combined>, EngineError> {
        let counts: Vec<usize> = which.iter().map(|&i| passes[i].keys.len()).collect();
        let priors = if self.options.prior {
            Some(self.priors(&counts)?)
        } else {
            None
        };
        let mut combined: Vec<Combined> = (0..questions).map(|_| Combined::default()).collect();
        for (&index, logits) in which.iter().zip(scored) {
            let pass = &passes[index];
            let mut lp = log_probs(&logits.logits)?;
            let prior = priors.as_ref().and_then(|p| p.get(&pass.keys.len()));
            if let Some(prior) = prior {
                lp.iter_mut().zip(prior.iter()).for_each(|(v, p)| *v -= p);
            }
            let slot = &mut combined[pass.question];
            if slot.keys.is_empty() {
                // Passes are planned unrotated first, so the first one seen is canonical.
                slot.keys = pass.keys.clone();
                slot.scores = vec![0.0; slot.keys.len()];
            }
            for (key, value) in pass.keys.iter().zip(&lp) {
                if let Some(i) = slot.keys.iter().position(|k| k == key) {
                    slot.scores[i] += value;
                }
            }
            slot.candidate_mass.push(logits.candidate_mass());
            slot.branch_tokens.push(pass.tokens.len());
            if let Base::Head(head) = pass.base {
                slot.head_tokens.push(heads[head].len());
            }
            slot.rotations.push(RotationTrace {
                order: pass.keys.clone(),
                log_probabilities: lp,
                prior: prior.map(|p| p.as_slice().to_vec()),
                unread: logits
                    .unread
                    .iter()
                    .filter_map(|&i| pass.keys.get(i).cloned())
                    .collect(),
            });
        }
        for slot in &mut combined {
            let n = slot.rotations.len().max(1) as f64;
            slot.scores.iter_mut().for_each(|s| *s /= n);
        }
        Ok(combined)
    }

    /// Stage two: the strongest options of each wide Choice asked as one Choice, its result
    /// put in the Choice's slot with every other option ruled out. Returns the stage-one
    /// strengths for the trace and the tokens the final passes read.
    pub(super) fn stage_two(
        &self,
        questions: &[ValidQuestion],
        plan: &Plan,
        framed: &Framed,
        combined: &mut [Combined],
        bases: &mut Bases<'_, B::Prefix>,
        cancel: &Cancel,
    ) -> Result<(HashMap<usize, Vec<StageOneScore>>, usize), EngineError> {
        let mut stage_one: HashMap<usize, Vec<StageOneScore>> = HashMap::new();
        if plan.wide.is_empty() {
            return Ok((stage_one, 0));
        }
        let mut passes = Vec::new();
        for wide in &plan.wide {
            let mut strength: Vec<(usize, f64)> = (0..wide.options.len())
                .map(|offset| {
                    let c = &combined[wide.first_slot + offset];
                    let score_of =
                        |key: &str| c.keys.iter().position(|k| k == key).map(|i| c.scores[i]);
                    let yes = score_of("yes").unwrap_or(f64::NEG_INFINITY);
                    let no = score_of("no").unwrap_or(0.0);
                    (offset, yes - no)
                })
                .collect();
            strength.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut keep: Vec<usize> = strength
                .iter()
                .take(self.options.stage_two_candidates)
                .map(|(o, _)| *o)
                .collect();
            keep.sort_unstable();
            stage_one.insert(
                wide.question,
                strength
                    .iter()
                    .map(|&(o, log_odds_yes)| StageOneScore {
                        key: wide.options[o].key.clone(),
                        log_odds_yes,
                    })
                    .collect(),
            );
            let kept: Vec<ShownOption> = keep.iter().map(|&o| wide.options[o].clone()).collect();
            let QuestionKind::Choice { instructions, .. } = questions[wide.question].kind() else {
                continue;
            };
            for rendered in self.choice_rotations(&instructions.render(), &kept) {
                let tokens = self.encode_branch(&rendered, &framed.split.tail)?;
                check_branch(
                    &questions[wide.question],
                    framed.prefix_len + tokens.len(),
                    framed.limit,
                )?;
                passes.push(Pass {
                    question: wide.question,
                    keys: rendered.keys.clone(),
                    tokens,
                    stem: None,
                    base: Base::State,
                });
            }
        }
        let (mut second, used) = self.score(bases, &passes, &[], questions.len(), cancel)?;
        for wide in &plan.wide {
            let mut result = std::mem::take(&mut second[wide.question]);
            // Options that did not reach the final pass get probability zero.
            let mut scores = vec![f64::NEG_INFINITY; wide.options.len()];
            for (key, score) in result.keys.iter().zip(&result.scores) {
                if let Some(i) = wide.options.iter().position(|o| &o.key == key) {
                    scores[i] = *score;
                }
            }
            result.keys = wide.options.iter().map(|o| o.key.clone()).collect();
            result.scores = scores;
            combined[wide.question] = result;
        }
        Ok((stage_one, used))
    }
}
