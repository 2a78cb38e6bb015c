//! The audit index: the same answers as a scan, brought up to date with the
//! log, and never trusted over it.

use std::path::Path;

use payonce::{Ledger, SendFailure};

use crate::fixture::{arg, config, minted, new_withdrawal, payonce, scenario, sent, snapshot};

/// Every subject of the fuller scenario: its keys and its withdrawals.
fn subjects() -> Vec<(&'static str, String)> {
    let mut subjects: Vec<(&str, String)> = ["req-1", "req-2", "req-3", "req-4", "req-5"]
        .into_iter()
        .map(|key| ("--key", key.to_owned()))
        .collect();
    subjects.extend([2, 6, 9].map(|seq| ("--withdrawal", minted(seq))));
    subjects
}

/// A subject's history as JSON events, and where it came from.
fn history(
    dir: &Path,
    flag: &str,
    subject: &str,
    scan: bool,
) -> (serde_json::Value, String, String) {
    let d = arg(dir);
    let mut args = vec!["history", &d, flag, subject, "--json"];
    if scan {
        args.push("--no-index");
    }
    let run = payonce(&args);
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    let json = run.json();
    (
        json["events"].clone(),
        json["source"].as_str().unwrap().to_owned(),
        run.stderr,
    )
}

fn index(dir: &Path) -> crate::fixture::Run {
    let run = payonce(&["index", &arg(dir)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run
}

/// The scenario plus req-5 sending a fourth withdrawal after req-4's
/// release, so every kind of event is indexed.
fn fuller_scenario(dir: &Path) {
    let scenario = scenario(dir);
    let ledger = Ledger::open_with(dir, config(scenario.clock.clone())).unwrap();
    ledger
        .release("req-4", "refused by the rail", "ops")
        .unwrap();
    ledger
        .submit("req-5", scenario.rejected.clone(), |r| {
            Ok::<_, SendFailure>(sent(r, "0x5"))
        })
        .unwrap();
}

// Guards against an index that answers differently from the log.
#[test]
fn history_from_the_index_is_the_history_from_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    fuller_scenario(dir.path());
    let before = snapshot(dir.path());
    let built = index(dir.path());
    assert!(
        built
            .stdout
            .contains("built through seq 16 (16 events indexed by this run)"),
        "{}",
        built.stdout
    );
    for (flag, subject) in subjects() {
        let (indexed, source, warnings) = history(dir.path(), flag, &subject, false);
        let (scanned, scan_source, _) = history(dir.path(), flag, &subject, true);
        assert_eq!(indexed, scanned, "{flag} {subject}");
        assert_eq!((source.as_str(), scan_source.as_str()), ("index", "scan"));
        assert_eq!(warnings, "");
    }
    // The release is about req-4's claim: the index lists it under w-1-9 too.
    let (events, _, _) = history(dir.path(), "--withdrawal", &minted(9), false);
    let names: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "created",
            "claimed",
            "send_rejected",
            "released",
            "claimed",
            "completed"
        ]
    );
    assert_eq!(snapshot(dir.path()), before, "indexing changed the log");
    let text = payonce(&["history", &arg(dir.path()), "--key", "req-1"]);
    assert!(
        text.stdout.contains("answered from the audit index"),
        "{}",
        text.stdout
    );
}

