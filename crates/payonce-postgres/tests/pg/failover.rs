//! A primary lost and its standby promoted, one worker in this process:
//! the worker follows the failover through a URL naming both hosts, fails
//! fast while no host takes writes, and refuses a log an asynchronous
//! failover rewound under it, saying how far.

use std::time::{Duration, Instant};

use payonce::{Config, LedgerError};
use payonce_postgres::cluster::{self, Cluster, Replication, Settings};

use crate::{config, new_withdrawal, sent};

/// A primary on a socket directory both share, and a standby of it; `None`
/// when no cluster can be started outside CI.
fn pair(replication: Replication) -> Option<(tempfile::TempDir, Cluster, Cluster)> {
    let sockets = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        sockets.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let on = |port| Settings {
        port,
        socket: Some(sockets.path().to_owned()),
        ..Settings::default()
    };
    let primary = match Cluster::start_with(on(5433)) {
        Ok(primary) => primary,
        Err(error) if cluster::required() => panic!("CI=true, and no cluster started: {error}"),
        Err(error) => {
            cluster::shout(&format!("SKIPPING a failover test: {error}"));
            return None;
        }
    };
    let standby = primary.standby(on(5434), replication).unwrap();
    Some((sockets, primary, standby))
}

/// A migrated database on `primary`, created before the standby copies
/// anything after it; the URL names both.
fn ledger_url(primary: &Cluster, standby: &Cluster) -> String {
    primary
        .admin()
        .unwrap()
        .batch_execute("CREATE DATABASE custody")
        .unwrap();
    let url = cluster::hosts_url(&[primary, standby], "custody");
    payonce_postgres::migrate(&url).unwrap();
    drop(payonce_postgres::init(&url, config()).unwrap());
    url
}

