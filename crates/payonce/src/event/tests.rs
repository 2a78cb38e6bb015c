//! The schema's encodings: owned and borrowed decoding agree, kind by
//! kind, in every schema this build reads.

use payonce_model::{
    Actor, Amount, Currency, Destination, Note, Reason, Reference, RequestKey, WithdrawalId,
    WithdrawalRequest, WorkerName,
};
use proptest::prelude::*;

use super::*;
use crate::documented::{EVENT_FORMAT, worked_example_hex};

fn request(id: &str) -> WithdrawalRequest {
    WithdrawalRequest::new(
        WithdrawalId::new(id).unwrap(),
        Amount::parse("25.5").unwrap(),
        Currency::new("USDC").unwrap(),
        Destination::new("0xabc").unwrap(),
        Actor::new("alice").unwrap(),
    )
}

fn sent(id: &str, reference: &str) -> WithdrawalRequest {
    let reference = Reference::new(reference).unwrap();
    request(id)
        .approve()
        .unwrap()
        .start_sending()
        .unwrap()
        .mark_sent(reference)
        .unwrap()
}

/// The schemas this build reads.
pub(crate) const SCHEMAS: [u16; 4] = [1, 2, 3, SCHEMA_VERSION];

/// One event of every kind `schema` has: in schema 1 nothing names the
/// withdrawal a key held, only schemas 3 on have epochs, moves and
/// corrections, and only schema 4 sessions and claims naming a worker.
/// Also a bumped outcome, which a view cannot borrow.
fn every_kind(schema: u16) -> Vec<EventKind> {
    let key = || RequestKey::new("k-1").unwrap();
    let held = || (schema >= SCHEMA_NAMING_HELD).then(|| WithdrawalId::new("w-1").unwrap());
    let note = Note::new("checked the rail").unwrap();
    let by = Actor::new("ops").unwrap();
    let reason = Reason::new("node down").unwrap();
    let bumped = sent("w-1", "0xa")
        .bump(Reference::new("0xb").unwrap())
        .unwrap();
    let failed = request("w-1")
        .approve()
        .unwrap()
        .fail(reason.clone())
        .unwrap();
    let mut kinds = vec![
        EventKind::Opened {
            accept_foreign_ids: true,
            epoch: (schema >= SCHEMA_SETTLED_OUTCOMES).then_some(0x0123_4567_89ab_cdef),
        },
        EventKind::Created {
            withdrawal: request("w-1"),
        },
        EventKind::Claimed {
            key: key(),
            request: request("w-1"),
            worker: None,
        },
        EventKind::Recorded {
            key: key(),
            request: failed.clone(),
        },
        EventKind::Completed {
            key: key(),
            outcome: sent("w-1", "0xa"),
        },
        EventKind::Completed {
            key: key(),
            outcome: bumped,
        },
        EventKind::SendRejected {
            key: key(),
            withdrawal: held(),
            reason: reason.clone(),
        },
        EventKind::SendFailed {
            key: key(),
            withdrawal: held(),
            error: reason.clone(),
            cause: FailureCause::OutcomeMismatch {
                outcome: Box::new(sent("w-2", "0xc")),
                differences: request("w-1")
                    .fingerprint()
                    .differences(&request("w-2").fingerprint()),
            },
        },
        EventKind::Resolved {
            key: key(),
            outcome: failed,
            note: note.clone(),
            by: by.clone(),
        },
        EventKind::Released {
            key: key(),
            withdrawal: held(),
            note: note.clone(),
            by: by.clone(),
        },
        EventKind::Refused {
            command: Command::Release {
                key: key(),
                note,
                by,
            },
            refusal: Refusal::UnknownWithdrawal {
                withdrawal: WithdrawalId::new("w-9").unwrap(),
            },
            held: held(),
        },
    ];
    if schema >= SCHEMA_SETTLED_OUTCOMES {
        kinds.extend(schema_3_kinds());
    }
    if schema >= SCHEMA_SESSIONS {
        kinds.extend(schema_4_kinds());
    }
    kinds
}

