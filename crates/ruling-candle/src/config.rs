//! One configuration for every supported decoder family, read from a Hugging Face
//! `config.json` or from a GGUF file's metadata.
//!
//! llama, qwen2, qwen3 and gemma3 share one transformer; they differ in the switches below:
//! biases on the q/k/v projections (qwen2), a norm on each query and key head (qwen3,
//! gemma3), GELU rather than SiLU, an embedding scale, sliding-window layers, extra norms
//! around the attention and MLP, and the head tied to the embedding.

use candle_core::quantized::gguf_file;
use serde::Deserialize;

use crate::error::LoadError;

/// The model families this decoder implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Family {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "llama" | "mistral" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            "gemma3" | "gemma3_text" => Some(Self::Gemma3),
            _ => None,
        }
    }

    pub const SUPPORTED: &'static str = "llama, qwen2, qwen3, gemma3";
}

/// How a rotary embedding pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Dimension i with i + d/2 (Hugging Face's `rotate_half`, llama.cpp's NEOX mode).
    Half,
    /// Dimension 2i with 2i + 1: how llama.cpp's converter lays out llama q/k weights.
    Interleaved,
}

/// The MLP's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// The tanh approximation of GELU that Gemma uses (`gelu_pytorch_tanh`).
    GeluTanh,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Rope base of the sliding-window layers, where it differs (Gemma 3).
    pub rope_local_theta: Option<f64>,
    /// Linear rope scaling (positions divided by this) of the layers at `rope_theta`: Gemma 3
    /// 4B and larger scale their global layers by 8, and transformers' local rotary embedding
    /// (`rotary_emb_local`) is built without scaling.
    pub rope_linear_factor: Option<f64>,
    pub rope_style: RopeStyle,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub qk_norm: bool,
    pub activation: Activation,
    /// Multiply embeddings by this (Gemma: sqrt(hidden_size)).
    pub embedding_scale: Option<f64>,
    /// Norms on the attention and MLP outputs before the residual add (Gemma 3).
    pub sandwich_norms: bool,
    /// Norm weights are stored as an offset from one (Hugging Face Gemma: `x * (1 + w)`).
    pub norm_weight_offset: bool,
    /// Attention window of the local layers, and which layers are local.
    pub sliding_window: Option<usize>,
    pub sliding_window_pattern: Option<usize>,
    /// Which layers are local, where `config.json` lists them (transformers 4.53 and later
    /// write `layer_types` and drop `sliding_window_pattern`); it overrides the pattern.
    pub local_layers: Option<Vec<bool>>,
    /// Attention scores are scaled by 1/sqrt(this) (head_dim unless the model says otherwise).
    pub query_pre_attn_scalar: f64,
}

impl DecoderConfig {
    /// Whether layer `index` attends only within the sliding window.
    pub fn is_local_layer(&self, index: usize) -> bool {
        if let Some(local) = &self.local_layers {
            return self.sliding_window.is_some() && local.get(index).copied().unwrap_or(false);
        }
        match (self.sliding_window, self.sliding_window_pattern) {
            (Some(_), Some(pattern)) if pattern > 0 => !(index + 1).is_multiple_of(pattern),
            (Some(_), _) => true,
            _ => false,
        }
    }

    pub fn layer_window(&self, index: usize) -> Option<usize> {
        self.sliding_window.filter(|_| self.is_local_layer(index))
    }

    pub fn layer_rope_theta(&self, index: usize) -> f64 {
        self.layer_rope(index).0
    }

    /// Rope base and linear position scaling of layer `index`.
    pub fn layer_rope(&self, index: usize) -> (f64, Option<f64>) {
        match self.rope_local_theta {
            Some(local) if self.is_local_layer(index) => (local, None),
            _ => (self.rope_theta, self.rope_linear_factor),
        }
    }

