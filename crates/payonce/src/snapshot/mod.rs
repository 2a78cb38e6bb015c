//! Snapshots of the projections: a [`State`] at some event, in a
//! documented byte format (docs/snapshot-format.md), so opening a ledger
//! costs the events since the newest snapshot rather than its whole
//! history.
//!
//! A snapshot is a cache, never a source of truth. It names the log it
//! was taken of and a head of that log (a batch's last seq and its chain
//! digest, durable when the snapshot was taken, at or after the snapshot's
//! last event), and it is believed only where the log itself holds that
//! head (`payonce_log::Opening::head_at`), and only after every field of
//! it passed the rules replay checks. One that fails any check is set
//! aside, never deleted, and opening falls back to an older one, then to
//! a full replay. Audits replay from the first event whatever snapshots
//! exist; `payonce verify --snapshots` rebuilds the state at each
//! snapshot's seq and compares it with the snapshot, field by field.
//!
//! A snapshot holds the live part of the state (its body) and a manifest
//! naming the runs of settled pairs (`payonce_runs`) that hold the rest.
//! Taking one writes one new run, of the pairs settled since the runs the
//! state holds were written, so it costs what changed, not the history.
//!
//! - [`encode`] and [`decode`]: a state to bytes and back, its runs in a
//!   [`RunStore`].
//! - [`SnapshotStore`]: where snapshots and their runs are kept (a
//!   directory beside the log, [`DirSnapshots`]; tables, in
//!   `payonce-postgres`).
//! - [`SnapshotPolicy`]: when a ledger takes them.

mod audit;
mod decode;
mod dir_runs;
mod load;
mod policy;
mod prune;
pub(crate) mod runs;
mod store;
#[cfg(test)]
mod tests;

use std::num::NonZeroU32;

use payonce_log::Head;

pub use self::audit::{SnapshotCheck, SnapshotVerdict, verify_snapshots};
pub use self::decode::{checked, checked_file, decode};
pub(crate) use self::decode::{checked_file_into, checked_into};
pub(crate) use self::load::{Loaded, load_newest, load_newest_of};
pub use self::policy::{SNAPSHOT_EVENTS, SNAPSHOT_INTERVAL, SNAPSHOT_SHARE_MAX, SnapshotPolicy};
pub(crate) use self::prune::prune_runs;
pub(crate) use self::runs::WrittenRun;
use self::runs::{entry_of, write_new_run};
pub use self::store::{DirSnapshots, SNAPSHOTS_DIR, SNAPSHOTS_KEPT, SnapshotStore, StoredSnapshot};
use crate::event::SCHEMA_VERSION;
pub use crate::run_store::{MemRuns, RunOut, RunStore, SetRunAside};
pub use crate::snapshot_format::SnapshotError;
use crate::snapshot_format::header::Header;
pub use crate::snapshot_format::{KEYS_PART_LEN, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_HEADER_LEN};
use crate::snapshot_format::{Manifest, RunEntry};
pub use crate::snapshot_format::{SNAPSHOT_READ_LEN, SnapshotFile};
use crate::state::State;

/// The largest snapshot read: about 4,000 times a snapshot of 10M claimed
/// withdrawals (about 2 GiB), and checked before a byte of it is read.
pub const SNAPSHOT_LEN_MAX: u64 = 1 << 43;

/// What a snapshot says of itself, read from its checked header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The last event the state it holds applied.
    pub seq: u64,
    /// The head of the log that vouches for it: durable when it was taken,
    /// at or after `seq`.
    pub head: Head,
    /// The identity of the log it was taken of.
    pub log_id: u64,
    /// Its length in bytes, header included.
    pub len: u64,
    /// The event schema it was taken under.
    pub schema_version: u32,
}

/// The bytes of a snapshot of `state`, taken of the log `log_id` whose
/// durable head `head` is at or after the state's last event, its new run
/// written into `runs`: its keys in parts of [`KEYS_PART_LEN`].
pub fn encode(
    state: &State,
    log_id: u64,
    head: Head,
    runs: &dyn RunStore,
) -> Result<Vec<u8>, SnapshotError> {
    encode_in_parts(state, log_id, head, KEYS_PART_LEN, runs)
}

/// [`encode`] with `keys_part_len` keys a part: what a snapshot written
/// with other parts is the encoding of (docs/snapshot-format.md).
pub fn encode_in_parts(
    state: &State,
    log_id: u64,
    head: Head,
    keys_part_len: NonZeroU32,
    runs: &dyn RunStore,
) -> Result<Vec<u8>, SnapshotError> {
    let taken = take(state, log_id, head, keys_part_len, runs)?;
    Ok(taken.bytes)
}

