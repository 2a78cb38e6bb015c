//! The operator exits, `resolve` and `release`.

use std::sync::Arc;

use payonce::{EventKind, EventLog, Ledger, ManualClock, SendFailure};
use payonce_model::WithdrawalRequest;

use crate::fixture::{
    START, arg, config, outcome_file, payonce, payonce_as, scenario, sent, snapshot,
};

fn last_event(dir: &std::path::Path) -> payonce::Event {
    let log = EventLog::open(dir).unwrap();
    let mut events = log.events_from(1).unwrap();
    let mut last = None;
    while let Some((event, _)) = events.next_event().unwrap() {
        last = Some(event);
    }
    last.unwrap()
}

fn json(request: &WithdrawalRequest) -> String {
    serde_json::to_string(request).unwrap()
}

// Guards against a resolve that does not close the key, loses the note or
// the operator, or does not say what it did.
#[test]
fn resolve_closes_a_key_in_flight_records_who_and_why_and_prints_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let outcome = sent(&scenario.failed, "0xfound");
    let file = outcome_file(files.path(), "outcome.json", &json(&outcome));
    let run = payonce(&[
        "resolve",
        &arg(dir.path()),
        "req-3",
        "--outcome",
        &file,
        "--note",
        "found 0xfound on the explorer",
        "--by",
        "ops-ana",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("resolved request key req-3 by ops-ana"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("outcome sent, reference 0xfound"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("no funds held for it"),
        "{}",
        run.stdout
    );
    match last_event(dir.path()).kind {
        EventKind::Resolved {
            key,
            outcome: recorded,
            note,
            by,
        } => {
            assert_eq!(key.as_str(), "req-3");
            assert_eq!(recorded, outcome);
            assert_eq!(note.as_str(), "found 0xfound on the explorer");
            assert_eq!(by.as_str(), "ops-ana");
        }
        other => panic!("the last event is {other:?}"),
    }
    let report = payonce::verify(dir.path()).unwrap();
    assert!(report.is_clean());
    assert_eq!(report.state.outcome("req-3"), Some(outcome.clone()));
    assert!(report.state.held(scenario.failed.id()).is_none());
    // The same outcome again changes nothing and says so.
    let before = snapshot(dir.path());
    let again = payonce(&[
        "resolve",
        &arg(dir.path()),
        "req-3",
        "--outcome",
        &file,
        "--note",
        "again",
        "--by",
        "ops-ana",
        "--json",
    ]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.json()["action"], "unchanged");
    assert_eq!(snapshot(dir.path()), before);
}

// Guards against an event that records nobody as the operator.
#[test]
fn resolve_takes_the_operator_from_user_and_refuses_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let file = outcome_file(
        files.path(),
        "o.json",
        &json(&sent(&scenario.failed, "0x9")),
    );
    let d = arg(dir.path());
    let before = snapshot(dir.path());
    let nobody = payonce(&["resolve", &d, "req-3", "--outcome", &file, "--note", "seen"]);
    assert_eq!(nobody.code, 2);
    assert!(
        nobody.stderr.contains("no operator: pass --by NAME"),
        "{}",
        nobody.stderr
    );
    assert_eq!(snapshot(dir.path()), before);
    let run = payonce_as(
        Some("ops-ben"),
        &["resolve", &d, "req-3", "--outcome", &file, "--note", "seen"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    match last_event(dir.path()).kind {
        EventKind::Resolved { by, .. } => assert_eq!(by.as_str(), "ops-ben"),
        other => panic!("the last event is {other:?}"),
    }
}

// Guards against an outcome file that is not a withdrawal being half-read,
// or an outcome for another withdrawal closing the key.
#[test]
fn a_malformed_or_mismatched_outcome_file_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let d = arg(dir.path());
    let before = snapshot(dir.path());
    let mut sent_without_reference: serde_json::Value =
        serde_json::to_value(sent(&scenario.failed, "0x1")).unwrap();
    sent_without_reference["reference"] = serde_json::Value::Null;
    let cases = [
        (
            "not-json.json",
            "{ this is not json".to_owned(),
            "is not a withdrawal as JSON",
        ),
        (
            "no-ref.json",
            sent_without_reference.to_string(),
            "reference is required",
        ),
        (
            "huge.json",
            " ".repeat(70_000),
            "is larger than 65536 bytes",
        ),
    ];
    for (name, content, expected) in cases {
        let file = outcome_file(files.path(), name, &content);
        let run = payonce(&[
            "resolve",
            &d,
            "req-3",
            "--outcome",
            &file,
            "--note",
            "n",
            "--by",
            "ops",
        ]);
        assert_eq!(run.code, 2, "{name}");
        assert!(
            run.stderr.contains("outcome file") && run.stderr.contains(expected),
            "{name}: {}",
            run.stderr
        );
    }
    let missing = payonce(&[
        "resolve",
        &d,
        "req-3",
        "--outcome",
        "/no/such/file.json",
        "--note",
        "n",
        "--by",
        "o",
    ]);
    assert_eq!(missing.code, 2);
    assert!(
        missing.stderr.contains("cannot be read"),
        "{}",
        missing.stderr
    );
    // Another withdrawal's outcome for req-3: the amount differs.
    let other = sent(&scenario.sent, "0x2");
    let file = outcome_file(files.path(), "other.json", &json(&other));
    let run = payonce(&[
        "resolve",
        &d,
        "req-3",
        "--outcome",
        &file,
        "--note",
        "n",
        "--by",
        "ops",
    ]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("the outcome for request key req-3 is another withdrawal")
            && run.stderr.contains("amount"),
        "{}",
        run.stderr
    );
    // A fresh key for a withdrawal another key holds: the webhook case.
    let file = outcome_file(
        files.path(),
        "fresh.json",
        &json(&sent(&scenario.failed, "0x3")),
    );
    let run = payonce(&[
        "resolve",
        &d,
        "webhook-1",
        "--outcome",
        &file,
        "--note",
        "n",
        "--by",
        "ops",
    ]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("is claimed by request key req-3"),
        "{}",
        run.stderr
    );
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a refused resolve wrote to the log"
    );
}

// Guards against an operator exit writing under a running service, which
// holds the writer lock.
#[test]
fn resolve_and_release_are_refused_while_another_process_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let service = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    let before = snapshot(dir.path());
    let file = outcome_file(
        files.path(),
        "o.json",
        &json(&sent(&scenario.failed, "0x9")),
    );
    let d = arg(dir.path());
    let runs = [
        payonce(&[
            "resolve",
            &d,
            "req-3",
            "--outcome",
            &file,
            "--note",
            "n",
            "--by",
            "ops",
        ]),
        payonce(&["release", &d, "req-4", "--note", "n", "--by", "ops"]),
    ];
    for run in runs {
        assert_eq!(run.code, 2);
        assert!(
            run.stderr
                .contains("is open for writing by another process"),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("Nothing was written"), "{}", run.stderr);
    }
    assert_eq!(snapshot(dir.path()), before);
    drop(service);
}

