//! `openai:URL#MODEL`: the [`Backend`] port over an OpenAI-compatible completions endpoint.
//!
//! Nothing runs here but the model's tokenizer and chat template (from its GGUF or tokenizer
//! files): the decoder engine renders and splits every prompt exactly as it does for a local
//! model, and each branch becomes one `POST /completions` of the prefix's text and the
//! branch's, `max_tokens` 1, with `logprobs: N`. The answer codes' log-probabilities are read
//! from the first token's top N; log-probabilities are already normalised, so they stand in
//! for logits with a log-normaliser of 0, and the candidate mass comes out right. A code
//! outside the top N is not invented: it counts as impossible in that order and is listed in
//! the trace (`unread`).
//!
//! Which servers do what (read from their sources): llama.cpp's server and
//! llama-cpp-python's return up to any N (llama-cpp-python needs `logits_all`, its server's
//! default); vLLM up to its `--max-logprobs` (20 unless raised); OpenAI's own legacy
//! completions at most 5. A `logit_bias` on the codes would force them into the top N, but
//! llama-cpp-python applies it after computing log-probabilities, so it is not used.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use ruling_backend::{
    Backend, BackendError, BackendInfo, Branch, BranchLogits, Cancel, ChatMessage, UpstreamFailure,
};
use ruling_candle::ChatText;
use serde_json::{Value, json};

use crate::upstream::{Upstream, UpstreamOptions, excerpt};

/// How the completions server is read.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// Log-probabilities asked for per branch (`logprobs`): the answer codes must be among
    /// them to be read.
    pub top_logprobs: usize,
    /// The longest prompt the server takes, in tokens (its context, not the model's trained
    /// one: llama.cpp servers are often started with less).
    pub context_length: usize,
    pub upstream: UpstreamOptions,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        Self {
            top_logprobs: 20,
            context_length: 4096,
            upstream: UpstreamOptions::default(),
        }
    }
}

/// A decoder whose forward passes run on an OpenAI-compatible server.
#[derive(Debug)]
pub struct OpenAiBackend {
    upstream: Upstream,
    /// The model the server is asked for.
    model: String,
    text: ChatText,
    info: BackendInfo,
    top_logprobs: usize,
    /// Each code's text as the server names tokens in its log-probabilities.
    code_text: Mutex<HashMap<u32, String>>,
}

/// A prefix "encoded" remotely: its text, sent again with every branch (servers that cache
/// prompts, as llama.cpp's and vLLM's do, reuse its keys and values themselves).
#[derive(Debug, Clone)]
pub struct RemotePrefix {
    text: String,
    tokens: usize,
}

impl OpenAiBackend {
    /// A backend for `model` on the server at `base` (the API root, as in
    /// `http://host:8080/v1`), rendering and encoding with `text`, the model's own chat
    /// template and tokenizer. `model_id` and `revision` are what calibration files name: the
    /// local model whose files `text` came from, which the server is taken to run. The
    /// server is asked for its models once, so a wrong address or model fails here.
    pub fn connect(
        base: &str,
        model: &str,
        text: ChatText,
        model_id: String,
        revision: Option<String>,
        options: OpenAiOptions,
    ) -> Result<Self, BackendError> {
        let upstream = Upstream::new(base, options.upstream.clone());
        let listed = upstream.get("/models")?;
        let names: Vec<&str> = listed["data"]
            .as_array()
            .map(|models| models.iter().filter_map(|m| m["id"].as_str()).collect())
            .unwrap_or_default();
        if !names.contains(&model) {
            return Err(upstream
                .error(
                    UpstreamFailure::Failed,
                    format!("it serves no model {model:?} (its /models lists {names:?}); name one of them after #"),
                )
                .into());
        }
        // Prompts travel as text: the tokens the engine planned must come back from it.
        let probe = text.render_chat(&[ChatMessage::new(
            ruling_backend::Role::User,
            "A probe: does this text survive encoding and decoding?",
        )])?;
        let decoded = text.decode(&text.encode(&probe)?)?;
        if decoded != probe {
            return Err(BackendError::Tokenizer {
                source: format!(
                    "decoding the encoded prompt does not give it back ({:?} became {:?}), so \
                     prompts cannot be sent to a server as text",
                    excerpt(&probe),
                    excerpt(&decoded)
                )
                .into(),
            });
        }
        let info = BackendInfo {
            model_id,
            revision,
            context_length: options.context_length,
            vision: None,
            max_token_bytes: text.tokenizer().max_token_bytes(),
            adapter_digest: None,
        };
        Ok(Self {
            upstream,
            model: model.to_owned(),
            text,
            info,
            top_logprobs: options.top_logprobs.max(1),
            code_text: Mutex::new(HashMap::new()),
        })
    }

    /// The text the server gives code `id` in its log-probabilities.
    fn code_text(&self, id: u32) -> Result<String, BackendError> {
        let mut known = self
            .code_text
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(text) = known.get(&id) {
            return Ok(text.clone());
        }
        let text = self.text.decode(&[id])?;
        known.insert(id, text.clone());
        Ok(text)
    }