    fn check(self) -> Result<Self, LoadError> {
        let bad = |reason: String| Err(LoadError::Config(reason));
        if self.num_heads == 0
            || self.num_kv_heads == 0
            || !self.num_heads.is_multiple_of(self.num_kv_heads)
        {
            return bad(format!(
                "{} attention heads cannot share {} key/value heads evenly",
                self.num_heads, self.num_kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim {} must be even and positive",
                self.head_dim
            ));
        }
        if self.num_layers == 0 || self.hidden_size == 0 || self.vocab_size == 0 {
            return bad("a model needs layers, a hidden size and a vocabulary".into());
        }
        if let Some(factor) = self.rope_linear_factor.filter(|f| f.is_nan() || *f <= 0.0) {
            return bad(format!(
                "linear rope scaling factor {factor} must be positive"
            ));
        }
        Ok(self)
    }

    /// Read a Hugging Face `config.json`.
    pub fn from_hf_json(text: &str) -> Result<Self, LoadError> {
        let raw: HfConfig = serde_json::from_str(text)
            .map_err(|e| LoadError::Config(format!("config.json: {e}")))?;
        let family =
            Family::parse(&raw.model_type).ok_or_else(|| LoadError::UnsupportedFamily {
                found: raw.model_type.clone(),
            })?;
        let gemma = family == Family::Gemma3;
        let head_dim = raw
            .head_dim
            .unwrap_or(raw.hidden_size / raw.num_attention_heads.max(1));
        Self {
            family,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_layers: raw.num_hidden_layers,
            num_heads: raw.num_attention_heads,
            num_kv_heads: raw.num_key_value_heads.unwrap_or(raw.num_attention_heads),
            head_dim,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta: raw.rope_theta.unwrap_or(10_000.0),
            rope_local_theta: raw.rope_local_base_freq,
            rope_linear_factor: raw
                .rope_scaling
                .as_ref()
                .map(HfRopeScaling::linear_factor)
                .transpose()?
                .flatten(),
            rope_style: RopeStyle::Half,
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(4096),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(gemma),
            attention_bias: raw.attention_bias.unwrap_or(family == Family::Qwen2),
            qk_norm: matches!(family, Family::Qwen3 | Family::Gemma3),
            activation: match raw
                .hidden_activation
                .as_deref()
                .or(raw.hidden_act.as_deref())
            {
                Some("gelu_pytorch_tanh" | "gelu") => Activation::GeluTanh,
                _ => Activation::Silu,
            },
            embedding_scale: gemma.then(|| (raw.hidden_size as f64).sqrt()),
            sandwich_norms: gemma,
            norm_weight_offset: gemma,
            sliding_window: match family {
                Family::Gemma3 => raw.sliding_window,
                _ if raw.use_sliding_window == Some(true) => raw.sliding_window,
                _ => None,
            },
            sliding_window_pattern: if gemma {
                raw.sliding_window_pattern.or(Some(6))
            } else {
                None
            },
            local_layers: match &raw.layer_types {
                Some(types) if types.len() != raw.num_hidden_layers => {
                    return Err(LoadError::Config(format!(
                        "config.json: layer_types lists {} layers, num_hidden_layers is {}",
                        types.len(),
                        raw.num_hidden_layers
                    )));
                }
                Some(types) => Some(types.iter().map(|t| t == "sliding_attention").collect()),
                None => None,
            },
            query_pre_attn_scalar: raw.query_pre_attn_scalar.unwrap_or(head_dim as f64),
        }
        .check()
    }

