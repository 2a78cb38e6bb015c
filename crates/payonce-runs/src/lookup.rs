//! Finding a record in one run, by either name: the filter first, then
//! the fences to the one block (or the few blocks equal hashes straddle),
//! then the block, checked before it was cached.

use crate::cache::BlockCache;
use crate::checked::RecordRef;
use crate::error::{RunError, Section};
use crate::fetch::Fetch;
use crate::format::Fence;
use crate::record::Name;
use crate::run::Run;
use crate::secondary::{SecondaryEntry, entries_with};

impl Run {
    /// The record whose primary name is `primary`, if this run holds it.
    /// Reads nothing when the filter says it is not here; else reads
    /// (through `cache`) the block its hash leads to.
    pub fn get(&self, cache: &BlockCache, primary: &[u8]) -> Result<Option<RecordRef>, RunError> {
        let hash = self.hash_key().primary_hash(primary);
        self.find(cache, Name::Primary(primary), hash)
    }

    /// The record whose secondary name is `secondary`, if this run holds
    /// it. Reads nothing when the filter says it is not here; else reads
    /// the secondary block its hash leads to, then the record block of
    /// each entry under that hash.
    pub fn get_by_secondary(
        &self,
        cache: &BlockCache,
        secondary: &[u8],
    ) -> Result<Option<RecordRef>, RunError> {
        let hash = self.hash_key().secondary_hash(secondary);
        self.find(cache, Name::Secondary(secondary), hash)
    }

    /// The record named `name`, whose hash under this run's key is
    /// `hash`, with its blocks from `fetch`.
    pub(crate) fn find(
        &self,
        fetch: &dyn Fetch,
        name: Name<'_>,
        hash: u64,
    ) -> Result<Option<RecordRef>, RunError> {
        match name {
            Name::Primary(name) if self.might_hold_primary_hash(hash) => {
                self.find_primary(fetch, name, hash)
            }
            Name::Secondary(name) if self.might_hold_secondary_hash(hash) => {
                self.find_secondary(fetch, name, hash)
            }
            _ => Ok(None),
        }
    }

    fn find_primary(
        &self,
        fetch: &dyn Fetch,
        name: &[u8],
        hash: u64,
    ) -> Result<Option<RecordRef>, RunError> {
        let mut found = None;
        in_blocks_of(self.record_fences(), hash, |number| {
            let block = fetch.block(self, Section::Records, number)?;
            let span = (block.hashed(hash)).find(|span| span.primary(block.bytes()) == name);
            found = span.map(|span| RecordRef::new(block.clone(), self.number(), span));
            Ok(found.is_some())
        })?;
        Ok(found)
    }

    fn find_secondary(
        &self,
        fetch: &dyn Fetch,
        name: &[u8],
        hash: u64,
    ) -> Result<Option<RecordRef>, RunError> {
        let mut found = None;
        in_blocks_of(self.secondary_fences(), hash, |number| {
            let block = fetch.block(self, Section::Secondary, number)?;
            let at = self.secondary_fences()[number].at;
            for entry in entries_with(block.bytes(), hash) {
                found = self.record_of_entry(fetch, entry, name, at)?;
                if found.is_some() {
                    return Ok(true);
                }
            }
            Ok(false)
        })?;
        Ok(found)
    }

    /// The record `entry` (of the secondary block at `entry_at`) names,
    /// if its secondary name is `name`. An entry naming no record whose
    /// names hash to it is refused: the run's two sections disagree.
    fn record_of_entry(
        &self,
        fetch: &dyn Fetch,
        entry: SecondaryEntry,
        name: &[u8],
        entry_at: u64,
    ) -> Result<Option<RecordRef>, RunError> {
        let key = self.hash_key();
        let (mut found, mut named) = (None, false);
        in_blocks_of(self.record_fences(), entry.primary_hash, |number| {
            let block = fetch.block(self, Section::Records, number)?;
            for span in block.hashed(entry.primary_hash) {
                let secondary = span.secondary(block.bytes());
                if secondary == name {
                    found = Some(RecordRef::new(block.clone(), self.number(), span));
                    return Ok(true);
                }
                named |= key.secondary_hash(secondary) == entry.secondary_hash;
            }
            Ok(false)
        })?;
        if found.is_none() && !named {
            let expected = "an entry naming a record whose names hash to it";
            let found = format!("{:#x}, {:#x}", entry.secondary_hash, entry.primary_hash);
            let number = self.number();
            return Err(RunError::corrupt(
                number,
                Section::Secondary,
                entry_at,
                expected,
                found,
            ));
        }
        Ok(found)
    }
}

/// Calls `look` on each block of `fences` a name hashing to `wanted` can
/// be in, the last first, until it says found: of the blocks starting at
/// or before the hash, only the last can hold it, and the ones before it
/// while they start with that very hash (equal hashes straddling a
/// boundary).
pub(crate) fn in_blocks_of(
    fences: &[Fence],
    wanted: u64,
    mut look: impl FnMut(usize) -> Result<bool, RunError>,
) -> Result<(), RunError> {
    let mut block = fences.partition_point(|fence| fence.first <= wanted);
    while block > 0 {
        block -= 1;
        if look(block)? || fences[block].first < wanted {
            break;
        }
    }
    Ok(())
}
