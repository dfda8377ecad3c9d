//! [`LlamaCppBackend`]: a GGUF decoder on llama.cpp behind the [`Backend`] port, tokenized and
//! templated by the project's own code so both backends read the same ids (or, for a
//! vocabulary that code cannot build, by llama.cpp's own: [`crate::text`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use llama_cpp_2::llama_backend::LlamaBackend as Runtime;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::mtmd::{MtmdBitmap, MtmdContext, MtmdContextParams};
use ruling_backend::{
    Backend, BackendError, BackendInfo, Branch, BranchLogits, Cancel, ChatMessage, Decoding,
    Generation, Generator, ImageBudget, Picture, Sampling, VisionInfo,
};
use ruling_candle::TextTokenizer;

use crate::error::LoadError;
use crate::text::{Text, llama_tokenize};
use crate::worker::{ContextShape, ImagePrompt, OwnedBranch, Pool, SavedPrefix};

/// KV cells a context holds unless asked for more: the cache is allocated whole at load, and
/// most models' trained windows (32K for Qwen2.5) would cost hundreds of MB per context.
pub const DEFAULT_CONTEXT: usize = 8192;
/// Tokens one decode call takes (prefill chunks, and the branches decoded together).
pub const DEFAULT_BATCH: usize = 2048;
/// Sequences per context: the prefix and up to this many minus one branches per decode.
pub const DEFAULT_SEQUENCES: usize = 64;

/// How to load and run a GGUF model on llama.cpp.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Contexts, one per thread that may score at once (the server's engine workers).
    pub contexts: usize,
    /// Threads each context computes with (default: the machine's cores over the contexts).
    pub threads: Option<usize>,
    /// Prefix plus branches decoded together, in tokens (default: [`DEFAULT_CONTEXT`], never
    /// more than the model was trained for).
    pub context_length: Option<usize>,
    /// The identity reported to calibration and reports (default: the file name).
    pub model_id: Option<String>,
    /// The exact revision of the weights, when known.
    pub revision: Option<String>,
    /// Most branches decoded together in one llama.cpp call (never more than 63 tokens
    /// together; see `worker.rs`). Default: as many as fit when this build's llama.cpp keeps
    /// weights in their file layout (`GGML_CPU_REPACK=OFF`, as the workspace builds it), where a
    /// branch then reads bit for bit the same alone or beside others; otherwise 1, because with
    /// repacked weights a token's result depends on its row in the call (measured on
    /// Qwen2.5-Coder-0.5B: 0.23 on a logit, docs/llama.md).
    pub branches_per_decode: usize,
    /// The vision projector (llama.cpp's `mmproj` GGUF) of a vision-language model: with it
    /// the model reads images in the state; without it, text only.
    pub mmproj: Option<PathBuf>,
    /// Most tokens one image may become (default
    /// [`ruling_backend::DEFAULT_MAX_IMAGE_TOKENS`]).
    pub max_image_tokens: u32,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            contexts: 1,
            threads: None,
            context_length: None,
            model_id: None,
            revision: None,
            branches_per_decode: if crate::worker::row_invariant_build() {
                DEFAULT_SEQUENCES - 1
            } else {
                1
            },
            mmproj: None,
            max_image_tokens: ruling_backend::DEFAULT_MAX_IMAGE_TOKENS,
        }
    }
}

/// llama.cpp's process-wide runtime, initialised on first use and never torn down (it may be
/// initialised only once, so a program that also calls llama.cpp directly takes it from here).
pub fn runtime() -> Result<&'static Runtime, LoadError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            // llama.cpp's own log lines go to tracing, where the binaries' filters apply.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            Runtime::init().map_err(|err| err.to_string())
        })
        .as_ref()
        .map_err(|err| LoadError::Runtime(err.clone()))
}

/// A GGUF decoder on llama.cpp's CPU kernels, ready to serve the [`Backend`] port.
pub struct LlamaCppBackend {
    /// The vision projector, when the model reads images. Declared first so it is freed
    /// before the model it points into.
    mtmd: Option<Arc<Mutex<MtmdContext>>>,
    info: BackendInfo,
    text: Text,
    vocab: usize,
    max_branch: usize,
    model: Arc<LlamaModel>,
    pool: Pool,
    next_prefix: AtomicU64,
}

impl std::fmt::Debug for LlamaCppBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaCppBackend")
            .field("info", &self.info)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// A prefix encoded on llama.cpp: its sequence saved, restorable into any of the backend's
