//! An append-only log of opaque records that stores them in order, durably,
//! and hands them back exactly, or refuses to open.
//!
//! - [`Log`]: the one writer of a directory (an exclusive lock). [`Log::append`]
//!   assigns the next sequence number; [`Log::wait_durable`] returns once the
//!   record is on stable storage, with concurrent callers sharing one write
//!   and one `fdatasync` (group commit). Any write or sync failure poisons the
//!   writer until it is reopened.
//! - [`Log::open_visiting`] verifies every record while handing it to the
//!   caller, cuts a torn tail after saving it aside, and refuses any other
//!   damage with a [`LogError::Corrupt`] naming file, offset and sequence
//!   number. [`Log::scan_to_open`] runs the same open in phases: an
//!   [`Opening`] hands out the verified records, [`Opening::plan`] looks
//!   up how the log ends in a decision table and returns a [`RecoveryPlan`]
//!   of [`Repair`]s without changing anything, and
//!   [`RecoveryPlan::execute`] makes them and returns the writer. A caller
//!   that refuses after the last record drops the plan: nothing is repaired.
//! - [`LogReader`]: read-only scans, [`Records`] from any sequence number,
//!   and [`LogReader::read_at`] to fetch one record by its [`Position`].
//! - [`Storage`]: the small file-system trait behind it all, with
//!   [`FsStorage`] for real directories and [`MemStorage`] for tests, which
//!   injects [`Fault`]s and simulates power loss ([`MemStorage::crash`]).
//!   [`sync_rate`] measures a storage's own limit: synced appends per second;
//!   [`overwrite_sync_rate`], synced writes over bytes already written.
//!
//! On disk (docs/log-format.md has every byte): segment files named by their
//! first sequence number, each a checksummed header then frames whose crc32
//! is chained to the previous frame's, so a missing, reordered, duplicated or
//! stale record is detected as surely as a flipped bit.
//!
//! The log knows nothing about what records mean: no withdrawals, no
//! encoding, no indexes. It never compacts, recycles or rewrites a segment
//! (except cutting a torn tail), and it never repairs damage it cannot prove
//! to be a write cut short.
//!
//! ```
//! use std::sync::Arc;
//! use payonce_log::{Log, LogConfig, LogReader, MemStorage};
//!
//! let storage = Arc::new(MemStorage::new());
//! let (log, recovery) = Log::open(storage.clone(), LogConfig::default())?;
//! assert_eq!(recovery.records, 0);
//! let first = log.append(b"approve w-1")?;
//! let second = log.append(b"send w-1")?;
//! log.wait_durable(second)?; // both are on stable storage now
//! assert_eq!((first, second), (1, 2));
//! drop(log);
//!
//! let reader = LogReader::open(storage, LogConfig::default())?;
//! let payloads: Vec<Vec<u8>> = reader
//!     .records_from(1)?
//!     .map(|record| record.map(|record| record.payload))
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(payloads, [b"approve w-1".to_vec(), b"send w-1".to_vec()]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod chain;
mod checkpoint;
mod config;
mod error;
mod faults;
mod format;
mod mem;
mod open;
mod reader;
mod record;
mod recovery;
mod repair;
mod rng;
mod scan;
mod storage;
mod ticker;
mod witness;
mod writer;

pub use crate::chain::{BatchHasher, Digest, Head, HeadParseError, batch_digest};
pub use crate::config::{
    CHECKPOINT_INTERVAL, CHECKPOINT_RECORDS, Durability, LogConfig, PREALLOCATE_LEN,
};
pub use crate::error::{Damage, HeadSource, LogError, OpenError};
pub use crate::faults::{Fault, Faults, FaultyStorage, SyncHold};
pub use crate::format::{
    BATCH_HEADER_LEN, CHECKPOINT_FILE, CHECKPOINT_LEN, CHECKPOINT_SLOT_LEN, CHECKPOINT_SLOT_STRIDE,
    FORMAT_VERSION, FORMAT_VERSION_V1, FRAME_HEADER_LEN, RECORD_MAX, RECORD_MAX_CEILING, SEAL_LEN,
    SEGMENT_HEADER_LEN, SEGMENT_LEN_MAX, SEGMENT_LEN_MAX_CEILING, is_segment_tmp_name,
    parse_segment_name, segment_name,
};
pub use crate::mem::{CRASH_PAGE_LEN, CrashMode, MemStats, MemStorage};
pub use crate::open::Opening;
pub use crate::reader::{LogReader, Records};
pub use crate::record::{OwnedRecord, Position, Record, Recovery, TornTail};
pub use crate::recovery::Repair;
pub use crate::repair::RecoveryPlan;
pub use crate::scan::segments_len;
pub use crate::storage::{
    FsStorage, LOCK_FILE, SYNC_PROBE_BLOCK_MAX, SYNC_PROBE_FILE, SYNC_PROBE_OVERWRITE_LEN, Storage,
    StorageFile, StorageLock, StorageRead, overwrite_sync_rate, sync_rate,
};
pub use crate::witness::{MemWitness, Witness};
pub use crate::writer::{Log, LogStats, PENDING_LEN_MAX};
