//! A block read and checked, as the cache holds it, and a record found in
//! one. A record block keeps, beside its bytes, each record's primary
//! hash (computed by its check anyway) and where its lengths start: a
//! lookup binary-searches those rather than walking the block's records.

use std::fmt;
use std::sync::Arc;

use crate::record::Record;
use crate::record_block::{Span, span_at};

/// What a block's index costs a record held: its hash and its start.
const INDEX_LEN: u64 = 8 + 4;

/// A block that passed every check.
#[derive(Debug)]
pub(crate) struct CheckedBlock {
    bytes: Box<[u8]>,
    /// Each record's primary hash, in order (none in a secondary block).
    hashes: Box<[u64]>,
    /// Where each record's lengths start.
    starts: Box<[u32]>,
}

impl CheckedBlock {
    /// A record block whose check found `spans`, with their hashes.
    pub(crate) fn of_records(bytes: Vec<u8>, spans: &[(u64, Span)]) -> CheckedBlock {
        CheckedBlock {
            bytes: bytes.into(),
            hashes: spans.iter().map(|&(hash, _)| hash).collect(),
            starts: spans.iter().map(|(_, span)| span.header_at()).collect(),
        }
    }

    /// A secondary block.
    pub(crate) fn of_entries(bytes: Vec<u8>) -> CheckedBlock {
        CheckedBlock {
            bytes: bytes.into(),
            hashes: Box::default(),
            starts: Box::default(),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes it takes in memory, about.
    pub(crate) fn held_len(&self) -> u64 {
        self.bytes.len() as u64 + INDEX_LEN * self.hashes.len() as u64
    }

    /// How many records it holds (0 for a secondary block).
    pub(crate) fn records_len(&self) -> usize {
        self.hashes.len()
    }

    /// Record `index`: its primary hash and place.
    pub(crate) fn record(&self, index: usize) -> Option<(u64, Span)> {
        let span = span_at(&self.bytes, *self.starts.get(index)?)?;
        Some((self.hashes[index], span))
    }

    /// The records whose primary hash is `hash`, in order.
    pub(crate) fn hashed(&self, hash: u64) -> impl Iterator<Item = Span> + '_ {
        let first = self.hashes.partition_point(|&held| held < hash);
        let end = self.hashes.partition_point(|&held| held <= hash);
        (first..end).filter_map(|index| self.record(index).map(|(_, span)| span))
    }
}

/// A record found in a run: the checked block it lies in, shared with
/// the cache, and where it lies. Holding one keeps its block in memory
/// (not counted in the cache's bytes once the cache lets the block go).
#[derive(Clone)]
pub struct RecordRef {
    block: Arc<CheckedBlock>,
    run: u64,
    span: Span,
}

impl RecordRef {
    pub(crate) fn new(block: Arc<CheckedBlock>, run: u64, span: Span) -> RecordRef {
        RecordRef { block, run, span }
    }

    /// Its primary name.
    pub fn primary(&self) -> &[u8] {
        self.span.primary(self.block.bytes())
    }

    /// Its secondary name.
    pub fn secondary(&self) -> &[u8] {
        self.span.secondary(self.block.bytes())
    }

    /// Its payload.
    pub fn payload(&self) -> &[u8] {
        self.span.payload(self.block.bytes())
    }

    /// Its three parts as a [`Record`].
    pub fn record(&self) -> Record<'_> {
        Record {
            primary: self.primary(),
            secondary: self.secondary(),
            payload: self.payload(),
        }
    }

    /// The number of the run it was found in.
    pub fn run_number(&self) -> u64 {
        self.run
    }
}

impl fmt::Debug for RecordRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordRef")
            .field("run", &self.run)
            .field("primary", &self.primary().escape_ascii().to_string())
            .field("secondary", &self.secondary().escape_ascii().to_string())
            .field("payload_len", &self.span.payload_len)
            .finish()
    }
}
