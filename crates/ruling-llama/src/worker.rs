//! llama.cpp contexts, each on a thread of its own.
//!
//! A context borrows its model and may be used by one thread at a time. So each context lives
//! on a worker thread that holds the model (an `Arc`) for as long as the context exists, and
//! callers hand it jobs through one shared queue: concurrent callers use every context, and
//! the model is freed when the last worker ends. No lifetime is erased and nothing is unsafe.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend as Runtime;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::mtmd::{
    MtmdBitmap, MtmdContext, MtmdInputChunks, MtmdInputText, MtmdTokenizeError,
};
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{LlamaStateSeqFlags, SeqState};
use ruling_backend::{BackendError, BranchLogits, Cancel, Decoding};

use crate::error::LoadError;

/// `LLAMA_FLASH_ATTN_TYPE_AUTO`: llama.cpp's choice, which on the CPU is flash attention, for
/// scoring and writing alike. Its CPU kernel skips masked cells and adds the rest in cell
/// order, so a branch reads the same wherever the cache put it; without it a branch's values
/// are summed in lanes chosen by its cell index, and moving a branch by a few cells moved a
/// logit by up to 0.59 on SmolLM2 and 0.27 on Qwen2.5-Coder-0.5B (`batch-probe`,
/// docs/llama.md). It is also the faster one (prefill 83 vs 75 tokens/s on Qwen 0.5B).
const FLASH_ATTENTION_AUTO: i32 = -1;

/// Query rows below which llama.cpp's CPU flash attention takes its one-row-at-a-time kernel;
/// from 64 rows in a call it switches to a tiled kernel with other arithmetic (ggml-cpu
/// `GGML_FA_TILE_Q`). Branches are grouped into calls below this, so each one always goes
/// through the same kernel.
pub(crate) const FLASH_TILE_ROWS: usize = 64;

/// Whether this build's llama.cpp keeps weights in their file layout. With ggml's CPU
/// "repack" buffers (its default) Q4_0, Q4_K and IQ4_NL matrices are multiplied four activation
/// rows at a time and the leftover rows one by one, so a token's result depends on its row in
/// the call and on the call's size (0.23 on Qwen 0.5B's Q4_K). The workspace builds llama.cpp
/// with `GGML_CPU_REPACK=OFF` (`.cargo/config.toml`); elsewhere branches are decoded one per
/// call unless asked otherwise.
pub(crate) fn row_invariant_build() -> bool {
    matches!(
        option_env!("GGML_CPU_REPACK"),
        Some("OFF" | "off" | "0" | "FALSE" | "false")
    )
}

/// The shape of every context a backend creates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContextShape {
    /// KV cells: the longest prefix plus the branches decoded together with it.
    pub n_ctx: u32,
    /// Most tokens one decode call takes.
    pub n_batch: u32,
    /// Sequences: seq 0 holds the prefix, 1.. the branches of one decode.
    pub n_seq: u32,
    /// Branches decoded together in one call (at most `n_seq - 1`, and never more than
    /// [`FLASH_TILE_ROWS`] - 1 tokens together).
    pub branches_per_decode: usize,
    pub threads: i32,
}

/// An encoded prefix as llama.cpp saves a sequence: its cells' keys and values, which any
/// context of the same shape restores without running the prefix again.
pub(crate) struct SavedPrefix {
    /// Tells contexts apart the prefixes they already hold in sequence 0.
    pub id: u64,
    /// The cells it holds: its tokens, an image's included.
    pub len: usize,
    /// The position the next token takes. Equal to `len` for text; on a model with
    /// multimodal positions an image's grid of tokens takes fewer positions than tokens, so a
    /// branch after one starts here, not at `len`.
    pub next_pos: usize,
    pub state: SeqState,
}

/// A prompt with images as llama.cpp's multimodal library reads it: the text, one marker per
/// image, and the images.
pub(crate) struct ImagePrompt {
    pub text: String,
    pub bitmaps: Vec<MtmdBitmap>,
}

impl ImagePrompt {
    /// The prompt cut into text and image chunks (images preprocessed, nothing run yet).
    pub fn chunks(&self, mtmd: &MtmdContext) -> Result<MtmdInputChunks, BackendError> {
        let bitmaps: Vec<&MtmdBitmap> = self.bitmaps.iter().collect();
        mtmd.tokenize(
            MtmdInputText {
                text: self.text.clone(),
                add_special: false,
                parse_special: true,
            },
            &bitmaps,
        )
        .map_err(|err| match err {
            MtmdTokenizeError::ImagePreprocessingError => BackendError::Image {
                index: 0,
                reason: "llama.cpp could not preprocess an image".to_owned(),
            },
            other => forward("multimodal tokenization", other),
        })
    }
}

