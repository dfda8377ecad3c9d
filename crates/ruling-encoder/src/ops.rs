//! The few tensor operations both encoder families share, in two flavours.
//!
//! candle's fused CPU kernels for layer norm and softmax are fast but carry no gradient
//! (upstream candle issues #2168, #2977, #3011), and its differentiable versions are built
//! from a dozen slow elementwise operations, so a model that is being trained uses the kernels
//! of [`crate::kernels`], which carry their own gradients. [`Kernels`] says which flavour a
//! model runs: serving uses candle's fused ones, training ours. Both compute the same function;
//! they differ only in floating-point rounding. Serving may also multiply its dense layers in
//! bf16 on the CPU's AMX tiles or AVX-512 BF16 ([`crate::tiles`]), where it has either.

use std::sync::Arc;

use candle_core::{D, DType, Device, Module, Result, Tensor};

use crate::attend::{Attend, KeyLists};
use crate::layout::LayoutPlan;

/// Which implementations of layer norm, softmax and the dense products a model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernels {
    /// candle's fused CPU kernels and f32 products: for inference, exact to f32 rounding.
    #[default]
    Fused,
    /// `Fused`, with each dense layer's product in bf16 where the CPU has AMX tiles or
    /// AVX-512 BF16 and the layer's widths are multiples of 32 (f32 elsewhere): for serving.
    /// Faster products (several times on tiles), each within about 0.3% of the f32 one.
    FusedBf16,
    /// Plain operations that backpropagate: for training.
    Differentiable,
}

impl Kernels {
    /// Whether the model answers (candle's fused kernels) rather than trains.
    pub fn fused(self) -> bool {
        self != Self::Differentiable
    }
}

/// A dense layer whose input may have any number of leading dimensions; they are flattened so
/// one matrix product covers every row of a batch.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    /// The weight packed for bf16 products, when the layer multiplies that way.
    tiles: Option<Arc<crate::tiles::PackedWeight>>,
}

impl Linear {
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self {
            weight,
            bias,
            tiles: None,
        }
    }

    /// The same layer, multiplying in bf16 when `kernels` asks for it and this CPU
    /// and the layer's widths allow.
    pub fn for_kernels(mut self, kernels: Kernels) -> Result<Self> {
        if kernels == Kernels::FusedBf16 && crate::tiles::available() {
            let (outputs, inputs) = self.weight.dims2()?;
            let weight = self.weight.flatten_all()?.to_vec1::<f32>()?;
            self.tiles = crate::tiles::PackedWeight::new(&weight, outputs, inputs).map(Arc::new);
        }
        Ok(self)
    }

    /// The layer as [`crate::rowwise`] takes it: packed for bf16 products, with its bias.
    pub(crate) fn dense(&self) -> Result<Option<crate::rowwise::Dense>> {
        let (Some(weight), Some(bias)) = (&self.tiles, &self.bias) else {
            return Ok(None);
        };
        Ok(Some(crate::rowwise::Dense {
            weight: Arc::clone(weight),
            bias: bias.to_vec1()?,
        }))
    }

    /// Several layers over the same input as one, their outputs side by side in order.
    pub fn stacked(parts: &[&Self]) -> Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(|p| &p.weight).collect();
        let biases: Option<Vec<&Tensor>> = parts.iter().map(|p| p.bias.as_ref()).collect();
        Ok(Self::new(
            Tensor::cat(&weights, 0)?,
            biases.map(|b| Tensor::cat(&b, 0)).transpose()?,
        ))
    }

    pub fn load(
        vb: &candle_nn::VarBuilder<'_>,
        inputs: usize,
        outputs: usize,
        bias: bool,
    ) -> Result<Self> {
        let weight = vb.get((outputs, inputs), "weight")?;
        let bias = if bias {
            Some(vb.get(outputs, "bias")?)
        } else {
            None
        };
        Ok(Self::new(weight, bias))
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(tiles) = &self.tiles {
            return crate::tiles::linear(x, tiles, self.bias.as_ref());
        }
        let dims = x.dims();
        let inputs = dims[dims.len() - 1];
        let rows = x.elem_count() / inputs.max(1);
        let y = x.reshape((rows, inputs))?.matmul(&self.weight.t()?)?;
        let y = match &self.bias {
            Some(bias) => crate::kernels::add_bias(&y, bias)?,
            None => y,
        };
        let mut shape = dims.to_vec();
        *shape
            .last_mut()
            .expect("a linear input has a last dimension") = self.weight.dim(0)?;
        y.reshape(shape)
    }
}

/// Layer normalisation over the last dimension, with or without a bias.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Option<Tensor>,
    eps: f64,
    kernels: Kernels,
}

impl LayerNorm {
    pub fn load(
        vb: &candle_nn::VarBuilder<'_>,
        size: usize,
        eps: f64,
        bias: bool,
        kernels: Kernels,
    ) -> Result<Self> {
        let weight = vb.get(size, "weight")?;
        let bias = if bias {
            Some(vb.get(size, "bias")?)
        } else {
            None
        };
        Ok(Self {
            weight,
            bias,
            eps,
            kernels,
        })
    }
}

