//! Auditing snapshots: every snapshot a store holds, checked against the
//! state a replay of the log from its first event rebuilds at the
//! snapshot's seq, field by field, so a bug in writing snapshots cannot
//! hide behind the checks an opening makes. Read-only.

use std::sync::Arc;

use payonce_log::{LogConfig, LogReader, Storage};

use super::store::{SnapshotStore, StoredSnapshot};
use super::{SnapshotInfo, checked, info};
use crate::audit::{Verification, verify_at};
use crate::error::LedgerError;
use crate::snapshot_format::SnapshotError;
use crate::state::{State, StateDifference};

/// What auditing one snapshot found.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotVerdict {
    /// Every answer of its state is the replay's at its seq.
    Matches,
    /// An opening would set it aside, and why.
    SetAside(SnapshotError),
    /// An opening would accept it, but its state is not the one the log
    /// rebuilds: the first answer that differs (the snapshot's on the left).
    Differs(StateDifference),
    /// Its seq is past the events the log holds.
    PastTheLog,
}

/// One snapshot a store holds, audited.
#[derive(Debug)]
pub struct SnapshotCheck {
    /// Which.
    pub snapshot: StoredSnapshot,
    /// What its header says, if it could be read.
    pub info: Option<SnapshotInfo>,
    /// What the audit found.
    pub verdict: SnapshotVerdict,
}

/// Verifies the ledger's log as [`crate::verify_on`] does and audits every
/// snapshot in `store` against it, newest first.
pub fn verify_snapshots(
    storage: Arc<dyn Storage>,
    config: LogConfig,
    store: &dyn SnapshotStore,
) -> Result<(Verification, Vec<SnapshotCheck>), LedgerError> {
    let reader = LogReader::open(storage.clone(), config.clone())?;
    let mut checks = Vec::new();
    let mut loaded: Vec<(usize, State)> = Vec::new();
    for snapshot in store.list()? {
        let (info, verdict) = match read_checked(&reader, store, &snapshot)? {
            Ok((info, state)) => {
                loaded.push((checks.len(), state));
                (Some(info), SnapshotVerdict::PastTheLog)
            }
            Err((info, error)) => (info, SnapshotVerdict::SetAside(error)),
        };
        checks.push(SnapshotCheck {
            snapshot,
            info,
            verdict,
        });
    }
    loaded.sort_by_key(|(_, state)| state.last_seq());
    let seqs: Vec<u64> = loaded.iter().map(|(_, state)| state.last_seq()).collect();
    let mut next = 0;
    let report = verify_at(storage, config, &seqs, |replayed| {
        while let Some((index, snapshot)) = loaded.get(next)
            && snapshot.last_seq() == replayed.last_seq()
        {
            checks[*index].verdict = match snapshot.difference(replayed) {
                None => SnapshotVerdict::Matches,
                Some(difference) => SnapshotVerdict::Differs(difference),
            };
            next += 1;
        }
    })?;
    Ok((report, checks))
}

/// What an opening checks of `snapshot`, read-only ([`checked`]): the
/// outer `Err` is the log's damage.
#[allow(clippy::type_complexity)]
fn read_checked(
    reader: &LogReader,
    store: &dyn SnapshotStore,
    snapshot: &StoredSnapshot,
) -> Result<Result<(SnapshotInfo, State), (Option<SnapshotInfo>, SnapshotError)>, LedgerError> {
    let bytes = match store.read(snapshot) {
        Ok(bytes) => bytes,
        Err(error) => return Ok(Err((None, error))),
    };
    let checked = checked(&bytes, reader.log_id()?, |seq| reader.head_at(seq), store)?;
    Ok(checked.map_err(|error| (info(&bytes).ok(), error)))
}
