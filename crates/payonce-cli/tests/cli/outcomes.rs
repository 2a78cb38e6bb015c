//! Outcomes after the first: a later report moving one on (`advanced`), an
//! operator's correction (`corrected`), and a send that answered with a
//! withdrawal that says nothing of the rail (`send_failed`, unsettled).

use payonce::{Ledger, SendFailure};
use payonce_model::{Reason, WithdrawalRequest};

use crate::fixture::{arg, config, new_withdrawal, payonce, scenario};

/// The explanation of every event in `key`'s history, by event name.
fn explanations(dir: &std::path::Path, key: &str) -> Vec<(String, String)> {
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
    let sent = ledger.outcome("req-1").unwrap();
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