    /// Read the hyper-parameters llama.cpp's converter writes into a GGUF file.
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self, LoadError> {
        let meta = Meta(content);
        let arch = meta.string("general.architecture")?;
        let family = Family::parse(&arch).ok_or_else(|| LoadError::UnsupportedFamily {
            found: arch.clone(),
        })?;
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let hidden_size = meta.usize(&key("embedding_length"))?;
        let num_heads = meta.usize(&key("attention.head_count"))?;
        let head_dim = meta
            .opt_usize(&key("attention.key_length"))?
            .unwrap_or(hidden_size / num_heads.max(1));
        let embedding = content
            .tensor_infos
            .get("token_embd.weight")
            .ok_or_else(|| LoadError::MissingTensor("token_embd.weight".into()))?;
        let vocab_size = embedding.shape.dims().first().copied().unwrap_or(0);
        let has = |name: &str| content.tensor_infos.contains_key(name);
        let gemma = family == Family::Gemma3;
        Self {
            family,
            vocab_size,
            hidden_size,
            intermediate_size: meta.usize(&key("feed_forward_length"))?,
            num_layers: meta.usize(&key("block_count"))?,
            num_heads,
            num_kv_heads: meta
                .opt_usize(&key("attention.head_count_kv"))?
                .unwrap_or(num_heads),
            head_dim,
            rms_norm_eps: meta.f64(&key("attention.layer_norm_rms_epsilon"))?,
            rope_theta: meta.opt_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0),
            // llama.cpp runs Gemma 3's local layers at the Gemma default base.
            rope_local_theta: gemma.then_some(10_000.0),
            rope_linear_factor: match meta.opt_string(&key("rope.scaling.type"))?.as_deref() {
                None | Some("none") => None,
                Some("linear") => meta.opt_f64(&key("rope.scaling.factor"))?,
                Some(other) => {
                    return Err(LoadError::Config(format!(
                        "{}: rope scaling {other:?} is not supported (only linear)",
                        key("rope.scaling.type")
                    )));
                }
            },
            rope_style: if family == Family::Llama {
                RopeStyle::Interleaved
            } else {
                RopeStyle::Half
            },
            max_position_embeddings: meta.opt_usize(&key("context_length"))?.unwrap_or(4096),
            tie_word_embeddings: !has("output.weight"),
            attention_bias: has("blk.0.attn_q.bias"),
            qk_norm: has("blk.0.attn_q_norm.weight"),
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            embedding_scale: gemma.then(|| (hidden_size as f64).sqrt()),
            sandwich_norms: has("blk.0.post_attention_norm.weight"),
            // The converter adds the one into Gemma's norm weights.
            norm_weight_offset: false,
            sliding_window: if gemma {
                meta.opt_usize(&key("attention.sliding_window"))?
            } else {
                None
            },
            sliding_window_pattern: gemma.then_some(6),
            local_layers: None,
            query_pre_attn_scalar: head_dim as f64,
        }
        .check()
    }
}

#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    hidden_act: Option<String>,
    hidden_activation: Option<String>,
    sliding_window: Option<usize>,
    sliding_window_pattern: Option<usize>,
    use_sliding_window: Option<bool>,
    query_pre_attn_scalar: Option<f64>,
    rope_scaling: Option<HfRopeScaling>,
    layer_types: Option<Vec<String>>,
}

/// `rope_scaling` of a `config.json`. transformers writes the kind as `rope_type`, older
/// configs as `type` (some both).
#[derive(Debug, Deserialize)]
struct HfRopeScaling {
    rope_type: Option<String>,
    #[serde(rename = "type")]
    legacy_type: Option<String>,
    factor: Option<f64>,
}

impl HfRopeScaling {
    /// The factor of a linear scaling, nothing for none; the other kinds (llama3, yarn,
    /// dynamic, ...) change the rotary tables in ways this decoder does not implement, and
    /// ignoring them would give wrong logits without a word.
    fn linear_factor(&self) -> Result<Option<f64>, LoadError> {
        match self.rope_type.as_deref().or(self.legacy_type.as_deref()) {
            None | Some("default") => Ok(None),
            Some("linear") => self.factor.map(Some).ok_or_else(|| {
                LoadError::Config("config.json: rope_scaling linear without a factor".into())
            }),
            Some(other) => Err(LoadError::Config(format!(
                "config.json: rope_scaling type {other:?} is not supported (only linear)"
            ))),
        }
    }
}

/// Typed reads of GGUF metadata that name the key when it is missing or mistyped.
struct Meta<'a>(&'a gguf_file::Content);

