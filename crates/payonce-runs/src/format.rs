//! The layout of a run (docs/run-format.md): its limits, its fences and
//! its trailer, as bytes. What the sections mean is decided above this
//! file; here are only their places.

use crate::bytes::Le;
use crate::error::{RunError, Section};
use crate::filter::{BITS_PER_NAME_MIN, FILTER_BLOCK_LEN};
use crate::hash::HashKey;

/// The trailer's first bytes.
pub const MAGIC: [u8; 8] = *b"PAYORUN\0";
/// The layout this crate writes and reads; any other is refused.
pub const FORMAT_VERSION: u32 = 1;
/// The longest primary or secondary name, in bytes.
pub const NAME_LEN_MAX: usize = 4096;
/// The longest payload, in bytes.
pub const PAYLOAD_LEN_MAX: usize = 1 << 20;
/// A record's lengths before its bytes: primary (u16), secondary (u16),
/// payload (u32).
pub(crate) const RECORD_HEADER_LEN: usize = 2 + 2 + 4;
/// The most bytes one record takes in a block.
pub const RECORD_LEN_MAX: usize = RECORD_HEADER_LEN + 2 * NAME_LEN_MAX + PAYLOAD_LEN_MAX;
/// A block's count (u32) and its CRC-32.
pub(crate) const BLOCK_OVERHEAD_LEN: usize = 4 + 4;
/// A record block holding more than one record is at most this long: a
/// writer starts a new block rather than pass it.
pub const BLOCK_TARGET_LEN: usize = 8 << 10;
/// The longest block: one record of the longest kind.
pub const BLOCK_LEN_MAX: usize = BLOCK_OVERHEAD_LEN + RECORD_LEN_MAX;
/// The shortest record block: one record of empty names and payload.
pub(crate) const RECORD_BLOCK_LEN_MIN: usize = BLOCK_OVERHEAD_LEN + RECORD_HEADER_LEN;
/// Secondary entries a secondary block holds, but for the last.
pub const SECONDARY_PER_BLOCK: usize = 256;
/// A secondary entry: the secondary hash and the primary hash.
pub(crate) const ENTRY_LEN: usize = 8 + 8;
/// A fence: the block's first hash, its offset and its length.
pub(crate) const FENCE_LEN: usize = 8 + 8 + 4;
/// The trailer's length, its checksum included.
pub const TRAILER_LEN: usize = 8 + 4 + 16 + 4 * 8 + 4 * 8 + 4;
/// The most records a run holds: its filters' blocks stay countable in
/// 32 bits.
pub const RECORDS_MAX: u64 = 1 << 36;

const _: () = assert!(NAME_LEN_MAX <= u16::MAX as usize);
const _: () = assert!(PAYLOAD_LEN_MAX <= u32::MAX as usize);
const _: () = assert!(BLOCK_LEN_MAX <= u32::MAX as usize);
const _: () = assert!(BLOCK_TARGET_LEN < BLOCK_LEN_MAX);
const _: () = assert!(SECONDARY_PER_BLOCK <= u32::MAX as usize);
const _: () = assert!(TRAILER_LEN == 96);

/// Where a block is, and the first hash in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fence {
    /// The first record's primary hash, or the first entry's secondary
    /// hash.
    pub(crate) first: u64,
    /// The block's offset in the run.
    pub(crate) at: u64,
    /// Its length, checksum included.
    pub(crate) len: u32,
}

impl Fence {
    pub(crate) fn end(&self) -> u64 {
        self.at + u64::from(self.len)
    }

    pub(crate) fn encode(&self, into: &mut Vec<u8>) {
        into.extend_from_slice(&self.first.to_le_bytes());
        into.extend_from_slice(&self.at.to_le_bytes());
        into.extend_from_slice(&self.len.to_le_bytes());
    }
}

/// The trailer's fields but its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trailer {
    pub(crate) hash_key: HashKey,
    pub(crate) records: u64,
    pub(crate) entries: u64,
    pub(crate) record_blocks: u64,
    pub(crate) secondary_blocks: u64,
    pub(crate) secondary_at: u64,
    pub(crate) primary_filter_at: u64,
    pub(crate) secondary_filter_at: u64,
    pub(crate) fences_at: u64,
}

