//! Everything a BERT layer does after attention, for one block of rows at a time, in one pass
//! over the sequence: output projection, residual and layer norm, feed-forward up, GELU, down,
//! residual and layer norm. For serving with bf16 products ([`crate::tiles`]).
//!
//! Done as separate tensor operations, those are seven sweeps of the whole sequence, each
//! its own split across rayon's threads and its own freshly allocated output; candle's layer
//! norm makes one rayon task per row. On a 2-core machine, waking and parking threads between
//! them was about a sixth of a served request. Here each task takes one block of rows (the
//! bf16 unit's block: 8 rows on AVX-512 BF16, 32 on AMX tiles) through all seven, its
//! intermediate values staying in cache.
//!
//! Each row is still computed alone, sums in a fixed order whatever rows share its block, so a
//! question's answer does not depend on the rest of its request. The layer norms sum in eight
//! fixed lanes rather than candle's one running sum: the same function, rounded differently.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};

use crate::tiles::{PackedWeight, Unit, block_product};

/// A dense layer packed for bf16 products, with its bias.
#[derive(Debug, Clone)]
pub struct Dense {
    pub weight: Arc<PackedWeight>,
    pub bias: Vec<f32>,
}

/// A layer norm's scale, shift and epsilon.
#[derive(Debug, Clone)]
pub struct Norm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
    pub eps: f32,
}

/// The after-attention half of a BERT layer with erf GELU, as one operation on
/// `(context, x)`: attention's output and the layer's input, both `[.., hidden]`.
#[derive(Debug, Clone)]
pub struct AfterAttention {
    pub unit: Unit,
    pub attention_output: Dense,
    pub attention_norm: Norm,
    pub intermediate: Dense,
    pub output: Dense,
    pub output_norm: Norm,
}

impl AfterAttention {
    /// The layer's output for attention's `context` and the layer's input `x`.
    pub fn forward(&self, context: &Tensor, x: &Tensor) -> Result<Tensor> {
        context
            .contiguous()?
            .apply_op2_no_bwd(&x.contiguous()?, self)
    }

    fn hidden(&self) -> usize {
        self.attention_output.weight.outputs()
    }

    /// One block of rows (`x.len() / hidden` of them, at most the unit's block) into `out`.
    #[allow(unsafe_code)]
    fn block(&self, context: &[f32], x: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { self.block_avx2(context, x, out) };
        }
        self.block_portable(context, x, out);
    }

    /// The same code compiled for AVX2: the norms' lanes and GELU in registers twice as wide,
    /// the same operations in the same order (Rust never fuses a multiply and an add on its
    /// own), so the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn block_avx2(&self, context: &[f32], x: &[f32], out: &mut [f32]) {
        self.block_portable(context, x, out);
    }

    #[inline(always)]
    fn block_portable(&self, context: &[f32], x: &[f32], out: &mut [f32]) {
        let (hidden, inner) = (self.hidden(), self.intermediate.weight.outputs());
        let step = self.unit.rows();
        let rows = x.len() / hidden;
        let mut scratch = vec![0u16; step * hidden.max(inner)];
        // Output projection, residual, norm.
        let mut attended = vec![0f32; step * hidden];
        let dense = &self.attention_output;
        block_product(
            self.unit,
            context,
            &dense.weight,
            Some(&dense.bias),
            &mut scratch[..step * hidden],
            &mut attended,
        );
        for (row, x) in attended
            .chunks_exact_mut(hidden)
            .zip(x.chunks_exact(hidden))
        {
            for (a, x) in row.iter_mut().zip(x) {
                *a += x;
            }
            self.attention_norm.apply(row);
        }
        // Feed-forward up and GELU.
        let mut widened = vec![0f32; step * inner];
        let dense = &self.intermediate;
        block_product(
            self.unit,
            &attended[..rows * hidden],
            &dense.weight,
            Some(&dense.bias),
            &mut scratch[..step * hidden],
            &mut widened,
        );
        for v in &mut widened[..rows * inner] {
            *v = crate::kernels::gelu_of(*v);
        }
        // Down, residual, norm.
        let mut narrowed = vec![0f32; step * hidden];
        let dense = &self.output;
        block_product(
            self.unit,
            &widened[..rows * inner],
            &dense.weight,
            Some(&dense.bias),
            &mut scratch[..step * inner],
            &mut narrowed,
        );
        for ((out, row), attended) in out
            .chunks_exact_mut(hidden)
            .zip(narrowed.chunks_exact(hidden))
            .zip(attended.chunks_exact(hidden))
        {
            for ((o, r), a) in out.iter_mut().zip(row).zip(attended) {
                *o = r + a;
            }
            self.output_norm.apply(out);
        }
    }
}

/// Lanes of the norms' fixed-order sums.
const LANES: usize = 8;

