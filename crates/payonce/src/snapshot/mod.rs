//! Snapshots of the projections: a [`State`] at some event, in a
//! documented byte format (docs/snapshot-format.md), so opening a ledger
//! costs the events since the newest snapshot rather than its whole
//! history.
//!
//! A snapshot is a cache, never a source of truth. It names the log it
//! was taken of and a head of that log (a batch's last seq and its chain
//! digest, durable when the snapshot was taken, at or after the snapshot's
//! last event), and it is believed only where the log itself holds that
//! head (`payonce_log::Opening::head_at`), and only after every field of
//! it passed the rules replay checks. One that fails any check is set
//! aside, never deleted, and opening falls back to an older one, then to
//! a full replay. Audits replay from the first event whatever snapshots
//! exist; `payonce verify --snapshots` rebuilds the state at each
//! snapshot's seq and compares it with the snapshot, field by field.
//!
//! - [`encode`] and [`decode`]: a state to bytes and back.
//! - [`SnapshotStore`]: where snapshots are kept (a directory beside the
//!   log, [`DirSnapshots`]; a table, in `payonce-postgres`).
//! - [`SnapshotPolicy`]: when a ledger takes them.

mod audit;
mod load;
mod policy;
mod store;
#[cfg(test)]
mod tests;

use std::num::NonZeroU32;

use payonce_log::Head;

pub use self::audit::{SnapshotCheck, SnapshotVerdict, verify_snapshots};
pub(crate) use self::load::{Loaded, load_newest, load_newest_of};
pub use self::policy::{SNAPSHOT_EVENTS, SNAPSHOT_INTERVAL, SNAPSHOT_SHARE_MAX, SnapshotPolicy};
pub use self::store::{DirSnapshots, SNAPSHOTS_DIR, SNAPSHOTS_KEPT, SnapshotStore, StoredSnapshot};
use crate::event::SCHEMA_VERSION;
pub use crate::snapshot_format::SnapshotError;
use crate::snapshot_format::header::Header;
use crate::snapshot_format::reader::{BodyBytes, Reader};
pub use crate::snapshot_format::{KEYS_PART_LEN, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_HEADER_LEN};
pub use crate::snapshot_format::{SNAPSHOT_READ_LEN, SnapshotFile};
use crate::state::{ArchiveAt, State};

/// The largest snapshot read: about 4,000 times a snapshot of 10M claimed
/// withdrawals (about 2 GiB), and checked before a byte of it is read.
pub const SNAPSHOT_LEN_MAX: u64 = 1 << 43;

/// What a snapshot says of itself, read from its checked header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The last event the state it holds applied.
    pub seq: u64,
    /// The head of the log that vouches for it: durable when it was taken,
    /// at or after `seq`.
    pub head: Head,
    /// The identity of the log it was taken of.
    pub log_id: u64,
    /// Its length in bytes, header included.
    pub len: u64,
    /// The event schema it was taken under.
    pub schema_version: u32,
}

/// The bytes of a snapshot of `state`, taken of the log `log_id` whose
/// durable head `head` is at or after the state's last event: its keys in
/// parts of [`KEYS_PART_LEN`].
pub fn encode(state: &State, log_id: u64, head: Head) -> Result<Vec<u8>, SnapshotError> {
    encode_in_parts(state, log_id, head, KEYS_PART_LEN)
}

/// [`encode`] with `keys_part_len` keys a part: what a snapshot written
/// with other parts is the encoding of (docs/snapshot-format.md).
pub fn encode_in_parts(
    state: &State,
    log_id: u64,
    head: Head,
    keys_part_len: NonZeroU32,
) -> Result<Vec<u8>, SnapshotError> {
    assert!(
        head.seq >= state.last_seq(),
        "a snapshot's head ({head}) vouches for its state's events (to {})",
        state.last_seq()
    );
    let (body, archive) = state.snapshot_parts_in(keys_part_len)?;
    let header = Header {
        format_version: SNAPSHOT_FORMAT_VERSION,
        schema_version: u32::from(SCHEMA_VERSION),
        log_id,
        seq: state.last_seq(),
        head,
        body_len: body.len() as u64,
        body_crc: crc32fast::hash(&body),
        archive_len: archive.len() as u64,
    };
    let mut bytes = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body.len() + archive.len());
    bytes.extend_from_slice(&header.encode());
    bytes.extend_from_slice(&body);
    drop(body);
    bytes.extend_from_slice(&archive);
    // Read back what will be written: a snapshot that would be refused is
    // a bug of the writer, found here rather than at the next open.
    debug_assert!(matches!(info(&bytes), Ok(read) if read.seq == state.last_seq()));
    Ok(bytes)
}

