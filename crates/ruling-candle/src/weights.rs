//! Where a decoder's tensors come from, and at which precision its matrices are kept.
//!
//! Matrices become [`Linear`] layers over candle's `QMatMul`: quantized GGUF blocks stay
//! quantized (small, and fast for large batches with k-quants), or are dequantized to f32/f16
//! (fast at every batch size, four to eight times the memory), or re-quantized to Q8_0 (Q4_0
//! and Q4_1 are the slowest CPU kernels by far). Vectors (norms, biases) are always f32.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
use candle_core::{DType, Device, Module, Tensor};

use crate::error::LoadError;

/// The precision matrices are kept at after loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightDtype {
    /// Chosen per model from measurements: see [`WeightDtype::resolve`].
    #[default]
    Auto,
    /// As stored: quantized GGUF blocks stay quantized, safetensors stay f32.
    Native,
    /// Dequantized to f32.
    F32,
    /// Dequantized to f16 (activations are converted for each matmul).
    F16,
    /// Re-quantized to Q8_0 (8.5 bits per weight).
    Q8_0,
}

impl WeightDtype {
    pub const NAMES: &'static str = "auto, native, f32, f16, q8_0";

    /// What `Auto` means for a matrix stored as `stored`. Q4_0/Q4_1 and other legacy quants
    /// have slow CPU kernels at every batch size, so they are dequantized; k-quants and Q8_0
    /// match f32 at the batch sizes prefill and branch scoring use, and stay as they are.
    pub fn resolve(self, stored: GgmlDType) -> Self {
        match self {
            Self::Auto => match stored {
                GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1 => Self::F32,
                _ => Self::Native,
            },
            other => other,
        }
    }
}

/// Parsed case-insensitively from one of [`WeightDtype::NAMES`] (`q8` is taken for `q8_0`);
/// the error names what was given and what is allowed, ready for a command line.
impl std::str::FromStr for WeightDtype {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            "q8_0" | "q8" => Ok(Self::Q8_0),
            _ => Err(format!(
                "unknown dtype {name:?}; expected one of {}",
                Self::NAMES
            )),
        }
    }
}

/// A matrix and its optional bias, applied to rows of a 2-D input.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: QMatMul,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.weight.forward(x)?;
        match &self.bias {
            Some(bias) => y.broadcast_add(bias),
            None => Ok(y),
        }
    }

    /// `forward`, for a pass that needs the input's gradient but never the matrix's: the
    /// product is computed outside the graph and joined to it by a custom op, whose
    /// backward pass is one product with the matrix (candle's own matmul backward would also
    /// compute the frozen matrix's gradient, as much work again). Quantized matrices pass no
    /// gradient at all (see [`Linear::to_f32`]).
    pub fn forward_input_grad(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match &self.weight {
            QMatMul::Tensor(w) if w.dtype() == DType::F32 && x.dims().len() == 2 => {
                let y = self.forward(&x.detach())?.contiguous()?;
                y.apply_op2(x, InputGradient { weight: w.clone() })
            }
            _ => self.forward(x),
        }
    }

    /// The same layer with its matrix as dense f32 (gradients pass through it).
    pub fn to_f32(&self) -> candle_core::Result<Self> {
        Ok(Self {
            weight: QMatMul::Tensor(self.dense()?),
            bias: self.bias.clone(),
        })
    }

    /// Rows `ids` of the matrix (output features), as dense f32.
    pub fn rows(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        match &self.weight {
            QMatMul::Tensor(t) | QMatMul::TensorF16(t) => {
                t.index_select(ids, 0)?.to_dtype(DType::F32)
            }
            QMatMul::QTensor(_) => self.dense()?.index_select(ids, 0),
        }
    }

    /// The matrix as a dense f32 tensor (for an embedding table shared with the head).
    pub fn dense(&self) -> candle_core::Result<Tensor> {
        match &self.weight {
            QMatMul::QTensor(q) => q.dequantize(&q.device()),
            QMatMul::Tensor(t) | QMatMul::TensorF16(t) => t.to_dtype(DType::F32),
        }
    }
}

/// Joins a product `y = x·Wᵀ` computed outside the graph to its input `x`: forward passes `y`
/// through; backward gives `x` the gradient `grad·W` and the product none.
struct InputGradient {
    weight: Tensor,
}

impl candle_core::CustomOp2 for InputGradient {
    fn name(&self) -> &'static str {
        "input-gradient"
    }

    fn cpu_fwd(
        &self,
        product: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
        _: &candle_core::CpuStorage,
        _: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let (candle_core::CpuStorage::F32(values), Some((start, end))) =
            (product, layout.contiguous_offsets())
        else {
            candle_core::bail!("input-gradient takes a contiguous f32 product")
        };
        Ok((
            candle_core::CpuStorage::F32(values[start..end].to_vec()),
            layout.shape().clone(),
        ))
    }

    fn bwd(
        &self,
        _product: &Tensor,
        _x: &Tensor,
        _result: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((None, Some(grad.matmul(&self.weight)?)))
    }
}

/// The tensors of one checkpoint, by their GGUF or Hugging Face names.
pub(crate) enum Source {
    /// Read one tensor at a time while loading; the loader runs on one thread.
    Gguf {
        content: gguf_file::Content,
        path: PathBuf,
        reader: RefCell<BufReader<File>>,
    },
    Safetensors(HashMap<String, Tensor>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gguf { path, .. } => write!(f, "Gguf({})", path.display()),
            Self::Safetensors(t) => write!(f, "Safetensors({} tensors)", t.len()),
        }
    }
}

