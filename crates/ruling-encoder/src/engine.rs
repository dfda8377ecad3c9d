//! `EncoderEngine`: a trained decision checkpoint behind the `Engine` port.
//!
//! One request is one forward pass: the state and every question packed into one sequence,
//! each option's slot scored, a softmax over each question's slots. There are no rotations and
//! no prior (the layout is order-invariant by construction), so a calibration for this engine
//! is fitted for one rotation without the prior, and its provenance names the checkpoint and
//! the sha256 of its weights.
//!
//! Questions are packed in id order and options in key order, whatever order the request lists
//! them in: the same questions always make the same sequence, so reordering a request cannot
//! change a single bit of its answers. With the layout's aligned parts (`layout`), neither can
//! asking other questions alongside.

use std::path::Path;

use candle_core::{Device, Tensor};
use ruling_backend::{Engine, EngineError, EngineInfo};
use ruling_calibration::{AnswerType, Calibration, Provenance, log_softmax};
use ruling_schema::{
    EngineKind, EvaluationTrace, QuestionKind, QuestionTrace, RotationTrace, SystemOneResponse,
    Usage, ValidQuestion, ValidRequest,
};

use crate::checkpoint::{CALIBRATION_FILE, CheckpointMeta, EncoderFiles};
use crate::error::EncoderError;
use crate::model::{BatchTensors, DecisionModel};
use crate::ops::Kernels;
use crate::pack::{EncoderQuestion, Limits, PackError, PrepareError, Prepared, prepare};
use crate::tokenizer::EncoderTokenizer;

/// The most tokens of state one request may carry, by default; a longer state is refused
/// with the "maximum context length" marker.
pub const DEFAULT_MAX_STATE_TOKENS: usize = 16_384;

/// The most tokens one request may pack, by default: a state at its limit read in windows
/// (about 15% more tokens than it has), and a few hundred options of a few tokens.
pub const DEFAULT_MAX_REQUEST_TOKENS: usize = 32_768;

/// How to serve a checkpoint.
#[derive(Debug, Clone)]
pub struct EncoderOptions {
    /// The name responses carry (default: the checkpoint's name).
    pub served_name: Option<String>,
    /// A calibration fitted for this checkpoint; without one, the checkpoint's own
    /// `calibration.json` when it has one, else no temperature scaling.
    pub calibration: Option<Calibration>,
    /// Most tokens one request may pack.
    pub max_request_tokens: usize,
    /// Most tokens of state one request may carry (read in windows past the position table).
    pub max_state_tokens: usize,
    /// How the model computes. The default, [`Kernels::FusedBf16`], multiplies the dense
    /// layers in bf16 where the CPU has AMX tiles or AVX-512 BF16 (f32 elsewhere);
    /// [`Kernels::Fused`] keeps every product in f32.
    pub kernels: Kernels,
}

impl Default for EncoderOptions {
    fn default() -> Self {
        Self {
            served_name: None,
            calibration: None,
            max_request_tokens: DEFAULT_MAX_REQUEST_TOKENS,
            max_state_tokens: DEFAULT_MAX_STATE_TOKENS,
            kernels: Kernels::FusedBf16,
        }
    }
}

/// Log-probabilities of every question of a request, in the request's question order; within
/// a question, keys in sorted order (the order they were packed and normalised in).
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub questions: Vec<ScoredQuestion>,
    /// Tokens in the packed sequence.
    pub tokens: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScoredQuestion {
    pub keys: Vec<String>,
    pub log_probabilities: Vec<f64>,
    /// Tokens of the question's text and options.
    pub tokens: usize,
}

/// A decision checkpoint, loaded and ready to answer.
#[derive(Debug)]
pub struct EncoderEngine {
    model: DecisionModel,
    tokenizer: EncoderTokenizer,
    meta: CheckpointMeta,
    calibration: Calibration,
    info: EngineInfo,
    limits: Limits,
    device: Device,
}

impl EncoderEngine {
    /// Open a trained checkpoint directory, check it whole, and bind a calibration.
    pub fn load(dir: &Path, options: EncoderOptions) -> Result<Self, EncoderError> {
        let files = EncoderFiles::open(dir)?;
        let model = files.serving_model(options.kernels)?;
        let meta = files.meta.clone().ok_or_else(|| EncoderError::NotTrained {
            dir: dir.to_owned(),
        })?;
        let provenance = provenance(&meta);
        let calibration = match options.calibration {
            Some(calibration) => Some(calibration),
            None if dir.join(CALIBRATION_FILE).is_file() => {
                Some(Calibration::load(dir.join(CALIBRATION_FILE))?)
            }
            None => None,
        };
        let calibration = match calibration {
            Some(calibration) => {
                calibration.check(&provenance)?;
                calibration
            }
            None => Calibration::identity(provenance),
        };
        let max_positions = files.config.max_positions();
        let info = EngineInfo {
            model: options.served_name.unwrap_or_else(|| meta.name.clone()),
            capabilities: ruling_schema::Capabilities::default(),
            max_context: options.max_state_tokens,
        };
        Ok(Self {
            model,
            tokenizer: files.tokenizer,
            meta,
            calibration,
            info,
            limits: Limits {
                max_positions,
                max_tokens: options.max_request_tokens,
                max_state_tokens: options.max_state_tokens,
            },
            device: Device::Cpu,
        })
    }

    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    pub fn meta(&self) -> &CheckpointMeta {
        &self.meta
    }

