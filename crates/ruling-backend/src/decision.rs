//! The decoder decision logic, written once over the [`Backend`] port.
//!
//! A request becomes one shared prefix (system turn and state) and one branch per question
//! and rotation. Every branch is scored against the prefix in one call; each branch's code
//! logits become log-probabilities over its shown options, the content-free prior for that
//! option count is subtracted, and rotations are averaged in log space per option key. A
//! per-type temperature turns the result into the answer's probabilities.
//!
//! A Choice of up to 255 options is one pass per rotation when the tokenizer proves enough
//! codes (two-letter codes after `Z`, see `codes.rs`). One wider than the codes, or one whose
//! single pass would not fit the context, goes through two stages: every option is first
//! asked about alone as a yes/no question, and the strongest few are then asked as one
//! Choice; the others get probability zero.
//!
//! Everything about a request is checked before the first forward pass: a branch longer than
//! the context or a request over its token budget is refused with "maximum context length"
//! and the question at fault.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use ruling_calibration::{AnswerType, Calibration, Provenance, log_softmax};
use ruling_schema::{
    ChoiceOption, EngineKind, EvaluationTrace, QuestionKind, QuestionTrace, RotationTrace,
    StageOneScore, SystemOneResponse, Usage, ValidQuestion, ValidRequest, ValidState,
};

use crate::Cancel;
use crate::answer::answer;
use crate::backend::{Backend, Branch, BranchLogits};
use crate::codes::{AnswerCodes, DEFAULT_CODES, MAX_CODES, two_letter_codes};
use crate::contract::verify_backend_widened;
use crate::engine::{Engine, EngineError, EngineInfo};
use crate::error::BackendError;
use crate::prefix_cache::{PrefixCache, PrefixCacheStats};
use crate::prompt::{PromptSplit, split_prompt, user_head};
use crate::render::{
    CONTENT_FREE, RenderedQuestion, SYSTEM_PROMPT, ShownOption, choice_options, noul_options,
    noul_preamble, render, score_options,
};

/// The default prefix cache budget: a few dozen long states on the small models.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;

/// How the engine asks and debiases.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Orderings averaged per question: a Choice uses up to this many cyclic rotations, a
    /// Score and a Noul use both directions when this is 2 or more. 1 asks once, as given.
    pub rotations: u32,
    /// Subtract the content-free prior of each option count. Off by default: measured on
    /// development rows, the prior taken from an "N/A" state over-corrects the small models
    /// (SmolLM2 SNLI accuracy 0.367 raw, 0.100 with it; Qwen 1.5B flips obvious yes/no
    /// answers), so it stays an option until a better-founded prior lands.
    pub prior: bool,
    /// The answer code labels, proven single tokens at load.
    pub codes: Vec<String>,
    /// Candidate codes for options past `codes`, each kept only if proven one token at load
    /// (default: the two-letter codes `AA`..`ZZ`).
    pub wide_codes: Vec<String>,
    /// Most options one pass shows (at most the number of codes proven).
    pub max_options_per_pass: usize,
    /// How many options a two-stage Choice keeps for its final pass.
    pub stage_two_candidates: usize,
    /// Longest prefix plus branch, in tokens (default: the backend's context length).
    pub max_branch_tokens: Option<usize>,
    /// Most tokens one request may put through the model.
    pub max_request_tokens: usize,
    /// The name responses carry (default: the backend's model id).
    pub served_name: Option<String>,
    pub system_prompt: String,
    /// Bytes of encoded prefixes kept across requests, so questions about a state seen
    /// recently skip its prefill (0 turns the cache off).
    pub prefix_cache_bytes: usize,
    /// Stop a question's rotations early once it is decided (off by default: every rotation
    /// asked for is read).
    pub adaptive: Option<AdaptiveRotations>,
    /// Encode a question's stem (its instructions and preamble, the same in every rotation)
    /// once as an extension of the prefix, and send each rotation's options and tail as the
    /// branch. Used for questions with two or more rotations when the backend can extend a
    /// prefix and the stem tokenizes the same apart as inside the branch.
    pub shared_stems: bool,
    /// Where a question's text goes relative to the state (see [`Layout`]).
    pub layout: Layout,
}

/// Where a question's text goes relative to the state.
///
/// State-first, the usual layout, encodes the state once as the prefix and each question
/// (stem, options, closing line) as a branch over it. Question-first encodes the question's
/// stem and options as the prefix and the state with the closing line as the branch: a long
/// question asked about many short states (77 intents, each request a one-line utterance)
/// then has its head encoded once, kept in the prefix cache across requests, and each request
/// reads only its state. For a single request both cost about the same; each extra question
/// asked question-first costs the state once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Question-first for a question whose stem and options are at least
    /// [`QUESTION_FIRST_MIN_BYTES`] long and [`QUESTION_FIRST_RATIO`] times as long as the
    /// state (in bytes), state-first for the rest. Depends only on the request, so a
    /// question's answer never depends on what the cache holds.
    #[default]
    Auto,
    /// Every question state-first.
    StateFirst,
    /// Every question question-first (a two-stage choice's stages stay state-first).
    QuestionFirst,
}

