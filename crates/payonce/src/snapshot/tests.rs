//! The snapshot format byte by byte, as docs/snapshot-format.md works it
//! through, and its decoding of untrusted bytes.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use payonce_log::{Digest, Head};
use payonce_model::WithdrawalRequest;
use payonce_model::{Actor, Amount, Currency, Destination, Reference, RequestKey, WithdrawalId};

use super::{SnapshotError, SnapshotFile, checked_file, decode, encode};
use crate::documented::{SNAPSHOT_FORMAT, header_value, worked_example_hex};
use crate::event::{Event, EventKind, SCHEMA_VERSION};
use crate::snapshot_format::header::{
    Header, KEYS_PART_LEN, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_HEADER_LEN,
};
use crate::state::{State, apply, with_archive_keys};
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

/// The archive's hash key in the worked example.
const DOCUMENTED_KEYS: (u64, u64) = (1, 2);

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
    let bytes = with_archive_keys(DOCUMENTED_KEYS, || {
        encode(
            &documented_state(),
            0x0123_4567_89ab_cdef,
            documented_head(),
        )
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hex(&bytes), worked_example_hex(SNAPSHOT_FORMAT));
    let (info, state) = decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.seq, 4);
    assert_eq!(state.difference(&documented_state()), None);
}

/// The documented snapshot in a file that counts its reads, and says
/// whether it stays readable ([`SnapshotFile::lasting`]).
#[derive(Clone)]
struct Counted {
    bytes: Arc<Vec<u8>>,
    reads: Arc<AtomicUsize>,
    lasting: bool,
}

impl SnapshotFile for Counted {
    fn byte_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let start = (offset as usize).min(self.bytes.len());
        into.extend_from_slice(&self.bytes[start..(start + len).min(self.bytes.len())]);
        Ok(())
    }

    fn lasting(&self, _from: u64) -> Option<Arc<dyn SnapshotFile>> {
        self.lasting
            .then(|| Arc::new(self.clone()) as Arc<dyn SnapshotFile>)
    }
}

/// The reads of the documented snapshot's file that bringing back `k-1`
/// makes once it is loaded, with the file `lasting` or not.
fn reads_after_loading(lasting: bool) -> usize {
    let bytes = with_archive_keys(DOCUMENTED_KEYS, || {
        encode(&documented_state(), 1, documented_head())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let file = Counted {
        bytes: Arc::new(bytes),
        reads: Arc::new(AtomicUsize::new(0)),
        lasting,
    };
    let head = documented_head();
    let loaded = checked_file::<Infallible>(&file, 1, |_| Ok(Some(head)))
        .unwrap_or_else(|never| match never {});
    let (_, mut state) = loaded.unwrap_or_else(|e| panic!("{e}"));
    let before = file.reads.load(Ordering::SeqCst);
    state
        .fault_in(Some("k-1"), None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        state.outcome("k-1"),
        documented_state().outcome("k-1"),
        "the pair is back"
    );
    file.reads.load(Ordering::SeqCst) - before
}

#[test]
fn an_archive_in_a_file_that_stays_readable_is_read_from_it_when_a_name_asks() {
    // Guards against a loading that copies the archive into memory when
    // its file stays readable, and against one that reads a file that may
    // be pruned later: the archive's blocks are read where they lie only
    // through a lasting handle.
    assert!(reads_after_loading(true) > 0, "read from the file");
    assert_eq!(reads_after_loading(false), 0, "read from memory");
}

#[test]
fn an_archive_repeating_a_pair_the_body_holds_is_refused_when_read_whole() {
    // Guards against an audit believing a snapshot whose archive holds a
    // pair its body holds too: the next snapshot's merge would meet it
    // twice, and a lookup would answer from one or the other.
    let state = documented_state();
    let taken = with_archive_keys(DOCUMENTED_KEYS, || encode(&state, 1, documented_head()))
        .unwrap_or_else(|e| panic!("{e}"));
    let header = Header::decode(&taken).unwrap_or_else(|e| panic!("{e}"));
    let archive = &taken[SNAPSHOT_HEADER_LEN + header.body_len as usize..];
    let body = (state.snapshot_body_in_parts(KEYS_PART_LEN)).unwrap_or_else(|e| panic!("{e}"));
    let both = Header {
        body_len: body.len() as u64,
        body_crc: crc32fast::hash(&body),
        ..header
    };
    let bytes = [&both.encode()[..], &body, archive].concat();
    match decode(&bytes) {
        Err(SnapshotError::Invalid {
            field: "archived pair",
            found,
            ..
        }) => assert!(found.contains("k-1"), "{found}"),
        other => panic!("expected the pair refused, got {other:?}"),
    }
}
