//! The audit and operator commands on a PostgreSQL ledger, given its URL
//! where they take a directory; `migrate` and `end-session`.

use payonce::{Claim, SendFailure};

use crate::fixture::{START, payonce, payonce_as, sent};

fn config() -> payonce::Config {
    crate::fixture::config(std::sync::Arc::new(payonce::ManualClock::new(START)))
}

fn new_withdrawal(ledger: &payonce::Ledger, amount: &str) -> payonce_model::WithdrawalRequest {
    crate::fixture::new_withdrawal(ledger, amount)
}

#[test]
fn every_audit_and_operator_command_takes_a_postgres_url() {
    // Guards against a command that reads only directories, or writes beside a live worker's send.
    let Some(cluster) = payonce_postgres::cluster::for_tests() else {
        return;
    };
    let url = cluster.database().unwrap();
    let migrated = payonce(&["migrate", &url]);
    assert_eq!(migrated.code, 0, "{}", migrated.stderr);
    assert!(
        migrated.stdout.contains("created the payonce schema"),
        "{}",
        migrated.stdout
    );
    assert!(payonce(&["migrate", &url]).stdout.contains("nothing to do"));

    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let paid = new_withdrawal(&worker, "25");
    worker
        .submit("k-paid", &paid, |r| Ok(sent(r, "0xpaid")))
        .unwrap();
    let stuck = new_withdrawal(&worker, "30");
    let failed = worker.submit("k-stuck", &stuck, |_| Err(SendFailure::failed("timeout")));
    assert!(failed.is_err());
    let running = new_withdrawal(&worker, "40");
    let Claim::Granted(ticket) = worker.claim("k-running", &running).unwrap() else {
        panic!()
    };

    let verify = payonce(&["verify", &url, "--json"]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
    assert_eq!(verify.json()["clean"], true);
    let history = payonce(&["history", &url, "--key", "k-paid", "--json"]);
    assert_eq!(history.code, 0, "{}", history.stderr);
    let events: Vec<_> = history.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(events, ["claimed", "completed"]);
    let state = payonce(&["state", &url, "--at", "4", "--json"]);
    assert_eq!(state.json()["seq"], 4);
    let inflight = payonce(&["inflight", &url, "--json"]);
    let keys = inflight.json()["keys"].as_array().unwrap().clone();
    assert_eq!(keys.len(), 2, "{}", inflight.stdout);
    let export = payonce(&["export", &url]);
    assert_eq!(export.code, 0, "{}", export.stderr);
    assert_eq!(export.stdout.lines().count() as u64, worker.last_seq());

    // An operator beside the running worker: a key whose send runs is
    // refused, a stuck one released.
    let refused = payonce_as(
        Some("ops"),
        &["release", &url, "k-running", "--note", "stuck?"],
    );
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("send in progress"),
        "{}",
        refused.stderr
    );
    let released = payonce_as(
        Some("ops"),
        &["release", &url, "k-stuck", "--note", "rail: none"],
    );
    assert_eq!(released.code, 0, "{}", released.stderr);

    // The worker dies; once its lock is free its session can be ended.
    let alive = payonce_as(
        Some("ops"),
        &["end-session", &url, "api-1", "--note", "gone?"],
    );
    assert_ne!(alive.code, 0, "refused while api-1 runs");
    std::mem::forget((ticket, worker));
    postgres::Client::connect(&url, postgres::NoTls)
        .unwrap()
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND backend_type = 'client backend'",
        )
        .unwrap();
    let ended = payonce_as(
        Some("ops"),
        &["end-session", &url, "api-1", "--note", "host gone"],
    );
    assert_eq!(ended.code, 0, "{}", ended.stderr);
    let released = payonce_as(
        Some("ops"),
        &["release", &url, "k-running", "--note", "none"],
    );
    assert_eq!(released.code, 0, "{}", released.stderr);
    let verify = payonce(&["verify", &url]);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
}

#[test]
fn the_demo_on_postgres_races_worker_processes_and_leaves_a_clean_ledger() {
    // Guards against a demo whose workers send a withdrawal twice, or leave a log verify rejects.
    let Some(cluster) = payonce_postgres::cluster::for_tests() else {
        return;
    };
    let url = cluster.database().unwrap();
    let demo = payonce(&["demo", "--postgres", &url]);
    assert_eq!(demo.code, 0, "{}\n{}", demo.stdout, demo.stderr);
    for expected in [
        "Each withdrawal left custody exactly once.",
        "every decision re-derived; every answer is the same.",
        "0 in flight, held: none",
    ] {
        assert!(
            demo.stdout.contains(expected),
            "{expected:?} in\n{}",
            demo.stdout
        );
    }
    let raced: Vec<&str> = demo
        .stdout
        .lines()
        .filter(|line| line.contains("1 transfer, by api-"))
        .collect();
    assert_eq!(raced.len(), 3, "{}", demo.stdout);
    assert!(
        raced
            .iter()
            .all(|line| line.contains("the 3 other workers were refused"))
    );
    let verify = payonce(&["verify", &url, "--json"]);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
    assert_eq!(verify.json()["clean"], true);
    let again = payonce(&["demo", "--postgres", &url]);
    assert_ne!(again.code, 0, "a database holding a ledger is refused");
}

#[test]
fn head_prints_the_chain_head_and_checks_a_pinned_one() {
    // Guards against a head that does not pin the log: a pin the log no longer passes through must fail.
    let Some(url) = payonce_postgres::cluster::test_database() else {
        return;
    };
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let paid = new_withdrawal(&worker, "25");
    worker.submit("k-1", &paid, |r| Ok(sent(r, "0x1"))).unwrap();
    let head = payonce(&["head", &url]);
    assert_eq!(head.code, 0, "{}", head.stderr);
    let pinned = head.stdout.trim().to_owned();
    assert_eq!(pinned, payonce_postgres::head(&url).unwrap().to_string());
    let (seq, digest) = pinned.split_once(':').unwrap();
    assert_eq!(digest.len(), 64);

    // More events: the log still passes through the pin.
    let more = new_withdrawal(&worker, "30");
    worker.submit("k-2", &more, |r| Ok(sent(r, "0x2"))).unwrap();
    let later = payonce(&["head", &url, "--pinned", &pinned]);
    assert_eq!(later.code, 0, "{}", later.stdout);
    assert_ne!(later.stdout.lines().next().unwrap(), pinned);
    assert!(later.stdout.contains("passes through the pinned head"));

    // A pin whose digest the log does not have, or at no batch's end.
    let flipped = match digest.as_bytes()[0] {
        b'0' => format!("{seq}:1{}", &digest[1..]),
        _ => format!("{seq}:0{}", &digest[1..]),
    };
    let beyond = format!("{}:{digest}", 1_000_000);
    for pin in [flipped, beyond] {
        let checked = payonce(&["head", &url, "--pinned", &pin]);
        assert_eq!(checked.code, 1, "{pin}: {}", checked.stdout);
        assert!(
            checked.stdout.contains("PINNED HEAD NOT FOUND"),
            "{}",
            checked.stdout
        );
    }
    let bad = payonce(&["head", &url, "--pinned", "12:zz"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let dir = tempfile::tempdir().unwrap();
    let not_url = payonce(&["head", dir.path().to_str().unwrap()]);
    assert_eq!(not_url.code, 2, "{}", not_url.stderr);
}