/// What the header of `bytes` says, once the header verifies, is of this
/// build's format and schema, and the length matches: no field of the body
/// is read.
pub fn info(bytes: &[u8]) -> Result<SnapshotInfo, SnapshotError> {
    info_of(bytes, bytes.len() as u64)
}

/// [`info`] of a snapshot of `len` bytes that starts with `bytes`.
fn info_of(bytes: &[u8], len: u64) -> Result<SnapshotInfo, SnapshotError> {
    if len > SNAPSHOT_LEN_MAX {
        return Err(SnapshotError::TooLong {
            len,
            max: SNAPSHOT_LEN_MAX,
        });
    }
    let header = Header::decode(bytes)?;
    let expected = (SNAPSHOT_HEADER_LEN as u64)
        .saturating_add(header.body_len)
        .saturating_add(header.archive_len);
    if expected != len {
        return Err(SnapshotError::Length {
            expected,
            found: len,
        });
    }
    if header.schema_version != u32::from(SCHEMA_VERSION) {
        return Err(SnapshotError::Schema {
            found: header.schema_version,
            supported: u32::from(SCHEMA_VERSION),
        });
    }
    if header.head.seq < header.seq {
        return Err(SnapshotError::Invalid {
            field: "head seq",
            offset: 32,
            expected: format!("a head at or after seq {}", header.seq),
            found: header.head.seq.to_string(),
        });
    }
    Ok(SnapshotInfo {
        seq: header.seq,
        head: header.head,
        log_id: header.log_id,
        len,
        schema_version: header.schema_version,
    })
}

/// What an opening checks of a snapshot's `bytes` before it believes it,
/// cheapest first: its header ([`info`]), that it names the log `log_id`,
/// that the log holds the head it names (`head_at` reads the head of the
/// batch ending at a seq from the log itself), then its checksum and every
/// field ([`decode`]). The outer `Err` is the log's own failure to answer.
pub fn checked<E>(
    bytes: &[u8],
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
) -> Result<Result<(SnapshotInfo, State), SnapshotError>, E> {
    let info = match info(bytes) {
        Ok(info) => info,
        Err(error) => return Ok(Err(error)),
    };
    if let Err(error) = vouched(&info, log_id, head_at)? {
        return Ok(Err(error));
    }
    Ok(decode(bytes))
}

/// [`checked`] of a snapshot read from `file` a piece at a time, so that
/// loading it never holds all of its bytes in memory: the checksum is
/// taken as the fields are read, and a checksum that differs is the
/// refusal, whatever else was found.
pub fn checked_file<E>(
    file: &dyn SnapshotFile,
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
) -> Result<Result<(SnapshotInfo, State), SnapshotError>, E> {
    let mut header = Vec::with_capacity(SNAPSHOT_HEADER_LEN);
    let read = file
        .read_at(0, SNAPSHOT_HEADER_LEN, &mut header)
        .and_then(|()| info_of(&header, file.byte_len()));
    let info = match read {
        Ok(info) => info,
        Err(error) => return Ok(Err(error)),
    };
    if let Err(error) = vouched(&info, log_id, head_at)? {
        return Ok(Err(error));
    }
    Ok(decode_file(file, &header, info))
}

