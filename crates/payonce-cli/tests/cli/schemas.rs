//! `history` on logs of both event schemas: events of schema 1 about a key
//! alone (written by earlier builds) are attributed through the ledger's
//! state before them; events of schema 2 on name their withdrawal themselves.
//! The schema-1 log is the library's committed fixture, written by the last
//! build that wrote schema 1; its events 6 to 9 are w-6 created, claimed
//! under k-rejected, refused by the rail and released.

use std::path::{Path, PathBuf};

use payonce::{Ledger, SendFailure};
use payonce_log::{FsStorage, LogConfig, LogReader};
use payonce_model::{Reason, WithdrawalRequest};
use serde_json::Value;

use crate::fixture::{arg, config, new_withdrawal, payonce, scenario};

const SEGMENT: &str = "00000000000000000001.log";

fn fixture_segment() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../payonce/tests/fixtures/schema-1/")
        .join(SEGMENT)
}

/// A copy of the schema-1 fixture, so nothing here changes the committed
/// file.
pub fn schema_1_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture_segment(), dir.path().join(SEGMENT)).unwrap();
    dir
}

/// `history DIR FLAG SUBJECT --json`, from the index if `indexed`, else
/// from a scan: its events, after checking the answer came from there.
fn history(dir: &Path, flag: &str, subject: &str, indexed: bool) -> Vec<Value> {
    let d = arg(dir);
    let mut args = vec!["history", &d, flag, subject, "--json"];
    if !indexed {
        args.push("--no-index");
    }
    let run = payonce(&args);
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    assert_eq!(run.stderr, "", "{args:?}");
    let json = run.json();
    let source = if indexed { "index" } else { "scan" };
    assert_eq!(json["source"], source, "{args:?}");
    json["events"].as_array().unwrap().clone()
}

