//! A snapshot's bytes, knowing nothing of the state they hold: the header
//! ([`header`]), the reader and writer of a body's fields ([`fields`]),
//! the manifest naming the runs of settled pairs ([`manifest`]),
//! reading a snapshot in pieces wherever it is stored ([`reader`]), and
//! why bytes are refused ([`error`]). docs/snapshot-format.md gives every
//! byte. The state's encoding into these fields is `crate::state`'s
//! (`state/snapshot.rs`), and loading and storing snapshots is
//! `crate::snapshot`'s: both stand on this floor, which uses neither.

pub(crate) mod error;
pub(crate) mod fields;
pub(crate) mod header;
pub(crate) mod manifest;
pub(crate) mod reader;

pub use self::error::SnapshotError;
pub use self::header::{KEYS_PART_LEN, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_HEADER_LEN};
pub use self::manifest::{MANIFEST_RUNS_MAX, Manifest, RunEntry};
pub use self::reader::{SNAPSHOT_READ_LEN, SnapshotFile};
