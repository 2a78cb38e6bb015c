//! Record blocks: a count, records framed as three lengths (`u16`, `u16`,
//! `u32`) then the primary name, the secondary name and the payload, and
//! the block's CRC-32.

use crate::RunError;
use crate::block::{BlockBuilder, Place};
use crate::bytes::Le;
use crate::format::{BLOCK_TARGET_LEN, NAME_LEN_MAX, PAYLOAD_LEN_MAX, RECORD_HEADER_LEN};
use crate::hash::HashKey;
use crate::record::Record;

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
    /// Where its lengths start: what a checked block keeps of it.
    pub(crate) fn header_at(&self) -> u32 {
        self.at - RECORD_HEADER_LEN as u32
    }

    /// Its bytes from `at` for `len`, in `block`: the empty slice if the
    /// span does not lie in it (a span is only made from a checked block).
    fn part(block: &[u8], at: usize, len: usize) -> &[u8] {
        block.get(at..at + len).unwrap_or_default()
    }

    pub(crate) fn primary<'b>(&self, block: &'b [u8]) -> &'b [u8] {
        Span::part(block, self.at as usize, usize::from(self.primary_len))
    }

    pub(crate) fn secondary<'b>(&self, block: &'b [u8]) -> &'b [u8] {
        let at = self.at as usize + usize::from(self.primary_len);
        Span::part(block, at, usize::from(self.secondary_len))
    }

    pub(crate) fn payload<'b>(&self, block: &'b [u8]) -> &'b [u8] {
        let at = self.at as usize + usize::from(self.primary_len) + usize::from(self.secondary_len);
        Span::part(block, at, self.payload_len as usize)
    }
}

/// How many bytes `record` takes in a block.
pub(crate) fn record_len(record: &Record<'_>) -> usize {
    RECORD_HEADER_LEN + record.primary.len() + record.secondary.len() + record.payload.len()
}

/// Adds `record`, whose lengths the caller checked, to `block`.
pub(crate) fn push_record(block: &mut BlockBuilder, record: &Record<'_>) {
    let primary_len = record.primary.len() as u16;
    let secondary_len = record.secondary.len() as u16;
    let payload_len = record.payload.len() as u32;
    block.push(&[
        &primary_len.to_le_bytes(),
        &secondary_len.to_le_bytes(),
        &payload_len.to_le_bytes(),
        record.primary,
        record.secondary,
        record.payload,
    ]);
}

/// The next record's place in a block, if its lengths are within their
/// limits and its bytes within the block.
fn next_span(input: &mut Le<'_>) -> Option<Span> {
    let primary_len = input.u16()?;
    let secondary_len = input.u16()?;
    let payload_len = input.u32()?;
    let within = usize::from(primary_len) <= NAME_LEN_MAX
        && usize::from(secondary_len) <= NAME_LEN_MAX
        && payload_len as usize <= PAYLOAD_LEN_MAX;
    if !within {
        return None;
    }
    // The reader is over the whole block, its count included.
    let at = u32::try_from(input.at()).ok()?;
    let len = usize::from(primary_len) + usize::from(secondary_len) + payload_len as usize;
    input.take(len)?;
    Some(Span {
        at,
        primary_len,
        secondary_len,
        payload_len,
    })
}

/// Checks the record block `block` at `place`, hashing primary names
/// under `key`, and puts each record's primary hash and place in `spans`:
/// its checksum, its count, every record's lengths, its length (at most
/// [`BLOCK_TARGET_LEN`] unless it holds one record), and that its records
/// are in strictly increasing (hash, name) order from its fence's hash,
/// never past the next block's.
pub(crate) fn check_record_block(
    block: &[u8],
    place: &Place,
    key: HashKey,
    spans: &mut Vec<(u64, Span)>,
) -> Result<(), RunError> {
    spans.clear();
    let (mut input, count) = place.open(block, RECORD_HEADER_LEN)?;
    if count > 1 && block.len() > BLOCK_TARGET_LEN {
        let expected = format!("at most {BLOCK_TARGET_LEN} bytes for {count} records");
        return Err(place.refuse(0, expected, format!("{} bytes", block.len())));
    }
    for _ in 0..count {
        let record_at = input.at();
        let span = next_span(&mut input).ok_or_else(|| {
            let expected = "a record within its limits and the block";
            place.refuse(record_at, expected, "lengths that do not fit")
        })?;
        let name = span.primary(block);
        let hash = key.primary_hash(name);
        let placed = match spans.last() {
            None => hash == place.first,
            Some(&(last_hash, last)) => (last_hash, last.primary(block)) < (hash, name),
        };
        if !placed || hash > place.next {
            let expected = format!(
                "names in order, hashes from {:#x} to {:#x}",
                place.first, place.next
            );
            return Err(place.refuse(record_at, expected, format!("hash {hash:#x}")));
        }
        spans.push((hash, span));
    }
    place.ended(&input)
}

/// The record whose lengths start at `at` in a checked block.
pub(crate) fn span_at(block: &[u8], at: u32) -> Option<Span> {
    let mut input = Le::new(block);
    input.take(at as usize)?;
    next_span(&mut input)
}
