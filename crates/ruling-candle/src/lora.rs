//! LoRA adapters on the decoder's projections ("LoRA: Low-Rank Adaptation of Large Language
//! Models", Hu et al., 2021).
//!
//! An adapter adds `scale · B·(A·x)` to chosen projections of the top layers of a frozen base,
//! with `A` of shape `(rank, in)` and `B` of shape `(out, rank)`. Nothing of the base is copied:
//! [`Decoder::with_adapter`](crate::Decoder::with_adapter) shares every base tensor and adds
//! the adapter's few, so one loaded base serves several adapters side by side.
//!
//! On disk an adapter is one safetensors file. Its tensors are `layers.N.PROJ.lora_a` and
//! `layers.N.PROJ.lora_b`; its metadata holds [`AdapterMeta`] as JSON under
//! [`ADAPTER_META_KEY`]: the LoRA layout, the base it was trained on (identity and shape) and
//! what it was trained with. The file's sha256 is the adapter's digest, which calibration files
//! name in their provenance.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::config::DecoderConfig;

/// The safetensors metadata key holding an adapter's [`AdapterMeta`].
pub const ADAPTER_META_KEY: &str = "ruling.adapter";

/// The version of the adapter file layout this code writes and reads.
pub const ADAPTER_FORMAT: u32 = 1;

/// A projection of a decoder layer an adapter can modify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Projection {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Projection {
    pub const ALL: [Projection; 7] = [
        Self::Q,
        Self::K,
        Self::V,
        Self::O,
        Self::Gate,
        Self::Up,
        Self::Down,
    ];
    pub const NAMES: &'static str = "q, k, v, o, gate, up, down";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Q => "q",
            Self::K => "k",
            Self::V => "v",
            Self::O => "o",
            Self::Gate => "gate",
            Self::Up => "up",
            Self::Down => "down",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// `(in, out)` features of this projection in a model of `config`'s shape.
    pub fn dims(self, config: &DecoderConfig) -> (usize, usize) {
        let hidden = config.hidden_size;
        let q = config.num_heads * config.head_dim;
        let kv = config.num_kv_heads * config.head_dim;
        let ffn = config.intermediate_size;
        match self {
            Self::Q => (hidden, q),
            Self::K | Self::V => (hidden, kv),
            Self::O => (q, hidden),
            Self::Gate | Self::Up => (hidden, ffn),
            Self::Down => (ffn, hidden),
        }
    }
}

impl std::fmt::Display for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an adapter sits and how strongly it acts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    pub rank: usize,
    /// Multiplies `B·A·x` (the update is `scale · B·A·x`, not `alpha / rank`).
    pub scale: f64,
    /// Share of each adapted projection's input zeroed (and the rest scaled up) in training.
    pub dropout: f64,
    pub projections: Vec<Projection>,
    /// How many layers, counted from the top, carry adapters.
    pub layers: usize,
}

impl LoraConfig {
    /// The index of the lowest adapted layer of a model with `num_layers` layers.
    pub fn first_layer(&self, num_layers: usize) -> usize {
        num_layers.saturating_sub(self.layers)
    }

    /// What is wrong with this layout for a model of `config`'s shape, if anything.
    pub fn problems(&self, config: &DecoderConfig) -> Vec<String> {
        let mut out = Vec::new();
        if self.rank == 0 {
            out.push("the rank must be at least 1".to_owned());
        }
        if self.layers == 0 || self.layers > config.num_layers {
            out.push(format!(
                "{} adapted layers, but the model has {} (1 to {} allowed)",
                self.layers, config.num_layers, config.num_layers
            ));
        }
        if self.projections.is_empty() {
            out.push(format!(
                "no projections named (choose from {})",
                Projection::NAMES
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            out.push(format!("dropout {} is outside [0, 1)", self.dropout));
        }
        if !self.scale.is_finite() {
            out.push(format!("scale {} is not finite", self.scale));
        }
        out
    }
}

/// The base model an adapter was trained on: its identity and the shape its tensors fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseModel {
    pub model_id: String,
    /// The exact revision of the weights (a sha256 for catalog GGUF files), when known.
    pub revision: Option<String>,
    pub layers: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
}

impl BaseModel {
    pub fn new(config: &DecoderConfig, model_id: &str, revision: Option<&str>) -> Self {
        Self {
            model_id: model_id.to_owned(),
            revision: revision.map(str::to_owned),
            layers: config.num_layers,
            hidden_size: config.hidden_size,
            intermediate_size: config.intermediate_size,
            heads: config.num_heads,
            kv_heads: config.num_kv_heads,
            head_dim: config.head_dim,
            vocab_size: config.vocab_size,
        }
    }

