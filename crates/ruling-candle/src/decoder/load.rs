//! Building a [`Decoder`] from a checkpoint: GGUF or Hugging Face weight names, one rotary
//! table per distinct (base, scaling), and finding the files of a model directory.

use candle_core::Device;

use super::{Decoder, Layer, RmsNorm, Rope};
use crate::config::DecoderConfig;
use crate::error::LoadError;
use crate::weights::{Name, Source, WeightDtype};

/// Positions beyond this are not given rotary tables even if the model claims more.
const MAX_ROPE_POSITIONS: usize = 32_768;

fn layer_name(i: usize, gguf: &str, hf: &str) -> Name {
    Name {
        gguf: format!("blk.{i}.{gguf}"),
        hf: format!("model.layers.{i}.{hf}"),
    }
}

fn name(gguf: &str, hf: &str) -> Name {
    Name {
        gguf: gguf.into(),
        hf: hf.into(),
    }
}

impl RmsNorm {
    fn load(
        source: &Source,
        name: &Name,
        config: &DecoderConfig,
        device: &Device,
    ) -> Result<Self, LoadError> {
        let mut weight = source.dense(name, device)?;
        if config.norm_weight_offset {
            weight = (weight + 1.0)?;
        }
        Ok(Self {
            weight,
            eps: config.rms_norm_eps as f32,
        })
    }
}

impl Decoder {
    pub(crate) fn load(
        config: DecoderConfig,
        source: &Source,
        dtype: WeightDtype,
        device: &Device,
    ) -> Result<Self, LoadError> {
        let embed_name = name("token_embd.weight", "model.embed_tokens.weight");
        let embed = source.dense(&embed_name, device)?;
        let dims = embed.dims2()?;
        if dims.1 != config.hidden_size {
            return Err(LoadError::TensorShape {
                name: embed_name.hf,
                found: vec![dims.0, dims.1],
                expected: vec![config.vocab_size, config.hidden_size],
            });
        }
        let max_positions = config.max_position_embeddings.min(MAX_ROPE_POSITIONS);
        // One table per distinct (base, scaling): Gemma 3 has two, the others one.
        let mut kinds: Vec<(f64, Option<f64>)> = Vec::new();
        let mut layers = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let kind = config.layer_rope(i);
            let bits =
                |(theta, factor): (f64, Option<f64>)| (theta.to_bits(), factor.map(f64::to_bits));
            let rope = match kinds.iter().position(|&k| bits(k) == bits(kind)) {
                Some(index) => index,
                None => {
                    kinds.push(kind);
                    kinds.len() - 1
                }
            };
            layers.push(Self::load_layer(&config, source, dtype, device, i, rope)?);
        }
        let ropes = kinds
            .iter()
            .map(|&(theta, factor)| {
                Rope::new(theta, factor, config.head_dim, max_positions, device)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norm = RmsNorm::load(
            source,
            &name("output_norm.weight", "model.norm.weight"),
            &config,
            device,
        )?;
        let head = if config.tie_word_embeddings
            || !source.has(&name("output.weight", "lm_head.weight"))
        {
            source.tied_head(&embed, dtype)?
        } else {
            source.linear(
                &name("output.weight", "lm_head.weight"),
                None,
                dtype,
                device,
            )?
        };
        let embed = match config.embedding_scale {
            Some(scale) => (embed * scale)?,
            None => embed,
        };
        Ok(Self {
            config,
            embed,
            layers,
            norm,
            head,
            ropes,
            device: device.clone(),
            max_positions,
            lora: None,
        })
    }

    fn load_layer(
        config: &DecoderConfig,
        source: &Source,
        dtype: WeightDtype,
        device: &Device,
        i: usize,
        rope: usize,
    ) -> Result<Layer, LoadError> {
        let lin = |gguf: &str, hf: &str, bias: bool| {
            let weight = layer_name(i, &format!("{gguf}.weight"), &format!("{hf}.weight"));
            let bias = bias.then(|| layer_name(i, &format!("{gguf}.bias"), &format!("{hf}.bias")));
            source.linear(&weight, bias.as_ref(), dtype, device)
        };
        let norm =
            |gguf: &str, hf: &str| RmsNorm::load(source, &layer_name(i, gguf, hf), config, device);
        let bias = config.attention_bias;
        let gemma = config.sandwich_norms;
        Ok(Layer {
            attn_norm: norm("attn_norm.weight", "input_layernorm.weight")?,
            q: lin("attn_q", "self_attn.q_proj", bias)?,
            k: lin("attn_k", "self_attn.k_proj", bias)?,
            v: lin("attn_v", "self_attn.v_proj", bias)?,
            o: lin("attn_output", "self_attn.o_proj", false)?,
            q_norm: config
                .qk_norm
                .then(|| norm("attn_q_norm.weight", "self_attn.q_norm.weight"))
                .transpose()?,
            k_norm: config
                .qk_norm
                .then(|| norm("attn_k_norm.weight", "self_attn.k_norm.weight"))
                .transpose()?,
            post_attn_norm: gemma
                .then(|| {
                    norm(
                        "post_attention_norm.weight",
                        "post_attention_layernorm.weight",
                    )
                })
                .transpose()?,
            mlp_norm: if gemma {
                norm("ffn_norm.weight", "pre_feedforward_layernorm.weight")?
            } else {
                norm("ffn_norm.weight", "post_attention_layernorm.weight")?
            },
            gate: lin("ffn_gate", "mlp.gate_proj", false)?,
            up: lin("ffn_up", "mlp.up_proj", false)?,
            down: lin("ffn_down", "mlp.down_proj", false)?,
            post_mlp_norm: gemma
                .then(|| norm("post_ffw_norm.weight", "post_feedforward_layernorm.weight"))
                .transpose()?,
            window: config.layer_window(i),
            rope,
        })
    }

    /// Load a decoder from a GGUF file.
    pub fn from_gguf(
        path: &std::path::Path,
        dtype: WeightDtype,
        device: &Device,
    ) -> Result<Self, LoadError> {
        let source = Source::open_gguf(path)?;
        let Source::Gguf { content, .. } = &source else {
            unreachable!("open_gguf returns a GGUF source")
        };
        let config = DecoderConfig::from_gguf(content)?;
        Self::load(config, &source, dtype, device)
    }

    /// Load a decoder from a Hugging Face directory (`config.json`, `*.safetensors`).
    pub fn from_hf_dir(
        dir: &std::path::Path,
        dtype: WeightDtype,
        device: &Device,
    ) -> Result<Self, LoadError> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|source| LoadError::Io {
            path: config_path.clone(),
            source,
        })?;
        let config = DecoderConfig::from_hf_json(&text)?;
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| LoadError::Io {
                path: dir.into(),
                source,
            })?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(LoadError::NotAModel(dir.into()));
        }
        let source = Source::open_safetensors(&files, device)?;
        Self::load(config, &source, dtype, device)
    }
}
