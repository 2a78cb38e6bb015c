//! What opening a ledger found and repaired: the log's own report, and
//! which snapshot of the projections it started from, or which it refused
//! and set aside on the way to a full replay. Opening reports the same
//! through `tracing`; this is for callers without a subscriber.

use std::sync::Arc;

use payonce_log::Head;

use crate::snapshot_format::error::SnapshotError;

/// What opening a ledger found and repaired ([`crate::Ledger::recovery`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Recovery {
    /// What opening the log found and repaired: records and segments read,
    /// a torn tail cut off (its file, offset and length, and where its
    /// bytes were saved), a segment roll a crash interrupted.
    pub log: payonce_log::Recovery,
    /// The snapshot the projections were loaded from; `None` when every
    /// event was replayed.
    pub snapshot: Option<SnapshotLoaded>,
    /// The snapshots set aside on the way, newest first.
    pub snapshots_set_aside: Vec<SnapshotSetAside>,
    /// Events replayed from the log: those after the snapshot, or all.
    pub replayed: u64,
}

/// The snapshot an opening loaded the projections from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotLoaded {
    /// Where it is, for a person.
    pub name: String,
    /// The last event its state applied; replay went on from the next.
    pub seq: u64,
    /// The head of the log that vouched for it.
    pub head: Head,
    /// Its length in bytes.
    pub len: u64,
}

/// A snapshot an opening set aside: it failed a check.
#[derive(Debug, Clone)]
pub struct SnapshotSetAside {
    /// Where it was, for a person.
    pub name: String,
    /// Where it was set aside (renamed, never deleted); `None` if it could
    /// not be read at all, a newer build wrote it
    /// ([`SnapshotError::needs_a_newer_build`]), or setting it aside
    /// failed too.
    pub set_aside_as: Option<String>,
    /// Why it was set aside.
    pub error: Arc<SnapshotError>,
}