/// One branch, owned so it can cross to a worker thread.
pub(crate) struct OwnedBranch {
    pub tokens: Vec<u32>,
    pub codes: Vec<u32>,
}

type Job = Box<dyn for<'m> FnOnce(&mut Worker<'m>) + Send>;

/// The worker threads and the queue they take jobs from.
pub(crate) struct Pool {
    jobs: Option<mpsc::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("workers", &self.threads.len())
            .finish()
    }
}

impl Pool {
    /// Start `workers` threads, each with its own context; returns once every context exists
    /// (or with the first failure).
    pub fn start(
        runtime: &'static Runtime,
        model: Arc<LlamaModel>,
        shape: ContextShape,
        workers: usize,
    ) -> Result<Self, LoadError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let (ready_tx, ready) = mpsc::channel::<Result<(), LoadError>>();
        let mut threads = Vec::with_capacity(workers);
        for index in 0..workers.max(1) {
            let model = Arc::clone(&model);
            let queue = Arc::clone(&queue);
            let ready_tx = ready_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("llama-{index}"))
                .spawn(move || {
                    let mut worker = match Worker::new(runtime, &model, shape) {
                        Ok(worker) => {
                            let _ = ready_tx.send(Ok(()));
                            worker
                        }
                        Err(err) => {
                            let _ = ready_tx.send(Err(err));
                            return;
                        }
                    };
                    drop(ready_tx);
                    loop {
                        // The lock is held only while taking a job, never while running it.
                        let job = match queue.lock() {
                            Ok(queue) => queue.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(&mut worker),
                            Err(_) => return,
                        }
                    }
                })
                .map_err(LoadError::Thread)?;
            threads.push(thread);
        }
        drop(ready_tx);
        let pool = Self {
            jobs: Some(jobs),
            threads,
        };
        for _ in 0..pool.threads.len() {
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(err),
                Err(_) => return Err(LoadError::Runtime("a worker thread ended at start".into())),
            }
        }
        Ok(pool)
    }

    /// Run `job` on the next free context and wait for its result.
    pub fn run<R: Send + 'static>(
        &self,
        job: impl for<'m> FnOnce(&mut Worker<'m>) -> R + Send + 'static,
    ) -> Result<R, BackendError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |worker| {
            let _ = tx.send(job(worker));
        });
        let gone = || BackendError::Forward {
            source: "the llama.cpp worker threads have stopped".into(),
        };
        self.jobs
            .as_ref()
            .ok_or_else(gone)?
            .send(job)
            .map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the queue ends every worker's loop; each drops its context, then its model.
        self.jobs = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// One context, its reusable batch, and which prefix its sequence 0 holds.
pub(crate) struct Worker<'m> {
    /// Scores and writes (writing empties it first).
    context: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    shape: ContextShape,
    /// The id of the prefix in sequence 0, if any.
    holds: Option<u64>,
}

fn forward(what: &str, err: impl std::fmt::Display) -> BackendError {
    BackendError::Forward {
        source: format!("llama.cpp {what}: {err}").into(),
    }
}

impl<'m> Worker<'m> {
    fn new(
        runtime: &'static Runtime,
        model: &'m LlamaModel,
        shape: ContextShape,
    ) -> Result<Self, LoadError> {
        Ok(Self {
            context: context(runtime, model, shape)?,
            batch: LlamaBatch::new(shape.n_batch as usize, 1),
            shape,
            holds: None,
        })
    }

    /// Run `tokens` into sequence 0 of an empty cache and save that sequence.
    pub fn prefill(&mut self, id: u64, tokens: &[u32]) -> Result<SavedPrefix, BackendError> {
        self.forget();
        self.append_and_save(id, (0, 0), tokens)
    }

    /// Run a prompt with images into sequence 0 of an empty cache through llama.cpp's
    /// multimodal library (each image encoded by the projector, then decoded with its
    /// multimodal positions) and save that sequence, with the position text resumes at.
    pub fn prefill_images(
        &mut self,
        id: u64,
        prompt: &ImagePrompt,
        mtmd: &Mutex<MtmdContext>,
    ) -> Result<SavedPrefix, BackendError> {
        self.forget();
        let (cells, next_pos) = self.eval_images(prompt, mtmd, false)?;
        let state = self
            .context
            .state_seq_get(0, LlamaStateSeqFlags::empty())
            .map_err(|err| forward("saving the prefix", err))?;
        self.holds = Some(id);
        Ok(SavedPrefix {
            id,
            len: cells,
            next_pos,
            state,
        })
    }