impl LayerNorm {
    /// The norm as [`crate::rowwise`] takes it; `None` without a bias.
    pub(crate) fn norm(&self) -> Result<Option<crate::rowwise::Norm>> {
        let Some(bias) = &self.bias else {
            return Ok(None);
        };
        Ok(Some(crate::rowwise::Norm {
            weight: self.weight.to_vec1()?,
            bias: bias.to_vec1()?,
            eps: self.eps as f32,
        }))
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.kernels.fused() && x.is_contiguous() && x.dtype() == DType::F32 {
            let zeros;
            let bias = match &self.bias {
                Some(bias) => bias,
                None => {
                    zeros = self.weight.zeros_like()?;
                    &zeros
                }
            };
            return candle_nn::ops::layer_norm(x, &self.weight, bias, self.eps as f32);
        }
        let normed = crate::kernels::standardize(x, self.eps)?;
        let scaled = normed.broadcast_mul(&self.weight)?;
        match &self.bias {
            Some(bias) => scaled.broadcast_add(bias),
            None => Ok(scaled),
        }
    }
}

/// Softmax over the last dimension.
pub fn softmax_last(x: &Tensor, kernels: Kernels) -> Result<Tensor> {
    match kernels {
        Kernels::Fused | Kernels::FusedBf16 => candle_nn::ops::softmax_last_dim(x),
        Kernels::Differentiable => crate::kernels::softmax(x),
    }
}

/// Who attends to whom: a dense additive bias, or the decision layout's factored mask.
#[derive(Debug, Clone)]
pub enum AttentionMask {
    /// `[batch, n, n]` additive bias (0 where a token may attend, `f32::MIN` where not).
    Dense(Tensor),
    /// The decision layout per part ([`crate::layout`]); the batch is one row.
    Grouped(GroupedMask),
}

/// [`LayoutPlan`] as tensors.
#[derive(Debug, Clone)]
pub struct GroupedMask {
    buckets: Vec<Bucket>,
    gather: Tensor,
    /// The same mask as per-part key lists, for the one-pass attention of answering
    /// ([`crate::attend`]); `None` for the per-row training layout.
    lists: Option<Arc<KeyLists>>,
}

#[derive(Debug, Clone)]
struct Bucket {
    units: usize,
    queries: usize,
    keys: usize,
    query_index: Tensor,
    key_index: Tensor,
    /// `[units, 1, 1 or queries, keys]`.
    bias: Tensor,
}