/// How much longer than the state a question must be for [`Layout::Auto`] to ask it
/// question-first: the state it repeats per rotation then costs at most a quarter of what
/// reusing its head saves.
pub const QUESTION_FIRST_RATIO: usize = 4;

/// The shortest question [`Layout::Auto`] asks question-first: below it the head saved is a
/// few dozen tokens, less than the state repeated in each rotation's branch may cost.
pub const QUESTION_FIRST_MIN_BYTES: usize = 512;

/// When a question's remaining rotations are skipped. Rotations are read in a fixed order,
/// one round at a time (round `r` holds the `r`-th rotation of every question still open);
/// after each round a question stops once at least `min_rotations` have been read, every one
/// of them put the same option first, and the running mean of their log-probabilities puts
/// that option ahead of the runner-up by at least `margin` nats. It depends only on the
/// question's own rotations, so the same request always stops at the same rotation, whatever
/// else it asks; the trace lists the rotations read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveRotations {
    pub margin: f64,
    pub min_rotations: usize,
}

impl AdaptiveRotations {
    /// Stop at `margin` nats after at least two rotations (so a noul or a score is always
    /// read both ways): what the binaries' `--adaptive-margin` means. The margin must be a
    /// finite number of nats, 0 or more.
    pub fn after_two(margin: f64) -> Result<Self, String> {
        if !margin.is_finite() || margin < 0.0 {
            return Err(format!(
                "an adaptive margin must be a finite number of nats, 0 or more; got {margin}"
            ));
        }
        Ok(Self {
            margin,
            min_rotations: 2,
        })
    }

    /// Whether the rotations read so far settle the question.
    fn decided(&self, combined: &Combined) -> bool {
        if combined.rotations.len() < self.min_rotations.max(1) || combined.scores.len() < 2 {
            return false;
        }
        let top = argmax(&combined.scores);
        let runner_up = combined
            .scores
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != top)
            .map(|(_, &s)| s)
            .fold(f64::NEG_INFINITY, f64::max);
        if combined.scores[top] - runner_up < self.margin {
            return false;
        }
        let leader = &combined.keys[top];
        combined
            .rotations
            .iter()
            .all(|r| r.order.get(argmax(&r.log_probabilities)) == Some(leader))
    }
}

/// The index of the largest value (the first on a tie).
fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            rotations: 1,
            prior: false,
            codes: DEFAULT_CODES.iter().map(|c| (*c).to_owned()).collect(),
            wide_codes: two_letter_codes(),
            max_options_per_pass: MAX_CODES,
            stage_two_candidates: 8,
            max_branch_tokens: None,
            max_request_tokens: 65_536,
            served_name: None,
            system_prompt: SYSTEM_PROMPT.to_owned(),
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
            adaptive: None,
            shared_stems: true,
            layout: Layout::Auto,
        }
    }
}

/// A question as the model reads it, for training: see [`DecoderEngine::question_prompt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionPrompt {
    /// The prefix (system turn and state) and the question's branch, as one sequence.
    pub tokens: Vec<u32>,
    /// How many of `tokens` are the prefix.
    pub prefix_len: usize,
    /// The answer codes' token ids, read after the last token: code `i` means `keys[i]`.
    pub codes: Vec<u32>,
    pub keys: Vec<String>,
}

/// A question's parts as the engine shows them: instructions, preamble, options in canonical
/// order, and whether its rotations are shifts (a Choice) or directions (a Noul or Score).
struct Shown {
    instructions: String,
    preamble: String,
    options: Vec<ShownOption>,
    choice: bool,
}

impl Shown {
    fn of(kind: &QuestionKind) -> Option<Self> {
        Some(match kind {
            QuestionKind::Noul {
                instructions,
                if_true,
                if_false,
            } => Self {
                instructions: instructions.render(),
                preamble: noul_preamble(if_true.as_ref(), if_false.as_ref()),
                options: noul_options(),
                choice: false,
            },
            QuestionKind::Score {
                instructions,
                levels,
            } => Self {
                instructions: instructions.render(),
                preamble: "Choose the level that fits best.".to_owned(),
                options: score_options(levels),
                choice: false,
            },
            QuestionKind::Choice {
                instructions,
                options,
            } => Self {
                instructions: instructions.render(),
                preamble: String::new(),
                options: choice_options(options),
                choice: true,
            },
            QuestionKind::Box { .. } => return None,
        })
    }

    fn render(&self, labels: &[String], reverse: bool) -> RenderedQuestion {
        render(
            &self.instructions,
            &self.preamble,
            &self.options,
            labels,
            0,
            reverse,
        )
    }
}

