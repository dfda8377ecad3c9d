//! The ruling HTTP server: System One v1 on axum.
//!
//! [`serve`] binds nothing itself: it takes a bound listener, answers `GET /health` at once
//! (503 until the model is loaded), loads the model on a thread of its own through a
//! [`Loader`], then starts the engine's worker threads and answers `POST /v1/systemone` and
//! `GET /v1/models`. One process can serve a base and LoRA adapters over it side by side
//! ([`Loader::from_spec_with_adapters`]): the request's `model` picks which answers. The engine's work is blocking and takes 0.1 to 10 s per request, so it
//! never runs on the async runtime: requests wait for a worker in a bounded queue, and a full
//! queue is refused with 429 and `retry-after` instead of letting latency grow without bound.
//!
//! [`app`] builds the router alone, for callers that bring their own server loop. The map from
//! every failure to its status code and body is in one place, `error.rs`; the OpenAPI
//! document is generated from the wire types by [`openapi::document`].

mod auth;
mod body;
mod config;
mod error;
mod loader;
mod metrics;
mod multipart;
pub mod openapi;
mod queue;
mod request_id;
mod routes;
mod server;
mod state;

pub use auth::ApiKey;
pub use config::{Config, DEFAULT_ALIASES};
pub use loader::{LoadError, Loaded, Loader, ModelMeta};
pub use routes::app;
pub use server::{ServeError, serve, shutdown_signal};
pub use state::{AppState, InstallError};