/// contexts (so the engine's prefix cache works across requests and workers).
pub struct LlamaPrefix(Arc<SavedPrefix>);

impl LlamaPrefix {
    /// The cells the prefix holds and the position the next token takes: equal for text, the
    /// position smaller once an image's grid is in (multimodal positions).
    pub fn extent(&self) -> (usize, usize) {
        (self.0.len, self.0.next_pos)
    }
}

impl std::fmt::Debug for LlamaPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaPrefix")
            .field("tokens", &self.0.len)
            .field("next_position", &self.0.next_pos)
            .field("bytes", &self.0.state.byte_len())
            .finish()
    }
}

impl LlamaCppBackend {
    /// Load a `.gguf` file: weights into llama.cpp, tokenizer and chat template from its
    /// metadata by the project's own readers.
    pub fn load(path: &Path, options: &LoadOptions) -> Result<Self, LoadError> {
        if !path.is_file()
            || !path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            return Err(LoadError::NotGguf(path.into()));
        }
        let ours = Text::ours(path)?;
        let runtime = runtime()?;
        let model = LlamaModel::load_from_file(runtime, path, &LlamaModelParams::default())
            .map_err(|err| LoadError::Model {
                path: path.into(),
                message: err.to_string(),
            })?;
        let text = match ours {
            Ok(text) => text,
            Err(reason) => {
                tracing::info!(
                    "{}: tokenized by llama.cpp's own vocabulary ({reason})",
                    path.display()
                );
                Text::llama(path, &model)?
            }
        };
        let trained = model.n_ctx_train() as usize;
        let context_length = options
            .context_length
            .unwrap_or(DEFAULT_CONTEXT)
            .min(trained)
            .max(1);
        let contexts = options.contexts.max(1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = options.threads.unwrap_or((cores / contexts).max(1));
        let shape = ContextShape {
            n_ctx: u32::try_from(context_length).unwrap_or(u32::MAX),
            n_batch: DEFAULT_BATCH.min(context_length) as u32,
            n_seq: DEFAULT_SEQUENCES as u32,
            branches_per_decode: options.branches_per_decode.clamp(1, DEFAULT_SEQUENCES - 1),
            threads: i32::try_from(threads).unwrap_or(1),
        };
        let vocab = usize::try_from(model.n_vocab()).unwrap_or(0);
        let model = Arc::new(model);
        let pool = Pool::start(runtime, Arc::clone(&model), shape, contexts)?;
        let (mtmd, vision) = match &options.mmproj {
            Some(mmproj) => {
                let (mtmd, vision) = load_projector(mmproj, &model, options, threads)?;
                (Some(Arc::new(Mutex::new(mtmd))), Some(vision))
            }
            None => (None, None),
        };
        let model_id = options.model_id.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        Ok(Self {
            mtmd,
            info: BackendInfo {
                model_id,
                revision: options.revision.clone(),
                context_length,
                vision,
                max_token_bytes: text.max_token_bytes(&model),
                adapter_digest: None,
            },
            text,
            vocab,
            max_branch: shape.n_batch as usize,
            model,
            pool,
            next_prefix: AtomicU64::new(0),
        })
    }

    /// ruling's tokenizer of this model, or `None` where llama.cpp's own vocabulary tokenizes
    /// it (a vocabulary ruling's tokenizer cannot build).
    pub fn tokenizer(&self) -> Option<&TextTokenizer> {
        self.text.tokenizer()
    }

    /// llama.cpp's own tokenization of `text` (no special tokens added, special tokens in the
    /// text recognised), to check it against the project's tokenizer.
    pub fn llama_tokenize(&self, text: &str) -> Vec<u32> {
        llama_tokenize(&self.model, text)
    }

