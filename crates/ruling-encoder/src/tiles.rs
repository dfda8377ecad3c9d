//! Dense-layer products in bf16 with f32 sums, on whichever unit this CPU has for them: the
//! AMX tile unit of recent Intel Xeons (Sapphire Rapids and later), or AVX-512 BF16's vector
//! dot products (AMD Zen 4 and later, Intel Cooper Lake).
//!
//! One tile multiply-add (`tdpbf16ps`) takes a 16 x 32 block of activations and a 32 x 16
//! block of weights into a 16 x 16 block of f32 sums. Measured on this project's 2-core
//! machines, a 128 x 384 by 384 x 1,536 product takes 0.09 ms on one core this way (about
//! 1.6 TFLOP/s), against 0.8 ms on two cores for candle's f32 product: the encoder's dense
//! layers stop being its cost (`docs/encoder.md`, "Speed"). Without tiles, one `vdpbf16ps`
//! adds two products into each of 16 f32 sums, twice the work of an f32 fused multiply-add of
//! the same width, from weights half the size.
//!
//! The price is rounding: activations and weights are rounded to bf16 (8 significant bits)
//! before they are multiplied, so a product differs from the f32 one by about 0.3% of its
//! typical magnitude. Every row is still computed alone, its sums accumulated in the same
//! order whatever rows surround it, so an answer stays independent of the rest of its request.
//!
//! Used only where the CPU has AMX-BF16 and the kernel grants the tile state (Linux 5.16 and
//! later), or AVX-512 BF16, for layers whose widths are multiples of 32; everything else keeps
//! candle's f32 product.

use std::sync::{Arc, OnceLock};

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

/// Rows and columns of a block: two tiles of 16 each way.
const BLOCK: usize = 32;

/// Activation rows the vector kernel carries at once: 8 rows by 32 outputs of sums fill 16 of
/// the 32 vector registers, leaving room for the two weight vectors and a broadcast.
const VECTOR_ROWS: usize = 8;

/// The instructions that multiply in bf16 on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// AMX: `tdpbf16ps` on 16 x 16 tiles of sums.
    Tiles,
    /// AVX-512 BF16: `vdpbf16ps` on 16 sums at a time.
    Vectors,
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tiles => "AMX tiles",
            Self::Vectors => "AVX-512 BF16",
        })
    }
}

impl Unit {
    /// The rows one call multiplies: two tiles' worth, or the vector kernel's eight.
    pub fn rows(self) -> usize {
        match self {
            Self::Tiles => BLOCK,
            Self::Vectors => VECTOR_ROWS,
        }
    }
}

/// The unit this process multiplies bf16 on, if any (asked once; the answer is cached).
pub fn unit() -> Option<Unit> {
    static UNIT: OnceLock<Option<Unit>> = OnceLock::new();
    *UNIT.get_or_init(arch::detect)
}

/// Whether this process can multiply in bf16 at all.
pub fn available() -> bool {
    unit().is_some()
}

/// A dense layer's `outputs x inputs` weight, rounded to bf16 and laid out as the tile
/// multiply reads it: for each 16 outputs, for each pair of inputs, the 16 outputs' two
/// values side by side.
#[derive(Debug)]
pub struct PackedWeight {
    outputs: usize,
    inputs: usize,
    values: Vec<u16>,
}

