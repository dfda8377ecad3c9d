//! The decoder: one transformer for the llama, qwen2, qwen3 and gemma3 families, with an
//! explicit KV cache so a prefix is encoded once and many branches are scored against it.
//!
//! Architecture as in "LLaMA: Open and Efficient Foundation Language Models" (Touvron et al.,
//! 2023) with the family switches of [`DecoderConfig`]. Weight names follow the checkpoints:
//! Hugging Face `model.layers.N.self_attn.q_proj`, GGUF `blk.N.attn_q`. Parity is tested
//! against candle-transformers' llama, qwen2, qwen3 and gemma3 on generated fixtures
//! (`tests/reference_parity.rs`; its gemma3 is corrected there to transformers' attention
//! scale and window), and against a naive full recompute (see [`Decoder::score_naive`]).
//!
//! Attention over a shared prefix is computed in two parts, so the prefix's keys and values
//! are never copied per branch: every query of every branch attends to the prefix's keys in
//! one matrix product (all branch rows against one `(kv_heads, prefix, head_dim)` cache), and
//! to its own branch's keys under a causal mask; one softmax spans both parts. Grouped-query
//! heads are folded into the rows, so keys are never repeated per query head either.
//!
//! This file holds the model and its forward pass; loading and weight naming live in
//! `load`, grouping branches under a budget in `branches`, attention masks in `mask`.

mod branches;
mod load;
mod mask;

use branches::read_codes;
pub use branches::{BranchBudget, BranchLayout, CodeLogits};
use mask::{Block, MaskCache, Masks};

use std::cell::RefCell;
use std::sync::Arc;

use candle_core::{D, DType, Device, IndexOp, Tensor};

use crate::config::{Activation, DecoderConfig, RopeStyle};
use crate::lora::{LoraWeights, Projection, SplitMix};
use crate::weights::Linear;

/// Longest run of tokens pushed through the model at once while encoding a prefix, so a long
/// state never materialises attention scores for all of itself at once.
pub const PREFILL_CHUNK: usize = 512;

/// The keys and values of an encoded prefix, one `(kv_heads, len, head_dim)` pair per layer.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by the cached keys and values.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes())
            .sum()
    }
}

#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::rms_norm(x, &self.weight, self.eps)
    }

    /// The same norm from basic ops, which carry gradients (the fused kernel passes none).
    fn forward_grad(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::rms_norm_slow(x, &self.weight, self.eps)
    }

    fn forward_in(&self, x: &Tensor, grad: bool) -> candle_core::Result<Tensor> {
        if grad {
            self.forward_grad(x)
        } else {
            self.forward(x)
        }
    }
}

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    post_attn_norm: Option<RmsNorm>,
    mlp_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
    post_mlp_norm: Option<RmsNorm>,
    window: Option<usize>,
    rope: usize,
}

#[derive(Debug, Clone)]
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    /// Tables for base `theta`; a linear `factor` divides every frequency (transformers'
    /// `_compute_linear_scaling_rope_parameters`), which is dividing the positions.
    fn new(
        theta: f64,
        factor: Option<f64>,
        head_dim: usize,
        positions: usize,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let half = head_dim / 2;
        let factor = factor.unwrap_or(1.0) as f32;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64) as f32 / factor)
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, half), device)?;
        let t = Tensor::arange(0u32, positions as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((positions, 1))?;
        let freqs = t.broadcast_mul(&inv_freq)?;
        Ok(Self {
            cos: freqs.cos()?,
            sin: freqs.sin()?,
        })
    }
}

/// A decoder's weights. Cloning shares every tensor (candle tensors are reference-counted),
/// which is how one base serves several adapters.
#[derive(Debug, Clone)]
pub struct Decoder {
    config: DecoderConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    head: Linear,
    ropes: Vec<Rope>,
    device: Device,
    max_positions: usize,
    /// The adapter every forward pass adds, if any.
    lora: Option<Arc<LoraWeights>>,
}