/// A snapshot taken: its bytes, and the new run it wrote, if any, with the
/// key slots (of the state it was taken of) whose pairs that run holds.
pub(crate) struct Taken {
    pub(crate) bytes: Vec<u8>,
    pub(crate) new_run: Option<WrittenRun>,
}

/// Takes a snapshot of `state`: writes its new run (the settled pairs no
/// run it holds has as they are) into `runs`, then assembles the header,
/// the body and the manifest naming the new run before the state's runs.
pub(crate) fn take(
    state: &State,
    log_id: u64,
    head: Head,
    keys_part_len: NonZeroU32,
    runs: &dyn RunStore,
) -> Result<Taken, SnapshotError> {
    assert!(
        head.seq >= state.last_seq(),
        "a snapshot's head ({head}) vouches for its state's events (to {})",
        state.last_seq()
    );
    let settled = state.settled();
    let hash_key = match settled.and_then(|settled| settled.runs.hash_key()) {
        Some(key) => key,
        None => runs::drawn_hash_key()?,
    };
    let new_run = write_new_run(state, hash_key, runs)?;
    let mut entries: Vec<RunEntry> = new_run.iter().map(|(run, _)| entry_of(run)).collect();
    if let Some(settled) = settled {
        entries.extend(settled.runs.runs().iter().map(|run| entry_of(run)));
    }
    let manifest = Manifest {
        hash_key,
        pairs: state.pairs_out_of_body(),
        runs: entries,
    };
    let body = state.snapshot_body(keys_part_len)?;
    let bytes = assemble(state.last_seq(), log_id, head, &body, &manifest.encode());
    // Read back what will be written: a snapshot that would be refused is
    // a bug of the writer, found here rather than at the next open.
    debug_assert!(matches!(info(&bytes), Ok(read) if read.seq == state.last_seq()));
    Ok(Taken { bytes, new_run })
}

/// The snapshot's bytes: header, body, manifest.
fn assemble(seq: u64, log_id: u64, head: Head, body: &[u8], manifest: &[u8]) -> Vec<u8> {
    let header = Header {
        format_version: SNAPSHOT_FORMAT_VERSION,
        schema_version: u32::from(SCHEMA_VERSION),
        log_id,
        seq,
        head,
        body_len: body.len() as u64,
        body_crc: crc32fast::hash(body),
        manifest_len: manifest.len() as u64,
    };
    let mut bytes = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body.len() + manifest.len());
    bytes.extend_from_slice(&header.encode());
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(manifest);
    bytes
}

/// What the header of `bytes` says, once the header verifies, is of this
/// build's format and schema, and the length matches: no field of the body
/// is read.
pub fn info(bytes: &[u8]) -> Result<SnapshotInfo, SnapshotError> {
    info_of(bytes, bytes.len() as u64)
}

/// [`info`] of a snapshot of `len` bytes that starts with `bytes`.
pub(crate) fn info_of(bytes: &[u8], len: u64) -> Result<SnapshotInfo, SnapshotError> {
    if len > SNAPSHOT_LEN_MAX {
        return Err(SnapshotError::TooLong {
            len,
            max: SNAPSHOT_LEN_MAX,
        });
    }
    let header = Header::decode(bytes)?;
    let expected = (SNAPSHOT_HEADER_LEN as u64)
        .saturating_add(header.body_len)
        .saturating_add(header.manifest_len);
    if expected != len {
        return Err(SnapshotError::Length {
            expected,
            found: len,
        });
    }
    if header.schema_version != u32::from(SCHEMA_VERSION) {
        return Err(SnapshotError::Schema {
            found: header.schema_version,
            supported: u32::from(SCHEMA_VERSION),
        });
    }
    if header.head.seq < header.seq {
        return Err(SnapshotError::Invalid {
            field: "head seq",
            offset: 32,
            expected: format!("a head at or after seq {}", header.seq),
            found: header.head.seq.to_string(),
        });
    }
    Ok(SnapshotInfo {
        seq: header.seq,
        head: header.head,
        log_id: header.log_id,
        len,
        schema_version: header.schema_version,
    })
}

/// Whether the log `log_id` vouches for the snapshot `info` describes:
/// it names that log, and the log holds the head it names.
pub(crate) fn vouched<E>(
    info: &SnapshotInfo,
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
) -> Result<Result<(), SnapshotError>, E> {
    if info.log_id != log_id {
        return Ok(Err(SnapshotError::OtherLog {
            found: info.log_id,
            expected: log_id,
        }));
    }
    let found = head_at(info.head.seq)?;
    if found != Some(info.head) {
        return Ok(Err(SnapshotError::HeadNotInLog {
            head: info.head,
            found,
        }));
    }
    Ok(Ok(()))
}
