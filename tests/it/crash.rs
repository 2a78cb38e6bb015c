//! A child process submitting continuously is killed with SIGKILL at random
//! moments; after every kill the ledger is reopened and checked against the
//! rail's own durable record of what it sent.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use payonce::Ledger;
use payonce_tests::rng::{Rng, seed_from_env};

/// Kills in the normal run; `PAYONCE_CRASH_KILLS` asks for more.
const KILLS: u64 = 200;

fn lines(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // A line without its newline was being written when the child died.
    let complete = text.rsplit_once('\n').map_or("", |(complete, _)| complete);
    complete
        .lines()
        .map(|line| line.split(' ').map(str::to_owned).collect())
        .collect()
}

fn check_after_kill(dir: &Path, round: u64) {
    let sends = lines(&dir.join("rail.log"));
    let mut per_withdrawal: HashMap<&str, usize> = HashMap::new();
    for send in &sends {
        *per_withdrawal.entry(&send[1]).or_default() += 1;
    }
    for (withdrawal, count) in &per_withdrawal {
        assert_eq!(
            *count, 1,
            "round {round}: withdrawal {withdrawal} was sent {count} times"
        );
    }

    let ledger = match Ledger::open(dir.join("ledger")) {
        // Killed before its first creation of the ledger was durable:
        // nothing can have been sent.
        Err(payonce::LedgerError::NoLog { .. }) => {
            assert!(sends.is_empty(), "round {round}: sends without a ledger");
            return;
        }
        opened => opened.unwrap(),
    };
    let in_flight: Vec<String> = ledger
        .in_flight()
        .into_iter()
        .map(|entry| entry.key.to_string())
        .collect();
    for send in &sends {
        let (key, reference) = (&send[2], &send[3]);
        match ledger.outcome(key) {
            Some(outcome) => assert_eq!(
                outcome.reference().map(|r| r.as_str()),
                Some(reference.as_str()),
                "round {round}: key {key} has another outcome than the rail's"
            ),
            None => assert!(
                in_flight.contains(key),
                "round {round}: the rail saw key {key}; the ledger lost it"
            ),
        }
    }
    for ack in lines(&dir.join("acks.log")) {
        let (key, reference) = (&ack[1], &ack[2]);
        let outcome = ledger.outcome(key);
        assert_eq!(
            outcome
                .as_ref()
                .and_then(|o| o.reference())
                .map(|r| r.as_str()),
            Some(reference.as_str()),
            "round {round}: the outcome acknowledged for {key} is gone"
        );
    }
    let live = ledger.state();
    drop(ledger);

    let first = Ledger::verify(dir.join("ledger")).unwrap();
    let second = Ledger::verify(dir.join("ledger")).unwrap();
    assert!(
        first.divergences.is_empty(),
        "round {round}: {:?}",
        first.divergences
    );
    assert_eq!(
        first.state, second.state,
        "round {round}: two replays differ"
    );
    assert_eq!(
        first.state, live,
        "round {round}: the replay differs from the opened ledger"
    );
}

#[test]
fn a_killed_process_never_sends_twice_and_keeps_every_acknowledged_outcome() {
    let seed = seed_from_env("PAYONCE_CRASH_SEED");
    let kills = std::env::var("PAYONCE_CRASH_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(KILLS);
    eprintln!("crash test: seed {seed}, {kills} kills; replay with PAYONCE_CRASH_SEED={seed}");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();

    for round in 0..kills {
        let stderr = std::fs::File::create(dir.path().join("child.stderr")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash_child"))
            .arg(dir.path())
            .arg(rng.next_u64().to_string())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        // When to pull the plug: somewhere in opening, replaying or submitting.
        std::thread::sleep(Duration::from_micros(rng.below(30_000)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let child_error =
            std::fs::read_to_string(dir.path().join("child.stderr")).unwrap_or_default();
        assert!(
            status.code().is_none(),
            "round {round}: the child exited on its own ({status}): {child_error}"
        );
        check_after_kill(dir.path(), round);
    }
    let sends = lines(&dir.path().join("rail.log")).len();
    assert!(
        sends > kills as usize,
        "only {sends} sends in {kills} rounds: the child barely ran"
    );
}
