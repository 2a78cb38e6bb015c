//! Starting the service, and running it as `payonce serve` does: until
//! SIGTERM or SIGINT, reloading its files on SIGHUP, then a graceful
//! shutdown and a last sync.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use payonce::Ledger;
use payonce_model::escape::Escaped;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::api::{self, AppState};
use crate::backend::{Backend, Embedded};
use crate::metrics::Metrics;
use crate::rail::{HttpRailError, Rail};
use crate::reload::{Reload, Reloader};
use crate::server::{Limits, Server};
use crate::signals::{Asked, Signals};
use crate::swap::Swap;
use crate::tls::{ServerTls, ServerTlsError};
use crate::tokens::{Tokens, TokensError};

/// Why the service could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The tokens file was refused.
    Tokens(TokensError),
    /// The simulated rail could not be set up (its log could not be
    /// opened, its rates add up to more than 1).
    Rail(String),
    /// The HTTP rail could not be set up: its URL breaks a rule, or a TLS
    /// file of it cannot be used.
    HttpRail(HttpRailError),
    /// The listener's TLS files cannot be used.
    Tls(ServerTlsError),
    /// The service would listen on an address other than loopback in
    /// clear, without `--insecure-http`: bearer tokens would cross a
    /// network unencrypted.
    Cleartext {
        /// Where it would listen.
        listen: SocketAddr,
    },
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
            ServeError::HttpRail(error) => write!(f, "{error}"),
            ServeError::Tls(error) => write!(f, "{error}"),
            ServeError::Cleartext { listen } => write!(
                f,
                "--listen {listen} is not a loopback address and the service has no TLS: \
                 bearer tokens would cross the network in clear; give --tls-cert and \
                 --tls-key, or --insecure-http to allow it (behind a proxy that terminates \
                 TLS, say)"
            ),
            ServeError::Io { doing, error } => write!(f, "{doing}: {error}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Tokens(error) => Some(error),
            ServeError::HttpRail(error) => Some(error),
            ServeError::Tls(error) => Some(error),
            ServeError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The rule for where the service may listen in clear: on loopback, or
/// anywhere with `insecure_http` (a proxy in front terminates TLS).
pub fn check_listen(listen: SocketAddr, tls: bool, insecure_http: bool) -> Result<(), ServeError> {
    if tls || insecure_http || listen.ip().is_loopback() {
        return Ok(());
    }
    Err(ServeError::Cleartext { listen })
}

/// What a server serves with, beside its listener.
pub struct Setup {
    /// The ledger.
    pub backend: Arc<dyn Backend>,
    /// Where withdrawals leave custody.
    pub rail: Arc<dyn Rail>,
    /// Who may call.
    pub tokens: Tokens,
    /// What the service counts.
    pub metrics: Arc<Metrics>,
    /// Connections, header bytes, request time.
    pub limits: Limits,
    /// TLS on the listener; without it, plain HTTP.
    pub tls: Option<ServerTls>,
    /// The file `tokens` was read from, which a reload reads again;
    /// without it, the tokens stay as given.
    pub tokens_file: Option<PathBuf>,
}

/// Starts the service on `listener` in plain HTTP: the routes over
/// `backend` and `rail`, callers from `tokens`, within `limits`.
pub fn start(
    listener: TcpListener,
    backend: Arc<dyn Backend>,
    rail: Arc<dyn Rail>,
    tokens: Tokens,
    metrics: Arc<Metrics>,
    limits: Limits,
) -> std::io::Result<Server> {
    let setup = Setup {
        backend,
        rail,
        tokens,
        metrics,
        limits,
        tls: None,
        tokens_file: None,
    };
    start_with(listener, setup)
}

/// Starts the service on `listener` as `setup` says; [`Server::reload`]
/// rereads its files.
pub fn start_with(listener: TcpListener, setup: Setup) -> std::io::Result<Server> {
    let sends = TaskTracker::new();
    let tokens = Arc::new(Swap::new(setup.tokens));
    let reloader = Reloader {
        tokens: setup.tokens_file.map(|file| (file, tokens.clone())),
        tls: setup.tls.clone(),
        rail: setup.rail.clone(),
    };
    let state = AppState {
        backend: setup.backend,
        rail: setup.rail,
        tokens,
        metrics: setup.metrics,
        sends: sends.clone(),
        request_time_max: setup.limits.request_time_max,
    };
    let server = Server::start(listener, api::router(state), setup.limits, sends, setup.tls)?;
    Ok(server.reloading(reloader))
}

/// What the service tells the one running it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// It listens at this address, over TLS or not.
    Listening {
        /// Where.
        addr: SocketAddr,
        /// Whether it speaks HTTPS there.
        tls: bool,
    },
    /// A SIGHUP reloaded its files, or tried to.
    Reloaded(&'a Reload),
}

/// Everything `payonce serve` runs with but its ledger, checked before the
/// ledger is opened, so a refusal writes nothing.
pub struct Service {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Who may call.
    pub tokens: Tokens,
    /// The file `tokens` was read from, which SIGHUP reads again.
    pub tokens_file: Option<PathBuf>,
    /// Where withdrawals leave custody.
    pub rail: Arc<dyn Rail>,
    /// Connections, header bytes, request time.
    pub limits: Limits,
    /// TLS on the listener, whose files SIGHUP reads again; without it,
    /// plain HTTP.
    pub tls: Option<ServerTls>,
    /// Allow plain HTTP on an address other than loopback.
    pub insecure_http: bool,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("listen", &self.listen)
            .field("tokens", &self.tokens)
            .field("tokens_file", &self.tokens_file)
            .field("limits", &self.limits)
            .field("tls", &self.tls)
            .field("insecure_http", &self.insecure_http)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Checks the rules that need no file: where it may listen in clear.
    pub fn check(&self) -> Result<(), ServeError> {
        check_listen(self.listen, self.tls.is_some(), self.insecure_http)
    }

    /// Serves `ledger` until SIGTERM or SIGINT, reloading its files on
    /// SIGHUP; `tell` hears where it listens and what each reload did.
    /// Then it stops accepting, waits for every running request and send,
    /// and syncs the ledger. Runs on a multi-threaded tokio runtime with
    /// its I/O and time drivers.
    pub async fn run(
        self,
        ledger: Ledger,
        mut tell: impl FnMut(Event<'_>) -> std::io::Result<()>,
    ) -> Result<(), ServeError> {
        self.check()?;
        let io = |doing: &str| {
            let doing = doing.to_owned();
            move |error| ServeError::Io { doing, error }
        };
        let mut signals = Signals::new().map_err(io("listening for signals"))?;
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(io(&format!("listening on {}", self.listen)))?;
        let metrics = Arc::new(Metrics::default());
        let backend: Arc<dyn Backend> = Arc::new(Embedded::new(ledger, metrics.clone()));
        let tls = self.tls.is_some();
        let setup = Setup {
            backend: backend.clone(),
            rail: self.rail,
            tokens: self.tokens,
            metrics,
            limits: self.limits,
            tls: self.tls,
            tokens_file: self.tokens_file,
        };
        let server = start_with(listener, setup).map_err(io("starting the server"))?;
        let addr = server.addr();
        let told = tell(Event::Listening { addr, tls });
        if told.is_ok() {
            until_stopped(&server, &mut signals, &mut tell).await;
        }
        server.shut_down().await;
        if let Err(error) = backend.sync().await {
            tracing::warn!(%error, "the last sync at shutdown failed");
        }
        told.map_err(io("writing the output"))
    }
}

/// Reloads on every SIGHUP until SIGTERM or SIGINT. A reload's report that
/// cannot be told (its output closed) is logged, and the service goes on:
/// the reload itself was done.
async fn until_stopped(
    server: &Server,
    signals: &mut Signals,
    tell: &mut impl FnMut(Event<'_>) -> std::io::Result<()>,
) {
    loop {
        match signals.next().await {
            Asked::Stop => return,
            Asked::Reload => {
                let reload = server.reload().await;
                if let Err(error) = tell(Event::Reloaded(&reload)) {
                    tracing::warn!(%error, %reload, "a reload could not be reported");
                }
            }
        }
    }
}