/// How one forward pass runs: which adapter it adds, and from which layer up gradients must
/// flow (candle's fused norm, rotary and softmax kernels pass none, so those layers use
/// kernels built from basic ops instead).
struct Mode<'a> {
    lora: Option<&'a LoraWeights>,
    grad_from: usize,
    dropout: Option<RefCell<SplitMix>>,
}

impl Mode<'_> {
    fn project(
        &self,
        layer: usize,
        p: Projection,
        linear: &Linear,
        x: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let y = if layer >= self.grad_from {
            linear.forward_input_grad(x)?
        } else {
            linear.forward(x)?
        };
        match self.lora {
            Some(lora) => {
                let mut dropout = self.dropout.as_ref().map(RefCell::borrow_mut);
                lora.apply(layer, p, x, y, dropout.as_deref_mut())
            }
            None => Ok(y),
        }
    }
}

/// Softmax over the last axis from basic ops (so gradients flow), the maximum held constant.
fn softmax_grad(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let num = x.broadcast_sub(&max)?.exp()?;
    let den = num.sum_keepdim(D::Minus1)?;
    num.broadcast_div(&den)
}

impl Decoder {
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The longest sequence (prefix plus branch) this decoder has rotary tables for.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    pub fn empty_cache(&self) -> KvCache {
        KvCache {
            layers: vec![None; self.layers.len()],
            len: 0,
        }
    }

    /// This decoder with `lora` added to every forward pass. Every base tensor is shared, so
    /// a decoder per adapter costs only the adapter's own matrices.
    pub fn with_adapter(&self, lora: LoraWeights) -> Self {
        Self {
            lora: Some(Arc::new(lora)),
            ..self.clone()
        }
    }

    /// The adapter this decoder adds, if any.
    pub fn adapter(&self) -> Option<&LoraWeights> {
        self.lora.as_deref()
    }

    /// Keep the matrices of layers `from..` (and the output head) as dense f32, so gradients
    /// can pass through them: candle's quantized matmul passes none. Layers below stay as
    /// loaded.
    pub fn dequantize_from(&mut self, from: usize) -> candle_core::Result<()> {
        for layer in self.layers.iter_mut().skip(from) {
            for linear in [
                &mut layer.q,
                &mut layer.k,
                &mut layer.v,
                &mut layer.o,
                &mut layer.gate,
                &mut layer.up,
                &mut layer.down,
            ] {
                *linear = linear.to_f32()?;
            }
        }
        self.head = self.head.to_f32()?;
        Ok(())
    }

    /// The logits of `codes` after the last token of each of `rows` (whole prompts, prefix
    /// and branch, as the trainer renders them), `(rows, codes)`, with gradients reaching
    /// `lora`'s tensors when they are variables. Layers below the adapter's lowest run with
    /// the fused kernels and build no graph; from there up every kernel carries gradients
    /// (see [`Decoder::dequantize_from`] for the matrices). `dropout_seed` turns on the
    /// adapter's dropout with masks drawn from that seed.
    pub fn train_code_logits(
        &self,
        rows: &[Vec<u32>],
        codes: &[u32],
        lora: &LoraWeights,
        dropout_seed: Option<u64>,
    ) -> candle_core::Result<Tensor> {
        let width = rows.iter().map(Vec::len).max().unwrap_or(0);
        if rows.is_empty() || width == 0 {
            candle_core::bail!("no tokens to train on");
        }
        self.check_positions(width)?;
        let mut tokens = Vec::with_capacity(rows.len() * width);
        let mut answers = Vec::with_capacity(rows.len());
        for (r, row) in rows.iter().enumerate() {
            if row.is_empty() {
                candle_core::bail!("row {r} has no tokens");
            }
            tokens.extend_from_slice(row);
            // Padding sits after the answer position, so causal attention never reads it.
            tokens.extend(std::iter::repeat_n(row[row.len() - 1], width - row.len()));
            answers.push((r * width + row.len() - 1) as u32);
        }
        let block = Block {
            tokens: Tensor::from_vec(tokens, rows.len() * width, &self.device)?,
            rows: rows.len(),
            width,
            positions: (0..width).collect(),
            segments: vec![0; width],
        };
        let mode = Mode {
            lora: Some(lora),
            grad_from: lora.first_layer(),
            dropout: dropout_seed.map(|seed| RefCell::new(SplitMix(seed))),
        };
        let (hidden, _) = self.run_with(&self.empty_cache(), &block, false, &mode)?;
        let answers = Tensor::from_vec(answers, rows.len(), &self.device)?;
        let picked = self.norm.forward_grad(&hidden.index_select(&answers, 0)?)?;
        let codes = Tensor::new(codes, &self.device)?;
        let head = self.head.rows(&codes)?;
        picked.matmul(&head.t()?)
    }