impl GroupedMask {
    pub fn new(plan: &LayoutPlan, device: &Device) -> Result<Self> {
        let buckets = plan
            .buckets
            .iter()
            .map(|b| {
                Ok(Bucket {
                    units: b.units,
                    queries: b.queries,
                    keys: b.keys,
                    query_index: Tensor::from_slice(&b.query_index, b.query_index.len(), device)?,
                    key_index: Tensor::from_slice(&b.key_index, b.key_index.len(), device)?,
                    bias: Tensor::from_slice(
                        &b.key_bias,
                        (b.units, 1, b.bias_rows, b.keys),
                        device,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            buckets,
            gather: Tensor::from_slice(&plan.gather, plan.gather.len(), device)?,
            lists: KeyLists::new(plan).map(Arc::new),
        })
    }
}

impl AttentionMask {
    /// The mask with every query-key pair more than `reach` positions apart masked as well
    /// (ModernBERT's local layers). `positions` is `[batch, n]`.
    pub fn within(&self, positions: &Tensor, reach: usize) -> Result<Self> {
        let far = |q: &Tensor, k: &Tensor| -> Result<Tensor> {
            let q = q.to_dtype(DType::F32)?;
            let k = k.to_dtype(DType::F32)?;
            q.unsqueeze(D::Minus1)?
                .broadcast_sub(&k.unsqueeze(D::Minus2)?)?
                .abs()?
                .gt(reach as f64)
        };
        match self {
            Self::Dense(bias) => {
                let far = far(positions, positions)?;
                let blocked = Tensor::full(f32::MIN, bias.shape(), bias.device())?;
                Ok(Self::Dense(far.where_cond(&blocked, bias)?))
            }
            Self::Grouped(mask) => {
                let flat = positions.flatten_all()?;
                let buckets = mask
                    .buckets
                    .iter()
                    .map(|b| {
                        let q = flat
                            .index_select(&b.query_index, 0)?
                            .reshape((b.units, b.queries))?;
                        let k = flat
                            .index_select(&b.key_index, 0)?
                            .reshape((b.units, b.keys))?;
                        let far = far(&q, &k)?.unsqueeze(1)?;
                        let bias = b.bias.broadcast_as((b.units, 1, b.queries, b.keys))?;
                        let blocked = Tensor::full(f32::MIN, bias.shape(), bias.device())?;
                        Ok(Bucket {
                            bias: far.where_cond(&blocked, &bias.contiguous()?)?,
                            ..b.clone()
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let lists = match &mask.lists {
                    Some(lists) => {
                        Some(Arc::new(lists.within(flat.to_vec1::<u32>()?.into(), reach)))
                    }
                    None => None,
                };
                Ok(Self::Grouped(GroupedMask {
                    buckets,
                    gather: mask.gather.clone(),
                    lists,
                }))
            }
        }
    }
}

/// Multi-head scaled dot-product attention of `[batch, n, heads * head_dim]` queries, keys and
/// values under `mask`, giving `[batch, n, heads * head_dim]`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    mask: &AttentionMask,
    kernels: Kernels,
) -> Result<Tensor> {
    let (batch, n, width) = q.dims3()?;
    let head_dim = width / heads;
    let scale = 1.0 / (head_dim as f64).sqrt();
    match mask {
        AttentionMask::Dense(bias) => {
            let (q, k, v) = (
                split_heads(q, heads)?,
                split_heads(k, heads)?,
                split_heads(v, heads)?,
            );
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&bias.unsqueeze(1)?)?;
            softmax_last(&scores, kernels)?
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((batch, n, width))
        }
        AttentionMask::Grouped(grouped) => {
            if batch != 1 {
                candle_core::bail!("a grouped mask lays the batch out as one row, not {batch}");
            }
            if let Some(lists) = &grouped.lists
                && kernels.fused()
                && q.device().is_cpu()
                && q.dtype() == DType::F32
            {
                let attend = Attend {
                    lists: Arc::clone(lists),
                    heads,
                    queries: None,
                };
                return q.apply_op3_no_bwd(k, v, &attend)?.reshape((1, n, width));
            }
            // Answering's fused projection hands over column slices of one product; the
            // gathers below need whole rows.
            let (q, k, v) = (
                q.squeeze(0)?.contiguous()?,
                k.squeeze(0)?.contiguous()?,
                v.squeeze(0)?.contiguous()?,
            );
            let gathered = |x: &Tensor, index: &Tensor, units: usize, rows: usize| {
                x.index_select(index, 0)?
                    .reshape((units, rows, heads, head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let mut outputs = Vec::with_capacity(grouped.buckets.len());
            for b in &grouped.buckets {
                let qb = gathered(&q, &b.query_index, b.units, b.queries)?;
                let kb = gathered(&k, &b.key_index, b.units, b.keys)?;
                let vb = gathered(&v, &b.key_index, b.units, b.keys)?;
                let scores = (qb.matmul(&kb.t()?)? * scale)?.broadcast_add(&b.bias)?;
                let out = softmax_last(&scores, kernels)?.matmul(&vb)?;
                outputs.push(out.transpose(1, 2)?.reshape((b.units * b.queries, width))?);
            }
            Tensor::cat(&outputs, 0)?
                .index_select(&grouped.gather, 0)?
                .reshape((1, n, width))
        }
    }
}

/// Attention for the tokens `queries` alone: `q` holds their rows (`[m, heads * head_dim]`),
/// `k` and `v` every token's (`[1, n, heads * head_dim]`). `None` when the mask has no key lists
/// (only the answering layout has them), and the caller runs the whole sequence instead.
pub fn attention_at(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    mask: &AttentionMask,
    queries: &Arc<[u32]>,
) -> Result<Option<Tensor>> {
    let AttentionMask::Grouped(GroupedMask {
        lists: Some(lists), ..
    }) = mask
    else {
        return Ok(None);
    };
    let attend = Attend {
        lists: Arc::clone(lists),
        heads,
        queries: Some(Arc::clone(queries)),
    };
    q.apply_op3_no_bwd(k, v, &attend).map(Some)
}

impl AttentionMask {
    /// Whether [`attention_at`] can run under this mask.
    pub fn answers_at_slots(&self) -> bool {
        matches!(self, Self::Grouped(GroupedMask { lists: Some(_), .. }))
    }
}

/// The rows `keep` (flat indices over batch and sequence) of `[batch, n, hidden]` states, as
/// `[m, hidden]`.
pub fn rows_at(hidden: &Tensor, keep: &Tensor) -> Result<Tensor> {
    let (rows, width, size) = hidden.dims3()?;
    hidden.reshape((rows * width, size))?.index_select(keep, 0)
}

/// `[batch, n, heads * head_dim]` as `[batch, heads, n, head_dim]`, contiguous.
pub fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    let (batch, n, width) = x.dims3()?;
    x.reshape((batch, n, heads, width / heads))?
        .transpose(1, 2)?
        .contiguous()
}

/// GELU in its exact (erf) form, for the feed-forward layers: [`crate::kernels::gelu`] in both
/// flavours (candle's `gelu_erf` calls libm's scalar `erf`, a fifth of a forward pass here).
pub fn gelu_erf(x: &Tensor, _kernels: Kernels) -> Result<Tensor> {
    crate::kernels::gelu(x)
}
