//! The logit-readout port: what a host must do for the decision logic to read a distribution.

use crate::error::BackendError;
use crate::{Cancel, ImageBudget, Picture};

/// Who speaks a chat turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    /// The role's name as chat templates spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One turn of a conversation handed to the model's chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
        }
    }
}

/// What a backend tells the engine about itself, for limits, usage and provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// The model's identity as calibration files and reports name it.
    pub model_id: String,
    /// The exact revision of the weights, when the source has one.
    pub revision: Option<String>,
    /// The longest prefix plus branch the model can attend over, in tokens.
    pub context_length: usize,
    /// How the model reads images, if it does (and so accepts assets).
    pub vision: Option<VisionInfo>,
    /// The most bytes of text one token can stand for (0: unknown). A state longer than
    /// this many bytes per context token cannot fit, so it is refused without tokenizing it.
    pub max_token_bytes: usize,
    /// The digest of the LoRA adapter every forward pass applies, if any (calibration files
    /// name it, so one fitted for another adapter is refused).
    pub adapter_digest: Option<String>,
}

/// How a backend that reads images takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisionInfo {
    /// What the prompt's text holds where an image goes; the backend puts the image there.
    pub marker: String,
    /// How large one image may become: the engine resizes every image to it before the
    /// backend sees it.
    pub budget: ImageBudget,
}

/// One question's continuation after the shared prefix, and the answer codes to read after it.
///
/// `tokens` end where the model is to answer: the logits read are those predicting the token
/// that would follow the last one. `codes` are token ids, all inside the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Branch<'a> {
    pub tokens: &'a [u32],
    pub codes: &'a [u32],
}

/// What one branch yields: exactly the logits of its requested codes, and how much of the
/// full-vocabulary distribution they hold.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchLogits {
    /// One raw logit per requested code, in the order the codes were given.
    pub logits: Vec<f32>,
    /// log-sum-exp of the full-vocabulary logits at the answer position.
    pub log_normalizer: f32,
    /// The positions (in `codes`) whose logit the backend could not read, given as `-inf`: a
    /// remote server that reports only its top log-probabilities may leave a code out. Empty
    /// for a backend that reads logits itself.
    pub unread: Vec<usize>,
}

impl BranchLogits {
    /// Share of the full-vocabulary probability that fell on the requested codes.
    ///
    /// A low value means the restricted softmax over the codes is normalising noise: the
    /// model wanted to say something other than a code.
    pub fn candidate_mass(&self) -> f64 {
        let lse = f64::from(self.log_normalizer);
        let mass: f64 = self
            .logits
            .iter()
            .map(|&l| (f64::from(l) - lse).exp())
            .sum();
        mass.clamp(0.0, 1.0)
    }
}

/// A host that can run a decoder's forward pass and read answer-code logits.
///
/// The decision logic relies on four promises, which [`crate::verify_backend`] checks at load:
/// rendering a conversation and splitting it at the end of the state gives a prefix of the
/// whole render; encoding the prefix and the rest apart gives the same tokens as encoding them
/// together; every answer code is one token where it is read; and `score_branches` returns,
/// per branch and in order, one logit per requested code.
pub trait Backend: Send + Sync {
    /// An encoded prefix: on a decoder, its KV cache. Shared by every branch scored against it.
    type Prefix: Send + Sync;

    /// Identity, context length and modalities of the loaded model.
    fn info(&self) -> &BackendInfo;

    /// Render the model's chat template around `messages`, with the assistant's turn opened
    /// (the generation prompt) and any thinking mode switched off.
    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError>;

    /// Token ids for a text, adding no special tokens of its own (special tokens written in
    /// the text, such as a template's turn markers, are recognised as such).
    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError>;