    /// Append `tokens` to `cache`, in chunks of at most [`PREFILL_CHUNK`].
    pub fn prefill(&self, cache: &mut KvCache, tokens: &[u32]) -> candle_core::Result<()> {
        self.prefill_chunked(cache, tokens, PREFILL_CHUNK)
            .map(|_| ())
    }

    /// Like [`Decoder::prefill`] with a chosen chunk size, returning the full-vocabulary
    /// logits after the last token (for next-token checks).
    pub fn prefill_chunked(
        &self,
        cache: &mut KvCache,
        tokens: &[u32],
        chunk: usize,
    ) -> candle_core::Result<Option<Vec<f32>>> {
        let mut last_hidden = None;
        for piece in tokens.chunks(chunk.max(1)) {
            let start = cache.len;
            self.check_positions(start + piece.len())?;
            let block = Block {
                tokens: Tensor::new(piece, &self.device)?,
                rows: 1,
                width: piece.len(),
                positions: (start..start + piece.len()).collect(),
                segments: vec![0; piece.len()],
            };
            let (hidden, fresh) = self.run(cache, &block, true)?;
            for (slot, (k, v)) in cache.layers.iter_mut().zip(fresh) {
                *slot = Some(match slot.take() {
                    Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 1)?, Tensor::cat(&[&pv, &v], 1)?),
                    None => (k, v),
                });
            }
            cache.len += piece.len();
            last_hidden = Some(hidden.i(piece.len() - 1)?.unsqueeze(0)?);
        }
        match last_hidden {
            Some(h) => Ok(Some(self.head_logits(&h)?.squeeze(0)?.to_vec1()?)),
            None => Ok(None),
        }
    }

    fn check_positions(&self, end: usize) -> candle_core::Result<()> {
        if end > self.max_positions {
            candle_core::bail!(
                "{end} positions exceed the maximum context length of {}",
                self.max_positions
            )
        }
        Ok(())
    }

    /// Score one branch by running the prefix and the branch from scratch as one sequence:
    /// the reference the shared-prefix path is tested and benchmarked against.
    pub fn score_naive(
        &self,
        prefix: &[u32],
        branch: &[u32],
        codes: &[u32],
    ) -> candle_core::Result<CodeLogits> {
        let tokens: Vec<u32> = prefix.iter().chain(branch).copied().collect();
        self.check_positions(tokens.len())?;
        let block = Block {
            tokens: Tensor::new(tokens.as_slice(), &self.device)?,
            rows: 1,
            width: tokens.len(),
            positions: (0..tokens.len()).collect(),
            segments: vec![0; tokens.len()],
        };
        let (hidden, _) = self.run(&self.empty_cache(), &block, false)?;
        let last = hidden.i(tokens.len() - 1)?.unsqueeze(0)?;
        let row = self.head_logits(&last)?.squeeze(0)?.to_vec1::<f32>()?;
        Ok(read_codes(&row, codes))
    }

    fn head_logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        self.head.forward(&self.norm.forward(hidden)?)
    }

    /// Run a block through every layer against `cache`, with the decoder's own adapter;
    /// returns the final hidden states `(rows * width, hidden)` and, when `keep` is set, each
    /// layer's new keys and values.
    fn run(
        &self,
        cache: &KvCache,
        block: &Block,
        keep: bool,
    ) -> candle_core::Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        let mode = Mode {
            lora: self.lora.as_deref(),
            grad_from: usize::MAX,
            dropout: None,
        };
        self.run_with(cache, block, keep, &mode)
    }

    fn run_with(
        &self,
        cache: &KvCache,
        block: &Block,
        keep: bool,
        mode: &Mode<'_>,
    ) -> candle_core::Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        let mut x = self.embed.index_select(&block.tokens, 0)?;
        let positions = Tensor::from_vec(
            block
                .positions
                .iter()
                .map(|&p| p as u32)
                .collect::<Vec<_>>(),
            block.width,
            &self.device,
        )?;
        let tables: Vec<(Tensor, Tensor)> = self
            .ropes
            .iter()
            .map(|rope| {
                Ok((
                    rope.cos.index_select(&positions, 0)?,
                    rope.sin.index_select(&positions, 0)?,
                ))
            })
            .collect::<candle_core::Result<_>>()?;
        let mut masks = MaskCache::default();
        let mut fresh = Vec::with_capacity(if keep { self.layers.len() } else { 0 });
        for (i, (layer, cached)) in self.layers.iter().zip(&cache.layers).enumerate() {
            let (cos, sin) = &tables[layer.rope];
            let masks = masks.get(self, block, cache.len, layer.window)?;
            let step = Step {
                index: i,
                block,
                cached: cached.as_ref(),
                cos,
                sin,
                masks,
                mode,
            };
            let (y, kv) = self.layer_forward(layer, &x, &step)?;
            x = y;
            if keep {
                fresh.push(kv);
            }
        }
        Ok((x, fresh))
    }

    fn layer_forward(
        &self,
        layer: &Layer,
        x: &Tensor,
        step: &Step<'_>,
    ) -> candle_core::Result<(Tensor, (Tensor, Tensor))> {
        let c = &self.config;
        let (b, l, d) = (step.block.rows, step.block.width, c.head_dim);
        let (i, mode) = (step.index, step.mode);
        let grad = i >= mode.grad_from;
        let (cos, sin) = (step.cos, step.sin);
        let h = layer.attn_norm.forward_in(x, grad)?;
        let heads = |t: Tensor, n: usize, norm: Option<&RmsNorm>| -> candle_core::Result<Tensor> {
            let t = t.reshape((b, l, n, d))?;
            let t = match norm {
                Some(norm) => norm.forward_in(&t, grad)?,
                None => t,
            };
            let t = t.transpose(1, 2)?.contiguous()?;
            match (c.rope_style, grad) {
                (RopeStyle::Half, false) => candle_nn::rotary_emb::rope(&t, cos, sin),
                (RopeStyle::Half, true) => candle_nn::rotary_emb::rope_slow(&t, cos, sin),
                (RopeStyle::Interleaved, false) => candle_nn::rotary_emb::rope_i(&t, cos, sin),
                (RopeStyle::Interleaved, true) => candle_nn::rotary_emb::rope_i_slow(&t, cos, sin),
            }
        };
        let q = heads(
            mode.project(i, Projection::Q, &layer.q, &h)?,
            c.num_heads,
            layer.q_norm.as_ref(),
        )?;
        let k = heads(
            mode.project(i, Projection::K, &layer.k, &h)?,
            c.num_kv_heads,
            layer.k_norm.as_ref(),
        )?;
        let v = mode
            .project(i, Projection::V, &layer.v, &h)?
            .reshape((b, l, c.num_kv_heads, d))?
            .transpose(1, 2)?
            .contiguous()?;

        let attended = self.attend(&q, &k, &v, step, grad)?;
        let attended = attended
            .transpose(1, 2)?
            .reshape((b * l, c.num_heads * d))?;
        let mut out = mode.project(i, Projection::O, &layer.o, &attended)?;
        if let Some(norm) = &layer.post_attn_norm {
            out = norm.forward_in(&out, grad)?;
        }
        let x = (x + out)?;

        let h = layer.mlp_norm.forward_in(&x, grad)?;
        let gate = mode.project(i, Projection::Gate, &layer.gate, &h)?;
        let gate = match c.activation {
            Activation::Silu => candle_nn::ops::silu(&gate)?,
            Activation::GeluTanh => gate.gelu()?,
        };
        let up = mode.project(i, Projection::Up, &layer.up, &h)?;
        let mut out = mode.project(i, Projection::Down, &layer.down, &(gate * up)?)?;
        if let Some(norm) = &layer.post_mlp_norm {
            out = norm.forward_in(&out, grad)?;
        }
        // Keys and values for the cache drop the batch axis: a prefix is always one row.
        let kv = if b == 1 {
            (k.squeeze(0)?, v.squeeze(0)?)
        } else {
            (k, v)
        };
        Ok(((x + out)?, kv))
    }

    /// Attention of `q` `(b, heads, l, d)` over the cached prefix and the block's own keys.
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        step: &Step<'_>,
        grad: bool,
    ) -> candle_core::Result<Tensor> {
        let (cached, masks) = (step.cached, step.masks);
        let (b, l) = (step.block.rows, step.block.width);
        let softmax = |x: &Tensor| {
            if grad {
                softmax_grad(x)
            } else {
                candle_nn::ops::softmax_last_dim(x)
            }
        };
        let c = &self.config;
        let (kvh, d) = (c.num_kv_heads, c.head_dim);
        let g = c.num_heads / kvh;
        let scale = 1.0 / c.query_pre_attn_scalar.sqrt();
        // Query heads sharing a key head are adjacent, so they fold into the row axis.
        let q = (q.reshape((b, kvh, g * l, d))? * scale)?;
        let own = q.matmul(&k.transpose(2, 3)?)?.broadcast_add(&masks.own)?;
        let Some((pk, pv)) = cached else {
            let weights = softmax(&own)?;
            return weights.matmul(v)?.reshape((b, c.num_heads, l, d));
        };
        let p = pk.dim(1)?;
        // Every row of every branch against the one prefix: (kv_heads, b*g*l, d) x (kv_heads, d, p).
        let q_rows = q
            .transpose(0, 1)?
            .contiguous()?
            .reshape((kvh, b * g * l, d))?;
        let mut shared = q_rows
            .matmul(&pk.t()?)?
            .reshape((kvh, b, g * l, p))?
            .transpose(0, 1)?;
        if let Some(mask) = &masks.prefix {
            shared = shared.broadcast_add(mask)?;
        }
        let scores = Tensor::cat(&[&shared.contiguous()?, &own], 3)?;
        let weights = softmax(&scores)?;
        let w_shared = weights
            .narrow(3, 0, p)?
            .transpose(0, 1)?
            .contiguous()?
            .reshape((kvh, b * g * l, p))?;
        let from_prefix = w_shared
            .matmul(pv)?
            .reshape((kvh, b, g * l, d))?
            .transpose(0, 1)?;
        let from_own = weights.narrow(3, p, l)?.contiguous()?.matmul(v)?;
        (from_prefix + from_own)?.reshape((b, c.num_heads, l, d))
    }
}

/// What one layer's forward pass needs besides the layer and its input.
struct Step<'a> {
    index: usize,
    block: &'a Block,
    cached: Option<&'a (Tensor, Tensor)>,
    cos: &'a Tensor,
    sin: &'a Tensor,
    masks: &'a Masks,
    mode: &'a Mode<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linear scaling by `f` puts position `f * p` where plain rope puts `p`.
    #[test]
    fn linear_rope_scaling_divides_the_positions() {
        let cpu = Device::Cpu;
        let plain = Rope::new(1e6, None, 16, 64, &cpu).unwrap();
        let scaled = Rope::new(1e6, Some(4.0), 16, 64, &cpu).unwrap();
        for p in [1usize, 3, 15] {
            for (a, b) in [(&plain.cos, &scaled.cos), (&plain.sin, &scaled.sin)] {
                let a: Vec<f32> = a.i(p).unwrap().to_vec1().unwrap();
                let b: Vec<f32> = b.i(4 * p).unwrap().to_vec1().unwrap();
                let diff = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f32::max);
                assert!(diff < 1e-5, "position {p}: {diff}");
            }
        }
    }
}
