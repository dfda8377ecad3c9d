//! How a state and its questions become one token sequence with positions and a 3-D mask.
//!
//! The layout (seed `ruling/decision.py`): `[CLS] state [SEP]`, then for each question its text
//! and `[SEP]`, then for each of its options a `[MASK]` slot, the option's text and `[SEP]`.
//! The state takes positions from 0; a question's text continues from the state's end; every
//! option of that question starts at the same position, right after the question's text. So
//! positions never grow with the number of options or questions, and a 77-way question fits a
//! 512-position model even though its sequence is longer than the position table.
//!
//! A state longer than the position table is read in *windows*: overlapping runs of its tokens,
//! each laid out as `[CLS] run [SEP]` from position 0, one after the other ([`windows`]), each
//! the table less the questions' room ([`window_size`]). A window's tokens see only their window, so
//! the state costs time in proportion to its length; questions and options see every window and
//! take their positions after the longest, as after a short state. A state that fits the table is one window, laid out exactly as
//! before.
//!
//! Who sees whom is what makes answers independent of everything else in the request: the
//! state sees only the state (a window only its window); a question's text sees the state and
//! itself; an option sees the state, its question's text and itself. No token of one question
//! or option can influence another, and no option can tell where it sits among its siblings.
//!
//! Everything here is plain Rust on token ids; the tensors are built by the model.

use ruling_calibration::AnswerType;
use ruling_schema::{QuestionKind, ValidQuestion};

/// The tokenizer's special tokens the layout uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Special {
    pub cls: u32,
    pub sep: u32,
    pub mask: u32,
    pub pad: u32,
}

/// Which part of the layout a token belongs to; it decides what the token may attend to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Segment {
    /// Window `w` of the state (0 for a state that fits one).
    State(u32),
    /// The text of question `q` (0-based within the packed request).
    Question(u32),
    /// Option `o` of question `q`, its slot included.
    Option(u32, u32),
    /// Filler that makes rows of a batch the same width; it attends only to itself and
    /// nothing attends to it.
    Padding,
}

impl Segment {
    /// Whether a token of `self` may attend to a token of `other` (a padding token sees only
    /// itself, which the caller decides from the indices).
    pub fn sees(self, other: Segment) -> bool {
        match (self, other) {
            (Segment::Padding, _) | (_, Segment::Padding) => false,
            (Segment::State(w), Segment::State(v)) => w == v,
            (_, Segment::State(_)) => true,
            (Segment::State(_), _) => false,
            (Segment::Question(q), Segment::Question(r)) => q == r,
            (Segment::Question(_), Segment::Option(..)) => false,
            (Segment::Option(q, _), Segment::Question(r)) => q == r,
            (Segment::Option(q, o), Segment::Option(r, p)) => q == r && o == p,
        }
    }
}

/// One question as the encoder reads it: a lead-in naming its type, then the instructions, and
/// one short text per answer key, in the question's canonical key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncoderQuestion {
    pub id: String,
    pub kind: AnswerType,
    pub text: String,
    /// `(answer key, option text)`: `"yes"`/`"no"` for a noul, the level index for a score,
    /// the option key for a choice.
    pub options: Vec<(String, String)>,
}

impl EncoderQuestion {
    /// The encoder's reading of a validated question; `None` for a box question, which only a
    /// vision model can answer.
    pub fn from_valid(question: &ValidQuestion) -> Option<Self> {
        let id = question.id().to_owned();
        let instructions = question.kind().instructions().render();
        let instructions = instructions.trim();
        Some(match question.kind() {
            QuestionKind::Noul {
                if_true, if_false, ..
            } => {
                let side = |name: &str, text: &Option<ruling_schema::Text>| match text {
                    Some(text) if !text.render().trim().is_empty() => {
                        format!("{name}: {}", one_line(&text.render()))
                    }
                    _ => name.to_owned(),
                };
                Self {
                    id,
                    kind: AnswerType::Noul,
                    text: format!("Is this statement true? {instructions}"),
                    options: vec![
                        ("yes".to_owned(), side("true", if_true)),
                        ("no".to_owned(), side("false", if_false)),
                    ],
                }
            }
            QuestionKind::Score { levels, .. } => Self {
                id,
                kind: AnswerType::Score,
                // A level's slot carries its text alone, never its rank: reversing the levels
                // then gives every level the same input, so the same probability.
                text: format!("Choose the level that fits. {instructions}"),
                options: levels
                    .iter()
                    .enumerate()
                    .map(|(i, level)| (i.to_string(), one_line(&level.render())))
                    .collect(),
            },
            QuestionKind::Choice { options, .. } => Self {
                id,
                kind: AnswerType::Choice,
                text: format!("Choose the best option. {instructions}"),
                options: options
                    .iter()
                    .map(|option| {
                        let description = option
                            .description
                            .as_ref()
                            .map(|d| one_line(&d.render()))
                            .unwrap_or_default();
                        let text = if description.is_empty() {
                            option.key.clone()
                        } else {
                            format!("{}: {description}", option.key)
                        };
                        (option.key.clone(), text)
                    })
                    .collect(),
            },
            QuestionKind::Box { .. } => return None,
        })
    }
}