/// A tensor's name in each layout.
#[derive(Debug, Clone)]
pub(crate) struct Name {
    pub gguf: String,
    pub hf: String,
}

impl Source {
    pub fn open_gguf(path: &Path) -> Result<Self, LoadError> {
        let file = File::open(path).map_err(|source| LoadError::Io {
            path: path.into(),
            source,
        })?;
        let mut reader = BufReader::new(file);
        let content = gguf_file::Content::read(&mut reader)?;
        Ok(Self::Gguf {
            content,
            path: path.into(),
            reader: RefCell::new(reader),
        })
    }

    pub fn open_safetensors(files: &[PathBuf], device: &Device) -> Result<Self, LoadError> {
        let mut tensors = HashMap::new();
        for file in files {
            tensors.extend(candle_core::safetensors::load(file, device)?);
        }
        Ok(Self::Safetensors(tensors))
    }

    pub fn has(&self, name: &Name) -> bool {
        match self {
            Self::Gguf { content, .. } => content.tensor_infos.contains_key(&name.gguf),
            Self::Safetensors(t) => t.contains_key(&name.hf),
        }
    }

    fn qtensor(&self, name: &Name, device: &Device) -> Result<Arc<QTensor>, LoadError> {
        match self {
            Self::Gguf {
                content, reader, ..
            } => {
                if !content.tensor_infos.contains_key(&name.gguf) {
                    return Err(LoadError::MissingTensor(name.gguf.clone()));
                }
                Ok(Arc::new(content.tensor(
                    &mut *reader.borrow_mut(),
                    &name.gguf,
                    device,
                )?))
            }
            Self::Safetensors(tensors) => {
                let tensor = tensors
                    .get(&name.hf)
                    .ok_or_else(|| LoadError::MissingTensor(name.hf.clone()))?;
                Ok(Arc::new(QTensor::quantize(
                    &tensor.to_dtype(DType::F32)?,
                    GgmlDType::F32,
                )?))
            }
        }
    }

    /// A vector or small table as dense f32.
    pub fn dense(&self, name: &Name, device: &Device) -> Result<Tensor, LoadError> {
        match self {
            Self::Gguf { .. } => Ok(self.qtensor(name, device)?.dequantize(device)?),
            Self::Safetensors(tensors) => Ok(tensors
                .get(&name.hf)
                .ok_or_else(|| LoadError::MissingTensor(name.hf.clone()))?
                .to_dtype(DType::F32)?),
        }
    }

    /// A matrix at the requested precision, with its bias when `bias` names one.
    pub fn linear(
        &self,
        weight: &Name,
        bias: Option<&Name>,
        dtype: WeightDtype,
        device: &Device,
    ) -> Result<Linear, LoadError> {
        let bias = bias.map(|b| self.dense(b, device)).transpose()?;
        let weight = match self {
            Self::Safetensors(tensors) => {
                let dense = tensors
                    .get(&weight.hf)
                    .ok_or_else(|| LoadError::MissingTensor(weight.hf.clone()))?;
                matmul_from_dense(dense, dtype)?
            }
            Self::Gguf { .. } => {
                let q = self.qtensor(weight, device)?;
                match dtype.resolve(q.dtype()) {
                    WeightDtype::Native | WeightDtype::Auto => QMatMul::from_arc(q)?,
                    WeightDtype::F32 => QMatMul::Tensor(q.dequantize(device)?),
                    WeightDtype::F16 => QMatMul::TensorF16(q.dequantize_f16(device)?),
                    WeightDtype::Q8_0 => requantize(&q.dequantize(device)?, GgmlDType::Q8_0)?,
                }
            }
        };
        Ok(Linear { weight, bias })
    }

    /// The output head tied to the embedding table, which is already in memory as dense f32
    /// for the lookups: reusing it costs nothing and keeps the head exact, where a quantized
    /// head would also quantize its input rows (and be slower for the few rows it sees).
    pub fn tied_head(&self, table: &Tensor, dtype: WeightDtype) -> Result<Linear, LoadError> {
        Ok(Linear {
            weight: matmul_from_dense(table, dtype)?,
            bias: None,
        })
    }
}

fn matmul_from_dense(dense: &Tensor, dtype: WeightDtype) -> Result<QMatMul, LoadError> {
    Ok(match dtype {
        WeightDtype::F16 => QMatMul::TensorF16(dense.to_dtype(DType::F16)?),
        WeightDtype::Q8_0 => requantize(&dense.to_dtype(DType::F32)?, GgmlDType::Q8_0)?,
        _ => QMatMul::Tensor(dense.to_dtype(DType::F32)?),
    })
}

/// Q8_0 needs rows whose length is a multiple of its 32-element block; others stay f32.
fn requantize(dense: &Tensor, target: GgmlDType) -> Result<QMatMul, LoadError> {
    let cols = dense.dims().last().copied().unwrap_or(0);
    if cols % target.block_size() != 0 {
        return Ok(QMatMul::Tensor(dense.clone()));
    }
    Ok(QMatMul::from_qtensor(QTensor::quantize(dense, target)?)?)
}
