//! What every block is: a count (`u32`), its items, and the CRC-32 of
//! those bytes; and where a block stands among its section's others.

use crate::bytes::{Le, sealed};
use crate::error::{RunError, Section};

/// A block being filled, then sealed.
#[derive(Debug)]
pub(crate) struct BlockBuilder {
    bytes: Vec<u8>,
    count: u32,
}

impl BlockBuilder {
    pub(crate) fn new() -> BlockBuilder {
        BlockBuilder {
            bytes: vec![0; 4],
            count: 0,
        }
    }

    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// How long the block would be, sealed, with `more` bytes of items
    /// more.
    pub(crate) fn sealed_len_with(&self, more: usize) -> usize {
        self.bytes.len() + more + 4
    }

    /// Adds one item made of `parts`.
    pub(crate) fn push(&mut self, parts: &[&[u8]]) {
        for part in parts {
            self.bytes.extend_from_slice(part);
        }
        self.count += 1;
    }

    /// The block's bytes: its count, its items, their CRC-32. Call
    /// [`BlockBuilder::reset`] before pushing again.
    pub(crate) fn seal(&mut self) -> &[u8] {
        assert!(self.count > 0, "a block holds at least one item");
        self.bytes[..4].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32fast::hash(&self.bytes);
        self.bytes.extend_from_slice(&crc.to_le_bytes());
        &self.bytes
    }

    pub(crate) fn reset(&mut self) {
        self.bytes.clear();
        self.bytes.extend_from_slice(&[0; 4]);
        self.count = 0;
    }
}

/// Where a block read for checking stands: its run, section and offset,
/// the first hash its fence gives, and the next block's first hash
/// ([`u64::MAX`] after the last), which none of its hashes passes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub(crate) run: u64,
    pub(crate) section: Section,
    pub(crate) at: u64,
    pub(crate) first: u64,
    pub(crate) next: u64,
}

impl Place {
    /// A refusal of the byte `offset` bytes into the block.
    pub(crate) fn refuse(
        &self,
        offset: usize,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> RunError {
        let at = self.at + offset as u64;
        RunError::corrupt(self.run, self.section, at, expected, found)
    }

    /// The items of `block` (its bytes between the count and the
    /// checksum) and their count, once its checksum is checked and its
    /// count is between 1 and what `item_len_min` bytes an item allow.
    pub(crate) fn open<'b>(
        &self,
        block: &'b [u8],
        item_len_min: usize,
    ) -> Result<(Le<'b>, u32), RunError> {
        let body = sealed(block).map_err(|(stored, computed)| {
            let expected = format!("checksum {computed:#010x} of its bytes");
            self.refuse(0, expected, format!("{stored:#010x}"))
        })?;
        let mut input = Le::new(body);
        let count = input.u32().unwrap_or_default();
        let count_max = input.left() / item_len_min;
        if count == 0 || count as usize > count_max {
            let expected = format!("from 1 to {count_max} items");
            return Err(self.refuse(0, expected, count.to_string()));
        }
        Ok((input, count))
    }

    /// Refuses a block whose items ended before its checksum.
    pub(crate) fn ended(&self, input: &Le<'_>) -> Result<(), RunError> {
        match input.left() {
            0 => Ok(()),
            left => Err(self.refuse(input.at(), "no more bytes", format!("{left} bytes more"))),
        }
    }
}
