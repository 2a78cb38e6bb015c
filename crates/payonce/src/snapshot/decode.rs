//! Believing a snapshot: what an opening, an audit and the CLI check of it
//! before its state is used, cheapest first. Its header (format, schema,
//! length), the log it names, the head it names against the head the log
//! holds there, then its body's checksum and every field, then its
//! manifest's checksum, and each run the manifest names: found in the run
//! store, bound to its entry, and checked (every block's checksum) unless
//! the store leaves that to a pass in the background.

use std::sync::Arc;

use payonce_log::Head;
use payonce_runs::BlockCache;

use super::runs::open_manifest;
use super::{SnapshotInfo, info, info_of, vouched};
use crate::run_store::RunStore;
use crate::snapshot_format::header::Header;
use crate::snapshot_format::reader::{BodyBytes, Reader};
use crate::snapshot_format::{Manifest, SNAPSHOT_HEADER_LEN, SnapshotError, SnapshotFile};
use crate::state::State;

/// Bytes of cache an audit's reading of a snapshot's runs uses: what it
/// reads, it reads once.
const AUDIT_CACHE_BYTES: u64 = 16 << 20;

/// What an opening checks of a snapshot's `bytes` before it believes it
/// ([`info`], the log `log_id`, the head the log holds at its head's seq
/// as `head_at` reads it), then its state, its runs read from `runs` and
/// checked whole ([`decode`]). The outer `Err` is the log's own failure
/// to answer.
pub fn checked<E>(
    bytes: &[u8],
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
    runs: &dyn RunStore,
) -> Result<Result<(SnapshotInfo, State), SnapshotError>, E> {
    let info = match info(bytes) {
        Ok(info) => info,
        Err(error) => return Ok(Err(error)),
    };
    if let Err(error) = vouched(&info, log_id, head_at)? {
        return Ok(Err(error));
    }
    Ok(decode(bytes, runs))
}

/// [`checked`] of a snapshot read from `file` a piece at a time, so that
/// loading it never holds all of its bytes in memory: the checksum is
/// taken as the fields are read, and a checksum that differs is the
/// refusal, whatever else was found.
pub fn checked_file<E>(
    file: &dyn SnapshotFile,
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
    runs: &dyn RunStore,
) -> Result<Result<(SnapshotInfo, State), SnapshotError>, E> {
    let cache = Arc::new(BlockCache::new(AUDIT_CACHE_BYTES));
    checked_file_into(file, log_id, head_at, runs, cache)
}

/// [`checked_file`], its runs read through `cache`: what an opening does.
pub(crate) fn checked_file_into<E>(
    file: &dyn SnapshotFile,
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
    runs: &dyn RunStore,
    cache: Arc<BlockCache>,
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
    Ok(decode_file(file, &header, info, runs, cache))
}

/// The state in `file`, whose `header` [`info_of`] read as `info`.
fn decode_file(
    file: &dyn SnapshotFile,
    header: &[u8],
    info: SnapshotInfo,
    runs: &dyn RunStore,
    cache: Arc<BlockCache>,
) -> Result<(SnapshotInfo, State), SnapshotError> {
    let header = Header::decode(header)?;
    let body = BodyBytes::File {
        file,
        at: SNAPSHOT_HEADER_LEN as u64,
        len: header.body_len as usize,
        piece: file.piece_len().max(1),
    };
    let checksum = |computed: u32| match computed == header.body_crc {
        true => Ok(()),
        false => Err(SnapshotError::Checksum {
            part: "body",
            stored: header.body_crc,
            computed,
        }),
    };
    let (mut state, archived) = match State::from_snapshot_body(info.seq, body, true) {
        Ok((state, Some(computed), archived)) => {
            checksum(computed)?;
            (state, archived)
        }
        Ok((_, None, _)) => unreachable!("a reading that hashes returns its checksum"),
        // A damaged body is named by its checksum, as a body in memory is.
        Err(error) => return checksum(Reader::checksum(body)?).and(Err(error)),
    };
    let manifest = read_manifest(file, &header)?;
    attach_runs(&mut state, &manifest, &archived, runs, cache)?;
    assert_eq!(state.last_seq(), info.seq);
    Ok((info, state))
}

