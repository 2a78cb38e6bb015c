//! Removing the runs no kept snapshot names: after a store prunes its old
//! snapshots, each kept one's manifest is read, and every run none of them
//! names, and no live state holds, goes. A run a process still reads
//! after its name goes stays readable where the store holds it open.

use super::SnapshotInfo;
use super::store::SnapshotStore;
use crate::snapshot_format::header::Header;
use crate::snapshot_format::{Manifest, SNAPSHOT_HEADER_LEN, SnapshotError};

/// Removes every run of `store` that no snapshot it holds names and that
/// is not `in_use` (the runs the live state holds: a run written after the
/// newest snapshot is named by none yet); returns the runs removed. A
/// snapshot whose manifest cannot be read keeps every run: nothing is
/// removed that a snapshot might name.
pub(crate) fn prune_runs(
    store: &dyn SnapshotStore,
    in_use: &[u64],
) -> Result<Vec<u64>, SnapshotError> {
    let mut named: Vec<u64> = in_use.to_vec();
    for snapshot in store.list()? {
        named.extend(
            manifest_of(store, &snapshot)?
                .runs
                .iter()
                .map(|run| run.number),
        );
    }
    let mut removed = Vec::new();
    for number in store.list_runs()? {
        if !named.contains(&number) {
            store.remove_run(number)?;
            removed.push(number);
        }
    }
    Ok(removed)
}

/// The manifest of `snapshot`, read from its header's place in it.
pub(crate) fn manifest_of(
    store: &dyn SnapshotStore,
    snapshot: &super::StoredSnapshot,
) -> Result<Manifest, SnapshotError> {
    let bytes = store.read(snapshot)?;
    let _: SnapshotInfo = super::info(&bytes)?;
    let header = Header::decode(&bytes)?;
    let at = SNAPSHOT_HEADER_LEN + header.body_len as usize;
    Manifest::decode(&bytes[at..], header.body_len as usize)
}
