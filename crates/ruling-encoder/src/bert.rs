//! BERT (Devlin et al., 2019, arXiv:1810.04805) with explicit position ids and a 3-D
//! attention bias, which the decision layout needs and candle-transformers' `bert` does not
//! take (it numbers positions 0..n and masks only padding).
//!
//! `BertConfig` mirrors the checkpoint's `config.json`; tensor paths mirror the checkpoint's
//! names (`embeddings.word_embeddings`, `encoder.layer.3.attention.self.query`, ...), with or
//! without the `bert.` prefix that task heads add. Post-norm layers, absolute position
//! embeddings, erf GELU, as in Hugging Face's `modeling_bert.py`. The parity test compares it
//! with candle-transformers' `bert` on all-MiniLM-L6-v2 under a full mask.

use std::sync::Arc;

use candle_core::{D, Module, Result, Tensor};
use candle_nn::{Embedding, VarBuilder};
use serde::Deserialize;

use crate::kernels::{add, add_bias};
use crate::ops::{AttentionMask, Kernels, LayerNorm, Linear, attention, attention_at, rows_at};
use crate::rowwise::AfterAttention;

/// The activation of the feed-forward layer, as `config.json` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HiddenAct {
    Gelu,
    #[serde(alias = "gelu_pytorch_tanh")]
    GeluNew,
    Relu,
}

impl HiddenAct {
    fn apply(self, x: &Tensor, kernels: Kernels) -> Result<Tensor> {
        match self {
            Self::Gelu => crate::ops::gelu_erf(x, kernels),
            Self::GeluNew => x.gelu(),
            Self::Relu => x.relu(),
        }
    }
}

fn default_type_vocab() -> usize {
    2
}

fn default_eps() -> f64 {
    1e-12
}

/// A BERT checkpoint's `config.json` (the fields this implementation reads).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: HiddenAct,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
}

/// The query, key and value projections of a layer.
#[derive(Debug, Clone)]
enum Projections {
    /// Apart, so each weight is its own variable: for training.
    Separate {
        query: Linear,
        key: Linear,
        value: Linear,
    },
    /// As one product, queries, keys and values side by side: one pass over the input instead
    /// of three, for answering.
    Fused(Linear),
}

impl Projections {
    /// Queries, keys and values of `x`; the fused form gives column slices of one tensor.
    fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        match self {
            Self::Separate { query, key, value } => {
                Ok((query.forward(x)?, key.forward(x)?, value.forward(x)?))
            }
            Self::Fused(qkv) => thirds(&qkv.forward(x)?),
        }
    }
}

/// The query, key and value slices of a fused projection's output.
fn thirds(qkv: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let h = qkv.dim(D::Minus1)? / 3;
    Ok((
        qkv.narrow(D::Minus1, 0, h)?,
        qkv.narrow(D::Minus1, h, h)?,
        qkv.narrow(D::Minus1, 2 * h, h)?,
    ))
}

#[derive(Debug, Clone)]
struct Layer {
    projections: Projections,
    attention_output: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
    /// The layers after attention as one row-wise pass, where they all multiply in bf16
    /// ([`crate::rowwise`]).
    after: Option<AfterAttention>,
}

impl Layer {
    fn load(vb: &VarBuilder<'_>, config: &BertConfig, kernels: Kernels) -> Result<Self> {
        let h = config.hidden_size;
        let attention = vb.pp("attention");
        let own = attention.pp("self");
        let out = attention.pp("output");
        let query = Linear::load(&own.pp("query"), h, h, true)?;
        let key = Linear::load(&own.pp("key"), h, h, true)?;
        let value = Linear::load(&own.pp("value"), h, h, true)?;
        let projections = match kernels {
            Kernels::Fused | Kernels::FusedBf16 => {
                Projections::Fused(Linear::stacked(&[&query, &key, &value])?.for_kernels(kernels)?)
            }
            Kernels::Differentiable => Projections::Separate { query, key, value },
        };
        let mut layer = Self {
            projections,
            attention_output: Linear::load(&out.pp("dense"), h, h, true)?.for_kernels(kernels)?,
            attention_norm: LayerNorm::load(
                &out.pp("LayerNorm"),
                h,
                config.layer_norm_eps,
                true,
                kernels,
            )?,
            intermediate: Linear::load(
                &vb.pp("intermediate.dense"),
                h,
                config.intermediate_size,
                true,
            )?
            .for_kernels(kernels)?,
            output: Linear::load(&vb.pp("output.dense"), config.intermediate_size, h, true)?
                .for_kernels(kernels)?,
            output_norm: LayerNorm::load(
                &vb.pp("output.LayerNorm"),
                h,
                config.layer_norm_eps,
                true,
                kernels,
            )?,
            after: None,
        };
        if config.hidden_act == HiddenAct::Gelu {
            layer.after = layer.after_attention()?;
        }
        Ok(layer)
    }

    /// The row-wise pass, when every dense layer after attention multiplies in bf16.
    fn after_attention(&self) -> Result<Option<AfterAttention>> {
        let Some(unit) = crate::tiles::unit() else {
            return Ok(None);
        };
        let parts = (
            self.attention_output.dense()?,
            self.attention_norm.norm()?,
            self.intermediate.dense()?,
            self.output.dense()?,
            self.output_norm.norm()?,
        );
        let (
            Some(attention_output),
            Some(attention_norm),
            Some(intermediate),
            Some(output),
            Some(output_norm),
        ) = parts
        else {
            return Ok(None);
        };
        Ok(Some(AfterAttention {
            unit,
            attention_output,
            attention_norm,
            intermediate,
            output,
            output_norm,
        }))
    }

