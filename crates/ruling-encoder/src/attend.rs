//! Attention for answering: each token against exactly the keys its part sees, in one pass.
//!
//! The batched form of [`crate::layout`] gathers every part's keys into padded rows and runs
//! them through matrix products, a bias add and a softmax, each allocating and sweeping the
//! padded score tensor. For a 77-way question those sweeps cost more than the products. Here
//! each query token walks its own key list (its context, then its part) once per layer:
//! scores, softmax and the weighted sum of values, with no padding, no mask values and no
//! intermediate tensors. It has no gradient, so training keeps the batched form.
//!
//! Up to four consecutive tokens of one part go together, since they share their keys: each
//! key and value row is read once for all of them. The keys are transposed once per layer, so
//! the scores of eight consecutive keys (a part's keys are a few runs of consecutive tokens)
//! build up side by side in one vector, with no sum across lanes.
//!
//! A token's result is computed from its query, its keys and its values alone: each score sums
//! over the head's dimensions in order, each output over the keys in order. So it is
//! bit-identical whatever else the sequence holds, whichever tokens share its group and however
//! tokens are split between threads: what makes answers invariant to the other questions of a
//! request holds by construction, without the alignment the batched form needs.
//!
//! The windows of a long state ([`crate::pack::windows`]) are the exception: each is a block of
//! up to 512 tokens that see exactly each other, thousands of tokens in all, where walking key
//! lists would cost most of a request. They are attended as matrix products instead, head by
//! head (`gemm`, one window per task). A window's result depends on its own tokens alone, and
//! the windows on the state alone, so a question still reads the same state whatever else is
//! asked. A state that fits one window keeps the key-list path, bit for bit as before.

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
    /// Parts attended as one block of matrix products: the windows of a state read in more
    /// than one, each a run of tokens that see exactly their run.
    blocks: Vec<bool>,
    /// With such windows, the tokens `0..n` they hold, which every other part's keys begin
    /// with: those parts attend to them by matrix products too.
    state: Option<usize>,
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
        // A part whose keys are its own tokens, one run, is a window of the state (the only
        // part with no context); where there are several, each is a block.
        let parts = starts.len() - 1;
        let own_run = |p: usize| {
            let list = &keys[starts[p] as usize..starts[p + 1] as usize];
            !list.is_empty()
                && list.windows(2).all(|w| w[1] == w[0] + 1)
                && part_of.get(list[0] as usize) == Some(&(p as u32))
                && list.iter().all(|&t| part_of[t as usize] == p as u32)
                && part_of.iter().filter(|&&q| q == p as u32).count() == list.len()
        };
        let mut blocks: Vec<bool> = (0..parts).map(own_run).collect();
        if blocks.iter().filter(|&&b| b).count() < 2 {
            blocks.fill(false);
        }
        // The windows come first in the sequence, one after the other; every other part reads
        // all of them before its own keys.
        let state_tokens = part_of.iter().take_while(|&&p| blocks[p as usize]).count();
        let leads_with_state = |p: usize| {
            let list = &keys[starts[p] as usize..starts[p + 1] as usize];
            list.len() >= state_tokens
                && list[..state_tokens]
                    .iter()
                    .enumerate()
                    .all(|(i, &t)| t as usize == i)
        };
        let state = (state_tokens > 0
            && part_of[state_tokens..].iter().all(|&p| !blocks[p as usize])
            && (0..parts).all(|p| blocks[p] || leads_with_state(p)))
        .then_some(state_tokens);
        if state.is_none() {
            blocks.fill(false);
        }
        Some(Self {
            keys,
            starts,
            part_of,
            window: None,
            blocks,
            state,
        })
    }

    /// The same lists with keys more than `reach` positions from their query skipped.
    pub fn within(&self, positions: Arc<[u32]>, reach: usize) -> Self {
        Self {
            window: Some((positions, reach)),
            // A block's tokens would no longer all see each other.
            blocks: vec![false; self.blocks.len()],
            state: None,
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

/// Query rows attended together: they share their part's keys, so each key and value row
/// read serves all of them.
const GROUP: usize = 4;

/// Keys per score vector.
const KEYS: usize = 8;

/// Every token's keys, transposed: for each of the `width` key columns, that column of every
/// token side by side, so the scores of eight consecutive keys are one vector.
struct Transposed {
    columns: Vec<f32>,
    tokens: usize,
}

impl Transposed {
    fn new(k: &Rows<'_>) -> Self {
        let tokens = k.rows;
        let mut columns = vec![0f32; k.width * tokens];
        for t in 0..tokens {
            for (c, &x) in k.row(t).iter().enumerate() {
                columns[c * tokens + t] = x;
            }
        }
        Self { columns, tokens }
    }

    /// Column `c` from token `from` on.
    fn column(&self, c: usize, from: usize) -> &[f32] {
        &self.columns[c * self.tokens + from..(c + 1) * self.tokens]
    }
}

impl Attend {
    /// The query rows `first.0 ..` of `first.1` (`out.len() / width` of them), which all see
    /// the keys `list`, into `out`. Where the CPU has AVX2 the same code is compiled for it:
    /// the same operations in the same order (Rust never fuses a multiply and an add on its
    /// own), so the same bits, in registers twice as wide as the baseline target's.
    #[allow(unsafe_code)]
    fn group(
        &self,
        list: &[u32],
        first: (usize, &Rows<'_>),
        keys: &Transposed,
        v: &Rows<'_>,
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { self.group_avx2(list, first, keys, v, out) };
        }
        self.group_portable(list, first, keys, v, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn group_avx2(
        &self,
        list: &[u32],
        first: (usize, &Rows<'_>),
        keys: &Transposed,
        v: &Rows<'_>,
        out: &mut [f32],
    ) {
        self.group_portable(list, first, keys, v, out);
    }

    #[inline(always)]
    fn group_portable(
        &self,
        list: &[u32],
        first: (usize, &Rows<'_>),
        keys: &Transposed,
        v: &Rows<'_>,
        out: &mut [f32],
    ) {
        let width = first.1.width;
        match out.len() / width {
            1 => self.rows::<1>(list, first, keys, v, out),
            2 => self.rows::<2>(list, first, keys, v, out),
            3 => self.rows::<3>(list, first, keys, v, out),
            _ => self.rows::<GROUP>(list, first, keys, v, out),
        }
    }

    /// `G` query rows of one part. Each score is its query's and key's products summed over
    /// the head's dimensions in order, and each output sums its keys' values in key order:
    /// which rows share the call, and which lane a key's score takes, change no bits.
    #[inline(always)]
    fn rows<const G: usize>(
        &self,
        list: &[u32],
        (row, q): (usize, &Rows<'_>),
        keys: &Transposed,
        v: &Rows<'_>,
        out: &mut [f32],
    ) {
        let width = q.width;
        let head_dim = width / self.heads;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let n = list.len();
        let queries: [&[f32]; G] = std::array::from_fn(|g| q.row(row + g));
        // Scores, query by query, head by head, key by key in list order.
        let mut scores = vec![0f32; G * self.heads * n];
        let at = |g: usize, h: usize, j: usize| (g * self.heads + h) * n + j;
        let mut j = 0;
        while j < n {
            // A run of consecutive tokens in the list.
            let start = list[j] as usize;
            let mut len = 1;
            while j + len < n && list[j + len] as usize == start + len {
                len += 1;
            }
            for h in 0..self.heads {
                let dims = h * head_dim..(h + 1) * head_dim;
                let mut i = 0;
                while i + KEYS <= len {
                    let mut sums = [[0f32; KEYS]; G];
                    for d in dims.clone() {
                        let column = &keys.column(d, start + i)[..KEYS];
                        for g in 0..G {
                            let x = queries[g][d];
                            for l in 0..KEYS {
                                sums[g][l] += x * column[l];
                            }
                        }
                    }
                    for (g, sums) in sums.iter().enumerate() {
                        for (l, s) in sums.iter().enumerate() {
                            scores[at(g, h, j + i + l)] = s * scale;
                        }
                    }
                    i += KEYS;
                }
                for i in i..len {
                    let mut sums = [0f32; G];
                    for d in dims.clone() {
                        let x = keys.column(d, start + i)[0];
                        for g in 0..G {
                            sums[g] += queries[g][d] * x;
                        }
                    }
                    for (g, s) in sums.iter().enumerate() {
                        scores[at(g, h, j + i)] = s * scale;
                    }
                }
            }
            j += len;
        }
        // Softmax numerators and their sums.
        let mut totals = vec![0f32; G * self.heads];
        for (row, total) in scores.chunks_exact_mut(n).zip(&mut totals) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for s in row.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            *total = sum;
        }
        // Values, weighted, key by key.
        out.fill(0.0);
        for (j, &key) in list.iter().enumerate() {
            let value_row = v.row(key as usize);
            for (g, out) in out.chunks_exact_mut(width).enumerate() {
                for h in 0..self.heads {
                    let p = scores[at(g, h, j)];
                    let span = h * head_dim..(h + 1) * head_dim;
                    for (o, x) in out[span.clone()].iter_mut().zip(&value_row[span]) {
                        *o += p * x;
                    }
                }
            }
        }
        for (g, out) in out.chunks_exact_mut(width).enumerate() {
            for (h, chunk) in out.chunks_exact_mut(head_dim).enumerate() {
                let inverse = 1.0 / totals[g * self.heads + h];
                for o in chunk {
                    *o *= inverse;
                }
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
        let token_of = |row: usize| {
            self.queries
                .as_ref()
                .map_or(row, |queries| queries[row] as usize)
        };
        use rayon::prelude::*;
        let keys = Transposed::new(&k);
        // Runs of up to `GROUP` consecutive query rows of one part: they share their keys
        // (unless a window narrows each token's keys further).
        let most = if self.lists.window.is_some() {
            1
        } else {
            GROUP
        };
        let mut out = vec![0f32; q.rows * width];
        let mut groups: Vec<(usize, &mut [f32])> = Vec::new();
        let mut blocks: Vec<(&[u32], &mut [f32])> = Vec::new();
        let mut rest = out.as_mut_slice();
        let mut row = 0;
        while row < q.rows {
            let part = self.lists.part_of[token_of(row)] as usize;
            if self.queries.is_none() && self.lists.blocks[part] {
                // A whole window: its tokens are these rows, in order (`KeyLists::new`).
                let list = self.lists.keys_of(row);
                let (block, tail) = rest.split_at_mut(list.len() * width);
                blocks.push((list, block));
                rest = tail;
                row += list.len();
                continue;
            }
            // Behind a windowed state, a part's rows go together, however many.
            let most = if self.lists.state.is_some() {
                usize::MAX
            } else {
                most
            };
            let mut len = 1;
            while len < most
                && row + len < q.rows
                && self.lists.part_of[token_of(row + len)] as usize == part
            {
                len += 1;
            }
            let (group, tail) = rest.split_at_mut(len * width);
            groups.push((row, group));
            rest = tail;
            row += len;
        }
        blocks.into_par_iter().for_each(|(list, out)| {
            block(list, self.heads, &q, &k, &v, out);
        });
        if let Some(state) = self.lists.state {
            groups.into_par_iter().for_each(|(row, out)| {
                let list = self.lists.keys_of(token_of(row));
                after_windows(state, &list[state..], self.heads, (row, &q), &k, &v, out);
            });
            return Ok((CpuStorage::F32(out), Shape::from((q.rows, width))));
        }
        groups.into_par_iter().for_each(|(row, out)| {
            let token = token_of(row);
            let all = self.lists.keys_of(token);
            let list = match &self.lists.window {
                None => std::borrow::Cow::Borrowed(all),
                Some((positions, reach)) => {
                    let at = positions[token];
                    all.iter()
                        .copied()
                        .filter(|&key| positions[key as usize].abs_diff(at) as usize <= *reach)
                        .collect()
                }
            };
            self.group(&list, (row, &q), &keys, &v, out);
        });
        Ok((CpuStorage::F32(out), Shape::from((q.rows, width))))
    }
}

/// Attention within one block of tokens that see exactly each other (`list`, consecutive
/// tokens), head by head: the scores as one matrix product, a softmax per row, the weighted
/// values as another, into the block's rows of `out`.
#[allow(unsafe_code)]
fn block(list: &[u32], heads: usize, q: &Rows<'_>, k: &Rows<'_>, v: &Rows<'_>, out: &mut [f32]) {
    let (first, len) = (list[0] as usize, list.len());
    let width = q.width;
    let head_dim = width / heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut scores = vec![0f32; len * len];
    // The rows of the block in each operand; `Rows::new` and the callers' shape checks make
    // every row of the sequence lie within its storage, and `out` holds `len` rows of `width`.
    let last = first + len - 1;
    assert!(last < q.rows && last < k.rows && last < v.rows && out.len() == len * width);
    for h in 0..heads {
        let column = h * head_dim;
        // SAFETY: every element the products read is `data[(first + i) * stride + column + d]`
        // for `i < len`, `d < head_dim`, inside each operand's rows (checked above, and
        // `column + head_dim <= width`); they write `scores` (`len x len`) and the block's
        // `len` rows of `out` at columns `column..column + head_dim`, all in bounds. Nothing
        // else holds these buffers during the calls.
        unsafe {
            gemm::gemm(
                len,
                len,
                head_dim,
                scores.as_mut_ptr(),
                1,
                len as isize,
                false,
                q.data.as_ptr().add(first * q.stride + column),
                1,
                q.stride as isize,
                k.data.as_ptr().add(first * k.stride + column),
                k.stride as isize,
                1,
                0.0,
                scale,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        softmax_rows(&mut scores, len);
        // SAFETY: as above.
        unsafe {
            gemm::gemm(
                len,
                head_dim,
                len,
                out.as_mut_ptr().add(column),
                1,
                width as isize,
                false,
                scores.as_ptr(),
                1,
                len as isize,
                v.data.as_ptr().add(first * v.stride + column),
                1,
                v.stride as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
}

/// Attention of the query rows `first.0 ..` of `first.1` (`out.len() / width` rows of one
/// part) behind a windowed state: over the state's tokens `0..state` by matrix products, then
/// over the part's other keys `rest` (its question's text, itself) one by one, under one
/// softmax. A row's result depends on its part's rows and keys alone.
#[allow(unsafe_code)]
fn after_windows(
    state: usize,
    rest: &[u32],
    heads: usize,
    (row, q): (usize, &Rows<'_>),
    k: &Rows<'_>,
    v: &Rows<'_>,
    out: &mut [f32],
) {
    let width = q.width;
    let rows = out.len() / width;
    let head_dim = width / heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let keys = state + rest.len();
    let mut scores = vec![0f32; rows * keys];
    assert!(row + rows <= q.rows && state <= k.rows && state <= v.rows);
    assert!(
        rest.iter()
            .all(|&t| (t as usize) < k.rows && (t as usize) < v.rows)
    );
    for h in 0..heads {
        let column = h * head_dim;
        // SAFETY: the product reads query rows `row..row + rows` and key rows `0..state`, each
        // at columns `column..column + head_dim` (within `width`), all inside their storage
        // (checked above and by `Rows::new`); it writes the first `state` columns of each of
        // the `rows` rows of `scores` (row stride `keys`). Nothing else holds these buffers.
        unsafe {
            gemm::gemm(
                rows,
                state,
                head_dim,
                scores.as_mut_ptr(),
                1,
                keys as isize,
                false,
                q.data.as_ptr().add(row * q.stride + column),
                1,
                q.stride as isize,
                k.data.as_ptr().add(column),
                k.stride as isize,
                1,
                0.0,
                scale,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        for (r, scores) in scores.chunks_exact_mut(keys).enumerate() {
            let query = &q.row(row + r)[column..column + head_dim];
            for (s, &key) in scores[state..].iter_mut().zip(rest) {
                let key = &k.row(key as usize)[column..column + head_dim];
                *s = query.iter().zip(key).map(|(a, b)| a * b).sum::<f32>() * scale;
            }
        }
        softmax_rows(&mut scores, keys);
        // SAFETY: as above for the value rows `0..state`; it writes the `rows` rows of `out`
        // (row stride `width`) at columns `column..column + head_dim`.
        unsafe {
            gemm::gemm(
                rows,
                head_dim,
                state,
                out.as_mut_ptr().add(column),
                1,
                width as isize,
                false,
                scores.as_ptr(),
                1,
                keys as isize,
                v.data.as_ptr().add(column),
                1,
                v.stride as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        for (r, weights) in scores.chunks_exact(keys).enumerate() {
            let out = &mut out[r * width + column..r * width + column + head_dim];
            for (&w, &key) in weights[state..].iter().zip(rest) {
                let value = &v.row(key as usize)[column..column + head_dim];
                for (o, x) in out.iter_mut().zip(value) {
                    *o += w * x;
                }
            }
        }
    }
}

/// Each row of `len` scores as its softmax, in place, where the CPU has AVX2 and FMA in
/// registers of eight lanes.
#[allow(unsafe_code)]
fn softmax_rows(scores: &mut [f32], len: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA, checked just above.
        return unsafe { softmax_rows_avx2(scores, len) };
    }
    softmax_rows_portable(scores, len);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_rows_avx2(scores: &mut [f32], len: usize) {
    softmax_rows_portable(scores, len);
}

/// Lanes the reductions of [`softmax_rows`] keep apart, so they vectorise.
const LANES: usize = 8;

#[inline(always)]
fn softmax_rows_portable(scores: &mut [f32], len: usize) {
    for row in scores.chunks_exact_mut(len) {
        let mut most = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for l in 0..LANES {
                most[l] = most[l].max(chunk[l]);
            }
        }
        let max = chunks
            .remainder()
            .iter()
            .chain(&most)
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sums = [0f32; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            for l in 0..LANES {
                chunk[l] = exp_below_zero(chunk[l] - max);
                sums[l] += chunk[l];
            }
        }
        let mut sum: f32 = sums.iter().sum();
        for s in chunks.into_remainder() {
            *s = exp_below_zero(*s - max);
            sum += *s;
        }
        let inverse = 1.0 / sum;
        for s in row.iter_mut() {
            *s *= inverse;
        }
    }
}

/// `e^x` for `x <= 0` within a few units in the last place, with no branch or library call so
/// a loop of it vectorises: `x = n ln 2 + r` with `|r| <= ln 2 / 2`, `e^r` by its Taylor
/// polynomial to the sixth power (error under 2e-7), times `2^n` built in the exponent bits.
/// Below -87 the result is 0 (`e^-87` is near the smallest normal float).
#[inline(always)]
fn exp_below_zero(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits((((n as i32) + 127) << 23) as u32);
    let y = p * scale;
    if x <= -87.0 { 0.0 } else { y }
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

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;
    use crate::pack::{Limits, QuestionTokens, Special, pack};
    use crate::testing::values;

    /// A state of 13 tokens, a question of 6 with options of 3, 9 and 1 tokens, and a question
    /// of 2 with two options of 5: parts whose lengths are not multiples of the group or of a
    /// score vector.
    fn lists() -> KeyLists {
        let special = Special {
            cls: 101,
            sep: 102,
            mask: 103,
            pad: 0,
        };
        let question = |text: usize, options: &[usize]| QuestionTokens {
            text: vec![5; text],
            options: options.iter().map(|&n| vec![6; n]).collect(),
        };
        let packed = pack(
            &[7; 13],
            &[question(6, &[3, 9, 1]), question(2, &[5, 5])],
            special,
            Limits {
                max_positions: 512,
                max_tokens: 10_000,
                max_state_tokens: 10_000,
            },
        )
        .unwrap();
        KeyLists::new(&LayoutPlan::new(&[&packed])).unwrap()
    }

    fn attend(lists: &Arc<KeyLists>, qkv: &[Tensor; 3], queries: Option<&[u32]>) -> Vec<f32> {
        let [q, k, v] = qkv;
        let op = Attend {
            lists: Arc::clone(lists),
            heads: 2,
            queries: queries.map(Arc::from),
        };
        let q = match queries {
            None => q.clone(),
            Some(rows) => q
                .index_select(
                    &Tensor::from_slice(rows, rows.len(), q.device()).unwrap(),
                    0,
                )
                .unwrap(),
        };
        q.apply_op3_no_bwd(k, v, &op)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    #[test]
    fn the_fast_exponential_is_exact_to_a_few_ulps() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = f64::from(x).exp();
            let got = f64::from(exp_below_zero(x));
            if want > 1e-30 {
                worst = worst.max(((got - want) / want).abs());
            }
        }
        assert!(worst < 1e-6, "relative error {worst}");
        assert_eq!(exp_below_zero(-100.0).to_bits(), 0f32.to_bits());
        assert_eq!(exp_below_zero(0.0).to_bits(), 1f32.to_bits());
        let mut rows = vec![0.5, -3.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        softmax_rows(&mut rows, 11);
        assert!((rows.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((rows[2] / rows[3] - 2f32.exp()).abs() < 1e-4);
    }

    /// Every token's result is masked softmax attention over its part's keys, and its bits do
    /// not depend on which other tokens are attended in the same call, in which order, or
    /// which of them share its group.
    #[test]
    fn a_tokens_bits_depend_on_its_own_keys_alone() {
        let lists = Arc::new(lists());
        let (n, width, head_dim) = (lists.part_of.len(), 64, 32);
        let qkv: [Tensor; 3] = std::array::from_fn(|i| {
            Tensor::from_vec(values(n * width, i as u32 + 1), (n, width), &Device::Cpu).unwrap()
        });
        let every = attend(&lists, &qkv, None);

        let rows: Vec<Vec<f32>> = qkv
            .iter()
            .map(|t| t.flatten_all().unwrap().to_vec1().unwrap())
            .collect();
        let (q, k, v) = (&rows[0], &rows[1], &rows[2]);
        for t in 0..n {
            let keys = lists.keys_of(t);
            for h in 0..2 {
                let dims = h * head_dim..(h + 1) * head_dim;
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&key| {
                        dims.clone()
                            .map(|d| q[t * width + d] as f64 * k[key as usize * width + d] as f64)
                            .sum::<f64>()
                            / (head_dim as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for d in dims {
                    let expected: f64 = keys
                        .iter()
                        .zip(&weights)
                        .map(|(&key, w)| w / total * v[key as usize * width + d] as f64)
                        .sum();
                    let got = every[t * width + d] as f64;
                    assert!(
                        (got - expected).abs() < 1e-5,
                        "token {t}, column {d}: {got} against {expected}"
                    );
                }
            }
        }

        let odd: Vec<u32> = (1..n as u32).step_by(2).collect();
        let reversed: Vec<u32> = (0..n as u32).rev().collect();
        let shifted: Vec<u32> = (3..n as u32).collect();
        for queries in [&odd, &reversed, &shifted] {
            let some = attend(&lists, &qkv, Some(queries));
            for (i, &t) in queries.iter().enumerate() {
                let t = t as usize;
                assert_eq!(
                    some[i * width..(i + 1) * width],
                    every[t * width..(t + 1) * width],
                    "token {t}"
                );
            }
        }
    }
}
