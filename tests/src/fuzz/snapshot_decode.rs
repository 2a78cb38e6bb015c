//! `snapshot_decode`: arbitrary bytes as a snapshot of the projections,
//! untrusted as an opening treats it. Decoding never panics and never
//! allocates beyond what the bytes can hold (the limits are checked before
//! allocating; `fuzz/run` enforces a per-allocation limit under
//! AddressSanitizer); and what it accepts is exactly the state it encodes:
//! encoding the decoded state again gives the same bytes, and decoding
//! those the same state.

use payonce::snapshots::{decode, encode};

/// Checks one input.
pub fn snapshot_decode(data: &[u8]) {
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