// Guards against an index that misses events appended after it was built.
#[test]
fn the_index_indexes_the_logs_tail_before_answering() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    index(dir.path());
    let ledger = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    let late = new_withdrawal(&ledger, "3.00");
    ledger
        .submit("req-late", late.clone(), |r| {
            Ok::<_, SendFailure>(sent(r, "0x1a7e"))
        })
        .unwrap();
    // A release is about the key's claim: listed under w-1-9 from the tail
    // too.
    ledger
        .release("req-4", "refused by the rail", "ops")
        .unwrap();
    drop(ledger);
    for (flag, subject) in [
        ("--key", "req-late"),
        ("--withdrawal", late.id().as_str()),
        ("--withdrawal", minted(9).as_str()),
    ] {
        let (indexed, source, warnings) = history(dir.path(), flag, subject, false);
        let (scanned, _, _) = history(dir.path(), flag, subject, true);
        assert_eq!(indexed, scanned, "{flag} {subject}");
        assert_eq!(source, "index");
        assert_eq!(warnings, "");
    }
    let again = index(dir.path());
    assert!(
        again
            .stdout
            .contains("up to date through seq 17 (0 events indexed by this run)"),
        "{}",
        again.stdout
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

// Guards against trusting an index built from another log, even one with
// the same events.
#[test]
fn an_index_from_another_log_is_ignored_with_a_warning_and_rebuilt_by_index() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    scenario(a.path());
    scenario(b.path());
    index(a.path());
    copy_dir(&a.path().join("audit-index"), &b.path().join("audit-index"));
    let (events, source, warnings) = history(b.path(), "--key", "req-1", false);
    assert_eq!(source, "scan");
    assert!(
        warnings.contains("was built from another log"),
        "{warnings}"
    );
    assert_eq!(events, history(b.path(), "--key", "req-1", true).0);
    let rebuilt = payonce(&["index", &arg(b.path())]);
    assert_eq!(rebuilt.code, 0);
    assert!(
        rebuilt
            .stderr
            .contains("is rebuilt: it was built from another log"),
        "{}",
        rebuilt.stderr
    );
    assert!(
        rebuilt.stdout.contains("built through seq 12"),
        "{}",
        rebuilt.stdout
    );
    let (_, source, warnings) = history(b.path(), "--key", "req-1", false);
    assert_eq!((source.as_str(), warnings.as_str()), ("index", ""));
}

// Guards against an index that is ahead of the log it sits beside (a log
// restored from an older copy).
#[test]
fn an_index_ahead_of_its_log_is_ignored_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let old = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    copy_dir(dir.path(), old.path());
    let ledger = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    new_withdrawal(&ledger, "1.00");
    drop(ledger);
    index(dir.path());
    copy_dir(
        &dir.path().join("audit-index"),
        &old.path().join("audit-index"),
    );
    let (events, source, warnings) = history(old.path(), "--key", "req-1", false);
    assert_eq!(source, "scan");
    assert!(
        warnings.contains("does not match this log: event 14"),
        "{warnings}"
    );
    assert_eq!(events, history(old.path(), "--key", "req-1", true).0);
}

// Guards against a damaged index breaking history: it is ignored, the log
// answers, and deleting it loses nothing.
#[test]
fn a_damaged_or_deleted_index_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let expected = history(dir.path(), "--withdrawal", &minted(6), true).0;
    index(dir.path());
    let db = dir.path().join("audit-index").join("db");
    let len = std::fs::metadata(&db).unwrap().len() as usize;
    std::fs::write(&db, vec![0xa5; len]).unwrap();
    let (events, source, warnings) = history(dir.path(), "--withdrawal", &minted(6), false);
    assert_eq!(events, expected);
    assert_eq!(source, "scan");
    assert!(
        warnings.contains("the audit index") && warnings.contains("is not used"),
        "{warnings}"
    );
    std::fs::remove_dir_all(dir.path().join("audit-index")).unwrap();
    let (events, source, warnings) = history(dir.path(), "--withdrawal", &minted(6), false);
    assert_eq!(
        (events, source.as_str(), warnings.as_str()),
        (expected.clone(), "scan", "")
    );
    index(dir.path());
    assert_eq!(
        history(dir.path(), "--withdrawal", &minted(6), false).0,
        expected
    );
}

// Guards against believing entries that point at the wrong records: every
// record is read back and verified, so a wrong position is caught.
#[test]
fn an_index_pointing_at_the_wrong_records_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let expected = history(dir.path(), "--key", "req-3", true).0;
    index(dir.path());
    {
        // Layout (src/index.rs): each chunk starts with a group: subject
        // length (u16), subject, count (u16), then entries of seq, segment,
        // offset (u64 each) and chain (u32). Move every first entry by 8.
        let db = sled::open(dir.path().join("audit-index")).unwrap();
        let postings = db.open_tree("postings").unwrap();
        for found in postings.iter() {
            let (key, value) = found.unwrap();
            let mut bytes = value.to_vec();
            let len = u16::from_le_bytes([bytes[0], bytes[1]]) as usize;
            let at = 2 + len + 2 + 16;
            let offset = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) + 8;
            bytes[at..at + 8].copy_from_slice(&offset.to_le_bytes());
            postings.insert(key, bytes).unwrap();
        }
        db.flush().unwrap();
    }
    let (events, source, warnings) = history(dir.path(), "--key", "req-3", false);
    assert_eq!(events, expected);
    assert_eq!(source, "scan");
    assert!(warnings.contains("does not verify"), "{warnings}");
}

