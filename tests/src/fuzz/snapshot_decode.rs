//! `snapshot_decode`: arbitrary bytes as a snapshot of the projections,
//! untrusted as an opening treats it. Decoding never panics and never
//! allocates beyond what the bytes can hold (the limits are checked before
//! allocating; `fuzz/run` enforces a per-allocation limit under
//! AddressSanitizer); and what it accepts is exactly the state it encodes:
//! encoding the decoded state again gives the same bytes, and decoding
//! those the same state.

use payonce::SNAPSHOT_HEADER_LEN;
use payonce::snapshots::{decode, encode};

/// The seq a wrapped body's header names: far past any claim a body holds.
const WRAPPED_SEQ: u64 = 1 << 40;

/// Checks one input: as a whole snapshot, and its body (or the whole input,
/// if it is no snapshot) behind a header whose checksums fit it, so the
/// fuzzer's changes reach every field rather than stopping at a checksum.
pub fn snapshot_decode(data: &[u8]) {
    check(data);
    let body = match data.starts_with(b"PAYONSS\0") && data.len() >= SNAPSHOT_HEADER_LEN {
        true => &data[SNAPSHOT_HEADER_LEN..],
        false => data,
    };
    check(&wrapped(body));
}

/// `body` behind a whole header of format 1 and this build's schema
/// (docs/snapshot-format.md), its checksums computed.
pub fn wrapped(body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body.len());
    bytes.extend_from_slice(b"PAYONSS\0");
    bytes.extend_from_slice(&payonce::SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&u32::from(payonce::SCHEMA_VERSION).to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&WRAPPED_SEQ.to_le_bytes());
    bytes.extend_from_slice(&WRAPPED_SEQ.to_le_bytes());
    bytes.extend_from_slice(&[0; 32]);
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    let header_crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&header_crc.to_le_bytes());
    assert_eq!(bytes.len(), SNAPSHOT_HEADER_LEN);
    bytes.extend_from_slice(body);
    bytes
}

fn check(data: &[u8]) {
    let Ok((info, state)) = decode(data) else {
        return;
    };
    assert_eq!(state.last_seq(), info.seq);
    assert_eq!(info.len, data.len() as u64);
    let again = match encode(&state, info.log_id, info.head) {
        Ok(again) => again,
        Err(error) => panic!("an accepted snapshot's state does not encode: {error}"),
    };
    assert!(
        again == data,
        "an accepted snapshot is not the encoding of the state it holds"
    );
    let (_, decoded) = match decode(&again) {
        Ok(decoded) => decoded,
        Err(error) => panic!("a snapshot's own encoding is refused: {error}"),
    };
    assert_eq!(decoded.difference(&state), None);
}
