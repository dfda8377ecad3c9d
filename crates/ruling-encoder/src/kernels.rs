//! Five CPU kernels with their gradients: GELU (erf form), standardisation over the last
//! dimension (layer norm without its affine part), softmax over the last dimension, and the
//! two additions of every layer (a bias over rows, and the residual).
//!
//! candle builds the differentiable versions of these from a dozen elementwise operations,
//! each allocating and sweeping the whole tensor, and its GELU calls libm's scalar `erf`.
//! Measured here on a MiniLM-L6 training step (5,000 tokens, 2 cores), they took 5 of the step's
//! 9.5 s: GELU forward and backward 450 ms a layer, layer norm 115 ms a norm, softmax 170 ms a
//! layer. Each is one pass here, split by rows across the machine's threads.
//!
//! Every row is computed alone, its sums accumulated in index order, so a row's result does
//! not depend on the rows around it or on how rows are split between threads.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

/// GELU, `x * Phi(x)`, with its gradient.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Gelu)
}

/// `(x - mean) / sqrt(var + eps)` over the last dimension, with its gradient.
pub fn standardize(x: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Standardize { eps: eps as f32 })
}

/// Softmax over the last dimension, with its gradient.
pub fn softmax(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Softmax)
}

/// `x + bias`, `bias` a vector as long as `x`'s last dimension, with its gradients.
pub fn add_bias(x: &Tensor, bias: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op2(&bias.contiguous()?, AddBias)
}

/// `a + b` for two tensors of one shape, with its gradients.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.contiguous()?.apply_op2(&b.contiguous()?, Add)
}

pub(crate) fn slice<'a>(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(data) = storage else {
        candle_core::bail!("{op} takes f32");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op} takes a contiguous tensor");
    };
    Ok(&data[start..end])
}

pub(crate) fn last_dim(layout: &Layout) -> usize {
    layout.shape().dims().last().copied().unwrap_or(1).max(1)
}

/// Fill `out` row by row (`width` values a row) with `f(row_index, row)`, across rayon's
/// threads (the pool candle's matrix products already use, so no thread is started per call)
/// when the tensor is large enough to pay for them.
pub(crate) fn by_rows(out: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    use rayon::prelude::*;
    if out.len() < 1 << 15 || rayon::current_num_threads() == 1 {
        for (r, row) in out.chunks_mut(width).enumerate() {
            f(r, row);
        }
        return;
    }
    // Blocks of at least 8,192 values: small enough to share out, large enough that
    // scheduling costs little beside the work.
    let rows_per_block = (8192 / width.max(1)).max(1);
    out.par_chunks_mut(rows_per_block * width)
        .enumerate()
        .for_each(|(b, block)| {
            for (r, row) in block.chunks_mut(width).enumerate() {
                f(b * rows_per_block + r, row);
            }
        });
}

fn output(values: Vec<f32>, layout: &Layout) -> (CpuStorage, Shape) {
    (CpuStorage::F32(values), layout.shape().clone())
}

/// erf for f32, branch-free and vectorisable: the rational approximation Eigen and XLA use
/// (odd degree-13 numerator over an even degree-8 denominator on a clamped input), within 1e-6
/// of the true erf (see the test).
#[inline]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906_3e-4;
    p = p * x2 - 2.954_600_1e-3;
    p = p * x2 - 1.609_603_3e-2;
    let p = x * p;
    let mut q = x2 * -1.456_607_2e-5 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329_3e-3;
    q = q * x2 - 1.426_474e-2;
    p / q
}

/// GELU of one value, `x * Phi(x)` with [`erf`].
#[inline(always)]
pub(crate) fn gelu_of(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

const WIDTH: usize = 4096;

struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "ruling-gelu"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(storage, layout, self.name())?;
        let mut out = vec![0f32; x.len()];
        by_rows(&mut out, WIDTH.min(x.len().max(1)), |r, row| {
            let start = r * WIDTH.min(x.len().max(1));
            for (o, &v) in row.iter_mut().zip(&x[start..]) {
                *o = gelu_of(v);
            }
        });
        Ok(output(out, layout))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(arg.apply_op2_no_bwd(&grad.contiguous()?, &GeluGrad)?))
    }
}