impl PackedWeight {
    /// Pack a row-major `outputs x inputs` weight; `None` unless both are multiples of 32.
    pub fn new(weight: &[f32], outputs: usize, inputs: usize) -> Option<Self> {
        if !outputs.is_multiple_of(BLOCK)
            || !inputs.is_multiple_of(BLOCK)
            || weight.len() != outputs * inputs
        {
            return None;
        }
        let mut values = vec![0u16; outputs * inputs];
        for (n, row) in weight.chunks_exact(inputs).enumerate() {
            let (group, lane) = (n / 16, n % 16);
            for (k, &w) in row.iter().enumerate() {
                values[((group * inputs / 2 + k / 2) * 16 + lane) * 2 + k % 2] = to_bf16(w);
            }
        }
        Some(Self {
            outputs,
            inputs,
            values,
        })
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// The 16 x 32 weight tile of outputs `16 * group ..` as the tile loads read it: 16 rows
    /// of 64 bytes, one row per pair of inputs, advancing 1,024 bytes per 32 inputs.
    fn group(&self, group: usize) -> *const u16 {
        self.values[group * self.inputs * 16..].as_ptr()
    }
}

/// `x W^T + bias` in bf16, for `x` of any leading shape whose last dimension is the weight's
/// inputs. Inference only: it carries no gradient. The caller checks [`available`].
pub fn linear(x: &Tensor, weight: &Arc<PackedWeight>, bias: Option<&Tensor>) -> Result<Tensor> {
    let Some(unit) = unit() else {
        candle_core::bail!("this CPU has no unit for bf16 products");
    };
    linear_on(unit, x, weight, bias)
}

fn linear_on(
    unit: Unit,
    x: &Tensor,
    weight: &Arc<PackedWeight>,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let bias = match bias {
        Some(bias) => Some(bias.to_vec1::<f32>()?),
        None => None,
    };
    x.contiguous()?.apply_op1_no_bwd(&Product {
        unit,
        weight: Arc::clone(weight),
        bias,
    })
}

/// Round to the nearest bf16, ties to even (NaN is not produced by the encoder's layers).
fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// One block of rows through a dense layer: `out` (the unit's block of rows by the weight's
/// outputs) = the rows `x` (f32, at most a block of them; the rest of the block counts as zero
/// rows) times the weight, plus `bias`. `a` is the block's bf16 scratch, `rows x inputs`.
pub(crate) fn block_product(
    unit: Unit,
    x: &[f32],
    weight: &PackedWeight,
    bias: Option<&[f32]>,
    a: &mut [u16],
    out: &mut [f32],
) {
    for (a, &x) in a.iter_mut().zip(x) {
        *a = to_bf16(x);
    }
    a[x.len()..].fill(0);
    arch::block(unit, a, weight, out);
    if let Some(bias) = bias {
        for row in out.chunks_exact_mut(weight.outputs) {
            for (o, b) in row.iter_mut().zip(bias) {
                *o += b;
            }
        }
    }
}

struct Product {
    unit: Unit,
    weight: Arc<PackedWeight>,
    bias: Option<Vec<f32>>,
}

impl CustomOp1 for Product {
    fn name(&self) -> &'static str {
        "ruling-tile-product"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;

        let x = crate::kernels::slice(storage, layout, self.name())?;
        let (inputs, outputs) = (self.weight.inputs, self.weight.outputs);
        if crate::kernels::last_dim(layout) != inputs {
            candle_core::bail!(
                "a tile product of {inputs} inputs was given rows of {}",
                crate::kernels::last_dim(layout)
            );
        }
        let rows = x.len() / inputs;
        // The unit's block of rows: one task each, so a short request still keeps both
        // cores busy on the vector unit. Each task rounds its own rows to bf16.
        let step = self.unit.rows();
        let mut out = vec![0f32; rows.div_ceil(step) * step * outputs];
        out.par_chunks_mut(step * outputs)
            .zip(x.par_chunks(step * inputs))
            .for_each_init(
                || vec![0u16; step * inputs],
                |a, (out, x)| {
                    block_product(self.unit, x, &self.weight, self.bias.as_deref(), a, out);
                },
            );
        out.truncate(rows * outputs);
        let mut dims = layout.shape().dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = outputs;
        }
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

// The crate's unsafe code, but for the AVX2 dispatches of `attend.rs` and `rowwise.rs`:
// CPUID, one system call, the tile instructions, which Rust reaches only through inline
// assembly (its AMX intrinsics are unstable), and the AVX-512 BF16 intrinsics.
#[allow(unsafe_code)]
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod arch {
    use std::arch::asm;
    use std::arch::x86_64::{
        __cpuid_count, __m512bh, _mm512_dpbf16_ps, _mm512_loadu_si512, _mm512_set1_epi32,
        _mm512_setzero_ps, _mm512_storeu_ps,
    };

    use super::{PackedWeight, Unit, VECTOR_ROWS};

    /// `arch_prctl` request for permission to use an extended state component, and the
    /// component number of the tile data (Linux's `asm/prctl.h`).
    const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_ulong = 18;

    /// Palette 1, every tile 16 rows of 64 bytes (`ldtilecfg`'s 64-byte operand).
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        bytes_per_row: [u16; 16],
        rows: [u8; 16],
    }

