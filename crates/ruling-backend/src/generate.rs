//! Text generation: the [`Generator`] port and the sampling every backend shares.
//!
//! Answering never generates; writers do (distillation writes a teacher's reasoning before it
//! reads the answer). A backend only runs the forward passes: it feeds each prompt, hands every
//! next-token row of logits to a [`Decoding`], and feeds back the token it picks. The sampling
//! (temperature, nucleus, seeded per prompt) and the stopping rules live here, once, so both
//! decoder backends pick the same token from the same logits, and a prompt's text depends only
//! on the prompt, the settings and its position in the call, never on what it is batched with.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ruling_schema::capacity::CONTEXT;

use crate::error::BackendError;

/// How to pick each next token and when to stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Divides the logits before the softmax; 0 picks the most likely token every time.
    pub temperature: f32,
    /// Nucleus sampling: draw only from the most likely tokens whose probabilities add up to
    /// at least this much (1 keeps the whole vocabulary).
    pub top_p: f32,
    /// Seeds the draws. Prompt `i` of a call draws from stream `i` of this seed, so the same
    /// call gives the same texts every time, however the backend batches it.
    pub seed: u64,
    /// Tokens written per prompt at most (the end-of-turn token not counted).
    pub max_tokens: usize,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
            max_tokens: 256,
        }
    }
}

impl Sampling {
    /// Refuse settings that cannot sample, naming the one that is wrong and what is allowed.
    pub fn check(&self) -> Result<(), BackendError> {
        let wrong = |reason: String| Err(BackendError::InvalidSampling { reason });
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return wrong(format!(
                "temperature {} must be a finite number >= 0 (0 picks the most likely token)",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return wrong(format!(
                "top_p {} must be in (0, 1] (1 keeps the whole vocabulary)",
                self.top_p
            ));
        }
        if self.max_tokens == 0 {
            return wrong("max_tokens must be at least 1".into());
        }
        Ok(())
    }
}

/// Why a prompt's generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model wrote an end token (end of turn or end of text), not included in the tokens.
    Stop,
    /// `max_tokens` were written, or the context window filled up.
    Length,
}

/// What one prompt produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The tokens written after the prompt, without the end token.
    pub tokens: Vec<u32>,
    pub finish: Finish,
}

/// A decoder that can write: the port the distillation writer uses.
pub trait Generator: Send + Sync {
    /// Continue every prompt (token ids, usually a rendered chat with the assistant's turn
    /// open) until it writes an end token or `sampling.max_tokens`, returning one generation
    /// per prompt in the order given. Deterministic for a fixed `sampling.seed`.
    fn generate(
        &self,
        prompts: &[&[u32]],
        sampling: &Sampling,
    ) -> Result<Vec<Generation>, BackendError>;

    /// The tokens that end a generation: the model's end of text and its template's end of
    /// turn.
    fn end_tokens(&self) -> &[u32];

    /// The text of generated tokens.
    fn decode(&self, tokens: &[u32]) -> Result<String, BackendError>;
}

/// The port's preconditions on prompts, checked before any forward pass: each prompt has a
/// token, leaves room in the context to write one more, and holds only ids inside the
/// vocabulary.
pub fn check_prompts(
    prompts: &[&[u32]],
    context_length: usize,
    vocab: usize,
) -> Result<(), BackendError> {
    for (index, prompt) in prompts.iter().enumerate() {
        let wrong = |reason: String| {
            Err(BackendError::InvalidPrompt {
                prompt: index,
                reason,
            })
        };
        if prompt.is_empty() {
            return wrong("a prompt needs at least one token".into());
        }
        if prompt.len() >= context_length {
            return wrong(format!(
                "{} tokens leave no room to write in the {CONTEXT} of {context_length}",
                prompt.len()
            ));
        }
        if let Some(id) = prompt.iter().find(|&&id| id as usize >= vocab) {
            return wrong(format!(
                "token id {id} is outside the vocabulary of {vocab}"
            ));
        }
    }
    Ok(())
}

