//! Attention for answering: each token against exactly the keys its part sees, in one pass.
//!
//! The batched form of [`crate::layout`] gathers every part's keys into padded rows and runs
//! them through matrix products, a bias add and a softmax, each allocating and sweeping the
//! padded score tensor. For a 77-way question those sweeps cost more than the products. Here
//! each query token walks its own key list (its context, then its part) once per layer: dot
//! products, softmax and the weighted sum of values, with no padding, no mask values and no
//! intermediate tensors. It has no gradient, so training keeps the batched form.
//!
//! A token's result is computed from its query, its keys and its values alone, every sum taken
//! in key order with fixed vector lanes, so it is bit-identical whatever else the sequence holds
//! and however tokens are split between threads: what makes answers invariant to the other
//! questions of a request holds by construction, without the alignment the batched form needs.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape};

use crate::layout::LayoutPlan;

/// The keys of every part of a [`LayoutPlan`] and which part each token belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyLists {
    /// Key token indices, part after part: context first, then the part's own tokens.
    keys: Vec<u32>,
    /// Where each part's keys start in `keys`, and one past the last part.
    starts: Vec<u32>,
    /// The part of each token of the sequence.
    part_of: Vec<u32>,
    /// Keys further than `reach` positions from the query are skipped (ModernBERT's local
    /// layers): the sequence's positions and the reach.
    window: Option<(Arc<[u32]>, usize)>,
}

impl KeyLists {
    /// The key lists of `plan`, or `None` for a plan whose parts' queries see different keys
    /// (the per-row training layout).
    pub fn new(plan: &LayoutPlan) -> Option<Self> {
        let mut keys = Vec::new();
        let mut starts = vec![0u32];
        let mut part_of = vec![u32::MAX; plan.tokens];
        let mut base = 0usize;
        for bucket in &plan.buckets {
            if bucket.bias_rows != 1 {
                return None;
            }
            for unit in 0..bucket.units {
                let row = unit * bucket.keys..(unit + 1) * bucket.keys;
                keys.extend(
                    bucket.key_index[row.clone()]
                        .iter()
                        .zip(&bucket.key_bias[row])
                        .filter(|(_, bias)| **bias == 0.0)
                        .map(|(key, _)| *key),
                );
                starts.push(u32::try_from(keys.len()).ok()?);
            }
            // `gather` maps each token to its row among the buckets' query rows; a bucket's
            // rows are its parts' padded query blocks, in part order.
            for (token, &row) in plan.gather.iter().enumerate() {
                let row = row as usize;
                let end = base + bucket.units * bucket.queries;
                if (base..end).contains(&row) {
                    let part = starts.len() - 1 - bucket.units + (row - base) / bucket.queries;
                    part_of[token] = part as u32;
                }
            }
            base += bucket.units * bucket.queries;
        }
        if part_of.contains(&u32::MAX) {
            return None;
        }
        Some(Self {
            keys,
            starts,
            part_of,
            window: None,
        })
    }

    /// The same lists with keys more than `reach` positions from their query skipped.
    pub fn within(&self, positions: Arc<[u32]>, reach: usize) -> Self {
        Self {
            window: Some((positions, reach)),
            ..self.clone()
        }
    }

    fn keys_of(&self, token: usize) -> &[u32] {
        let part = self.part_of[token] as usize;
        &self.keys[self.starts[part] as usize..self.starts[part + 1] as usize]
    }
}

/// The op: `[.., n, heads * head_dim]` queries, keys and values to the attended values. With
/// `queries`, the query tensor holds only those tokens' rows, in that order, and so does the
/// result (a last layer that only its slots need).
pub struct Attend {
    pub lists: Arc<KeyLists>,
    pub heads: usize,
    pub queries: Option<Arc<[u32]>>,
}

/// Lanes of the fixed-order sums: one AVX register, or two SSE ones.
const LANES: usize = 8;

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = a.len() / LANES * LANES;
    for (ca, cb) in a[..chunks]
        .chunks_exact(LANES)
        .zip(b[..chunks].chunks_exact(LANES))
    {
        for l in 0..LANES {
            acc[l] += ca[l] * cb[l];
        }
    }
    let mut sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in a[chunks..].iter().zip(&b[chunks..]) {
        sum += x * y;
    }
    sum
}