    /// Each field that differs, as "field: the adapter's value vs the base's value".
    pub fn differences(&self, loaded: &BaseModel) -> Vec<String> {
        let mut out = Vec::new();
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".to_owned());
        if self.model_id != loaded.model_id {
            out.push(format!(
                "model_id: trained on {:?}, loaded {:?}",
                self.model_id, loaded.model_id
            ));
        }
        if self.revision != loaded.revision {
            out.push(format!(
                "revision: trained on {}, loaded {}",
                opt(&self.revision),
                opt(&loaded.revision)
            ));
        }
        macro_rules! shape {
            ($($field:ident),*) => {
                $(if self.$field != loaded.$field {
                    out.push(format!(
                        "{}: trained on {}, loaded {}",
                        stringify!($field), self.$field, loaded.$field
                    ));
                })*
            };
        }
        shape!(
            layers,
            hidden_size,
            intermediate_size,
            heads,
            kv_heads,
            head_dim,
            vocab_size
        );
        out
    }
}

/// What an adapter file says about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterMeta {
    pub format: u32,
    pub name: String,
    pub lora: LoraConfig,
    pub base: BaseModel,
    /// How it was trained (the trainer's settings and the data's sha256s).
    #[serde(default)]
    pub training: serde_json::Value,
}

/// Why an adapter cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdapterError {
    #[error("cannot read the adapter {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an adapter file: {reason}")]
    NotAnAdapter { path: PathBuf, reason: String },
    #[error("the adapter {path} was trained for another base: {}", differences.join("; "))]
    OtherBase {
        path: PathBuf,
        differences: Vec<String>,
    },
    #[error("the adapter {path} does not fit its LoRA layout: {}", problems.join("; "))]
    Layout {
        path: PathBuf,
        problems: Vec<String>,
    },
    #[error("tensor library error: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Adapter tensors by layer and projection, ready to add to a forward pass.
#[derive(Debug, Clone)]
pub struct LoraWeights {
    scale: f64,
    dropout: f64,
    /// Per decoder layer: `(A, B)` per projection index.
    layers: Vec<[Option<(Tensor, Tensor)>; 7]>,
}

/// The tensor names of one projection's matrices.
pub fn tensor_names(layer: usize, projection: Projection) -> (String, String) {
    (
        format!("layers.{layer}.{projection}.lora_a"),
        format!("layers.{layer}.{projection}.lora_b"),
    )
}

