//! The signals `payonce serve` answers: SIGTERM and SIGINT stop it,
//! SIGHUP reloads its files. Every handler is installed when [`Signals`]
//! is made, before the service says it listens, so a signal sent as soon
//! as it does is never taken by the default action (SIGHUP's ends the
//! process).

/// What a signal asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// SIGTERM or SIGINT: stop.
    Stop,
    /// SIGHUP: reload the files.
    Reload,
}

/// The installed handlers.
#[cfg(unix)]
pub(crate) struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    /// Installs the handlers (on a tokio runtime).
    pub(crate) fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal.
    pub(crate) async fn next(&mut self) -> Asked {
        tokio::select! {
            _ = self.terminate.recv() => Asked::Stop,
            _ = self.interrupt.recv() => Asked::Stop,
            _ = self.hangup.recv() => Asked::Reload,
        }
    }
}

/// Elsewhere, Ctrl-C stops the service; there is no reload signal.
#[cfg(not(unix))]
pub(crate) struct Signals;

#[cfg(not(unix))]
impl Signals {
    pub(crate) fn new() -> std::io::Result<Signals> {
        Ok(Signals)
    }

    pub(crate) async fn next(&mut self) -> Asked {
        let _ = tokio::signal::ctrl_c().await;
        Asked::Stop
    }
}
