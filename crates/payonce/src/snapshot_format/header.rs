//! A snapshot's header: who it belongs to, what it vouches for, and how
//! long and whole its parts are. docs/snapshot-format.md gives every byte;
//! this module is the only code that knows the header's offsets.

use std::num::NonZeroU32;

use super::error::SnapshotError;
use payonce_log::{Digest, Head};

/// The first 8 bytes of every snapshot.
pub(crate) const MAGIC: [u8; 8] = *b"PAYONSS\0";

/// The snapshot format this build reads and writes.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 5;

/// Keys a part of a body's keys section holds, as this build writes them:
/// enough parts at 1M keys (4) for two threads to share them evenly, few
/// enough at 10M (39) that their starts cost nothing. A multiple of the
/// state's chunks of entries, so a part's entries are taken over whole.
pub const KEYS_PART_LEN: NonZeroU32 = match NonZeroU32::new(1 << 18) {
    Some(len) => len,
    None => panic!("a part holds keys"),
};

/// Bytes of the header, before the body.
pub const SNAPSHOT_HEADER_LEN: usize = 96;

/// The header: who the snapshot belongs to, what it vouches for, how long
/// and whole its body is, and how long the manifest after the body is (it
/// checks itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) format_version: u32,
    pub(crate) schema_version: u32,
    pub(crate) log_id: u64,
    /// The last event the state holds.
    pub(crate) seq: u64,
    /// A head of the log at or after `seq`, durable when the snapshot was
    /// taken, which vouches for every event up to it.
    pub(crate) head: Head,
    pub(crate) body_len: u64,
    pub(crate) body_crc: u32,
    /// Bytes of the manifest after the body, which names the runs holding
    /// the settled pairs.
    pub(crate) manifest_len: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; SNAPSHOT_HEADER_LEN] {
        let mut bytes = [0u8; SNAPSHOT_HEADER_LEN];
        bytes[0..8].copy_from_slice(&MAGIC);
        bytes[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.schema_version.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.log_id.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.seq.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.head.seq.to_le_bytes());
        bytes[40..72].copy_from_slice(&self.head.digest.0);
        bytes[72..80].copy_from_slice(&self.body_len.to_le_bytes());
        bytes[80..84].copy_from_slice(&self.body_crc.to_le_bytes());
        bytes[84..92].copy_from_slice(&self.manifest_len.to_le_bytes());
        let crc = crc32fast::hash(&bytes[0..92]);
        bytes[92..96].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Reads a header, checking its magic, checksum and format version
    /// before any other field is believed.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, SnapshotError> {
        let Some(bytes) = bytes.first_chunk::<SNAPSHOT_HEADER_LEN>() else {
            return Err(SnapshotError::Length {
                expected: SNAPSHOT_HEADER_LEN as u64,
                found: bytes.len() as u64,
            });
        };
        if bytes[0..8] != MAGIC {
            return Err(SnapshotError::Invalid {
                field: "magic",
                offset: 0,
                expected: format!("{:?}", String::from_utf8_lossy(&MAGIC)),
                found: format!("{:?}", String::from_utf8_lossy(&bytes[0..8])),
            });
        }
        let stored = u32_at(bytes, 92);
        let computed = crc32fast::hash(&bytes[0..92]);
        if stored != computed {
            return Err(SnapshotError::Checksum {
                part: "header",
                stored,
                computed,
            });
        }
        let format_version = u32_at(bytes, 8);
        if format_version != SNAPSHOT_FORMAT_VERSION {
            return Err(SnapshotError::Version {
                found: format_version,
                supported: SNAPSHOT_FORMAT_VERSION,
            });
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&bytes[40..72]);
        Ok(Header {
            format_version,
            schema_version: u32_at(bytes, 12),
            log_id: u64_at(bytes, 16),
            seq: u64_at(bytes, 24),
            head: Head {
                seq: u64_at(bytes, 32),
                digest: Digest(digest),
            },
            body_len: u64_at(bytes, 72),
            body_crc: u32_at(bytes, 80),
            manifest_len: u64_at(bytes, 84),
        })
    }
}

fn u32_at(bytes: &[u8; SNAPSHOT_HEADER_LEN], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8; SNAPSHOT_HEADER_LEN], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}
