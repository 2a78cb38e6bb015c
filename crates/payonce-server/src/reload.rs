//! Rereading the service's files while it runs (SIGHUP, or
//! [`Server::reload`](crate::Server::reload)): the tokens file, the
//! listener's TLS files, the rail's TLS files. Each set is read whole
//! before it replaces the old one, and a set that cannot be read leaves
//! the old one in use; the others are still taken. New requests, new
//! handshakes and new sends see the new sets; a connection already open
//! keeps the TLS configuration it started with.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use payonce_model::escape::Escaped;

use crate::rail::Rail;
use crate::swap::Swap;
use crate::tls::{ServerTls, ServerTlsError};
use crate::tokens::{ExposedTokens, Tokens, TokensError};

/// What one reload did, set by set: `None` for a set the service does not
/// have (no tokens file to reread, no TLS, a rail without files).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Reload {
    /// The tokens file: how many callers it names now, or why the old
    /// tokens stay.
    pub tokens: Option<Result<usize, TokensError>>,
    /// The tokens file read exposes tokens in clear to others.
    pub exposed: Option<ExposedTokens>,
    /// The listener's certificate, key and client CA.
    pub tls: Option<Result<(), ServerTlsError>>,
    /// The rail's roots, client certificate and key.
    pub rail: Option<Result<(), Box<dyn Error + Send + Sync>>>,
    /// The reload did not finish (the service is stopping); each set is
    /// the old one or the new one.
    pub interrupted: bool,
}

impl Reload {
    /// Whether a set was kept because its files could not be read.
    pub fn refused(&self) -> bool {
        self.interrupted
            || matches!(self.tokens, Some(Err(_)))
            || matches!(self.tls, Some(Err(_)))
            || matches!(self.rail, Some(Err(_)))
    }
}

/// One line: what was reloaded, and what was kept and why.
impl std::fmt::Display for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.interrupted {
            return f.write_str("the reload was interrupted: the service is stopping");
        }
        let mut reloaded = Vec::new();
        let mut kept = Vec::new();
        match &self.tokens {
            Some(Ok(count)) => reloaded.push(format!("the tokens file ({count} callers)")),
            Some(Err(error)) => kept.push(format!("the old tokens ({error})")),
            None => {}
        }
        match &self.tls {
            Some(Ok(())) => reloaded.push("the listener's TLS files".to_owned()),
            Some(Err(error)) => kept.push(format!("the listener's old TLS files ({error})")),
            None => {}
        }
        match &self.rail {
            Some(Ok(())) => reloaded.push("the rail's TLS files".to_owned()),
            Some(Err(error)) => kept.push(format!(
                "the rail's old TLS files ({})",
                Escaped(&error.to_string())
            )),
            None => {}
        }
        let reloaded = match reloaded.is_empty() {
            true => "nothing to reload".to_owned(),
            false => format!("reloaded {}", reloaded.join(", ")),
        };
        match kept.is_empty() {
            true => f.write_str(&reloaded),
            false => write!(f, "reload refused, kept {}; {reloaded}", kept.join("; ")),
        }
    }
}

/// Everything a reload replaces. Clones share it.
#[derive(Clone)]
pub(crate) struct Reloader {
    pub(crate) tokens: Option<(PathBuf, Arc<Swap<Tokens>>)>,
    pub(crate) tls: Option<ServerTls>,
    pub(crate) rail: Arc<dyn Rail>,
}

impl Reloader {
    /// Rereads every set; blocks on the files (run it off the executor
    /// threads).
    pub(crate) fn reload(&self) -> Reload {
        let mut reload = Reload::default();
        if let Some((file, current)) = &self.tokens {
            reload.tokens = Some(Tokens::read(file).map(|tokens| {
                reload.exposed = tokens.exposure(file);
                let count = tokens.len();
                current.set(tokens);
                count
            }));
        }
        reload.tls = self.tls.as_ref().map(ServerTls::reload);
        reload.rail = match self.rail.reload() {
            Ok(true) => Some(Ok(())),
            Ok(false) => None,
            Err(error) => Some(Err(error)),
        };
        match reload.refused() {
            true => tracing::warn!(%reload, "a reload kept some of the old configuration"),
            false => tracing::info!(%reload, "reloaded"),
        }
        reload
    }
}
