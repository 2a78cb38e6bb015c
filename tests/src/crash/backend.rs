//! How the crash test opens, reopens and verifies a ledger: the one part of
//! the harness that depends on where the ledger keeps its events.

use std::path::{Path, PathBuf};

use payonce::{Config, Ledger, LedgerError, SnapshotPolicy, Verification};

/// The worker every child of a PostgreSQL ledger runs as: a restarted
/// service keeps its name, so its start ends the sends of the one killed.
pub(super) const CHILD_WORKER: &str = "crash-child";

/// Where the ledger under test keeps its events. The child takes the name
/// as its first argument; the driver and the checks call the same methods,
/// so another backend (a PostgreSQL store, say) runs the same kills,
/// checks and table by adding a variant here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The log's segment files in a directory on the local file system.
    File,
    /// A database of its own on the PostgreSQL cluster the test binary
    /// shares; its location is its URL.
    Postgres,
}

impl Backend {
    /// Every backend, for parsing names.
    pub const ALL: [Backend; 2] = [Backend::File, Backend::Postgres];

    /// The name the child is given.
    pub fn name(self) -> &'static str {
        match self {
            Backend::File => "file",
            Backend::Postgres => "postgres",
        }
    }

    /// The backend called `name`.
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL
            .into_iter()
            .find(|backend| backend.name() == name)
    }

    /// Where a new ledger's life keeps its ledger: a directory under `dir`,
    /// or a new database with the schema applied.
    ///
    /// # Panics
    /// When no database can be made for it.
    pub fn new_location(self, dir: &Path) -> PathBuf {
        match self {
            Backend::File => dir.join("ledger"),
            Backend::Postgres => payonce_postgres::cluster::test_database()
                .expect("a cluster was started before the run")
                .into(),
        }
    }

    /// Opens the ledger at `location` for the child to submit on, creating
    /// it the first time. A creation a kill cut short is made again: it
    /// left no log, so nothing can have been decided in it.
    pub fn open_for_child(self, location: &Path) -> Result<Ledger, LedgerError> {
        match self {
            Backend::File => match Ledger::open_with(location, child_config()) {
                Err(LedgerError::NoLog { .. }) => Ledger::init_with(location, child_config()),
                opened => opened,
            },
            Backend::Postgres => {
                let url = url(location);
                match payonce_postgres::open(url, CHILD_WORKER, Config::default()) {
                    Err(LedgerError::NoLog { .. }) => {
                        drop(payonce_postgres::init(url, Config::default())?);
                        payonce_postgres::open(url, CHILD_WORKER, Config::default())
                    }
                    opened => opened,
                }
            }
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
            Backend::Postgres => {
                match payonce_postgres::open(url(location), CHILD_WORKER, Config::default()) {
                    Err(LedgerError::NoLog { .. }) => Ok(None),
                    opened => opened.map(Some),
                }
            }
        }
    }

    /// Replays the ledger at `location` read-only, re-deriving every
    /// recorded decision.
    pub fn verify(self, location: &Path) -> Result<Verification, LedgerError> {
        match self {
            Backend::File => Ledger::verify(location),
            Backend::Postgres => payonce_postgres::verify(url(location)).map(|(report, _)| report),
        }
    }
}

/// Events between the snapshots a child takes: so few that a kill often
/// lands while one is being written.
const CHILD_SNAPSHOT_EVENTS: u64 = 40;

/// How a child opens a file ledger: taking snapshots on its thread every
/// [`CHILD_SNAPSHOT_EVENTS`] events, one after another with no rest.
fn child_config() -> Config {
    Config {
        snapshots: SnapshotPolicy {
            events: CHILD_SNAPSHOT_EVENTS,
            share_max: 100,
            ..SnapshotPolicy::never()
        },
        ..Config::default()
    }
}

/// Whether a kill cut a snapshot's write short in the file ledger at
/// `location`: its temporary file is there, which only a finished write
/// renames.
pub(super) fn snapshot_write_cut(backend: Backend, location: &Path) -> bool {
    left_behind(backend, location, ".snapshot.tmp")
}

/// Whether a kill cut a run's write short (a snapshot's new run, or a
/// merge's) in the file ledger at `location`: its temporary file is there.
pub(super) fn run_write_cut(backend: Backend, location: &Path) -> bool {
    left_behind(backend, location, ".run.tmp")
}

/// Whether the snapshots' directory of the file ledger at `location` holds
/// a file whose name ends with `suffix`.
fn left_behind(backend: Backend, location: &Path, suffix: &str) -> bool {
    backend == Backend::File
        && std::fs::read_dir(location.join(payonce::SNAPSHOTS_DIR)).is_ok_and(|entries| {
            (entries.filter_map(Result::ok))
                .any(|entry| entry.file_name().to_string_lossy().ends_with(suffix))
        })
}

/// A PostgreSQL ledger's location: its URL.
fn url(location: &Path) -> &str {
    location.to_str().unwrap_or_default()
}
