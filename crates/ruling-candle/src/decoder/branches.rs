//! Scoring many branches against one encoded prefix: branches sorted by length, grouped so each
//! forward pass fits a [`BranchBudget`], and laid out as padded rows or one packed row.

use candle_core::Tensor;

use super::mask::Block;
use super::{Decoder, KvCache};

/// How branches are laid out for one forward pass (measured in `docs/decoder.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BranchLayout {
    /// One batch row per branch, padded to the longest branch of its group.
    #[default]
    Rows,
    /// All branches of a group end to end in one row, with a block-diagonal causal mask.
    Packed,
}

/// Limits on one forward pass over branches.
#[derive(Debug, Clone, Copy)]
pub struct BranchBudget {
    /// Most query tokens (padding included) in one pass.
    pub max_tokens: usize,
    /// Most attention-score bytes (queries x (prefix + own keys) x heads x 4) in one pass.
    pub max_score_bytes: usize,
}

impl Default for BranchBudget {
    fn default() -> Self {
        Self {
            max_tokens: 4096,
            max_score_bytes: 256 << 20,
        }
    }
}

/// One branch's result: the logits of its codes and the log-normaliser over the vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeLogits {
    pub logits: Vec<f32>,
    pub log_normalizer: f32,
}

impl Decoder {
    /// Score each branch as a continuation of `cache`, reading `codes[i]` at the last token of
    /// branch `i`. Branches are grouped by length under `budget`.
    pub fn score_branches(
        &self,
        cache: &KvCache,
        branches: &[(&[u32], &[u32])],
        layout: BranchLayout,
        budget: BranchBudget,
    ) -> candle_core::Result<Vec<CodeLogits>> {
        let mut order: Vec<usize> = (0..branches.len()).collect();
        order.sort_by_key(|&i| branches[i].0.len());
        let mut results: Vec<Option<CodeLogits>> = vec![None; branches.len()];
        for group in self.groups(cache.len, &order, branches, layout, budget) {
            let scored = self.score_group(cache, &group, branches, layout)?;
            for (index, result) in group.into_iter().zip(scored) {
                results[index] = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| r.ok_or_else(|| candle_core::Error::Msg("branch left unscored".into())))
            .collect()
    }

    /// Consecutive runs of the length-sorted branches whose forward pass fits the budget.
    fn groups(
        &self,
        prefix: usize,
        order: &[usize],
        branches: &[(&[u32], &[u32])],
        layout: BranchLayout,
        budget: BranchBudget,
    ) -> Vec<Vec<usize>> {
        let heads = self.config.num_heads;
        let cost = |group: &[usize]| -> (usize, usize) {
            let longest = group
                .iter()
                .map(|&i| branches[i].0.len())
                .max()
                .unwrap_or(0);
            let total: usize = group.iter().map(|&i| branches[i].0.len()).sum();
            match layout {
                BranchLayout::Rows => {
                    let tokens = group.len() * longest;
                    (tokens, tokens * (prefix + longest) * heads * 4)
                }
                BranchLayout::Packed => (total, total * (prefix + total) * heads * 4),
            }
        };
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &index in order {
            match groups.last_mut() {
                Some(group) => {
                    group.push(index);
                    let (tokens, bytes) = cost(group);
                    if group.len() > 1
                        && (tokens > budget.max_tokens || bytes > budget.max_score_bytes)
                    {
                        group.pop();
                        groups.push(vec![index]);
                    }
                }
                None => groups.push(vec![index]),
            }
        }
        groups
    }

    fn score_group(
        &self,
        cache: &KvCache,
        group: &[usize],
        branches: &[(&[u32], &[u32])],
        layout: BranchLayout,
    ) -> candle_core::Result<Vec<CodeLogits>> {
        let start = cache.len;
        let (block, answer_rows) = match layout {
            BranchLayout::Rows => {
                let width = group
                    .iter()
                    .map(|&i| branches[i].0.len())
                    .max()
                    .unwrap_or(0);
                let pad = branches[group[0]].0.last().copied().unwrap_or(0);
                let mut tokens = Vec::with_capacity(group.len() * width);
                let mut answers = Vec::with_capacity(group.len());
                for (row, &i) in group.iter().enumerate() {
                    let branch = branches[i].0;
                    tokens.extend_from_slice(branch);
                    tokens.extend(std::iter::repeat_n(pad, width - branch.len()));
                    answers.push((row * width + branch.len() - 1) as u32);
                }
                let block = Block {
                    tokens: Tensor::from_vec(tokens, group.len() * width, &self.device)?,
                    rows: group.len(),
                    width,
                    positions: (start..start + width).collect(),
                    segments: vec![0; width],
                };
                (block, answers)
            }
            BranchLayout::Packed => {
                let mut tokens = Vec::new();
                let mut positions = Vec::new();
                let mut segments = Vec::new();
                let mut answers = Vec::with_capacity(group.len());
                for (segment, &i) in group.iter().enumerate() {
                    let branch = branches[i].0;
                    tokens.extend_from_slice(branch);
                    positions.extend(start..start + branch.len());
                    segments.extend(std::iter::repeat_n(segment, branch.len()));
                    answers.push((tokens.len() - 1) as u32);
                }
                let width = tokens.len();
                let block = Block {
                    tokens: Tensor::from_vec(tokens, width, &self.device)?,
                    rows: 1,
                    width,
                    positions,
                    segments,
                };
                (block, answers)
            }
        };
        let longest = group
            .iter()
            .map(|&i| branches[i].0.len())
            .max()
            .unwrap_or(0);
        self.check_positions(start + longest)?;
        let (hidden, _) = self.run(cache, &block, false)?;
        let answers = Tensor::from_vec(answer_rows, group.len(), &self.device)?;
        let picked = hidden.index_select(&answers, 0)?;
        let logits = self.head_logits(&picked)?.to_vec2::<f32>()?;
        Ok(group
            .iter()
            .zip(logits)
            .map(|(&i, row)| read_codes(&row, branches[i].1))
            .collect())
    }
}

/// The log-normaliser of a full-vocabulary row and the logits of the requested codes.
pub(super) fn read_codes(row: &[f32], codes: &[u32]) -> CodeLogits {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&x| f64::from(x - max).exp()).sum();
    CodeLogits {
        logits: codes
            .iter()
            .map(|&c| row.get(c as usize).copied().unwrap_or(f32::NEG_INFINITY))
            .collect(),
        log_normalizer: (f64::from(max) + sum.ln()) as f32,
    }
}
