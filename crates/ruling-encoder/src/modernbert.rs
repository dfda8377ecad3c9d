//! ModernBERT (Warner et al., 2024, arXiv:2412.13663) with explicit position ids and a 3-D
//! attention bias; candle-transformers' `modernbert` takes only a 2-D padding mask and numbers
//! positions 0..n.
//!
//! `ModernBertConfig` mirrors the checkpoint's `config.json`; tensor paths mirror its names
//! (`model.embeddings.tok_embeddings`, `model.layers.3.attn.Wqkv`, `head.dense`, ...).
//! Pre-norm layers (layer 0 has no attention norm), rotary positions with a global and a local
//! base, GeGLU feed-forward, and sliding-window attention every layer but each
//! `global_attn_every_n_layers`-th. The window is measured in *positions*, not sequence
//! indices: in the decision layout every option of a question starts at the same position, so
//! an option far down the sequence is still next to its question. The parity test compares it
//! with candle-transformers' `modernbert` on a generated random-weight checkpoint under a full
//! mask, where the two agree by construction.

use candle_core::{D, DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, VarBuilder};
use serde::Deserialize;

use crate::ops::{AttentionMask, Kernels, LayerNorm, Linear, attention};

fn default_theta_global() -> f64 {
    160_000.0
}

fn default_theta_local() -> f64 {
    10_000.0
}

fn default_window() -> usize {
    128
}

fn default_every() -> usize {
    3
}

/// A ModernBERT checkpoint's `config.json` (the fields this implementation reads).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModernBertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    /// Hugging Face writes `norm_eps`; older exports (and candle's config) `layer_norm_eps`.
    #[serde(default)]
    norm_eps: Option<f64>,
    #[serde(default)]
    layer_norm_eps: Option<f64>,
    #[serde(default = "default_every")]
    pub global_attn_every_n_layers: usize,
    #[serde(default = "default_theta_global")]
    pub global_rope_theta: f64,
    #[serde(default = "default_window")]
    pub local_attention: usize,
    #[serde(default = "default_theta_local")]
    pub local_rope_theta: f64,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default)]
    pub norm_bias: bool,
    #[serde(default)]
    pub classifier_bias: bool,
}

impl ModernBertConfig {
    pub fn eps(&self) -> f64 {
        self.norm_eps.or(self.layer_norm_eps).unwrap_or(1e-5)
    }

    fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    fn is_global(&self, layer: usize) -> bool {
        layer.is_multiple_of(self.global_attn_every_n_layers.max(1))
    }
}

/// Cosine and sine tables of one rotary base, `[max_positions, head_dim / 2]`.
#[derive(Debug, Clone)]
struct Rotary {
    cos: Tensor,
    sin: Tensor,
}

impl Rotary {
    fn new(config: &ModernBertConfig, theta: f64, device: &Device) -> Result<Self> {
        let dim = config.head_dim();
        let inverse: Vec<f32> = (0..dim)
            .step_by(2)
            .map(|i| 1.0 / theta.powf(i as f64 / dim as f64) as f32)
            .collect();
        let half = inverse.len();
        let inverse = Tensor::from_vec(inverse, (1, half), device)?;
        let rows = config.max_position_embeddings as u32;
        let positions = Tensor::arange(0u32, rows, device)?
            .to_dtype(DType::F32)?
            .reshape((rows as usize, 1))?;
        let angles = positions.matmul(&inverse)?;
        Ok(Self {
            cos: angles.cos()?,
            sin: angles.sin()?,
        })
    }

    /// The tables at `positions` (`[batch, n]`): `[batch, n, head_dim / 2]` each.
    fn at(&self, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        let (batch, n) = positions.dims2()?;
        let flat = positions.flatten_all()?;
        let half = self.cos.dim(1)?;
        let cos = self.cos.index_select(&flat, 0)?.reshape((batch, n, half))?;
        let sin = self.sin.index_select(&flat, 0)?.reshape((batch, n, half))?;
        Ok((cos, sin))
    }
}

/// Rotate `[batch, n, heads * head_dim]` by per-token tables (`rotate_half` convention).
fn rotate(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    heads: usize,
    kernels: Kernels,
) -> Result<Tensor> {
    let (batch, n, width) = x.dims3()?;
    let x = x.reshape((batch, n, heads, width / heads))?;
    let rotated = match kernels {
        Kernels::Fused | Kernels::FusedBf16 => {
            candle_nn::rotary_emb::rope_thd(&x.contiguous()?, cos, sin)?
        }
        Kernels::Differentiable => {
            let half = width / heads / 2;
            let cos = Tensor::cat(&[cos, cos], D::Minus1)?.unsqueeze(2)?;
            let sin = Tensor::cat(&[sin, sin], D::Minus1)?.unsqueeze(2)?;
            let first = x.narrow(D::Minus1, 0, half)?;
            let second = x.narrow(D::Minus1, half, half)?;
            let turned = Tensor::cat(&[&second.neg()?, &first], D::Minus1)?;
            (x.broadcast_mul(&cos)? + turned.broadcast_mul(&sin)?)?
        }
    };
    rotated.reshape((batch, n, width))
}

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: Option<LayerNorm>,
    wqkv: Linear,
    wo: Linear,
    mlp_norm: LayerNorm,
    wi: Linear,
    mlp_wo: Linear,
    global: bool,
}

