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
    race(&url, WITHDRAWALS);
}

/// Runs `WORKERS` worker processes of `THREADS` threads each on the ledger
/// at `url` (created, without withdrawals), racing on `withdrawals` new
/// withdrawals, and checks each was sent once, by its winner, and every
/// loser was told the real holder.
pub(crate) fn race(url: &str, withdrawals: usize) {
    let ids = tempfile::NamedTempFile::new().unwrap();
    write_withdrawals(url, ids.path(), withdrawals);
    let lines = run_workers(url, ids.path());
    check_race(url, &lines, withdrawals);
}

/// Creates `count` withdrawals in the ledger at `url`, one JSON line each
/// in `ids`.
fn write_withdrawals(url: &str, ids: &std::path::Path, count: usize) {
    let setup = payonce_postgres::open(url, "setup", Config::default()).unwrap();
    let mut file = std::fs::File::create(ids).unwrap();
    for n in 0..count {
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
}

/// The lines every worker wrote, once every one has ended.
fn run_workers(url: &str, ids: &std::path::Path) -> Vec<String> {
    let mut children: Vec<_> = (0..WORKERS)
        .map(|n| {
            Command::new(env!("CARGO_BIN_EXE_pg_worker"))
                .args([url, &format!("api-{n}"), &THREADS.to_string()])
                .arg(ids)
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
    lines
}

/// Checks what the workers said and the ledger the race left.
fn check_race(url: &str, lines: &[String], withdrawals: usize) {
    let (mut sends, mut winners) = (HashMap::new(), HashMap::new());
    let mut losers = Vec::new();
    for line in lines {
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
    assert_eq!(sends.len(), withdrawals, "every withdrawal sent");
    assert_eq!(sends, winners, "each sent once, by its winner");
    assert_eq!(losers.len(), withdrawals * (WORKERS * THREADS - 1));
    for (id, key, holder) in &losers {
        assert_eq!(
            &winners[id], holder,
            "{key} lost {id} and was told the wrong holder"
        );
    }
    let (report, head) = payonce_postgres::verify(url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(report.state.claims().count(), withdrawals);
    assert_eq!(head.seq, report.events);
}
