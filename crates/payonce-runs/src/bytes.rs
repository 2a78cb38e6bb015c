//! Reading fixed-width little-endian fields from untrusted bytes without a
//! panic, and the CRC-32 seal every block and section ends with.

/// A reader over bytes: each read answers `None` past the end.
#[derive(Debug, Clone)]
pub(crate) struct Le<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Le<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Le<'a> {
        Le { bytes, at: 0 }
    }

    /// How many bytes were read.
    pub(crate) fn at(&self) -> usize {
        self.at
    }

    /// How many bytes are left.
    pub(crate) fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub(crate) fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(len)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
}

/// The bytes of `block` before its last 4, if those are the CRC-32 of
/// them; else the checksum stored and the one computed.
pub(crate) fn sealed(block: &[u8]) -> Result<&[u8], (u32, u32)> {
    let Some(body_len) = block.len().checked_sub(4) else {
        return Err((0, 0));
    };
    let (body, stored) = block.split_at(body_len);
    let mut word = [0u8; 4];
    word.copy_from_slice(stored);
    let stored = u32::from_le_bytes(word);
    let computed = crc32fast::hash(body);
    if stored == computed {
        Ok(body)
    } else {
        Err((stored, computed))
    }
}
