//! The bytes on disk: segment names, the segment header, record and seal
//! frames. docs/log-format.md describes the same layout for people; this is
//! the only module that knows offsets.

use crate::chain::{Digest, Head};

/// Default most bytes of one record's payload: [`crate::LogConfig::record_max`].
pub const RECORD_MAX: u32 = 1 << 20;

/// Default most bytes of one segment file, header and seal included:
/// [`crate::LogConfig::segment_len_max`].
pub const SEGMENT_LEN_MAX: u64 = 64 << 20;

/// The largest [`crate::LogConfig::record_max`] a configuration may ask for.
pub const RECORD_MAX_CEILING: u32 = 256 << 20;

/// The largest [`crate::LogConfig::segment_len_max`] a configuration may ask
/// for. A segment is read into memory whole, so this bounds that allocation.
pub const SEGMENT_LEN_MAX_CEILING: u64 = 1 << 30;

/// Version of the on-disk format written in every segment header.
pub const FORMAT_VERSION: u32 = 2;

/// The previous format version, whose segments are still read (and sealed,
/// but never written further): records without batch headers.
pub const FORMAT_VERSION_V1: u32 = 1;

/// Bytes of a segment header.
pub const SEGMENT_HEADER_LEN: usize = 40;

/// Bytes of a frame before its payload: crc, length and sequence number.
pub const FRAME_HEADER_LEN: usize = 16;

/// Bytes of the seal frame that closes a segment when the log rolls.
pub const SEAL_LEN: usize = 16;

/// Bytes of the header in front of every flushed batch of records
/// (format version 2).
pub const BATCH_HEADER_LEN: usize = 64;

/// The name of the checkpoint file: two slots, each holding a durable head.
pub const CHECKPOINT_FILE: &str = "CHECKPOINT";

/// Bytes of one checkpoint slot.
pub const CHECKPOINT_SLOT_LEN: usize = 80;

/// Where the second checkpoint slot starts: a page after the first, so a
/// write torn inside one page never reaches both.
pub const CHECKPOINT_SLOT_STRIDE: usize = 4096;

/// Bytes of the checkpoint file.
pub const CHECKPOINT_LEN: usize = CHECKPOINT_SLOT_STRIDE + CHECKPOINT_SLOT_LEN;

pub(crate) const MAGIC: [u8; 8] = *b"PAYONCE\0";

/// The length field of a seal frame. No record can claim it, because
/// [`RECORD_MAX_CEILING`] is far below it.
pub(crate) const SEAL_MARKER: u32 = u32::MAX;

/// The length field of a batch header: no record can claim it either.
pub(crate) const BATCH_MARKER: u32 = u32::MAX - 1;

const CHECKPOINT_MAGIC: [u8; 8] = *b"PAYONCK\0";

/// Header flag: the writer of this segment writes zeros ahead of its
/// records (`LogConfig::preallocate_len`), so zeros after the last frame, and
/// after the seal, are free space rather than damage.
pub(crate) const FLAG_ZEROS_AHEAD: u32 = 1;

/// Every header flag this version knows; any other bit is refused.
pub(crate) const FLAGS_KNOWN: u32 = FLAG_ZEROS_AHEAD;

/// Frames start and end on multiples of this.
pub(crate) const ALIGN: usize = 8;

const SEGMENT_SUFFIX: &str = ".log";
const TMP_SUFFIX: &str = ".tmp";
const SEGMENT_DIGITS: usize = 20;

