//! What a scan hands out and reports.

use crate::chain::Head;

/// Where a record's frame is, and the checksum it chains from: enough for
/// [`crate::LogReader::read_at`] to fetch and verify it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The first sequence number of the record's segment (its file name).
    pub segment: u64,
    /// Byte offset of the record's frame in the segment file.
    pub offset: u64,
    /// The checksum the record's own checksum is chained from.
    pub chain: u32,
}

/// One verified record, borrowed from the scan that verified it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its sequence number; the first record of a log is 1.
    pub seq: u64,
    /// The bytes appended.
    pub payload: &'a [u8],
    /// Where it is.
    pub position: Position,
}

impl Record<'_> {
    /// The record with its payload copied out.
    pub fn to_owned_record(&self) -> OwnedRecord {
        OwnedRecord {
            seq: self.seq,
            payload: self.payload.to_vec(),
            position: self.position,
        }
    }
}

/// One verified record that owns its payload, as [`crate::Records`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    /// Its sequence number.
    pub seq: u64,
    /// The bytes appended.
    pub payload: Vec<u8>,
    /// Where it is.
    pub position: Position,
}

/// Damage at the end of the last segment that looks like a write cut short:
/// nothing after it verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The first sequence number of the segment (its file name).
    pub segment: u64,
    /// Byte offset where the damage starts: the end of the last good record.
    pub offset: u64,
    /// Bytes from there to the end of the file.
    pub len: u64,
    /// Where a writer copied the bytes before cutting them off (a file name
    /// in the log directory); `None` for a read-only scan, which changes
    /// nothing.
    pub saved_as: Option<String>,
}

/// What opening or scanning a log found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// Records verified (from the first, or from where a scan started).
    pub records: u64,
    /// Segment files verified.
    pub segments: u64,
    /// The last verified sequence number; 0 for an empty log.
    pub last_seq: u64,
    /// A torn tail found at the end of the log; a writer cut it off after
    /// saving it, a reader only reports it.
    pub torn_tail: Option<TornTail>,
    /// A segment roll was found unfinished (the newest segment holds no
    /// record yet and the one before is not sealed). A writer finished it;
    /// a reader may be looking at a roll in progress.
    pub interrupted_roll: bool,
    /// The head the log ends with: its last whole batch (after a torn tail
    /// was cut, for a writer). [`Head::GENESIS`] for a log without records.
    /// Only a scan from the first record knows it; a read from a later
    /// segment reports the genesis head.
    pub head: Head,
    /// The head its checkpoint held when the scan started, `None` for a
    /// log without a checkpoint (one of format version 1, not yet opened for
    /// writing by this version).
    pub checkpoint: Option<Head>,
}