impl Attend {
    /// One token's attended values into `out` (`heads * head_dim` values); `query` is its row
    /// of queries. Where the CPU has AVX2 the same code is compiled for it: the same
    /// operations in the same order (Rust never fuses a multiply and an add on its own), so
    /// the same bits, in registers twice as wide as the baseline target's.
    #[allow(unsafe_code)]
    fn token(&self, token: usize, query: &[f32], k: &Rows<'_>, v: &Rows<'_>, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { self.token_avx2(token, query, k, v, out) };
        }
        self.token_portable(token, query, k, v, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn token_avx2(&self, token: usize, query: &[f32], k: &Rows<'_>, v: &Rows<'_>, out: &mut [f32]) {
        self.token_portable(token, query, k, v, out);
    }

    #[inline(always)]
    fn token_portable(
        &self,
        token: usize,
        query: &[f32],
        k: &Rows<'_>,
        v: &Rows<'_>,
        out: &mut [f32],
    ) {
        let width = out.len();
        let head_dim = width / self.heads;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let all = self.lists.keys_of(token);
        let keys: Vec<u32>;
        let keys = match &self.lists.window {
            None => all,
            Some((positions, reach)) => {
                let at = positions[token];
                keys = all
                    .iter()
                    .copied()
                    .filter(|&key| positions[key as usize].abs_diff(at) as usize <= *reach)
                    .collect();
                &keys
            }
        };
        let n = keys.len();
        let mut scores = vec![0f32; self.heads * n];
        for (j, &key) in keys.iter().enumerate() {
            let key_row = k.row(key as usize);
            for h in 0..self.heads {
                let span = h * head_dim..(h + 1) * head_dim;
                scores[h * n + j] = dot(&query[span.clone()], &key_row[span]) * scale;
            }
        }
        let mut sums = vec![0f32; self.heads];
        for (h, row) in scores.chunks_exact_mut(n).enumerate() {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for s in row.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            sums[h] = sum;
        }
        out.fill(0.0);
        for (j, &key) in keys.iter().enumerate() {
            let value_row = v.row(key as usize);
            for h in 0..self.heads {
                let p = scores[h * n + j];
                let span = h * head_dim..(h + 1) * head_dim;
                for (o, x) in out[span.clone()].iter_mut().zip(&value_row[span]) {
                    *o += p * x;
                }
            }
        }
        for (h, chunk) in out.chunks_exact_mut(head_dim).enumerate() {
            let inverse = 1.0 / sums[h];
            for o in chunk {
                *o *= inverse;
            }
        }
    }
}

impl CustomOp3 for Attend {
    fn name(&self) -> &'static str {
        "ruling-attend"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        q_layout: &Layout,
        k: &CpuStorage,
        k_layout: &Layout,
        v: &CpuStorage,
        v_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let q = Rows::new(q, q_layout, self.name())?;
        let k = Rows::new(k, k_layout, self.name())?;
        let v = Rows::new(v, v_layout, self.name())?;
        let width = q.width;
        let tokens = self.lists.part_of.len();
        let expected = self
            .queries
            .as_ref()
            .map_or(tokens, |queries| queries.len());
        if q.rows != expected
            || (k.rows, k.width) != (tokens, width)
            || (v.rows, v.width) != (tokens, width)
        {
            candle_core::bail!(
                "{}: {} query rows and {} keys of width {} for a layout of {tokens} tokens",
                self.name(),
                q.rows,
                k.rows,
                k.width,
            );
        }
        if width % self.heads != 0 {
            candle_core::bail!("{}: width {width} over {} heads", self.name(), self.heads);
        }
        if let Some(queries) = &self.queries
            && let Some(bad) = queries.iter().find(|&&t| t as usize >= tokens)
        {
            candle_core::bail!("{}: query token {bad} of {tokens}", self.name());
        }
        let mut out = vec![0f32; q.rows * width];
        crate::kernels::by_rows(&mut out, width, |row, values| {
            let token = self
                .queries
                .as_ref()
                .map_or(row, |queries| queries[row] as usize);
            self.token(token, q.row(row), &k, &v, values);
        });
        Ok((CpuStorage::F32(out), Shape::from((q.rows, width))))
    }
}

/// A matrix whose rows are contiguous but may be further apart than their width: one third of
/// a fused query-key-value product, say.
struct Rows<'a> {
    data: &'a [f32],
    rows: usize,
    width: usize,
    stride: usize,
}

impl<'a> Rows<'a> {
    fn new(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<Self> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("{op} takes f32");
        };
        let dims = layout.dims();
        let strides = layout.stride();
        let rank = dims.len();
        // Leading dimensions of size one (a batch of one row) are allowed and ignored.
        if rank < 2 || strides[rank - 1] != 1 || dims[..rank - 2].iter().any(|&d| d != 1) {
            candle_core::bail!("{op} takes rows of unit stride, not {dims:?} / {strides:?}");
        }
        let (rows, width, stride) = (dims[rank - 2], dims[rank - 1], strides[rank - 2]);
        let start = layout.start_offset();
        if rows > 0 && start + (rows - 1) * stride + width > data.len() {
            candle_core::bail!("{op}: the rows run past the storage");
        }
        Ok(Self {
            data: &data[start..],
            rows,
            width,
            stride,
        })
    }

    fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.stride..][..self.width]
    }
}
