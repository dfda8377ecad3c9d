//! The 3-D attention mask of the decision layout, in factored form.
//!
//! Inside one part of the layout (the state, one question's text, one option) every token
//! sees the same keys: its *context* (nothing for the state; the state for a question's text;
//! the state and the question's text for an option) and the part itself. So instead of an
//! `n x n` score matrix that is mostly masked (a 77-way question is 600 tokens of which each
//! option sees about 50), attention runs per part: the part's queries against its context's
//! keys and its own, gathered into one row. Parts of the same kind are batched together, so a
//! request is three batched attentions per layer however many questions and options it has.
//!
//! The gathered key row of a part is laid out as `[context, padding, own, padding]` with both
//! halves padded to a multiple of [`KEY_ALIGN`], so what other questions add only moves the
//! own half by whole multiples of the alignment and appends masked keys, and the CPU kernels'
//! vector lanes see the same values in the same order.
//!
//! Everything here is plain Rust on indices; `ops::attention` runs it for training, and
//! answering reads the same plan as per-part key lists (`crate::attend`), which skip the padding
//! altogether.

use std::ops::Range;

use crate::pack::{Packed, Segment};

/// Key rows are padded to a multiple of this: the widest reduction candle's CPU kernels make
/// (4 AVX registers of 8 lanes).
pub const KEY_ALIGN: usize = 32;

/// One batched attention over parts of one kind.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketPlan {
    /// Parts in the bucket.
    pub units: usize,
    /// Query rows per part (the longest part's length).
    pub queries: usize,
    /// Key slots per part (context and own halves, each padded to [`KEY_ALIGN`]).
    pub keys: usize,
    /// `units * queries` token indices; rows past a part's length repeat its first token and
    /// their results are dropped.
    pub query_index: Vec<u32>,
    /// `units * keys` token indices; padding slots point at token 0 and are masked.
    pub key_index: Vec<u32>,
    /// Additive biases, 0 where a query may attend and `f32::MIN` where not: `units * keys`
    /// values (one row of keys per part, the same for all its queries) when `bias_rows` is 1,
    /// `units * queries * keys` when it is `queries`.
    pub key_bias: Vec<f32>,
    pub bias_rows: usize,
}

/// The factored mask of a whole batch: every part of every packed row, and where each token's
/// result lands.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutPlan {
    pub tokens: usize,
    pub buckets: Vec<BucketPlan>,
    /// For each token in sequence order, its row among the concatenated bucket outputs.
    pub gather: Vec<u32>,
}

#[derive(Debug, Clone)]
struct Part {
    context: Vec<Range<usize>>,
    own: Range<usize>,
}

impl Part {
    fn context_len(&self) -> usize {
        self.context.iter().map(ExactSizeIterator::len).sum()
    }
}

fn round_up(n: usize) -> usize {
    n.div_ceil(KEY_ALIGN) * KEY_ALIGN
}

