//! Rereading the service's files while it runs (SIGHUP, or
//! [`Server::reload`](crate::Server::reload)): the tokens file, the
//! listener's TLS files, the rail's TLS files. Each set is read whole
//! before it replaces the old one, and a set that cannot be read leaves
//! the old one in use; the others are still taken. New requests, new
//! handshakes and new sends see the new sets; a connection already open
//! keeps the TLS configuration it started with.

use std::error::Error;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

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
    /// The rail's CA, client certificate and key.
    pub rail: Option<Result<(), Box<dyn Error + Send + Sync>>>,
    /// The reload ended without a report: it panicked, or its thread could
    /// not be started. Each set is the old one or the new one.
    pub unfinished: bool,
}

impl Reload {
    /// Whether a set was kept because its files could not be read.
    pub fn refused(&self) -> bool {
        self.unfinished
            || matches!(self.tokens, Some(Err(_)))
            || matches!(self.tls, Some(Err(_)))
            || matches!(self.rail, Some(Err(_)))
    }

    /// A reload that ended without a report.
    pub(crate) fn unfinished() -> Reload {
        Reload {
            unfinished: true,
            ..Reload::default()
        }
    }
}

/// One line: what was reloaded, and what was kept and why.
impl std::fmt::Display for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unfinished {
            return f.write_str(
                "the reload did not finish (it panicked, or could not start); each set is the \
                 old one or the new one: signal again",
            );
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
        match (kept.is_empty(), reloaded.is_empty()) {
            (true, true) => f.write_str("nothing to reload"),
            (true, false) => write!(f, "reloaded {}", reloaded.join(", ")),
            (false, true) => write!(f, "reload refused, kept {}", kept.join("; ")),
            (false, false) => write!(
                f,
                "reload refused, kept {}; reloaded {}",
                kept.join("; "),
                reloaded.join(", ")
            ),
        }
    }
}

/// Everything a reload replaces. Clones share it, and one reload runs at a
/// time: two reloads at once could otherwise apply the older reading of a
/// file last.
#[derive(Clone)]
pub(crate) struct Reloader {
    pub(crate) tokens: Option<(PathBuf, Arc<Swap<Tokens>>)>,
    pub(crate) tls: Option<ServerTls>,
    pub(crate) rail: Arc<dyn Rail>,
    pub(crate) one_at_a_time: Arc<Mutex<()>>,
}

impl Reloader {
    /// Rereads every set, after any reload already running has applied
    /// its own; blocks on the files (run it off the executor threads).
    pub(crate) fn reload(&self) -> Reload {
        // A reload that panicked left whole sets behind (each is replaced
        // in one assignment): the next one may go on.
        let _one = self
            .one_at_a_time
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
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
        reload
    }
}