/// The per-prompt state of one [`Generator::generate`] call: what each prompt has written,
/// its random stream, and whether it is done. Backends drive it row by row.
#[derive(Debug)]
pub struct Decoding {
    sampling: Sampling,
    end_tokens: Vec<u32>,
    rows: Vec<Row>,
}

#[derive(Debug)]
struct Row {
    rng: ChaCha8Rng,
    tokens: Vec<u32>,
    finish: Option<Finish>,
}

impl Decoding {
    /// State for `prompts` prompts; refuses unusable settings.
    pub fn new(
        prompts: usize,
        sampling: &Sampling,
        end_tokens: &[u32],
    ) -> Result<Self, BackendError> {
        sampling.check()?;
        let rows = (0..prompts)
            .map(|index| {
                let mut rng = ChaCha8Rng::seed_from_u64(sampling.seed);
                rng.set_stream(index as u64);
                Row {
                    rng,
                    tokens: Vec::new(),
                    finish: None,
                }
            })
            .collect();
        Ok(Self {
            sampling: *sampling,
            end_tokens: end_tokens.to_vec(),
            rows,
        })
    }

    /// Whether prompt `row` still writes.
    pub fn is_active(&self, row: usize) -> bool {
        self.rows[row].finish.is_none()
    }

    /// Whether any prompt still writes.
    pub fn any_active(&self) -> bool {
        self.rows.iter().any(|r| r.finish.is_none())
    }

    /// Tokens prompt `row` has written so far.
    pub fn written(&self, row: usize) -> usize {
        self.rows[row].tokens.len()
    }

    /// Pick prompt `row`'s next token from the logits that predict it. Returns the token to
    /// feed back, or `None` once the prompt is done (an end token, or `max_tokens` reached).
    pub fn push(&mut self, row: usize, logits: &[f32]) -> Option<u32> {
        let sampling = self.sampling;
        let state = &mut self.rows[row];
        if state.finish.is_some() {
            return None;
        }
        let token = sample(logits, sampling.temperature, sampling.top_p, &mut state.rng);
        if self.end_tokens.contains(&token) {
            state.finish = Some(Finish::Stop);
            return None;
        }
        state.tokens.push(token);
        if state.tokens.len() >= sampling.max_tokens {
            state.finish = Some(Finish::Length);
            return None;
        }
        Some(token)
    }

    /// End prompt `row` because its context is full.
    pub fn stop_for_length(&mut self, row: usize) {
        let state = &mut self.rows[row];
        state.finish.get_or_insert(Finish::Length);
    }

    /// Every prompt's generation, in order.
    pub fn finish(self) -> Vec<Generation> {
        self.rows
            .into_iter()
            .map(|row| Generation {
                tokens: row.tokens,
                finish: row.finish.unwrap_or(Finish::Length),
            })
            .collect()
    }
}

/// Weights below this share of the most likely token's are left out of a draw: at most a
/// 150K vocabulary times this (under 1e-7) of the mass, and it spares sorting the whole
/// vocabulary for the nucleus at every step.
const NEGLIGIBLE: f64 = 1e-12;