struct GeluGrad;

impl CustomOp2 for GeluGrad {
    fn name(&self) -> &'static str {
        "ruling-gelu-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, self.name())?;
        let g = slice(s2, l2, self.name())?;
        let width = WIDTH.min(x.len().max(1));
        let mut out = vec![0f32; x.len()];
        // d/dx x Phi(x) = Phi(x) + x phi(x).
        let density = 1.0 / (2.0 * std::f32::consts::PI).sqrt();
        by_rows(&mut out, width, |r, row| {
            let start = r * width;
            for ((o, &v), &gv) in row.iter_mut().zip(&x[start..]).zip(&g[start..]) {
                let cdf = 0.5 * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2));
                let pdf = density * (-0.5 * v * v).exp();
                *o = gv * (cdf + v * pdf);
            }
        });
        Ok(output(out, l1))
    }
}

// candle's own element-wise operations split tensors of 64 Ki values or more over a pool of
// spinning threads of its own, beside the rayon pool its matrix products use; each of a
// layer's bias adds and residuals then left a thread spinning on a core the next product
// needed (13% of an answering profile). These two run on rayon, like everything else here,
// and add exactly as candle's `broadcast_add` and `+` do.

struct AddBias;

impl CustomOp2 for AddBias {
    fn name(&self) -> &'static str {
        "ruling-add-bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, self.name())?;
        let bias = slice(s2, l2, self.name())?;
        let width = last_dim(l1);
        if bias.len() != width || l2.shape().rank() != 1 {
            candle_core::bail!(
                "{}: a bias of shape {:?} over rows of {width}",
                self.name(),
                l2.shape()
            );
        }
        let mut out = vec![0f32; x.len()];
        by_rows(&mut out, width, |r, row| {
            let start = r * width;
            for ((o, &v), &b) in row.iter_mut().zip(&x[start..]).zip(bias) {
                *o = v + b;
            }
        });
        Ok(output(out, l1))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let width = bias.elem_count();
        let rows = grad.elem_count() / width.max(1);
        let grad_bias = grad.reshape((rows, width))?.sum(0)?;
        Ok((Some(grad.clone()), Some(grad_bias)))
    }
}

struct Add;

impl CustomOp2 for Add {
    fn name(&self) -> &'static str {
        "ruling-add"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let a = slice(s1, l1, self.name())?;
        let b = slice(s2, l2, self.name())?;
        if l1.shape() != l2.shape() {
            candle_core::bail!(
                "{}: shapes {:?} and {:?} differ",
                self.name(),
                l1.shape(),
                l2.shape()
            );
        }
        let width = WIDTH.min(a.len().max(1));
        let mut out = vec![0f32; a.len()];
        by_rows(&mut out, width, |r, row| {
            let start = r * width;
            for ((o, &x), &y) in row.iter_mut().zip(&a[start..]).zip(&b[start..]) {
                *o = x + y;
            }
        });
        Ok(output(out, l1))
    }

    fn bwd(
        &self,
        _a: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.clone()), Some(grad.clone())))
    }
}

struct Standardize {
    eps: f32,
}

/// Mean and inverse standard deviation of one row.
fn moments(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = row.iter().sum::<f32>() / n;
    let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / (variance + eps).sqrt())
}

impl CustomOp1 for Standardize {
    fn name(&self) -> &'static str {
        "ruling-standardize"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(storage, layout, self.name())?;
        let width = last_dim(layout);
        let mut out = vec![0f32; x.len()];
        by_rows(&mut out, width, |r, row| {
            let input = &x[r * width..(r + 1) * width];
            let (mean, inverse) = moments(input, self.eps);
            for (o, &v) in row.iter_mut().zip(input) {
                *o = (v - mean) * inverse;
            }
        });
        Ok(output(out, layout))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(arg.apply_op2_no_bwd(
            &grad.contiguous()?,
            &StandardizeGrad { eps: self.eps },
        )?))
    }
}

