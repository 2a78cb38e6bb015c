//! Choosing the snapshot an opening starts from: the newest one the log
//! vouches for. Each candidate is checked in turn, cheapest check first:
//! its header (format, schema, length), the log it names, the head it
//! names against the head the log itself holds there (read from the log,
//! never taken from the snapshot), then its checksum and every field. The
//! first that passes is loaded; each that fails is set aside and reported,
//! and with none left the opening replays every event.

use std::sync::Arc;

use payonce_log::{Head, Opening};
use payonce_runs::BlockCache;
use tracing::{info, warn};

use super::store::{SnapshotStore, StoredSnapshot};
use super::{SnapshotInfo, checked_file_into, checked_into};
use crate::error::LedgerError;
use crate::recovery::{SnapshotLoaded, SnapshotSetAside};
use crate::snapshot_format::SnapshotError;
use crate::state::State;

/// What [`load_newest`] found.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// The state of the snapshot loaded, and what it says of itself.
    pub(crate) state: Option<(State, SnapshotLoaded)>,
    /// Those set aside on the way, newest first.
    pub(crate) set_aside: Vec<SnapshotSetAside>,
}

/// Loads the newest snapshot in `store` that the log `opening` is opening
/// vouches for. A damaged log (the segment a snapshot's head names does
/// not verify) refuses the open, as a full replay would; a snapshot that
/// cannot be listed or read is passed over.
pub(crate) fn load_newest(
    store: &dyn SnapshotStore,
    opening: &Opening,
    cache: &Arc<BlockCache>,
) -> Result<Loaded, LedgerError> {
    let log_id = || Ok(opening.log_id()?);
    let head_at = |seq| Ok(opening.head_at(seq)?);
    load_newest_of(store, &log_id, &head_at, cache)
}

/// What a log says of its identity: `None` if it has none to say (no
/// record yet), and so vouches for no snapshot.
pub(crate) type LogId<'a> = dyn Fn() -> Result<Option<u64>, LedgerError> + 'a;

/// What a log says of the heads it holds: the head of the batch ending at
/// a seq, if one does.
pub(crate) type HeadAt<'a> = dyn Fn(u64) -> Result<Option<Head>, LedgerError> + 'a;

/// [`load_newest`] for any log: `log_id` reads its identity, `head_at` its
/// heads, from the log itself, and only when there is a snapshot to check.
/// A log whose identity cannot be read (its first segment's header torn,
/// say) vouches for none: the opening replays every event, and reports the
/// log's state as it would without snapshots.
pub(crate) fn load_newest_of(
    store: &dyn SnapshotStore,
    log_id: &LogId<'_>,
    head_at: &HeadAt<'_>,
    cache: &Arc<BlockCache>,
) -> Result<Loaded, LedgerError> {
    let mut loaded = Loaded::default();
    let candidates = match store.list() {
        Ok(candidates) => candidates,
        Err(error) => {
            warn!(%error, "could not list the snapshots; replaying every event");
            return Ok(loaded);
        }
    };
    if candidates.is_empty() {
        return Ok(loaded);
    }
    let log_id = match log_id() {
        Ok(Some(log_id)) => log_id,
        Ok(None) => return Ok(loaded),
        Err(error) => {
            warn!(%error, "the log's identity cannot be read; replaying every event");
            return Ok(loaded);
        }
    };
    for candidate in candidates {
        match try_load(store, log_id, head_at, &candidate, cache)? {
            Ok((info, state)) => {
                info!(snapshot = %candidate.name, seq = info.seq, head = %info.head, "loaded a snapshot");
                let snapshot = SnapshotLoaded {
                    name: candidate.name,
                    seq: info.seq,
                    head: info.head,
                    len: info.len,
                };
                loaded.state = Some((state, snapshot));
                return Ok(loaded);
            }
            Err(error) => loaded.set_aside.push(set_aside(store, candidate, error)),
        }
    }
    Ok(loaded)
}

/// Checks and decodes `candidate` as [`checked`] does: the outer `Err`
/// is the log's damage, the inner one the snapshot's refusal.
fn try_load(
    store: &dyn SnapshotStore,
    log_id: u64,
    head_at: &HeadAt<'_>,
    candidate: &StoredSnapshot,
    cache: &Arc<BlockCache>,
) -> Result<Result<(SnapshotInfo, State), SnapshotError>, LedgerError> {
    let bytes = match store.open(candidate) {
        Ok(Some(file)) => {
            return checked_file_into(&*file, log_id, head_at, store, Arc::clone(cache));
        }
        Ok(None) => store.read(candidate),
        Err(error) => Err(error),
    };
    match bytes {
        Ok(bytes) => checked_into(&bytes, log_id, head_at, store, Arc::clone(cache)),
        Err(error) => Ok(Err(error)),
    }
}

/// Sets a snapshot that failed a check aside and says so; one that could
/// not be read, or that a newer build wrote, stays where it is.
fn set_aside(
    store: &dyn SnapshotStore,
    candidate: StoredSnapshot,
    error: SnapshotError,
) -> SnapshotSetAside {
    let set_aside_as = match error {
        SnapshotError::Io { .. } => None,
        _ if error.needs_a_newer_build() => None,
        _ => match store.set_aside(&candidate) {
            Ok(aside) => Some(aside),
            Err(aside_error) => {
                warn!(snapshot = %candidate.name, error = %aside_error, "could not set a snapshot aside");
                None
            }
        },
    };
    warn!(
        snapshot = %candidate.name,
        %error,
        set_aside_as = set_aside_as.as_deref().unwrap_or("(left in place)"),
        "set a snapshot aside; opening falls back to an older one or a full replay"
    );
    SnapshotSetAside {
        name: candidate.name,
        set_aside_as,
        error: Arc::new(error),
    }
}
