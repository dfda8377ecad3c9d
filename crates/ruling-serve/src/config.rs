//! What the server is told at start: names, limits, the key. How to load the model is the
//! [`crate::Loader`]'s business, not this struct's.

use std::time::Duration;

use crate::auth::ApiKey;

/// The names every server answers to besides its served name, unless told otherwise: clients
/// written for TypeSafe's hosted API ask for `jev-latest`.
pub const DEFAULT_ALIASES: &[&str] = &["jev-latest"];

/// Server settings. `Default` is what `ruling-serve` runs with when given no flags.
#[derive(Debug, Clone)]
pub struct Config {
    /// Other names the `model` field may carry; each is listed by `GET /v1/models`.
    pub aliases: Vec<String>,
    /// Required bearer key on `/v1/*` and `/metrics`; `None` leaves them open.
    pub api_key: Option<ApiKey>,
    /// Largest request body, after decompression (413 beyond).
    pub max_body_bytes: usize,
    /// Most requests waiting for a worker whatever their estimated time (429 beyond): a hard
    /// cap behind admission by time. 0 admits a request only when a worker is idle.
    pub queue: usize,
    /// Longest estimated wait plus own time a request is admitted with (429 with the wait as
    /// `retry-after` beyond); `None` bounds it by `timeout`, so what could not be answered in
    /// time is refused at once.
    pub max_wait: Option<Duration>,
    /// From admission to answer, queue wait included (503 with `retry-after` beyond).
    pub timeout: Duration,
    /// Engine worker threads. One already uses every core through the matrix products.
    pub workers: usize,
    /// Most questions in one request (422 beyond): bounds validation, planning and the work
    /// one request can hold a worker for.
    pub max_questions: usize,
    /// A connection that has not sent a whole request head within this long is closed, so
    /// clients that open connections and trickle bytes cannot hold them forever.
    pub header_timeout: Duration,
    /// A request body not received whole within this long of its head is answered 408.
    pub body_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            aliases: DEFAULT_ALIASES.iter().map(|a| (*a).to_owned()).collect(),
            api_key: None,
            max_body_bytes: 16 * 1024 * 1024,
            queue: 4096,
            max_wait: None,
            timeout: Duration::from_secs(30),
            workers: 1,
            max_questions: 256,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
        }
    }
}
