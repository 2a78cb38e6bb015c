//! Where a lookup in the runs of settled pairs reads its blocks: through
//! the cache, or from blocks prefetched before the caller took its lock.

use payonce_runs::{BlockCache, Prefetched, RecordRef, RunSet};

use crate::snapshot_format::error::SnapshotError;

/// A refusal of what run `run` holds, for a name that reads it.
pub(super) fn run_error(error: payonce_runs::RunError) -> SnapshotError {
    let run = match &error {
        payonce_runs::RunError::Corrupt { run, .. } => *run,
        _ => 0,
    };
    SnapshotError::Run { run, error }
}

/// Where a lookup in the runs reads its blocks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reading<'p> {
    /// Through the cache, reading what it lacks: an opening, a replay, an
    /// audit.
    Cache,
    /// From blocks read before the caller took its lock, reading nothing.
    Prefetched(&'p Prefetched),
}

impl Reading<'_> {
    /// The newest record of `key` in `runs`.
    pub(super) fn get(
        self,
        runs: &RunSet,
        cache: &BlockCache,
        key: &str,
    ) -> Result<Option<RecordRef>, SnapshotError> {
        match self {
            Reading::Cache => runs.get(cache, key.as_bytes()),
            Reading::Prefetched(blocks) => runs.get_prefetched(blocks, key.as_bytes()),
        }
        .map_err(run_error)
    }

    /// The newest record of withdrawal `id` in `runs`.
    pub(super) fn get_by_secondary(
        self,
        runs: &RunSet,
        cache: &BlockCache,
        id: &str,
    ) -> Result<Option<RecordRef>, SnapshotError> {
        match self {
            Reading::Cache => runs.get_by_secondary(cache, id.as_bytes()),
            Reading::Prefetched(blocks) => runs.get_by_secondary_prefetched(blocks, id.as_bytes()),
        }
        .map_err(run_error)
    }
}

/// Whether `error` is a lookup through prefetched blocks that needed
/// another: nothing is wrong, the runs changed since the prefetch.
pub(crate) fn is_not_prefetched(error: &SnapshotError) -> bool {
    matches!(
        error,
        SnapshotError::Run {
            error: payonce_runs::RunError::NotPrefetched { .. },
            ..
        }
    )
}