    /// The uncalibrated log-probabilities of every question about `state`.
    pub fn score(&self, state: &str, questions: &[EncoderQuestion]) -> Result<Scored, EngineError> {
        let Prepared {
            packed,
            order,
            sorted_options,
        } = prepare(&self.tokenizer, state, questions, self.limits).map_err(|e| match e {
            PrepareError::Pack { error, question } => too_long(&error, question),
            PrepareError::Tokenizer(e) => backend(e),
        })?;
        let batch = BatchTensors::new(&[&packed], &self.device).map_err(forward)?;
        let slots = batch.slot_indices(&[&packed]);
        let slots = Tensor::from_vec(
            slots,
            packed.slots.iter().map(Vec::len).sum::<usize>(),
            &self.device,
        )
        .map_err(forward)?;
        let scores: Vec<f32> = self
            .model
            .slot_scores(&batch, &slots)
            .and_then(|s| s.to_vec1())
            .map_err(forward)?;

        let mut scored: Vec<Option<ScoredQuestion>> = vec![None; questions.len()];
        let mut cursor = 0;
        for (packed_index, &q) in order.iter().enumerate() {
            let question = &questions[q];
            let count = question.options.len();
            let logits: Vec<f64> = scores[cursor..cursor + count]
                .iter()
                .map(|&s| f64::from(s))
                .collect();
            cursor += count;
            // Normalised in key order, so the result is the same whatever order was asked.
            let log_probabilities = log_softmax(&logits)?;
            let tokens = packed.segments.iter().filter(|s| match s {
                crate::pack::Segment::Question(i) | crate::pack::Segment::Option(i, _) => {
                    *i as usize == packed_index
                }
                _ => false,
            });
            scored[q] = Some(ScoredQuestion {
                keys: sorted_options[q]
                    .iter()
                    .map(|&o| question.options[o].0.clone())
                    .collect(),
                log_probabilities,
                tokens: tokens.count(),
            });
        }
        Ok(Scored {
            questions: scored.into_iter().flatten().collect(),
            tokens: packed.len(),
        })
    }
}

/// What a calibration of the checkpoint `meta` describes must have been fitted for: its name
/// and weights digest, one rotation, no prior.
pub fn provenance(meta: &CheckpointMeta) -> Provenance {
    Provenance {
        model_id: meta.name.clone(),
        revision: Some(meta.weights_sha256.clone()),
        rotations: 1,
        prior: false,
        adapter_digest: None,
    }
}

fn answer_type(question: &ValidQuestion) -> AnswerType {
    match question.kind() {
        QuestionKind::Noul { .. } => AnswerType::Noul,
        QuestionKind::Score { .. } => AnswerType::Score,
        _ => AnswerType::Choice,
    }
}

fn too_long(error: &PackError, question: Option<String>) -> EngineError {
    let message = match &question {
        Some(id) => format!("question {id:?}: {error}"),
        None => error.to_string(),
    };
    EngineError::InputTooLong { question, message }
}

fn forward(error: candle_core::Error) -> EngineError {
    EngineError::Backend(ruling_backend::BackendError::Forward {
        source: Box::new(error),
    })
}

fn backend(error: EncoderError) -> EngineError {
    EngineError::Backend(ruling_backend::BackendError::Tokenizer {
        source: Box::new(error),
    })
}

impl Engine for EncoderEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn provenance(&self) -> Provenance {
        provenance(&self.meta)
    }

    fn evaluate(&self, request: &ValidRequest) -> Result<SystemOneResponse, EngineError> {
        let mut questions = Vec::with_capacity(request.questions().len());
        for question in request.questions() {
            match EncoderQuestion::from_valid(question) {
                Some(q) => questions.push(q),
                None => {
                    return Err(EngineError::Unsupported(format!(
                        "question {:?}: box questions need a vision model; this engine reads text only",
                        question.id()
                    )));
                }
            }
        }
        let scored = self.score(&request.state().render(), &questions)?;
        let mut answers = indexmap::IndexMap::with_capacity(questions.len());
        let mut traces = indexmap::IndexMap::new();
        for (question, result) in request.questions().iter().zip(&scored.questions) {
            let temperature = self.calibration.temperature(answer_type(question));
            let answer = ruling_backend::answer(
                question,
                &result.keys,
                &result.log_probabilities,
                temperature,
            )?;
            answers.insert(question.id().to_owned(), answer);
            if request.trace() {
                traces.insert(
                    question.id().to_owned(),
                    QuestionTrace {
                        rotations: vec![RotationTrace {
                            order: result.keys.clone(),
                            log_probabilities: result.log_probabilities.clone(),
                            prior: None,
                            unread: Vec::new(),
                        }],
                        temperature,
                        candidate_mass: Vec::new(),
                        branch_tokens: vec![result.tokens],
                        question_prefix_tokens: Vec::new(),
                        stage_one: None,
                    },
                );
            }
        }
        Ok(SystemOneResponse {
            model: self.info.model.clone(),
            answers,
            usage: Usage {
                input_tokens: scored.tokens as u64,
                output_tokens: 0,
            },
            evaluation_trace: request.trace().then(|| EvaluationTrace {
                engine: EngineKind::Encoder,
                questions: traces,
                prefix_tokens: scored.tokens,
                prefix_cached: None,
            }),
        })
    }
}