// Guards against a release that leaves the claim or the hold behind, so
// the withdrawal could never be sent.
#[test]
fn release_drops_the_key_its_claim_and_hold_so_a_retry_sends() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let run = payonce(&[
        "release",
        &arg(dir.path()),
        "req-3",
        "--note",
        "nothing on chain",
        "--by",
        "ops-ana",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let view = run.json();
    assert_eq!(view["action"], "released");
    assert_eq!(view["record"], serde_json::Value::Null);
    assert_eq!(view["withdrawal"], scenario.failed.id().as_str());
    assert_eq!(view["claimed_by"], serde_json::Value::Null);
    assert_eq!(view["held"], serde_json::Value::Null);
    match last_event(dir.path()).kind {
        EventKind::Released {
            key,
            withdrawal,
            note,
            by,
        } => {
            assert_eq!(
                (key.as_str(), note.as_str(), by.as_str()),
                ("req-3", "nothing on chain", "ops-ana")
            );
            // The event names the withdrawal the key held (schema 2 on).
            assert_eq!(withdrawal.as_ref(), Some(scenario.failed.id()));
        }
        other => panic!("the last event is {other:?}"),
    }
    let clock = Arc::new(ManualClock::new(START));
    let ledger = Ledger::open_with(dir.path(), config(clock)).unwrap();
    let outcome = ledger
        .submit("req-3b", scenario.failed.clone(), |r| {
            Ok::<_, SendFailure>(sent(r, "0xagain"))
        })
        .unwrap();
    assert_eq!(outcome.reference().unwrap().as_str(), "0xagain");
    let text = payonce(&[
        "release",
        &arg(dir.path()),
        "req-4",
        "--note",
        "refused by the rail",
        "--by",
        "o",
    ]);
    assert_eq!(text.code, 2, "the service is running again");
    drop(ledger);
    let text = payonce(&[
        "release",
        &arg(dir.path()),
        "req-4",
        "--note",
        "refused by the rail",
        "--by",
        "o",
    ]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("released request key req-4 by o"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains("claimed by no key (it may be submitted again)"),
        "{}",
        text.stdout
    );
}

// Guards against releasing a key that has an answer, which would let the
// withdrawal be sent again, and against a typo passing silently.
#[test]
fn release_refuses_a_key_with_an_outcome_and_a_key_without_a_record() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let before = snapshot(dir.path());
    let done = payonce(&[
        "release",
        &arg(dir.path()),
        "req-1",
        "--note",
        "n",
        "--by",
        "ops",
    ]);
    assert_eq!(done.code, 2);
    assert!(
        done.stderr.contains("already produced an outcome (sent)"),
        "{}",
        done.stderr
    );
    let typo = payonce(&[
        "release",
        &arg(dir.path()),
        "req-l",
        "--note",
        "n",
        "--by",
        "ops",
    ]);
    assert_eq!(typo.code, 2);
    assert!(
        typo.stderr.contains("request key req-l has no record"),
        "{}",
        typo.stderr
    );
    let blank = payonce(&[
        "release",
        &arg(dir.path()),
        "req-3",
        "--note",
        "  ",
        "--by",
        "ops",
    ]);
    assert_eq!(blank.code, 2);
    assert!(blank.stderr.contains("--note"), "{}", blank.stderr);
    assert_eq!(snapshot(dir.path()), before);
}

// Guards against an operator exit creating a ledger where there was none.
#[test]
fn operator_exits_on_a_missing_or_foreign_directory_create_nothing() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("typo");
    let run = payonce(&[
        "release",
        &arg(&missing),
        "req-1",
        "--note",
        "n",
        "--by",
        "o",
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
    assert!(!missing.exists());
    let empty = tempfile::tempdir().unwrap();
    let run = payonce(&[
        "release",
        &arg(empty.path()),
        "req-1",
        "--note",
        "n",
        "--by",
        "o",
    ]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("is not a payonce log"),
        "{}",
        run.stderr
    );
    assert!(
        snapshot(empty.path()).is_empty(),
        "the command wrote into an empty directory"
    );
}

// Guards against an operator exit cutting a torn tail without saying so.
#[test]
fn an_operator_exit_says_when_opening_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    crate::fixture::tear_last_record(dir.path(), &[7; 9]);
    let run = payonce(&[
        "release",
        &arg(dir.path()),
        "req-4",
        "--note",
        "refused",
        "--by",
        "ops",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("torn tail: 9 bytes"), "{}", run.stderr);
    assert!(
        run.stderr.contains("saves those bytes aside"),
        "{}",
        run.stderr
    );
    assert_eq!(
        payonce(&["verify", &arg(dir.path())]).code,
        0,
        "the writer cut the tail"
    );
}

// Guards against a write that fails while an operator exit opens the
// ledger (a full disk) being reported as a usage error that changed
// nothing: it exits 5 and says what failed, and the key is left as it was.
#[test]
fn a_write_failure_while_opening_for_writing_is_its_own_failure() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let file = outcome_file(
        files.path(),
        "o.json",
        &json(&sent(&scenario.failed, "0xfound")),
    );
    let d = arg(dir.path());
    let before = snapshot(dir.path());
    let resolve = [
        "resolve",
        &d,
        "req-3",
        "--outcome",
        &file,
        "--note",
        "n",
        "--by",
        "ops",
    ];
    let release = ["release", &d, "req-4", "--note", "n", "--by", "ops"];
    for args in [&resolve[..], &release[..]] {
        let run = crate::fixture::payonce_on_a_full_disk(args);
        assert_eq!(run.code, 5, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("opening the ledger in {d} for writing failed"))
                && run.stderr.contains("00000000000000000001.log")
                && run.stderr.contains("File too large")
                && run.stderr.contains("The key was not changed"),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("Nothing was"), "{}", run.stderr);
    }
    let mut json_args = resolve.to_vec();
    json_args.push("--json");
    let run = crate::fixture::payonce_on_a_full_disk(&json_args);
    let failure = run.json();
    assert_eq!(failure["error"], "write_failed");
    assert_eq!(failure["exit_code"], 5);
    assert_eq!(
        failure["file"],
        arg(&crate::fixture::first_segment(dir.path()))
    );
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a failed open changed the log"
    );
    let fixed = payonce(&resolve);
    assert_eq!(fixed.code, 0, "{}", fixed.stderr);
}