/// One token from a row of logits: the most likely (lowest id on a tie) at temperature 0,
/// otherwise a draw from the tempered softmax restricted to the nucleus.
pub fn sample(logits: &[f32], temperature: f32, top_p: f32, rng: &mut impl Rng) -> u32 {
    let mut best = 0usize;
    for (index, &logit) in logits.iter().enumerate() {
        if logit > logits[best] {
            best = index;
        }
    }
    if temperature == 0.0 || logits.len() < 2 {
        return best as u32;
    }
    let max = f64::from(logits[best]);
    let t = f64::from(temperature);
    let mut weighted: Vec<(f64, u32)> = logits
        .iter()
        .enumerate()
        .filter_map(|(index, &logit)| {
            let w = ((f64::from(logit) - max) / t).exp();
            (w >= NEGLIGIBLE).then_some((w, index as u32))
        })
        .collect();
    if top_p < 1.0 {
        weighted.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let total: f64 = weighted.iter().map(|w| w.0).sum();
        let goal = total * f64::from(top_p);
        let mut running = 0.0;
        let mut keep = weighted.len();
        for (index, (w, _)) in weighted.iter().enumerate() {
            running += w;
            if running >= goal {
                keep = index + 1;
                break;
            }
        }
        weighted.truncate(keep);
    }
    let total: f64 = weighted.iter().map(|w| w.0).sum();
    let mut point = rng.random::<f64>() * total;
    for &(w, token) in &weighted {
        if point < w {
            return token;
        }
        point -= w;
    }
    weighted.last().map_or(best as u32, |w| w.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(seed)
    }

    #[test]
    fn temperature_zero_is_the_argmax_with_the_lowest_id_on_ties() {
        assert_eq!(sample(&[0.1, 2.0, 2.0, -1.0], 0.0, 1.0, &mut rng(0)), 1);
    }

    #[test]
    fn a_tiny_nucleus_keeps_only_the_most_likely_token() {
        for seed in 0..50 {
            assert_eq!(sample(&[0.0, 3.0, 2.9, 1.0], 1.0, 0.01, &mut rng(seed)), 1);
        }
    }

    #[test]
    fn draws_follow_the_tempered_softmax() {
        // Logits ln(1), ln(3): at temperature 1 the second token is drawn 3/4 of the time.
        let logits = [0.0f32, 3.0f32.ln()];
        let mut r = rng(7);
        let n = 20_000;
        let hits = (0..n)
            .filter(|_| sample(&logits, 1.0, 1.0, &mut r) == 1)
            .count();
        let share = hits as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.02, "share {share}");
        // At temperature 0.5 the odds square: 9/10.
        let hits = (0..n)
            .filter(|_| sample(&logits, 0.5, 1.0, &mut r) == 1)
            .count();
        let share = hits as f64 / n as f64;
        assert!((share - 0.9).abs() < 0.02, "share {share}");
    }

    #[test]
    fn decoding_stops_at_an_end_token_or_the_limit() {
        let sampling = Sampling {
            max_tokens: 3,
            ..Sampling::default()
        };
        let mut decoding = Decoding::new(2, &sampling, &[9]).unwrap();
        let mut row = [0.0f32; 10];
        row[4] = 1.0;
        assert_eq!(decoding.push(0, &row), Some(4));
        row[9] = 2.0;
        assert_eq!(decoding.push(0, &row), None);
        assert!(!decoding.is_active(0));
        row[9] = 0.0;
        assert_eq!(decoding.push(1, &row), Some(4));
        assert_eq!(decoding.push(1, &row), Some(4));
        assert_eq!(decoding.push(1, &row), None);
        let out = decoding.finish();
        assert_eq!(out[0].tokens, vec![4]);
        assert_eq!(out[0].finish, Finish::Stop);
        assert_eq!(out[1].tokens, vec![4, 4, 4]);
        assert_eq!(out[1].finish, Finish::Length);
    }

    #[test]
    fn each_prompt_draws_from_its_own_stream() {
        let sampling = Sampling {
            temperature: 1.0,
            seed: 11,
            ..Sampling::default()
        };
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let draws = |rows: usize, row: usize| {
            let mut decoding = Decoding::new(rows, &sampling, &[]).unwrap();
            (0..20)
                .map(|_| decoding.push(row, &logits).unwrap())
                .collect::<Vec<_>>()
        };
        // Prompt 1 writes the same whether the call holds 2 prompts or 5.
        assert_eq!(draws(2, 1), draws(5, 1));
        assert_ne!(draws(2, 0), draws(2, 1));
    }

    #[test]
    fn bad_settings_are_refused_with_what_is_allowed() {
        for (sampling, needle) in [
            (
                Sampling {
                    temperature: -1.0,
                    ..Sampling::default()
                },
                "temperature",
            ),
            (
                Sampling {
                    top_p: 0.0,
                    ..Sampling::default()
                },
                "top_p 0 must be in (0, 1]",
            ),
            (
                Sampling {
                    max_tokens: 0,
                    ..Sampling::default()
                },
                "max_tokens",
            ),
        ] {
            let err = sampling.check().unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }
}
