//! The snapshot format byte by byte, as docs/snapshot-format.md works it
//! through, and its decoding of untrusted bytes.

use payonce_log::{Digest, Head};
use payonce_model::WithdrawalRequest;
use payonce_model::{Actor, Amount, Currency, Destination, Reference, RequestKey, WithdrawalId};

use super::{decode, encode};
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
fn the_documented_snapshot_is_the_bytes_the_document_gives() {
    // Guards against docs/snapshot-format.md's worked example drifting from
    // what the ledger writes: the test reads the document's table.
    let bytes = encode(
        &documented_state(),
        0x0123_4567_89ab_cdef,
        documented_head(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hex(&bytes), documented_hex(DOCUMENT));
    let (info, state) = decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.seq, 4);
    assert_eq!(state.difference(&documented_state()), None);
}

#[test]
fn the_documented_table_is_read_as_written() {
    // Guards against the reading of the document's table missing a row or
    // a repetition, which would let the document drift unseen.
    let table = "## A worked example\n\n| bytes (hex) | field |\n| --- | --- |\n\
                 | `01 02` | a |\n| `ab` × 3 `00` | b |\n\n## Next\n| `ff` | not read |\n";
    assert_eq!(documented_hex(table), "0102ababab00");
}

/// docs/snapshot-format.md.
const DOCUMENT: &str = include_str!("../../../../docs/snapshot-format.md");

/// The bytes the worked example's table gives, in hex: the first cell of
/// each row, its `` `hex` `` groups in order, a group followed by `× n`
/// repeated n times.
fn documented_hex(document: &str) -> String {
    let section = document
        .split("## A worked example")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("the document has a worked example"));
    let mut hex = String::new();
    for row in section.lines().filter(|line| line.starts_with("| `")) {
        let cell = row.split(" | ").next().unwrap_or_default();
        let mut parts = cell.trim_start_matches("| ").split('`').skip(1);
        while let (Some(group), rest) = (parts.next(), parts.next().unwrap_or_default()) {
            let times = rest
                .trim()
                .strip_prefix("× ")
                .map_or(1, |n| n.parse().unwrap_or_else(|e| panic!("{n:?}: {e}")));
            hex.push_str(&group.replace(' ', "").repeat(times));
        }
    }
    hex
}
