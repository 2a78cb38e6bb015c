//! Reading a run whole, in order, a block at a time: its records (the
//! public [`Records`]) and its secondary entries, each block checked as a
//! lookup checks it, and what a lookup cannot see checked too: that the
//! order holds across blocks and that the blocks hold as many as the
//! trailer says.

use std::sync::Arc;

use crate::cache::BlockCache;
use crate::checked::{CheckedBlock, RecordRef};
use crate::error::{RunError, Section};
use crate::record_block::Span;
use crate::run::Run;
use crate::secondary::{SecondaryEntry, entries};

/// A place in a run's record blocks.
pub(crate) struct RecordCursor<'r> {
    run: &'r Run,
    /// Where blocks the cache holds are taken from; others are read from
    /// the source and not kept, so a scan does not flush the cache.
    cache: Option<&'r BlockCache>,
    next_block: usize,
    block: Arc<CheckedBlock>,
    index: usize,
    seen: u64,
}

impl<'r> RecordCursor<'r> {
    pub(crate) fn new(run: &'r Run, cache: Option<&'r BlockCache>) -> RecordCursor<'r> {
        RecordCursor {
            run,
            cache,
            next_block: 0,
            block: Arc::new(CheckedBlock::of_records(Vec::new(), &[])),
            index: 0,
            seen: 0,
        }
    }

    /// Loads the next block if the one held is done; whether a record is
    /// there. At the end, refuses a run whose blocks held other than the
    /// trailer's count.
    pub(crate) fn fill(&mut self) -> Result<bool, RunError> {
        if self.index < self.block.records_len() {
            return Ok(true);
        }
        let fences = self.run.record_fences();
        let Some(fence) = fences.get(self.next_block) else {
            return self.ended();
        };
        let last = (self.block.records_len().checked_sub(1))
            .and_then(|last| self.block.record(last))
            .map(|(hash, span)| (hash, span.primary(self.block.bytes()).to_vec()));
        self.load()?;
        let first = self
            .current()
            .map(|(hash, block, span)| (hash, span.primary(block.bytes())));
        if let (Some((last_hash, last)), Some(first)) = (&last, first)
            && (*last_hash, last.as_slice()) >= first
        {
            let expected = format!("names after {last_hash:#x}, {}", last.escape_ascii());
            let found = format!("{:#x}", first.0);
            let run = self.run.number();
            return Err(RunError::corrupt(
                run,
                Section::Records,
                fence.at,
                expected,
                found,
            ));
        }
        Ok(true)
    }

    fn load(&mut self) -> Result<(), RunError> {
        let number = self.next_block;
        let key = self.run.block_key(Section::Records, number);
        self.block = match self.cache.and_then(|cache| cache.get(&key)) {
            Some(block) => block,
            None => {
                let block = self.run.read_record_block(number)?;
                if let Some(cache) = self.cache {
                    cache.count_miss(block.bytes().len() as u64);
                }
                block
            }
        };
        self.next_block += 1;
        self.index = 0;
        self.seen += self.block.records_len() as u64;
        Ok(())
    }

    fn ended(&self) -> Result<bool, RunError> {
        if self.seen == self.run.records_len() {
            return Ok(false);
        }
        let expected = format!("{} records", self.run.records_len());
        let found = format!("{} in its blocks", self.seen);
        Err(RunError::corrupt(
            self.run.number(),
            Section::Records,
            0,
            expected,
            found,
        ))
    }

    /// The record at the cursor: its primary hash, its block and place.
    pub(crate) fn current(&self) -> Option<(u64, &Arc<CheckedBlock>, Span)> {
        let (hash, span) = self.block.record(self.index)?;
        Some((hash, &self.block, span))
    }

    pub(crate) fn step(&mut self) {
        self.index += 1;
    }
}

/// A place in a run's secondary blocks.
pub(crate) struct EntryCursor<'r> {
    run: &'r Run,
    cache: Option<&'r BlockCache>,
    next_block: usize,
    entries: Vec<SecondaryEntry>,
    index: usize,
}

impl<'r> EntryCursor<'r> {
    pub(crate) fn new(run: &'r Run, cache: Option<&'r BlockCache>) -> EntryCursor<'r> {
        EntryCursor {
            run,
            cache,
            next_block: 0,
            entries: Vec::new(),
            index: 0,
        }
    }

    /// The entry at the cursor, loading the next block if the one held
    /// is done; `None` at the end. The order is checked across blocks;
    /// the count of each block was checked as it was read.
    pub(crate) fn current(&mut self) -> Result<Option<SecondaryEntry>, RunError> {
        if let Some(&entry) = self.entries.get(self.index) {
            return Ok(Some(entry));
        }
        let number = self.next_block;
        let Some(fence) = self.run.secondary_fences().get(number) else {
            return Ok(None);
        };
        let last = self.entries.last().copied();
        let key = self.run.block_key(Section::Secondary, number);
        let block = match self.cache.and_then(|cache| cache.get(&key)) {
            Some(block) => block,
            None => {
                let block = self.run.read_secondary_block(number)?;
                if let Some(cache) = self.cache {
                    cache.count_miss(block.bytes().len() as u64);
                }
                block
            }
        };
        self.entries.clear();
        self.entries.extend(entries(block.bytes()));
        (self.next_block, self.index) = (number + 1, 0);
        let first = self.entries.first().copied();
        if let (Some(last), Some(first)) = (last, first)
            && last >= first
        {
            let (expected, found) = (format!("entries after {last:?}"), format!("{first:?}"));
            let run = self.run.number();
            return Err(RunError::corrupt(
                run,
                Section::Secondary,
                fence.at,
                expected,
                found,
            ));
        }
        Ok(first)
    }

    pub(crate) fn step(&mut self) {
        self.index += 1;
    }
}

/// A run's records in order ([`Run::records`]), each block read from the
/// source and checked, none kept in a cache.
pub struct Records<'r> {
    cursor: RecordCursor<'r>,
    failed: bool,
}

impl Iterator for Records<'_> {
    type Item = Result<RecordRef, RunError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.cursor.fill() {
            Ok(true) => {}
            Ok(false) => return None,
            Err(error) => {
                self.failed = true;
                return Some(Err(error));
            }
        }
        let (_, block, span) = self.cursor.current()?;
        let record = RecordRef::new(block.clone(), self.cursor.run.number(), span);
        self.cursor.step();
        Some(Ok(record))
    }
}

/// A run's secondary entries in order ([`Run::secondary_entries`]).
pub struct SecondaryEntries<'r> {
    cursor: EntryCursor<'r>,
    failed: bool,
}

impl Iterator for SecondaryEntries<'_> {
    type Item = Result<SecondaryEntry, RunError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let entry = self.cursor.current();
        self.failed = entry.is_err();
        self.cursor.step();
        entry.transpose()
    }
}

impl Run {
    /// Its records in (primary hash, primary name) order, read a block at
    /// a time from its source and checked (across blocks too), none kept
    /// in a cache: for a caller that reads a run whole.
    pub fn records(&self) -> Records<'_> {
        Records {
            cursor: RecordCursor::new(self, None),
            failed: false,
        }
    }

    /// Its secondary entries in order, read as [`Run::records`] reads.
    pub fn secondary_entries(&self) -> SecondaryEntries<'_> {
        SecondaryEntries {
            cursor: EntryCursor::new(self, None),
            failed: false,
        }
    }
}