fn index(dir: &Path) -> String {
    let run = payonce(&["index", &arg(dir)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
}

/// Each event as (seq, kind name, attributed withdrawal).
fn summary(events: &[Value]) -> Vec<(u64, String, Option<String>)> {
    events
        .iter()
        .map(|event| {
            (
                event["seq"].as_u64().unwrap(),
                event["event"].as_str().unwrap().to_owned(),
                event["withdrawal"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn row(seq: u64, name: &str, withdrawal: &str) -> (u64, String, Option<String>) {
    (seq, name.to_owned(), Some(withdrawal.to_owned()))
}

/// The rows k-rejected's and w-6's histories share in the fixture.
fn w6_rows() -> Vec<(u64, String, Option<String>)> {
    vec![
        row(7, "claimed", "w-6"),
        row(8, "send_rejected", "w-6"),
        row(9, "released", "w-6"),
    ]
}

/// Checks k-rejected's and w-6's histories in the fixture copy `dir`.
fn check_w6(dir: &Path, indexed: bool) {
    let by_key = history(dir, "--key", "k-rejected", indexed);
    assert_eq!(summary(&by_key), w6_rows(), "indexed: {indexed}");
    for event in &by_key[1..] {
        assert_eq!(event["schema"], 1);
        let kind = event["kind"].as_object().unwrap().values().next().unwrap();
        assert_eq!(kind["withdrawal"], Value::Null, "schema 1 did not name it");
    }
    let explanation = by_key[1]["explanation"].as_str().unwrap();
    assert!(
        explanation.contains("request key k-rejected (withdrawal w-6)"),
        "{explanation}"
    );
    let by_withdrawal = history(dir, "--withdrawal", "w-6", indexed);
    let mut expected = vec![row(6, "created", "w-6")];
    expected.extend(w6_rows());
    assert_eq!(summary(&by_withdrawal), expected, "indexed: {indexed}");
}

// Guards against losing which withdrawal a schema-1 send_rejected or
// released was about, in a scan of the log or from the audit index.
#[test]
fn schema_1_key_only_events_are_attributed_through_the_state_before_them() {
    let dir = schema_1_copy();
    check_w6(dir.path(), false);
    assert!(
        index(dir.path()).contains("built through seq 28"),
        "the whole fixture is indexed"
    );
    check_w6(dir.path(), true);
}

/// Where event `seq` of the log in `dir` starts in its one segment.
fn offset_of(dir: &Path, seq: u64) -> u64 {
    let storage = std::sync::Arc::new(FsStorage::new(dir));
    let reader = LogReader::open(storage, LogConfig::default()).unwrap();
    let record = reader.records_from(seq).unwrap().next().unwrap().unwrap();
    assert_eq!((record.seq, record.position.segment), (seq, 1));
    record.position.offset
}

// Guards against an index caught up from the middle of a schema-1 log
// attributing the events after its last mark without the state before
// them: the index is built on the fixture cut after event 7 (k-rejected's
// claim), then the rest, from its send_rejected on, is indexed by a
// catch-up.
#[test]
fn an_index_caught_up_across_schema_1_events_attributes_them_as_a_scan_does() {
    let dir = schema_1_copy();
    let segment = dir.path().join(SEGMENT);
    let cut = offset_of(dir.path(), 8);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(cut).unwrap();
    drop(file);
    assert!(index(dir.path()).contains("built through seq 7"));
    std::fs::copy(fixture_segment(), &segment).unwrap();
    check_w6(dir.path(), true);
    for key in [
        "k-failed",
        "k-mismatch",
        "k-abandoned",
        "k-recorded",
        "k-panic",
    ] {
        let indexed = history(dir.path(), "--key", key, true);
        assert_eq!(indexed, history(dir.path(), "--key", key, false), "{key}");
        assert!(
            indexed.iter().all(|event| event["withdrawal"].is_string()),
            "{key}"
        );
    }
    assert!(index(dir.path()).contains("up to date through seq 28"));
}

// Guards against key-only events of schema 2 on losing their withdrawal: they
// name it themselves, and history shows that name, with or without the
// index.
#[test]
fn key_only_events_of_schema_2_on_are_attributed_by_their_own_field() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let ledger = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    let request = new_withdrawal(&ledger, "20");
    let rejected = ledger.submit("k-rejected", request.clone(), |_| {
        Err::<WithdrawalRequest, SendFailure>(SendFailure::Rejected(Reason::lossy("no funds")))
    });
    assert!(rejected.is_err());
    ledger.release("k-rejected", "nothing left", "ops").unwrap();
    drop(ledger);
    let id = request.id().as_str();
    for indexed in [false, true] {
        if indexed {
            index(dir.path());
        }
        let by_key = history(dir.path(), "--key", "k-rejected", indexed);
        let names: Vec<(String, Option<String>)> = summary(&by_key)
            .into_iter()
            .map(|(_, name, withdrawal)| (name, withdrawal))
            .collect();
        let expected: Vec<(String, Option<String>)> = ["claimed", "send_rejected", "released"]
            .iter()
            .map(|name| ((*name).to_owned(), Some(id.to_owned())))
            .collect();
        assert_eq!(names, expected, "indexed: {indexed}");
        for event in &by_key[1..] {
            assert_eq!(event["schema"], payonce::SCHEMA_VERSION);
            let kind = event["kind"].as_object().unwrap().values().next().unwrap();
            assert_eq!(kind["withdrawal"], id, "the event names it");
        }
        let by_withdrawal = history(dir.path(), "--withdrawal", id, indexed);
        let names: Vec<&str> = by_withdrawal
            .iter()
            .map(|event| event["event"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["created", "claimed", "send_rejected", "released"]);
        assert!(by_withdrawal.iter().all(|event| event["withdrawal"] == id));
    }
}

// Guards against a log of both schemas (an old log a new build kept
// writing) attributing either part wrongly: k-abandoned's send_failed is of
// schema 1, its release of this build's schema.
#[test]
fn a_log_of_both_schemas_attributes_each_part() {
    let dir = schema_1_copy();
    index(dir.path());
    let ledger = Ledger::open(dir.path()).unwrap();
    ledger
        .release("k-abandoned", "nothing on chain", "ops-ana")
        .unwrap();
    drop(ledger);
    let expected = vec![
        row(18, "claimed", "w-17"),
        row(19, "send_failed", "w-17"),
        row(30, "released", "w-17"),
    ];
    for indexed in [false, true] {
        let by_key = history(dir.path(), "--key", "k-abandoned", indexed);
        assert_eq!(summary(&by_key), expected, "indexed: {indexed}");
        let schemas: Vec<&Value> = by_key.iter().map(|event| &event["schema"]).collect();
        assert_eq!(schemas, [1, 1, payonce::SCHEMA_VERSION]);
        let by_withdrawal = history(dir.path(), "--withdrawal", "w-17", indexed);
        let mut with_created = vec![row(17, "created", "w-17")];
        with_created.extend(expected.clone());
        assert_eq!(summary(&by_withdrawal), with_created, "indexed: {indexed}");
    }
}