// Guards against the runbook's word on what resolve compares drifting from
// what it does: the fingerprint (id, amount, currency, destination) is
// compared, requested_by is not, and the outcome's requested_by is what
// the record keeps; a key's surrounding whitespace is trimmed.
#[test]
fn resolve_compares_the_fingerprint_not_requested_by_and_trims_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let mut outcome: serde_json::Value =
        serde_json::to_value(sent(&scenario.failed, "0xfound")).unwrap();
    outcome["requested_by"] = "ops-typed-this".into();
    let file = outcome_file(files.path(), "o.json", &outcome.to_string());
    let run = payonce(&[
        "resolve",
        &arg(dir.path()),
        "req-3\n",
        "--outcome",
        &file,
        "--note",
        "found it",
        "--by",
        "ops",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["key"], "req-3");
    let recorded = payonce::verify(dir.path())
        .unwrap()
        .state
        .outcome("req-3")
        .unwrap();
    assert_eq!(recorded.requested_by().as_str(), "ops-typed-this");
    let mut other = outcome.clone();
    other["destination"] = "0xelsewhere".into();
    let file = outcome_file(files.path(), "other.json", &other.to_string());
    let refused = payonce(&[
        "resolve",
        &arg(dir.path()),
        " req-3 ",
        "--outcome",
        &file,
        "--note",
        "n",
        "--by",
        "ops",
    ]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("destination") && !refused.stderr.contains("requested_by"),
        "{}",
        refused.stderr
    );
}
