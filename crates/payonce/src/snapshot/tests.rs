//! The snapshot format byte by byte, as docs/snapshot-format.md works it
//! through, and its decoding of untrusted bytes.

use payonce_log::{Digest, Head};
use payonce_model::WithdrawalRequest;
use payonce_model::{Actor, Amount, Currency, Destination, Reference, RequestKey, WithdrawalId};

use super::format::SNAPSHOT_FORMAT_VERSION;
use super::{decode, encode};
use crate::documented::{SNAPSHOT_FORMAT, header_value, worked_example_hex};
use crate::event::{Event, EventKind, SCHEMA_VERSION};
use crate::state::{State, apply};
use crate::time::Timestamp;

/// The state docs/snapshot-format.md works through: an opening, then
/// withdrawal `w-2` (25 USDC to `0xabc`, requested by `alice`) created,
/// claimed by key `k-1` and sent with reference `0xfeed`.
fn documented_state() -> State {
    let request = WithdrawalRequest::new(
        WithdrawalId::new("w-2").unwrap_or_else(|e| panic!("{e}")),
        Amount::parse("25.00").unwrap_or_else(|e| panic!("{e}")),
        Currency::new("USDC").unwrap_or_else(|e| panic!("{e}")),
        Destination::new("0xabc").unwrap_or_else(|e| panic!("{e}")),
        Actor::new("alice").unwrap_or_else(|e| panic!("{e}")),
    );
    let key = RequestKey::new("k-1").unwrap_or_else(|e| panic!("{e}"));
    let sent = request
        .approve()
        .and_then(|r| r.start_sending())
        .and_then(|r| r.mark_sent(Reference::new("0xfeed").unwrap_or_else(|e| panic!("{e}"))))
        .unwrap_or_else(|e| panic!("{e}"));
    let kinds = [
        EventKind::Opened {
            accept_foreign_ids: false,
            epoch: Some(1),
        },
        EventKind::Created {
            withdrawal: request.clone(),
        },
        EventKind::Claimed {
            key: key.clone(),
            request,
            worker: None,
        },
        EventKind::Completed { key, outcome: sent },
    ];
    let mut state = State::new();
    for (seq, kind) in (1..).zip(kinds) {
        let event = Event {
            schema: SCHEMA_VERSION,
            seq,
            // 2026-11-30T12:00:00Z, a second an event.
            at: Timestamp::from_unix_nanos(1_796_040_000_000_000_000 + seq * 1_000_000_000),
            kind,
        };
        apply(&mut state, &event);
    }
    state
}

fn documented_head() -> Head {
    Head {
        seq: 4,
        digest: Digest([0xab; 32]),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn the_document_names_the_format_and_schema_this_build_writes() {
    // Guards against docs/snapshot-format.md's header table and title
    // naming a version the ledger no longer writes.
    let format = SNAPSHOT_FORMAT_VERSION.to_string();
    let schema = SCHEMA_VERSION.to_string();
    assert_eq!(
        header_value(SNAPSHOT_FORMAT, "format_version"),
        Some(format.as_str())
    );
    assert_eq!(
        header_value(SNAPSHOT_FORMAT, "schema_version"),
        Some(schema.as_str())
    );
    assert!(
        SNAPSHOT_FORMAT
            .lines()
            .next()
            .is_some_and(|title| title.ends_with(&format!("format version {format}"))),
        "the title names format version {format}"
    );
}

#[test]
fn the_documented_snapshot_is_the_bytes_the_document_gives() {
    // Guards against docs/snapshot-format.md's worked example drifting from
    // what the ledger writes: the test reads the document's table.
    let bytes = encode(
        &documented_state(),
        0x0123_4567_89ab_cdef,
        documented_head(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hex(&bytes), worked_example_hex(SNAPSHOT_FORMAT));
    let (info, state) = decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.seq, 4);
    assert_eq!(state.difference(&documented_state()), None);
}