    fn forward(
        &self,
        x: &Tensor,
        mask: &AttentionMask,
        heads: usize,
        act: HiddenAct,
        kernels: Kernels,
    ) -> Result<Tensor> {
        let (q, k, v) = self.projections.forward(x)?;
        let context = attention(&q, &k, &v, heads, mask, kernels)?;
        self.finish(&context, x, act, kernels)
    }

    /// The layer's output for the tokens `keep` alone (`keep.0` is the same list as a tensor):
    /// every token's keys and values, but attention, the output projection and the
    /// feed-forward only at those rows. `None` where the mask or the loaded form cannot do that.
    fn forward_at(
        &self,
        x: &Tensor,
        keep: &(Tensor, Arc<[u32]>),
        mask: &AttentionMask,
        heads: usize,
        act: HiddenAct,
        kernels: Kernels,
    ) -> Result<Option<Tensor>> {
        let Projections::Fused(qkv) = &self.projections else {
            return Ok(None);
        };
        if !mask.answers_at_slots() {
            return Ok(None);
        }
        let every = qkv.forward(x)?;
        let (_, k, v) = thirds(&every)?;
        let (q, _, _) = thirds(&every.squeeze(0)?.index_select(&keep.0, 0)?)?;
        let Some(context) = attention_at(&q, &k, &v, heads, mask, &keep.1)? else {
            return Ok(None);
        };
        let rows = x.squeeze(0)?.index_select(&keep.0, 0)?;
        self.finish(&context, &rows, act, kernels).map(Some)
    }

    /// Everything after attention: output projection, residual and norm, feed-forward,
    /// residual and norm.
    fn finish(
        &self,
        context: &Tensor,
        x: &Tensor,
        act: HiddenAct,
        kernels: Kernels,
    ) -> Result<Tensor> {
        if let Some(after) = &self.after {
            return after.forward(context, x);
        }
        let x = self
            .attention_norm
            .forward(&add(&self.attention_output.forward(context)?, x)?)?;
        let inner = act.apply(&self.intermediate.forward(&x)?, kernels)?;
        self.output_norm
            .forward(&add(&self.output.forward(&inner)?, &x)?)
    }
}

/// The BERT encoder stack: embeddings and layers, no pooler and no task head.
#[derive(Debug, Clone)]
pub struct Bert {
    config: BertConfig,
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    /// Row 0 of the token-type table: every token of the decision layout is type 0.
    token_type: Tensor,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
    kernels: Kernels,
}

impl Bert {
    /// The tensor names every BERT checkpoint has, relative to the model's root (for telling a
    /// BERT checkpoint's prefix and for naming what an incomplete one lacks).
    pub const EMBEDDINGS: &'static str = "embeddings.word_embeddings.weight";

    pub fn load(vb: VarBuilder<'_>, config: &BertConfig, kernels: Kernels) -> Result<Self> {
        let vb = if vb.contains_tensor(&format!("bert.{}", Self::EMBEDDINGS)) {
            vb.pp("bert")
        } else {
            vb
        };
        let h = config.hidden_size;
        let embeddings = vb.pp("embeddings");
        let word_embeddings = Embedding::new(
            embeddings.get((config.vocab_size, h), "word_embeddings.weight")?,
            h,
        );
        let position_embeddings = Embedding::new(
            embeddings.get(
                (config.max_position_embeddings, h),
                "position_embeddings.weight",
            )?,
            h,
        );
        let token_type = embeddings
            .get((config.type_vocab_size, h), "token_type_embeddings.weight")?
            .get(0)?;
        let embeddings_norm = LayerNorm::load(
            &embeddings.pp("LayerNorm"),
            h,
            config.layer_norm_eps,
            true,
            kernels,
        )?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp(format!("encoder.layer.{i}")), config, kernels))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            config: config.clone(),
            word_embeddings,
            position_embeddings,
            token_type,
            embeddings_norm,
            layers,
            kernels,
        })
    }

    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// Hidden states `[batch, n, hidden]` of `tokens` and `positions` (`[batch, n]`, u32) under
    /// an attention `mask`.
    pub fn forward(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        mask: &AttentionMask,
    ) -> Result<Tensor> {
        let mut x = self.embed(tokens, positions)?;
        for layer in &self.layers {
            x = layer.forward(
                &x,
                mask,
                self.config.num_attention_heads,
                self.config.hidden_act,
                self.kernels,
            )?;
        }
        Ok(x)
    }

    /// Hidden states `[m, hidden]` of the tokens `keep` alone (flat indices into the one-row
    /// sequence): the last layer computes nothing else where the mask allows it, which for a
    /// wide choice is most of that layer's work.
    pub fn forward_at(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        mask: &AttentionMask,
        keep: &Tensor,
    ) -> Result<Tensor> {
        let Some((last, layers)) = self.layers.split_last() else {
            return rows_at(&self.forward(tokens, positions, mask)?, keep);
        };
        let mut x = self.embed(tokens, positions)?;
        let (heads, act) = (self.config.num_attention_heads, self.config.hidden_act);
        for layer in layers {
            x = layer.forward(&x, mask, heads, act, self.kernels)?;
        }
        let list: Arc<[u32]> = keep.to_vec1::<u32>()?.into();
        match last.forward_at(&x, &(keep.clone(), list), mask, heads, act, self.kernels)? {
            Some(hidden) => Ok(hidden),
            None => rows_at(&last.forward(&x, mask, heads, act, self.kernels)?, keep),
        }
    }

    fn embed(&self, tokens: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let x = add_bias(
            &add(
                &self.word_embeddings.forward(tokens)?,
                &self.position_embeddings.forward(positions)?,
            )?,
            &self.token_type,
        )?;
        self.embeddings_norm.forward(&x)
    }
}
