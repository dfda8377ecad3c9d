//! The engine's worker threads and the bounded queue in front of them.
//!
//! Answering a request is blocking CPU work of 0.1 to 10 s, so it runs on dedicated std
//! threads, never on the async runtime. Handlers admit a request without blocking and await the
//! answer on a oneshot. Admission counts the jobs in the system (waiting or running): a job is
//! admitted while that count is under `workers + bound`, and a full system is a 429 at once. A
//! zero bound therefore admits exactly when a worker has no job, whether or not that worker's
//! thread has reached its `recv` yet (a rendezvous channel would refuse it in that instant).
//! One pool answers for every served model: a job carries the model (the base or an adapter
//! over it) that answers it, so switching between adapters costs nothing beyond their own
//! forward passes. A worker that takes a request whose handler has gone (the
//! client disconnected, or the per-request timeout fired and dropped the receiver) or whose
//! deadline has passed drops it unstarted; one that is answering when either happens stops
//! at the end of the forward pass it is in (the job's [`Cancel`], which the handler cancels
//! when it is dropped). Closing the queue lets the workers finish what is queued and then
//! exit.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ruling_core::{Cancel, CoreError, Ruling};
use ruling_schema::{SystemOneResponse, ValidRequest};
use tokio::sync::oneshot;

use crate::metrics::Metrics;

/// One admitted request.
#[derive(Debug)]
pub(crate) struct Job {
    /// The model the request asked for.
    pub model: Arc<Ruling>,
    pub request: ValidRequest,
    pub request_id: String,
    pub deadline: Instant,
    /// Cancelled when the handler goes, and past its deadline with the job's.
    pub cancel: Cancel,
    pub reply: oneshot::Sender<Outcome>,
}

/// A worker's answer.
pub(crate) type Outcome = Result<Answered, Failed>;

#[derive(Debug)]
pub(crate) struct Answered {
    pub response: SystemOneResponse,
    pub queued: Duration,
    pub engine: Duration,
}

#[derive(Debug)]
pub(crate) enum Failed {
    Engine(CoreError),
    Panicked(String),
}

/// Why a request was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rejected {
    Full,
    Closed,
}

/// The running workers and the sending side of their queue.
#[derive(Debug)]
pub(crate) struct Pool {
    sender: Mutex<Option<SyncSender<(Job, Instant)>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    metrics: Arc<Metrics>,
    worker_count: usize,
    /// Jobs admitted and not yet finished or skipped, and the most that may be.
    in_system: Arc<AtomicUsize>,
    capacity: usize,
    /// Mean engine time per request, in microseconds (exponentially weighted), for
    /// `retry-after`.
    mean_engine_us: Arc<AtomicU64>,
}

impl Pool {
    /// Start `workers` threads (at least one) answering from a queue of `bound`.
    pub(crate) fn start(
        workers: usize,
        bound: usize,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let worker_count = workers.max(1);
        let capacity = worker_count + bound;
        // Admission keeps at most `capacity` jobs in the system, so a send never finds the
        // channel full.
        let (sender, receiver) = sync_channel::<(Job, Instant)>(capacity);
        let receiver = Arc::new(Mutex::new(receiver));
        let mean_engine_us = Arc::new(AtomicU64::new(1_000_000));
        let in_system = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::with_capacity(worker_count);
        for index in 0..worker_count {
            let worker = Worker {
                receiver: Arc::clone(&receiver),
                metrics: Arc::clone(&metrics),
                mean_engine_us: Arc::clone(&mean_engine_us),
                in_system: Arc::clone(&in_system),
            };
            handles.push(
                std::thread::Builder::new()
                    .name(format!("ruling-worker-{index}"))
                    .spawn(move || worker.run())?,
            );
        }
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            workers: Mutex::new(handles),
            metrics,
            worker_count,
            in_system,
            capacity,
            mean_engine_us,
        })
    }

    /// Admit a job, or say at once why not.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Rejected> {
        let guard = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sender) = guard.as_ref() else {
            return Err(Rejected::Closed);
        };
        // Admissions are serialised by the lock; workers only ever lower the count meanwhile.
        if self.in_system.load(Ordering::SeqCst) >= self.capacity {
            return Err(Rejected::Full);
        }
        // Counted before the send so a worker's decrement can never run first.
        self.in_system.fetch_add(1, Ordering::SeqCst);
        self.metrics.queue_depth.inc();
        match sender.try_send((job, Instant::now())) {
            Ok(()) => Ok(()),
            Err(error) => {
                self.in_system.fetch_sub(1, Ordering::SeqCst);
                self.metrics.queue_depth.dec();
                Err(match error {
                    TrySendError::Full(_) => Rejected::Full,
                    TrySendError::Disconnected(_) => Rejected::Closed,
                })
            }
        }
    }

    /// Seconds a refused client should wait: the queue's expected drain time, 1 to 30 s.
    pub(crate) fn retry_after(&self) -> u64 {
        let mean = self.mean_engine_us.load(Ordering::Relaxed) as f64 / 1e6;
        let waiting = self.metrics.queue_depth.get().max(0) as f64 + 1.0;
        let seconds = (mean * waiting / self.worker_count as f64).ceil();
        (seconds as u64).clamp(1, 30)
    }

    /// Stop admitting, let the workers finish every queued job, and wait for them.
    pub(crate) fn close_and_join(&self) {
        drop(
            self.sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let handles =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for handle in handles {
            if handle.join().is_err() {
                tracing::error!("an engine worker thread panicked outside a request");
            }
        }
    }
}

