//! Stopping work nobody waits for: a handle the caller of an evaluation keeps, and the
//! engine and backend look at between forward passes.
//!
//! A server's request has a deadline and a client that may hang up; either way the answer
//! would be thrown away, so the worker should be free for the next request as soon as one
//! forward pass ends rather than when the whole evaluation does. The handle is cheap to clone
//! and may cross threads (the llama backend scores on its own worker threads).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::BackendError;

/// Why an evaluation stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// [`Cancel::cancel`] was called: the caller no longer wants the answer.
    Cancelled,
    /// The deadline the handle was made with has passed.
    DeadlinePassed,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Cancelled => "the caller cancelled it",
            Self::DeadlinePassed => "its deadline passed",
        })
    }
}

/// Whether an evaluation should go on. [`Cancel::never`] never stops one.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    deadline: Option<Instant>,
    /// The whole time the caller allows the work, queueing included (a server's per-request
    /// timeout): what an engine compares its estimate of a request's cost with.
    allowed: Option<Duration>,
}

impl Cancel {
    /// A handle that stops only when [`cancel`](Self::cancel) is called on it or a clone.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle nothing will cancel: what [`crate::Engine::evaluate`] passes.
    pub fn never() -> Self {
        Self::default()
    }

    /// A handle that also stops once `deadline` has passed.
    pub fn with_deadline(deadline: Instant) -> Self {
        Self {
            deadline: Some(deadline),
            ..Self::default()
        }
    }

    /// The same handle, recording that the caller allows the work `total` in all (of which the
    /// deadline is what is left): an engine refuses up front a request it estimates to need
    /// well over that, since it could never be answered in time.
    pub fn allowing(mut self, total: Duration) -> Self {
        self.allowed = Some(total);
        self
    }

    /// The whole time the caller allows, when it said.
    pub fn allowed(&self) -> Option<Duration> {
        self.allowed
    }

    /// Ask every holder of this handle (and its clones) to stop.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Release);
    }

    /// Why the work should stop, or `None` to go on.
    pub fn stopped(&self) -> Option<Stopped> {
        if self.flag.load(Ordering::Acquire) {
            Some(Stopped::Cancelled)
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(Stopped::DeadlinePassed)
        } else {
            None
        }
    }

    /// `Err(BackendError::Stopped)` when the work should stop: for use with `?` before a
    /// forward pass.
    pub fn check(&self) -> Result<(), BackendError> {
        match self.stopped() {
            Some(why) => Err(BackendError::Stopped(why)),
            None => Ok(()),
        }
    }

    /// A guard that cancels this handle when dropped: a request handler holds one, so a
    /// client that disconnects (and drops the handler with its connection) stops the work.
    pub fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Cancels its handle when dropped (see [`Cancel::cancel_on_drop`]).
#[derive(Debug)]
#[must_use = "the handle is cancelled as soon as the guard is dropped"]
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_clone_sees_the_cancel_and_the_guard_cancels_on_drop() {
        let cancel = Cancel::new();
        let held = cancel.clone();
        assert_eq!(held.stopped(), None);
        assert!(held.check().is_ok());
        drop(cancel.cancel_on_drop());
        assert_eq!(held.stopped(), Some(Stopped::Cancelled));
        assert!(matches!(
            held.check(),
            Err(BackendError::Stopped(Stopped::Cancelled))
        ));
    }

    #[test]
    fn a_deadline_stops_once_passed_and_never_never_does() {
        let past = Cancel::with_deadline(Instant::now());
        assert_eq!(past.stopped(), Some(Stopped::DeadlinePassed));
        let future = Cancel::with_deadline(Instant::now() + Duration::from_secs(60));
        assert_eq!(future.stopped(), None);
        assert_eq!(Cancel::never().stopped(), None);
    }
}