impl Norm {
    /// Normalise one row in place: `(x - mean) / sqrt(var + eps) * weight + bias`.
    #[inline(always)]
    fn apply(&self, row: &mut [f32]) {
        let n = row.len();
        let (mut sum, mut squares) = ([0f32; LANES], [0f32; LANES]);
        let whole = n / LANES * LANES;
        for chunk in row[..whole].chunks_exact(LANES) {
            for l in 0..LANES {
                sum[l] += chunk[l];
                squares[l] += chunk[l] * chunk[l];
            }
        }
        let fold =
            |a: [f32; LANES]| ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
        let (mut sum, mut squares) = (fold(sum), fold(squares));
        for &v in &row[whole..] {
            sum += v;
            squares += v * v;
        }
        let mean = sum / n as f32;
        let variance = squares / n as f32 - mean * mean;
        let inverse = (variance + self.eps).sqrt().recip();
        for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
            *v = (*v - mean) * inverse * w + b;
        }
    }
}

impl CustomOp2 for AfterAttention {
    fn name(&self) -> &'static str {
        "ruling-after-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;

        let context = crate::kernels::slice(s1, l1, self.name())?;
        let x = crate::kernels::slice(s2, l2, self.name())?;
        let hidden = self.hidden();
        if l1.shape() != l2.shape() || crate::kernels::last_dim(l1) != hidden {
            candle_core::bail!(
                "{}: a layer of width {hidden} was given {:?} and {:?}",
                self.name(),
                l1.shape(),
                l2.shape()
            );
        }
        let block = self.unit.rows() * hidden;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(block)
            .zip(context.par_chunks(block).zip(x.par_chunks(block)))
            .for_each(|(out, (context, x))| self.block(context, x, out));
        Ok((CpuStorage::F32(out), l2.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Module};

    use super::*;
    use crate::ops::{Kernels, LayerNorm, Linear};

    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let values = crate::testing::values(n, seed);
        values.into_iter().map(|v| v * scale).collect()
    }

    fn tensor(values: Vec<f32>, shape: &[usize]) -> Tensor {
        Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
    }

    fn linear(outputs: usize, inputs: usize, seed: u32) -> Linear {
        let weight = tensor(values(outputs * inputs, seed, 0.2), &[outputs, inputs]);
        let bias = tensor(values(outputs, seed + 1, 0.2), &[outputs]);
        Linear::new(weight, Some(bias))
            .for_kernels(Kernels::FusedBf16)
            .unwrap()
    }

    fn norm(size: usize, seed: u32) -> LayerNorm {
        let mut weights = std::collections::HashMap::new();
        let scale: Vec<f32> = values(size, seed, 0.5).iter().map(|v| 1.0 + v).collect();
        weights.insert("weight".into(), tensor(scale, &[size]));
        weights.insert("bias".into(), tensor(values(size, seed + 1, 0.2), &[size]));
        let vb =
            candle_nn::VarBuilder::from_tensors(weights, candle_core::DType::F32, &Device::Cpu);
        LayerNorm::load(&vb, size, 1e-12, true, Kernels::FusedBf16).unwrap()
    }

    /// The one pass computes what the separate operations do (to rounding: its norms sum in
    /// lanes), and a row's result does not depend on the rows that share its block.
    #[test]
    fn one_pass_matches_the_separate_operations_row_by_row() {
        let Some(unit) = crate::tiles::unit() else {
            eprintln!("skipped: this CPU has neither AMX-BF16 nor AVX-512 BF16");
            return;
        };
        let (hidden, inner, rows) = (64, 160, 45);
        let (out, up, down) = (
            linear(hidden, hidden, 1),
            linear(inner, hidden, 3),
            linear(hidden, inner, 5),
        );
        let (norm1, norm2) = (norm(hidden, 7), norm(hidden, 9));
        let after = AfterAttention {
            unit,
            attention_output: out.dense().unwrap().unwrap(),
            attention_norm: norm1.norm().unwrap().unwrap(),
            intermediate: up.dense().unwrap().unwrap(),
            output: down.dense().unwrap().unwrap(),
            output_norm: norm2.norm().unwrap().unwrap(),
        };
        let context = tensor(values(rows * hidden, 11, 2.0), &[1, rows, hidden]);
        let x = tensor(values(rows * hidden, 13, 2.0), &[1, rows, hidden]);

        let attended = norm1
            .forward(&(out.forward(&context).unwrap() + &x).unwrap())
            .unwrap();
        let widened = crate::kernels::gelu(&up.forward(&attended).unwrap()).unwrap();
        let expected = norm2
            .forward(&(down.forward(&widened).unwrap() + &attended).unwrap())
            .unwrap();
        let got = after.forward(&context, &x).unwrap();
        assert_eq!(got.dims(), &[1, rows, hidden]);
        let expected = expected.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let worst = expected
            .iter()
            .zip(&got)
            .map(|(e, g)| (e - g).abs())
            .fold(0f32, f32::max);
        eprintln!("one pass on {unit}: largest difference {worst:e}");
        // Lane sums move a norm's output by a few f32 ulps; now and then the next product
        // rounds such a value to the neighbouring bf16. Measured: under 1e-6.
        assert!(worst < 1e-3, "largest difference {worst}");

        for row in [0, rows / 2, rows - 1] {
            let alone = after
                .forward(
                    &context.narrow(1, row, 1).unwrap(),
                    &x.narrow(1, row, 1).unwrap(),
                )
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            assert_eq!(
                alone,
                got[row * hidden..(row + 1) * hidden].to_vec(),
                "row {row}"
            );
        }
    }
}