struct StandardizeGrad {
    eps: f32,
}

impl CustomOp2 for StandardizeGrad {
    fn name(&self) -> &'static str {
        "ruling-standardize-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, self.name())?;
        let g = slice(s2, l2, self.name())?;
        let width = last_dim(l1);
        let mut out = vec![0f32; x.len()];
        // With y = (x - mean) * inverse: dx = inverse * (g - mean(g) - y * mean(g * y)).
        by_rows(&mut out, width, |r, row| {
            let input = &x[r * width..(r + 1) * width];
            let gr = &g[r * width..(r + 1) * width];
            let (mean, inverse) = moments(input, self.eps);
            let n = width as f32;
            let mut g_mean = 0f32;
            let mut gy_mean = 0f32;
            for (&v, &gv) in input.iter().zip(gr) {
                g_mean += gv;
                gy_mean += gv * (v - mean) * inverse;
            }
            g_mean /= n;
            gy_mean /= n;
            for ((o, &v), &gv) in row.iter_mut().zip(input).zip(gr) {
                let y = (v - mean) * inverse;
                *o = inverse * (gv - g_mean - y * gy_mean);
            }
        });
        Ok(output(out, l1))
    }
}

struct Softmax;

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "ruling-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(storage, layout, self.name())?;
        let width = last_dim(layout);
        let mut out = vec![0f32; x.len()];
        by_rows(&mut out, width, |r, row| {
            let input = &x[r * width..(r + 1) * width];
            let max = input.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for (o, &v) in row.iter_mut().zip(input) {
                *o = (v - max).exp();
                sum += *o;
            }
            for o in row.iter_mut() {
                *o /= sum;
            }
        });
        Ok(output(out, layout))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(
            res.apply_op2_no_bwd(&grad.contiguous()?, &SoftmaxGrad)?,
        ))
    }
}

struct SoftmaxGrad;

impl CustomOp2 for SoftmaxGrad {
    fn name(&self) -> &'static str {
        "ruling-softmax-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let y = slice(s1, l1, self.name())?;
        let g = slice(s2, l2, self.name())?;
        let width = last_dim(l1);
        let mut out = vec![0f32; y.len()];
        // dx = y * (g - sum(g * y)).
        by_rows(&mut out, width, |r, row| {
            let yr = &y[r * width..(r + 1) * width];
            let gr = &g[r * width..(r + 1) * width];
            let dot: f32 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
            for ((o, &yv), &gv) in row.iter_mut().zip(yr).zip(gr) {
                *o = yv * (gv - dot);
            }
        });
        Ok(output(out, l1))
    }
}

// Masks are exact values (0 or f32::MIN), and exactness is what the tests check.
#[cfg(test)]
#[allow(clippy::float_cmp)]
mod tests {
    use candle_core::{D, DType, Device, Var};

    use super::*;