/// Answers System One requests with a decoder behind the [`Backend`] port.
#[derive(Debug)]
pub struct DecoderEngine<B: Backend> {
    backend: B,
    options: EngineOptions,
    codes: AnswerCodes,
    calibration: Calibration,
    info: EngineInfo,
    priors: Mutex<HashMap<usize, Arc<Vec<f64>>>>,
    prefixes: PrefixCache<B::Prefix>,
    /// Whether questions may be asked question-first: the backend's tokenizer splits that
    /// layout cleanly (proven by `verify_backend`).
    question_first: bool,
}

/// One branch to score: which question it answers, the keys its codes stand for.
#[derive(Debug)]
struct Pass {
    question: usize,
    keys: Vec<String>,
    /// The branch: after the stem when there is one, else after the prefix.
    tokens: Vec<u32>,
    /// The index of the question's stem in the plan's stems, when it has one.
    stem: Option<usize>,
    /// The prefix the branch continues.
    base: Base,
}

/// The prefix a pass is scored against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    /// The request's state: the usual layout.
    State,
    /// Its question's own head, asked question-first: an index into the plan's heads.
    Head(usize),
}

/// The prefixes one evaluation scores against: the state's, encoded before scoring when a
/// pass needs it, and each question-first head, from the prefix cache or encoded on first use.
struct Bases<'a, P> {
    state: Option<Arc<P>>,
    heads: &'a [Vec<u32>],
    encoded: HashMap<usize, Arc<P>>,
    /// Tokens of the heads used, whether encoded or found in the cache.
    head_tokens: usize,
}

/// Per-key mean of debiased log-probabilities over a question's rotations, with what the
/// trace reports.
#[derive(Debug, Default)]
struct Combined {
    keys: Vec<String>,
    scores: Vec<f64>,
    candidate_mass: Vec<f64>,
    rotations: Vec<RotationTrace>,
    branch_tokens: Vec<usize>,
    /// Per rotation asked question-first, the tokens of its head.
    head_tokens: Vec<usize>,
}

