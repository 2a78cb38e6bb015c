//! The checksum pass over an archive an opening believed before reading
//! it ([`SnapshotFile::checked_in_background`]): a new PostgreSQL worker
//! serves once the snapshot's body and the archive's fences check, while
//! this pass reads and checks every block on a thread of its own. A block
//! that fails is told to its source, which sets the snapshot aside for the
//! next opening; a name in it fails with the same refusal whenever it is
//! read, so nothing is judged from it meanwhile.
//!
//! [`SnapshotFile::checked_in_background`]: crate::SnapshotFile::checked_in_background

use std::sync::Arc;
use std::time::Instant;

use tracing::{error, info, warn};

use super::archive_blocks::Blocks;
use crate::snapshot::error::SnapshotError;

/// Checks every block of `blocks` on a thread of its own; checks them here
/// if no thread can be started.
pub(super) fn check_in_background(blocks: Arc<Blocks>) -> Result<(), SnapshotError> {
    let checked = Arc::clone(&blocks);
    let started = std::thread::Builder::new()
        .name("payonce-archive-check".to_owned())
        .spawn(move || {
            let started = Instant::now();
            let result = checked.check_checksums();
            report(&checked, result, started);
        });
    match started {
        Ok(_) => Ok(()),
        Err(spawn_error) => {
            warn!(error = %spawn_error, "no thread for the archive's checks: checking it now");
            blocks.check_checksums()
        }
    }
}

/// Says what the pass over `blocks`, begun at `started`, found, and tells
/// their source of a refusal of their bytes (not of a failure to read
/// them, which says nothing of the snapshot).
fn report(blocks: &Blocks, checked: Result<(), SnapshotError>, started: Instant) {
    match checked {
        Ok(()) => info!(
            pairs = blocks.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "every block of the snapshot's archive checked"
        ),
        Err(refusal) => {
            error!(error = %refusal, "a block of the snapshot's archive failed its checks");
            if matches!(refusal, SnapshotError::Invalid { .. }) {
                blocks.refuse(&refusal);
            }
        }
    }
}