impl LoraWeights {
    /// The tensors `lora` asks for, taken from `tensors` by name; every expected tensor must be
    /// there with its shape, and nothing else. Tensors made from `Var`s stay trainable.
    pub fn from_tensors(
        lora: &LoraConfig,
        config: &DecoderConfig,
        tensors: &HashMap<String, Tensor>,
    ) -> Result<Self, Vec<String>> {
        let mut problems = lora.problems(config);
        if !problems.is_empty() {
            return Err(problems);
        }
        let first = lora.first_layer(config.num_layers);
        let mut layers: Vec<[Option<(Tensor, Tensor)>; 7]> =
            (0..config.num_layers).map(|_| Default::default()).collect();
        let mut used = 0;
        for (i, slots) in layers.iter_mut().enumerate().skip(first) {
            for &p in &lora.projections {
                let (in_dim, out_dim) = p.dims(config);
                let (a_name, b_name) = tensor_names(i, p);
                let mut fetch = |name: &str, shape: [usize; 2]| match tensors.get(name) {
                    None => {
                        problems.push(format!("tensor {name} is missing"));
                        None
                    }
                    Some(t) if t.dims() != shape => {
                        problems.push(format!(
                            "tensor {name} has shape {:?}, expected {shape:?}",
                            t.dims()
                        ));
                        None
                    }
                    Some(t) => {
                        used += 1;
                        Some(t.clone())
                    }
                };
                let a = fetch(&a_name, [lora.rank, in_dim]);
                let b = fetch(&b_name, [out_dim, lora.rank]);
                if let (Some(a), Some(b)) = (a, b) {
                    slots[p.index()] = Some((a, b));
                }
            }
        }
        if used != tensors.len() {
            let mut extra: Vec<&String> = tensors
                .keys()
                .filter(|name| {
                    !(first..config.num_layers).any(|i| {
                        lora.projections.iter().any(|&p| {
                            let (a, b) = tensor_names(i, p);
                            **name == a || **name == b
                        })
                    })
                })
                .collect();
            extra.sort();
            problems.push(format!(
                "{} tensors the layout does not name (first: {})",
                extra.len(),
                extra.first().map_or("?", |s| s.as_str())
            ));
        }
        if problems.is_empty() {
            Ok(Self {
                scale: lora.scale,
                dropout: lora.dropout,
                layers,
            })
        } else {
            Err(problems)
        }
    }

    /// Fresh trainable matrices for `lora` on a model of `config`'s shape: `A` uniform in
    /// ±1/√in from `seed`, `B` zero, so a new adapter starts as the base.
    pub fn init(
        lora: &LoraConfig,
        config: &DecoderConfig,
        seed: u64,
        device: &Device,
    ) -> candle_core::Result<Vec<(String, Tensor)>> {
        let mut rng = SplitMix(seed);
        let mut out = Vec::new();
        for i in lora.first_layer(config.num_layers)..config.num_layers {
            for &p in &lora.projections {
                let (in_dim, out_dim) = p.dims(config);
                let bound = 1.0 / (in_dim as f64).sqrt();
                let a: Vec<f32> = (0..lora.rank * in_dim)
                    .map(|_| ((rng.unit() * 2.0 - 1.0) * bound) as f32)
                    .collect();
                let (a_name, b_name) = tensor_names(i, p);
                out.push((a_name, Tensor::from_vec(a, (lora.rank, in_dim), device)?));
                out.push((
                    b_name,
                    Tensor::zeros((out_dim, lora.rank), DType::F32, device)?,
                ));
            }
        }
        Ok(out)
    }

    /// Whether layer `layer` carries any adapter.
    pub fn adapts(&self, layer: usize) -> bool {
        self.layers
            .get(layer)
            .is_some_and(|slots| slots.iter().any(Option::is_some))
    }

    /// The lowest adapted layer.
    pub fn first_layer(&self) -> usize {
        (0..self.layers.len())
            .find(|&i| self.adapts(i))
            .unwrap_or(self.layers.len())
    }

    /// `y + scale · B·(A·x)` for projection `p` of `layer`, or `y` when it is not adapted.
    /// `dropout` (training only) drops inputs of the adapter's path.
    pub(crate) fn apply(
        &self,
        layer: usize,
        p: Projection,
        x: &Tensor,
        y: Tensor,
        dropout: Option<&mut SplitMix>,
    ) -> candle_core::Result<Tensor> {
        let Some((a, b)) = self.layers.get(layer).and_then(|s| s[p.index()].as_ref()) else {
            return Ok(y);
        };
        let x = match dropout {
            Some(rng) if self.dropout > 0.0 => {
                let keep = 1.0 - self.dropout;
                let mask: Vec<f32> = (0..x.elem_count())
                    .map(|_| {
                        if rng.unit() < keep {
                            (1.0 / keep) as f32
                        } else {
                            0.0
                        }
                    })
                    .collect();
                (x * Tensor::from_vec(mask, x.shape(), x.device())?)?
            }
            _ => x.clone(),
        };
        let delta = x.matmul(&a.t()?)?.matmul(&b.t()?)?;
        y + (delta * self.scale)?
    }
}

