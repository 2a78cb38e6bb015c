//! A primary and a streaming standby in two slots (a port each, on one
//! socket directory) that one URL names both of, failed over again and
//! again: the primary killed, the standby promoted, and a new standby of
//! it made in the dead primary's slot, so the URL the workers were given
//! names the new pair too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use payonce::Config;
use payonce_postgres::cluster::{self, Cluster, Replication, Settings};

/// The ports of the two slots, on a socket directory of the pair's own.
const PORTS: [u16; 2] = [5433, 5434];

/// The database the ledger is in.
const DATABASE: &str = "custody";

/// The two servers and the URL naming both.
pub struct Pair {
    /// The server that takes writes.
    pub primary: Cluster,
    /// The one that streams from it.
    pub standby: Cluster,
    /// The slot the primary is in.
    primary_slot: usize,
    replication: Replication,
    url: String,
    /// Last, so the servers on it are stopped first.
    sockets: tempfile::TempDir,
}

impl Pair {
    /// A primary and a standby of it, with a ledger migrated and created;
    /// `None` when no cluster can be started outside CI.
    pub fn start(replication: Replication) -> Option<Pair> {
        let sockets = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            sockets.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let slot = |n: usize| Settings {
            port: PORTS[n],
            socket: Some(sockets.path().to_owned()),
            ..Settings::default()
        };
        let primary = match Cluster::start_with(slot(0)) {
            Ok(primary) => primary,
            Err(error) if cluster::required() => panic!("CI=true, and no cluster started: {error}"),
            Err(error) => {
                cluster::shout(&format!("SKIPPING a failover test: {error}"));
                return None;
            }
        };
        primary
            .admin()
            .unwrap()
            .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
            .unwrap();
        let standby = primary.standby(slot(1), replication).unwrap();
        let url = cluster::hosts_url(&[&primary, &standby], DATABASE);
        payonce_postgres::migrate(&url).unwrap();
        drop(payonce_postgres::init(&url, Config::default()).unwrap());
        Some(Pair {
            primary,
            standby,
            primary_slot: 0,
            replication,
            url,
            sockets,
        })
    }

    /// The socket directory and port of slot `n` (0 or 1): where a pooler
    /// in front of that slot reaches its server, whichever it holds.
    pub fn slot(&self, n: usize) -> (&std::path::Path, u16) {
        (self.sockets.path(), PORTS[n])
    }

    /// The URL naming both slots, writers reaching whichever takes writes.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Kills the primary (SIGKILL) and promotes the standby.
    pub fn kill_and_promote(&mut self) {
        self.primary.kill().unwrap();
        self.standby.promote().unwrap();
    }

    /// After [`Pair::kill_and_promote`]: a new standby of the promoted
    /// primary in the dead one's slot, of the pair's replication; once it
    /// streams (and for a synchronous one, counts as synchronous).
    pub fn replace_dead_primary(&mut self) {
        let slot = Settings {
            port: PORTS[self.primary_slot],
            socket: Some(self.sockets.path().to_owned()),
            ..Settings::default()
        };
        let standby = self.standby.standby(slot, self.replication).unwrap();
        let promoted = std::mem::replace(&mut self.standby, standby);
        // The dead primary's directories go.
        drop(std::mem::replace(&mut self.primary, promoted));
        self.primary_slot = 1 - self.primary_slot;
    }
}

impl Pair {
    /// Waits until the standby has replayed everything the primary wrote,
    /// then cuts it off (it streams nothing more, as an asynchronous
    /// standby that lags behind): what the primary commits after this, a
    /// failover loses.
    pub fn cut_standby_off(&self) {
        let mut primary = self.primary.admin().unwrap();
        let lsn: String = primary
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .unwrap()
            .get(0);
        let mut standby = self.standby.admin().unwrap();
        wait_until("the standby replays the primary's WAL", || {
            standby
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&lsn],
                )
                .unwrap()
                .get(0)
        });
        self.standby.disconnect().unwrap();
        wait_until("the standby stops streaming", || {
            let streaming: i64 = primary
                .query_one("SELECT count(*) FROM pg_stat_replication", &[])
                .unwrap()
                .get(0);
            streaming == 0
        });
    }
}

/// Polls `done` until it holds, for at most a minute.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{what}: not after a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
