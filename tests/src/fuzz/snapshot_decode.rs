//! `snapshot_decode`: arbitrary bytes as a snapshot of the projections and
//! the run its manifest names, untrusted as an opening treats them: the
//! header, the body and the manifest first, and whatever follows the
//! manifest as run 1 of the store (its record blocks, secondary blocks,
//! filters, fences and trailer). Decoding never panics and never allocates
//! beyond what the bytes can hold (the limits are checked before
//! allocating; `fuzz/run` enforces a per-allocation limit under
//! AddressSanitizer); and what it accepts is exactly the state it encodes:
//! encoding the decoded state again and decoding that gives the same
//! state, and the same snapshot bytes unless its body held a settled pair
//! (which the writer moves into a new run). Read a piece at a time, as an
//! opening reads a snapshot in storage, in pieces of any length, it is
//! judged exactly as it is read whole (the same state, or the same
//! refusal), but for what only reading the runs whole sees, which an
//! opening leaves to the reading of the block that holds a name.

use std::convert::Infallible;

use std::num::NonZeroU32;

use payonce::snapshots::{checked_file, decode, encode_in_parts, info};
use payonce::{MemRuns, SNAPSHOT_HEADER_LEN, SnapshotError, SnapshotFile};

/// The seq a wrapped body's header names: far past any claim a body holds.
const WRAPPED_SEQ: u64 = 1 << 40;

/// Checks one input: as a whole snapshot and its run, and its body,
/// manifest and run (or the whole input as a body, if it is no snapshot)
/// behind a header whose checksums fit the body, so the fuzzer's changes
/// reach every field of the body rather than stopping at a checksum.
pub fn snapshot_decode(data: &[u8]) {
    let (snapshot, run) = split(data);
    check(snapshot, run);
    let (body, manifest) = parts(snapshot).unwrap_or((data, &[]));
    check(&wrapped(body, manifest), run);
}

/// The snapshot `data` starts with (its header's lengths), and the bytes
/// after it: the run its manifest names. All of it, and no run, when the
/// header's lengths do not fit.
fn split(data: &[u8]) -> (&[u8], &[u8]) {
    let len = |at: usize| {
        let bytes = data.get(at..at + 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    };
    let ends = len(72)
        .zip(len(84))
        .and_then(|(body, manifest)| {
            (SNAPSHOT_HEADER_LEN as u64)
                .checked_add(body)?
                .checked_add(manifest)
        })
        .and_then(|ends| usize::try_from(ends).ok())
        .filter(|&ends| ends <= data.len() && data.starts_with(b"PAYONSS\0"));
    match ends {
        Some(ends) => data.split_at(ends),
        None => (data, &[]),
    }
}

/// The body and the manifest of `snapshot`, if it starts with a
/// snapshot's magic and its header's body length fits it.
fn parts(snapshot: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = snapshot.strip_prefix(b"PAYONSS\0")?;
    let body_len = u64::from_le_bytes(rest.get(64..72)?.try_into().ok()?);
    let after = snapshot.get(SNAPSHOT_HEADER_LEN..)?;
    (body_len <= after.len() as u64).then(|| after.split_at(body_len as usize))
}

/// A store holding `run` as run 1, if there is one.
fn runs_of(run: &[u8]) -> MemRuns {
    let runs = MemRuns::default();
    if !run.is_empty() {
        runs.insert(1, run.to_vec());
    }
    runs
}

/// `body` and `manifest` behind a whole header of this build's format and
/// schema (docs/snapshot-format.md), its checksums computed.
pub fn wrapped(body: &[u8], manifest: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body.len() + manifest.len());
    bytes.extend_from_slice(b"PAYONSS\0");
    bytes.extend_from_slice(&payonce::SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&u32::from(payonce::SCHEMA_VERSION).to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&WRAPPED_SEQ.to_le_bytes());
    bytes.extend_from_slice(&WRAPPED_SEQ.to_le_bytes());
    bytes.extend_from_slice(&[0; 32]);
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    bytes.extend_from_slice(&(manifest.len() as u64).to_le_bytes());
    let header_crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&header_crc.to_le_bytes());
    assert_eq!(bytes.len(), SNAPSHOT_HEADER_LEN);
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(manifest);
    bytes
}