    /// Token ids for a text that continues a prompt (a branch after its prefix, a stem's
    /// rest), where a tokenizer treats a text's start specially (SentencePiece's space prefix);
    /// the default is [`Self::encode`].
    fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.encode(text)
    }

    /// Run the prefix through the model once, so branches can be scored against it.
    fn encode_prefix(&self, tokens: &[u32]) -> Result<Self::Prefix, BackendError>;

    /// The tokens a prefix of `text` takes once each [`VisionInfo::marker`] in it is replaced by
    /// the picture of the same rank in `images`, without running it: what the engine checks
    /// against the context before any forward pass.
    fn count_prefix_with_images(
        &self,
        text: &str,
        images: &[&Picture],
    ) -> Result<usize, BackendError> {
        let _ = (text, images);
        Err(BackendError::TextOnly)
    }

    /// Run a prefix with images through the model once: `text` holds one
    /// [`VisionInfo::marker`] per picture, in order. Branches scored against the result
    /// continue its positions, which on a model with multimodal positions are fewer than its
    /// tokens. The default refuses: the model reads text only.
    fn encode_prefix_with_images(
        &self,
        text: &str,
        images: &[&Picture],
    ) -> Result<Self::Prefix, BackendError> {
        let _ = (text, images);
        Err(BackendError::TextOnly)
    }

    /// The number of tokens an encoded prefix holds.
    fn prefix_len(&self, prefix: &Self::Prefix) -> usize;

    /// The memory an encoded prefix holds, in bytes: what the prefix cache counts against
    /// its budget.
    fn prefix_bytes(&self, prefix: &Self::Prefix) -> usize;

    /// Extend an encoded prefix by `tokens`, leaving `prefix` as it was: the engine encodes a
    /// question's stem (shared by all its rotations) this way once, and scores each rotation's
    /// remaining tokens against the result. `None` (the default) when the backend cannot; the
    /// engine then sends whole branches.
    fn extend_prefix(
        &self,
        prefix: &Self::Prefix,
        tokens: &[u32],
    ) -> Result<Option<Self::Prefix>, BackendError> {
        let _ = (prefix, tokens);
        Ok(None)
    }

    /// Score every branch as a continuation of `prefix`, returning one entry per branch in
    /// the order given, each exactly as wide as that branch's `codes`.
    fn score_branches(
        &self,
        prefix: &Self::Prefix,
        branches: &[Branch<'_>],
    ) -> Result<Vec<BranchLogits>, BackendError>;

    /// [`score_branches`](Self::score_branches), stopping with [`BackendError::Stopped`] once
    /// `cancel` says so. The default looks once, before the call; a backend that splits the
    /// branches into several forward passes looks before each.
    fn score_branches_until(
        &self,
        prefix: &Self::Prefix,
        branches: &[Branch<'_>],
        cancel: &Cancel,
    ) -> Result<Vec<BranchLogits>, BackendError> {
        cancel.check()?;
        self.score_branches(prefix, branches)
    }

    /// Whether the chat template accepts a system turn. Templates that do not usually raise
    /// on one, so the default asks the template itself.
    fn accepts_system_role(&self) -> bool {
        self.render_chat(&[
            ChatMessage::new(Role::System, "s"),
            ChatMessage::new(Role::User, "u"),
        ])
        .is_ok()
    }
}

/// The port's preconditions on branches, checked before any forward pass: each branch fits the
/// context with its prefix, has at least one token, and reads codes inside the vocabulary.
/// Backends call it at the top of [`Backend::score_branches`].
pub fn check_branches(
    prefix_len: usize,
    branches: &[Branch<'_>],
    context_length: usize,
    vocab: usize,
) -> Result<(), BackendError> {
    for (index, branch) in branches.iter().enumerate() {
        let needed = prefix_len + branch.tokens.len();
        if needed > context_length {
            return Err(BackendError::ContextExceeded {
                branch: index,
                needed,
                limit: context_length,
            });
        }
        if branch.tokens.is_empty() {
            return Err(BackendError::InvalidBranch {
                branch: index,
                reason: "a branch needs at least one token".into(),
            });
        }
        if let Some(code) = branch.codes.iter().find(|&&c| c as usize >= vocab) {
            return Err(BackendError::InvalidBranch {
                branch: index,
                reason: format!("code id {code} is outside the vocabulary of {vocab}"),
            });
        }
    }
    Ok(())
}