/// Whitespace runs (newlines included) as single spaces: an option is one short line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One question's token ids: its text, and each option's text in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionTokens {
    pub text: Vec<u32>,
    pub options: Vec<Vec<u32>>,
}

/// What the layout must fit in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Rows of the position table: no token may sit at this position or beyond.
    pub max_positions: usize,
    /// Most tokens one packed request may hold.
    pub max_tokens: usize,
    /// Most tokens a state may have (without its special tokens); a longer one is refused.
    pub max_state_tokens: usize,
}

/// The state tokens two neighbouring windows share, so no sentence is read only cut in two.
pub const WINDOW_OVERLAP: usize = 32;

/// State tokens per window of a state longer than the position table: the table less the
/// positions left to the questions (a quarter of it, and at least 64 where that is under half:
/// 382 of 512 on BERT-sized models, with `[CLS]` and `[SEP]` around them), so a question sits
/// after the windows as it sits after a short state.
pub fn window_size(max_positions: usize) -> usize {
    let room = (max_positions / 4).max(64.min(max_positions / 2));
    (max_positions - room).saturating_sub(2).max(1)
}

/// The runs of a state of `len` tokens that make its windows, each at most `size` tokens: the
/// whole state when it fits, else runs of `size` tokens starting every `size - overlap` tokens,
/// the last ending at the state's end.
pub fn windows(len: usize, size: usize, overlap: usize) -> Vec<std::ops::Range<usize>> {
    if len <= size {
        return std::iter::once(0..len).collect();
    }
    let stride = size.saturating_sub(overlap).max(1);
    let mut runs: Vec<std::ops::Range<usize>> = (0..)
        .map(|w| w * stride)
        .take_while(|start| start + size < len)
        .map(|start| start..start + size)
        .collect();
    runs.push(len - size..len);
    runs
}

/// Why a request does not fit the layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error(
        "the state is {tokens} tokens, over the {} of {limit} tokens of state this model reads",
        ruling_schema::capacity::CONTEXT
    )]
    StateTooLong { tokens: usize, limit: usize },
    #[error(
        "the question reaches position {position} after the state, over the {} of {limit} positions",
        ruling_schema::capacity::CONTEXT
    )]
    QuestionTooLong {
        question: usize,
        position: usize,
        limit: usize,
    },
    #[error(
        "the question brings the request to {tokens} tokens, over the {} of {limit} tokens for one request",
        ruling_schema::capacity::CONTEXT
    )]
    TooManyTokens {
        question: usize,
        tokens: usize,
        limit: usize,
    },
}

impl PackError {
    /// The index of the question at fault, if one is.
    pub fn question(&self) -> Option<usize> {
        match self {
            Self::StateTooLong { .. } => None,
            Self::QuestionTooLong { question, .. } | Self::TooManyTokens { question, .. } => {
                Some(*question)
            }
        }
    }
}

/// A packed request: one row of the model's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    pub tokens: Vec<u32>,
    pub positions: Vec<u32>,
    pub segments: Vec<Segment>,
    /// Per question, the index of each option's `[MASK]` slot, in option order.
    pub slots: Vec<Vec<usize>>,
}

