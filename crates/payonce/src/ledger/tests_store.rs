//! A snapshot store in memory whose runs' reads go through a hook: tests
//! fail them, or watch when they happen.

use std::sync::Arc;

use payonce_runs::{RunError, RunSource};

use crate::snapshot::{
    DirSnapshots, RunOut, RunStore, SnapshotError, SnapshotStore, StoredSnapshot,
};

/// Told of every read of a run: a read it answers `true` to fails.
pub(super) type ReadHook = Arc<dyn Fn() -> bool + Send + Sync>;

/// Snapshots in memory whose runs' reads go through `hook`.
pub(super) struct Hooked {
    pub(super) store: DirSnapshots,
    pub(super) hook: ReadHook,
}

/// A run whose reads go through a hook.
struct HookedRun {
    run: Arc<dyn RunSource>,
    hook: ReadHook,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooked")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for HookedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedRun")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl RunSource for HookedRun {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        if (self.hook)() {
            let error = std::io::Error::other("the device is gone for now");
            return Err(RunError::read_failed(offset, len as u64, error));
        }
        self.run.read_at(offset, len, into)
    }

    fn byte_len(&self) -> u64 {
        self.run.byte_len()
    }
}

impl RunStore for Hooked {
    fn create_run(&self) -> Result<Box<dyn RunOut + '_>, SnapshotError> {
        self.store.create_run()
    }
    fn open_run(&self, number: u64) -> Result<Arc<dyn RunSource>, SnapshotError> {
        Ok(Arc::new(HookedRun {
            run: self.store.open_run(number)?,
            hook: Arc::clone(&self.hook),
        }))
    }
    fn list_runs(&self) -> Result<Vec<u64>, SnapshotError> {
        self.store.list_runs()
    }
    fn remove_run(&self, number: u64) -> Result<(), SnapshotError> {
        self.store.remove_run(number)
    }
}

impl SnapshotStore for Hooked {
    fn list(&self) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        self.store.list()
    }
    fn read(&self, snapshot: &StoredSnapshot) -> Result<Vec<u8>, SnapshotError> {
        self.store.read(snapshot)
    }
    fn write(&self, seq: u64, bytes: &[u8]) -> Result<StoredSnapshot, SnapshotError> {
        self.store.write(seq, bytes)
    }
    fn set_aside(&self, snapshot: &StoredSnapshot) -> Result<String, SnapshotError> {
        self.store.set_aside(snapshot)
    }
    fn prune(&self, kept: usize) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        self.store.prune(kept)
    }
}