    /// The logits after a whole prompt with images, run in one evaluation as llama.cpp's own
    /// multimodal helper runs it: the reference a prefix and its branches are checked against.
    pub fn full_pass(
        &mut self,
        prompt: &ImagePrompt,
        mtmd: &Mutex<MtmdContext>,
        codes: &[u32],
    ) -> Result<BranchLogits, BackendError> {
        self.forget();
        let result = self
            .eval_images(prompt, mtmd, true)
            .map(|_| read_codes(self.context.get_logits_ith(-1), codes));
        self.forget();
        result
    }

    /// Evaluate `prompt` into sequence 0 from the start; its cells and next position.
    fn eval_images(
        &mut self,
        prompt: &ImagePrompt,
        mtmd: &Mutex<MtmdContext>,
        logits_last: bool,
    ) -> Result<(usize, usize), BackendError> {
        self.holds = None;
        let mut mtmd = mtmd.lock().map_err(|_| BackendError::Forward {
            source: "the multimodal context was poisoned by a panic".into(),
        })?;
        let chunks = prompt.chunks(&mtmd)?;
        let cells = chunks.total_tokens();
        if cells > self.shape.n_ctx as usize {
            return Err(BackendError::ContextExceeded {
                branch: 0,
                needed: cells,
                limit: self.shape.n_ctx as usize,
            });
        }
        let n_batch = i32::try_from(self.shape.n_batch).unwrap_or(i32::MAX);
        match chunks.eval_chunks(&mut mtmd, &mut self.context, 0, 0, n_batch, logits_last) {
            Ok(next) => Ok((cells, usize::try_from(next).unwrap_or(0))),
            Err(err) => {
                self.forget();
                Err(forward("evaluating the images", err))
            }
        }
    }

    /// Append `tokens` to `base` in sequence 0 and save the result as a new prefix.
    pub fn extend(
        &mut self,
        base: &SavedPrefix,
        id: u64,
        tokens: &[u32],
    ) -> Result<SavedPrefix, BackendError> {
        self.restore(base)?;
        self.append_and_save(id, (base.len, base.next_pos), tokens)
    }

    /// Decode `tokens` into sequence 0 after `start` (its cells and its next position), in
    /// calls of at most `n_batch`, and save the sequence as prefix `id`.
    fn append_and_save(
        &mut self,
        id: u64,
        (start, start_pos): (usize, usize),
        tokens: &[u32],
    ) -> Result<SavedPrefix, BackendError> {
        // Sequence 0 is about to hold something new.
        self.holds = None;
        let n_batch = self.shape.n_batch as usize;
        for (chunk_index, chunk) in tokens.chunks(n_batch).enumerate() {
            self.batch.clear();
            let at = start_pos + chunk_index * n_batch;
            for (offset, &token) in chunk.iter().enumerate() {
                self.batch
                    .add(token_of(token), position(at + offset), &[0], false)
                    .map_err(|err| forward("batch", err))?;
            }
            if let Err(err) = self.context.decode(&mut self.batch) {
                self.forget();
                return Err(forward("prefill", err));
            }
        }
        let state = self
            .context
            .state_seq_get(0, LlamaStateSeqFlags::empty())
            .map_err(|err| forward("saving the prefix", err))?;
        self.holds = Some(id);
        Ok(SavedPrefix {
            id,
            len: start + tokens.len(),
            next_pos: start_pos + tokens.len(),
            state,
        })
    }