const _: () = assert!(RECORD_MAX <= RECORD_MAX_CEILING);
const _: () = assert!(RECORD_MAX_CEILING < BATCH_MARKER && BATCH_MARKER < SEAL_MARKER);
const _: () = assert!(BATCH_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(SEGMENT_LEN_MAX <= SEGMENT_LEN_MAX_CEILING);
const _: () = assert!(SEGMENT_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(FRAME_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(SEAL_LEN == FRAME_HEADER_LEN);
const _: () = assert!(
    ((SEGMENT_HEADER_LEN + BATCH_HEADER_LEN + SEAL_LEN) as u64) + frame_len(RECORD_MAX)
        <= SEGMENT_LEN_MAX
);
const _: () = assert!(
    ((SEGMENT_HEADER_LEN + BATCH_HEADER_LEN + SEAL_LEN) as u64) + frame_len(RECORD_MAX_CEILING)
        <= SEGMENT_LEN_MAX_CEILING
);
// A segment of the largest allowed size must fit in memory's address space.
const _: () = assert!(SEGMENT_LEN_MAX_CEILING <= usize::MAX as u64);
// u64::MAX has 20 decimal digits, so every sequence number has a name.
const _: () = assert!(u64::MAX / 10_u64.pow(SEGMENT_DIGITS as u32 - 1) >= 1);

/// Bytes a record with a payload of `payload_len` bytes occupies on disk.
pub(crate) const fn frame_len(payload_len: u32) -> u64 {
    let padded = (payload_len as u64).div_ceil(ALIGN as u64) * ALIGN as u64;
    FRAME_HEADER_LEN as u64 + padded
}

/// The file name of the segment whose first record is `first_seq`: twenty
/// digits, then `.log` (docs/log-format.md).
pub fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}{SEGMENT_SUFFIX}")
}

/// The temporary name a new segment has until its header is synced.
pub(crate) fn segment_tmp_name(first_seq: u64) -> String {
    format!("{first_seq:020}{SEGMENT_SUFFIX}{TMP_SUFFIX}")
}

/// The first sequence number of a segment named `name`, if `name` is exactly
/// a segment name (twenty digits then `.log`).
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != SEGMENT_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` is a segment's temporary name: debris of a roll, or of
/// the creation of the first segment.
pub fn is_segment_tmp_name(name: &str) -> bool {
    name.strip_suffix(TMP_SUFFIX)
        .is_some_and(|segment| parse_segment_name(segment).is_some())
}

/// The chain value the first segment's header carries: there is no previous
/// record, so the log's identity seeds the chain and a record of one log
/// never verifies in another.
pub(crate) fn first_chain(log_id: u64) -> u32 {
    crc32fast::hash(&log_id.to_le_bytes())
}

/// The fields of a segment header that vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// [`FORMAT_VERSION`], or [`FORMAT_VERSION_V1`] for a segment the
    /// previous format wrote.
    pub(crate) version: u32,
    pub(crate) log_id: u64,
    pub(crate) first_seq: u64,
    pub(crate) chain: u32,
    /// [`FLAG_ZEROS_AHEAD`].
    pub(crate) zeros_ahead: bool,
}

/// What is wrong with 40 bytes that should be a segment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderFault {
    Magic { found: [u8; 8] },
    Version { found: u32 },
    Flags { found: u32 },
    Checksum { stored: u32, computed: u32 },
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut bytes = [0u8; SEGMENT_HEADER_LEN];
        bytes[0..8].copy_from_slice(&MAGIC);
        assert!(self.version == FORMAT_VERSION || self.version == FORMAT_VERSION_V1);
        bytes[8..12].copy_from_slice(&self.version.to_le_bytes());
        let flags = if self.zeros_ahead {
            FLAG_ZEROS_AHEAD
        } else {
            0
        };
        bytes[12..16].copy_from_slice(&flags.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.log_id.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.first_seq.to_le_bytes());
        bytes[32..36].copy_from_slice(&self.chain.to_le_bytes());
        let crc = crc32fast::hash(&bytes[0..36]);
        bytes[36..40].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Decodes a header, checking its checksum first so that a damaged field
    /// is reported as damage rather than as a strange value.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, HeaderFault> {
        assert_eq!(bytes.len(), SEGMENT_HEADER_LEN);
        let stored = read_u32(bytes, 36);
        let computed = crc32fast::hash(&bytes[0..36]);
        if stored != computed {
            return Err(HeaderFault::Checksum { stored, computed });
        }
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&bytes[0..8]);
        if magic != MAGIC {
            return Err(HeaderFault::Magic { found: magic });
        }
        let version = read_u32(bytes, 8);
        if version != FORMAT_VERSION && version != FORMAT_VERSION_V1 {
            return Err(HeaderFault::Version { found: version });
        }
        let flags = read_u32(bytes, 12);
        if flags & !FLAGS_KNOWN != 0 {
            return Err(HeaderFault::Flags { found: flags });
        }
        let header = Header {
            version,
            log_id: read_u64(bytes, 16),
            first_seq: read_u64(bytes, 24),
            chain: read_u32(bytes, 32),
            zeros_ahead: flags & FLAG_ZEROS_AHEAD != 0,
        };
        assert_eq!(header.encode().as_slice(), bytes);
        Ok(header)
    }
}

impl HeaderFault {
    /// What a good header has there, and what these bytes have.
    pub(crate) fn expected_found(&self) -> (String, String) {
        match self {
            HeaderFault::Magic { found } => (
                format!("magic {:?}", String::from_utf8_lossy(&MAGIC)),
                format!("magic {:?}", String::from_utf8_lossy(found)),
            ),
            HeaderFault::Version { found } => (
                format!("format version {FORMAT_VERSION_V1} or {FORMAT_VERSION}"),
                format!("format version {found}"),
            ),
            HeaderFault::Flags { found } => (
                format!("flags within {FLAGS_KNOWN:#x}"),
                format!("flags {found:#x}"),
            ),
            HeaderFault::Checksum { stored, computed } => (
                format!("header checksum {computed:#010x} (computed)"),
                format!("header checksum {stored:#010x} (stored)"),
            ),
        }
    }
}

/// Appends one record frame for `payload` to `buf`, chained from `chain`, and
/// returns the frame's checksum: the chain value of the next frame.
pub(crate) fn push_frame(buf: &mut Vec<u8>, chain: u32, seq: u64, payload: &[u8]) -> u32 {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    assert!(len <= RECORD_MAX_CEILING, "callers check the record limit");
    let start = buf.len();
    assert!(start.is_multiple_of(ALIGN));
    let total = usize::try_from(frame_len(len)).unwrap_or(usize::MAX);
    buf.reserve(total);
    buf.extend_from_slice(&[0u8; 4]);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(payload);
    buf.resize(start + total, 0);
    let crc = chained_crc(chain, &buf[start + 4..]);
    buf[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// The seal frame that closes a segment whose last chain value is `chain`,
/// naming `next_seq`, the first sequence number of the next segment.
pub(crate) fn seal_frame(chain: u32, next_seq: u64) -> [u8; SEAL_LEN] {
    let mut bytes = [0u8; SEAL_LEN];
    bytes[4..8].copy_from_slice(&SEAL_MARKER.to_le_bytes());
    bytes[8..16].copy_from_slice(&next_seq.to_le_bytes());
    let crc = chained_crc(chain, &bytes[4..]);
    bytes[0..4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// crc32 of `bytes`, continuing from `chain`.
#[inline]
pub(crate) fn chained_crc(chain: u32, bytes: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(chain);
    hasher.update(bytes);
    hasher.finalize()
}

#[inline]
pub(crate) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut field = [0u8; 4];
    field.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(field)
}

#[inline]
pub(crate) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

/// The fixed fields of the frame at `offset`: (crc, len, seq). The caller
/// has checked that `FRAME_HEADER_LEN` bytes are there.
#[inline]
pub(crate) fn frame_fields(bytes: &[u8], offset: usize) -> (u32, u32, u64) {
    (
        read_u32(bytes, offset),
        read_u32(bytes, offset + 4),
        read_u64(bytes, offset + 8),
    )
}

/// The fields of a batch header: the records of one flush that follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub(crate) first_seq: u64,
    /// Records in the batch, at least one.
    pub(crate) count: u32,
    /// Bytes of the record frames after the header.
    pub(crate) extent: u32,
    /// The checksum the batch's first record chains from.
    pub(crate) chain: u32,
    /// The chain digest of the batch (crate::chain).
    pub(crate) digest: Digest,
}

impl BatchHeader {
    /// The header's bytes, its checksum seeded with the log's identity, so a
    /// batch header verifies on its own but in no other log.
    pub(crate) fn encode(&self, log_id: u64) -> [u8; BATCH_HEADER_LEN] {
        let mut bytes = self.fields();
        let crc = chained_crc(first_chain(log_id), &bytes[4..]);
        bytes[0..4].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// The header's bytes but for its checksum, which is left zero.
    fn fields(&self) -> [u8; BATCH_HEADER_LEN] {
        let mut bytes = [0u8; BATCH_HEADER_LEN];
        bytes[4..8].copy_from_slice(&BATCH_MARKER.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.first_seq.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.count.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.extent.to_le_bytes());
        bytes[24..28].copy_from_slice(&self.chain.to_le_bytes());
        bytes[32..64].copy_from_slice(&self.digest.0);
        bytes
    }

    /// Decodes the header at the start of `bytes` (at least
    /// [`BATCH_HEADER_LEN`] of them) if its marker is there and its checksum
    /// verifies for `log_id`; `None` otherwise. Its fields are the caller's
    /// to check against the log.
    pub(crate) fn decode(bytes: &[u8], log_id: u64) -> Option<BatchHeader> {
        let Some(bytes) = bytes.first_chunk::<BATCH_HEADER_LEN>() else {
            panic!("a batch header read from {} bytes", bytes.len());
        };
        if read_u32(bytes, 4) != BATCH_MARKER
            || read_u32(bytes, 0) != chained_crc(first_chain(log_id), &bytes[4..])
            || read_u32(bytes, 28) != 0
        {
            return None;
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&bytes[32..64]);
        let header = BatchHeader {
            first_seq: read_u64(bytes, 8),
            count: read_u32(bytes, 16),
            extent: read_u32(bytes, 20),
            chain: read_u32(bytes, 24),
            digest: Digest(digest),
        };
        // Every byte read back, but the checksum just verified. Checked in
        // debug builds and by `tests::a_batch_header_reads_back_as_written`:
        // in replay, which reads a header per flush, comparing the bytes
        // again cost 5% of the scanning thread.
        debug_assert!(header.fields()[4..] == bytes[4..]);
        Some(header)
    }
}

/// What one checkpoint slot holds: a head the writer knew to be durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) log_id: u64,
    /// Grows by one with every checkpoint; the valid slot with the larger
    /// one is the checkpoint.
    pub(crate) generation: u64,
    pub(crate) head: Head,
}

impl Slot {
    /// The bytes of this slot as slot `index` (0 or 1).
    pub(crate) fn encode(&self, index: u32) -> [u8; CHECKPOINT_SLOT_LEN] {
        assert!(index < 2);
        let mut bytes = [0u8; CHECKPOINT_SLOT_LEN];
        bytes[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
        bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&index.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.log_id.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.generation.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.head.seq.to_le_bytes());
        bytes[40..72].copy_from_slice(&self.head.digest.0);
        let crc = crc32fast::hash(&bytes[0..72]);
        bytes[72..76].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Slot `index` if its bytes are whole: magic, version, index and
    /// checksum; `None` for a slot never written or torn.
    pub(crate) fn decode(bytes: &[u8], index: u32) -> Option<Slot> {
        if bytes.len() < CHECKPOINT_SLOT_LEN {
            return None;
        }
        let bytes = &bytes[..CHECKPOINT_SLOT_LEN];
        if bytes[0..8] != CHECKPOINT_MAGIC
            || read_u32(bytes, 8) != FORMAT_VERSION
            || read_u32(bytes, 12) != index
            || read_u32(bytes, 72) != crc32fast::hash(&bytes[0..72])
            || read_u32(bytes, 76) != 0
        {
            return None;
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&bytes[40..72]);
        Some(Slot {
            log_id: read_u64(bytes, 16),
            generation: read_u64(bytes, 24),
            head: Head {
                seq: read_u64(bytes, 32),
                digest: Digest(digest),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    // Guards against counting a stray file as a segment, or missing one.
    #[test]
    fn only_twenty_digit_log_names_are_segments() {
        assert_eq!(parse_segment_name("00000000000000000001.log"), Some(1));
        assert_eq!(segment_name(1), "00000000000000000001.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("00000000000000000001.log.tmp"), None);
        assert_eq!(parse_segment_name("0001.log"), None);
        assert_eq!(parse_segment_name("audit-index"), None);
        assert_eq!(parse_segment_name("LOCK"), None);
    }

    proptest! {
        #[test]
        fn a_batch_header_reads_back_as_written(
            first_seq in any::<u64>(),
            count in any::<u32>(),
            extent in any::<u32>(),
            chain in any::<u32>(),
            digest in any::<[u8; 32]>(),
            log_id in any::<u64>(),
            flip in (4usize..BATCH_HEADER_LEN, 1u8..=255),
        ) {
            // Guards against encode and decode disagreeing on a field's place, and against a header verifying in another log or with a byte changed.
            let header = BatchHeader { first_seq, count, extent, chain, digest: Digest(digest) };
            let mut bytes = header.encode(log_id);
            prop_assert_eq!(BatchHeader::decode(&bytes, log_id), Some(header));
            prop_assert_eq!(BatchHeader::decode(&bytes, log_id ^ 1), None);
            bytes[flip.0] ^= flip.1;
            prop_assert_eq!(BatchHeader::decode(&bytes, log_id), None);
        }
    }
}
