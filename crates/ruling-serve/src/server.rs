//! Serving on a bound listener: load in the background, answer, shut down gracefully.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::config::Config;
use crate::loader::{LoadError, Loader};
use crate::routes::app;
use crate::state::{AppState, InstallError};

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error("serving HTTP: {0}")]
    Io(#[from] std::io::Error),
}

/// Serve on `listener` until `shutdown` resolves (or the model fails to load).
///
/// `/health` answers from the first moment, 503 until the model is loaded; the model is
/// loaded on a thread of its own, so pulling a model for minutes never blocks the port. On
/// shutdown the listener stops accepting, requests in flight and in the queue are answered,
/// the workers exit, and this returns `Ok(())`. A model that fails to load stops the server
/// with [`ServeError::Load`].
pub async fn serve(
    config: Config,
    listener: TcpListener,
    loader: Loader,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let header_timeout = config.header_timeout;
    let state = AppState::new(config, loader.describe());
    let router = app(state.clone());

    let (failed_tx, failed_rx) = oneshot::channel::<ServeError>();
    let loading = state.clone();
    std::thread::Builder::new()
        .name("ruling-loader".to_owned())
        .spawn(move || {
            let loaded = catch_unwind(AssertUnwindSafe(|| loader.load()))
                .unwrap_or(Err(LoadError::Panicked));
            let failure = match loaded {
                Ok(loaded) => loading.install(loaded).err().map(ServeError::Install),
                Err(error) => Some(ServeError::Load(error)),
            };
            if let Some(failure) = failure {
                let _ = failed_tx.send(failure);
            }
        })?;

    let (stopped_tx, stopped_rx) = oneshot::channel::<Option<ServeError>>();
    let stop = async move {
        let load_failed = async {
            match failed_rx.await {
                Ok(error) => error,
                // Loaded: only a shutdown stops the server now.
                Err(_) => std::future::pending().await,
            }
        };
        let why = tokio::select! {
            biased;
            error = load_failed => {
                tracing::error!(%error, "the model could not be loaded; stopping");
                Some(error)
            }
            () = shutdown => {
                tracing::info!("shutting down: no new connections; finishing requests in flight and queued");
                None
            }
        };
        let _ = stopped_tx.send(why);
    };
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "listening");
    }
    accept(listener, router, header_timeout, stop).await;

    // Every connection is closed, so nothing can be admitted any more: drain the queue.
    let draining = state.clone();
    let drained = tokio::task::spawn_blocking(move || {
        if let Some(ready) = draining.ready() {
            ready.pool.close_and_join();
        }
    })
    .await;
    if drained.is_err() {
        tracing::error!("draining the engine workers failed");
    }
    match stopped_rx.await {
        Ok(Some(error)) => Err(error),
        _ => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// Accept connections and serve each on a task of its own until `stop` resolves; then stop
/// accepting, let every connection finish the request it is on, and return once all are closed.
///
/// This is `axum::serve` with one thing it lacks: a connection that does not send a whole
/// request head within `header_timeout` (the first, or the next one on a kept-alive
/// connection) is closed, so slow clients cannot hold connections open without end.
async fn accept(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut stop = pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: the listener itself is fine, so
                    // wait a moment rather than spin, as axum::serve does.
                    tracing::warn!(%error, "accepting a connection failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(router.clone()),
            );
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = watched.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
