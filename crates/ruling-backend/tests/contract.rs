//! The contract check against a small hand-written backend, and against broken variants of
//! it: each variant breaks one promise, and the check must name that promise.

use ruling_backend::{
    Backend, BackendError, BackendInfo, Branch, BranchLogits, ChatMessage, ContractError,
    DEFAULT_CODES, Role, SPLIT_MARKER, split_prompt, verify_backend,
};

/// How the toy's chat template misbehaves, if at all.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Template {
    /// ChatML, like SmolLM2 and Qwen.
    ChatMl,
    /// ChatML that raises on a system turn, like Gemma's.
    NoSystemRole,
    /// Upper-cases the user text, destroying the split marker.
    Shouting,
    /// Writes the user text's length into the turn header, so the prefix depends on the rest.
    LengthInHeader,
    /// Writes the user text's length after the turn, so the tail depends on the question.
    LengthInTail,
}

/// A greedy longest-match tokenizer over ChatML markers, a few multi-character pieces and
/// single characters, a ChatML template, and a "model" whose logits are a fixed function of
/// the tokens. Small enough to reason about, real enough to break in each way a host can.
#[derive(Debug)]
struct Toy {
    info: BackendInfo,
    template: Template,
    pieces: Vec<String>,
    /// Characters the tokenizer folds onto another one before encoding.
    folds: Vec<(char, char)>,
    /// Return one logit fewer than asked for.
    drop_a_logit: bool,
}

impl Toy {
    fn new() -> Self {
        Self {
            info: BackendInfo {
                model_id: "toy".into(),
                revision: None,
                context_length: 4096,
                vision: None,
                max_token_bytes: 0,
                adapter_digest: None,
            },
            template: Template::ChatMl,
            pieces: [
                "<|im_start|>",
                "<|im_end|>",
                "the",
                "Question",
                "Answer",
                "state",
                "\n\n",
            ]
            .map(String::from)
            .to_vec(),
            folds: Vec::new(),
            drop_a_logit: false,
        }
    }

    fn with_template(mut self, template: Template) -> Self {
        self.template = template;
        self
    }

    fn with_piece(mut self, piece: &str) -> Self {
        self.pieces.push(piece.to_owned());
        self
    }
}

