//! The step loop both trainers run: batches from a resumable stream, a validation every
//! `eval_every` steps and at the end, the best weights kept by validation loss, the run state
//! saved at every validation, and progress on a bar (or a log line now and then when stderr is
//! not a terminal).
//!
//! What differs between the encoder and the LoRA trainer (what a step computes, how weights
//! are scored and written) is behind [`Trainer`]; the order of operations, which decides
//! whether a resumed run ends bit-identical to an uninterrupted one, is written once here.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use candle_core::Var;
use ruling_encoder::train::AdamW;

use crate::data;
use crate::state::{RunState, Saved, Validation, log_validation, progress};

/// What a trainer brings to the loop.
pub trait Trainer {
    /// The settings recorded in the run state.
    type Config;
    /// One optimiser step on a batch of training examples: its loss and its token count.
    fn step(&mut self, batch: &[usize], step: u64) -> anyhow::Result<(f64, usize)>;
    /// Score the validation side with the current weights.
    fn validate(&self, step: u64) -> anyhow::Result<Validation>;
    /// Write the current weights as the best so far.
    fn save_best(&self, state: &RunState<Self::Config>) -> anyhow::Result<()>;
    /// Save everything a resume needs (weights, optimiser moments, the state itself).
    fn save_state(&self, state: &RunState<Self::Config>) -> anyhow::Result<()>;
}

/// How the loop walks the data.
pub struct Plan<'a> {
    pub steps: u64,
    pub eval_every: u64,
    /// Each training example's length in tokens, for batches of similar lengths.
    pub lengths: &'a [usize],
    pub batch_tokens: usize,
    pub seed: u64,
}

/// A fresh run's state and optimiser for `vars`, or a saved run's, its weights put back into
/// `vars`.
pub fn start<C: Clone>(
    output: &Path,
    saved: Option<Saved<C>>,
    config: &C,
    vars: &[(String, Var)],
) -> anyhow::Result<(RunState<C>, AdamW)> {
    let Some(saved) = saved else {
        return Ok((RunState::new(config.clone()), AdamW::new(vars)?));
    };
    eprintln!(
        "resuming {} from step {}",
        output.display(),
        saved.state.step
    );
    for (name, var) in vars {
        let tensor = saved
            .weights
            .get(name)
            .with_context(|| format!("the saved run state lacks {name}"))?;
        var.set(tensor)?;
    }
    let optimiser = AdamW::restore(vars, &saved.optimiser, saved.state.step)?;
    Ok((saved.state, optimiser))
}

/// Steps between progress lines when stderr is not a terminal.
const LOG_EVERY: u64 = 10;

/// Run the steps left in `state` (none for a finished run), starting with a validation at
/// step 0 for a fresh run.
pub fn run<T: Trainer>(
    trainer: &mut T,
    state: &mut RunState<T::Config>,
    plan: &Plan<'_>,
) -> anyhow::Result<()> {
    if state.history.is_empty() {
        let first = trainer.validate(0)?;
        log_validation(&first);
        state.best_loss = first.loss;
        state.history.push(first);
        trainer.save_best(state)?;
        trainer.save_state(state)?;
    }
    let mut stream = Stream::new(plan, state.epoch);
    let bar = progress(plan.steps, state.step);
    let mut window = Window::new();
    while state.step < plan.steps {
        let step = state.step + 1;
        let batch = stream.next(&mut state.epoch, &mut state.cursor);
        let (loss, tokens) = trainer.step(&batch, step)?;
        state.step = step;
        state.tokens_seen += tokens as u64;
        window.push(loss, tokens);
        bar.set_position(step);
        bar.set_message(format!(
            "loss {:.3}  {:.0} tok/s",
            window.mean_loss(),
            window.rate()
        ));
        if bar.is_hidden() && step.is_multiple_of(LOG_EVERY) {
            // No terminal to draw a bar on (a log file): a line now and then instead.
            eprintln!(
                "step {step:>5}/{}: train loss {:.4}, {:.0} tokens/s, about {} left",
                plan.steps,
                window.mean_loss(),
                window.rate(),
                humantime::format_duration(window.time_left(plan.steps - step))
            );
        }
        if step.is_multiple_of(plan.eval_every) || step == plan.steps {
            let mut entry = trainer.validate(step)?;
            entry.train_loss = Some(window.mean_loss());
            entry.tokens_per_second = Some(window.rate());
            bar.suspend(|| log_validation(&entry));
            let better = entry.loss < state.best_loss;
            state.history.push(entry);
            if better {
                state.best_loss = state.history[state.history.len() - 1].loss;
                state.best_step = step;
                trainer.save_best(state)?;
            }
            trainer.save_state(state)?;
            window = Window::new();
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// The run's endless sequence of batches: one shuffled, length-grouped pass over the training
/// examples per epoch, so `(epoch, cursor)` is all a resume needs to continue it.
struct Stream<'a> {
    plan: &'a Plan<'a>,
    batches: Vec<Vec<usize>>,
}

impl<'a> Stream<'a> {
    fn new(plan: &'a Plan<'a>, epoch: u64) -> Self {
        Self {
            plan,
            batches: Self::epoch(plan, epoch),
        }
    }

    fn epoch(plan: &Plan<'_>, epoch: u64) -> Vec<Vec<usize>> {
        data::epoch_batches(plan.lengths, plan.seed, epoch, plan.batch_tokens)
    }

    fn next(&mut self, epoch: &mut u64, cursor: &mut usize) -> Vec<usize> {
        if *cursor >= self.batches.len() {
            *epoch += 1;
            *cursor = 0;
            self.batches = Self::epoch(self.plan, *epoch);
        }
        let batch = self.batches[*cursor].clone();
        *cursor += 1;
        batch
    }
}

/// Losses and throughput since the last validation.
struct Window {
    losses: Vec<f64>,
    tokens: usize,
    started: Instant,
}

impl Window {
    fn new() -> Self {
        Self {
            losses: Vec::new(),
            tokens: 0,
            started: Instant::now(),
        }
    }

    fn push(&mut self, loss: f64, tokens: usize) {
        self.losses.push(loss);
        self.tokens += tokens;
    }

    fn mean_loss(&self) -> f64 {
        self.losses.iter().sum::<f64>() / self.losses.len().max(1) as f64
    }

    /// Tokens per second.
    fn rate(&self) -> f64 {
        self.tokens as f64 / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    /// At this window's pace, how long `steps` more would take.
    fn time_left(&self, steps: u64) -> Duration {
        let per_step = self.started.elapsed().as_secs_f64() / self.losses.len().max(1) as f64;
        Duration::from_secs((per_step * steps as f64) as u64)
    }
}
