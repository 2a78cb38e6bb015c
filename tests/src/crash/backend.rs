//! How the crash test opens, reopens and verifies a ledger: the one part of
//! the harness that depends on where the ledger keeps its events.

use std::path::Path;

use payonce::{Ledger, LedgerError, VerifyReport};

/// Where the ledger under test keeps its events. The child takes the name
/// as its first argument; the driver and the checks call the same methods,
/// so another backend (a PostgreSQL store, say) runs the same kills,
/// checks and table by adding a variant here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The log's segment files in a directory on the local file system.
    File,
}

impl Backend {
    /// Every backend, for parsing names.
    pub const ALL: [Backend; 1] = [Backend::File];

    /// The name the child is given.
    pub fn name(self) -> &'static str {
        match self {
            Backend::File => "file",
        }
    }

    /// The backend called `name`.
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL
            .into_iter()
            .find(|backend| backend.name() == name)
    }

    /// Opens the ledger at `location` for the child to submit on, creating
    /// it the first time. A creation a kill cut short is made again: it
    /// left no log, so nothing can have been decided in it.
    pub fn open_for_child(self, location: &Path) -> Result<Ledger, LedgerError> {
        match self {
            Backend::File => match Ledger::open(location) {
                Err(LedgerError::NoLog { .. }) => Ledger::init(location),
                opened => opened,
            },
        }
    }

    /// Reopens the ledger at `location` after a kill, as a restarted
    /// service would; `None` if no creation of it ever completed.
    pub fn reopen(self, location: &Path) -> Result<Option<Ledger>, LedgerError> {
        match self {
            Backend::File => match Ledger::open(location) {
                Err(LedgerError::NoLog { .. }) => Ok(None),
                opened => opened.map(Some),
            },
        }
    }

    /// Replays the ledger at `location` read-only, re-deriving every
    /// recorded decision.
    pub fn verify(self, location: &Path) -> Result<VerifyReport, LedgerError> {
        match self {
            Backend::File => Ledger::verify(location),
        }
    }
}
