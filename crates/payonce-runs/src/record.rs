//! A record as given to a writer, and as found in a run: borrowed from
//! the cached block it lies in, never copied.

use std::fmt;
use std::sync::Arc;

/// A record to write: opaque bytes under two names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record<'a> {
    /// The name a run is ordered by (payonce: a request key).
    pub primary: &'a [u8],
    /// The second name it is found by (payonce: a withdrawal id).
    pub secondary: &'a [u8],
    /// What the caller keeps under them.
    pub payload: &'a [u8],
}

/// A name to look up or prefetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Name<'a> {
    /// A primary name.
    Primary(&'a [u8]),
    /// A secondary name.
    Secondary(&'a [u8]),
}

/// Where a record's fields lie in its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// The offset of its primary name in the block.
    pub(crate) at: u32,
    pub(crate) primary_len: u16,
    pub(crate) secondary_len: u16,
    pub(crate) payload_len: u32,
}

impl Span {
    fn primary_at(&self) -> usize {
        self.at as usize
    }

    fn secondary_at(&self) -> usize {
        self.primary_at() + usize::from(self.primary_len)
    }

    fn payload_at(&self) -> usize {
        self.secondary_at() + usize::from(self.secondary_len)
    }

    /// Its bytes from `at` for `len`, in `block`: the empty slice if the
    /// span does not lie in it (a span is only made from a checked block).
    fn part(block: &[u8], at: usize, len: usize) -> &[u8] {
        block.get(at..at + len).unwrap_or_default()
    }

    pub(crate) fn primary<'b>(&self, block: &'b [u8]) -> &'b [u8] {
        Span::part(block, self.primary_at(), usize::from(self.primary_len))
    }

    pub(crate) fn secondary<'b>(&self, block: &'b [u8]) -> &'b [u8] {
        Span::part(block, self.secondary_at(), usize::from(self.secondary_len))
    }

    pub(crate) fn payload<'b>(&self, block: &'b [u8]) -> &'b [u8] {
        Span::part(block, self.payload_at(), self.payload_len as usize)
    }
}

/// A record found in a run: the checked block it lies in, shared with
/// the cache, and where it lies. Holding one keeps its block in memory
/// (not counted in the cache's bytes once the cache lets the block go).
#[derive(Clone)]
pub struct RecordRef {
    block: Arc<[u8]>,
    run: u64,
    span: Span,
}

impl RecordRef {
    pub(crate) fn new(block: Arc<[u8]>, run: u64, span: Span) -> RecordRef {
        RecordRef { block, run, span }
    }

    /// Its primary name.
    pub fn primary(&self) -> &[u8] {
        self.span.primary(&self.block)
    }

    /// Its secondary name.
    pub fn secondary(&self) -> &[u8] {
        self.span.secondary(&self.block)
    }

    /// Its payload.
    pub fn payload(&self) -> &[u8] {
        self.span.payload(&self.block)
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
