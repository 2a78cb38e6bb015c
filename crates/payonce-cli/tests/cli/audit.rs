//! The read-only audit commands on good logs.

use payonce::{Ledger, Timestamp};

use crate::fixture::{START, arg, config, minted, payonce, scenario, snapshot};

// Guards against a summary that disagrees with the ledger's own verify.
#[test]
fn verify_summarises_a_clean_log_as_the_ledger_does() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let before = snapshot(dir.path());
    let text = payonce(&["verify", &arg(dir.path())]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("events     12"), "{}", text.stdout);
    assert!(text.stdout.contains("clean:"), "{}", text.stdout);
    assert_eq!(text.stderr, "", "no warning and no progress bar when piped");
    let json = payonce(&["verify", &arg(dir.path()), "--json"]);
    assert_eq!(json.code, 0);
    let report = json.json();
    let expected = payonce::verify(dir.path()).unwrap();
    assert_eq!(report["clean"], true);
    assert_eq!(report["events"], expected.events);
    assert_eq!(report["segments"], expected.segments);
    assert_eq!(report["keys"], expected.keys);
    assert_eq!(report["in_flight"], expected.in_flight);
    assert_eq!(report["refusals"], expected.refusals);
    assert_eq!(report["held"]["USDC"], "10");
    assert_eq!(snapshot(dir.path()), before, "verify changed the log");
}

