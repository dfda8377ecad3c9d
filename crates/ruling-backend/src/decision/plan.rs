//! Planning a request: every pass decided, and every limit checked, before the first
//! forward pass. A question is asked state-first (a branch over the state, after its shared
//! stem when it has one), question-first (its own head as the prefix, the state as the
//! branch), or, for a Choice wider than the codes or too long for one pass, in two stages.

use ruling_schema::capacity::CONTEXT;
use ruling_schema::{ChoiceOption, QuestionKind, ValidQuestion, ValidState};

use super::images::{ShownImage, image_error};
use super::{
    DecoderEngine, EngineError, Layout, QUESTION_FIRST_MIN_BYTES, QUESTION_FIRST_RATIO, Shown,
};
use crate::backend::Backend;
use crate::picture::Picture;
use crate::prompt::{PromptSplit, split_prompt, user_head};
use crate::render::{RenderedQuestion, ShownOption, choice_options, noul_options, render};

/// One branch to score: which question it answers, the keys its codes stand for.
#[derive(Debug)]
pub(super) struct Pass {
    pub(super) question: usize,
    pub(super) keys: Vec<String>,
    /// The branch: after the stem when there is one, else after the prefix.
    pub(super) tokens: Vec<u32>,
    /// The index of the question's stem in the plan's stems, when it has one.
    pub(super) stem: Option<usize>,
    /// The prefix the branch continues.
    pub(super) base: Base,
}

/// The prefix a pass is scored against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Base {
    /// The request's state: the usual layout.
    State,
    /// Its question's own head, asked question-first: an index into the plan's heads.
    Head(usize),
}

/// A question's stem tokens and, per rotation, the branch after it.
pub(super) struct StemSplit {
    pub(super) stem: Vec<u32>,
    pub(super) rests: Vec<Vec<u32>>,
}

pub(super) fn check_branch(
    question: &ValidQuestion,
    tokens: usize,
    limit: usize,
) -> Result<(), EngineError> {
    if tokens > limit {
        return Err(EngineError::InputTooLong {
            question: Some(question.id().to_owned()),
            message: format!(
                "question {:?} makes a branch of {tokens} tokens, over the {CONTEXT} of {limit} tokens for one branch",
                question.id()
            ),
        });
    }
    Ok(())
}

/// A request's state as the engine reads it: the prompt cut after it, the prefix's tokens,
/// and the context every branch must fit.
pub(super) struct Framed {
    pub(super) state: String,
    pub(super) split: PromptSplit,
    /// The prefix's text tokens, and for each image its digest after a marker no token id
    /// takes: exactly what the prefix cache keys it by.
    pub(super) prefix_tokens: Vec<u32>,
    /// The tokens the prefix takes in the context, images included.
    pub(super) prefix_len: usize,
    /// The request's images in the order the prefix shows them (empty for text).
    pub(super) images: Vec<ShownImage>,
    pub(super) limit: usize,
}

/// In a prefix cache key, what stands before each image's digest: no tokenizer has this id.
const IMAGE_IN_KEY: u32 = u32::MAX;

/// A Choice asked in two stages: each option alone as a yes/no, then the strongest few.
pub(super) struct WideChoice {
    /// Its index among the request's questions.
    pub(super) question: usize,
    /// Its options as shown, in canonical order.
    pub(super) options: Vec<ShownOption>,
    /// The slot of its first option's stage-one question; slots past the request's own
    /// questions belong to stage-one questions, one per option.
    pub(super) first_slot: usize,
    /// The most tokens its final pass can take (every rotation of its longest candidates).
    pub(super) final_bound: usize,
}

/// Everything about a request decided before its first forward pass.
pub(super) struct Plan {
    /// Stage one: every plain question's rotations, and each wide Choice's per-option
    /// questions.
    pub(super) passes: Vec<Pass>,
    pub(super) wide: Vec<WideChoice>,
    /// Question stems encoded once as extensions of the state's prefix.
    pub(super) stems: Vec<Vec<u32>>,
    /// The heads of questions asked question-first, one per rotation: each a whole prefix
    /// (system turn, question and options).
    pub(super) heads: Vec<Vec<u32>>,
}

