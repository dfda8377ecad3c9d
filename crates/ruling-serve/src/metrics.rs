//! Prometheus metrics, one registry per server (no process-global recorder, so tests can run
//! several servers in one process), rendered by `GET /metrics` in the text format.

use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry, Unit};
use ruling_core::Ruling;

pub(crate) use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The served models once loaded (the base first, then its adapters), for the collectors
/// that read the engines' own counters.
pub(crate) type Models = Arc<OnceLock<Vec<Arc<Ruling>>>>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub reason: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds from 1 ms to about 65 s, doubling: requests take 0.1 to 10 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Register `metric` and hand back the handle the server updates (metrics share their state
/// between clones).
fn add<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// [`add`] for a metric measured in seconds.
fn add_seconds<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register_with_unit(name, help, Unit::Seconds, metric.clone());
    metric
}

/// A gauge holding a setting fixed at start.
fn fixed_gauge(value: usize) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
    gauge
}

/// Every metric the server keeps.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: HistogramFamily<RouteLabels>,
    pub queue_depth: Gauge,
    /// The estimated wait a request admitted now would meet, in seconds.
    pub estimated_wait: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub admitted: Counter,
    pub busy_workers: Gauge,
    pub queue_wait: Histogram,
    pub engine_time: Histogram,
    pub input_tokens: Counter,
    pub output_tokens: Counter,
    /// Requests refused before reaching a worker: `queue_full`, `loading`, `timeout`.
    pub rejected: Family<ReasonLabels, Counter>,
    /// Queued requests a worker dropped unstarted: `client_gone`, `expired`.
    pub skipped: Family<ReasonLabels, Counter>,
    pub engine_panics: Counter,
    pub model_loaded: Gauge,
}

impl Metrics {
    pub(crate) fn new(queue_capacity: usize, workers: usize, models: Models) -> Self {
        let mut registry = Registry::with_prefix("ruling");
        let r = &mut registry;
        let requests = add(
            r,
            "http_requests",
            "HTTP requests answered, by route, method and status",
            Family::default(),
        );
        let latency = add_seconds(
            r,
            "http_request_duration",
            "Time from request to response, by route",
            Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        );
        let queue_depth = add(
            r,
            "queue_depth",
            "Requests waiting for an engine worker",
            Gauge::default(),
        );
        add(
            r,
            "queue_capacity",
            "Most requests that may wait for a worker (429 beyond)",
            fixed_gauge(queue_capacity),
        );
        add(r, "workers", "Engine worker threads", fixed_gauge(workers));
        let estimated_wait = add_seconds(
            r,
            "queue_estimated_wait",
            "The wait a request admitted now would meet: the estimated work of every admitted \
             request not yet answered, over the workers (admission refuses past the bound)",
            Gauge::<f64, std::sync::atomic::AtomicU64>::default(),
        );
        let admitted = add(
            r,
            "admitted_requests",
            "Requests admitted to the queue",
            Counter::default(),
        );
        let busy_workers = add(
            r,
            "busy_workers",
            "Engine workers answering a request now",
            Gauge::default(),
        );
        let queue_wait = add_seconds(
            r,
            "queue_wait",
            "Time a request waited for a worker",
            latency_histogram(),
        );
        let engine_time = add_seconds(
            r,
            "engine_duration",
            "Time a worker spent answering one request",
            latency_histogram(),
        );
        let input_tokens = add(
            r,
            "input_tokens",
            "Tokens put through the model (usage.input_tokens)",
            Counter::default(),
        );
        let output_tokens = add(
            r,
            "output_tokens",
            "Tokens generated (usage.output_tokens)",
            Counter::default(),
        );
        let rejected = add(
            r,
            "rejected_requests",
            "Requests refused before reaching a worker, by reason (estimated_wait, queue_full, loading, timeout)",
            Family::default(),
        );
        let skipped = add(
            r,
            "skipped_requests",
            "Requests a worker dropped unanswered, by reason: not started (client_gone, expired) or stopped between forward passes (stopped_client_gone, stopped_expired)",
            Family::default(),
        );
        let engine_panics = add(
            r,
            "engine_panics",
            "Requests on which the engine panicked (answered 500; the worker carries on)",
            Counter::default(),
        );
        let model_loaded = add(
            r,
            "model_loaded",
            "1 once the model is loaded and the workers are running",
            Gauge::default(),
        );
        registry.register_collector(Box::new(PrefixCacheCollector { models }));
        Self {
            registry,
            requests,
            latency,
            queue_depth,
            estimated_wait,
            admitted,
            busy_workers,
            queue_wait,
            engine_time,
            input_tokens,
            output_tokens,
            rejected,
            skipped,
            engine_panics,
            model_loaded,
        }
    }

    pub(crate) fn reject(&self, reason: &'static str) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn skip(&self, reason: &'static str) {
        self.skipped.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The engine's prefix cache, as `/metrics` reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PrefixCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
    pub bytes: u64,
}

/// The engines' own counters summed over every served model (each adapter has a prefix
/// cache of its own; an engine without one counts zeros).
fn prefix_cache_stats(models: &[Arc<Ruling>]) -> PrefixCacheStats {
    models
        .iter()
        .filter_map(|ruling| ruling.prefix_cache_stats())
        .fold(PrefixCacheStats::default(), |sum, s| PrefixCacheStats {
            hits: sum.hits + s.hits,
            misses: sum.misses + s.misses,
            entries: sum.entries + s.entries as u64,
            bytes: sum.bytes + s.bytes as u64,
        })
}

/// Reads the prefix caches' counters from the engines at each scrape.
#[derive(Debug)]
struct PrefixCacheCollector {
    models: Models,
}

impl Collector for PrefixCacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(models) = self.models.get() else {
            return Ok(());
        };
        let stats = prefix_cache_stats(models);
        let counters = [
            (
                "prefix_cache_hits",
                "Requests whose prefix (system turn and state) was found in the prefix cache",
                stats.hits,
            ),
            (
                "prefix_cache_misses",
                "Requests whose prefix had to be encoded",
                stats.misses,
            ),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "prefix_cache_entries",
                "Prefixes held in the prefix cache",
                stats.entries,
            ),
            (
                "prefix_cache_bytes",
                "Bytes the prefix cache holds",
                stats.bytes,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}