    /// One branch's completion: the codes' log-probabilities among the top ones.
    fn score_one(
        &self,
        prefix: &RemotePrefix,
        branch: &Branch<'_>,
    ) -> Result<BranchLogits, BackendError> {
        let prompt = format!("{}{}", prefix.text, self.text.decode(branch.tokens)?);
        let body = json!({
            "model": self.model,
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": self.top_logprobs,
            "echo": false,
        });
        let answer = self.upstream.post("/completions", &body)?;
        let top = first_top_logprobs(&answer).ok_or_else(|| {
            self.upstream.error(
                UpstreamFailure::Failed,
                format!(
                    "its completion carries no top log-probabilities (choices[0].logprobs.top_logprobs[0]): {}",
                    excerpt(&answer.to_string())
                ),
            )
        })?;
        let mut logits = Vec::with_capacity(branch.codes.len());
        let mut unread = Vec::new();
        for (i, &code) in branch.codes.iter().enumerate() {
            match top.get(&self.code_text(code)?) {
                Some(lp) => logits.push(*lp as f32),
                None => {
                    logits.push(f32::NEG_INFINITY);
                    unread.push(i);
                }
            }
        }
        if unread.len() == logits.len() {
            return Err(self
                .upstream
                .error(
                    UpstreamFailure::Failed,
                    format!(
                        "none of the {} answer codes is among the top {} log-probabilities it \
                         reported; ask for more (the spec's server must allow them)",
                        logits.len(),
                        self.top_logprobs
                    ),
                )
                .into());
        }
        Ok(BranchLogits {
            logits,
            // Log-probabilities are normalised already.
            log_normalizer: 0.0,
            unread,
        })
    }
}

/// `choices[0].logprobs.top_logprobs[0]` as token text -> log-probability.
fn first_top_logprobs(answer: &Value) -> Option<HashMap<String, f64>> {
    let top = answer["choices"][0]["logprobs"]["top_logprobs"][0].as_object()?;
    Some(
        top.iter()
            .filter_map(|(token, lp)| lp.as_f64().map(|lp| (token.clone(), lp)))
            .collect(),
    )
}

impl Backend for OpenAiBackend {
    type Prefix = RemotePrefix;

    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        self.text.render_chat(messages)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.text.encode(text)
    }

    fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.text.encode_continuation(text)
    }

    fn encode_prefix(&self, tokens: &[u32]) -> Result<RemotePrefix, BackendError> {
        Ok(RemotePrefix {
            text: self.text.decode(tokens)?,
            tokens: tokens.len(),
        })
    }

    fn prefix_len(&self, prefix: &RemotePrefix) -> usize {
        prefix.tokens
    }

    fn prefix_bytes(&self, prefix: &RemotePrefix) -> usize {
        prefix.text.len()
    }

    fn score_branches(
        &self,
        prefix: &RemotePrefix,
        branches: &[Branch<'_>],
    ) -> Result<Vec<BranchLogits>, BackendError> {
        self.score_branches_until(prefix, branches, &Cancel::never())
    }

    /// Every branch one completion, up to the upstream's concurrency at once; no new one is
    /// sent once `cancel` says stop.
    fn score_branches_until(
        &self,
        prefix: &RemotePrefix,
        branches: &[Branch<'_>],
        cancel: &Cancel,
    ) -> Result<Vec<BranchLogits>, BackendError> {
        ruling_backend::check_branches(
            prefix.tokens,
            branches,
            self.info.context_length,
            self.text.tokenizer().vocab_size(),
        )?;
        let next = AtomicUsize::new(0);
        let results: Vec<Mutex<Option<Result<BranchLogits, BackendError>>>> =
            branches.iter().map(|_| Mutex::new(None)).collect();
        let workers = self
            .upstream
            .options()
            .concurrency
            .clamp(1, branches.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= branches.len() {
                            return;
                        }
                        let result = cancel
                            .check()
                            .and_then(|()| self.score_one(prefix, &branches[i]));
                        let failed = result.is_err();
                        *results[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
                        if failed {
                            // The call fails as a whole; stop taking more.
                            next.store(branches.len(), Ordering::SeqCst);
                            return;
                        }
                    }
                });
            }
        });
        let mut out = Vec::with_capacity(branches.len());
        let mut first_error = None;
        for slot in results {
            match slot.into_inner().unwrap_or_else(PoisonError::into_inner) {
                Some(Ok(logits)) => out.push(logits),
                Some(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                None => {}
            }
        }
        match first_error {
            Some(error) => Err(error),
            None if out.len() == branches.len() => Ok(out),
            None => Err(BackendError::Forward {
                source: "a branch was left unscored".into(),
            }),
        }
    }

    fn accepts_system_role(&self) -> bool {
        self.text.accepts_system_role()
    }
}