    /// A prompt with images for llama.cpp's multimodal library, or the reason there is none.
    fn image_prompt(
        &self,
        text: &str,
        images: &[&Picture],
    ) -> Result<(Arc<Mutex<MtmdContext>>, ImagePrompt), BackendError> {
        let Some(mtmd) = &self.mtmd else {
            return Err(BackendError::TextOnly);
        };
        let bitmaps = images
            .iter()
            .enumerate()
            .map(|(index, picture)| {
                MtmdBitmap::from_image_data(picture.width(), picture.height(), picture.rgb())
                    .map_err(|err| BackendError::Image {
                        index,
                        reason: err.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((
            Arc::clone(mtmd),
            ImagePrompt {
                text: text.to_owned(),
                bitmaps,
            },
        ))
    }

    /// The code logits after `text` (with its images at their markers) run whole in one
    /// evaluation by llama.cpp's multimodal helper: the reference that a prefix encoded with
    /// [`Backend::encode_prefix_with_images`] and a branch scored after it must match.
    pub fn reference_with_images(
        &self,
        text: &str,
        images: &[&Picture],
        codes: &[u32],
    ) -> Result<BranchLogits, BackendError> {
        let (mtmd, prompt) = self.image_prompt(text, images)?;
        let codes = codes.to_vec();
        self.pool
            .run(move |worker| worker.full_pass(&prompt, &mtmd, &codes))?
    }

    /// Prefix tokens appended after `base` tokens fit the context and are inside the
    /// vocabulary (llama.cpp would read an id beyond it out of bounds).
    fn check_prefix(&self, base: usize, tokens: &[u32]) -> Result<(), BackendError> {
        let needed = base + tokens.len();
        if needed > self.info.context_length {
            return Err(BackendError::ContextExceeded {
                branch: 0,
                needed,
                limit: self.info.context_length,
            });
        }
        if let Some(id) = tokens.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(BackendError::InvalidBranch {
                branch: 0,
                reason: format!(
                    "prefix token id {id} is outside the vocabulary of {}",
                    self.vocab
                ),
            });
        }
        Ok(())
    }

    /// The port's checks, and two of llama.cpp's own: a branch fits one decode call, and its
    /// tokens (which llama.cpp would read out of bounds) are inside the vocabulary.
    fn check_branches(
        &self,
        prefix_len: usize,
        branches: &[Branch<'_>],
    ) -> Result<(), BackendError> {
        ruling_backend::check_branches(prefix_len, branches, self.info.context_length, self.vocab)?;
        for (index, branch) in branches.iter().enumerate() {
            if branch.tokens.len() > self.max_branch {
                return Err(BackendError::InvalidBranch {
                    branch: index,
                    reason: format!(
                        "{} tokens, over the {} one decode call takes",
                        branch.tokens.len(),
                        self.max_branch
                    ),
                });
            }
            if let Some(id) = branch.tokens.iter().find(|&&id| id as usize >= self.vocab) {
                return Err(BackendError::InvalidBranch {
                    branch: index,
                    reason: format!("token id {id} is outside the vocabulary of {}", self.vocab),
                });
            }
        }
        Ok(())
    }
}

impl Backend for LlamaCppBackend {
    type Prefix = LlamaPrefix;

    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        self.text.render_chat(messages)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.text.encode(&self.model, text)
    }

    fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.text.encode_continuation(&self.model, text)
    }

    fn encode_prefix(&self, tokens: &[u32]) -> Result<LlamaPrefix, BackendError> {
        self.check_prefix(0, tokens)?;
        let id = self.next_prefix.fetch_add(1, Ordering::Relaxed);
        let tokens = tokens.to_vec();
        let saved = self.pool.run(move |worker| worker.prefill(id, &tokens))??;
        Ok(LlamaPrefix(Arc::new(saved)))
    }

    fn count_prefix_with_images(
        &self,
        text: &str,
        images: &[&Picture],
    ) -> Result<usize, BackendError> {
        let (mtmd, prompt) = self.image_prompt(text, images)?;
        let mtmd = mtmd.lock().map_err(|_| BackendError::Forward {
            source: "the multimodal context was poisoned by a panic".into(),
        })?;
        Ok(prompt.chunks(&mtmd)?.total_tokens())
    }

    fn encode_prefix_with_images(
        &self,
        text: &str,
        images: &[&Picture],
    ) -> Result<LlamaPrefix, BackendError> {
        let (mtmd, prompt) = self.image_prompt(text, images)?;
        let id = self.next_prefix.fetch_add(1, Ordering::Relaxed);
        let saved = self
            .pool
            .run(move |worker| worker.prefill_images(id, &prompt, &mtmd))??;
        Ok(LlamaPrefix(Arc::new(saved)))
    }

    fn extend_prefix(
        &self,
        prefix: &LlamaPrefix,
        tokens: &[u32],
    ) -> Result<Option<LlamaPrefix>, BackendError> {
        self.check_prefix(prefix.0.len, tokens)?;
        let id = self.next_prefix.fetch_add(1, Ordering::Relaxed);
        let base = Arc::clone(&prefix.0);
        let tokens = tokens.to_vec();
        let saved = self
            .pool
            .run(move |worker| worker.extend(&base, id, &tokens))??;
        Ok(Some(LlamaPrefix(Arc::new(saved))))
    }

    fn prefix_len(&self, prefix: &LlamaPrefix) -> usize {
        prefix.0.len
    }

    fn prefix_bytes(&self, prefix: &LlamaPrefix) -> usize {
        prefix.0.state.byte_len()
    }

    fn score_branches(
        &self,
        prefix: &LlamaPrefix,
        branches: &[Branch<'_>],
    ) -> Result<Vec<BranchLogits>, BackendError> {
        self.score_branches_until(prefix, branches, &Cancel::never())
    }

    /// Branches go in several decode calls; `cancel` is looked at before each.
    fn score_branches_until(
        &self,
        prefix: &LlamaPrefix,
        branches: &[Branch<'_>],
        cancel: &Cancel,
    ) -> Result<Vec<BranchLogits>, BackendError> {
        self.check_branches(prefix.0.len, branches)?;
        cancel.check()?;
        let owned: Vec<OwnedBranch> = branches
            .iter()
            .map(|b| OwnedBranch {
                tokens: b.tokens.to_vec(),
                codes: b.codes.to_vec(),
            })
            .collect();
        let saved = Arc::clone(&prefix.0);
        let cancel = cancel.clone();
        self.pool
            .run(move |worker| worker.score(&saved, &owned, &cancel))?
    }

    fn accepts_system_role(&self) -> bool {
        self.text.accepts_system_role()
    }
}

/// Prompts are written together: each decode call carries one token of every prompt still
/// writing, so the weights are read once per step for all of them.
impl Generator for LlamaCppBackend {
    fn generate(
        &self,
        prompts: &[&[u32]],
        sampling: &Sampling,
    ) -> Result<Vec<Generation>, BackendError> {
        ruling_backend::check_prompts(prompts, self.info.context_length, self.vocab)?;
        let mut decoding = Decoding::new(prompts.len(), sampling, self.text.end_tokens())?;
        let owned: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
        let max_tokens = sampling.max_tokens;
        let decoding = self.pool.run(move |worker| {
            worker
                .generate(&owned, &mut decoding, max_tokens)
                .map(|()| decoding)
        })??;
        Ok(decoding.finish())
    }

    fn end_tokens(&self) -> &[u32] {
        self.text.end_tokens()
    }

    fn decode(&self, tokens: &[u32]) -> Result<String, BackendError> {
        self.text.decode(&self.model, tokens)
    }
}

/// Load a vision projector for `model`, and say how the engine should size images for it: one
/// token per (patch x merge)^2 square of pixels, as the projector's metadata gives them.
fn load_projector(
    mmproj: &Path,
    model: &LlamaModel,
    options: &LoadOptions,
    threads: usize,
) -> Result<(MtmdContext, VisionInfo), LoadError> {
    let failed = |message: String| LoadError::Projector {
        path: mmproj.to_path_buf(),
        message,
    };
    if !mmproj.is_file() {
        return Err(failed("there is no such file".to_owned()));
    }
    let meta = llama_cpp_2::gguf::GgufContext::from_file(mmproj)
        .ok_or_else(|| failed("it is not a GGUF file".to_owned()))?;
    let read = |key: &str| {
        let index = meta.find_key(key);
        (index >= 0).then(|| meta.val_u32(index))
    };
    let patch = read("clip.vision.patch_size").ok_or_else(|| {
        failed("it has no clip.vision.patch_size: not a vision projector".to_owned())
    })?;
    // Qwen2-VL's projector leaves the merge size out (llama.cpp assumes 2).
    let merge = read("clip.vision.spatial_merge_size").unwrap_or(2);
    let max_tokens = options.max_image_tokens.max(1);
    let params = MtmdContextParams {
        use_gpu: false,
        print_timings: false,
        n_threads: i32::try_from(threads).unwrap_or(1),
        image_max_tokens: i32::try_from(max_tokens).unwrap_or(i32::MAX),
        ..MtmdContextParams::default()
    };
    let path = mmproj
        .to_str()
        .ok_or_else(|| failed("its path is not UTF-8".to_owned()))?;
    let mtmd = MtmdContext::init_from_file(path, model, &params).map_err(|err| {
        failed(format!(
            "llama.cpp's multimodal library refused it ({err}); is it the projector made for this model?"
        ))
    })?;
    if !mtmd.support_vision() {
        return Err(failed("it reads no images".to_owned()));
    }
    Ok((
        mtmd,
        VisionInfo {
            marker: llama_cpp_2::mtmd::mtmd_default_marker().to_owned(),
            budget: ImageBudget {
                side: patch * merge,
                max_tokens,
            },
        },
    ))
}