    /// erf from its Taylor series (|x| < 3) or a continued fraction for erfc, in f64: an
    /// independent reference (std has no erf).
    fn reference_erf(x: f64) -> f64 {
        if x.abs() < 3.0 {
            let mut term = x;
            let mut sum = x;
            for n in 1..200 {
                term *= -x * x / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            let z = x.abs();
            let mut f = z;
            for k in (1..60).rev() {
                f = z + (k as f64 / 2.0) / f;
            }
            let erfc = (-z * z).exp() / (f * std::f64::consts::PI.sqrt());
            (1.0 - erfc).copysign(x)
        }
    }

    #[test]
    fn erf_is_within_a_millionth() {
        let worst = (-80_000..=80_000)
            .map(|i| {
                let x = f64::from(i) / 10_000.0;
                (f64::from(erf(x as f32)) - reference_erf(x)).abs()
            })
            .fold(0f64, f64::max);
        assert!(worst < 1e-6, "max error {worst}");
    }

    fn input() -> Tensor {
        let values: Vec<f32> = (0..6 * 40)
            .map(|i| ((i as f32 * 0.37).sin() * 3.0) + (i % 7) as f32 * 0.1)
            .collect();
        Tensor::from_vec(values, (6, 40), &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    /// Forward values and input gradients (of a weighted sum, so every output matters) agree
    /// with candle's own composition of the same function.
    fn agrees(
        ours: impl Fn(&Tensor) -> Tensor,
        theirs: impl Fn(&Tensor) -> Tensor,
        tolerance: f32,
    ) {
        let weights = (input() * 0.5).unwrap().cos().unwrap();
        let a = Var::from_tensor(&input()).unwrap();
        let b = Var::from_tensor(&input()).unwrap();
        let ya = ours(a.as_tensor());
        let yb = theirs(b.as_tensor());
        assert!(
            max_diff(&ya, &yb) < tolerance,
            "forward {}",
            max_diff(&ya, &yb)
        );
        let ga = (ya * &weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gb = (yb * &weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let (ga, gb) = (ga.get(&a).unwrap(), gb.get(&b).unwrap());
        assert!(
            max_diff(ga, gb) < tolerance,
            "gradient {}",
            max_diff(ga, gb)
        );
    }

    #[test]
    fn gelu_matches_candle() {
        agrees(|x| gelu(x).unwrap(), |x| x.gelu_erf().unwrap(), 2e-6);
    }

    #[test]
    fn standardize_matches_candle() {
        agrees(
            |x| standardize(x, 1e-5).unwrap(),
            |x| {
                let mean = x.mean_keepdim(D::Minus1).unwrap();
                let c = x.broadcast_sub(&mean).unwrap();
                let var = c.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
                c.broadcast_div(&(var + 1e-5).unwrap().sqrt().unwrap())
                    .unwrap()
            },
            2e-5,
        );
    }

    /// The two additions give candle's sums bit for bit, and its gradients.
    #[test]
    fn additions_match_candle() {
        // Long enough that rows are shared out over threads.
        let x = (Tensor::arange(0f32, 96.0 * 384.0, &Device::Cpu).unwrap() * 0.013)
            .unwrap()
            .sin()
            .unwrap()
            .reshape((2, 48, 384))
            .unwrap();
        let y = x.cos().unwrap();
        let bias = x.get(0).unwrap().get(5).unwrap();
        let same = |a: &Tensor, b: &Tensor| {
            let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
            let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
            assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
        };
        same(
            &add_bias(&x, &bias).unwrap(),
            &x.broadcast_add(&bias).unwrap(),
        );
        same(&add(&x, &y).unwrap(), &(&x + &y).unwrap());
        // Gradients of a weighted sum, through ours and through candle's.
        let weights = (x.clone() * 0.7).unwrap().sin().unwrap();
        let grads = |ours: bool| {
            let (a, b, c) = (
                Var::from_tensor(&x).unwrap(),
                Var::from_tensor(&y).unwrap(),
                Var::from_tensor(&bias).unwrap(),
            );
            let out = if ours {
                add_bias(&add(&a, &b).unwrap(), &c).unwrap()
            } else {
                (a.as_tensor() + b.as_tensor())
                    .unwrap()
                    .broadcast_add(&c)
                    .unwrap()
            };
            let g = (out * &weights)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            [&a, &b, &c].map(|v| g.get(v).unwrap().clone())
        };
        for (p, q) in grads(true).iter().zip(&grads(false)) {
            assert!(max_diff(p, q) < 1e-4, "gradient {}", max_diff(p, q));
        }
        assert!(add(&x, &bias).is_err(), "shapes must match");
    }

    #[test]
    fn softmax_matches_candle() {
        agrees(
            |x| softmax(x).unwrap(),
            |x| candle_nn::ops::softmax(x, D::Minus1).unwrap(),
            1e-6,
        );
        // Masked entries (f32::MIN) get exactly zero.
        let masked = Tensor::new(&[[1f32, f32::MIN, 2.0]], &Device::Cpu).unwrap();
        let y: Vec<Vec<f32>> = softmax(&masked).unwrap().to_vec2().unwrap();
        assert_eq!(y[0][1], 0.0);
        assert_eq!(masked.dtype(), DType::F32);
    }
}