impl Combined {
    /// What the trace reports of this question.
    fn trace(&self, temperature: f64, stage_one: Option<Vec<StageOneScore>>) -> QuestionTrace {
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

impl<B: Backend> DecoderEngine<B> {
    /// Prove the backend's contract, choose the codes, and bind a calibration (identity when
    /// none is given). A calibration fitted for another provenance is refused.
    pub fn new(
        backend: B,
        options: EngineOptions,
        calibration: Option<Calibration>,
    ) -> Result<Self, EngineError> {
        let labels: Vec<&str> = options.codes.iter().map(String::as_str).collect();
        let report = verify_backend_widened(
            &backend,
            &labels,
            &options.wide_codes,
            options.max_options_per_pass.max(labels.len()),
        )?;
        let provenance = provenance(&backend, &options);
        let calibration = match calibration {
            Some(calibration) => {
                calibration.check(&provenance)?;
                calibration
            }
            None => Calibration::identity(provenance),
        };
        let per_pass = options
            .max_options_per_pass
            .min(report.codes.max_options())
            .max(2);
        let max_context = options
            .max_branch_tokens
            .unwrap_or(backend.info().context_length)
            .min(backend.info().context_length);
        let info = EngineInfo {
            model: options
                .served_name
                .clone()
                .unwrap_or_else(|| backend.info().model_id.clone()),
            capabilities: ruling_schema::Capabilities {
                vision: backend.info().vision,
                ..Default::default()
            },
            max_context,
        };
        let prefixes = PrefixCache::new(options.prefix_cache_bytes);
        let options = EngineOptions {
            max_options_per_pass: per_pass,
            stage_two_candidates: options.stage_two_candidates.clamp(2, per_pass),
            ..options
        };
        Ok(Self {
            backend,
            options,
            codes: report.codes,
            calibration,
            info,
            priors: Mutex::new(HashMap::new()),
            prefixes,
            question_first: report.question_first.is_ok(),
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// Every rotation of one question, rendered.
    fn rotations(&self, kind: &QuestionKind) -> Vec<RenderedQuestion> {
        let labels = self.codes.labels();
        let Some(shown) = Shown::of(kind) else {
            return Vec::new();
        };
        if shown.choice {
            return self.choice_rotations(&shown.instructions, &shown.options);
        }
        let mut out = vec![shown.render(labels, false)];
        if self.options.rotations >= 2 {
            out.push(shown.render(labels, true));
        }
        out
    }

    /// The most options one pass shows (a wider Choice goes through two stages).
    pub fn max_options_per_pass(&self) -> usize {
        self.options.max_options_per_pass
    }

    /// One question put to the model exactly as [`Engine::evaluate`] puts it (system turn,
    /// state, seam, question, codes, tail), with its options shown in `order`: the prompt a
    /// trainer teaches the readout on. `order` lists canonical option indices; a Noul or Score
    /// is shown only lowest-first or reversed, as the engine's rotations show it.
    pub fn question_prompt(
        &self,
        state: &ValidState,
        kind: &QuestionKind,
        order: &[usize],
    ) -> Result<QuestionPrompt, EngineError> {
        let shown = Shown::of(kind).ok_or_else(|| {
            EngineError::Unsupported("box questions need a vision model".to_owned())
        })?;
        let n = shown.options.len();
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        if sorted != (0..n).collect::<Vec<_>>() {
            return Err(EngineError::Unsupported(format!(
                "the order {order:?} is not a permutation of the question's {n} options"
            )));
        }
        if n > self.options.max_options_per_pass {
            return Err(EngineError::Unsupported(format!(
                "{n} options is more than one pass shows ({}); a wider choice is asked in two \
                 stages",
                self.options.max_options_per_pass
            )));
        }
        let labels = self.codes.labels();
        let rendered = if shown.choice {
            let options: Vec<ShownOption> =
                order.iter().map(|&i| shown.options[i].clone()).collect();
            render(&shown.instructions, "", &options, labels, 0, false)
        } else {
            let reversed = n > 1 && order.iter().copied().eq((0..n).rev());
            if order.iter().copied().ne(0..n) && !reversed {
                return Err(EngineError::Unsupported(
                    "a noul or score is shown lowest-first or reversed, not shuffled".to_owned(),
                ));
            }
            shown.render(labels, reversed)
        };
        let split = split_prompt(
            &self.backend,
            &self.options.system_prompt,
            &user_head(&state.render()),
        )?;
        let mut tokens = self.backend.encode(&split.prefix)?;
        let prefix_len = tokens.len();
        tokens.extend(self.encode_branch(&rendered, &split.tail)?);
        Ok(QuestionPrompt {
            tokens,
            prefix_len,
            codes: self.codes.ids()[..n].to_vec(),
            keys: rendered.keys,
        })
    }

    fn choice_rotations(&self, instructions: &str, shown: &[ShownOption]) -> Vec<RenderedQuestion> {
        let count = (self.options.rotations.max(1) as usize).min(shown.len());
        (0..count)
            .map(|shift| render(instructions, "", shown, self.codes.labels(), shift, false))
            .collect()
    }

    /// Whether a Choice goes through two stages: it has more options than one pass shows, or
    /// its widest rotation would not fit the context while the final stage shows fewer
    /// options than it has.
    fn needs_two_stages(
        &self,
        instructions: &str,
        options: &[ChoiceOption],
        framed: &Framed,
    ) -> Result<bool, EngineError> {
        let n = options.len();
        if n > self.options.max_options_per_pass {
            return Ok(true);
        }
        if n <= self.options.stage_two_candidates {
            return Ok(false);
        }
        for rendered in self.choice_rotations(instructions, &choice_options(options)) {
            let branch = self.encode_branch(&rendered, &framed.split.tail)?;
            if framed.prefix_tokens.len() + branch.len() > framed.limit {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a question, rendered in `rotations`, is asked question-first about `state`
    /// (see [`Layout`]).
    fn asks_question_first(&self, rotations: &[RenderedQuestion], state: &str) -> bool {
        if !self.question_first {
            return false;
        }
        match self.options.layout {
            Layout::StateFirst => false,
            Layout::QuestionFirst => true,
            Layout::Auto => rotations.first().is_some_and(|r| {
                r.options_len
                    >= QUESTION_FIRST_MIN_BYTES.max(QUESTION_FIRST_RATIO * state.trim().len())
            }),
        }
    }

    /// Stage one of a wide Choice: each option on its own as a yes/no question.
    fn stage_one(&self, instructions: &str, option: &ShownOption) -> Vec<RenderedQuestion> {
        let question = format!(
            "{}\nCandidate answer: {}\nIs this candidate the right answer?",
            instructions.trim(),
            option.line
        );
        let mut out = vec![render(
            &question,
            "",
            &noul_options(),
            self.codes.labels(),
            0,
            false,
        )];
        if self.options.rotations >= 2 {
            out.push(render(
                &question,
                "",
                &noul_options(),
                self.codes.labels(),
                0,
                true,
            ));
        }
        out
    }

    fn encode_branch(
        &self,
        rendered: &RenderedQuestion,
        tail: &str,
    ) -> Result<Vec<u32>, EngineError> {
        Ok(self.backend.encode(&format!("{}{tail}", rendered.text))?)
    }

    /// The content-free log-prior of each code position for `count` options, computed once.
    fn priors(&self, counts: &[usize]) -> Result<HashMap<usize, Arc<Vec<f64>>>, EngineError> {
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
    fn score(
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
    fn score_passes(
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
            let prefix = prefix.as_ref();
            let branches: Vec<Branch<'_>> = members
                .iter()
                .map(|&i| Branch {
                    tokens: &passes[i].tokens,
                    codes: &self.codes.ids()[..passes[i].keys.len()],
                })
                .collect();
            let scored = match stem {
                None => self
                    .backend
                    .score_branches_until(prefix, &branches, cancel)?,
                Some(s) => {
                    if !extended.encoded.contains_key(&s) && !extended.unsupported {
                        cancel.check()?;
                        match self.backend.extend_prefix(prefix, &stems[s])? {
                            Some(encoded) => {
                                extended.tokens += stems[s].len();
                                extended.encoded.insert(s, encoded);
                            }
                            None => extended.unsupported = true,
                        }
                    }
                    match extended.encoded.get(&s) {
                        Some(stemmed) => {
                            let scored = self
                                .backend
                                .score_branches_until(stemmed, &branches, cancel)?;
                            if self.options.adaptive.is_none() {
                                extended.encoded.remove(&s);
                            }
                            scored
                        }
                        None => {
                            // The backend cannot extend a prefix: whole branches, the stem
                            // in each.
                            let whole: Vec<Vec<u32>> = members
                                .iter()
                                .map(|&i| [stems[s].as_slice(), &passes[i].tokens].concat())
                                .collect();
                            extended.tokens += stems[s].len() * members.len();
                            let branches: Vec<Branch<'_>> = members
                                .iter()
                                .zip(&whole)
                                .map(|(&i, tokens)| Branch {
                                    tokens,
                                    codes: &self.codes.ids()[..passes[i].keys.len()],
                                })
                                .collect();
                            self.backend
                                .score_branches_until(prefix, &branches, cancel)?
                        }
                    }
                }
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

    /// The encoded prefix `base` names: the state's, or a question-first head from the prefix
    /// cache (encoded and kept on a miss).
    fn base_prefix(
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

    /// A question's stem and each rotation's branch after it, when stems are on, the question
    /// has two or more rotations, the backend can extend a prefix, and the stem tokenizes the
    /// same apart as inside every rotation's branch (else `None`: whole branches).
    fn split_stem(
        &self,
        rotations: &[RenderedQuestion],
        tail: &str,
    ) -> Result<Option<StemSplit>, EngineError> {
        if !self.options.shared_stems || rotations.len() < 2 {
            return Ok(None);
        }
        let first = &rotations[0];
        let stem_text = &first.text[..first.stem_len];
        if rotations
            .iter()
            .any(|r| r.stem_len != first.stem_len || &r.text[..r.stem_len] != stem_text)
        {
            return Ok(None);
        }
        let stem = self.backend.encode(stem_text)?;
        let mut rests = Vec::with_capacity(rotations.len());
        for rendered in rotations {
            let rest = self
                .backend
                .encode(&format!("{}{tail}", &rendered.text[rendered.stem_len..]))?;
            let whole = self.encode_branch(rendered, tail)?;
            if rest.is_empty()
                || whole.len() != stem.len() + rest.len()
                || whole[..stem.len()] != stem[..]
                || whole[stem.len()..] != rest[..]
            {
                return Ok(None);
            }
            rests.push(rest);
        }
        Ok(Some(StemSplit { stem, rests }))
    }

    /// Debias each scored pass and average its question's rotations per key.
    fn fold(
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
            });
        }
        for slot in &mut combined {
            let n = slot.rotations.len().max(1) as f64;
            slot.scores.iter_mut().for_each(|s| *s /= n);
        }
        Ok(combined)
    }
}

/// A question's stem tokens and, per rotation, the branch after it.
struct StemSplit {
    stem: Vec<u32>,
    rests: Vec<Vec<u32>>,
}

/// Stems encoded as prefix extensions during one scoring, and the tokens that took.
struct Stems<P> {
    encoded: HashMap<usize, P>,
    tokens: usize,
    /// The backend said it cannot extend a prefix; stems go inside whole branches.
    unsupported: bool,
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

fn check_branch(question: &ValidQuestion, tokens: usize, limit: usize) -> Result<(), EngineError> {
    if tokens > limit {
        return Err(EngineError::InputTooLong {
            question: Some(question.id().to_owned()),
            message: format!(
                "question {:?} makes a branch of {tokens} tokens, over the maximum context length of {limit} tokens for one branch",
                question.id()
            ),
        });
    }
    Ok(())
}

fn log_probs(logits: &[f32]) -> Result<Vec<f64>, EngineError> {
    let wide: Vec<f64> = logits.iter().map(|&l| f64::from(l)).collect();
    Ok(log_softmax(&wide)?)
}

fn provenance<B: Backend>(backend: &B, options: &EngineOptions) -> Provenance {
    Provenance {
        model_id: backend.info().model_id.clone(),
        revision: backend.info().revision.clone(),
        rotations: options.rotations,
        prior: options.prior,
        adapter_digest: backend.info().adapter_digest.clone(),
    }
}

fn answer_type(kind: &QuestionKind) -> AnswerType {
    match kind {
        QuestionKind::Noul { .. } => AnswerType::Noul,
        QuestionKind::Score { .. } => AnswerType::Score,
        _ => AnswerType::Choice,
    }
}

/// A request's state as the engine reads it: the prompt cut after it, the prefix's tokens,
/// and the context every branch must fit.
struct Framed {
    state: String,
    split: PromptSplit,
    prefix_tokens: Vec<u32>,
    limit: usize,
}

/// A Choice asked in two stages: each option alone as a yes/no, then the strongest few.
struct WideChoice {
    /// Its index among the request's questions.
    question: usize,
    /// Its options as shown, in canonical order.
    options: Vec<ShownOption>,
    /// The slot of its first option's stage-one question; slots past the request's own
    /// questions belong to stage-one questions, one per option.
    first_slot: usize,
    /// The most tokens its final pass can take (every rotation of its longest candidates).
    final_bound: usize,
}

/// Everything about a request decided before its first forward pass.
struct Plan {
    /// Stage one: every plain question's rotations, and each wide Choice's per-option
    /// questions.
    passes: Vec<Pass>,
    wide: Vec<WideChoice>,
    /// Question stems encoded once as extensions of the state's prefix.
    stems: Vec<Vec<u32>>,
    /// The heads of questions asked question-first, one per rotation: each a whole prefix
    /// (system turn, question and options).
    heads: Vec<Vec<u32>>,
}

impl Plan {
    /// Whether any pass continues the state's prefix (otherwise it is never encoded).
    fn needs_state(&self) -> bool {
        !self.wide.is_empty() || self.passes.iter().any(|p| p.base == Base::State)
    }

    /// The request question a pass's slot belongs to: its own, or for a stage-one slot the
    /// wide Choice whose option it asks about.
    fn question_of<'a>(&self, questions: &'a [ValidQuestion], slot: usize) -> &'a ValidQuestion {
        let index = self
            .wide
            .iter()
            .find(|w| (w.first_slot..w.first_slot + w.options.len()).contains(&slot))
            .map_or(slot, |w| w.question);
        &questions[index]
    }
}

impl<B: Backend> DecoderEngine<B> {
    /// Render the state, cut the prompt after it and encode the prefix; refuse a state that
    /// cannot fit the context.
    fn frame(&self, state: &ValidState) -> Result<Framed, EngineError> {
        let state = state.render();
        let limit = self.info.max_context;
        // Tokenizing megabytes takes seconds; a state that cannot fit whatever its tokens is
        // refused from its length alone.
        let per_token = self.backend.info().max_token_bytes;
        if per_token > 0 && state.len() / per_token > limit {
            return Err(EngineError::InputTooLong {
                question: None,
                message: format!(
                    "the state is {} bytes, at least {} tokens for this model, over the maximum context length of {limit} tokens for one branch",
                    state.len(),
                    state.len() / per_token
                ),
            });
        }
        let split = split_prompt(
            &self.backend,
            &self.options.system_prompt,
            &user_head(&state),
        )?;
        let prefix_tokens = self.backend.encode(&split.prefix)?;
        if prefix_tokens.len() >= limit {
            return Err(EngineError::InputTooLong {
                question: None,
                message: format!(
                    "the state makes a prompt of {} tokens, over the maximum context length of {limit} tokens for one branch",
                    prefix_tokens.len()
                ),
            });
        }
        Ok(Framed {
            state,
            split,
            prefix_tokens,
            limit,
        })
    }

    /// Every stage-one pass of the request, and a bound on every stage-two pass.
    fn plan(&self, questions: &[ValidQuestion], framed: &Framed) -> Result<Plan, EngineError> {
        let mut plan = Plan {
            passes: Vec::new(),
            wide: Vec::new(),
            stems: Vec::new(),
            heads: Vec::new(),
        };
        for (index, question) in questions.iter().enumerate() {
            let kind = question.kind();
            if let QuestionKind::Choice {
                instructions,
                options,
            } = kind
            {
                let instructions = instructions.render();
                if self.needs_two_stages(&instructions, options, framed)? {
                    self.plan_two_stages(
                        &mut plan,
                        questions,
                        index,
                        &instructions,
                        options,
                        framed,
                    )?;
                    continue;
                }
            }
            let rotations = self.rotations(kind);
            if self.asks_question_first(&rotations, &framed.state) {
                self.plan_question_first(&mut plan, index, &rotations, &framed.state)?;
            } else {
                self.plan_state_first(&mut plan, index, &rotations, &framed.split.tail)?;
            }
        }
        Ok(plan)
    }

    /// A wide Choice's stage one: every option on its own, each in its own slot.
    fn plan_two_stages(
        &self,
        plan: &mut Plan,
        questions: &[ValidQuestion],
        index: usize,
        instructions: &str,
        options: &[ChoiceOption],
        framed: &Framed,
    ) -> Result<(), EngineError> {
        let shown = choice_options(options);
        let first_slot = questions.len() + plan.wide.iter().map(|w| w.options.len()).sum::<usize>();
        for (offset, option) in shown.iter().enumerate() {
            for rendered in self.stage_one(instructions, option) {
                plan.passes.push(Pass {
                    question: first_slot + offset,
                    keys: rendered.keys.clone(),
                    tokens: self.encode_branch(&rendered, &framed.split.tail)?,
                    stem: None,
                    base: Base::State,
                });
            }
        }
        // The final pass shows at most the longest candidates; bound it by them.
        let mut longest = shown.clone();
        longest.sort_by_key(|o| std::cmp::Reverse(o.line.len()));
        longest.truncate(self.options.stage_two_candidates);
        let bound = self
            .choice_rotations(instructions, &longest)
            .iter()
            .map(|r| self.encode_branch(r, &framed.split.tail).map(|t| t.len()))
            .collect::<Result<Vec<_>, _>>()?;
        let widest = bound.iter().copied().max().unwrap_or(0);
        check_branch(
            &questions[index],
            framed.prefix_tokens.len() + widest,
            framed.limit,
        )?;
        plan.wide.push(WideChoice {
            question: index,
            options: shown,
            first_slot,
            final_bound: bound.iter().sum(),
        });
        Ok(())
    }

    /// A question asked question-first: per rotation, its own head as the prefix and the
    /// state as the branch.
    fn plan_question_first(
        &self,
        plan: &mut Plan,
        index: usize,
        rotations: &[RenderedQuestion],
        state: &str,
    ) -> Result<(), EngineError> {
        for rendered in rotations {
            let (head, branch) = rendered.question_first(state);
            let head = split_prompt(&self.backend, &self.options.system_prompt, &head)?;
            plan.passes.push(Pass {
                question: index,
                keys: rendered.keys.clone(),
                tokens: self.backend.encode(&format!("{branch}{}", head.tail))?,
                stem: None,
                base: Base::Head(plan.heads.len()),
            });
            plan.heads.push(self.backend.encode(&head.prefix)?);
        }
        Ok(())
    }

    /// A question asked state-first: each rotation a branch over the state, after the
    /// question's stem when the stem can be shared.
    fn plan_state_first(
        &self,
        plan: &mut Plan,
        index: usize,
        rotations: &[RenderedQuestion],
        tail: &str,
    ) -> Result<(), EngineError> {
        if let Some(StemSplit { stem, rests }) = self.split_stem(rotations, tail)? {
            let at = plan.stems.len();
            plan.stems.push(stem);
            for (rendered, tokens) in rotations.iter().zip(rests) {
                plan.passes.push(Pass {
                    question: index,
                    keys: rendered.keys.clone(),
                    tokens,
                    stem: Some(at),
                    base: Base::State,
                });
            }
            return Ok(());
        }
        for rendered in rotations {
            plan.passes.push(Pass {
                question: index,
                keys: rendered.keys.clone(),
                tokens: self.encode_branch(rendered, tail)?,
                stem: None,
                base: Base::State,
            });
        }
        Ok(())
    }

    /// Refuse, before any forward pass, a branch longer than the context or a request over
    /// its token budget, naming the question at fault. Returns the state's prefix tokens
    /// the request will read (none when no pass continues the state).
    fn check_budget(
        &self,
        questions: &[ValidQuestion],
        plan: &Plan,
        framed: &Framed,
    ) -> Result<usize, EngineError> {
        let prefix = framed.prefix_tokens.len();
        let before_branch = |pass: &Pass| match pass.base {
            Base::State => prefix + pass.stem.map_or(0, |s| plan.stems[s].len()),
            Base::Head(head) => plan.heads[head].len(),
        };
        for pass in &plan.passes {
            let question = plan.question_of(questions, pass.question);
            check_branch(
                question,
                before_branch(pass) + pass.tokens.len(),
                framed.limit,
            )?;
        }
        let state_tokens = if plan.needs_state() { prefix } else { 0 };
        let mut total = state_tokens;
        for (index, question) in questions.iter().enumerate() {
            let own: Vec<&Pass> = plan
                .passes
                .iter()
                .filter(|p| plan.question_of(questions, p.question).id() == question.id())
                .collect();
            total += own.iter().map(|p| p.tokens.len()).sum::<usize>();
            // A question's stem is encoded once, whatever its rotations.
            total += own
                .iter()
                .find_map(|p| p.stem)
                .map_or(0, |s| plan.stems[s].len());
            // A question-first head is encoded (or found in the cache) once per rotation.
            total += own
                .iter()
                .filter_map(|p| match p.base {
                    Base::Head(head) => Some(plan.heads[head].len()),
                    Base::State => None,
                })
                .sum::<usize>();
            total += plan
                .wide
                .iter()
                .filter(|w| w.question == index)
                .map(|w| w.final_bound)
                .sum::<usize>();
            if total > self.options.max_request_tokens {
                return Err(EngineError::InputTooLong {
                    question: Some(question.id().to_owned()),
                    message: format!(
                        "question {:?} brings the request to {total} tokens, over the maximum context length of {} tokens for one request",
                        question.id(),
                        self.options.max_request_tokens
                    ),
                });
            }
        }
        Ok(state_tokens)
    }

    /// Stage two: the strongest options of each wide Choice asked as one Choice, its result
    /// put in the Choice's slot with every other option ruled out. Returns the stage-one
    /// strengths for the trace and the tokens the final passes read.
    fn stage_two(
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
                    framed.prefix_tokens.len() + tokens.len(),
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

    /// Each question's calibrated answer, and the trace when the request asks for one.
    fn respond(
        &self,
        request: &ValidRequest,
        combined: &[Combined],
        mut stage_one: HashMap<usize, Vec<StageOneScore>>,
        prefix_tokens: usize,
        prefix_cached: Option<bool>,
        used: usize,
    ) -> Result<SystemOneResponse, EngineError> {
        let mut answers = IndexMap::with_capacity(request.questions().len());
        let mut traces = IndexMap::new();
        for (index, question) in request.questions().iter().enumerate() {
            let result = &combined[index];
            let temperature = self.calibration.temperature(answer_type(question.kind()));
            let answer = answer(question, &result.keys, &result.scores, temperature)?;
            if request.trace() {
                traces.insert(
                    question.id().to_owned(),
                    result.trace(temperature, stage_one.remove(&index)),
                );
            }
            answers.insert(question.id().to_owned(), answer);
        }
        let evaluation_trace = request.trace().then(|| EvaluationTrace {
            engine: EngineKind::Decoder,
            questions: traces,
            prefix_tokens,
            prefix_cached,
        });
        Ok(SystemOneResponse {
            model: self.info.model.clone(),
            answers,
            usage: Usage {
                input_tokens: used as u64,
                output_tokens: 0,
            },
            evaluation_trace,
        })
    }
}

impl<B: Backend> Engine for DecoderEngine<B> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn prefix_cache_stats(&self) -> Option<PrefixCacheStats> {
        Some(self.prefixes.stats())
    }

    fn provenance(&self) -> Provenance {
        provenance(&self.backend, &self.options)
    }

    fn evaluate(&self, request: &ValidRequest) -> Result<SystemOneResponse, EngineError> {
        self.evaluate_until(request, &Cancel::never())
    }

    fn evaluate_until(
        &self,
        request: &ValidRequest,
        cancel: &Cancel,
    ) -> Result<SystemOneResponse, EngineError> {
        let questions = request.questions();
        if let Some(q) = questions
            .iter()
            .find(|q| matches!(q.kind(), QuestionKind::Box { .. }))
        {
            return Err(EngineError::Unsupported(format!(
                "question {:?}: box questions need a vision model; this engine reads text only",
                q.id()
            )));
        }
        let framed = self.frame(request.state())?;
        let plan = self.plan(questions, &framed)?;
        let state_tokens = self.check_budget(questions, &plan, &framed)?;

        // Stage one: every plain question, and each wide Choice's options one by one.
        cancel.check()?;
        let (state_prefix, cached) = if plan.needs_state() {
            let tokens = &framed.prefix_tokens;
            let (prefix, cached) = self.prefixes.get_or_encode(
                tokens,
                || self.backend.encode_prefix(tokens),
                |p| self.backend.prefix_bytes(p),
            )?;
            (Some(prefix), Some(cached))
        } else {
            (None, None)
        };
        let mut bases = Bases {
            state: state_prefix,
            heads: &plan.heads,
            encoded: HashMap::new(),
            head_tokens: 0,
        };
        let slots = questions.len() + plan.wide.iter().map(|w| w.options.len()).sum::<usize>();
        let (mut combined, branch_tokens) =
            self.score(&mut bases, &plan.passes, &plan.stems, slots, cancel)?;
        let (stage_one, final_tokens) =
            self.stage_two(questions, &plan, &framed, &mut combined, &mut bases, cancel)?;
        // Usage counts every prefix whether or not it came from the cache, so a response
        // does not depend on what other requests ran before it.
        let used = state_tokens + branch_tokens + final_tokens + bases.head_tokens;
        self.respond(
            request,
            &combined,
            stage_one,
            framed.prefix_tokens.len(),
            cached,
            used,
        )
    }
}