impl Packed {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// Lay a state and its questions out, refusing what does not fit before anything runs.
pub fn pack(
    state: &[u32],
    questions: &[QuestionTokens],
    special: Special,
    limits: Limits,
) -> Result<Packed, PackError> {
    if state.len() > limits.max_state_tokens {
        return Err(PackError::StateTooLong {
            tokens: state.len(),
            limit: limits.max_state_tokens,
        });
    }
    // A state that fits the table is one window, as it always was; a longer one is read in
    // windows that leave the table's last quarter to the questions.
    let whole = limits.max_positions.saturating_sub(2).max(1);
    let runs = if state.len() <= whole {
        windows(state.len(), whole, WINDOW_OVERLAP)
    } else {
        windows(
            state.len(),
            window_size(limits.max_positions),
            WINDOW_OVERLAP,
        )
    };
    let state_len = runs.iter().map(|r| r.len() + 2).max().unwrap_or(2);
    let total: usize = runs.iter().map(|r| r.len() + 2).sum();
    let mut packed = Packed {
        tokens: Vec::with_capacity(total),
        positions: Vec::with_capacity(total),
        segments: Vec::with_capacity(total),
        slots: Vec::with_capacity(questions.len()),
    };
    for (w, run) in runs.iter().enumerate() {
        let segment = Segment::State(w as u32);
        packed.push(special.cls, 0, segment);
        for (i, &token) in state[run.clone()].iter().enumerate() {
            packed.push(token, i + 1, segment);
        }
        packed.push(special.sep, run.len() + 1, segment);
    }

    for (q, question) in questions.iter().enumerate() {
        let index = q as u32;
        // Right after the state (its longest window), whatever its options: where a question
        // sits depends on nothing but the state, so neither do its options' probabilities.
        let mut position = state_len;
        for &token in &question.text {
            packed.push(token, position, Segment::Question(index));
            position += 1;
        }
        packed.push(special.sep, position, Segment::Question(index));
        let options_start = position + 1;
        let mut slots = Vec::with_capacity(question.options.len());
        let mut furthest = options_start;
        for (o, option) in question.options.iter().enumerate() {
            let segment = Segment::Option(index, o as u32);
            slots.push(packed.len());
            packed.push(special.mask, options_start, segment);
            let mut position = options_start + 1;
            for &token in option {
                packed.push(token, position, segment);
                position += 1;
            }
            packed.push(special.sep, position, segment);
            furthest = furthest.max(position);
        }
        if furthest >= limits.max_positions {
            return Err(PackError::QuestionTooLong {
                question: q,
                position: furthest,
                limit: limits.max_positions,
            });
        }
        if packed.len() > limits.max_tokens {
            return Err(PackError::TooManyTokens {
                question: q,
                tokens: packed.len(),
                limit: limits.max_tokens,
            });
        }
        packed.slots.push(slots);
    }
    Ok(packed)
}

impl Packed {
    fn push(&mut self, token: u32, position: usize, segment: Segment) {
        self.tokens.push(token);
        // Positions are bounded by the limits check, which compares against a table far below
        // u32::MAX.
        self.positions.push(position as u32);
        self.segments.push(segment);
    }
}

/// A request packed in canonical order, with the way back to the caller's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub packed: Packed,
    /// `order[i]` is the caller's index of the `i`-th packed question.
    pub order: Vec<usize>,
    /// Per caller's question, its option indices in packed (key-sorted) order.
    pub sorted_options: Vec<Vec<usize>>,
}

/// Why a request could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// It does not fit; `question` is the caller's id of the question at fault.
    #[error("{error}")]
    Pack {
        error: PackError,
        question: Option<String>,
    },
    #[error(transparent)]
    Tokenizer(#[from] crate::error::EncoderError),
}

/// Tokenize and pack `questions` about `state` the one way every caller does (the engine and
/// the trainer alike): questions in id order, each question's options in key order. The same
/// questions therefore always make the same sequence, whatever order they were listed in.
pub fn prepare(
    tokenizer: &crate::tokenizer::EncoderTokenizer,
    state: &str,
    questions: &[EncoderQuestion],
    limits: Limits,
) -> Result<Prepared, PrepareError> {
    let mut order: Vec<usize> = (0..questions.len()).collect();
    order.sort_by(|&a, &b| questions[a].id.cmp(&questions[b].id));
    let sorted_options: Vec<Vec<usize>> = questions
        .iter()
        .map(|q| {
            let mut keys: Vec<usize> = (0..q.options.len()).collect();
            keys.sort_by(|&a, &b| q.options[a].0.cmp(&q.options[b].0));
            keys
        })
        .collect();
    let mut texts = Vec::with_capacity(1 + questions.len() * 4);
    texts.push(state.to_owned());
    for &q in &order {
        texts.push(questions[q].text.clone());
        for &o in &sorted_options[q] {
            texts.push(questions[q].options[o].1.clone());
        }
    }
    let mut ids = tokenizer.encode_all(&texts)?.into_iter();
    let state_ids = ids.next().unwrap_or_default();
    let tokens: Vec<QuestionTokens> = order
        .iter()
        .map(|&q| QuestionTokens {
            text: ids.next().unwrap_or_default(),
            options: sorted_options[q]
                .iter()
                .map(|_| ids.next().unwrap_or_default())
                .collect(),
        })
        .collect();
    let packed = pack(&state_ids, &tokens, tokenizer.special(), limits).map_err(|error| {
        let question = error.question().map(|i| questions[order[i]].id.clone());
        PrepareError::Pack { error, question }
    })?;
    Ok(Prepared {
        packed,
        order,
        sorted_options,
    })
}