/// A snapshot in storage, read `piece` bytes at a time.
struct InPieces<'a> {
    bytes: &'a [u8],
    piece: usize,
}

impl SnapshotFile for InPieces<'_> {
    fn byte_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let start = usize::try_from(offset).map_or(self.bytes.len(), |at| at.min(self.bytes.len()));
        into.extend_from_slice(&self.bytes[start..start.saturating_add(len).min(self.bytes.len())]);
        Ok(())
    }

    fn piece_len(&self) -> usize {
        self.piece
    }
}

/// `data` read a piece at a time, as the log it names vouches for it,
/// against `data` read whole, its run in `runs`.
fn check_in_pieces(data: &[u8], runs: &MemRuns) {
    let Ok(said) = info(data) else {
        return;
    };
    let whole = decode(data, runs);
    for piece in [1, 7, 64, 4096] {
        let file = InPieces { bytes: data, piece };
        let head_at = |_| Ok(Some(said.head));
        let read = checked_file::<Infallible>(&file, said.log_id, head_at, runs)
            .unwrap_or_else(|never| match never {});
        match (&whole, &read) {
            (Ok((_, whole)), Ok((_, read))) => assert_eq!(whole.difference(read), None),
            (Err(whole), Err(read)) => assert_eq!(whole.to_string(), read.to_string()),
            (Ok(_), Err(error)) => panic!("refused in pieces of {piece} only: {error}"),
            (Err(error), Ok(_)) if only_whole_sees(error) => {}
            (Err(error), Ok(_)) => panic!("refused whole only, in pieces of {piece}: {error}"),
        }
    }
}

/// Whether `error` is one only a reading of the runs whole finds: a field
/// of a pair whose block's checksum holds, a pair also in the body, the
/// manifest's count of pairs, or the archived totals. An opening reads a
/// run's blocks when a name asks for one, and refuses them then.
fn only_whole_sees(error: &SnapshotError) -> bool {
    match error {
        SnapshotError::Pair { .. } => true,
        SnapshotError::Invalid { field, .. } => {
            matches!(*field, "manifest pairs" | "archived total")
        }
        SnapshotError::Run { error, .. } => !matches!(
            error,
            payonce_runs::RunError::Corrupt {
                section: payonce_runs::Section::Trailer | payonce_runs::Section::Fences,
                ..
            }
        ),
        _ => false,
    }
}

fn check(data: &[u8], run: &[u8]) {
    let runs = runs_of(run);
    check_in_pieces(data, &runs);
    let Ok((info, state)) = decode(data, &runs) else {
        return;
    };
    assert_eq!(state.last_seq(), info.seq);
    assert_eq!(info.len, data.len() as u64);
    let again = encode_in_parts(&state, info.log_id, info.head, keys_part_len(data), &runs);
    let again = again
        .unwrap_or_else(|error| panic!("an accepted snapshot's state does not encode: {error}"));
    let wrote_a_run = runs.bytes(2).is_some();
    assert!(
        again == data || wrote_a_run,
        "an accepted snapshot is not the encoding of the state it holds, in its parts"
    );
    let (_, decoded) = match decode(&again, &runs) {
        Ok(decoded) => decoded,
        Err(error) => panic!("a snapshot's own encoding is refused: {error}"),
    };
    assert_eq!(decoded.difference(&state), None);
}

/// How many keys a part holds in an accepted snapshot, `data`: the field
/// after the keys' count, where the body's `keys_at` says the keys start
/// (docs/snapshot-format.md). Its state has one encoding for each.
fn keys_part_len(data: &[u8]) -> NonZeroU32 {
    let body = &data[SNAPSHOT_HEADER_LEN..];
    let field = |at: usize, len: usize| {
        let mut word = [0u8; 8];
        word[..len].copy_from_slice(&body[at..at + len]);
        u64::from_le_bytes(word) as usize
    };
    // The counters, then the currencies and the sessions, each a count of
    // a text and fixed fields.
    let mut at = 18;
    for fixed in [3 * 17, 8] {
        let count = field(at, 8);
        at += 8;
        for _ in 0..count {
            at += 2 + field(at, 2) + fixed;
        }
    }
    let keys_at = field(at + 8, 8);
    NonZeroU32::new(field(keys_at + 8, 4) as u32)
        .unwrap_or_else(|| panic!("an accepted snapshot's keys are in parts of 0"))
}
