//! Starting the service, and running it as `payonce serve` does: until
//! SIGTERM or SIGINT, reloading its files on SIGHUP, then a graceful
//! shutdown and a last sync.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use payonce::Ledger;
use payonce_model::escape::Escaped;
use tokio::net::TcpListener;
use tokio::runtime::RuntimeFlavor;
use tokio_util::task::TaskTracker;

use crate::api::{self, AppState};
use crate::embedded::Embedded;
use crate::metrics::Metrics;
use crate::notices::{self, Heard, Notice, Unknown};
use crate::rail::{HttpRailError, Rail};
use crate::reload::Reloader;
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

/// How the service's callers reach it, as the rule for listening in clear
/// allows: [`Service::check`] says which, so the one running it can warn
/// of a service in clear beyond loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// Over TLS.
    Tls,
    /// In clear, on a loopback address: nothing crosses a network.
    LoopbackHttp,
    /// In clear beyond loopback, as `insecure_http` allows (behind a proxy
    /// that terminates TLS): bearer tokens cross the network in clear up
    /// to it.
    InsecureHttp,
}

/// The rule for where the service may listen in clear: on loopback, or
/// anywhere with `insecure_http`.
fn check_listen(
    listen: SocketAddr,
    tls: bool,
    insecure_http: bool,
) -> Result<Transport, ServeError> {
    match (tls, listen.ip().is_loopback(), insecure_http) {
        (true, _, _) => Ok(Transport::Tls),
        (false, true, _) => Ok(Transport::LoopbackHttp),
        (false, false, true) => Ok(Transport::InsecureHttp),
        (false, false, false) => Err(ServeError::Cleartext { listen }),
    }
}