impl Backend for Toy {
    type Prefix = Vec<u32>;

    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        let mut out = String::new();
        let mut user_len = 0;
        for message in messages {
            if message.role == Role::System && self.template == Template::NoSystemRole {
                return Err(BackendError::Template {
                    message: "system role not supported".into(),
                    source: None,
                });
            }
            let content = match self.template {
                Template::Shouting => message.content.to_uppercase(),
                _ => message.content.clone(),
            };
            let header = match (self.template, message.role) {
                (Template::LengthInHeader, Role::User) => format!("user {}", content.len()),
                (_, role) => role.as_str().to_owned(),
            };
            if message.role == Role::User {
                user_len = content.len();
            }
            out.push_str(&format!("<|im_start|>{header}\n{content}<|im_end|>\n"));
        }
        if self.template == Template::LengthInTail {
            out.push_str(&format!("({user_len})"));
        }
        out.push_str("<|im_start|>assistant\n");
        Ok(out)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        let folded: String = text
            .chars()
            .map(|c| {
                self.folds
                    .iter()
                    .find(|(from, _)| *from == c)
                    .map_or(c, |(_, to)| *to)
            })
            .collect();
        let mut ids = Vec::new();
        let mut rest = folded.as_str();
        while let Some(c) = rest.chars().next() {
            let longest = self
                .pieces
                .iter()
                .enumerate()
                .filter(|(_, piece)| rest.starts_with(piece.as_str()))
                .max_by_key(|(_, piece)| piece.len());
            match longest {
                Some((id, piece)) => {
                    ids.push(id as u32);
                    rest = &rest[piece.len()..];
                }
                None => {
                    ids.push(1000 + c as u32);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        Ok(ids)
    }

    fn encode_prefix(&self, tokens: &[u32]) -> Result<Vec<u32>, BackendError> {
        Ok(tokens.to_vec())
    }

    fn prefix_len(&self, prefix: &Vec<u32>) -> usize {
        prefix.len()
    }

    fn prefix_bytes(&self, prefix: &Vec<u32>) -> usize {
        prefix.len() * 4
    }

    fn score_branches(
        &self,
        prefix: &Vec<u32>,
        branches: &[Branch<'_>],
    ) -> Result<Vec<BranchLogits>, BackendError> {
        Ok(branches
            .iter()
            .map(|branch| {
                let seen = prefix.len() + branch.tokens.len();
                let last = branch.tokens.last().copied().unwrap_or(0) as usize;
                let keep = branch.codes.len() - usize::from(self.drop_a_logit);
                let logits: Vec<f32> = branch.codes[..keep]
                    .iter()
                    .map(|&code| ((last * 31 + code as usize * 17 + seen) % 13) as f32 / 4.0)
                    .collect();
                let lse = logits.iter().map(|l| l.exp()).sum::<f32>().ln() + 1.0;
                BranchLogits {
                    logits,
                    log_normalizer: lse,
                    unread: Vec::new(),
                }
            })
            .collect())
    }
}

#[test]
fn a_well_behaved_backend_passes_and_proves_its_codes() {
    let toy = Toy::new();
    let report = verify_backend(&toy, &DEFAULT_CODES[..6]).unwrap();
    assert_eq!(report.codes.labels(), ["A", "B", "C", "D", "E", "F"]);
    assert_eq!(report.codes.ids(), [1065, 1066, 1067, 1068, 1069, 1070]);
    assert!(report.probe_prefix_tokens > 10);
    assert!((report.probe_candidate_mass - (-1.0f64).exp()).abs() < 1e-5);
}

#[test]
fn a_template_without_system_role_gets_the_system_text_in_the_user_turn() {
    let toy = Toy::new().with_template(Template::NoSystemRole);
    assert!(!toy.accepts_system_role());
    let split = split_prompt(&toy, "Be brief.", "the state").unwrap();
    assert_eq!(split.prefix, "<|im_start|>user\nBe brief.\n\nthe state");
    assert_eq!(split.tail, "<|im_end|>\n<|im_start|>assistant\n");
    verify_backend(&toy, &DEFAULT_CODES[..2]).unwrap();
}

#[test]
fn the_split_puts_the_state_in_the_prefix_and_the_turn_end_in_the_tail() {
    let split = split_prompt(&Toy::new(), "sys", "the state").unwrap();
    assert_eq!(
        split.prefix,
        "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nthe state"
    );
    assert_eq!(split.tail, "<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn a_state_holding_the_marker_is_refused() {
    let state = format!("look: {SPLIT_MARKER}");
    let err = split_prompt(&Toy::new(), "sys", &state).unwrap_err();
    assert!(
        matches!(err, ContractError::StateContainsMarker { .. }),
        "{err}"
    );
}

#[test]
fn a_template_that_rewrites_content_loses_the_marker() {
    let err = verify_backend(
        &Toy::new().with_template(Template::Shouting),
        &DEFAULT_CODES[..4],
    )
    .unwrap_err();
    assert!(
        matches!(err, ContractError::MarkerNotPreserved { found: 0 }),
        "{err}"
    );
}

#[test]
fn a_prefix_that_depends_on_the_question_is_caught() {
    let err = verify_backend(
        &Toy::new().with_template(Template::LengthInHeader),
        &DEFAULT_CODES[..4],
    )
    .unwrap_err();
    let ContractError::PrefixNotPrefix { at, .. } = err else {
        panic!("{err}")
    };
    // The first difference is the length digits in the user header.
    assert!(at > "<|im_start|>system\n".len(), "{at}");
}

#[test]
fn a_tail_that_depends_on_the_question_is_caught() {
    let err = verify_backend(
        &Toy::new().with_template(Template::LengthInTail),
        &DEFAULT_CODES[..4],
    )
    .unwrap_err();
    assert!(matches!(err, ContractError::TailMismatch { .. }), "{err}");
}

#[test]
fn a_token_spanning_the_split_is_caught() {
    // The probe state ends with "backend.\n" and the question starts with "Question".
    let err = verify_backend(&Toy::new().with_piece(".\nQ"), &DEFAULT_CODES[..4]).unwrap_err();
    let ContractError::TokenBoundary {
        apart, together, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_ne!(apart, together);
}

#[test]
fn a_code_that_merges_with_the_prompt_is_named() {
    let err = verify_backend(&Toy::new().with_piece("\nC"), &DEFAULT_CODES[..6]).unwrap_err();
    let ContractError::CodeNotSingleToken { code, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(code, "C");
}

#[test]
fn a_code_longer_than_one_token_is_named() {
    let err = verify_backend(&Toy::new(), &["A", "B", "yes"]).unwrap_err();
    let ContractError::CodeNotSingleToken { code, tokens } = &err else {
        panic!("{err}")
    };
    assert_eq!(code, "yes");
    assert_eq!(tokens.len(), 3);
}

#[test]
fn codes_that_share_a_token_are_named() {
    let mut toy = Toy::new();
    toy.folds.push(('B', 'A'));
    let err = verify_backend(&toy, &DEFAULT_CODES[..3]).unwrap_err();
    let ContractError::CodesCollide { first, second, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!((first.as_str(), second.as_str()), ("A", "B"));
}

#[test]
fn one_code_is_too_few() {
    let err = verify_backend(&Toy::new(), &["A"]).unwrap_err();
    assert!(
        matches!(err, ContractError::TooFewCodes { given: 1 }),
        "{err}"
    );
}

#[test]
fn a_scorer_returning_the_wrong_width_is_caught() {
    let mut toy = Toy::new();
    toy.drop_a_logit = true;
    let err = verify_backend(&toy, &DEFAULT_CODES[..4]).unwrap_err();
    assert!(matches!(err, ContractError::BadScores { .. }), "{err}");
    assert!(err.to_string().contains("widths [3]"), "{err}");
}

#[test]
fn candidate_mass_is_the_share_of_the_full_distribution() {
    let scored = BranchLogits {
        logits: vec![0.0, 0.0],
        log_normalizer: 2f32.ln(),
        unread: Vec::new(),
    };
    assert!((scored.candidate_mass() - 1.0).abs() < 1e-6);
    let half = BranchLogits {
        logits: vec![0.0, 0.0],
        log_normalizer: 4f32.ln(),
        unread: Vec::new(),
    };
    assert!((half.candidate_mass() - 0.5).abs() < 1e-6);
}
