//! `payonce serve`: the ledger over HTTP, for custody services in any
//! language. The contract is in docs/http.md and docs/openapi.yaml.
//!
//! - [`tokens`]: who may call, by bearer token, in which role.
//! - [`scope`]: the `Idempotency-Key` header and the per-client ledger key.
//! - [`rail`]: the async [`Rail`] trait and its three implementations.
//! - [`backend`]: the seam to the ledger ([`Backend`]); [`Embedded`] runs
//!   on the file ledger.
//! - `api`: the routes; [`problem`]: every refusal as problem+json.
//! - [`server`]: the accept loop, its limits, the graceful shutdown.

pub mod backend;
pub mod metrics;
pub mod problem;
pub mod rail;
pub mod scope;
pub mod server;
pub mod tokens;

pub(crate) mod api;
mod args;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use payonce::{Config, Ledger};
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

pub use self::api::{BODY_LEN_MAX, REPLAYED_HEADER};
pub use self::args::ServeArgs;
pub use self::backend::{Backend, Embedded};
pub use self::metrics::Metrics;
pub use self::rail::Rail;
pub use self::server::{Limits, Server};
pub use self::tokens::Tokens;

use crate::env::Status;
use crate::error::CliError;

/// Why the service could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The tokens file was refused.
    Tokens(tokens::TokensError),
    /// The rail could not be set up (the rail log could not be opened, the
    /// rail URL does not parse).
    Rail(String),
    /// Listening, or starting the runtime, failed.
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
            ServeError::Rail(message) => write!(f, "{}", crate::escape::Escaped(message)),
            ServeError::Io { doing, error } => write!(f, "{doing}: {error}"),
        }
    }
}

impl std::error::Error for ServeError {}

impl From<ServeError> for CliError {
    fn from(error: ServeError) -> CliError {
        match error {
            ServeError::Io { doing, error } => CliError::Io { doing, error },
            other => CliError::Usage {
                message: other.to_string(),
            },
        }
    }
}

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
    let state = api::AppState {
        backend,
        rail,
        tokens: Arc::new(tokens),
        metrics,
        sends: sends.clone(),
        request_time_max: limits.request_time_max,
    };
    Server::start(listener, api::router(state), limits, sends)
}

/// Opens (or with `--init` creates) the ledger: in `--dir`, or as
/// `--worker` of the PostgreSQL ledger at `--postgres`.
fn open_ledger(args: &ServeArgs) -> Result<Ledger, CliError> {
    let Some(dir) = &args.dir else {
        return open_worker(args);
    };
    let opened = if args.init {
        Ledger::init_with(dir, Config::default())
    } else {
        Ledger::open_with(dir, Config::default())
    };
    opened.map_err(|error| CliError::from_ledger(dir, error))
}

/// Opens the PostgreSQL ledger of `--postgres` as `--worker`, creating it
/// first with `--init`.
fn open_worker(args: &ServeArgs) -> Result<Ledger, CliError> {
    let (Some(url), Some(worker)) = (&args.postgres, &args.worker) else {
        return Err(CliError::Usage {
            message: "give --dir DIR, or --postgres URL with --worker NAME".to_owned(),
        });
    };
    let shown = std::path::PathBuf::from(payonce_postgres::redacted(url));
    if args.init {
        let created = payonce_postgres::init(url, Config::default());
        drop(created.map_err(|error| CliError::from_ledger(&shown, error))?);
    }
    payonce_postgres::open(url, worker, Config::default())
        .map_err(|error| CliError::from_ledger(&shown, error))
}

/// `payonce serve`.
pub(crate) fn serve_command(args: &ServeArgs, out: &mut dyn Write) -> Result<Status, CliError> {
    let tokens = Tokens::read(&args.tokens).map_err(ServeError::Tokens)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| ServeError::Io {
            doing: "starting the async runtime".into(),
            error,
        })?;
    let rail = runtime.block_on(async { args.rail() })?;
    let ledger = open_ledger(args)?;
    let metrics = Arc::new(Metrics::default());
    let backend: Arc<dyn Backend> = Arc::new(Embedded::new(ledger, metrics.clone()));
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen)
            .await
            .map_err(|error| ServeError::Io {
                doing: format!("listening on {}", args.listen),
                error,
            })?;
        let server = start(
            listener,
            backend.clone(),
            rail,
            tokens,
            metrics,
            args.limits(),
        )
        .map_err(|error| ServeError::Io {
            doing: "starting the server".into(),
            error,
        })?;
        writeln!(out, "payonce serve: listening on http://{}", server.addr())
            .and_then(|()| out.flush())
            .map_err(CliError::output)?;
        stop_signal().await;
        server.shut_down().await;
        if let Err(error) = backend.sync().await {
            tracing::warn!(%error, "the last sync at shutdown failed");
        }
        writeln!(
            out,
            "payonce serve: stopped; every running send was recorded"
        )
        .map_err(CliError::output)?;
        Ok::<_, CliError>(())
    })?;
    // Sends still on the blocking pool were waited for above.
    runtime.shutdown_timeout(Duration::from_secs(10));
    Ok(Status::Clean)
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