/// What a server serves with, beside its listener.
pub struct Setup {
    /// The ledger.
    pub ledger: Arc<Embedded>,
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
/// `ledger` and `rail`, callers from `tokens`, within `limits`.
pub fn start(
    listener: TcpListener,
    ledger: Arc<Embedded>,
    rail: Arc<dyn Rail>,
    tokens: Tokens,
    metrics: Arc<Metrics>,
    limits: Limits,
) -> std::io::Result<Server> {
    let setup = Setup {
        ledger,
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
        one_at_a_time: Arc::default(),
    };
    let state = AppState {
        ledger: setup.ledger,
        rail: setup.rail,
        tokens,
        metrics: setup.metrics.clone(),
        sends: sends.clone(),
        request_time_max: setup.limits.request_time_max,
    };
    let router = api::router(state);
    let server = Server::start(
        listener,
        router,
        setup.limits,
        sends,
        setup.tls,
        setup.metrics,
    )?;
    Ok(server.reloading(reloader))
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
    /// Checks the rules that need no file (where it may listen in clear),
    /// and says how callers will reach it.
    pub fn check(&self) -> Result<Transport, ServeError> {
        check_listen(self.listen, self.tls.is_some(), self.insecure_http)
    }

    /// Serves `ledger` until `signals` hears SIGTERM or SIGINT (whose
    /// handlers it installs first), reloading its files on SIGHUP (one
    /// that came since `signals` was made included); `tell` hears where
    /// it listens, what each reload did and each unknown outcome, on a
    /// thread where a blocked write holds up no task. Then it stops
    /// accepting, waits for every running request and send, tells the
    /// unknown outcomes not told yet, and syncs the ledger. Runs on a
    /// multi-threaded tokio runtime with its I/O and time drivers.
    pub async fn run(
        self,
        ledger: Ledger,
        mut signals: Signals,
        mut tell: impl FnMut(Notice<'_>) -> std::io::Result<()>,
    ) -> Result<(), ServeError> {
        self.check()?;
        let io = |doing: &str| {
            let doing = doing.to_owned();
            move |error| ServeError::Io { doing, error }
        };
        signals
            .listen_for_stop()
            .map_err(io("listening for signals"))?;
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(io(&format!("listening on {}", self.listen)))?;
        let metrics = Arc::new(Metrics::default());
        let ledger: Arc<Embedded> = Arc::new(Embedded::new(ledger, metrics.clone()));
        let tls = self.tls.is_some();
        let (rail, mut heard) = notices::telling(self.rail);
        let setup = Setup {
            ledger: ledger.clone(),
            rail,
            tokens: self.tokens,
            metrics,
            limits: self.limits,
            tls: self.tls,
            tokens_file: self.tokens_file,
        };
        let server = start_with(listener, setup).map_err(io("starting the server"))?;
        let addr = server.addr();
        let told = told(&mut tell, Notice::Listening { addr, tls });
        if told.is_ok() {
            until_stopped(&server, &mut signals, &mut heard, &mut tell).await;
        }
        server.shut_down().await;
        tell_heard(&mut heard, &mut tell);
        if let Err(error) = ledger.library().sync().await {
            tracing::warn!(%error, "the last sync at shutdown failed");
        }
        told.map_err(io("writing the output"))
    }
}

/// Runs `tell` where a write that blocks (a full pipe) holds up no other
/// task: on a multi-threaded runtime, tokio moves the thread's tasks
/// elsewhere first.
fn told(
    tell: &mut impl FnMut(Notice<'_>) -> std::io::Result<()>,
    notice: Notice<'_>,
) -> std::io::Result<()> {
    let flavor = tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor());
    match flavor {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| tell(notice)),
        _ => tell(notice),
    }
}

/// Tells every unknown outcome heard so far, and how many were not kept.
fn tell_heard(heard: &mut Heard, tell: &mut impl FnMut(Notice<'_>) -> std::io::Result<()>) {
    while let Some(unknown) = heard.next_now() {
        tell_unknown(heard, &unknown, tell);
    }
    let count = heard.untold();
    if count > 0 {
        let _ = told(tell, Notice::Untold { count });
    }
}

/// Tells `unknown`, after how many were not kept before it. A notice that
/// cannot be told has nowhere else to go: it is in the ledger, and in the
/// operator's queue.
fn tell_unknown(
    heard: &Heard,
    unknown: &Unknown,
    tell: &mut impl FnMut(Notice<'_>) -> std::io::Result<()>,
) {
    let count = heard.untold();
    if count > 0 {
        let _ = told(tell, Notice::Untold { count });
    }
    let _ = told(tell, unknown.notice());
}

/// What stopped a wait: a SIGTERM or SIGINT.
struct Stop;

/// Tells unknown outcomes and reloads on every SIGHUP until SIGTERM or
/// SIGINT. A notice that cannot be told (its output closed) is dropped
/// and the service goes on: the reload itself was done, the outcome is
/// in the ledger.
async fn until_stopped(
    server: &Server,
    signals: &mut Signals,
    heard: &mut Heard,
    tell: &mut impl FnMut(Notice<'_>) -> std::io::Result<()>,
) {
    loop {
        tokio::select! {
            asked = signals.next() => match asked {
                Asked::Stop => return,
                Asked::Reload => {
                    if let Err(Stop) = reload(server, signals, tell).await {
                        return;
                    }
                }
            },
            Some(unknown) = heard.next() => tell_unknown(heard, &unknown, tell),
        }
    }
}

/// Reloads, while still answering signals: a SIGTERM or SIGINT stops
/// waiting for the reload (whose thread finishes, or hangs on a file,
/// alone), and SIGHUPs that come meanwhile are answered by one more
/// reload once it is done.
async fn reload(
    server: &Server,
    signals: &mut Signals,
    tell: &mut impl FnMut(Notice<'_>) -> std::io::Result<()>,
) -> Result<(), Stop> {
    let mut again = true;
    while again {
        again = false;
        let reload = server.reload();
        tokio::pin!(reload);
        let report = loop {
            tokio::select! {
                report = &mut reload => break report,
                asked = signals.next() => match asked {
                    Asked::Stop => return Err(Stop),
                    Asked::Reload => again = true,
                },
            }
        };
        let _ = told(tell, Notice::Reloaded(&report));
    }
    Ok(())
}