/// The additive attention bias of one row of width `width` (`0` where a token may attend,
/// `f32::MIN` where it may not), row-major `width x width`. Positions past the packed length
/// are padding.
pub fn attention_bias(segments: &[Segment], width: usize, out: &mut Vec<f32>) {
    out.reserve(width * width);
    for i in 0..width {
        let from = segments.get(i).copied().unwrap_or(Segment::Padding);
        for j in 0..width {
            let to = segments.get(j).copied().unwrap_or(Segment::Padding);
            let visible = if from == Segment::Padding {
                i == j
            } else {
                from.sees(to)
            };
            out.push(if visible { 0.0 } else { f32::MIN });
        }
    }
}

// Masks are exact values (0 or f32::MIN), and exactness is what the tests check.
#[cfg(test)]
#[allow(clippy::float_cmp)]
mod tests {
    use super::*;

    const SPECIAL: Special = Special {
        cls: 101,
        sep: 102,
        mask: 103,
        pad: 0,
    };
    const ROOMY: Limits = Limits {
        max_positions: 512,
        max_tokens: 100_000,
        max_state_tokens: 100_000,
    };

    fn question(text: &[u32], options: &[&[u32]]) -> QuestionTokens {
        QuestionTokens {
            text: text.to_vec(),
            options: options.iter().map(|o| o.to_vec()).collect(),
        }
    }

    #[test]
    fn layout_and_positions_follow_the_design() {
        let packed = pack(
            &[7, 8],
            &[
                question(&[20, 21], &[&[30], &[31, 32]]),
                question(&[40], &[&[50], &[51]]),
            ],
            SPECIAL,
            ROOMY,
        )
        .unwrap();
        assert_eq!(
            packed.tokens,
            vec![
                101, 7, 8, 102, // state
                20, 21, 102, 103, 30, 102, 103, 31, 32, 102, // question 0
                40, 102, 103, 50, 102, 103, 51, 102, // question 1
            ]
        );
        assert_eq!(
            packed.positions,
            vec![
                0, 1, 2, 3, //
                4, 5, 6, 7, 8, 9, 7, 8, 9, 10, //
                4, 5, 6, 7, 8, 6, 7, 8,
            ]
        );
        assert_eq!(packed.slots, vec![vec![7, 10], vec![16, 19]]);
        assert_eq!(packed.segments[6], Segment::Question(0));
        assert_eq!(packed.segments[12], Segment::Option(0, 1));
    }

    #[test]
    fn each_part_sees_exactly_what_the_design_allows() {
        use Segment::*;
        let all = [
            State(0),
            Question(0),
            Option(0, 0),
            Option(0, 1),
            Question(1),
            Option(1, 0),
        ];
        let sees =
            |a: Segment| -> Vec<Segment> { all.iter().copied().filter(|&b| a.sees(b)).collect() };
        assert_eq!(sees(State(0)), vec![State(0)]);
        assert_eq!(sees(Question(0)), vec![State(0), Question(0)]);
        assert_eq!(
            sees(Option(0, 1)),
            vec![State(0), Question(0), Option(0, 1)]
        );
        assert_eq!(
            sees(Option(1, 0)),
            vec![State(0), Question(1), Option(1, 0)]
        );
        assert!(!Padding.sees(Padding));
    }

    #[test]
    fn positions_do_not_grow_with_the_option_count() {
        let options: Vec<Vec<u32>> = (0..255).map(|i| vec![1000 + i, 2000 + i]).collect();
        let refs: Vec<&[u32]> = options.iter().map(Vec::as_slice).collect();
        let packed = pack(&[7; 100], &[question(&[9; 20], &refs)], SPECIAL, ROOMY).unwrap();
        assert!(packed.len() > 1000, "longer than the position table");
        // The state takes 0..=101, the question 102..=122; every option's slot sits at 123 and
        // its two tokens and [SEP] at 124..=126.
        assert_eq!(*packed.positions.iter().max().unwrap(), 126);
    }