// Guards against a history that misses an event about the key, or leaves a
// decision unexplained.
#[test]
fn history_of_a_key_lists_every_event_that_touched_it_explained() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let run = payonce(&["history", &arg(dir.path()), "--key", "req-1", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let history = run.json();
    let events = history["events"].as_array().unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    // Its claim, the refusal that named it as the holder, its outcome.
    assert_eq!(seqs, [3, 4, 5]);
    assert_eq!(history["source"], "scan");
    assert_eq!(events[1]["event"], "completed");
    assert_eq!(events[0]["at"], "2025-01-01T00:02:00Z");
    let refusal = events[2]["explanation"].as_str().unwrap();
    assert!(
        refusal.contains("request key req-2 asked to send withdrawal w-1-2")
            && refusal.contains("claimed by request key req-1"),
        "{refusal}"
    );
    let text = payonce(&["history", &arg(dir.path()), "--key", "req-1"]);
    assert_eq!(text.code, 0);
    assert!(
        text.stdout.contains("history of request key req-1"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("the held 25 USDC is captured"),
        "{}",
        text.stdout
    );
}

// Guards against losing the events about a key's claim (a rail's refusal)
// when following the withdrawal the key held.
#[test]
fn history_of_a_withdrawal_lists_the_events_about_its_keys_claim() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let id = scenario.rejected.id().to_string();
    let run = payonce(&["history", &arg(dir.path()), "--withdrawal", &id, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let history = run.json();
    let events = history["events"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["created", "claimed", "send_rejected"]);
    assert!(events.iter().all(|e| e["withdrawal"] == id.as_str()));
    let explanation = events[2]["explanation"].as_str().unwrap();
    assert!(
        explanation.contains("the rail refused the send for request key req-4 (withdrawal w-1-9)")
            && explanation.contains("the hold is released"),
        "{explanation}"
    );
}

// Guards against `state --at` showing the end of the log instead of the
// point asked for.
#[test]
fn state_at_a_sequence_number_shows_what_the_ledger_believed_then() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let at = scenario.failed_claim_seq.to_string();
    let run = payonce(&["state", &arg(dir.path()), "--at", &at, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let state = run.json();
    assert_eq!(state["seq"], scenario.failed_claim_seq);
    assert_eq!(state["event"], "claimed");
    let in_flight = state["in_flight"].as_array().unwrap();
    assert_eq!(in_flight.len(), 1);
    assert_eq!(in_flight[0]["key"], "req-3");
    assert_eq!(in_flight[0]["last_error"], serde_json::Value::Null);
    assert_eq!(in_flight[0]["send_may_be_running"], true);
    assert_eq!(state["held_totals"]["USDC"], "10");
    let claims = state["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 2);
    assert_eq!(claims[0]["key"], "req-1");
    let records = state["records"].as_array().unwrap();
    assert_eq!(records[0]["outcome"], "sent");
    assert_eq!(records[0]["reference"], "0xfeed");

    let end = payonce(&["state", &arg(dir.path()), "--json"]).json();
    assert_eq!(end["seq"], scenario.last_seq);
    assert_eq!(end["in_flight"].as_array().unwrap().len(), 2);
    assert_eq!(end["refusals"], 2);

    let text = payonce(&["state", &arg(dir.path()), "--at", &at]);
    assert!(text.stdout.contains("after seq 7"), "{}", text.stdout);
    assert!(text.stdout.contains("in flight: 1 key"), "{}", text.stdout);
}

// Guards against a time that includes an event stamped after it, or that
// reads offsets wrongly.
#[test]
fn state_at_a_time_includes_every_event_up_to_the_first_stamped_later() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    // Event 7 is stamped at the claim; event 9 a minute later.
    let utc = scenario.failed_claim_at.to_string();
    let run = payonce(&["state", &arg(dir.path()), "--at", &utc, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let state = run.json();
    assert_eq!(state["seq"], 8, "the claim and its failure share a time");
    assert_eq!(state["asked_time"], utc);
    let offset: Timestamp = "2025-01-01T01:05:30+01:00".parse().unwrap();
    let same = payonce(&[
        "state",
        &arg(dir.path()),
        "--at",
        "2025-01-01T01:05:30+01:00",
        "--json",
    ]);
    assert_eq!(same.json()["seq"], 8);
    assert_eq!(
        offset,
        START.plus(std::time::Duration::from_secs(5 * 60 + 30))
    );
    let before = payonce(&[
        "state",
        &arg(dir.path()),
        "--at",
        "2024-12-31T23:00:00Z",
        "--json",
    ]);
    assert_eq!(before.json()["seq"], 0);
    assert!(
        payonce(&["state", &arg(dir.path()), "--at", "2024-12-31T23:00:00Z"])
            .stdout
            .contains("before any event")
    );
}

// Guards against an operator's queue that misses a key or misstates it.
#[test]
fn inflight_lists_keys_whose_outcome_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let run = payonce(&["inflight", &arg(dir.path()), "--json"]);
    assert_eq!(run.code, 0, "without a threshold, a queue is not a problem");
    let queue = run.json();
    let keys = queue["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0]["key"], "req-3");
    assert_eq!(keys[0]["withdrawal"], minted(6));
    assert_eq!(keys[0]["amount"], "10");
    assert_eq!(keys[0]["held"], true);
    assert_eq!(keys[1]["key"], "req-4");
    assert_eq!(
        keys[1]["held"], false,
        "the rail's refusal released the hold"
    );
    assert!(
        keys[1]["last_error"]
            .as_str()
            .unwrap()
            .contains("insufficient hot wallet")
    );
    assert!(keys[0]["age_seconds"].as_u64().unwrap() > 86_400);
    let text = payonce(&["inflight", &arg(dir.path())]);
    assert!(text.stdout.contains("2 keys in flight"), "{}", text.stdout);
    assert!(text.stdout.contains("req-4"), "{}", text.stdout);
}

// Guards against an alert that does not fire, or fires for nothing.
#[test]
fn inflight_exits_3_only_when_a_key_is_older_than_the_threshold() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let old = payonce(&[
        "inflight",
        &arg(dir.path()),
        "--older-than",
        "30m",
        "--json",
    ]);
    assert_eq!(old.code, 3);
    assert_eq!(old.json()["keys"].as_array().unwrap().len(), 2);
    assert_eq!(old.json()["older_than_seconds"], 1800);
    let none = payonce(&["inflight", &arg(dir.path()), "--older-than", "100000d"]);
    assert_eq!(none.code, 0, "{}", none.stdout);
    assert!(
        none.stdout
            .contains("0 keys in flight claimed more than 100000d ago")
    );
}

// Guards against an export that drops, reorders or misdates events.
#[test]
fn export_writes_every_event_as_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let before = snapshot(dir.path());
    let run = payonce(&["export", &arg(dir.path())]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len() as u64, scenario.last_seq);
    for (index, line) in lines.iter().enumerate() {
        assert_eq!(line["seq"], index as u64 + 1);
        let at: Timestamp = line["at"].as_str().unwrap().parse().unwrap();
        assert_eq!(at.unix_nanos(), line["at_unix_nanos"].as_u64().unwrap());
        assert_eq!(line["schema"], payonce::SCHEMA_VERSION);
    }
    assert_eq!(lines[2]["event"], "claimed");
    assert_eq!(lines[2]["key"], "req-1");
    assert_eq!(lines[2]["withdrawal"], minted(2));
    assert_eq!(lines[2]["kind"]["Claimed"]["request"]["id"], minted(2));
    let part = payonce(&["export", &arg(dir.path()), "--from", "3", "--to", "5"]);
    let seqs: Vec<u64> = part
        .stdout
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [3, 4, 5]);
    assert_eq!(snapshot(dir.path()), before, "export changed the log");
}

// Guards against a stored control sequence reaching the terminal.
#[test]
fn text_from_the_log_is_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let outputs = [
        payonce(&["history", &arg(dir.path()), "--key", "req-3"]),
        payonce(&["history", &arg(dir.path()), "--key", "req-3", "--json"]),
        payonce(&["state", &arg(dir.path())]),
        payonce(&["inflight", &arg(dir.path())]),
        payonce(&["export", &arg(dir.path())]),
    ];
    for run in &outputs {
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            !run.stdout.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reached the output: {:?}",
            run.stdout
        );
    }
    // The ledger stored the rail's text with its control characters
    // written out; that is what the auditor reads.
    assert!(
        outputs[0]
            .stdout
            .contains(r"node said \u{1b}[2J\u{7} goodbye"),
        "{}",
        outputs[0].stdout
    );
    let history = outputs[1].json();
    let failure = &history["events"][1];
    assert_eq!(failure["event"], "send_failed");
    assert!(
        failure["explanation"]
            .as_str()
            .unwrap()
            .contains(r"\u{1b}[2J")
    );
}

// Guards against audit commands that take the writer lock or write: they
// must work beside a running service and change nothing.
#[test]
fn audit_commands_work_beside_a_running_service_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let service = Ledger::open_with(dir.path(), config(scenario.clock.clone())).unwrap();
    let before = snapshot(dir.path());
    let (d, w6) = (arg(dir.path()), minted(6));
    for args in [
        vec!["verify", &d],
        vec!["history", &d, "--key", "req-1"],
        vec!["history", &d, "--withdrawal", &w6],
        vec!["state", &d, "--at", "5"],
        vec!["inflight", &d],
        vec!["export", &d],
    ] {
        let run = payonce(&args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    }
    assert_eq!(
        snapshot(dir.path()),
        before,
        "an audit command changed the log"
    );
    drop(service);
}
