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
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use super::State;
use super::archive_blocks::Blocks;
use crate::snapshot_format::error::SnapshotError;

/// How many times the pass starts over after a failure to read (a lost
/// connection), waiting twice as long each time from
/// [`ARCHIVE_CHECK_RETRY_DELAY`]: chunks read already are kept, so a pass
/// started over reads only the rest.
pub const ARCHIVE_CHECK_RETRIES_MAX: u32 = 8;

/// The wait before the pass first starts over.
pub const ARCHIVE_CHECK_RETRY_DELAY: Duration = Duration::from_millis(250);

impl State {
    /// Starts the pass over the archive of a state just loaded from a
    /// snapshot that was believed, if its source leaves its blocks to one;
    /// checks them here if no thread can be started.
    pub(crate) fn start_archive_check(&self) -> Result<(), SnapshotError> {
        let Some(archived) = self.archive_blocks() else {
            return Ok(());
        };
        if !archived.checked_in_background() {
            return Ok(());
        }
        let blocks = Arc::clone(archived);
        let started = std::thread::Builder::new()
            .name("payonce-archive-check".to_owned())
            .spawn(move || check_with_retries(&blocks));
        match started {
            Ok(_) => Ok(()),
            Err(spawn_error) => {
                warn!(error = %spawn_error, "no thread for the archive's checks: checking it now");
                archived.check_checksums()
            }
        }
    }
}

/// Checks every block of `blocks`, starting over after a failure to read.
fn check_with_retries(blocks: &Blocks) {
    let started = Instant::now();
    let mut delay = ARCHIVE_CHECK_RETRY_DELAY;
    for attempt in 0..=ARCHIVE_CHECK_RETRIES_MAX {
        match blocks.check_checksums() {
            Err(failure @ SnapshotError::Io { .. }) if attempt < ARCHIVE_CHECK_RETRIES_MAX => {
                warn!(error = %failure, attempt, "the archive's checks could not read it: starting over");
                std::thread::sleep(delay);
                delay *= 2;
            }
            result => return report(blocks, result, started),
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
        Err(failure @ SnapshotError::Io { .. }) => warn!(
            error = %failure,
            "the archive's checks could not read it: each block is checked when a name reads it"
        ),
        Err(refusal) => {
            error!(error = %refusal, "a block of the snapshot's archive failed its checks");
            blocks.refuse(&refusal);
        }
    }
}