    #[test]
    fn limits_name_what_does_not_fit() {
        let tight = Limits {
            max_positions: 8,
            max_tokens: 20,
            max_state_tokens: 12,
        };
        // Longer than the table is read in windows; longer than the state limit is refused.
        assert!(pack(&[1; 12], &[], SPECIAL, tight).is_ok());
        let err = pack(&[1; 13], &[], SPECIAL, tight).unwrap_err();
        assert_eq!(
            err,
            PackError::StateTooLong {
                tokens: 13,
                limit: 12
            }
        );
        assert!(err.to_string().contains("maximum context length"));
        let err = pack(&[1, 2], &[question(&[3], &[&[4, 5, 6]])], SPECIAL, tight).unwrap_err();
        assert_eq!(err.question(), Some(0));
        let many: Vec<&[u32]> = vec![&[4]; 6];
        let err = pack(&[1], &[question(&[3], &many)], SPECIAL, tight).unwrap_err();
        assert!(matches!(err, PackError::TooManyTokens { question: 0, .. }));
    }

    #[test]
    fn windows_cover_the_state_overlapping_and_end_on_its_last_token() {
        assert_eq!(windows(10, 10, 3), vec![0..10]);
        assert_eq!(windows(11, 10, 3), vec![0..10, 1..11]);
        assert_eq!(windows(30, 10, 3), vec![0..10, 7..17, 14..24, 20..30]);
        assert_eq!(windows(100, 510, WINDOW_OVERLAP), vec![0..100]);
        assert_eq!(window_size(512), 382);
        for len in [511, 1_000, 16_384] {
            let runs = windows(len, 382, WINDOW_OVERLAP);
            assert_eq!(runs[0].start, 0);
            assert_eq!(runs.last().unwrap().end, len);
            assert!(runs.iter().all(|r| r.len() == 382));
            assert!(
                runs.windows(2)
                    .all(|w| w[1].start > w[0].start && w[1].start + WINDOW_OVERLAP <= w[0].end)
            );
            // Linear: about len / (510 - overlap) windows.
            assert!(runs.len() <= len / (382 - WINDOW_OVERLAP) + 2);
        }
    }

    #[test]
    fn a_long_state_is_read_in_windows_and_its_questions_follow_the_longest() {
        let limits = Limits {
            max_positions: 20,
            max_tokens: 1_000,
            max_state_tokens: 100,
        };
        let packed = pack(&[7; 30], &[question(&[9], &[&[4], &[5]])], SPECIAL, limits).unwrap();
        // Windows of 8 state tokens (half of 20 left to the questions, as the room is at least
        // 64 or half the table, less [CLS] and [SEP]); the overlap is wider than that, so one
        // starts at every token: 0..8 to 21..29, then 22..30.
        let windows_seen: Vec<u32> = packed
            .segments
            .iter()
            .filter_map(|s| match s {
                Segment::State(w) => Some(*w),
                _ => None,
            })
            .collect();
        assert_eq!(windows_seen.iter().max(), Some(&22));
        // Every window starts with [CLS] at position 0.
        for (i, s) in packed.segments.iter().enumerate() {
            if matches!(s, Segment::State(_)) && packed.tokens[i] == SPECIAL.cls {
                assert_eq!(packed.positions[i], 0);
            }
        }
        assert!(packed.positions.iter().all(|&p| p < 20));
        // The question starts after the windows' 10 positions, whatever its options.
        let first_question = packed
            .segments
            .iter()
            .position(|s| matches!(s, Segment::Question(_)))
            .unwrap();
        assert_eq!(packed.positions[first_question], 10);
        // A window sees only itself; the question sees every window.
        assert!(!Segment::State(0).sees(Segment::State(1)));
        assert!(Segment::Question(0).sees(Segment::State(1)));
        assert!(Segment::Option(0, 1).sees(Segment::State(0)));
    }

    #[test]
    fn the_bias_masks_padding_and_other_questions() {
        let packed = pack(&[7], &[question(&[], &[&[1], &[2]])], SPECIAL, ROOMY).unwrap();
        let width = packed.len() + 1;
        let mut bias = Vec::new();
        attention_bias(&packed.segments, width, &mut bias);
        let at = |i: usize, j: usize| bias[i * width + j] == 0.0;
        // Option 0's slot (index 4) sees the state (0..3), the question's [SEP] (3) and itself.
        assert!((0..4).all(|j| at(4, j)));
        assert!((4..7).all(|j| at(4, j)));
        assert!((7..10).all(|j| !at(4, j)), "not the other option");
        assert!(!at(4, width - 1), "not padding");
        assert!(at(width - 1, width - 1), "padding sees only itself");
        assert!((0..width - 1).all(|j| !at(width - 1, j)));
    }
}
