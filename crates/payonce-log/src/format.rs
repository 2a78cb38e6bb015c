//! The bytes on disk: segment names, the segment header, record and seal
//! frames. docs/log-format.md describes the same layout for people; this is
//! the only module that knows offsets.

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
pub const FORMAT_VERSION: u32 = 1;

/// Bytes of a segment header.
pub const SEGMENT_HEADER_LEN: usize = 40;

/// Bytes of a frame before its payload: crc, length and sequence number.
pub const FRAME_HEADER_LEN: usize = 16;

/// Bytes of the seal frame that closes a segment when the log rolls.
pub const SEAL_LEN: usize = 16;

pub(crate) const MAGIC: [u8; 8] = *b"PAYONCE\0";

/// The length field of a seal frame. No record can claim it, because
/// [`RECORD_MAX_CEILING`] is far below it.
pub(crate) const SEAL_MARKER: u32 = u32::MAX;

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
const _: () = assert!(RECORD_MAX_CEILING < SEAL_MARKER);
const _: () = assert!(SEGMENT_LEN_MAX <= SEGMENT_LEN_MAX_CEILING);
const _: () = assert!(SEGMENT_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(FRAME_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(SEAL_LEN == FRAME_HEADER_LEN);
const _: () = assert!(
    (SEGMENT_HEADER_LEN as u64) + frame_len(RECORD_MAX) + (SEAL_LEN as u64) <= SEGMENT_LEN_MAX
);
const _: () = assert!(
    (SEGMENT_HEADER_LEN as u64) + frame_len(RECORD_MAX_CEILING) + (SEAL_LEN as u64)
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

/// The file name of the segment whose first record is `first_seq`.
pub(crate) fn segment_name(first_seq: u64) -> String {
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
        bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
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
        if version != FORMAT_VERSION {
            return Err(HeaderFault::Version { found: version });
        }
        let flags = read_u32(bytes, 12);
        if flags & !FLAGS_KNOWN != 0 {
            return Err(HeaderFault::Flags { found: flags });
        }
        let header = Header {
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
                format!("format version {FORMAT_VERSION}"),
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
