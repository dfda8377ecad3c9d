//! The engine's worker threads and the bounded queue in front of them.
//!
//! Answering a request is blocking CPU work of a few milliseconds to seconds, so it runs on
//! dedicated std threads, never on the async runtime. Handlers admit a request without blocking
//! and await the answer on a oneshot.
//!
//! Admission is by time. Each served model keeps a running estimate of its seconds per request
//! (seeded by a warm-up request at load, then an exponentially weighted mean of what it took),
//! and the pool the sum of the estimates of every job in the system. A job is admitted while the
//! estimated wait in front of it (that sum over the workers) plus its own estimate stays within
//! the bound (`max_wait`, else the request timeout): a burst of hundreds of 10 ms requests
//! queues and is answered, while a decoder refuses what could not be answered in time. The
//! refusal is a 429 whose `retry-after` is the estimated wait, rounded up. A model with no
//! estimate yet is admitted on the count alone, and an idle worker takes any job (so a model
//! whose estimate grew past the bound is measured again rather than refused for ever). The count is a hard cap too: a job is admitted
//! while the jobs in the system (waiting or running) are under `workers + bound`; a zero bound
//! admits exactly when a worker has no job, whether or not that worker's thread has reached its
//! `recv` yet (a rendezvous channel would refuse it in that instant).
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
    /// As many jobs as the queue bound allows are in the system.
    Full,
    /// The estimated wait, plus the job's own estimate, is past the bound.
    Busy {
        wait: Duration,
    },
    Closed,
}

/// What the pool knows of each model's cost: seconds per request, by served name, and the
/// estimated work of every job admitted and not finished.
#[derive(Debug, Default)]
struct Estimates {
    /// Microseconds per request, by the name a model serves under.
    per_model: Mutex<std::collections::HashMap<String, u64>>,
    /// Microseconds of estimated work in the system.
    pending_us: AtomicU64,
}

impl Estimates {
    fn of(&self, model: &str) -> Option<u64> {
        self.per_model
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model)
            .copied()
    }

    /// Fold one measured request into the model's mean (the first sets it).
    fn record(&self, model: &str, took: Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let mut map = self
            .per_model
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mean = map.entry(model.to_owned()).or_insert(sample);
        *mean = *mean - *mean / 8 + sample / 8;
    }

    fn seed(&self, model: &str, took: Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        self.per_model
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(model.to_owned(), sample);
    }
}

/// The running workers and the sending side of their queue.
#[derive(Debug)]
pub(crate) struct Pool {
    sender: Mutex<Option<SyncSender<Queued>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    metrics: Arc<Metrics>,
    worker_count: usize,
    /// Jobs admitted and not yet finished or skipped, and the most that may be.
    in_system: Arc<AtomicUsize>,
    capacity: usize,
    /// Mean engine time per request, in microseconds (exponentially weighted), for
    /// `retry-after` when no model has an estimate.
    mean_engine_us: Arc<AtomicU64>,
    estimates: Arc<Estimates>,
    /// Longest estimated wait plus own time a job is admitted with.
    bound: Duration,
}

/// A job in the queue: when it was admitted and the work it was estimated at.
type Queued = (Job, Instant, u64);

/// How a pool admits: workers, the count bound, and the time bound.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admission {
    pub workers: usize,
    /// Jobs that may wait beside the running ones, whatever their estimates.
    pub queue: usize,
    /// Longest estimated wait plus own time a job is admitted with.
    pub bound: Duration,
}

impl Pool {
    /// Start `admission.workers` threads (at least one) answering from a queue admitted as
    /// `admission` says.
    pub(crate) fn start(admission: Admission, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        let worker_count = admission.workers.max(1);
        let capacity = worker_count + admission.queue;
        // Admission keeps at most `capacity` jobs in the system, so a send never finds the
        // channel full.
        let (sender, receiver) = sync_channel::<Queued>(capacity);
        let receiver = Arc::new(Mutex::new(receiver));
        let mean_engine_us = Arc::new(AtomicU64::new(1_000_000));
        let in_system = Arc::new(AtomicUsize::new(0));
        let estimates = Arc::new(Estimates::default());
        let mut handles = Vec::with_capacity(worker_count);
        for index in 0..worker_count {
            let worker = Worker {
                receiver: Arc::clone(&receiver),
                metrics: Arc::clone(&metrics),
                mean_engine_us: Arc::clone(&mean_engine_us),
                in_system: Arc::clone(&in_system),
                estimates: Arc::clone(&estimates),
                workers: worker_count,
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
            estimates,
            bound: admission.bound,
        })
    }

