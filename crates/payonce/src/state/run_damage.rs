//! What is done about damage found in a run after an opening believed it:
//! the run is set aside through its store, so the next opening sets
//! aside every snapshot naming it, and the pass that checks the runs' blocks in
//! the background says what it found.

use std::sync::Arc;

use crate::run_store::{RunStore, SetRunAside};
use crate::snapshot_format::error::SnapshotError;

/// How each run a state holds is set aside once a read finds it damaged
/// after an opening believed it (`RunStore::aside_hook`), so the next opening
/// sets aside every snapshot naming it: shared by the state's copies.
#[derive(Clone, Default)]
pub(crate) struct AsideHooks {
    by_run: Arc<std::sync::Mutex<std::collections::BTreeMap<u64, SetRunAside>>>,
}

impl std::fmt::Debug for AsideHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsideHooks").finish_non_exhaustive()
    }
}

impl AsideHooks {
    /// Learns how `store` sets run `number` aside, if it can.
    pub(crate) fn add(&self, store: &dyn RunStore, number: u64) {
        if let (Some(hook), Ok(mut by_run)) = (store.aside_hook(number), self.by_run.lock()) {
            by_run.insert(number, hook);
        }
    }

    /// Sets aside the run `error` names, if it is damage (not a failed
    /// read, which says nothing of the run's bytes, nor a lookup that
    /// needed a block not prefetched).
    pub(crate) fn set_aside(&self, error: &SnapshotError) {
        let run = match error {
            SnapshotError::Run { run, error } if error.is_corrupt() => *run,
            SnapshotError::Pair { run, .. } => *run,
            _ => return,
        };
        let hook = self
            .by_run
            .lock()
            .ok()
            .and_then(|by_run| by_run.get(&run).cloned());
        if let Some(hook) = hook {
            hook(error);
        }
    }
}

/// What the pass checking a state's runs in the background found so far.
#[derive(Debug, Default)]
pub(crate) struct RunsCheck {
    /// Every block of every run was read and checked.
    pub(crate) done: std::sync::atomic::AtomicBool,
    /// The first damage it found, in words.
    pub(crate) damage: std::sync::Mutex<Option<String>>,
}
