//! The snapshot format byte by byte, as docs/snapshot-format.md works it
//! through, and its decoding of untrusted bytes.

use std::convert::Infallible;

use payonce_log::{Digest, Head};
use payonce_model::WithdrawalRequest;
use payonce_model::{Actor, Amount, Currency, Destination, Reference, RequestKey, WithdrawalId};

use payonce_runs::HashKey;

use super::runs::with_hash_key;
use super::{SnapshotError, SnapshotFile, checked_file, decode, encode};
use crate::documented::{SNAPSHOT_FORMAT, header_value, worked_example_hex};
use crate::event::{Event, EventKind, SCHEMA_VERSION};
use crate::run_store::{MemRuns, RunStore};
use crate::snapshot_format::header::{
    Header, KEYS_PART_LEN, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_HEADER_LEN,
};
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

/// The runs' hash key in the worked example.
const DOCUMENTED_KEY: HashKey = HashKey { k0: 1, k1: 2 };

fn documented_head() -> Head {
    Head {
        seq: 4,
        digest: Digest([0xab; 32]),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The documented snapshot, its run written into `runs`.
fn documented_snapshot(runs: &MemRuns, log_id: u64) -> Vec<u8> {
    with_hash_key(DOCUMENTED_KEY, || {
        encode(&documented_state(), log_id, documented_head(), runs)
    })
    .unwrap_or_else(|e| panic!("{e}"))
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
    let runs = MemRuns::default();
    let bytes = documented_snapshot(&runs, 0x0123_4567_89ab_cdef);
    assert_eq!(hex(&bytes), worked_example_hex(SNAPSHOT_FORMAT));
    assert_eq!(runs.list_runs().unwrap_or_else(|e| panic!("{e}")), [1]);
    let (info, state) = decode(&bytes, &runs).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.seq, 4);
    assert_eq!(state.difference(&documented_state()), None);
}

/// The documented snapshot in a file.
struct InMemory(Vec<u8>);

impl SnapshotFile for InMemory {
    fn byte_len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let start = (offset as usize).min(self.0.len());
        into.extend_from_slice(&self.0[start..(start + len).min(self.0.len())]);
        Ok(())
    }
}

#[test]
fn a_settled_pair_stays_in_its_run_until_a_name_asks_for_it() {
    // Guards against an opening that brings the runs' pairs into memory,
    // and against a pair that cannot be found by its key or by its id.
    let runs = MemRuns::default();
    let bytes = documented_snapshot(&runs, 1);
    let head = documented_head();
    let loaded = checked_file::<Infallible>(&InMemory(bytes), 1, |_| Ok(Some(head)), &runs)
        .unwrap_or_else(|never| match never {});
    let (_, mut state) = loaded.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(state.key_count(), 1, "k-1 counts, out of memory");
    assert!(state.record("k-1").is_none(), "not in memory until asked");
    state
        .fault_in(None, Some("w-2"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        state.outcome("k-1"),
        documented_state().outcome("k-1"),
        "the pair is back, found by its withdrawal"
    );
    assert_eq!(state.key_count(), 1);
}

#[test]
fn a_run_repeating_a_pair_the_body_holds_is_refused_when_read_whole() {
    // Guards against an audit believing a snapshot whose run holds a pair
    // its body holds too: a lookup would answer from one or the other.
    let state = documented_state();
    let runs = MemRuns::default();
    let taken = documented_snapshot(&runs, 1);
    let header = Header::decode(&taken).unwrap_or_else(|e| panic!("{e}"));
    let manifest = &taken[SNAPSHOT_HEADER_LEN + header.body_len as usize..];
    let body = (state.snapshot_body_in_parts(KEYS_PART_LEN)).unwrap_or_else(|e| panic!("{e}"));
    let both = Header {
        body_len: body.len() as u64,
        body_crc: crc32fast::hash(&body),
        ..header
    };
    let bytes = [&both.encode()[..], &body, manifest].concat();
    match decode(&bytes, &runs) {
        Err(SnapshotError::Pair { key, detail, .. }) => {
            assert_eq!(key, "k-1");
            assert!(detail.contains("live"), "{detail}");
        }
        other => panic!("expected the pair refused, got {other:?}"),
    }
}

#[test]
fn a_manifest_naming_a_run_not_held_or_another_run_is_refused() {
    // Guards against a snapshot believed with a run missing, or with a run
    // that is not the one its manifest was written with.
    let runs = MemRuns::default();
    let bytes = documented_snapshot(&runs, 1);
    let empty = MemRuns::default();
    let missing = decode(&bytes, &empty).map(drop);
    assert!(
        matches!(&missing, Err(SnapshotError::Store { detail }) if detail.contains("run 1")),
        "{missing:?}"
    );
    let other = MemRuns::default();
    let mut run = runs
        .bytes(1)
        .map(|bytes| bytes.to_vec())
        .unwrap_or_default();
    run.push(0);
    other.insert(1, run);
    let changed = decode(&bytes, &other).map(drop);
    assert!(changed.is_err(), "{changed:?}");
}