    static CONFIG: TileConfig = TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
        rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
    };

    pub(super) fn detect() -> Option<Unit> {
        if tiles_granted() {
            Some(Unit::Tiles)
        } else if vectors_supported() {
            Some(Unit::Vectors)
        } else {
            None
        }
    }

    /// Whether the CPU has AVX-512 BF16 (and the AVX-512 foundation it builds on).
    pub(super) fn vectors_supported() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }

    fn tiles_granted() -> bool {
        // CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 22 AMX-BF16.
        if __cpuid_count(0, 0).eax < 7 {
            return false;
        }
        let features = __cpuid_count(7, 0).edx;
        if features & (1 << 24) == 0 || features & (1 << 22) == 0 {
            return false;
        }
        // The kernel allocates the 8 KiB tile state only for processes that ask.
        // SAFETY: a plain system call with integer arguments.
        let granted = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        granted == 0
    }

    /// `out` (the unit's block of rows of the weight's outputs) = `a` (the same rows of its
    /// inputs, bf16) times the weight.
    pub(super) fn block(unit: Unit, a: &[u16], weight: &PackedWeight, out: &mut [f32]) {
        let (inputs, outputs) = (weight.inputs, weight.outputs);
        let rows = unit.rows();
        assert!(a.len() == rows * inputs && out.len() == rows * outputs);
        match unit {
            Unit::Tiles => tile_products(a, weight, out),
            // SAFETY: `detect` found AVX-512F and AVX-512 BF16 before any product was built;
            // the lengths were checked above.
            Unit::Vectors => unsafe { vector_products(a, weight, out) },
        }
    }

    /// The block on the tile unit, one 32 x 32 block of outputs at a time.
    fn tile_products(a: &[u16], weight: &PackedWeight, out: &mut [f32]) {
        let (inputs, outputs) = (weight.inputs, weight.outputs);
        // SAFETY: `detect` granted the tile state before any product was built (`linear`'s
        // caller checks `available`); each tile access below stays inside `a`, the packed
        // weight and `out`: 32 rows of `inputs` bf16 values read in steps of 32, the weight's
        // two groups of 16 outputs across all inputs, and 32 rows of 32 outputs written.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
            for group in (0..outputs / 16).step_by(2) {
                tile_block(
                    a.as_ptr(),
                    inputs * 2,
                    weight.group(group),
                    weight.group(group + 1),
                    out[group * 16..].as_mut_ptr(),
                    outputs * 4,
                    inputs,
                );
            }
            asm!("tilerelease", options(nostack, nomem));
        }
    }

    /// Eight rows with AVX-512 BF16, 32 outputs at a time. A weight vector is the packed
    /// layout's 16 outputs by one pair of inputs, so each `vdpbf16ps` adds one row's pair of
    /// inputs, broadcast, into 16 of its sums; a row's sums run over the inputs in the same
    /// order whatever rows share its block.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX-512 BF16; `a` holds 8 rows of the weight's inputs and
    /// `out` 8 rows of its outputs.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn vector_products(a: &[u16], weight: &PackedWeight, out: &mut [f32]) {
        let (inputs, outputs) = (weight.inputs, weight.outputs);
        for group in (0..outputs / 16).step_by(2) {
            let (w0, w1) = (weight.group(group), weight.group(group + 1));
            let mut sums = [[_mm512_setzero_ps(); 2]; VECTOR_ROWS];
            for pair in 0..inputs / 2 {
                // SAFETY: a group holds `inputs / 2` pairs of 32 values (16 outputs by two
                // inputs), and `a` holds 8 rows of `inputs` values, of which `2 * pair + 1`
                // is the last read.
                unsafe {
                    let v0: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(w0.add(pair * 32).cast()));
                    let v1: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(w1.add(pair * 32).cast()));
                    for (row, sums) in sums.iter_mut().enumerate() {
                        let x = a
                            .as_ptr()
                            .add(row * inputs + 2 * pair)
                            .cast::<i32>()
                            .read_unaligned();
                        let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(x));
                        sums[0] = _mm512_dpbf16_ps(sums[0], x, v0);
                        sums[1] = _mm512_dpbf16_ps(sums[1], x, v1);
                    }
                }
            }
            for (row, sums) in sums.iter().enumerate() {
                let at = row * outputs + group * 16;
                let target = &mut out[at..at + 32];
                // SAFETY: `target` is 32 f32 values, two vectors' worth.
                unsafe {
                    _mm512_storeu_ps(target.as_mut_ptr(), sums[0]);
                    _mm512_storeu_ps(target.as_mut_ptr().add(16), sums[1]);
                }
            }
        }
    }

    /// Tiles 0-3 hold the four 16 x 16 sums, 4-5 the two row halves of the activations, 6-7
    /// the two weight groups; the loop runs over the inputs 32 at a time.
    ///
    /// # Safety
    /// Tiles configured as [`CONFIG`]; `a` readable for 32 rows of `a_stride` bytes holding
    /// `inputs` bf16 values each, `b0` and `b1` for `inputs * 16` values, `c` writable for 32
    /// rows of `c_stride` bytes from which 32 f32 values are written; `inputs` a positive
    /// multiple of 32.
    unsafe fn tile_block(
        a: *const u16,
        a_stride: usize,
        b0: *const u16,
        b1: *const u16,
        c: *mut f32,
        c_stride: usize,
        inputs: usize,
    ) {
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "2:",
                "tileloadd tmm4, [{a} + {a_stride} * 1]",
                "tileloadd tmm6, [{b0} + {b_stride} * 1]",
                "tileloadd tmm7, [{b1} + {b_stride} * 1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a_low} + {a_stride} * 1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "add {a}, 64",
                "add {a_low}, 64",
                "add {b0}, 1024",
                "add {b1}, 1024",
                "sub {inputs}, 32",
                "jnz 2b",
                "tilestored [{c} + {c_stride} * 1], tmm0",
                "tilestored [{c_right} + {c_stride} * 1], tmm1",
                "tilestored [{c_low} + {c_stride} * 1], tmm2",
                "tilestored [{c_low_right} + {c_stride} * 1], tmm3",
                a = inout(reg) a => _,
                a_low = inout(reg) a.byte_add(16 * a_stride) => _,
                a_stride = in(reg) a_stride,
                b0 = inout(reg) b0 => _,
                b1 = inout(reg) b1 => _,
                b_stride = in(reg) 64usize,
                c = in(reg) c,
                c_right = in(reg) c.add(16),
                c_low = in(reg) c.byte_add(16 * c_stride),
                c_low_right = in(reg) c.byte_add(16 * c_stride).add(16),
                c_stride = in(reg) c_stride,
                inputs = inout(reg) inputs => _,
                options(nostack),
            );
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod arch {
    use super::{PackedWeight, Unit};

    pub(super) fn detect() -> Option<Unit> {
        None
    }

    pub(super) fn vectors_supported() -> bool {
        false
    }

    pub(super) fn block(_: Unit, _: &[u16], _: &PackedWeight, _: &mut [f32]) {
        unreachable!("bf16 products are used only where `detect` found a unit for them")
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;
    use crate::testing::values;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        assert_eq!(to_bf16(-2.0), 0xc000);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
    }

    #[test]
    fn packing_refuses_widths_that_are_not_whole_blocks() {
        assert!(PackedWeight::new(&[0.0; 32 * 48], 32, 48).is_none());
        assert!(PackedWeight::new(&[0.0; 48 * 32], 48, 32).is_none());
        assert!(PackedWeight::new(&[0.0; 64 * 32], 64, 32).is_some());
    }

    /// On a machine with a bf16 unit, products of several shapes (row counts that are not
    /// whole blocks among them) match f64 sums of the bf16-rounded inputs to f32 rounding, and
    /// a row's result does not depend on the rows beside it.
    #[test]
    fn products_match_bf16_sums() {
        // An AMX machine has AVX-512 BF16 too: both kernels are checked where they run.
        let mut units = Vec::new();
        if unit() == Some(Unit::Tiles) {
            units.push(Unit::Tiles);
        }
        if arch::vectors_supported() {
            units.push(Unit::Vectors);
        }
        if units.is_empty() {
            eprintln!("skipped: this CPU has neither AMX-BF16 nor AVX-512 BF16");
        }
        for unit in units {
            eprintln!("bf16 products on {unit}");
            check_products(unit);
        }
    }

    fn check_products(unit: Unit) {
        let bf = |x: f32| f32::from_bits((to_bf16(x) as u32) << 16);
        for (rows, inputs, outputs) in [(1, 32, 32), (45, 384, 1152), (100, 1536, 384)] {
            let x = values(rows * inputs, 1);
            let w = values(outputs * inputs, 2);
            let bias = values(outputs, 3);
            let packed = Arc::new(PackedWeight::new(&w, outputs, inputs).unwrap());
            let xt = Tensor::from_vec(x.clone(), (1, rows, inputs), &Device::Cpu).unwrap();
            let bt = Tensor::from_vec(bias.clone(), outputs, &Device::Cpu).unwrap();
            let y = linear_on(unit, &xt, &packed, Some(&bt)).unwrap();
            assert_eq!(y.dims(), &[1, rows, outputs]);
            let y = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for r in 0..rows {
                for n in 0..outputs {
                    let exact: f64 = (0..inputs)
                        .map(|k| bf(x[r * inputs + k]) as f64 * bf(w[n * inputs + k]) as f64)
                        .sum::<f64>()
                        + bias[n] as f64;
                    let got = y[r * outputs + n] as f64;
                    assert!(
                        (got - exact).abs() < 1e-4,
                        "{rows}x{inputs}x{outputs} at ({r}, {n}): {got} against {exact}"
                    );
                }
            }
            // The last row alone gives the same bits as among the others.
            let last = xt.narrow(1, rows - 1, 1).unwrap();
            let alone = linear_on(unit, &last, &packed, Some(&bt)).unwrap();
            let alone = alone.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(alone, y[(rows - 1) * outputs..].to_vec());
        }
    }
}