impl Trailer {
    /// Its bytes before the checksum.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(TRAILER_LEN);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        for word in [
            self.hash_key.k0,
            self.hash_key.k1,
            self.records,
            self.entries,
            self.record_blocks,
            self.secondary_blocks,
            self.secondary_at,
            self.primary_filter_at,
            self.secondary_filter_at,
            self.fences_at,
        ] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        assert_eq!(bytes.len(), TRAILER_LEN - 4);
        bytes
    }

    /// The trailer of run `run` from its last [`TRAILER_LEN`] bytes, which
    /// start at `at`, with the checksum it stores. Only its magic and
    /// version are checked: [`Trailer::check_layout`] checks the rest.
    pub(crate) fn decode(bytes: &[u8], at: u64, run: u64) -> Result<(Trailer, u32), RunError> {
        let refuse = |offset: u64, expected: String, found: String| {
            RunError::corrupt(run, Section::Trailer, at + offset, expected, found)
        };
        let mut input = Le::new(bytes);
        let magic = input.take(MAGIC.len()).unwrap_or_default();
        if magic != MAGIC {
            let found = format!("{:?}", magic.escape_ascii().to_string());
            return Err(refuse(0, format!("the magic {:?}", "PAYORUN\\0"), found));
        }
        let version = input.u32().unwrap_or_default();
        if version != FORMAT_VERSION {
            let expected = format!("format {FORMAT_VERSION}");
            return Err(refuse(8, expected, version.to_string()));
        }
        let mut words = [0u64; 10];
        for word in &mut words {
            *word = input.u64().unwrap_or_default();
        }
        let crc = input.u32().unwrap_or_default();
        let [
            k0,
            k1,
            records,
            entries,
            record_blocks,
            secondary_blocks,
            secondary_at,
            primary_filter_at,
            secondary_filter_at,
            fences_at,
        ] = words;
        let trailer = Trailer {
            hash_key: HashKey::new(k0, k1),
            records,
            entries,
            record_blocks,
            secondary_blocks,
            secondary_at,
            primary_filter_at,
            secondary_filter_at,
            fences_at,
        };
        Ok((trailer, crc))
    }

    /// Refuses a trailer at `at` whose sections do not follow each other
    /// up to it, or whose counts do not fit the bytes they are given: every
    /// count a reading allocates by is checked here.
    pub(crate) fn check_layout(&self, at: u64, run: u64) -> Result<(), RunError> {
        let sections = [
            0,
            self.secondary_at,
            self.primary_filter_at,
            self.secondary_filter_at,
            self.fences_at,
            at,
        ];
        let ordered = sections.windows(2).all(|pair| pair[0] <= pair[1]);
        let fences_len = (self.record_blocks.checked_add(self.secondary_blocks))
            .and_then(|blocks| blocks.checked_mul(FENCE_LEN as u64));
        let fences_fit = ordered && fences_len == Some(at - self.fences_at);
        if !fences_fit {
            let found = format!(
                "sections at {sections:?}, {} + {} fences",
                self.record_blocks, self.secondary_blocks
            );
            let expected = "sections in order, one fence per block before the trailer";
            return Err(RunError::corrupt(
                run,
                Section::Trailer,
                at,
                expected,
                found,
            ));
        }
        self.check_counts(at, run)
    }

    fn check_counts(&self, at: u64, run: u64) -> Result<(), RunError> {
        // Every product is checked: the counts are untrusted words.
        let records_len = (self.records.checked_mul(RECORD_HEADER_LEN as u64))
            .zip(self.record_blocks.checked_mul(BLOCK_OVERHEAD_LEN as u64))
            .and_then(|(records, blocks)| records.checked_add(blocks));
        let records_fit = self.records <= RECORDS_MAX
            && self.record_blocks <= self.records
            && (self.records == 0) == (self.record_blocks == 0)
            && records_len.is_some_and(|len| len <= self.secondary_at);
        let secondary_len = (self.entries.checked_mul(ENTRY_LEN as u64))
            .zip(self.secondary_blocks.checked_mul(BLOCK_OVERHEAD_LEN as u64))
            .and_then(|(entries, blocks)| entries.checked_add(blocks));
        let entries_fit = self.entries <= self.records
            && (self.entries == 0) == (self.records == 0)
            && self.secondary_blocks == self.entries.div_ceil(SECONDARY_PER_BLOCK as u64)
            && secondary_len == Some(self.primary_filter_at - self.secondary_at);
        let filters_fit = records_fit
            && filter_len_fits(
                self.secondary_filter_at - self.primary_filter_at,
                self.records,
            )
            && filter_len_fits(self.fences_at - self.secondary_filter_at, self.entries);
        if records_fit && entries_fit && filters_fit {
            return Ok(());
        }
        let found = format!(
            "{} records in {} blocks, {} entries in {} blocks, sections at {}, {}, {}, {}",
            self.records,
            self.record_blocks,
            self.entries,
            self.secondary_blocks,
            self.secondary_at,
            self.primary_filter_at,
            self.secondary_filter_at,
            self.fences_at
        );
        let expected = "counts that fit their sections";
        Err(RunError::corrupt(
            run,
            Section::Trailer,
            at,
            expected,
            found,
        ))
    }
}