    /// Start from a measured request of `model` (the warm-up at load), so the first burst is
    /// admitted by time, not count.
    pub(crate) fn seed_estimate(&self, model: &str, took: Duration) {
        self.estimates.seed(model, took);
    }

    /// The wait a job admitted now would meet: the estimated work in the system over the
    /// workers.
    pub(crate) fn estimated_wait(&self) -> Duration {
        let pending = self.estimates.pending_us.load(Ordering::SeqCst);
        Duration::from_micros(pending / self.worker_count as u64)
    }

    /// Whether a job of `model` would be admitted now (by time, and by count).
    pub(crate) fn admits(&self, model: &str) -> bool {
        let in_system = self.in_system.load(Ordering::SeqCst);
        if in_system < self.worker_count {
            return true;
        }
        in_system < self.capacity
            && self
                .estimates
                .of(model)
                .is_none_or(|own| self.estimated_wait() + Duration::from_micros(own) <= self.bound)
    }

    /// Admit a job, or say at once why not.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Rejected> {
        let guard = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sender) = guard.as_ref() else {
            return Err(Rejected::Closed);
        };
        // Admissions are serialised by the lock; workers only ever lower the count and the
        // pending work meanwhile.
        if self.in_system.load(Ordering::SeqCst) >= self.capacity {
            return Err(Rejected::Full);
        }
        let own = self.estimates.of(&job.model.info().model);
        // A worker with nothing to do takes the job whatever its estimate: nothing waits in
        // front of it, and a model whose estimate grew past the bound is measured again.
        let idle = self.in_system.load(Ordering::SeqCst) < self.worker_count;
        if let Some(own) = own
            && !idle
        {
            let wait = self.estimated_wait();
            if wait + Duration::from_micros(own) > self.bound {
                return Err(Rejected::Busy { wait });
            }
        }
        let own = own.unwrap_or(0);
        // Counted before the send so a worker's decrement can never run first.
        self.in_system.fetch_add(1, Ordering::SeqCst);
        self.estimates.pending_us.fetch_add(own, Ordering::SeqCst);
        self.metrics.queue_depth.inc();
        self.publish_wait();
        match sender.try_send((job, Instant::now(), own)) {
            Ok(()) => {
                self.metrics.admitted.inc();
                Ok(())
            }
            Err(error) => {
                self.in_system.fetch_sub(1, Ordering::SeqCst);
                self.estimates.pending_us.fetch_sub(own, Ordering::SeqCst);
                self.metrics.queue_depth.dec();
                self.publish_wait();
                Err(match error {
                    TrySendError::Full(_) => Rejected::Full,
                    TrySendError::Disconnected(_) => Rejected::Closed,
                })
            }
        }
    }

    fn publish_wait(&self) {
        self.metrics
            .estimated_wait
            .set(self.estimated_wait().as_secs_f64());
    }

    /// Seconds a refused client should wait: the estimated wait rounded up, or, before any
    /// model has an estimate, the queue's expected drain time at the mean engine time; 1 to
    /// 300 s.
    pub(crate) fn retry_after(&self) -> u64 {
        let pending = self.estimates.pending_us.load(Ordering::SeqCst);
        let seconds = if pending > 0 {
            self.estimated_wait().as_secs_f64().ceil()
        } else {
            let mean = self.mean_engine_us.load(Ordering::Relaxed) as f64 / 1e6;
            let waiting = self.metrics.queue_depth.get().max(0) as f64 + 1.0;
            (mean * waiting / self.worker_count as f64).ceil()
        };
        (seconds as u64).clamp(1, 300)
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
    receiver: Arc<Mutex<Receiver<Queued>>>,
    metrics: Arc<Metrics>,
    mean_engine_us: Arc<AtomicU64>,
    in_system: Arc<AtomicUsize>,
    estimates: Arc<Estimates>,
    workers: usize,
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
            let Ok((job, admitted, estimate)) = next else {
                return; // the queue is closed and drained
            };
            self.metrics.queue_depth.dec();
            let reply = self.answer(job, admitted);
            // Room is made before the answer leaves, so a client that asks again as soon as it
            // has its answer finds this worker free.
            self.estimates
                .pending_us
                .fetch_sub(estimate, Ordering::SeqCst);
            self.in_system.fetch_sub(1, Ordering::SeqCst);
            let pending = self.estimates.pending_us.load(Ordering::SeqCst);
            self.metrics
                .estimated_wait
                .set(pending as f64 / 1e6 / self.workers as f64);
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
        if matches!(result, Ok(Ok(_))) {
            self.estimates.record(&job.model.info().model, engine);
        }
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
