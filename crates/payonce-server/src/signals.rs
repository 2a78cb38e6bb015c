//! The signals `payonce serve` answers: SIGTERM and SIGINT stop it,
//! SIGHUP reloads its files.
//!
//! SIGHUP's handler is installed when [`Signals`] is made, which
//! `payonce serve` does as soon as its runtime is built, before it reads a
//! file or opens the ledger: from then on a SIGHUP never ends the process
//! (its default action). One that comes before the service listens is
//! remembered, and rereads the files once it does: a file rotated during
//! start-up may have been read before the rotation.
//!
//! SIGTERM's and SIGINT's handlers are installed when
//! [`Service::run`](crate::Service::run) starts, once the ledger is open
//! and before the service listens. Until then they keep their default
//! action, so a start-up that takes long (a ledger's first replay) can
//! still be cut short at once: nothing was served yet, and an opening cut
//! short is repaired by the next.

/// What a signal asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// SIGTERM or SIGINT: stop.
    Stop,
    /// SIGHUP: reload the files.
    Reload,
}

/// The installed handlers, for [`Service::run`](crate::Service::run).
#[cfg(unix)]
#[derive(Debug)]
pub struct Signals {
    hangup: tokio::signal::unix::Signal,
    /// SIGTERM's and SIGINT's, once the service runs.
    stop: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

#[cfg(unix)]
impl Signals {
    /// Installs SIGHUP's handler; fails only if the operating system
    /// refuses it. Panics outside a tokio runtime with its I/O driver
    /// (call it inside one, or after `Runtime::enter`).
    pub fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            hangup: signal(SignalKind::hangup())?,
            stop: None,
        })
    }

    /// Installs SIGTERM's and SIGINT's handlers (on the runtime).
    pub(crate) fn listen_for_stop(&mut self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        if self.stop.is_none() {
            self.stop = Some((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            ));
        }
        Ok(())
    }

    /// The next signal; SIGTERM and SIGINT only once their handlers are
    /// installed.
    pub(crate) async fn next(&mut self) -> Asked {
        let Some((terminate, interrupt)) = &mut self.stop else {
            self.hangup.recv().await;
            return Asked::Reload;
        };
        tokio::select! {
            _ = terminate.recv() => Asked::Stop,
            _ = interrupt.recv() => Asked::Stop,
            _ = self.hangup.recv() => Asked::Reload,
        }
    }
}

/// Elsewhere, Ctrl-C stops the service; there is no reload signal.
#[cfg(not(unix))]
#[derive(Debug)]
pub struct Signals;

#[cfg(not(unix))]
impl Signals {
    /// Nothing to install: Ctrl-C is listened for when the service runs.
    pub fn new() -> std::io::Result<Signals> {
        Ok(Signals)
    }

    pub(crate) fn listen_for_stop(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    pub(crate) async fn next(&mut self) -> Asked {
        let _ = tokio::signal::ctrl_c().await;
        Asked::Stop
    }
}