/// Whether a filter section of `len` bytes is whole filter blocks and a
/// checksum, at least as many as `names` names need at the fewest bits a
/// name a writer ever used (it sizes its filters for at least the names it
/// writes), at most 2^32.
fn filter_len_fits(len: u64, names: u64) -> bool {
    let block = FILTER_BLOCK_LEN as u64;
    let needed = (names.saturating_mul(BITS_PER_NAME_MIN))
        .div_ceil(block * 8)
        .max(1);
    len.checked_sub(4).is_some_and(|bits| {
        bits % block == 0 && (needed..=u32::MAX.into()).contains(&(bits / block))
    })
}

/// The fences of one section from `bytes`, which start at `at` in run
/// `run`: its first block starts at `from`, each next one where the one
/// before ends, the last ends at `to`, each is `len_min` to
/// [`BLOCK_LEN_MAX`] bytes long, and their first hashes never go down.
pub(crate) fn read_fences(
    bytes: &[u8],
    at: u64,
    (from, to): (u64, u64),
    len_min: usize,
    run: u64,
) -> Result<Vec<Fence>, RunError> {
    let mut input = Le::new(bytes);
    let mut fences = Vec::with_capacity(bytes.len() / FENCE_LEN);
    let (mut block_at, mut last) = (from, 0u64);
    while input.left() >= FENCE_LEN {
        let fence_at = at + input.at() as u64;
        let fence = Fence {
            first: input.u64().unwrap_or_default(),
            at: input.u64().unwrap_or_default(),
            len: input.u32().unwrap_or_default(),
        };
        let placed = fence.at == block_at
            && fence.first >= last
            && (len_min..=BLOCK_LEN_MAX).contains(&(fence.len as usize))
            && fence.end() <= to;
        if !placed {
            let expected = format!(
                "a block at {block_at} of {len_min} to {BLOCK_LEN_MAX} bytes, before {to}, hashes from {last:#x}"
            );
            let found = format!(
                "{} bytes at {}, first hash {:#x}",
                fence.len, fence.at, fence.first
            );
            return Err(RunError::corrupt(
                run,
                Section::Fences,
                fence_at,
                expected,
                found,
            ));
        }
        (block_at, last) = (fence.end(), fence.first);
        fences.push(fence);
    }
    if block_at != to {
        let expected = format!("blocks that end at {to}");
        let found = format!("blocks that end at {block_at}");
        return Err(RunError::corrupt(run, Section::Fences, at, expected, found));
    }
    Ok(fences)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::BITS_PER_NAME;

    #[test]
    fn a_filter_written_at_the_fewest_bits_a_name_ever_used_still_fits() {
        // Guards against runs written before BITS_PER_NAME rose being
        // refused: their filters are smaller than a writer's today.
        let block = FILTER_BLOCK_LEN as u64;
        let sized = |bits: u64, names: u64| (names * bits).div_ceil(block * 8) * block + 4;
        assert!(filter_len_fits(sized(BITS_PER_NAME, 10_000), 10_000));
        assert!(filter_len_fits(sized(BITS_PER_NAME_MIN, 10_000), 10_000));
        assert!(!filter_len_fits(
            sized(BITS_PER_NAME_MIN - 1, 10_000),
            10_000
        ));
    }
}