/// The kinds, commands and refusals schema 4 added, and a claim naming
/// its worker.
fn schema_4_kinds() -> Vec<EventKind> {
    let worker = || WorkerName::new("api-2").unwrap();
    let note = Note::new("the host is gone").unwrap();
    let by = Actor::new("ops").unwrap();
    vec![
        EventKind::Started {
            worker: worker(),
            epoch: 0x0fed_cba9_8765_4321,
        },
        EventKind::Claimed {
            key: RequestKey::new("k-2").unwrap(),
            request: request("w-2"),
            worker: Some(worker()),
        },
        EventKind::SessionEnded {
            worker: worker(),
            note: note.clone(),
            by: by.clone(),
        },
        EventKind::Refused {
            command: Command::EndSession {
                worker: worker(),
                note,
                by,
            },
            refusal: Refusal::NoSession { worker: worker() },
            held: None,
        },
    ]
}

/// The kinds, causes, commands and refusals schema 3 added.
fn schema_3_kinds() -> Vec<EventKind> {
    let key = || RequestKey::new("k-1").unwrap();
    let note = Note::new("the rail's reference was wrong").unwrap();
    let by = Actor::new("ops").unwrap();
    let approved = request("w-1").approve().unwrap();
    vec![
        EventKind::Advanced {
            key: key(),
            outcome: sent("w-1", "0xa").confirm().unwrap(),
        },
        EventKind::Corrected {
            key: key(),
            old: sent("w-1", "0xa"),
            new: sent("w-1", "0xb"),
            note: note.clone(),
            by: by.clone(),
        },
        EventKind::SendFailed {
            key: key(),
            withdrawal: Some(WithdrawalId::new("w-1").unwrap()),
            error: Reason::new("not an outcome").unwrap(),
            cause: FailureCause::Unsettled {
                outcome: Box::new(approved.clone()),
            },
        },
        EventKind::Refused {
            command: Command::Correct {
                key: key(),
                outcome: approved.clone(),
                note,
                by,
            },
            refusal: Refusal::Unsettled {
                key: key(),
                state: approved.state(),
            },
            held: Some(WithdrawalId::new("w-1").unwrap()),
        },
    ]
}

fn event(schema: u16, seq: u64, kind: EventKind) -> Event {
    Event {
        schema,
        seq,
        at: Timestamp::from_unix_nanos(seq * 1_000),
        kind,
    }
}

pub(crate) fn every_event(schema: u16) -> Vec<Event> {
    every_kind(schema)
        .into_iter()
        .enumerate()
        .map(|(index, kind)| event(schema, index as u64 + 1, kind))
        .collect()
}

/// Whether a borrowed reading of `event` is expected to refuse it: a
/// bumped withdrawal; in schema 3 a refusal, which may hold what schema 4
/// added; before it any kind but the claims and outcomes.
fn view_refuses(event: &Event) -> bool {
    let bumped = match &event.kind {
        EventKind::Completed { outcome, .. } | EventKind::Advanced { outcome, .. } => {
            !outcome.replaced().is_empty()
        }
        _ => false,
    };
    let claim_or_outcome = matches!(
        event.kind,
        EventKind::Created { .. }
            | EventKind::Claimed { .. }
            | EventKind::Recorded { .. }
            | EventKind::Completed { .. }
    );
    let borrowable = match event.schema {
        SCHEMA_VERSION => true,
        3 => !matches!(event.kind, EventKind::Refused { .. }),
        _ => claim_or_outcome,
    };
    bumped || !borrowable
}

#[test]
fn every_kind_decodes_owned_and_borrowed_to_the_event_written_in_every_schema() {
    // Guards against the borrowed types or an earlier schema's layout drifting from the owned encoding.
    for schema in SCHEMAS {
        for event in every_event(schema) {
            let bytes = event.encode().unwrap();
            assert_eq!(bytes[..2], schema.to_le_bytes(), "{}", event.kind.name());
            assert_eq!(Event::decode(&bytes).unwrap(), event);
            assert_eq!(event.view().kind.to_value(), event.kind);
            match EventView::decode(&bytes) {
                Ok(view) => {
                    assert!(!view_refuses(&event), "{schema}: {:?}", event.kind);
                    assert_eq!(
                        (view.schema, view.seq, view.at),
                        (schema, event.seq, event.at)
                    );
                    assert_eq!(view.kind.to_value(), event.kind);
                }
                Err(_) => assert!(view_refuses(&event), "{schema}: {:?}", event.kind),
            }
        }
    }
}

