//! Outcomes after the first: a later report moving one on (`advanced`), an
//! operator's correction (`corrected`), and a send that answered with a
//! withdrawal that says nothing of the rail (`send_failed`, unsettled).

use std::path::Path;

use payonce::{EventKind, EventLog, Ledger, SendFailure};
use payonce_model::{Reason, WithdrawalRequest};

use crate::fixture::{
    arg, config, new_withdrawal, outcome_file, payonce, scenario, sent, snapshot,
};

fn to_json(request: &WithdrawalRequest) -> String {
    serde_json::to_string(request).unwrap()
}

fn last_event(dir: &Path) -> payonce::Event {
    let log = EventLog::open(dir).unwrap();
    let mut events = log.events_from(1).unwrap();
    let mut last = None;
    while let Some((event, _)) = events.next_event().unwrap() {
        last = Some(event);
    }
    last.unwrap()
}

/// The explanation of every event in `key`'s history, by event name.
fn explanations(dir: &Path, key: &str) -> Vec<(String, String)> {
    let run = payonce(&["history", &arg(dir), "--key", key, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| {
            (
                event["event"].as_str().unwrap().to_owned(),
                event["explanation"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn explained<'a>(events: &'a [(String, String)], name: &str) -> &'a str {
    events
        .iter()
        .find(|(event, _)| event == name)
        .map(|(_, explanation)| explanation.as_str())
        .unwrap_or_else(|| panic!("no {name} event in {events:?}"))
}

// Guards against history showing an advanced or corrected event as a bare
// name, or a correction without the outcome it replaced.
#[test]
fn history_explains_advanced_and_corrected_outcomes_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let ledger = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    let sent = ledger.outcome("req-1").unwrap().unwrap();
    let confirmed = sent.confirm().unwrap();
    ledger.advance("req-1", &confirmed).unwrap();
    let failed = sent.fail(Reason::lossy("reorged out")).unwrap();
    ledger
        .correct("req-1", &failed, "the block was orphaned", "ops-ana")
        .unwrap();
    drop(ledger);
    let id = scenario.sent.id().as_str();
    let events = explanations(dir.path(), "req-1");
    let advanced = explained(&events, "advanced");
    assert!(
        advanced.contains(&format!(
            "moved the outcome of request key req-1 on: withdrawal {id} is confirmed, reference \
             0xfeed"
        )) && advanced.contains("the 25 USDC stays captured"),
        "{advanced}"
    );
    let corrected = explained(&events, "corrected");
    assert!(
        corrected.contains("operator ops-ana corrected the outcome of request key req-1")
            && corrected.contains("noting \"the block was orphaned\"")
            && corrected.contains(&format!(
                "withdrawal {id} was recorded as confirmed, reference 0xfeed and is now failed, \
                 reference 0xfeed (reorged out)"
            ))
            && corrected.contains("the 25 USDC captured for it is given back"),
        "{corrected}"
    );
    let text = payonce(&["history", &arg(dir.path()), "--key", "req-1"]);
    assert!(
        text.stdout.contains("corrected") && !text.stdout.contains("corrected event"),
        "{}",
        text.stdout
    );
}

// Guards against a send that answered with a withdrawal still in approved
// state being explained as a plain failure, hiding why its outcome is
// unknown.
#[test]
fn history_explains_a_send_that_answered_with_an_unsettled_withdrawal() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let ledger = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    let request = new_withdrawal(&ledger, "3");
    let answered = ledger.submit("req-approved", &request, |r: &WithdrawalRequest| {
        Ok::<_, SendFailure>(r.approve()?)
    });
    assert!(answered.is_err());
    drop(ledger);
    let events = explanations(dir.path(), "req-approved");
    let failed = explained(&events, "send_failed");
    assert!(
        failed.contains(
            "returned the withdrawal still approved, which does not say what the rail did"
        ) && failed.contains("the funds stay held"),
        "{failed}"
    );
}

fn correct(dir: &Path, key: &str, file: &str, extra: &[&str]) -> crate::fixture::Run {
    let d = arg(dir);
    let mut args = vec![
        "correct",
        &d,
        key,
        "--outcome",
        file,
        "--note",
        "the explorer shows it never left",
        "--by",
        "ops-ana",
    ];
    args.extend_from_slice(extra);
    payonce(&args)
}

// Guards against a correction that loses the outcome it replaced, leaves
// the funds where the wrong outcome put them, or does not show in history.
#[test]
fn correct_replaces_an_outcome_records_both_and_moves_the_funds() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let recorded = sent(&scenario.sent, "0xfeed");
    let failed = recorded.fail(Reason::lossy("never broadcast")).unwrap();
    let file = outcome_file(files.path(), "failed.json", &to_json(&failed));
    let run = correct(dir.path(), "req-1", &file, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "corrected request key req-1 by ops-ana: withdrawal {} was sent, reference 0xfeed and \
             is now failed, reference 0xfeed (never broadcast)",
            scenario.sent.id()
        )),
        "{}",
        run.stdout
    );
    match last_event(dir.path()).kind {
        EventKind::Corrected {
            key,
            old,
            new,
            note,
            by,
        } => {
            assert_eq!(key.as_str(), "req-1");
            assert_eq!((old, new), (recorded, failed.clone()));
            assert_eq!(note.as_str(), "the explorer shows it never left");
            assert_eq!(by.as_str(), "ops-ana");
        }
        other => panic!("the last event is {other:?}"),
    }
    let report = payonce::verify(dir.path()).unwrap();
    assert!(report.is_clean());
    assert_eq!(report.state.outcome("req-1"), Some(failed));
    assert!(report.state.captured(scenario.sent.id()).is_none());
    let events = explanations(dir.path(), "req-1");
    assert!(
        explained(&events, "corrected").contains("was recorded as sent, reference 0xfeed"),
        "{events:?}"
    );
    let again = correct(dir.path(), "req-1", &file, &["--json"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let view = again.json();
    assert_eq!(view["action"], "unchanged");
    assert_eq!(view["record"]["outcome"], "failed");
    assert_eq!(view["captured"], serde_json::Value::Null);
}

// Guards against a correction that bypasses resolve's guards: a key with no
// outcome, an outcome of another withdrawal or one that says nothing of the
// rail is refused before the writer lock is taken, and nothing is written.
#[test]
fn correct_refuses_what_resolve_refuses_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let before = snapshot(dir.path());
    let in_flight = sent(&scenario.failed, "0x1");
    let other = sent(&scenario.failed, "0x2");
    let approved = scenario.sent.approve().unwrap();
    let cases = [
        ("req-3", &in_flight, "has no outcome to move on or correct"),
        (
            "req-1",
            &other,
            "the outcome for request key req-1 is another withdrawal",
        ),
        (
            "req-1",
            &approved,
            "a withdrawal in state approved is not an outcome",
        ),
    ];
    for (key, outcome, expected) in cases {
        let file = outcome_file(files.path(), "o.json", &to_json(outcome));
        let run = correct(dir.path(), key, &file, &[]);
        assert_eq!(run.code, 2, "{key}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{key}: {}", run.stderr);
    }
    let file = outcome_file(files.path(), "approved.json", &to_json(&approved));
    let d = arg(dir.path());
    let resolve = payonce(&[
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
    assert_eq!(resolve.code, 2, "{}", resolve.stderr);
    assert!(
        resolve.stderr.contains("is not an outcome"),
        "{}",
        resolve.stderr
    );
    assert_eq!(snapshot(dir.path()), before, "a refused command wrote");
    let service = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    let locked_before = snapshot(dir.path());
    let failed = sent(&scenario.sent, "0xfeed")
        .fail(Reason::lossy("x"))
        .unwrap();
    let file = outcome_file(files.path(), "f.json", &to_json(&failed));
    let locked = correct(dir.path(), "req-1", &file, &[]);
    assert_eq!(locked.code, 2);
    assert!(
        locked
            .stderr
            .contains("is open for writing by another process"),
        "{}",
        locked.stderr
    );
    assert_eq!(snapshot(dir.path()), locked_before);
    drop(service);
}