/// The parts of the packed rows laid end to end (row `r` starts where row `r - 1` ended),
/// grouped by kind: states, question texts, options.
fn parts(rows: &[&Packed]) -> [Vec<Part>; 3] {
    let mut kinds: [Vec<Part>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut offset = 0;
    for packed in rows {
        let mut runs: Vec<(Segment, Range<usize>)> = Vec::new();
        for (i, &segment) in packed.segments.iter().enumerate() {
            match runs.last_mut() {
                Some((last, range)) if *last == segment => range.end = offset + i + 1,
                _ => runs.push((segment, offset + i..offset + i + 1)),
            }
        }
        // The state's windows, in order: every question and option reads all of them.
        let state: Vec<Range<usize>> = runs
            .iter()
            .filter(|(s, _)| matches!(s, Segment::State(_)))
            .map(|(_, r)| r.clone())
            .collect();
        let mut question = offset..offset;
        for (segment, range) in runs {
            match segment {
                Segment::State(_) => kinds[0].push(Part {
                    context: Vec::new(),
                    own: range,
                }),
                Segment::Question(_) => {
                    question = range.clone();
                    kinds[1].push(Part {
                        context: state.clone(),
                        own: range,
                    });
                }
                // Options follow their question's text in the layout.
                Segment::Option(..) => kinds[2].push(Part {
                    context: state.iter().cloned().chain([question.clone()]).collect(),
                    own: range,
                }),
                Segment::Padding => {}
            }
        }
        offset += packed.len();
    }
    kinds
}

impl LayoutPlan {
    /// The plan of `rows` laid end to end as one sequence (so a training batch has no padding).
    pub fn new(rows: &[&Packed]) -> Self {
        let tokens: usize = rows.iter().map(|p| p.len()).sum();
        let mut gather = vec![0u32; tokens];
        let mut buckets = Vec::new();
        let mut base = 0usize;
        for kind in parts(rows) {
            if kind.is_empty() {
                continue;
            }
            let queries = kind.iter().map(|p| p.own.len()).max().unwrap_or(0);
            let context = round_up(kind.iter().map(Part::context_len).max().unwrap_or(0));
            let keys = context + round_up(queries);
            let mut bucket = BucketPlan {
                units: kind.len(),
                queries,
                keys,
                query_index: Vec::with_capacity(kind.len() * queries),
                key_index: Vec::with_capacity(kind.len() * keys),
                key_bias: Vec::with_capacity(kind.len() * keys),
                bias_rows: 1,
            };
            for (u, part) in kind.iter().enumerate() {
                for i in 0..queries {
                    let token = if i < part.own.len() {
                        let token = part.own.start + i;
                        gather[token] = (base + u * queries + i) as u32;
                        token
                    } else {
                        part.own.start
                    };
                    bucket.query_index.push(token as u32);
                }
                let real = |bucket: &mut BucketPlan, token: usize| {
                    bucket.key_index.push(token as u32);
                    bucket.key_bias.push(0.0);
                };
                for range in &part.context {
                    for token in range.clone() {
                        real(&mut bucket, token);
                    }
                }
                pad(&mut bucket, context - part.context_len());
                for token in part.own.clone() {
                    real(&mut bucket, token);
                }
                pad(&mut bucket, keys - context - part.own.len());
            }
            base += kind.len() * queries;
            buckets.push(bucket);
        }
        Self {
            tokens,
            buckets,
            gather,
        }
    }

    /// Each packed row as one part attending over the whole row under its 3-D mask: more
    /// attention arithmetic than [`LayoutPlan::new`] (masked pairs are computed too), but a few
    /// large matrix products instead of thousands of tiny ones, which is what a training step's
    /// backward pass on a CPU wants. Not aligned: results may differ in the last bits with
    /// what else is in the batch, which training does not mind.
    pub fn per_row(rows: &[&Packed]) -> Self {
        let tokens: usize = rows.iter().map(|p| p.len()).sum();
        let width = rows.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut bucket = BucketPlan {
            units: rows.len(),
            queries: width,
            keys: width,
            query_index: Vec::with_capacity(rows.len() * width),
            key_index: Vec::with_capacity(rows.len() * width),
            key_bias: Vec::with_capacity(rows.len() * width * width),
            bias_rows: width,
        };
        let mut gather = Vec::with_capacity(tokens);
        let mut offset = 0;
        for (u, packed) in rows.iter().enumerate() {
            let n = packed.len();
            for i in 0..width {
                let token = offset + i.min(n.saturating_sub(1));
                bucket.query_index.push(token as u32);
                bucket.key_index.push(token as u32);
            }
            for i in 0..width {
                for j in 0..width {
                    let visible = if i < n {
                        j < n && packed.segments[i].sees(packed.segments[j])
                    } else {
                        // A padding query sees the row's first token, so its softmax is defined;
                        // its result is dropped.
                        j == 0
                    };
                    bucket.key_bias.push(if visible { 0.0 } else { f32::MIN });
                }
            }
            gather.extend((0..n).map(|i| (u * width + i) as u32));
            offset += n;
        }
        Self {
            tokens,
            buckets: vec![bucket],
            gather,
        }
    }

    /// One part holding every token of a single row: the full (unmasked) attention of a plain
    /// encoder, for comparing with other implementations.
    pub fn full(tokens: usize) -> Self {
        let keys = round_up(tokens);
        let mut key_index: Vec<u32> = (0..tokens as u32).collect();
        key_index.resize(keys, 0);
        let mut key_bias = vec![0.0; tokens];
        key_bias.resize(keys, f32::MIN);
        Self {
            tokens,
            buckets: vec![BucketPlan {
                units: 1,
                queries: tokens,
                keys,
                query_index: (0..tokens as u32).collect(),
                key_index,
                key_bias,
                bias_rows: 1,
            }],
            gather: (0..tokens as u32).collect(),
        }
    }
}

fn pad(bucket: &mut BucketPlan, count: usize) {
    for _ in 0..count {
        bucket.key_index.push(0);
        bucket.key_bias.push(f32::MIN);
    }
}

// Masks are exact values (0 or f32::MIN), and exactness is what the tests check.
#[cfg(test)]
#[allow(clippy::float_cmp)]
mod tests {
    use super::*;
    use crate::pack::{Limits, QuestionTokens, Special, pack};

    const SPECIAL: Special = Special {
        cls: 101,
        sep: 102,
        mask: 103,
        pad: 0,
    };

    fn packed(state: usize, questions: &[(usize, &[usize])]) -> Packed {
        let questions: Vec<QuestionTokens> = questions
            .iter()
            .map(|(text, options)| QuestionTokens {
                text: vec![5; *text],
                options: options.iter().map(|&n| vec![6; n]).collect(),
            })
            .collect();
        pack(
            &vec![7; state],
            &questions,
            SPECIAL,
            Limits {
                max_positions: 512,
                max_tokens: 10_000,
                max_state_tokens: 10_000,
            },
        )
        .unwrap()
    }

    /// The keys each token sees under the plan, as sorted token indices.
    fn seen(plan: &LayoutPlan) -> Vec<Vec<u32>> {
        let mut rows = Vec::new();
        for bucket in &plan.buckets {
            for u in 0..bucket.units {
                for _ in 0..bucket.queries {
                    let keys = &bucket.key_index[u * bucket.keys..(u + 1) * bucket.keys];
                    let bias = &bucket.key_bias[u * bucket.keys..(u + 1) * bucket.keys];
                    let mut visible: Vec<u32> = keys
                        .iter()
                        .zip(bias)
                        .filter(|(_, b)| **b == 0.0)
                        .map(|(k, _)| *k)
                        .collect();
                    visible.sort_unstable();
                    rows.push(visible);
                }
            }
        }
        plan.gather
            .iter()
            .map(|&g| rows[g as usize].clone())
            .collect()
    }

    #[test]
    fn the_plan_is_the_three_dimensional_mask() {
        let a = packed(3, &[(2, &[1, 3]), (1, &[2, 2, 1])]);
        let b = packed(5, &[(4, &[1, 1])]);
        let plan = LayoutPlan::new(&[&a, &b]);
        assert_eq!(plan.tokens, a.len() + b.len());
        let offsets = [0, a.len()];
        let mut expected = Vec::new();
        for (row, offset) in [&a, &b].iter().zip(offsets) {
            for from in &row.segments {
                let visible: Vec<u32> = row
                    .segments
                    .iter()
                    .enumerate()
                    .filter(|(_, to)| from.sees(**to))
                    .map(|(j, _)| (offset + j) as u32)
                    .collect();
                expected.push(visible);
            }
        }
        assert_eq!(seen(&plan), expected);
    }

    #[test]
    fn halves_are_aligned_and_own_keys_follow_the_context() {
        let a = packed(40, &[(3, &[2, 5])]);
        let plan = LayoutPlan::new(&[&a]);
        for bucket in &plan.buckets {
            assert_eq!(bucket.keys % KEY_ALIGN, 0);
        }
        let options = &plan.buckets[2];
        // Context: 42 state tokens and 4 of the question, padded to 64; own keys from 64.
        assert_eq!(options.keys, 64 + 32);
        assert_eq!(options.key_bias[46], f32::MIN);
        assert_eq!(options.key_bias[64], 0.0);
        assert_eq!(options.key_index[64] as usize, a.slots[0][0]);
    }

    #[test]
    fn the_row_plan_is_the_same_mask() {
        let a = packed(3, &[(2, &[1, 3]), (1, &[2, 2, 1])]);
        let b = packed(5, &[(4, &[1, 1])]);
        let parts = LayoutPlan::new(&[&a, &b]);
        let rows = LayoutPlan::per_row(&[&a, &b]);
        let seen_rows = |plan: &LayoutPlan| -> Vec<Vec<u32>> {
            let bucket = &plan.buckets[0];
            plan.gather
                .iter()
                .map(|&g| {
                    let (u, i) = (g as usize / bucket.queries, g as usize % bucket.queries);
                    let bias =
                        &bucket.key_bias[(u * bucket.queries + i) * bucket.keys..][..bucket.keys];
                    let keys = &bucket.key_index[u * bucket.keys..(u + 1) * bucket.keys];
                    let mut visible: Vec<u32> = keys
                        .iter()
                        .zip(bias)
                        .filter(|(_, b)| **b == 0.0)
                        .map(|(k, _)| *k)
                        .collect();
                    visible.sort_unstable();
                    visible
                })
                .collect()
        };
        assert_eq!(seen_rows(&rows), seen(&parts));
    }

    #[test]
    fn the_full_plan_lets_every_token_see_every_token() {
        let plan = LayoutPlan::full(5);
        assert!(seen(&plan).iter().all(|keys| keys == &[0, 1, 2, 3, 4]));
    }
}
