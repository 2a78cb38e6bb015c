//! The accept loop: one HTTP/1 connection per accepted socket, within the
//! service's limits, and a graceful shutdown that lets running requests and
//! sends finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

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
    /// Time to send the request's headers; a slower client is cut off.
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
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    shutdown: CancellationToken,
    stopped: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Serves `router` on `listener`; `sends` tracks the sends a shutdown
    /// waits for.
    pub fn start(
        listener: TcpListener,
        router: Router,
        limits: Limits,
        sends: TaskTracker,
    ) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let stopped = tokio::spawn(accept_loop(
            listener,
            router,
            limits,
            shutdown.clone(),
            sends,
        ));
        Ok(Server {
            addr,
            shutdown,
            stopped,
        })
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

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
    sends: TaskTracker,
) {
    let graceful = GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = connections.clone().acquire_owned() => permit,
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
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_time_max)
            .max_buf_size(limits.headers_len_max.max(8192))
            .max_headers(HEADERS_COUNT_MAX);
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    info!("shutting down: waiting for running requests");
    graceful.shutdown().await;
    sends.close();
    info!(sends = sends.len(), "waiting for running sends");
    sends.wait().await;
}