#[test]
fn a_worker_follows_a_failover_to_its_synchronous_standby_and_fails_fast_meanwhile() {
    // Guards against a worker stuck on a dead primary, one that waits on it while no host takes writes, and an acknowledged claim lost in a synchronous failover.
    let Some((_sockets, primary, standby)) = pair(Replication::Synchronous) else {
        return;
    };
    let url = ledger_url(&primary, &standby);
    let ledger = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let before = ledger.create(new_withdrawal("10")).unwrap();
    let told = ledger
        .submit("k-1", &before, |request| Ok(sent(request, "0x1")))
        .unwrap();
    assert!(ledger.reachable().is_ok());

    primary.kill().unwrap();
    // Nothing takes writes: every call fails, each at once (a socket that
    // is gone refuses at once, and between attempts the backoff answers),
    // and no send runs.
    let w = ledger.create(new_withdrawal("20")).unwrap_err();
    assert!(matches!(w, LedgerError::Store(_)), "{w}");
    for _ in 0..20 {
        let started = Instant::now();
        let error = ledger
            .submit("k-1", &before, |_| panic!("no send while no primary"))
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "waited {:?} for {error}",
            started.elapsed()
        );
        assert!(error.to_string().contains("shared log"), "{error}");
    }
    assert!(ledger.reachable().is_err(), "no host takes writes");

    standby.promote().unwrap();
    // The next attempt is due within the longest backoff.
    let started = Instant::now();
    let replayed = loop {
        match ledger.submit("k-1", &before, |_| panic!("a replay sends nothing")) {
            Ok(outcome) => break outcome,
            Err(error) => {
                assert!(
                    started.elapsed() < payonce_postgres::RECONNECT_DELAY_MAX * 3,
                    "still refused: {error}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert_eq!(
        replayed, told,
        "the acknowledged outcome is on the promoted standby"
    );
    assert!(ledger.reachable().is_ok());
    let after = ledger.create(new_withdrawal("30")).unwrap();
    ledger
        .submit("k-2", &after, |request| Ok(sent(request, "0x2")))
        .unwrap();
    let refused = ledger.claim("k-3", &before).unwrap_err();
    assert_eq!(
        refused
            .refusal()
            .and_then(|refusal| refusal.holder())
            .map(ToString::to_string),
        Some("k-1".to_owned())
    );
    // Its snapshots' connection follows too: the first write may find it
    // lost, the next is made on the promoted standby.
    let taken = ledger.snapshot().or_else(|_| ledger.snapshot()).unwrap();
    assert!(taken.is_some());
    drop(ledger);
    let (report, head) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(report.state.claims().count(), 2);
    assert_eq!(head.seq, report.events);
}

#[test]
fn a_worker_refuses_a_log_an_asynchronous_failover_rewound_and_says_how_far() {
    // Guards against a worker appending to a promoted standby that lacks commits it saw, which would grant a withdrawal already sent.
    let Some((_sockets, primary, standby)) = pair(Replication::Asynchronous) else {
        return;
    };
    let url = ledger_url(&primary, &standby);
    let ledger = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let kept = ledger.create(new_withdrawal("10")).unwrap();
    ledger
        .submit("k-1", &kept, |request| Ok(sent(request, "0x1")))
        .unwrap();
    // The standby streamed all of that; what follows it never receives.
    let shipped = wait_until_replayed(&primary, &standby);
    standby.disconnect().unwrap();
    let lost = ledger.create(new_withdrawal("20")).unwrap();
    ledger
        .submit("k-2", &lost, |request| Ok(sent(request, "0x2")))
        .unwrap();
    let seen = ledger.head().unwrap();
    assert!(seen.seq > shipped);

    primary.kill().unwrap();
    standby.promote().unwrap();
    let started = Instant::now();
    let error = loop {
        match ledger.submit("k-3", &lost, |_| panic!("no send on a rewound log")) {
            Err(error) if error.to_string().contains("rewound") => break error,
            Err(error) => {
                assert!(started.elapsed() < Duration::from_secs(10), "{error}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(outcome) => panic!("appended to a rewound log: {outcome:?}"),
        }
    };
    let said = error.to_string();
    assert!(
        said.contains(&format!("read the log to event {}", seen.seq))
            && said.contains(&format!("now ends at event {shipped}"))
            && said.contains(&format!("{} events short", seen.seq - shipped)),
        "{said}"
    );
    // It keeps refusing, a new withdrawal too: it appends nothing more.
    let again = ledger.create(new_withdrawal("30")).unwrap_err();
    assert!(again.to_string().contains("rewound"), "{again}");
    let (report, head) = payonce_postgres::verify(&url).unwrap();
    assert_eq!(head.seq, shipped);
    assert_eq!(report.state.claimed_by(lost.id()), None, "the lost claim");
    let (_, kept) = payonce_postgres::head_through(&url, seen.seq).unwrap();
    assert_eq!(kept, None, "a head kept before the failover is gone");
    // A process started afresh reads the promoted log as it is.
    drop(ledger);
    let fresh = payonce_postgres::open(&url, "api-1", Config::default()).unwrap();
    assert!(fresh.outcome("k-1").unwrap().is_some());
}

/// The last event of the ledger `primary` holds, once `standby` has
/// replayed everything `primary` wrote.
fn wait_until_replayed(primary: &Cluster, standby: &Cluster) -> u64 {
    let mut admin = primary.admin().unwrap();
    let lsn: String = admin
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    let mut replica = standby.admin().unwrap();
    let started = Instant::now();
    while !replica
        .query_one(
            "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
            &[&lsn],
        )
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(started.elapsed() < Duration::from_secs(30), "no replay");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut ledger = postgres::Client::connect(&standby.url("custody"), postgres::NoTls).unwrap();
    let end: i64 = ledger
        .query_one(
            "SELECT coalesce(max(last_seq), 0) FROM payonce.batches",
            &[],
        )
        .unwrap()
        .get(0);
    u64::try_from(end).unwrap()
}
