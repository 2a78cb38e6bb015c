//! The accept loop: one HTTP/1 connection per accepted socket, over TLS
//! when the service has it, within the service's limits, and a graceful
//! shutdown that lets running requests and sends finish.
//!
//! One deadline, set at the accept, covers a connection's TLS handshake
//! and its first request's headers (`FirstDeadline`, hyper's timer for the
//! connection); later requests' headers get the whole header read time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::rt::{Sleep, Timer};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::metrics::{HandshakeFailure, Metrics};
use crate::reload::{Reload, Reloader};
use crate::tls::ServerTls;

/// Default for [`Limits::connections_max`].
pub const CONNECTIONS_MAX: usize = 256;
/// Default for [`Limits::headers_len_max`]: the request line and headers,
/// in bytes (hyper's read buffer; 8 KiB at least).
pub const HEADERS_LEN_MAX: usize = 16 * 1024;
/// Most header fields in a request.
pub const HEADERS_COUNT_MAX: usize = 64;
/// Default for [`Limits::header_read_time_max`].
pub const HEADER_READ_TIME_MAX: Duration = Duration::from_secs(10);
/// Default for [`Limits::request_time_max`].
pub const REQUEST_TIME_MAX: Duration = Duration::from_secs(30);

/// The service's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait in the listen backlog.
    pub connections_max: usize,
    /// Bytes of request line and headers; more is answered 431.
    pub headers_len_max: usize,
    /// Time from a connection's accept to the end of its first request's
    /// headers, over TLS the handshake included (one deadline for both),
    /// and then for each later request's headers; a slower client is cut
    /// off.
    pub header_read_time_max: Duration,
    /// Time to answer a request; a slower answer is a 503 (a submission's
    /// send goes on and records its outcome).
    pub request_time_max: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections_max: CONNECTIONS_MAX,
            headers_len_max: HEADERS_LEN_MAX,
            header_read_time_max: HEADER_READ_TIME_MAX,
            request_time_max: REQUEST_TIME_MAX,
        }
    }
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    shutdown: CancellationToken,
    stopped: tokio::task::JoinHandle<()>,
    reloader: Option<Reloader>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Serves `router` on `listener`, over TLS with `tls`; `sends` tracks
    /// the sends a shutdown waits for, and `metrics` counts the handshakes
    /// that fail.
    pub fn start(
        listener: TcpListener,
        router: Router,
        limits: Limits,
        sends: TaskTracker,
        tls: Option<ServerTls>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let connections = Connections {
            router,
            limits,
            tls,
            metrics,
            shutdown: shutdown.clone(),
        };
        let stopped = tokio::spawn(accept_loop(listener, connections, sends));
        Ok(Server {
            addr,
            shutdown,
            stopped,
            reloader: None,
        })
    }

    /// The server, reloading what `reloader` holds.
    pub(crate) fn reloading(self, reloader: Reloader) -> Server {
        Server {
            reloader: Some(reloader),
            ..self
        }
    }

    /// Rereads the service's files (what SIGHUP does to `payonce serve`):
    /// the tokens file, the listener's TLS files and the rail's, each set
    /// all or nothing, after any reload already running has applied its
    /// own. It runs on a thread of its own, so a read that never ends (a
    /// FIFO, a hung network mount) holds neither an executor thread nor
    /// the runtime's shutdown: a caller may stop waiting for it (drop the
    /// future, as `payonce serve` does on SIGTERM), and the thread then
    /// finishes, or hangs, alone. A server started with [`Server::start`]
    /// alone has nothing to reload.
    pub async fn reload(&self) -> Reload {
        let Some(reloader) = self.reloader.clone() else {
            return Reload::default();
        };
        let (report, reported) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("payonce-reload".into())
            .spawn(move || {
                // The receiver is gone only if the caller stopped waiting.
                let _ = report.send(reloader.reload());
            });
        if spawned.is_err() {
            return Reload::unfinished();
        }
        // The sender is dropped unsent only if the reload panicked.
        reported.await.unwrap_or_else(|_| Reload::unfinished())
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets every running request and send finish, and
    /// returns once they have.
    pub async fn shut_down(self) {
        self.shutdown.cancel();
        if let Err(error) = self.stopped.await {
            warn!(%error, "the accept loop ended badly");
        }
    }
}

/// What every connection is served with.
struct Connections {
    router: Router,
    limits: Limits,
    tls: Option<ServerTls>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
}