struct Worker {
    receiver: Arc<Mutex<Receiver<(Job, Instant)>>>,
    metrics: Arc<Metrics>,
    mean_engine_us: Arc<AtomicU64>,
    in_system: Arc<AtomicUsize>,
}

impl Worker {
    fn run(self) {
        loop {
            // One idle worker waits in `recv` holding the lock; the others wait for the lock.
            let next = self
                .receiver
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv();
            let Ok((job, admitted)) = next else {
                return; // the queue is closed and drained
            };
            self.metrics.queue_depth.dec();
            let reply = self.answer(job, admitted);
            // Room is made before the answer leaves, so a client that asks again as soon as it
            // has its answer finds this worker free.
            self.in_system.fetch_sub(1, Ordering::SeqCst);
            if let Some((sender, outcome)) = reply {
                // The handler may have gone meanwhile; then nobody wants the answer.
                let _ = sender.send(outcome);
            }
        }
    }

    /// Answer one job, or skip it (`None`) when nobody can use the answer any more.
    fn answer(&self, job: Job, admitted: Instant) -> Option<(oneshot::Sender<Outcome>, Outcome)> {
        let queued = admitted.elapsed();
        if Instant::now() >= job.deadline {
            self.metrics.skip("expired");
            tracing::debug!(request_id = %job.request_id, "skipped: its deadline passed in the queue");
            return None;
        }
        if job.reply.is_closed() {
            self.metrics.skip("client_gone");
            tracing::debug!(request_id = %job.request_id, "skipped: the client is gone");
            return None;
        }
        self.metrics.queue_wait.observe(queued.as_secs_f64());
        self.metrics.busy_workers.inc();
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| {
            job.model.evaluate_until(&job.request, &job.cancel)
        }));
        let engine = started.elapsed();
        self.metrics.busy_workers.dec();
        if let Ok(Err(CoreError::Engine(error))) = &result
            && error.stopped().is_some()
        {
            let reason = if Instant::now() >= job.deadline {
                "stopped_expired"
            } else {
                "stopped_client_gone"
            };
            self.metrics.skip(reason);
            tracing::debug!(request_id = %job.request_id, after = ?engine, reason, "stopped: nobody waits for the answer");
            return None;
        }
        self.metrics.engine_time.observe(engine.as_secs_f64());
        self.record_engine_time(engine);
        let outcome = match result {
            Ok(Ok(response)) => Ok(Answered {
                response,
                queued,
                engine,
            }),
            Ok(Err(error)) => Err(Failed::Engine(error)),
            Err(panic) => {
                self.metrics.engine_panics.inc();
                let message = panic_message(panic.as_ref());
                tracing::error!(request_id = %job.request_id, panic = %message, "the engine panicked");
                Err(Failed::Panicked(message))
            }
        };
        Some((job.reply, outcome))
    }

    fn record_engine_time(&self, engine: Duration) {
        let sample = u64::try_from(engine.as_micros()).unwrap_or(u64::MAX);
        let old = self.mean_engine_us.load(Ordering::Relaxed);
        self.mean_engine_us
            .store(old - old / 8 + sample / 8, Ordering::Relaxed);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