impl Layer {
    fn load(
        vb: &VarBuilder<'_>,
        config: &ModernBertConfig,
        index: usize,
        kernels: Kernels,
    ) -> Result<Self> {
        let h = config.hidden_size;
        let norm =
            |vb: &VarBuilder<'_>| LayerNorm::load(vb, h, config.eps(), config.norm_bias, kernels);
        Ok(Self {
            // The first layer's input is the normalised embedding already.
            attn_norm: if index == 0 {
                None
            } else {
                Some(norm(&vb.pp("attn_norm"))?)
            },
            wqkv: Linear::load(&vb.pp("attn.Wqkv"), h, 3 * h, config.attention_bias)?
                .for_kernels(kernels)?,
            wo: Linear::load(&vb.pp("attn.Wo"), h, h, config.attention_bias)?
                .for_kernels(kernels)?,
            mlp_norm: norm(&vb.pp("mlp_norm"))?,
            wi: Linear::load(
                &vb.pp("mlp.Wi"),
                h,
                2 * config.intermediate_size,
                config.mlp_bias,
            )?
            .for_kernels(kernels)?,
            mlp_wo: Linear::load(
                &vb.pp("mlp.Wo"),
                config.intermediate_size,
                h,
                config.mlp_bias,
            )?
            .for_kernels(kernels)?,
            global: config.is_global(index),
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        rotary: (&Tensor, &Tensor),
        mask: &AttentionMask,
        heads: usize,
        kernels: Kernels,
    ) -> Result<Tensor> {
        let normed = match &self.attn_norm {
            Some(norm) => norm.forward(x)?,
            None => x.clone(),
        };
        let qkv = self.wqkv.forward(&normed)?;
        let h = x.dim(D::Minus1)?;
        let (cos, sin) = rotary;
        let q = rotate(&qkv.narrow(D::Minus1, 0, h)?, cos, sin, heads, kernels)?;
        let k = rotate(&qkv.narrow(D::Minus1, h, h)?, cos, sin, heads, kernels)?;
        let v = qkv.narrow(D::Minus1, 2 * h, h)?.contiguous()?;
        let context = attention(&q, &k, &v, heads, mask, kernels)?;
        let x = crate::kernels::add(x, &self.wo.forward(&context)?)?;
        let inner = self.wi.forward(&self.mlp_norm.forward(&x)?)?;
        let width = inner.dim(D::Minus1)? / 2;
        let input = inner.narrow(D::Minus1, 0, width)?;
        let gate = inner.narrow(D::Minus1, width, width)?;
        let mlp = self
            .mlp_wo
            .forward(&(crate::ops::gelu_erf(&input, kernels)? * gate)?)?;
        crate::kernels::add(&x, &mlp)
    }
}

/// The ModernBERT encoder stack, with its masked-LM head transform when the checkpoint has one.
#[derive(Debug, Clone)]
pub struct ModernBert {
    config: ModernBertConfig,
    embeddings: Embedding,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
    final_norm: LayerNorm,
    global: Rotary,
    local: Rotary,
    head: Option<(Linear, LayerNorm)>,
    kernels: Kernels,
}

impl ModernBert {
    pub fn load(vb: VarBuilder<'_>, config: &ModernBertConfig, kernels: Kernels) -> Result<Self> {
        let h = config.hidden_size;
        let model = vb.pp("model");
        let norm =
            |vb: &VarBuilder<'_>| LayerNorm::load(vb, h, config.eps(), config.norm_bias, kernels);
        let embeddings = Embedding::new(
            model.get((config.vocab_size, h), "embeddings.tok_embeddings.weight")?,
            h,
        );
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(&model.pp(format!("layers.{i}")), config, i, kernels))
            .collect::<Result<Vec<_>>>()?;
        let head = if vb.contains_tensor("head.dense.weight") {
            Some((
                Linear::load(&vb.pp("head.dense"), h, h, config.classifier_bias)?
                    .for_kernels(kernels)?,
                norm(&vb.pp("head.norm"))?,
            ))
        } else {
            None
        };
        Ok(Self {
            config: config.clone(),
            embeddings,
            embeddings_norm: norm(&model.pp("embeddings.norm"))?,
            layers,
            final_norm: norm(&model.pp("final_norm"))?,
            global: Rotary::new(config, config.global_rope_theta, vb.device())?,
            local: Rotary::new(config, config.local_rope_theta, vb.device())?,
            head,
            kernels,
        })
    }

    pub fn config(&self) -> &ModernBertConfig {
        &self.config
    }

    /// Hidden states `[batch, n, hidden]` (after the final norm) of `tokens` and `positions`
    /// (`[batch, n]`, u32) under an attention `mask`.
    pub fn forward(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        mask: &AttentionMask,
    ) -> Result<Tensor> {
        let mut x = self
            .embeddings_norm
            .forward(&self.embeddings.forward(tokens)?)?;
        let global = self.global.at(positions)?;
        let local = self.local.at(positions)?;
        let local_mask = mask.within(positions, self.config.local_attention / 2)?;
        for layer in &self.layers {
            let (rotary, mask) = if layer.global {
                ((&global.0, &global.1), mask)
            } else {
                ((&local.0, &local.1), &local_mask)
            };
            x = layer.forward(
                &x,
                rotary,
                mask,
                self.config.num_attention_heads,
                self.kernels,
            )?;
        }
        self.final_norm.forward(&x)
    }

    /// The masked-LM head's dense, GELU and norm, where the checkpoint has them: what the
    /// decision head reads from a slot.
    pub fn slot_features(&self, hidden: &Tensor) -> Result<Tensor> {
        match &self.head {
            Some((dense, norm)) => norm.forward(&crate::ops::gelu_erf(
                &dense.forward(hidden)?,
                self.kernels,
            )?),
            None => Ok(hidden.clone()),
        }
    }
}