#[test]
fn a_schema_1_event_encodes_to_the_bytes_schema_1_wrote() {
    // Guards against the legacy layout losing its place: schema 1 is schema 2 without the held withdrawal.
    let v1 = event(
        1,
        7,
        EventKind::Released {
            key: RequestKey::new("k-1").unwrap(),
            withdrawal: None,
            note: Note::new("n").unwrap(),
            by: Actor::new("ops").unwrap(),
        },
    );
    let v2 = Event {
        schema: 2,
        kind: EventKind::Released {
            key: RequestKey::new("k-1").unwrap(),
            withdrawal: None,
            note: Note::new("n").unwrap(),
            by: Actor::new("ops").unwrap(),
        },
        ..v1.clone()
    };
    let (old, new) = (v1.encode().unwrap(), v2.encode().unwrap());
    // Schema 2 adds one byte: the `None` of the withdrawal, after the key.
    let key_end = KIND_OFFSET + 4 + 8 + 3;
    assert_eq!(old[2..key_end], new[2..key_end]);
    assert_eq!(new[key_end], 0);
    assert_eq!(old[key_end..], new[key_end + 1..]);
}

#[test]
fn an_event_holding_what_its_schema_has_no_place_for_neither_encodes_nor_decodes() {
    // Guards against an old schema's event carrying what only a later schema could write.
    let mut forged = every_event(SCHEMA_VERSION)
        .into_iter()
        .find(|event| matches!(event.kind, EventKind::Released { .. }))
        .unwrap();
    forged.schema = 1;
    assert!(
        forged.encode().is_err(),
        "schema 1 names no held withdrawal"
    );
    let later = schema_3_kinds()
        .into_iter()
        .map(|kind| (2, kind))
        .chain(schema_4_kinds().into_iter().map(|kind| (3, kind)));
    for (schema, kind) in later {
        let mut event = event(schema, 5, kind);
        assert!(event.encode().is_err(), "{}", event.kind.name());
        // Written in the current schema, then labelled the earlier one.
        event.schema = SCHEMA_VERSION;
        let mut bytes = event.encode().unwrap();
        bytes[..2].copy_from_slice(&schema.to_le_bytes());
        assert!(Event::decode(&bytes).is_err(), "{}", event.kind.name());
        assert!(EventView::decode(&bytes).is_err(), "{}", event.kind.name());
    }
}

#[test]
fn a_schema_3_claim_names_no_worker_and_reads_back_as_written() {
    // Guards against the one layout schema 4 changed being read with the new one.
    let mut claim = documented_event();
    claim.schema = 3;
    let old = claim.encode().unwrap();
    claim.schema = SCHEMA_VERSION;
    let new = claim.encode().unwrap();
    // Schema 4 adds one byte at the end: the `None` of the worker.
    assert_eq!(old[2..], new[2..new.len() - 1]);
    assert_eq!(new.last(), Some(&0));
    claim.schema = 3;
    assert_eq!(Event::decode(&old).unwrap(), claim);
    assert_eq!(EventView::decode(&old).unwrap().kind.to_value(), claim.kind);
}

#[test]
fn a_schema_2_opening_has_no_epoch_and_reads_back_as_written() {
    // Guards against the one layout schema 3 changed being read with the new one.
    let opened = event(
        2,
        1,
        EventKind::Opened {
            accept_foreign_ids: false,
            epoch: None,
        },
    );
    let bytes = opened.encode().unwrap();
    // Schema, seq, time, variant 0, the flag: nothing else.
    assert_eq!(bytes.len(), KIND_OFFSET + 4 + 1);
    assert_eq!(Event::decode(&bytes).unwrap(), opened);
    assert!(
        EventView::decode(&bytes).is_err(),
        "read as an event, not a view"
    );
}

#[test]
fn a_schema_this_build_does_not_know_is_refused_by_number() {
    // Guards against a future schema being misread as this one.
    let mut bytes = every_event(SCHEMA_VERSION)[0].encode().unwrap();
    bytes[..2].copy_from_slice(&(SCHEMA_VERSION + 1).to_le_bytes());
    assert_eq!(
        Event::decode(&bytes),
        Err(EventDecodeError::UnknownSchema {
            found: SCHEMA_VERSION + 1,
            expected: SCHEMA_VERSION
        })
    );
    assert_eq!(
        Event::decode(&bytes[..1]),
        Err(EventDecodeError::Truncated { len: 1 })
    );
}

