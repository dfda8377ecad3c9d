//! The LoRA trainer's loss over a batch of code logits.
//!
//! Cross-entropy between the model's distribution over each question's shown codes and the
//! target (soft where raters disagreed), which is a proper scoring rule, so its minimum is the
//! true probability. Three terms are off by default: label smoothing (a share of the uniform
//! distribution mixed into the target), a Brier term (squared distance between the predicted
//! and target distributions, gentler than log loss on confident errors), and a
//! confidence-ranking term that penalises, within the batch, every wrong answer given more
//! confidently than a right one (the ordering coverage at a fixed error rate depends on, which
//! no temperature can change).

use candle_core::{D, Device, Tensor};
use ruling_calibration::argmax_or_first;

/// The optional terms and their weights.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Terms {
    pub label_smoothing: f64,
    pub brier_weight: f64,
    pub ranking_weight: f64,
    pub ranking_margin: f64,
}

/// One batch's targets: per row its option count, its target over the shown order (padded
/// with zeros to the batch's widest question) and its weight.
#[derive(Debug, Clone)]
pub struct Targets {
    pub counts: Vec<usize>,
    pub targets: Vec<Vec<f32>>,
    pub weights: Vec<f32>,
}

/// An additive mask hiding each row's codes beyond its option count. A large finite value,
/// not -inf, so a zero target times a hidden log-probability is zero rather than NaN.
fn hidden(counts: &[usize], width: usize, device: &Device) -> candle_core::Result<Tensor> {
    let mask: Vec<f32> = counts
        .iter()
        .flat_map(|&n| (0..width).map(move |i| if i < n { 0.0 } else { -1e9 }))
        .collect();
    Tensor::from_vec(mask, (counts.len(), width), device)
}

/// Log-probabilities over each row's shown codes, `(rows, width)`; hidden codes get about
/// -1e9.
pub fn log_probs(logits: &Tensor, counts: &[usize]) -> candle_core::Result<Tensor> {
    let (_, width) = logits.dims2()?;
    let masked = logits.broadcast_add(&hidden(counts, width, logits.device())?)?;
    candle_nn::ops::log_softmax(&masked, D::Minus1)
}

fn matrix(rows: &[Vec<f32>], width: usize, device: &Device) -> candle_core::Result<Tensor> {
    let flat: Vec<f32> = rows
        .iter()
        .flat_map(|r| (0..width).map(move |i| r.get(i).copied().unwrap_or(0.0)))
        .collect();
    Tensor::from_vec(flat, (rows.len(), width), device)
}

/// Per-row cross-entropy against the plain targets (what validation reports).
pub fn cross_entropy(log_probs: &Tensor, batch: &Targets) -> candle_core::Result<Tensor> {
    let (_, width) = log_probs.dims2()?;
    let t = matrix(&batch.targets, width, log_probs.device())?;
    (t * log_probs)?.sum(1)?.neg()
}

/// The batch's loss: the weighted mean of the per-row terms, plus the ranking term.
pub fn loss(logits: &Tensor, batch: &Targets, terms: &Terms) -> candle_core::Result<Tensor> {
    let device = logits.device();
    let (rows, width) = logits.dims2()?;
    let lp = log_probs(logits, &batch.counts)?;
    let eps = terms.label_smoothing;
    let smoothed: Vec<Vec<f32>> = batch
        .targets
        .iter()
        .zip(&batch.counts)
        .map(|(t, &n)| {
            t.iter()
                .take(n)
                .map(|&p| ((1.0 - eps) * f64::from(p) + eps / n as f64) as f32)
                .collect()
        })
        .collect();
    let weights = Tensor::from_vec(batch.weights.clone(), rows, device)?;
    let total_weight = f64::from(batch.weights.iter().sum::<f32>()).max(1e-12);
    let weighted_mean = |per_row: Tensor| -> candle_core::Result<Tensor> {
        (per_row * &weights)?.sum_all()? / total_weight
    };
    let ce = (matrix(&smoothed, width, device)? * &lp)?.sum(1)?.neg()?;
    let mut total = weighted_mean(ce)?;
    if terms.brier_weight == 0.0 && terms.ranking_weight == 0.0 {
        return Ok(total);
    }
    let probs = lp.exp()?;
    let targets = matrix(&batch.targets, width, device)?;
    if terms.brier_weight != 0.0 {
        let brier = (probs.clone() - &targets)?.sqr()?.sum(1)?;
        total = (total + (weighted_mean(brier)? * terms.brier_weight)?)?;
    }
    if terms.ranking_weight != 0.0 {
        let host: Vec<Vec<f32>> = probs.to_vec2()?;
        let right: Vec<bool> = host
            .iter()
            .zip(&batch.targets)
            .zip(&batch.counts)
            .map(|((p, t), &n)| argmax_or_first(&p[..n]) == argmax_or_first(&t[..n]))
            .collect();
        // pairs[i][j]: answer i is wrong and answer j is right.
        let pairs: Vec<f32> = (0..rows)
            .flat_map(|i| {
                let right = &right;
                (0..rows).map(move |j| f32::from(u8::from(!right[i] && right[j])))
            })
            .collect();
        let count = f64::from(pairs.iter().sum::<f32>()).max(1.0);
        let pairs = Tensor::from_vec(pairs, (rows, rows), device)?;
        let confidence = probs.max(1)?;
        let gap = confidence
            .unsqueeze(1)?
            .broadcast_sub(&confidence.unsqueeze(0)?)?;
        let violations = ((gap + terms.ranking_margin)?.relu()? * pairs)?.sum_all()?;
        total = (total + ((violations / count)? * terms.ranking_weight)?)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Targets {
        Targets {
            counts: vec![2, 3],
            targets: vec![vec![1.0, 0.0, 0.0], vec![0.2, 0.0, 0.8]],
            weights: vec![1.0, 3.0],
        }
    }

    fn logits() -> Tensor {
        Tensor::new(&[[2.0f32, 0.5, 9.0], [0.1, 1.0, -0.3]], &Device::Cpu).unwrap()
    }

    #[test]
    fn the_cross_entropy_reads_only_shown_codes_and_weighs_rows() {
        let loss = loss(&logits(), &batch(), &Terms::default())
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let lse = |xs: &[f64]| xs.iter().map(|x| x.exp()).sum::<f64>().ln();
        let row0 = -(2.0 - lse(&[2.0, 0.5]));
        let z1 = lse(&[0.1, 1.0, -0.3]);
        let row1 = -(0.2 * (0.1 - z1) + 0.8 * (-0.3 - z1));
        let expected = (row0 + 3.0 * row1) / 4.0;
        assert!(
            (f64::from(loss) - expected).abs() < 1e-5,
            "{loss} vs {expected}"
        );
    }

    #[test]
    fn every_term_adds_and_is_finite() {
        let plain = loss(&logits(), &batch(), &Terms::default())
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let all = Terms {
            label_smoothing: 0.1,
            brier_weight: 1.0,
            ranking_weight: 1.0,
            ranking_margin: 0.05,
        };
        let with = loss(&logits(), &batch(), &all)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(
            with.is_finite() && (with - plain).abs() > 1e-4,
            "{with} vs {plain}"
        );
    }
}
