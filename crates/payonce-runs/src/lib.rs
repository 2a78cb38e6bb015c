//! Immutable, checksummed runs of records found by two names, read
//! through a byte-budgeted block cache and per-run filters, merged with
//! bounded memory.
//!
//! A record is opaque bytes (its payload) under a primary name and a
//! secondary name. A run holds records in blocks ordered by their primary
//! names' SipHash-1-3, a section of (secondary hash, primary hash) entries
//! ordered by secondary hash, a Bloom filter over each kind of hash, one
//! fence per block (its first hash and place) and a trailer; every block
//! and section is checksummed. docs/run-format.md gives every byte.
//!
//! - [`RunWriter`] streams a run into a [`RunSink`] from records in
//!   order; [`write_batch`] sorts a batch held in memory and writes it.
//! - [`Run::open`] reads a run's trailer, fences and filters from a
//!   [`RunSource`], checking them; a filter that fails its checksum is
//!   ignored, never believed ([`Run::filter_ignored`]).
//!   [`Run::check_blocks`] checks every block's checksum, streaming.
//! - [`Run::get`] and [`Run::get_by_secondary`] find a record by either
//!   name: no read at all when the filter says "not here", else the one
//!   block its hash leads to, through a [`BlockCache`] shared by every
//!   run of a process, which holds checked blocks under a byte budget.
//!   A [`RecordRef`] borrows the cached block: no copy.
//! - [`RunSet`]: runs newest first, asked in turn; the first holding a
//!   name answers. [`RunSet::prefetch`] reads the blocks some names need
//!   ahead of time, so the lookups ([`RunSet::get_prefetched`]) read
//!   nothing: a caller reads before taking its own lock.
//! - [`merge`] merges runs into one, newest copy of each name winning,
//!   holding one block per input at a time; [`merge_prefix`] says which
//!   newest runs of a set to merge, so a set stays a few runs.
//!
//! **Precondition** every caller promises: a primary name has the same
//! secondary name in every run that holds it, and within one run primary
//! names are distinct and secondary names are distinct. Writers refuse
//! what they can see of a breach ([`RunError::DuplicateName`],
//! [`RunError::SecondaryConflict`], [`RunError::EntriesMismatch`]).
//!
//! It knows nothing of what records mean (no withdrawals, no keys), opens
//! no file, holds no lock across calls, decides no budget (the caller
//! splits its memory among live data, the cache and the filters:
//! [`Run::filter_bytes`]), and never writes over a run: runs are written
//! once, read many times, and removed by their owner.
//!
//! ```
//! use std::sync::Arc;
//! use payonce_runs::{BlockCache, HashKey, Record, Run, RunSet, merge, write_batch};
//!
//! let key = HashKey::new(1, 2);
//! let mut older = Vec::new();
//! write_batch(&mut older, key, &mut [
//!     Record { primary: b"k-1", secondary: b"w-1", payload: b"sent" },
//!     Record { primary: b"k-2", secondary: b"w-2", payload: b"failed" },
//! ])?;
//! let mut newer = Vec::new();
//! write_batch(&mut newer, key, &mut [
//!     Record { primary: b"k-1", secondary: b"w-1", payload: b"confirmed" },
//! ])?;
//! let (older, newer) = (Run::open(older, 1)?, Run::open(newer, 2)?);
//!
//! let cache = BlockCache::new(1 << 20);
//! let set = RunSet::new(vec![Arc::new(newer), Arc::new(older)])?;
//! let found = set.get(&cache, b"k-1")?.expect("k-1 is there");
//! assert_eq!(found.payload(), b"confirmed");
//! assert_eq!(set.get_by_secondary(&cache, b"w-2")?.expect("w-2").primary(), b"k-2");
//! assert!(set.get(&cache, b"k-3")?.is_none());
//!
//! // The two runs made one, the newest copy of k-1 kept.
//! let mut merged = Vec::new();
//! let runs = set.runs();
//! let summary = merge(&[&*runs[0], &*runs[1]], &cache, &mut merged)?;
//! assert_eq!(summary.records, 2);
//! let merged = Run::open(merged, 3)?;
//! assert_eq!(merged.get(&cache, b"k-1")?.expect("k-1").payload(), b"confirmed");
//! # Ok::<(), payonce_runs::RunError>(())
//! ```

mod batch;
mod block;
mod bytes;
mod cache;
mod checked;
mod cursor;
mod error;
mod fetch;
mod filter;
mod format;
mod hash;
mod lookup;
mod merge;
mod policy;
mod record;
mod record_block;
mod run;
mod secondary;
mod set;
mod source;
mod writer;

pub use crate::batch::{secondary_entries, sort_records, write_batch};
pub use crate::cache::{BLOCK_CHARGE_EXTRA, BlockCache, CacheStats};
pub use crate::checked::RecordRef;
pub use crate::cursor::{Records, SecondaryEntries};
pub use crate::error::{RunError, Section};
pub use crate::fetch::Prefetched;
pub use crate::filter::{BITS_PER_NAME, BITS_PER_NAME_MIN, FALSE_POSITIVE_PER_MILLION, PROBES};
pub use crate::format::{
    BLOCK_LEN_MAX, BLOCK_TARGET_LEN, FORMAT_VERSION, MAGIC, NAME_LEN_MAX, PAYLOAD_LEN_MAX,
    RECORD_LEN_MAX, RECORDS_MAX, SECONDARY_PER_BLOCK, TRAILER_LEN,
};
pub use crate::hash::HashKey;
pub use crate::merge::merge;
pub use crate::policy::{MERGE_FAN_OUT, MERGE_TRIGGER, RUNS_MAX, merge_prefix};
pub use crate::record::{Name, Record};
pub use crate::run::{CHECK_READ_LEN, Run};
pub use crate::secondary::SecondaryEntry;
pub use crate::set::RunSet;
pub use crate::source::{DiscardSink, RunSink, RunSource};
pub use crate::writer::{RunSummary, RunWriter};