impl Plan {
    /// Whether any pass continues the state's prefix (otherwise it is never encoded).
    pub(super) fn needs_state(&self) -> bool {
        !self.wide.is_empty() || self.passes.iter().any(|p| p.base == Base::State)
    }

    /// The request question a pass's slot belongs to: its own, or for a stage-one slot the
    /// wide Choice whose option it asks about.
    pub(super) fn question_of<'a>(
        &self,
        questions: &'a [ValidQuestion],
        slot: usize,
    ) -> &'a ValidQuestion {
        let index = self
            .wide
            .iter()
            .find(|w| (w.first_slot..w.first_slot + w.options.len()).contains(&slot))
            .map_or(slot, |w| w.question);
        &questions[index]
    }
}

impl<B: Backend> DecoderEngine<B> {
    /// Every rotation of one question, rendered.
    pub(super) fn rotations(&self, kind: &QuestionKind) -> Vec<RenderedQuestion> {
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

    pub(super) fn choice_rotations(
        &self,
        instructions: &str,
        shown: &[ShownOption],
    ) -> Vec<RenderedQuestion> {
        let count = (self.options.rotations.max(1) as usize).min(shown.len());
        (0..count)
            .map(|shift| render(instructions, "", shown, self.codes.labels(), shift, false))
            .collect()
    }

    /// Whether a Choice goes through two stages: it has more options than one pass shows, or
    /// its widest rotation would not fit the context while the final stage shows fewer
    /// options than it has.
    pub(super) fn needs_two_stages(
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
            if framed.prefix_len + branch.len() > framed.limit {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a question, rendered in `rotations`, is asked question-first about `state`
    /// (see [`Layout`]).
    pub(super) fn asks_question_first(&self, rotations: &[RenderedQuestion], state: &str) -> bool {
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
    pub(super) fn stage_one(
        &self,
        instructions: &str,
        option: &ShownOption,
    ) -> Vec<RenderedQuestion> {
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

    pub(super) fn encode_branch(
        &self,
        rendered: &RenderedQuestion,
        tail: &str,
    ) -> Result<Vec<u32>, EngineError> {
        Ok(self
            .backend
            .encode_continuation(&format!("{}{tail}", rendered.text))?)
    }

    /// A question's stem and each rotation's branch after it, when stems are on, the question
    /// has two or more rotations, the backend can extend a prefix, and the stem tokenizes the
    /// same apart as inside every rotation's branch (else `None`: whole branches).
    pub(super) fn split_stem(
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
        let stem = self.backend.encode_continuation(stem_text)?;
        let mut rests = Vec::with_capacity(rotations.len());
        for rendered in rotations {
            let rest = self
                .backend
                .encode_continuation(&format!("{}{tail}", &rendered.text[rendered.stem_len..]))?;
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

    /// Render the state, cut the prompt after it and encode the prefix; refuse a state that
    /// cannot fit the context.
    pub(super) fn frame(
        &self,
        state: &ValidState,
        images: Vec<ShownImage>,
    ) -> Result<Framed, EngineError> {
        let state = state.render();
        let limit = self.info.max_context;
        // Tokenizing megabytes takes seconds; a state that cannot fit whatever its tokens is
        // refused from its length alone.
        let per_token = self.backend.info().max_token_bytes;
        if per_token > 0 && state.len() / per_token > limit {
            return Err(EngineError::InputTooLong {
                question: None,
                message: format!(
                    "the state is {} bytes, at least {} tokens for this model, over the {CONTEXT} of {limit} tokens for one branch",
                    state.len(),
                    state.len() / per_token
                ),
            });
        }
        let head = match (&images[..], &self.backend.info().vision) {
            ([], _) => user_head(&state),
            (_, Some(vision)) => images_head(&state, images.len(), &vision.marker),
            (_, None) => {
                return Err(EngineError::Unsupported(
                    "this model reads text only; it cannot read the request's images".to_owned(),
                ));
            }
        };
        let split = split_prompt(&self.backend, &self.options.system_prompt, &head)?;
        let mut prefix_tokens = self.backend.encode(&split.prefix)?;
        let prefix_len = if images.is_empty() {
            prefix_tokens.len()
        } else {
            let shown: Vec<&Picture> = images.iter().map(|s| &s.picture).collect();
            for image in &images {
                prefix_tokens.push(IMAGE_IN_KEY);
                prefix_tokens.extend(
                    image
                        .picture
                        .digest()
                        .chunks(4)
                        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                );
            }
            self.backend
                .count_prefix_with_images(&split.prefix, &shown)
                .map_err(|error| image_error(error, &images))?
        };
        if prefix_len >= limit {
            let with = if images.is_empty() {
                ""
            } else {
                " with its images"
            };
            return Err(EngineError::InputTooLong {
                question: None,
                message: format!(
                    "the state{with} makes a prompt of {prefix_len} tokens, over the {CONTEXT} of {limit} tokens for one branch"
                ),
            });
        }
        Ok(Framed {
            state,
            split,
            prefix_tokens,
            prefix_len,
            images,
            limit,
        })
    }

    /// Every stage-one pass of the request, and a bound on every stage-two pass.
    pub(super) fn plan(
        &self,
        questions: &[ValidQuestion],
        framed: &Framed,
    ) -> Result<Plan, EngineError> {
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
            // The images are in the state's prefix, so a request with images is asked
            // state-first.
            if framed.images.is_empty() && self.asks_question_first(&rotations, &framed.state) {
                self.plan_question_first(&mut plan, index, &rotations, &framed.state)?;
            } else {
                self.plan_state_first(&mut plan, index, &rotations, &framed.split.tail)?;
            }
        }
        Ok(plan)
    }

    /// A wide Choice's stage one: every option on its own, each in its own slot.
    pub(super) fn plan_two_stages(
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
        check_branch(&questions[index], framed.prefix_len + widest, framed.limit)?;
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
    pub(super) fn plan_question_first(
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
                tokens: self
                    .backend
                    .encode_continuation(&format!("{branch}{}", head.tail))?,
                stem: None,
                base: Base::Head(plan.heads.len()),
            });
            plan.heads.push(self.backend.encode(&head.prefix)?);
        }
        Ok(())
    }

    /// A question asked state-first: each rotation a branch over the state, after the
    /// question's stem when the stem can be shared.
    pub(super) fn plan_state_first(
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
    /// its token budget, naming the question at fault. Returns what the request will read.
    pub(super) fn check_budget(
        &self,
        questions: &[ValidQuestion],
        plan: &Plan,
        framed: &Framed,
    ) -> Result<Budget, EngineError> {
        let prefix = framed.prefix_len;
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
                        "question {:?} brings the request to {total} tokens, over the {CONTEXT} of {} tokens for one request",
                        question.id(),
                        self.options.max_request_tokens
                    ),
                });
            }
        }
        Ok(Budget {
            state: state_tokens,
            total,
        })
    }
}

/// What a request will read, counted before any forward pass.
pub(super) struct Budget {
    /// The state's own prefix (zero when every question is asked question-first).
    pub state: usize,
    /// Every token the request reads: the state, stems, heads, branches and final passes.
    pub total: usize,
}

/// The user turn up to the split with images: the state, then each image under its name
/// (`<image 1>: ` and the backend's marker) on a line of its own. It ends with one newline, as
/// [`user_head`] does, so the seam between prefix and branch is the one `verify_backend`
/// proved.
fn images_head(state: &str, images: usize, marker: &str) -> String {
    let mut head = user_head(state);
    for number in 1..=images {
        head.push_str(&format!("{}: {marker}\n", image_name(number)));
    }
    head
}

/// What the prompt calls the `number`th image (from 1).
pub(super) fn image_name(number: usize) -> String {
    format!("<image {number}>")
}
