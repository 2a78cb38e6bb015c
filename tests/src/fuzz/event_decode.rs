//! `event_decode`: arbitrary bytes as a sequence of log records, each
//! decoded as an event and replayed the way `payonce::verify_on` replays a
//! log.

use payonce::{Event, State, apply, rederive};
use payonce_model::codec::ENCODED_LEN_MAX;

use crate::harness::{HoldAudit, assert_invariants};

/// Most records one input is cut into.
pub const RECORDS_MAX: usize = 64;

/// Cuts `data` into records: a little-endian `u16` length, then that many
/// bytes (fewer at the end of the input).
pub fn records(mut data: &[u8]) -> Vec<&[u8]> {
    let mut records = Vec::new();
    while data.len() >= 2 && records.len() < RECORDS_MAX {
        let len = usize::from(u16::from_le_bytes([data[0], data[1]]));
        let rest = &data[2..];
        let (record, after) = rest.split_at(len.min(rest.len()));
        records.push(record);
        data = after;
    }
    records
}

/// The input [`records`] cuts back into `payloads`.
///
/// # Panics
/// If a payload is longer than a `u16` can say.
pub fn encode(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for payload in payloads {
        let len = u16::try_from(payload.len()).unwrap_or(u16::MAX);
        assert_eq!(
            usize::from(len),
            payload.len(),
            "a record too long to encode"
        );
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(payload);
    }
    bytes
}

/// Decodes every record of the input as an event. Checks that decoding
/// never panics (nor allocates past the codec's limit: the fuzz scripts run
/// it under a malloc limit); that replay's borrowed reading (the most
/// common kinds without serde) reads only what the owned decoding reads,
/// and reads it alike; that whatever decodes re-encodes, within the
/// limit, to bytes that decode to the same event, and survives a JSON round
/// trip; and that replaying the events that decode (renumbered in order),
/// as `verify_on` does, never panics: re-deriving each decision, applying it
/// even when it diverges, and, while nothing has diverged, keeping the
/// projections' invariants and a hold account that matches.
///
/// # Panics
/// When a property does not hold: that is the finding.
pub fn event_decode(data: &[u8]) {
    let mut state = State::new();
    let mut audit = HoldAudit::default();
    let mut diverged = false;
    for record in records(data) {
        let decoded = Event::decode(record);
        if let Some(replayed) = Event::decode_as_replay(record) {
            assert_eq!(
                decoded.as_ref().ok(),
                Some(&replayed),
                "replay's reading differs from the owned decoding"
            );
        }
        let Ok(mut event) = decoded else {
            continue;
        };
        let encoded = event.encode().unwrap_or_else(|error| {
            panic!("a decoded event does not re-encode: {error}: {event:?}")
        });
        assert!(
            encoded.len() <= ENCODED_LEN_MAX,
            "re-encoded past the limit"
        );
        let again = Event::decode(&encoded)
            .unwrap_or_else(|error| panic!("a re-encoded event does not decode: {error}"));
        assert_eq!(again, event, "the codec round trip changed the event");
        let json = serde_json::to_string(&event)
            .unwrap_or_else(|error| panic!("a decoded event has no JSON form: {error}"));
        let from_json: Event = serde_json::from_str(&json).unwrap_or_else(|error| {
            panic!("the JSON of an event does not read back: {error}: {json}")
        });
        assert_eq!(from_json, event, "the JSON round trip changed the event");

        // What the auditor's tools ask of every event.
        let _ = (
            event.kind.command(),
            event.kind.key(),
            event.kind.withdrawal(),
        );
        let _ = event.kind.name();

        event.seq = state.last_seq() + 1;
        let divergence = rederive(&state, &event);
        diverged |= divergence.is_some();
        if !diverged && let Err(violation) = audit.apply(&event) {
            panic!("{violation}");
        }
        apply(&mut state, &event);
        if !diverged {
            assert_invariants(&state, "events that replay without divergence");
            audit.assert_matches(&state, "events that replay without divergence");
        }
    }
}
