//! The query block of one forward pass and its additive attention masks (causal, per packed
//! sequence, and sliding-window over the prefix).

use candle_core::Tensor;

use super::Decoder;

/// A block of query tokens run through the model together, against an optional prefix.
///
/// `rows` rows of `width` tokens each, laid out row-major. Every row continues the same prefix
/// at the same position (so all rows share one rotary table slice); within a row, `segments`
/// says which tokens belong to one sequence (a packed row holds several branches end to end).
#[derive(Debug)]
pub(super) struct Block {
    pub(super) tokens: Tensor,
    pub(super) rows: usize,
    pub(super) width: usize,
    /// Absolute position of each token of a row.
    pub(super) positions: Vec<usize>,
    /// Sequence id of each token of a row: tokens attend only within their own sequence.
    pub(super) segments: Vec<usize>,
}

/// Additive masks for one block: over its own keys `(g*width, width)`, and over the prefix
/// `(g*width, prefix)` when a sliding window hides part of it.
#[derive(Debug)]
pub(super) struct Masks {
    pub(super) own: Tensor,
    pub(super) prefix: Option<Tensor>,
}

#[derive(Debug, Default)]
pub(super) struct MaskCache {
    built: Vec<(Option<usize>, Masks)>,
}

impl MaskCache {
    pub(super) fn get(
        &mut self,
        decoder: &Decoder,
        block: &Block,
        prefix: usize,
        window: Option<usize>,
    ) -> candle_core::Result<&Masks> {
        if let Some(index) = self.built.iter().position(|(w, _)| *w == window) {
            return Ok(&self.built[index].1);
        }
        let masks = build_masks(decoder, block, prefix, window)?;
        self.built.push((window, masks));
        Ok(&self.built[self.built.len() - 1].1)
    }
}

fn build_masks(
    decoder: &Decoder,
    block: &Block,
    prefix: usize,
    window: Option<usize>,
) -> candle_core::Result<Masks> {
    let g = decoder.config.num_heads / decoder.config.num_kv_heads;
    let l = block.width;
    let visible = |query: usize, key: usize| window.is_none_or(|w| query - key < w);
    let mut own = Vec::with_capacity(l * l);
    for r in 0..l {
        for col in 0..l {
            let ok = col <= r
                && block.segments[col] == block.segments[r]
                && visible(block.positions[r], block.positions[col]);
            own.push(if ok { 0f32 } else { f32::NEG_INFINITY });
        }
    }
    let own = Tensor::from_vec(own, (1, l, l), &decoder.device)?
        .repeat((g, 1, 1))?
        .reshape((g * l, l))?;
    let hides_prefix =
        window.is_some_and(|w| prefix > 0 && block.positions.iter().any(|&p| p >= w));
    let prefix_mask = if hides_prefix {
        let mut mask = Vec::with_capacity(l * prefix);
        for r in 0..l {
            for key in 0..prefix {
                mask.push(if visible(block.positions[r], key) {
                    0f32
                } else {
                    f32::NEG_INFINITY
                });
            }
        }
        Some(
            Tensor::from_vec(mask, (1, l, prefix), &decoder.device)?
                .repeat((g, 1, 1))?
                .reshape((g * l, prefix))?,
        )
    } else {
        None
    };
    Ok(Masks {
        own,
        prefix: prefix_mask,
    })
}