async fn accept_loop(listener: TcpListener, connections: Connections, sends: TaskTracker) {
    let graceful = GracefulShutdown::new();
    let shutdown = connections.shutdown.clone();
    let permits = Arc::new(Semaphore::new(connections.limits.connections_max.max(1)));
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => permit,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors, say: wait a moment for some to
                // close rather than spin.
                warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        tokio::spawn(connections.serve(stream, graceful.watcher(), permit));
    }
    drop(listener);
    info!("shutting down: waiting for running requests");
    graceful.shutdown().await;
    sends.close();
    info!(sends = sends.len(), "waiting for running sends");
    sends.wait().await;
}

impl Connections {
    /// One connection, in a task of its own: the TLS handshake (with the
    /// configuration as it is when the connection was accepted, and cut
    /// short by a shutdown), then HTTP/1. The handshake and the first
    /// request's headers share one deadline, the header read time from the
    /// accept, so a slow handshake leaves less time for the headers, not
    /// more. The permit counts it against `connections_max` until it
    /// closes.
    fn serve(
        &self,
        stream: TcpStream,
        watcher: Watcher,
        permit: OwnedSemaphorePermit,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let deadline = tokio::time::Instant::now() + self.limits.header_read_time_max;
        let acceptor = self.tls.as_ref().map(ServerTls::acceptor);
        let (builder, router) = (self.http(deadline.into_std()), self.router.clone());
        let (shutdown, metrics) = (self.shutdown.clone(), self.metrics.clone());
        async move {
            let Some(acceptor) = acceptor else {
                let _ = watcher.watch(serve_http(&builder, stream, router)).await;
                drop(permit);
                return;
            };
            // rustls writes a handshake flight, and an answer, as several
            // records; with Nagle's algorithm each write after the first
            // waits for the peer's ACK, which a delayed ACK holds for 40 ms.
            if let Err(error) = stream.set_nodelay(true) {
                debug!(%error, "TCP_NODELAY could not be set");
            }
            let handshake = tokio::time::timeout_at(deadline, acceptor.accept(stream));
            let tls = tokio::select! {
                () = shutdown.cancelled() => return,
                handshake = handshake => handshake,
            };
            match tls {
                Ok(Ok(stream)) => {
                    let _ = watcher.watch(serve_http(&builder, stream, router)).await;
                }
                Ok(Err(error)) => {
                    metrics.handshake_failed(HandshakeFailure::Refused);
                    debug!(%error, "a TLS handshake failed");
                }
                Err(_) => {
                    metrics.handshake_failed(HandshakeFailure::TimedOut);
                    debug!("a TLS handshake took longer than the header read time");
                }
            }
            drop(permit);
        }
    }

    /// hyper's HTTP/1 settings within the limits, for a connection whose
    /// first request's headers must be in by `first_deadline`.
    fn http(&self, first_deadline: Instant) -> http1::Builder {
        let mut builder = http1::Builder::new();
        builder
            .timer(FirstDeadline::new(first_deadline))
            .header_read_timeout(self.limits.header_read_time_max)
            .max_buf_size(self.limits.headers_len_max.max(8192))
            .max_headers(HEADERS_COUNT_MAX);
        builder
    }
}

/// hyper's timer for one connection: tokio's, but its first sleep (the one
/// hyper starts for the first request's headers) ends by the deadline
/// set at the accept, which the TLS handshake used too. Later requests'
/// header reads get the whole header read time.
#[derive(Debug)]
struct FirstDeadline {
    tokio: TokioTimer,
    first: Instant,
    used: AtomicBool,
}

impl FirstDeadline {
    fn new(first: Instant) -> FirstDeadline {
        FirstDeadline {
            tokio: TokioTimer::new(),
            first,
            used: AtomicBool::new(false),
        }
    }

    /// `deadline`, or the first deadline if it is sooner and this is the
    /// first sleep.
    fn bounded(&self, deadline: Instant) -> Instant {
        match self.used.swap(true, Ordering::Relaxed) {
            false => deadline.min(self.first),
            true => deadline,
        }
    }
}

impl Timer for FirstDeadline {
    fn sleep(&self, duration: Duration) -> std::pin::Pin<Box<dyn Sleep>> {
        self.sleep_until(self.now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> std::pin::Pin<Box<dyn Sleep>> {
        self.tokio.sleep_until(self.bounded(deadline))
    }

    fn now(&self) -> Instant {
        self.tokio.now()
    }

    fn reset(&self, sleep: &mut std::pin::Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        self.tokio.reset(sleep, self.bounded(new_deadline));
    }
}

/// HTTP/1 over `stream`, plain or TLS.
fn serve_http<S>(
    builder: &http1::Builder,
    stream: S,
    router: Router,
) -> http1::Connection<TokioIo<S>, TowerToHyperService<Router>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
}