    /// Score every branch over `prefix`, each in a sequence that shares the prefix's cells,
    /// logits asked for only at its last token. Branches go in groups that fit the sequence
    /// cap and the cache and stay under [`FLASH_TILE_ROWS`] tokens; one of a single token (for
    /// which llama.cpp splits attention over the cache by thread) or of that many or more goes
    /// alone. Every branch is thus computed by the same kernels whatever else the call holds.
    pub fn score(
        &mut self,
        prefix: &SavedPrefix,
        branches: &[OwnedBranch],
        cancel: &Cancel,
    ) -> Result<Vec<BranchLogits>, BackendError> {
        self.restore(prefix)?;
        let budget = (self.shape.n_batch as usize)
            .min((self.shape.n_ctx as usize).saturating_sub(prefix.len));
        let max_branches = self
            .shape
            .branches_per_decode
            .clamp(1, self.shape.n_seq as usize - 1);
        // Most tokens a call of several branches holds.
        let shared_call = budget.min(FLASH_TILE_ROWS - 1);
        let shares = |b: &OwnedBranch| (2..FLASH_TILE_ROWS).contains(&b.tokens.len());
        let mut scored = Vec::with_capacity(branches.len());
        let mut start = 0;
        while start < branches.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < branches.len()
                && end - start < max_branches
                && (end == start
                    || shares(&branches[start])
                        && shares(&branches[end])
                        && tokens + branches[end].tokens.len() <= shared_call)
            {
                tokens += branches[end].tokens.len();
                end += 1;
            }
            let group = &branches[start..end];
            // Nothing of this call is kept when it stops, so the cache stays as restored.
            cancel.check()?;
            let result = self.decode_group(prefix.next_pos, group);
            // The branches' cells go whatever happened, so the cache never grows.
            for seq in 1..=group.len() {
                let _ = self
                    .context
                    .clear_kv_cache_seq(Some(seq as u32), None, None);
            }
            match result {
                Ok(group_scores) => scored.extend(group_scores),
                Err(err) => {
                    self.forget();
                    return Err(err);
                }
            }
            start = end;
        }
        Ok(scored)
    }

    /// Decode one group of branches, each starting at position `next_pos`.
    fn decode_group(
        &mut self,
        next_pos: usize,
        group: &[OwnedBranch],
    ) -> Result<Vec<BranchLogits>, BackendError> {
        self.batch.clear();
        let mut last = Vec::with_capacity(group.len());
        for (index, branch) in group.iter().enumerate() {
            let seq = index as i32 + 1;
            self.context
                .copy_kv_cache_seq(0, seq, None, None)
                .map_err(|err| forward("sharing the prefix", err))?;
            for (offset, &token) in branch.tokens.iter().enumerate() {
                let is_last = offset + 1 == branch.tokens.len();
                self.batch
                    .add(
                        token_of(token),
                        position(next_pos + offset),
                        &[seq],
                        is_last,
                    )
                    .map_err(|err| forward("batch", err))?;
            }
            last.push(self.batch.n_tokens() - 1);
        }
        self.context
            .decode(&mut self.batch)
            .map_err(|err| forward("decode", err))?;
        Ok(group
            .iter()
            .zip(last)
            .map(|(branch, row)| read_codes(self.context.get_logits_ith(row), &branch.codes))
            .collect())
    }

    /// Write a continuation of every prompt. Prompts go in groups that fit the sequences and
    /// the cache (each prompt's cells reserved for its longest continuation); within a group
    /// the prompts are prefilled together, then every one still writing takes one token per
    /// decode call, all of them in the same batch.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        decoding: &mut Decoding,
        max_tokens: usize,
    ) -> Result<(), BackendError> {
        let n_ctx = self.shape.n_ctx as usize;
        let reserve = |prompt: &[u32]| (prompt.len() + max_tokens).min(n_ctx);
        let mut start = 0;
        while start < prompts.len() {
            let mut end = start;
            let mut cells = 0;
            while end < prompts.len()
                && end - start < self.shape.n_seq as usize
                && (end == start || cells + reserve(&prompts[end]) <= n_ctx)
            {
                cells += reserve(&prompts[end]);
                end += 1;
            }
            self.forget();
            let result = self.generate_group(start, &prompts[start..end], decoding);
            self.forget();
            result?;
            start = end;
        }
        Ok(())
    }

    fn generate_group(
        &mut self,
        first_row: usize,
        group: &[Vec<u32>],
        decoding: &mut Decoding,
    ) -> Result<(), BackendError> {
        let n_batch = self.shape.n_batch as usize;
        let n_ctx = self.shape.n_ctx as usize;
        // Each row's length in the cache, and the token it feeds next.
        let mut lengths: Vec<usize> = group.iter().map(Vec::len).collect();
        let mut next: Vec<Option<u32>> = vec![None; group.len()];
        // Prefill: every prompt's tokens, packed into batches; logits at each one's last.
        let mut pending: Vec<(usize, usize)> = Vec::new();
        self.batch.clear();
        for (index, prompt) in group.iter().enumerate() {
            for (offset, &token) in prompt.iter().enumerate() {
                if self.batch.n_tokens() as usize == n_batch {
                    self.decode_prompts(first_row, &pending, decoding, &mut next)?;
                    pending.clear();
                    self.batch.clear();
                }
                let is_last = offset + 1 == prompt.len();
                self.batch
                    .add(token_of(token), position(offset), &[index as i32], is_last)
                    .map_err(|err| forward("batch", err))?;
                if is_last {
                    pending.push((index, self.batch.n_tokens() as usize - 1));
                }
            }
        }
        self.decode_prompts(first_row, &pending, decoding, &mut next)?;
        // Steps: one token per row still writing, all rows in one batch.
        loop {
            self.batch.clear();
            pending.clear();
            for (index, token) in next.iter_mut().enumerate() {
                let Some(token) = token.take() else { continue };
                if lengths[index] >= n_ctx {
                    decoding.stop_for_length(first_row + index);
                    continue;
                }
                self.batch
                    .add(
                        token_of(token),
                        position(lengths[index]),
                        &[index as i32],
                        true,
                    )
                    .map_err(|err| forward("batch", err))?;
                lengths[index] += 1;
                pending.push((index, self.batch.n_tokens() as usize - 1));
            }
            if pending.is_empty() {
                return Ok(());
            }
            self.decode_prompts(first_row, &pending, decoding, &mut next)?;
        }
    }

    /// Decode the batch and pick the next token of every row in `pending` (row, batch index).
    fn decode_prompts(
        &mut self,
        first_row: usize,
        pending: &[(usize, usize)],
        decoding: &mut Decoding,
        next: &mut [Option<u32>],
    ) -> Result<(), BackendError> {
        if self.batch.n_tokens() == 0 {
            return Ok(());
        }
        self.context
            .decode(&mut self.batch)
            .map_err(|err| forward("decode", err))?;
        for &(index, at) in pending {
            let logits = self.context.get_logits_ith(at as i32);
            next[index] = decoding.push(first_row + index, logits);
        }
        Ok(())
    }

    /// Make sequence 0 hold `prefix`, restoring its saved cells unless it is already there.
    fn restore(&mut self, prefix: &SavedPrefix) -> Result<(), BackendError> {
        if self.holds == Some(prefix.id) {
            return Ok(());
        }
        self.forget();
        self.context
            .state_seq_set(&prefix.state, 0)
            .map_err(|err| forward("restoring the prefix", err))?;
        self.holds = Some(prefix.id);
        Ok(())
    }

    /// Empty the cache, so nothing stale is ever read as a prefix.
    fn forget(&mut self) {
        self.context.clear_kv_cache();
        self.holds = None;
    }
}

