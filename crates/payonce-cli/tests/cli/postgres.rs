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

    // The incident report names each operator action, on what, by whom
    // and why: the session ended among them.
    let out = tempfile::tempdir().unwrap();
    let page = out.path().join("report.html");
    let report = payonce(&["report", &url, "-o", page.to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let page = std::fs::read_to_string(&page).unwrap();
    let actions = &page[page.find("<table id=\"actions\">").unwrap()..];
    let actions = &actions[..actions.find("</table>").unwrap()];
    for (action, on, note) in [
        ("release", "request key k-stuck", "rail: none"),
        ("end-session", "worker api-1", "host gone"),
        ("release", "request key k-running", "none"),
    ] {
        let row =
            format!("<td>{action}</td><td class=\"mono\">{on}</td><td>ops</td><td>{note}</td>");
        assert!(actions.contains(&row), "{row} not in {actions}");
    }
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
fn head_prints_the_chain_head_and_checks_an_expected_one() {
    // Guards against a head check that passes a log which no longer passes through the expected head.
    let Some(url) = payonce_postgres::cluster::test_database() else {
        return;
    };
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let paid = new_withdrawal(&worker, "25");
    worker.submit("k-1", &paid, |r| Ok(sent(r, "0x1"))).unwrap();
    let head = payonce(&["head", &url]);
    assert_eq!(head.code, 0, "{}", head.stderr);
    let kept = head.stdout.trim().to_owned();
    assert_eq!(kept, payonce_postgres::head(&url).unwrap().to_string());
    let (seq, digest) = kept.split_once(':').unwrap();
    assert_eq!(digest.len(), 64);

    // More events: the log still passes through the expected head.
    let more = new_withdrawal(&worker, "30");
    worker.submit("k-2", &more, |r| Ok(sent(r, "0x2"))).unwrap();
    let later = payonce(&["head", &url, "--expect-head", &kept]);
    assert_eq!(later.code, 0, "{}", later.stdout);
    assert_ne!(later.stdout.lines().next().unwrap(), kept);
    assert!(later.stdout.contains("passes through the expected head"));
    assert!(later.stderr.is_empty(), "{}", later.stderr);
    // The flag's former name still works, and says it is deprecated.
    let former = payonce(&["head", &url, "--pinned", &kept]);
    assert_eq!(former.code, 0, "{}", former.stdout);
    assert!(former.stdout.contains("passes through the expected head"));
    assert!(
        former.stderr.contains("--pinned is deprecated"),
        "{}",
        former.stderr
    );

    // A head whose digest the log does not have, or at no batch's end.
    let flipped = match digest.as_bytes()[0] {
        b'0' => format!("{seq}:1{}", &digest[1..]),
        _ => format!("{seq}:0{}", &digest[1..]),
    };
    let beyond = format!("{}:{digest}", 1_000_000);
    for wrong in [flipped, beyond] {
        let checked = payonce(&["head", &url, "--expect-head", &wrong]);
        assert_eq!(checked.code, 1, "{wrong}: {}", checked.stdout);
        assert!(
            checked.stdout.contains("EXPECTED HEAD NOT FOUND"),
            "{}",
            checked.stdout
        );
    }
    let bad = payonce(&["head", &url, "--expect-head", "12:zz"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let dir = tempfile::tempdir().unwrap();
    let not_url = payonce(&["head", dir.path().to_str().unwrap()]);
    assert_eq!(not_url.code, 2, "{}", not_url.stderr);
}

/// What `history URL --json` lists about `subject` (`--key K` or
/// `--withdrawal W`) from the database's index, and from one scan: each
/// as its exit code, its events, and its text without the footer that says
/// where the answer came from.
fn both_histories(url: &str, subject: &[&str]) -> [(i32, serde_json::Value, String); 2] {
    let run = |more: &[&str]| {
        let args: Vec<&str> = ["history", url]
            .iter()
            .chain(subject)
            .chain(more)
            .copied()
            .collect();
        let json = payonce(&[args.as_slice(), &["--json"]].concat());
        let text = payonce(&args);
        assert_eq!(json.code, text.code, "{args:?}: {}", text.stderr);
        let lines: Vec<&str> = text.stdout.lines().collect();
        let body = lines[..lines.len().saturating_sub(1)].join("\n");
        let events = match json.code {
            0 => json.json()["events"].clone(),
            _ => serde_json::Value::String(json.stderr.clone()),
        };
        (json.code, events, body)
    };
    let indexed = run(&[]);
    let scanned = run(&["--no-index"]);
    [indexed, scanned]
}

/// Checks `history` answers every key and withdrawal of `keys` and
/// `withdrawals` from the index exactly as one scan of the log does.
fn index_answers_as_the_scan(url: &str, keys: &[String], withdrawals: &[String]) {
    let subjects = keys
        .iter()
        .map(|key| ["--key", key.as_str()])
        .chain(withdrawals.iter().map(|id| ["--withdrawal", id.as_str()]))
        .chain([["--key", "never-used"], ["--withdrawal", "w-never"]]);
    for subject in subjects {
        let [indexed, scanned] = both_histories(url, &subject);
        assert_eq!(indexed, scanned, "{subject:?}");
        if indexed.0 == 0 {
            let json = payonce(&["history", url, subject[0], subject[1], "--json"]).json();
            assert_eq!(json["source"], "index", "{subject:?}");
        }
    }
}

#[test]
fn history_answers_from_the_database_index_exactly_as_a_scan_of_the_log() {
    // Guards against an index that misses, adds or misattributes an event that a scan of the log shows.
    let Some(url) = payonce_postgres::cluster::test_database() else {
        return;
    };
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    // The seed's scenarios: sent, a second key refused naming the holder,
    // a send failed and retried, a clean rejection, then an operator's
    // resolution, release and correction.
    let paid = new_withdrawal(&worker, "25");
    worker
        .submit("req-1", &paid, |r| Ok(sent(r, "0xfeed")))
        .unwrap();
    assert!(
        worker
            .submit("req-2", &paid, |_| Err(SendFailure::failed("no")))
            .is_err()
    );
    let failed = new_withdrawal(&worker, "10");
    assert!(
        worker
            .submit("req-3", &failed, |_| Err(SendFailure::failed("timeout")))
            .is_err()
    );
    assert!(
        worker
            .submit("req-3", &failed, |_| Err(SendFailure::failed("no")))
            .is_err()
    );
    let rejected = new_withdrawal(&worker, "7.50");
    let refused = worker.submit("req-4", &rejected, |_| {
        Err(SendFailure::rejected("hot wallet"))
    });
    assert!(refused.is_err());
    let resolved = new_withdrawal(&worker, "5");
    assert!(
        worker
            .submit("req-5", &resolved, |_| Err(SendFailure::failed("timeout")))
            .is_err()
    );
    let attached = payonce_postgres::attach(&url, config()).unwrap();
    attached
        .resolve(
            "req-5",
            sent(&resolved, "0xres"),
            "found it on the rail",
            "ops",
        )
        .unwrap();
    attached
        .release("req-3", "nothing on the rail", "ops")
        .unwrap();
    worker
        .submit("req-6", &failed, |r| Ok(sent(r, "0x6")))
        .unwrap();
    let keys: Vec<String> = (1..=6).map(|i| format!("req-{i}")).collect();
    let withdrawals: Vec<String> = [&paid, &failed, &rejected, &resolved]
        .iter()
        .map(|w| w.id().to_string())
        .collect();
    index_answers_as_the_scan(&url, &keys, &withdrawals);

    // A random workload: keys reused across withdrawals, sends that fail,
    // are rejected or go out, and releases, from a seed printed on failure.
    let seed = 0x5eed_u64;
    let mut state = seed;
    let mut next = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let pool: Vec<_> = (0..8).map(|_| new_withdrawal(&worker, "1")).collect();
    let mut keys = Vec::new();
    for _ in 0..80 {
        let key = format!("r-{}", next(12));
        let w = &pool[usize::try_from(next(8)).unwrap()];
        let _ = match next(4) {
            0 => worker.submit(&key, w, |_| Err(SendFailure::failed("timeout"))),
            1 => worker.submit(&key, w, |_| Err(SendFailure::rejected("no funds"))),
            2 => attached
                .release(&key, "nothing sent", "ops")
                .map(|()| sent(w, "0x0"))
                .map_err(Into::into),
            _ => worker.submit(&key, w, |r| Ok(sent(r, "0xok"))),
        };
        keys.push(key);
    }
    keys.sort();
    keys.dedup();
    let withdrawals: Vec<String> = pool.iter().map(|w| w.id().to_string()).collect();
    index_answers_as_the_scan(&url, &keys, &withdrawals);
}

#[test]
fn history_from_the_database_index_refuses_an_event_the_chain_or_the_log_does_not_vouch_for() {
    // Guards against an index row, or an event rewritten with its index, believed without the chain.
    let Some(url) = payonce_postgres::cluster::test_database() else {
        return;
    };
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let paid = new_withdrawal(&worker, "25");
    worker.submit("k-1", &paid, |r| Ok(sent(r, "0x1"))).unwrap();
    let other = new_withdrawal(&worker, "30");
    worker
        .submit("k-2", &other, |r| Ok(sent(r, "0x2")))
        .unwrap();
    let claimed: i64 = worker
        .state()
        .unwrap()
        .record("k-1")
        .unwrap()
        .claimed_seq()
        .try_into()
        .unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "ALTER TABLE payonce.events DISABLE TRIGGER append_only; \
             INSERT INTO payonce.key_events VALUES ('k-2', {claimed}); \
             UPDATE payonce.events SET payload = payload || '\\x00' WHERE seq = {claimed} + 1;"
        ))
        .unwrap();
    // An event listed under a key it is not about.
    let listed = payonce(&["history", &url, "--key", "k-2"]);
    assert_eq!(
        listed.code,
        payonce_cli::EXIT_DAMAGED,
        "{}{}",
        listed.stdout,
        listed.stderr
    );
    assert!(listed.stderr.contains("not about"), "{}", listed.stderr);
    // k-1's outcome, rewritten: its batch does not chain.
    let rewritten = payonce(&["history", &url, "--key", "k-1"]);
    assert_eq!(
        rewritten.code,
        payonce_cli::EXIT_DAMAGED,
        "{}{}",
        rewritten.stdout,
        rewritten.stderr
    );
    assert!(
        rewritten.stderr.contains("does not chain"),
        "{}",
        rewritten.stderr
    );
}