// Guards against a second process waiting on, or failing because of, an
// index another process has open.
#[test]
fn an_index_held_open_elsewhere_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    index(dir.path());
    let held = sled::open(dir.path().join("audit-index")).unwrap();
    let (events, source, warnings) = history(dir.path(), "--key", "req-1", false);
    assert_eq!(source, "scan");
    assert!(warnings.contains("cannot be opened"), "{warnings}");
    assert_eq!(events, history(dir.path(), "--key", "req-1", true).0);
    drop(held);
}

// Guards against `state --at TIME` answering differently with the index,
// which only tells it where the replay may stop.
#[test]
fn state_at_a_time_is_the_same_with_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let at = scenario.failed_claim_at.to_string();
    let d = arg(dir.path());
    let scanned = payonce(&["state", &d, "--at", &at, "--json", "--no-index"]);
    index(dir.path());
    let indexed = payonce(&["state", &d, "--at", &at, "--json"]);
    assert_eq!(indexed.code, 0, "{}", indexed.stderr);
    assert_eq!(indexed.stderr, "");
    assert_eq!(indexed.json(), scanned.json());
    assert_eq!(indexed.json()["seq"], 8);
}

// Guards against the index hiding a torn tail that appeared after it was
// built.
#[test]
fn history_from_the_index_still_reports_a_new_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    index(dir.path());
    crate::fixture::tear_last_record(dir.path(), &[1; 5]);
    let run = payonce(&["history", &arg(dir.path()), "--key", "req-1", "--json"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("torn tail: 5 bytes"), "{}", run.stderr);
    assert_eq!(run.json()["source"], "index");
}

// Guards against `payonce index` leaving an audit-index/ behind in a
// directory whose log is damaged, or whose segment file is not a payonce
// log's: the log is read before anything is created.
#[test]
fn index_writes_nothing_beside_a_damaged_log_or_a_foreign_one() {
    let damaged = tempfile::tempdir().unwrap();
    scenario(damaged.path());
    let segment = crate::fixture::first_segment(damaged.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    // A byte inside the first record's payload, with valid records after
    // it.
    bytes[40 + 20] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let foreign = tempfile::tempdir().unwrap();
    std::fs::write(
        crate::fixture::first_segment(foreign.path()),
        b"PK\x03\x04 this is a zip archive, not a payonce segment, padded out to a header",
    )
    .unwrap();
    for dir in [damaged.path(), foreign.path()] {
        let before = snapshot(dir);
        let run = payonce(&["index", &arg(dir)]);
        assert_eq!(run.code, 4, "{}", run.stderr);
        assert!(run.stderr.contains("is damaged"), "{}", run.stderr);
        assert!(
            !dir.join("audit-index").exists(),
            "index wrote into {}",
            dir.display()
        );
        assert_eq!(snapshot(dir), before);
    }
    let unrelated = tempfile::tempdir().unwrap();
    std::fs::write(unrelated.path().join("notes.txt"), "mine").unwrap();
    let run = payonce(&["index", &arg(unrelated.path())]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(!unrelated.path().join("audit-index").exists());
}

// Guards against the lazy creation of the index losing an empty log's
// index: a log with nothing but its opening still gets one.
#[test]
fn index_builds_an_index_for_a_log_with_only_its_opening() {
    let dir = tempfile::tempdir().unwrap();
    drop(Ledger::init(dir.path()).unwrap());
    let run = index(dir.path());
    assert!(run.stdout.contains("built through seq 1"), "{}", run.stdout);
    assert!(dir.path().join("audit-index").join("db").is_file());
    let again = index(dir.path());
    assert!(
        again.stdout.contains("up to date through seq 1"),
        "{}",
        again.stdout
    );
}