proptest! {
    #[test]
    fn a_view_decodes_only_what_the_owned_decoding_reads_alike(
        schema in prop::sample::select(SCHEMAS.to_vec()),
        which in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        // Guards against the borrowed reading accepting corrupt bytes the owned decoding refuses.
        let events = every_event(schema);
        let mut bytes = events[which.index(events.len())].encode().unwrap();
        for (index, value) in flips {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        if let Ok(view) = EventView::decode(&bytes) {
            let owned = Event::decode(&bytes);
            prop_assert!(owned.is_ok(), "the view read what the event refuses: {:?}", owned);
            let owned = owned.unwrap();
            prop_assert_eq!((view.schema, view.seq, view.at), (owned.schema, owned.seq, owned.at));
            prop_assert_eq!(view.kind.to_value(), owned.kind);
        }
    }
}

/// The event docs/event-format.md works through byte by byte.
fn documented_event() -> Event {
    Event {
        schema: SCHEMA_VERSION,
        seq: 3,
        // 2026-11-30T12:00:01Z
        at: Timestamp::from_unix_nanos(1_796_040_001_000_000_000),
        kind: EventKind::Claimed {
            key: RequestKey::new("k-1").unwrap(),
            request: WithdrawalRequest::new(
                WithdrawalId::new("w-2").unwrap(),
                Amount::parse("25.00").unwrap(),
                Currency::new("USDC").unwrap(),
                Destination::new("0xabc").unwrap(),
                Actor::new("alice").unwrap(),
            ),
            worker: None,
        },
    }
}

#[test]
fn the_documented_event_is_the_bytes_the_document_gives() {
    // Guards against docs/event-format.md's worked example drifting from
    // what the ledger writes: the test reads the document's table.
    let hex: String = documented_event()
        .encode()
        .unwrap()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(hex, worked_example_hex(EVENT_FORMAT));
}

/// Whether the field reader of `common` reads `event`: the kinds it
/// knows, in the current schema, with no replaced references.
fn read_without_serde(event: &Event) -> bool {
    let common = match &event.kind {
        EventKind::Opened { .. }
        | EventKind::Created { .. }
        | EventKind::Claimed { .. }
        | EventKind::Recorded { .. } => true,
        EventKind::Completed { outcome, .. } => outcome.replaced().is_empty(),
        _ => false,
    };
    common && event.schema == SCHEMA_VERSION
}

#[test]
fn the_common_kinds_are_read_without_serde_as_serde_reads_them() {
    // Guards against the field reader drifting from the serde layout, or silently leaving every event to serde.
    for schema in SCHEMAS {
        for event in every_event(schema) {
            let bytes = event.encode().unwrap();
            let read = view::decode_common(&bytes);
            assert_eq!(read.is_some(), read_without_serde(&event), "{event:?}");
            if let Some(read) = read {
                let by_serde: EventView<'_> = codec::decode_borrowed(&bytes).unwrap();
                assert_eq!(
                    (read.schema, read.seq, read.at),
                    (by_serde.schema, by_serde.seq, by_serde.at)
                );
                assert_eq!(read.kind.to_value(), by_serde.kind.to_value());
                assert_eq!(read.kind.to_value(), event.kind);
            }
        }
    }
}

proptest! {
    #[test]
    fn the_field_reader_reads_only_what_serde_reads_alike(
        which in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<u8>(), 0..3),
    ) {
        // Guards against the field reader accepting bytes serde refuses (a bad tag, length, text or state, bytes left over) or reading them otherwise.
        let events: Vec<Event> = every_event(SCHEMA_VERSION).into_iter().filter(read_without_serde).collect();
        let mut bytes = events[which.index(events.len())].encode().unwrap();
        for (index, value) in flips {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        if cut.index(3) == 0 {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        bytes.extend(extra);
        if let Some(read) = view::decode_common(&bytes) {
            let by_serde = codec::decode_borrowed::<EventView<'_>>(&bytes);
            prop_assert!(by_serde.is_ok(), "read what serde refuses: {:?}", by_serde.err());
            let by_serde = by_serde.unwrap();
            prop_assert_eq!((read.schema, read.seq, read.at), (by_serde.schema, by_serde.seq, by_serde.at));
            prop_assert_eq!(read.kind.to_value(), by_serde.kind.to_value());
        }
    }
}
