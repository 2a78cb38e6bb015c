//! Many workers on one PostgreSQL ledger, each a process of its own.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use payonce::{Config, NewWithdrawal};

/// Worker processes, and submitting threads in each.
const WORKERS: usize = 8;
const THREADS: usize = 8;
/// Withdrawals every thread of every worker submits, each under its own key.
const WITHDRAWALS: usize = 200;

#[test]
fn workers_racing_on_the_same_withdrawals_send_each_once_and_tell_losers_the_holder() {
    // Guards against two workers, each with threads batching claims, both winning one withdrawal, or a loser told a key that does not hold it.
    let Some(url) = payonce_postgres::cluster::test_database() else {
        return;
    };
    drop(payonce_postgres::init(&url, Config::default()).unwrap());
    let setup = payonce_postgres::open(&url, "setup", Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("withdrawals.jsonl");
    let mut file = std::fs::File::create(&ids).unwrap();
    for n in 0..WITHDRAWALS {
        let request = setup
            .create(NewWithdrawal {
                amount: format!("{}", n + 1).parse().unwrap(),
                currency: "USDC".parse().unwrap(),
                destination: format!("0xdest{n}").parse().unwrap(),
                requested_by: "alice".parse().unwrap(),
            })
            .unwrap();
        writeln!(file, "{}", serde_json::to_string(&request).unwrap()).unwrap();
    }
    drop(setup);

    let mut children: Vec<_> = (0..WORKERS)
        .map(|n| {
            Command::new(env!("CARGO_BIN_EXE_pg_worker"))
                .args([&url, &format!("api-{n}"), &THREADS.to_string()])
                .arg(&ids)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|child| BufReader::new(child.stdout.take().unwrap()))
        .collect();
    // Every worker open and replayed before any submits.
    for output in &mut outputs {
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
    }
    for child in &mut children {
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    }
    let lines: Vec<String> = outputs
        .into_iter()
        .flat_map(|output| output.lines().map(Result::unwrap).collect::<Vec<_>>())
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }

    let (mut sends, mut winners) = (HashMap::new(), HashMap::new());
    let mut losers = Vec::new();
    for line in &lines {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["send", id, key] => {
                let before = sends.insert(id.to_string(), key.to_string());
                assert!(
                    before.is_none(),
                    "{id} sent twice: for {before:?} and {key}"
                );
            }
            ["won", id, key] => {
                let before = winners.insert(id.to_string(), key.to_string());
                assert!(before.is_none(), "{id} won twice: by {before:?} and {key}");
            }
            ["lost", id, key, holder] => {
                losers.push((id.to_string(), key.to_string(), holder.to_string()))
            }
            _ => panic!("a worker answered {line}"),
        }
    }
    assert_eq!(sends.len(), WITHDRAWALS, "every withdrawal sent");
    assert_eq!(sends, winners, "each sent once, by its winner");
    assert_eq!(losers.len(), WITHDRAWALS * (WORKERS * THREADS - 1));
    for (id, key, holder) in &losers {
        assert_eq!(
            &winners[id], holder,
            "{key} lost {id} and was told the wrong holder"
        );
    }
    let (report, head) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(report.state.claims().count(), WITHDRAWALS);
    assert_eq!(head.seq, report.events);
}
