//! Secondary blocks: a count, entries of a secondary hash and a primary
//! hash (`u64` each), and the block's CRC-32. An entry says "the record
//! whose primary name hashes to this has a secondary name hashing to
//! that": no block position is stored, so a merge can write this section
//! as it streams.

use crate::RunError;
use crate::block::{BlockBuilder, Place};
use crate::bytes::Le;
use crate::format::{ENTRY_LEN, SECONDARY_PER_BLOCK};

/// One entry of a run's secondary section. Entries are ordered by
/// secondary hash, then primary hash (the derived order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecondaryEntry {
    /// The secondary name's hash ([`crate::HashKey::secondary_hash`]).
    pub secondary_hash: u64,
    /// The primary name's hash of the record holding it
    /// ([`crate::HashKey::primary_hash`]).
    pub primary_hash: u64,
}

pub(crate) fn push_entry(block: &mut BlockBuilder, entry: SecondaryEntry) {
    block.push(&[
        &entry.secondary_hash.to_le_bytes(),
        &entry.primary_hash.to_le_bytes(),
    ]);
}

/// How many entries secondary block `block` of a run of `entries`
/// entries holds: [`SECONDARY_PER_BLOCK`], but for the last.
pub(crate) fn entries_in_block(entries: u64, block: u64) -> u64 {
    let per_block = SECONDARY_PER_BLOCK as u64;
    entries
        .saturating_sub(block.saturating_mul(per_block))
        .min(per_block)
}

/// Checks the secondary block `block` at `place`, which must hold
/// `wanted` entries, and puts them in `out`: its checksum, its count, and
/// that its entries are strictly increasing from its fence's hash, never
/// past the next block's.
pub(crate) fn check_secondary_block(
    block: &[u8],
    place: &Place,
    wanted: u64,
    out: &mut Vec<SecondaryEntry>,
) -> Result<(), RunError> {
    out.clear();
    let (mut input, count) = place.open(block, ENTRY_LEN)?;
    if u64::from(count) != wanted {
        return Err(place.refuse(0, format!("{wanted} entries"), count.to_string()));
    }
    for _ in 0..count {
        let entry_at = input.at();
        let Some(entry) = next_entry(&mut input) else {
            return Err(place.refuse(entry_at, "an entry", "the block's end"));
        };
        let placed = match out.last() {
            None => entry.secondary_hash == place.first,
            Some(last) => *last < entry,
        };
        if !placed || entry.secondary_hash > place.next {
            let expected = format!(
                "entries in order, hashes from {:#x} to {:#x}",
                place.first, place.next
            );
            let found = format!("{:#x}, {:#x}", entry.secondary_hash, entry.primary_hash);
            return Err(place.refuse(entry_at, expected, found));
        }
        out.push(entry);
    }
    place.ended(&input)
}

fn next_entry(input: &mut Le<'_>) -> Option<SecondaryEntry> {
    Some(SecondaryEntry {
        secondary_hash: input.u64()?,
        primary_hash: input.u64()?,
    })
}

/// The entries of a checked block, in order.
pub(crate) fn entries(block: &[u8]) -> impl Iterator<Item = SecondaryEntry> + '_ {
    let count = Le::new(block).u32().unwrap_or_default() as usize;
    (0..count).filter_map(|index| entry(block, index))
}

/// Entry `index` of a checked block.
fn entry(block: &[u8], index: usize) -> Option<SecondaryEntry> {
    let mut input = Le::new(block);
    input.take(4 + index * ENTRY_LEN)?;
    next_entry(&mut input)
}

/// The entries of a checked block whose secondary hash is `hash`, found
/// by binary search.
pub(crate) fn entries_with(block: &[u8], hash: u64) -> impl Iterator<Item = SecondaryEntry> + '_ {
    let count = Le::new(block).u32().unwrap_or_default() as usize;
    let (mut first, mut end) = (0, count);
    while first < end {
        let middle = first + (end - first) / 2;
        match entry(block, middle).is_some_and(|entry| entry.secondary_hash < hash) {
            true => first = middle + 1,
            false => end = middle,
        }
    }
    (first..count)
        .map_while(move |index| entry(block, index))
        .take_while(move |entry| entry.secondary_hash == hash)
}
