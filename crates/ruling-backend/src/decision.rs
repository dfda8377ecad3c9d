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
//!
//! `plan.rs` decides every pass and checks every limit; `score.rs` runs the passes against
//! their prefixes and folds the rotations; this file holds the options, the engine and the
//! answer it builds.

mod images;
mod plan;
mod score;

use score::{Bases, Combined};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use ruling_calibration::{AnswerType, Calibration, Provenance, argmax_or_first};
use ruling_schema::{
    EngineKind, EvaluationTrace, QuestionKind, StageOneScore, SystemOneResponse, Usage,
    ValidRequest, ValidState,
};

use crate::Cancel;
use crate::answer::answer;
use crate::backend::Backend;
use crate::codes::{AnswerCodes, DEFAULT_CODES, MAX_CODES, two_letter_codes};
use crate::contract::verify_backend_widened;
use crate::engine::{Engine, EngineError, EngineInfo};
use crate::picture::Picture;
use crate::prefix_cache::{PrefixCache, PrefixCacheStats};
use crate::prompt::{split_prompt, user_head};
use crate::render::{
    RenderedQuestion, SYSTEM_PROMPT, ShownOption, choice_options, noul_options, noul_preamble,
    render, score_options,
};

/// How far over its allowed time a request's estimated cost may be before it is refused up
/// front: the estimate is a running average, and a request is refused only when it is plainly
/// hopeless, not when it is close.
pub const TOO_SLOW_MARGIN: f64 = 1.5;
/// The weight of the newest evaluation in the running pace.
const PACE_WEIGHT: f64 = 0.3;

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
    /// Most images one request may carry on a model that reads them (a 422 beyond).
    pub max_images: usize,
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
        let top = argmax_or_first(&combined.scores);
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
            .all(|r| r.order.get(argmax_or_first(&r.log_probabilities)) == Some(leader))
    }
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
            max_images: ruling_schema::DEFAULT_MAX_IMAGES,
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
    /// Tokens read per second, a running average over the evaluations so far: what a
    /// request's cost is estimated with before it starts (none until one has run).
    pace: Mutex<Option<f64>>,
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
                vision: backend.info().vision.is_some(),
                max_images: options.max_images,
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
            pace: Mutex::new(None),
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

    /// Refuse a request whose estimated cost is far beyond what its caller allows: it could
    /// never be answered in time, and starting it would only hold the worker until the
    /// deadline. The estimate is the request's tokens at the pace measured so far; a margin
    /// of [`TOO_SLOW_MARGIN`] keeps a noisy pace from refusing a request that would fit.
    fn check_pace(&self, tokens: usize, cancel: &Cancel) -> Result<(), EngineError> {
        let (Some(allowed), Some(rate)) = (
            cancel.allowed(),
            *self.pace.lock().unwrap_or_else(PoisonError::into_inner),
        ) else {
            return Ok(());
        };
        let seconds = tokens as f64 / rate;
        let allowed = allowed.as_secs_f64();
        if seconds > TOO_SLOW_MARGIN * allowed {
            return Err(EngineError::TooSlow {
                tokens,
                seconds,
                rate,
                allowed,
            });
        }
        Ok(())
    }

    /// Fold one evaluation's pace into the running average. Evaluations too short to time
    /// say nothing about the pace and are left out.
    fn record_pace(&self, tokens: usize, took: Duration) {
        if tokens == 0 || took < Duration::from_millis(20) {
            return;
        }
        let rate = tokens as f64 / took.as_secs_f64();
        let mut pace = self.pace.lock().unwrap_or_else(PoisonError::into_inner);
        *pace = Some(pace.map_or(rate, |old| old + PACE_WEIGHT * (rate - old)));
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

impl<B: Backend> DecoderEngine<B> {
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
        if let Some(q) = request
            .questions()
            .iter()
            .find(|q| matches!(q.kind(), QuestionKind::Box { .. }))
        {
            let why = if self.backend.info().vision.is_some() {
                "this model's answers are read from letter codes, and it has no coordinate \
                 tokens to read a box from"
            } else {
                "box questions need a vision model; this engine reads text only"
            };
            return Err(EngineError::Unsupported(format!(
                "question {:?}: {why}",
                q.id()
            )));
        }
        let (named, images) = match self.read_images(request)? {
            Some((named, images)) => (Some(named), images),
            None => (None, Vec::new()),
        };
        let request = named.as_ref().unwrap_or(request);
        let questions = request.questions();
        let framed = self.frame(request.state(), images)?;
        let plan = self.plan(questions, &framed)?;
        let budget = self.check_budget(questions, &plan, &framed)?;
        self.check_pace(budget.total, cancel)?;
        let started = Instant::now();

        // Stage one: every plain question, and each wide Choice's options one by one.
        cancel.check()?;
        let (state_prefix, cached) = if plan.needs_state() {
            let tokens = &framed.prefix_tokens;
            let (prefix, cached) = self.prefixes.get_or_encode(
                tokens,
                || {
                    if framed.images.is_empty() {
                        self.backend
                            .encode_prefix(tokens)
                            .map_err(EngineError::from)
                    } else {
                        let shown: Vec<&Picture> =
                            framed.images.iter().map(|s| &s.picture).collect();
                        self.backend
                            .encode_prefix_with_images(&framed.split.prefix, &shown)
                            .map_err(|error| images::image_error(error, &framed.images))
                    }
                },
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
        let used = budget.state + branch_tokens + final_tokens + bases.head_tokens;
        self.record_pace(used, started.elapsed());
        self.respond(
            request,
            &combined,
            stage_one,
            framed.prefix_len,
            cached,
            used,
        )
    }
}
