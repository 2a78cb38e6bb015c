//! Starting the service, and running it as `payonce serve` does: until
//! SIGTERM or SIGINT, then a graceful shutdown and a last sync.

use std::net::SocketAddr;
use std::sync::Arc;

use payonce::Ledger;
use payonce_model::escape::Escaped;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::api::{self, AppState};
use crate::backend::{Backend, Embedded};
use crate::metrics::Metrics;
use crate::rail::Rail;
use crate::server::{Limits, Server};
use crate::tokens::{Tokens, TokensError};

/// Why the service could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The tokens file was refused.
    Tokens(TokensError),
    /// The rail could not be set up (the rail log could not be opened, the
    /// rail URL does not parse).
    Rail(String),
    /// Listening, starting the runtime, or saying where it listens failed.
    Io {
        /// What was being done.
        doing: String,
        /// The operating system's error.
        error: std::io::Error,
    },
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Tokens(error) => write!(f, "{error}"),
            ServeError::Rail(message) => write!(f, "{}", Escaped(message)),
            ServeError::Io { doing, error } => write!(f, "{doing}: {error}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Starts the service on `listener`: the routes over `backend` and `rail`,
/// callers from `tokens`, within `limits`.
pub fn start(
    listener: TcpListener,
    backend: Arc<dyn Backend>,
    rail: Arc<dyn Rail>,
    tokens: Tokens,
    metrics: Arc<Metrics>,
    limits: Limits,
) -> std::io::Result<Server> {
    let sends = TaskTracker::new();
    let state = AppState {
        backend,
        rail,
        tokens: Arc::new(tokens),
        metrics,
        sends: sends.clone(),
        request_time_max: limits.request_time_max,
    };
    Server::start(listener, api::router(state), limits, sends)
}

/// Everything `payonce serve` runs with but its ledger, checked before the
/// ledger is opened, so a refusal writes nothing.
pub struct Service {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Who may call.
    pub tokens: Tokens,
    /// Where withdrawals leave custody.
    pub rail: Arc<dyn Rail>,
    /// Connections, header bytes, request time.
    pub limits: Limits,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("listen", &self.listen)
            .field("tokens", &self.tokens)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Serves `ledger` until SIGTERM or SIGINT; `listening` is told where
    /// once the service listens. Then it stops accepting, waits for every
    /// running request and send, and syncs the ledger. Runs on a
    /// multi-threaded tokio runtime with its I/O and time drivers.
    pub async fn run(
        self,
        ledger: Ledger,
        listening: impl FnOnce(SocketAddr) -> std::io::Result<()>,
    ) -> Result<(), ServeError> {
        let metrics = Arc::new(Metrics::default());
        let backend: Arc<dyn Backend> = Arc::new(Embedded::new(ledger, metrics.clone()));
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(|error| ServeError::Io {
                doing: format!("listening on {}", self.listen),
                error,
            })?;
        let server = start(
            listener,
            backend.clone(),
            self.rail,
            self.tokens,
            metrics,
            self.limits,
        )
        .map_err(|error| ServeError::Io {
            doing: "starting the server".into(),
            error,
        })?;
        let told = listening(server.addr()).map_err(|error| ServeError::Io {
            doing: "writing the output".into(),
            error,
        });
        if told.is_ok() {
            stop_signal().await;
        }
        server.shut_down().await;
        if let Err(error) = backend.sync().await {
            tracing::warn!(%error, "the last sync at shutdown failed");
        }
        told
    }
}

/// Waits for SIGTERM or SIGINT (Ctrl-C).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