impl Meta<'_> {
    fn get(&self, key: &str) -> Result<Option<&gguf_file::Value>, LoadError> {
        Ok(self.0.metadata.get(key))
    }

    fn required(&self, key: &str) -> Result<&gguf_file::Value, LoadError> {
        self.get(key)?
            .ok_or_else(|| LoadError::MissingMetadata(key.to_owned()))
    }

    fn opt_string(&self, key: &str) -> Result<Option<String>, LoadError> {
        self.get(key)?
            .map(|v| v.to_string().cloned())
            .transpose()
            .map_err(|e| LoadError::metadata(key, e))
    }

    fn string(&self, key: &str) -> Result<String, LoadError> {
        self.required(key)?
            .to_string()
            .cloned()
            .map_err(|e| LoadError::metadata(key, e))
    }

    fn usize(&self, key: &str) -> Result<usize, LoadError> {
        self.opt_usize(key)?
            .ok_or_else(|| LoadError::MissingMetadata(key.to_owned()))
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>, LoadError> {
        self.get(key)?
            .map(|v| {
                v.to_u64()
                    .or_else(|_| v.to_u32().map(u64::from))
                    .map(|v| v as usize)
            })
            .transpose()
            .map_err(|e| LoadError::metadata(key, e))
    }

    fn f64(&self, key: &str) -> Result<f64, LoadError> {
        self.opt_f64(key)?
            .ok_or_else(|| LoadError::MissingMetadata(key.to_owned()))
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>, LoadError> {
        self.get(key)?
            .map(|v| v.to_f32().map(f64::from).or_else(|_| v.to_f64()))
            .transpose()
            .map_err(|e| LoadError::metadata(key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemma 3 4B's shape of `config.json`, cut down to what the parser reads.
    fn gemma3_json(rope_scaling: &str) -> String {
        format!(
            r#"{{"model_type": "gemma3_text", "vocab_size": 32, "hidden_size": 16,
                "intermediate_size": 32, "num_hidden_layers": 6, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 8, "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "sliding_window": 4, "query_pre_attn_scalar": 8,
                "rope_scaling": {rope_scaling}}}"#
        )
    }

    #[test]
    fn linear_rope_scaling_applies_to_the_global_layers_only() {
        let config = DecoderConfig::from_hf_json(&gemma3_json(
            r#"{"factor": 8.0, "rope_type": "linear", "type": "linear"}"#,
        ))
        .unwrap();
        let ropes: Vec<(f64, Option<f64>)> = (0..6).map(|i| config.layer_rope(i)).collect();
        let local = (10_000.0, None);
        assert_eq!(ropes, [local, local, local, local, local, (1e6, Some(8.0))]);
        let plain = DecoderConfig::from_hf_json(&gemma3_json("null")).unwrap();
        assert_eq!(plain.layer_rope(5), (1e6, None));
    }

    /// gemma-3-270m's config.json (transformers 4.55) has `layer_types` and no
    /// `sliding_window_pattern`; the list decides, whatever the default pattern would say.
    #[test]
    fn layer_types_decide_which_layers_are_local() {
        let text = gemma3_json("null").replace(
            r#""rope_scaling": null"#,
            r#""rope_scaling": null, "_sliding_window_pattern": 6, "layer_types":
               ["sliding_attention", "full_attention", "sliding_attention",
                "sliding_attention", "sliding_attention", "full_attention"]"#,
        );
        let config = DecoderConfig::from_hf_json(&text).unwrap();
        let local: Vec<bool> = (0..6).map(|i| config.is_local_layer(i)).collect();
        assert_eq!(local, [true, false, true, true, true, false]);
        assert_eq!(config.layer_window(1), None);
        assert_eq!(config.layer_window(2), Some(4));
        let short = gemma3_json("null").replace(
            r#""rope_scaling": null"#,
            r#""rope_scaling": null, "layer_types": ["sliding_attention", "full_attention"]"#,
        );
        let err = DecoderConfig::from_hf_json(&short).unwrap_err();
        assert!(err.to_string().contains("layer_types"), "{err}");
    }

    #[test]
    fn rope_scaling_this_decoder_cannot_compute_is_refused() {
        let err = DecoderConfig::from_hf_json(&gemma3_json(
            r#"{"factor": 8.0, "rope_type": "yarn", "original_max_position_embeddings": 8}"#,
        ))
        .unwrap_err();
        assert!(err.to_string().contains("yarn"), "{err}");
        let err = DecoderConfig::from_hf_json(&gemma3_json(r#"{"type": "linear"}"#)).unwrap_err();
        assert!(err.to_string().contains("factor"), "{err}");
    }
}
