//! Where the runs of settled pairs are kept ([`RunStore`]): written once,
//! through a [`RunOut`] that makes a run durable before giving its number,
//! read where they lie, and removed only by a prune, once no kept snapshot
//! names them. [`MemRuns`] holds them in memory.
//!
//! It sits below both the state (`crate::state`) and the snapshots
//! (`crate::snapshot`), which both read runs through it. The other stores
//! are a `DirSnapshots`' files (`snapshot/dir_runs.rs`) and PostgreSQL's
//! tables (`payonce-postgres`, `runs.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use payonce_runs::{RunError, RunSink, RunSource};

use crate::snapshot_format::SnapshotError;

/// Where a ledger keeps its runs of settled pairs, beside its snapshots.
/// Every method may block on storage.
pub trait RunStore: Send + Sync + fmt::Debug {
    /// Starts a new run: its bytes are appended, then
    /// [`RunOut::finish`] makes it durable and numbers it.
    fn create_run(&self) -> Result<Box<dyn RunOut + '_>, SnapshotError>;
    /// Run `number`, to be read where it lies. Where the store can, it
    /// stays readable after a prune removes it.
    fn open_run(&self, number: u64) -> Result<Arc<dyn RunSource>, SnapshotError>;
    /// The numbers of every run held, in ascending order.
    fn list_runs(&self) -> Result<Vec<u64>, SnapshotError>;
    /// Removes run `number`.
    fn remove_run(&self, number: u64) -> Result<(), SnapshotError>;
    /// Whether an opening may believe a run's blocks before checking
    /// their checksums, leaving that to a pass in the background (a
    /// database, whose bytes would otherwise all cross the network before
    /// the first decision). Each block is still checked before a name is
    /// judged from it.
    fn checked_in_background(&self) -> bool {
        false
    }
    /// A way to set run `number` aside once a read finds it damaged after
    /// an opening believed it, so that the next opening sets aside every
    /// snapshot naming it and falls back: `None` (the default) where the
    /// store has none.
    fn aside_hook(&self, number: u64) -> Option<SetRunAside> {
        let _ = number;
        None
    }
}

/// Sets a run aside, told what damage was found in it.
pub type SetRunAside = Arc<dyn Fn(&SnapshotError) + Send + Sync>;

/// A run being written: appended to, then made durable whole.
pub trait RunOut: Send {
    /// Appends `bytes`.
    fn append(&mut self, bytes: &[u8]) -> Result<(), SnapshotError>;
    /// Makes the run durable, whole or not at all, and returns its number.
    fn finish(self: Box<Self>) -> Result<u64, SnapshotError>;
}

/// A [`RunOut`] as the runs crate writes into it. The first failure is
/// kept, to be told as it was.
pub(crate) struct OutSink<'a> {
    pub(crate) out: &'a mut dyn RunOut,
    pub(crate) failed: Option<SnapshotError>,
}

impl RunSink for OutSink<'_> {
    fn append(&mut self, bytes: &[u8]) -> Result<(), RunError> {
        self.out.append(bytes).map_err(|error| {
            let said = error.to_string();
            self.failed = Some(error);
            RunError::Io {
                run: None,
                op: "append",
                offset: 0,
                len: bytes.len() as u64,
                source: std::io::Error::other(said),
            }
        })
    }
}

/// Runs in memory: what [`crate::snapshots::encode`] and `decode` work
/// with when no store is at hand (an audit's comparison, a fuzz target,
/// the tests), and the runs a state sets apart in memory.
#[derive(Debug, Default)]
pub struct MemRuns {
    runs: Mutex<Held>,
}

impl MemRuns {
    /// Holds `bytes` as run `number`, as a store that wrote them would.
    pub fn insert(&self, number: u64, bytes: Vec<u8>) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.insert(number, Arc::new(bytes));
        }
    }

    /// The bytes of run `number`, if held.
    pub fn bytes(&self, number: u64) -> Option<Arc<Vec<u8>>> {
        self.runs.lock().ok()?.get(&number).cloned()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Held>, SnapshotError> {
        self.runs.lock().map_err(|_| SnapshotError::Store {
            detail: "the runs in memory: a writer panicked".to_owned(),
        })
    }
}

/// The runs a [`MemRuns`] holds, by number.
type Held = BTreeMap<u64, Arc<Vec<u8>>>;

/// A run being written into a [`MemRuns`].
struct MemOut<'a> {
    runs: &'a MemRuns,
    bytes: Vec<u8>,
}

impl RunOut for MemOut<'_> {
    fn append(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<u64, SnapshotError> {
        let mut runs = self.runs.lock()?;
        let number = runs.keys().next_back().map_or(1, |last| last + 1);
        runs.insert(number, Arc::new(self.bytes));
        Ok(number)
    }
}

impl RunStore for MemRuns {
    fn create_run(&self) -> Result<Box<dyn RunOut + '_>, SnapshotError> {
        Ok(Box::new(MemOut {
            runs: self,
            bytes: Vec::new(),
        }))
    }

    fn open_run(&self, number: u64) -> Result<Arc<dyn RunSource>, SnapshotError> {
        match self.lock()?.get(&number) {
            Some(bytes) => Ok(Arc::new(Arc::clone(bytes))),
            None => Err(missing(number)),
        }
    }

    fn list_runs(&self) -> Result<Vec<u64>, SnapshotError> {
        Ok(self.lock()?.keys().copied().collect())
    }

    fn remove_run(&self, number: u64) -> Result<(), SnapshotError> {
        self.lock()?.remove(&number);
        Ok(())
    }
}

/// A run the manifest names that the store does not hold.
pub(crate) fn missing(number: u64) -> SnapshotError {
    SnapshotError::Store {
        detail: format!("run {number}, which the manifest names, is not in the store"),
    }
}

/// `error` from run `run`.
pub(crate) fn run_error(run: u64, error: RunError) -> SnapshotError {
    SnapshotError::Run { run, error }
}
