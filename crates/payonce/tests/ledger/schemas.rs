//! Logs written in an earlier event schema replay unchanged: the committed
//! fixture `tests/fixtures/schema-1` was written by the last build that
//! wrote schema 1, with an event of every kind.

use std::path::{Path, PathBuf};

use payonce::{EventKind, EventLog, Ledger, SCHEMA_VERSION, State, apply, withdrawal_of};

/// A copy of the schema-1 fixture, so opening it for writing (which
/// appends an `opened` event) leaves the committed file alone.
fn schema_1_copy() -> (tempfile::TempDir, PathBuf) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema-1");
    let dir = tempfile::tempdir().unwrap();
    let segment = "00000000000000000001.log";
    std::fs::copy(fixture.join(segment), dir.path().join(segment)).unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

#[test]
fn a_schema_1_log_verifies_clean_and_opens_with_every_decision_re_derived() {
    // Guards against the schema-2 reader misreading, or re-deriving differently, a log written before it.
    let (_dir, path) = schema_1_copy();
    let report = Ledger::verify(&path).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(report.events, 28);
    assert_eq!(report.refusals, 2);
    let in_flight: Vec<String> = report
        .state
        .in_flight()
        .iter()
        .map(|entry| entry.key.to_string())
        .collect();
    assert_eq!(in_flight, ["k-mismatch", "k-abandoned", "k-panic"]);
    // Opening re-derives every decision; it appends one event, `opened`.
    let ledger = Ledger::open(&path).unwrap();
    assert_eq!(ledger.last_seq(), 29);
    assert_eq!(ledger.in_flight(), report.state.in_flight());
    assert_eq!(ledger.held_totals(), report.held);
    assert_eq!(
        ledger.claimed_by("w-6").unwrap(),
        None,
        "k-rejected was released"
    );
    assert_eq!(
        ledger
            .outcome("k-failed")
            .unwrap()
            .unwrap()
            .reference()
            .unwrap()
            .as_str(),
        "0xa3"
    );
    assert_eq!(
        ledger
            .outcome("k-bumped")
            .unwrap()
            .unwrap()
            .replaced()
            .len(),
        1
    );
}

#[test]
fn events_after_a_schema_1_log_are_written_in_schema_2_and_replay_with_it() {
    // Guards against a log mixing the two schemas, as an upgraded service's log does, failing to replay.
    let (_dir, path) = schema_1_copy();
    let ledger = Ledger::open(&path).unwrap();
    ledger
        .release("k-abandoned", "nothing on chain", "ops-ana")
        .unwrap();
    drop(ledger);
    let events = all_events(&path);
    let released = events.last().unwrap();
    assert_eq!(released.schema, SCHEMA_VERSION);
    assert!(events[..28].iter().all(|event| event.schema == 1));
    match &released.kind {
        EventKind::Released { withdrawal, .. } => {
            assert_eq!(withdrawal.as_ref().map(|id| id.as_str()), Some("w-17"));
        }
        other => panic!("{other:?}"),
    }
    assert!(Ledger::verify(&path).unwrap().is_clean());
    drop(Ledger::open(&path).unwrap());
}

#[test]
fn a_key_only_event_of_schema_1_is_attributed_through_the_state_before_it() {
    // Guards against auditors losing which withdrawal a schema-1 send result or release was about.
    let (_dir, path) = schema_1_copy();
    let mut state = State::new();
    let mut attributed = Vec::new();
    for event in all_events(&path) {
        if matches!(
            event.kind,
            EventKind::SendRejected { .. }
                | EventKind::SendFailed { .. }
                | EventKind::Released { .. }
        ) {
            assert_eq!(event.kind.withdrawal(), None, "schema 1 names none");
            let key = event.kind.key().unwrap().to_string();
            let id = withdrawal_of(&state, &event.kind).unwrap();
            attributed.push((key, id.to_string()));
        }
        apply(&mut state, &event);
    }
    let attributed: Vec<(&str, &str)> = attributed
        .iter()
        .map(|(key, id)| (key.as_str(), id.as_str()))
        .collect();
    assert_eq!(
        attributed,
        [
            ("k-rejected", "w-6"),
            ("k-rejected", "w-6"),
            ("k-failed", "w-10"),
            ("k-mismatch", "w-14"),
            ("k-abandoned", "w-17"),
            ("k-panic", "w-26"),
        ]
    );
}

fn all_events(path: &Path) -> Vec<payonce::Event> {
    let log = EventLog::open(path).unwrap();
    let mut events = log.events_from(1).unwrap();
    let mut all = Vec::new();
    while let Some((event, _)) = events.next_event().unwrap() {
        all.push(event);
    }
    all
}

#[test]
fn the_demos_ledger_in_log_format_1_verifies_and_opens_into_format_2() {
    // Guards against an upgrade refusing, or replaying differently, a ledger the previous log format wrote.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/log-v1");
    let dir = tempfile::tempdir().unwrap();
    let segment = "00000000000000000001.log";
    std::fs::copy(fixture.join(segment), dir.path().join(segment)).unwrap();
    let report = Ledger::verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    let ledger = Ledger::open(dir.path()).unwrap();
    assert_eq!(ledger.in_flight(), report.state.in_flight());
    assert_eq!(ledger.held_totals(), report.held);
    let head = ledger.head().unwrap();
    assert_eq!(
        head.seq,
        ledger.last_seq(),
        "opening synced its `opened` event"
    );
    drop(ledger);
    // The old segment is sealed, a segment of the new format follows it,
    // and the checkpoint holds the head: removing the new segment is refused.
    let after = Ledger::verify(dir.path()).unwrap();
    assert!(after.is_clean(), "{:?}", after.divergences);
    assert_eq!(after.events, report.events + 1);
    let newest = dir.path().join(format!("{:020}.log", report.events + 1));
    std::fs::remove_file(newest).unwrap();
    assert!(Ledger::open(dir.path()).is_err());
}