/// A context of `shape` over `model`: one unified KV cache for every sequence.
fn context<'m>(
    runtime: &Runtime,
    model: &'m LlamaModel,
    shape: ContextShape,
) -> Result<LlamaContext<'m>, LoadError> {
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(shape.n_ctx))
        .with_n_batch(shape.n_batch)
        .with_n_ubatch(shape.n_batch)
        .with_n_seq_max(shape.n_seq)
        .with_kv_unified(true)
        .with_flash_attention_policy(FLASH_ATTENTION_AUTO)
        .with_n_threads(shape.threads)
        .with_n_threads_batch(shape.threads);
    model
        .new_context(runtime, params)
        .map_err(|err| LoadError::Context {
            n_ctx: shape.n_ctx,
            message: err.to_string(),
        })
}

/// The requested codes' logits and the full vocabulary's log-sum-exp, summed in index order
/// in f64 so a row of logits always gives the same normaliser.
fn read_codes(logits: &[f32], codes: &[u32]) -> BranchLogits {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .map(|&l| (f64::from(l) - f64::from(max)).exp())
        .sum();
    BranchLogits {
        logits: codes.iter().map(|&c| logits[c as usize]).collect(),
        log_normalizer: (f64::from(max) + sum.ln()) as f32,
        unread: Vec::new(),
    }
}

fn token_of(id: u32) -> LlamaToken {
    // Ids come from the backend's own tokenizer, whose vocabulary matches the model's; the
    // backend checks codes against the vocabulary before a job is sent.
    LlamaToken(i32::try_from(id).unwrap_or(i32::MAX))
}

fn position(index: usize) -> i32 {
    i32::try_from(index).unwrap_or(i32::MAX)
}
