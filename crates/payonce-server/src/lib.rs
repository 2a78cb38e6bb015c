//! # The payonce HTTP service
//!
//! This crate is `payonce serve`: the ledger over HTTP, for custody
//! services written in any language. A client creates a withdrawal, then
//! submits it under an `Idempotency-Key`; the service claims the key on
//! stable storage, sends through the [`Rail`], records the outcome and
//! answers it, and answers the same key again with the same outcome
//! without a second send. An operator lists the keys in flight and closes
//! them. The contract, status by status, is `docs/http.md`, and
//! `docs/openapi.yaml` describes it for machines.
//!
//! The service runs on an [`Embedded`] ledger: the payonce library in this
//! process, through `AsyncLedger`, on a file ledger or as one worker of a
//! PostgreSQL ledger several workers share. Callers are named by a bearer token from a [`Tokens`] file (each
//! token in clear or as its SHA-256), as a client or an operator; a
//! client's key is scoped to it ([`scope`]), so two clients' keys never
//! name one ledger key. Every refusal is RFC 9457
//! problem+json with a stable type ([`problem`]), naming a holder key only
//! to the client that owns it and to operators. [`Metrics`] counts every
//! decision and times every durable commit, in Prometheus text.
//!
//! [`Server`] is the accept loop: hyper's HTTP/1 connections, over TLS
//! with a [`ServerTls`] (mutual TLS with a client CA), within [`Limits`]
//! (connections, one deadline for the handshake and the headers, header
//! bytes, request time), and a graceful shutdown that waits for every
//! running send, so SIGTERM never cuts a send short. [`start`] runs it on
//! a listener in plain HTTP, [`start_with`] as a [`Setup`] says;
//! [`Server::reload`] rereads the tokens file, the listener's TLS files
//! and the rail's, each set all or nothing and one reload at a time, for
//! new requests, handshakes and sends, while open connections keep theirs.
//! [`Service::run`] runs it as `payonce serve` does: until SIGTERM or
//! SIGINT, reloading on SIGHUP ([`Signals`]), and telling the one running
//! it what an operator must see ([`Notice`]) without a `tracing`
//! subscriber.
//!
//! The service does not decide anything: every decision is the `payonce`
//! library's, and the service maps the library's typed answers to HTTP.
//! It does not open or create a ledger, nor parse a command line: the
//! `payonce` binary (`payonce-cli`) does both and hands it a `Ledger`. It
//! holds no state of its own beyond counters: whatever it answered is in
//! the ledger's log.
//!
//! ```
//! use std::sync::Arc;
//! use payonce_server::rail::ScriptedRail;
//! use payonce_server::{Embedded, Limits, Metrics, Tokens};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let ledger = payonce::Ledger::init(dir.path())?;
//! let tokens = Tokens::parse(
//!     "[clients]\nalice = \"alice-token-0123456789\"\n",
//!     std::path::Path::new("tokens.toml"),
//! )?;
//! let runtime = tokio::runtime::Runtime::new()?;
//! runtime.block_on(async {
//!     let metrics = Arc::new(Metrics::default());
//!     let ledger = Arc::new(Embedded::new(ledger, metrics.clone()));
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//!     let rail = Arc::new(ScriptedRail::default());
//!     let limits = Limits::default();
//!     let server = payonce_server::start(listener, ledger, rail, tokens, metrics, limits)?;
//!     println!("listening on http://{}", server.addr());
//!     server.shut_down().await; // waits for running requests and sends
//!     Ok::<_, std::io::Error>(())
//! })?;
//! # Ok(())
//! # }
//! ```

pub mod embedded;
pub mod metrics;
pub mod problem;
pub mod rail;
pub mod scope;
pub mod server;
pub mod tls;
pub mod tokens;

mod api;
mod notices;
mod reload;
mod service;
mod signals;
mod swap;

pub use crate::api::{BODY_LEN_MAX, REPLAYED_HEADER};
pub use crate::embedded::Embedded;
pub use crate::metrics::{HandshakeFailure, Metrics};
pub use crate::notices::{NOTICES_WAITING_MAX, Notice};
pub use crate::rail::Rail;
pub use crate::reload::Reload;
pub use crate::server::{Limits, Server};
pub use crate::service::{ServeError, Service, Setup, Transport, start, start_with};
pub use crate::signals::Signals;
pub use crate::tls::{ServerTls, ServerTlsFiles};
pub use crate::tokens::Tokens;