/// A small seeded generator (SplitMix64) for adapter initialisation and dropout masks, so a
/// run is reproducible from its seed and step alone.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A loaded adapter file: what it says about itself, its tensors and its digest.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub meta: AdapterMeta,
    pub path: PathBuf,
    /// sha256 of the file's bytes, in hex.
    pub digest: String,
    tensors: HashMap<String, Tensor>,
}

impl Adapter {
    /// Read an adapter file (the layout is checked against a base in [`Adapter::weights_for`]).
    pub fn load(path: &Path) -> Result<Self, AdapterError> {
        let bytes = std::fs::read(path).map_err(|source| AdapterError::Io {
            path: path.into(),
            source,
        })?;
        let not = |reason: String| AdapterError::NotAnAdapter {
            path: path.into(),
            reason,
        };
        let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| not(format!("not a safetensors file ({e})")))?;
        let json = header
            .metadata()
            .as_ref()
            .and_then(|m| m.get(ADAPTER_META_KEY))
            .ok_or_else(|| not(format!("its metadata has no {ADAPTER_META_KEY:?} entry")))?;
        let meta: AdapterMeta = serde_json::from_str(json).map_err(|e| {
            not(format!(
                "its {ADAPTER_META_KEY:?} metadata is malformed: {e}"
            ))
        })?;
        if meta.format != ADAPTER_FORMAT {
            return Err(not(format!(
                "format {} (this build reads format {ADAPTER_FORMAT})",
                meta.format
            )));
        }
        let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)?
            .into_iter()
            .map(|(name, t)| Ok((name, t.to_dtype(DType::F32)?)))
            .collect::<candle_core::Result<HashMap<_, _>>>()?;
        Ok(Self {
            meta,
            path: path.into(),
            digest: sha256_hex(&bytes),
            tensors,
        })
    }

    /// The adapter's weights for a base of `config`'s shape loaded as `base`: refused, with
    /// every difference named, when it was trained for another base or its tensors do not
    /// match its own layout.
    pub fn weights_for(
        &self,
        config: &DecoderConfig,
        base: &BaseModel,
    ) -> Result<LoraWeights, AdapterError> {
        let differences = self.meta.base.differences(base);
        if !differences.is_empty() {
            return Err(AdapterError::OtherBase {
                path: self.path.clone(),
                differences,
            });
        }
        LoraWeights::from_tensors(&self.meta.lora, config, &self.tensors).map_err(|problems| {
            AdapterError::Layout {
                path: self.path.clone(),
                problems,
            }
        })
    }
}

/// The bytes of an adapter file: `tensors` as f32 with `meta` in the header.
pub fn adapter_bytes(
    meta: &AdapterMeta,
    tensors: &[(String, Tensor)],
) -> Result<Vec<u8>, AdapterError> {
    let json = serde_json::to_string(meta).map_err(|e| AdapterError::NotAnAdapter {
        path: PathBuf::new(),
        reason: e.to_string(),
    })?;
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let t = t.to_dtype(DType::F32)?.contiguous()?;
        let values: Vec<f32> = t.flatten_all()?.to_vec1()?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        data.push((name.clone(), t.dims().to_vec(), bytes));
    }
    data.sort_by(|a, b| a.0.cmp(&b.0));
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| AdapterError::NotAnAdapter {
            path: PathBuf::new(),
            reason: e.to_string(),
        })?;
    let metadata = HashMap::from([(ADAPTER_META_KEY.to_owned(), json)]);
    safetensors::serialize(views, Some(metadata)).map_err(|e| AdapterError::NotAnAdapter {
        path: PathBuf::new(),
        reason: e.to_string(),
    })
}

/// sha256 of `bytes` in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
