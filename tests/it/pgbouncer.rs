//! Workers and audits through PgBouncer: in session pooling mode, which
//! payonce needs, the 8x8 race, the audit commands and a failover behind
//! the poolers; in transaction pooling mode, which shares server sessions
//! between clients, every worker and operator refused, naming the mode and
//! what to set, before anything is written.

use payonce::Config;
use payonce_postgres::cluster::{self, Pgbouncer, PoolMode, Replication};
use payonce_tests::rng::{Rng, seed_from_env};
use payonce_tests::standby::Pair;

/// The port every PgBouncer of these tests listens on, each in a socket
/// directory of its own.
const BOUNCER_PORT: u16 = 6432;

/// A new database on the shared test cluster, with the ledger created,
/// and a PgBouncer in `mode` in front of the cluster: the database's
/// direct URL, and its URL through the pooler. `None` when no cluster can
/// be started outside CI.
fn behind_bouncer(mode: PoolMode) -> Option<(String, String, Pgbouncer)> {
    let direct = cluster::test_database()?;
    drop(payonce_postgres::init(&direct, Config::default()).unwrap());
    let server = cluster::for_tests()?;
    let bouncer = bouncer(mode, server.socket(), server.port())?;
    let name = database_name(&direct);
    let through = bouncer.url(&name);
    Some((direct, through, bouncer))
}

/// A PgBouncer in `mode` in front of `server` (a socket directory) and
/// `port`; fails the test under `CI=true` when none starts.
fn bouncer(mode: PoolMode, server: &std::path::Path, port: u16) -> Option<Pgbouncer> {
    match Pgbouncer::start(mode, server, port, BOUNCER_PORT) {
        Ok(bouncer) => Some(bouncer),
        Err(error) if cluster::required() => panic!("CI=true, and no PgBouncer started: {error}"),
        Err(error) => {
            cluster::shout(&format!("SKIPPING a PgBouncer test: {error}"));
            None
        }
    }
}

/// The database a test cluster's URL names (`postgresql:///NAME?...`).
fn database_name(url: &str) -> String {
    let rest = url.strip_prefix("postgresql:///").unwrap();
    rest.split('?').next().unwrap().to_owned()
}

#[test]
fn pgbouncer_in_session_mode_carries_the_8x8_race_and_the_audits() {
    // Guards against a pooler in session mode breaking what payonce relies on (the worker's lock, its settings and prepared statements, the snapshot pins): two workers winning one withdrawal, a loser told the wrong holder, or an audit through it that does not read the log as it is.
    let Some((direct, through, bouncer)) = behind_bouncer(PoolMode::Session) else {
        return;
    };
    crate::postgres::race(&through, 8);
    for args in [
        vec!["verify", through.as_str()],
        vec!["inflight", through.as_str()],
        vec!["export", through.as_str()],
    ] {
        let (code, out) = crate::failover::payonce(&args);
        assert_eq!(code, payonce_cli::EXIT_OK, "payonce {args:?}: {out}");
    }
    let (code, head) = crate::failover::payonce(&["head", &through]);
    assert_eq!(code, payonce_cli::EXIT_OK);
    assert_eq!(
        head.trim_end(),
        payonce_postgres::head(&direct).unwrap().to_string()
    );
    assert!(!bouncer.log().contains("pooler error"), "{}", bouncer.log());
}

#[test]
fn pgbouncer_in_transaction_mode_is_refused_naming_the_mode_before_anything_is_written() {
    // Guards against a worker running behind transaction pooling, where its lock, settings and prepared statements would sit on server sessions other clients are handed, instead of being refused with what to set.
    let Some((direct, through, _bouncer)) = behind_bouncer(PoolMode::Transaction) else {
        return;
    };
    let before = payonce_postgres::head(&direct).unwrap();
    for worker in ["api-0", "api-1"] {
        let error = payonce_postgres::open(&through, worker, Config::default())
            .map(drop)
            .unwrap_err()
            .to_string();
        eprintln!("{worker} through transaction pooling: {error}");
        assert!(error.contains("pool_mode = transaction"), "{error}");
        assert!(
            error.contains("set pool_mode = session for this database in pgbouncer.ini"),
            "{error}"
        );
    }
    let error = payonce_postgres::attach(&through, Config::default())
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(error.contains("pool_mode = transaction"), "{error}");
    assert_eq!(
        payonce_postgres::head(&direct).unwrap(),
        before,
        "nothing written"
    );
    // Directly, the same worker opens.
    drop(payonce_postgres::open(&direct, "api-0", Config::default()).unwrap());
}

#[test]
fn pgbouncer_in_session_mode_in_front_of_each_server_carries_workers_through_a_failover() {
    // Guards against workers behind poolers not following a failover made behind them (the pooler of the dead primary answering for it), or losing an acknowledged claim or sending twice across it.
    let seed = seed_from_env("PAYONCE_FAILOVER_SEED");
    eprintln!("PAYONCE_FAILOVER_SEED={seed}");
    let Some(mut pair) = Pair::start(Replication::Synchronous) else {
        return;
    };
    // One pooler in front of each slot, as one beside each server; the
    // workers' URL names both poolers.
    let mut bouncers = Vec::new();
    for slot in 0..2 {
        let (socket, port) = pair.slot(slot);
        let Some(bouncer) = bouncer(PoolMode::Session, socket, port) else {
            return;
        };
        bouncers.push(bouncer);
    }
    let hosts: Vec<String> = bouncers
        .iter()
        .map(|b| {
            format!(
                "{}:{}",
                b.socket().display().to_string().replace('/', "%2F"),
                b.port()
            )
        })
        .collect();
    let url = format!(
        "postgresql://{}/custody?user=postgres&target_session_attrs=read-write",
        hosts.join(",")
    );
    crate::failover::failovers_under_load(&mut pair, &url, 1, &mut Rng::new(seed));
}