/// Whether the log `log_id` vouches for the snapshot `info` describes:
/// it names that log, and the log holds the head it names.
fn vouched<E>(
    info: &SnapshotInfo,
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
) -> Result<Result<(), SnapshotError>, E> {
    if info.log_id != log_id {
        return Ok(Err(SnapshotError::OtherLog {
            found: info.log_id,
            expected: log_id,
        }));
    }
    let found = head_at(info.head.seq)?;
    if found != Some(info.head) {
        return Ok(Err(SnapshotError::HeadNotInLog {
            head: info.head,
            found,
        }));
    }
    Ok(Ok(()))
}

/// The state in `file`, whose `header` [`info_of`] read as `info`.
fn decode_file(
    file: &dyn SnapshotFile,
    header: &[u8],
    info: SnapshotInfo,
) -> Result<(SnapshotInfo, State), SnapshotError> {
    let header = Header::decode(header)?;
    let body = BodyBytes::File {
        file,
        at: SNAPSHOT_HEADER_LEN as u64,
        len: header.body_len as usize,
        piece: file.piece_len().max(1),
    };
    let archive = archive_in_file(file, &header)?;
    let checksum = |computed: u32| match computed == header.body_crc {
        true => Ok(()),
        false => Err(SnapshotError::Checksum {
            part: "body",
            stored: header.body_crc,
            computed,
        }),
    };
    match State::from_snapshot_body(info.seq, body, true, archive) {
        Ok((state, Some(computed))) => {
            checksum(computed)?;
            assert_eq!(state.last_seq(), info.seq);
            state.start_archive_check()?;
            Ok((info, state))
        }
        Ok((_, None)) => unreachable!("a reading that hashes returns its checksum"),
        // A damaged body is named by its checksum, as a body in memory is.
        Err(error) => checksum(Reader::checksum(body)?).and(Err(error)),
    }
}

/// The state `bytes` hold, and what the snapshot says of itself: the header
/// checked as [`info`] does, the body's checksum verified, then every field
/// read under the rules replay checks, the archive's pairs included, each
/// block read and checked (an opening from a file checks each block's
/// checksum, and decodes a block when a name asks for it). Untrusted
/// bytes: nothing is allocated for a count before the bytes it needs are
/// known to be there.
pub fn decode(bytes: &[u8]) -> Result<(SnapshotInfo, State), SnapshotError> {
    let info = info(bytes)?;
    let header = Header::decode(bytes)?;
    let (body, archive) = bytes[SNAPSHOT_HEADER_LEN..].split_at(header.body_len as usize);
    let computed = crc32fast::hash(body);
    if computed != header.body_crc {
        return Err(SnapshotError::Checksum {
            part: "body",
            stored: header.body_crc,
            computed,
        });
    }
    let archive = (!archive.is_empty()).then(|| ArchiveAt::Checked(archive.to_vec()));
    let (state, _) = State::from_snapshot_body(info.seq, BodyBytes::Slice(body), false, archive)?;
    assert_eq!(state.last_seq(), info.seq);
    Ok((info, state))
}

/// Where the archive of the snapshot in `file`, whose `header` is read,
/// is kept for the state loaded from it: in the file, if the file stays
/// readable ([`SnapshotFile::lasting`]); else read into memory now.
fn archive_in_file(
    file: &dyn SnapshotFile,
    header: &Header,
) -> Result<Option<ArchiveAt>, SnapshotError> {
    if header.archive_len == 0 {
        return Ok(None);
    }
    let at = SNAPSHOT_HEADER_LEN as u64 + header.body_len;
    let len = header.archive_len;
    if let Some(file) = file.lasting(at) {
        return Ok(Some(ArchiveAt::File { file, at, len }));
    }
    let mut bytes = Vec::new();
    let wanted = usize::try_from(len).map_err(|_| SnapshotError::TooLong {
        len,
        max: usize::MAX as u64,
    })?;
    file.read_at(at, wanted, &mut bytes)?;
    if bytes.len() != wanted {
        return Err(SnapshotError::Length {
            expected: at + len,
            found: at + bytes.len() as u64,
        });
    }
    Ok(Some(ArchiveAt::Memory(bytes)))
}