/// The manifest after the body of the snapshot in `file`.
fn read_manifest(file: &dyn SnapshotFile, header: &Header) -> Result<Manifest, SnapshotError> {
    let at = SNAPSHOT_HEADER_LEN as u64 + header.body_len;
    let len = usize::try_from(header.manifest_len).map_err(|_| SnapshotError::TooLong {
        len: header.manifest_len,
        max: usize::MAX as u64,
    })?;
    let mut bytes = Vec::new();
    file.read_at(at, len, &mut bytes)?;
    if bytes.len() != len {
        return Err(SnapshotError::Length {
            expected: at + header.manifest_len,
            found: at + bytes.len() as u64,
        });
    }
    Manifest::decode(&bytes, header.body_len as usize)
}

/// Gives `state` the runs `manifest` names, from `runs`: refused when the
/// body says settled pairs captured funds (`archived`, by currency) and
/// no run holds a pair, or the manifest counts pairs in no run.
fn attach_runs(
    state: &mut State,
    manifest: &Manifest,
    archived: &[rust_decimal::Decimal],
    runs: &dyn RunStore,
    cache: Arc<BlockCache>,
) -> Result<(), SnapshotError> {
    if manifest.runs.is_empty() {
        let captured = archived.iter().any(|total| !total.is_zero());
        if captured || manifest.pairs != 0 {
            return Err(SnapshotError::Invalid {
                field: "manifest",
                offset: 0,
                expected: "no settled pair, and no funds captured by one, without a run".into(),
                found: format!("{} pairs", manifest.pairs),
            });
        }
        return Ok(());
    }
    let settled = open_manifest(runs, manifest, cache, manifest.pairs)?;
    state.adopt_settled(settled);
    Ok(())
}

/// The state `bytes` hold, and what the snapshot says of itself: the header
/// checked as [`info`] does, the body's checksum verified, then every field
/// read under the rules replay checks; the manifest checked, and every run
/// it names read from `runs` whole, every pair of it checked, against the
/// body too (no pair's key or id in it, the funds they captured what the
/// body says, as many distinct pairs as the manifest says). What an audit
/// and a comparison read; untrusted bytes: nothing is allocated for a
/// count before the bytes it needs are known to be there.
pub fn decode(bytes: &[u8], runs: &dyn RunStore) -> Result<(SnapshotInfo, State), SnapshotError> {
    let cache = Arc::new(BlockCache::new(AUDIT_CACHE_BYTES));
    decode_into(bytes, runs, cache, true)
}

/// [`checked`] of a snapshot read whole, as an opening believes it: its
/// runs read through `cache`, a pair read only when a name asks for it.
/// What an opening does with a store that gives a snapshot whole.
pub(crate) fn checked_into<E>(
    bytes: &[u8],
    log_id: u64,
    head_at: impl FnOnce(u64) -> Result<Option<Head>, E>,
    runs: &dyn RunStore,
    cache: Arc<BlockCache>,
) -> Result<Result<(SnapshotInfo, State), SnapshotError>, E> {
    let info = match info(bytes) {
        Ok(info) => info,
        Err(error) => return Ok(Err(error)),
    };
    if let Err(error) = vouched(&info, log_id, head_at)? {
        return Ok(Err(error));
    }
    Ok(decode_into(bytes, runs, cache, false))
}

/// The state `bytes` hold, its runs from `runs` read through `cache`, and
/// read `whole` or not ([`decode`]).
fn decode_into(
    bytes: &[u8],
    runs: &dyn RunStore,
    cache: Arc<BlockCache>,
    whole: bool,
) -> Result<(SnapshotInfo, State), SnapshotError> {
    let info = info(bytes)?;
    let header = Header::decode(bytes)?;
    let (body, manifest) = bytes[SNAPSHOT_HEADER_LEN..].split_at(header.body_len as usize);
    let computed = crc32fast::hash(body);
    if computed != header.body_crc {
        return Err(SnapshotError::Checksum {
            part: "body",
            stored: header.body_crc,
            computed,
        });
    }
    // The body before the manifest, as a reading in pieces meets them.
    let (mut state, _, archived) =
        State::from_snapshot_body(info.seq, BodyBytes::Slice(body), false)?;
    let manifest = Manifest::decode(manifest, body.len())?;
    attach_runs(&mut state, &manifest, &archived, runs, cache)?;
    if whole {
        state.check_runs_whole(&archived)?;
    }
    assert_eq!(state.last_seq(), info.seq);
    Ok((info, state))
}
