//! A PostgreSQL cluster as production runs it, for the failover tests: a
//! three-member etcd and three PostgreSQL members under Patroni
//! (`synchronous_mode` and `synchronous_mode_strict`), each in a network
//! namespace of its own on one bridge ([`Net`]), TLS on every member. The
//! workers' URL names every member, with `sslmode=verify-full` and the
//! password in a password file; the test's own look-ups go over each
//! member's Unix socket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use payonce::Config;
use payonce_postgres::cluster::patroni::{Etcd, Member, POSTGRES_PORT, Scope, Timings};
use payonce_postgres::cluster::{self};
use payonce_tls::testing::TestCa;

use crate::netns::Net;

/// Patroni's timings in these tests: a leader key lives 10 s unrenewed,
/// Patroni cycles every second, and gives etcd and PostgreSQL 4 s before
/// it gives up on them (a leader that cannot renew its key then demotes
/// itself, before the key expires: `loop_wait + 2 * retry_timeout <=
/// ttl`, as Patroni requires).
pub const TIMINGS: Timings = Timings {
    ttl: 10,
    loop_wait: 1,
    retry_timeout: 4,
};

/// etcd's members, then PostgreSQL's, in the network.
const ETCD_MEMBERS: usize = 3;
const POSTGRES_MEMBERS: usize = 3;

/// The database the ledger is in.
pub const DATABASE: &str = "custody";

/// How long a cluster has to elect a leader and stream to its standbys.
const READY_WAIT_MAX: Duration = Duration::from_secs(120);

/// What etcd holds of a Patroni cluster.
#[derive(Debug, Default)]
pub struct Dcs {
    /// The standby the `sync` key names: the only one Patroni may promote.
    pub sync_standby: Option<String>,
    /// Each member's name and the state its Patroni last wrote.
    pub members: Vec<(String, String)>,
}

impl Drop for Patroni {
    /// Says what the cluster looked like when a test failed with it up.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "the Patroni cluster when the test failed:\n{}",
                self.diagnose()
            );
        }
    }
}

/// The cluster. Fields drop in order: the members, etcd, then the network.
pub struct Patroni {
    /// The PostgreSQL members; `None` while one is killed.
    pub members: Vec<Member>,
    /// The etcd.
    pub etcd: Etcd,
    /// The network; member `n`'s namespace is `net.members[ETCD_MEMBERS + n]`.
    pub net: Net,
    url: String,
    /// Patroni's `scope`: the cluster's keys in etcd are under
    /// `/service/SCOPE/`.
    scope: String,
    /// The CA, the certificates and the password file.
    files: tempfile::TempDir,
}

impl Patroni {
    /// A cluster with a leader, a synchronous standby and a third member
    /// streaming, and the ledger migrated and created; `None` when none
    /// can be started outside CI.
    pub fn start() -> Option<Patroni> {
        let net = Net::make_or_skip(ETCD_MEMBERS + POSTGRES_MEMBERS)?;
        match Patroni::start_in(net) {
            Ok(patroni) => Some(patroni),
            Err(error) if cluster::required() => {
                panic!("CI=true, and no Patroni cluster started: {error}")
            }
            Err(error) => {
                cluster::shout(&format!("SKIPPING a Patroni test: {error}"));
                None
            }
        }
    }

    fn start_in(net: Net) -> Result<Patroni, String> {
        let said = |error: &dyn std::fmt::Display| error.to_string();
        let files = tempfile::tempdir().map_err(|e| said(&e))?;
        let ca = TestCa::new("payonce Patroni test CA").map_err(|e| said(&e))?;
        let ca_file = ca.write(files.path(), "ca").map_err(|e| said(&e))?;
        let etcd = Etcd::start(&net.members[..ETCD_MEMBERS]).map_err(|e| said(&e))?;
        static SCOPES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SCOPES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let password = format!("pw{:x}{n}", std::process::id() ^ 0x5eed);
        let scope = Scope {
            name: format!("payonce{}s{n}", std::process::id()),
            etcd: etcd.endpoints(),
            timings: TIMINGS,
            ca: ca_file.clone(),
            password: password.clone(),
        };
        let mut members = Vec::new();
        let mut hosts = Vec::new();
        for (n, place) in net.members[ETCD_MEMBERS..].iter().enumerate() {
            let name = format!("pg{n}");
            let issued = ca.server(&[&name, &place.addr]).map_err(|e| said(&e))?;
            let (certificate, key) = issued.write(files.path(), &name).map_err(|e| said(&e))?;
            members.push(
                Member::start(&scope, &name, place, &certificate, &key).map_err(|e| said(&e))?,
            );
            hosts.push(format!("{}:{POSTGRES_PORT}", place.addr));
        }
        let passfile = files.path().join("pgpass");
        std::fs::write(&passfile, format!("*:*:*:postgres:{password}\n")).map_err(|e| said(&e))?;
        std::fs::set_permissions(
            &passfile,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .map_err(|e| said(&e))?;
        let url = format!(
            "postgresql://postgres@{}/{DATABASE}?sslmode=verify-full&sslrootcert={}&passfile={}\
             &target_session_attrs=read-write",
            hosts.join(","),
            ca_file.display(),
            passfile.display()
        );
        let patroni = Patroni {
            members,
            etcd,
            net,
            url,
            scope: scope.name.clone(),
            files,
        };
        patroni.wait_ready()?;
        patroni.create_ledger()?;
        Ok(patroni)
    }

    fn create_ledger(&self) -> Result<(), String> {
        let leader = self.leader().ok_or("no leader")?;
        let mut admin = payonce_postgres::client(&self.members[leader].socket_url("postgres"))
            .map_err(|error| error.to_string())?;
        admin
            .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
            .map_err(|error| error.to_string())?;
        payonce_postgres::migrate(&self.url).map_err(|error| error.to_string())?;
        drop(payonce_postgres::init(&self.url, Config::default()).map_err(|e| e.to_string())?);
        Ok(())
    }

    /// The workers' URL: every member, `sslmode=verify-full`, writers
    /// reaching whichever is the leader.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether member `n`'s server answers over its socket, and whether it
    /// takes writes (`pg_is_in_recovery()` false).
    pub fn takes_writes(&self, n: usize) -> Option<bool> {
        let url = self.members[n].socket_url("postgres");
        let mut client = payonce_postgres::client(&url).ok()?;
        let row = client.query_one("SELECT pg_is_in_recovery()", &[]).ok()?;
        Some(!row.get::<_, bool>(0))
    }

    /// The member whose server takes writes, if one does (the first, if a
    /// cut-off leader not yet demoted does too).
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&n| self.takes_writes(n) == Some(true))
    }

    /// The member other than `but` whose server takes writes.
    pub fn leader_but(&self, but: usize) -> Option<usize> {
        (0..self.members.len()).find(|&n| n != but && self.takes_writes(n) == Some(true))
    }

    /// Polls until `done` holds, for at most `wait`; the error names `what`.
    pub fn wait_until(
        &self,
        what: &str,
        wait: Duration,
        mut done: impl FnMut(&Patroni) -> bool,
    ) -> Result<(), String> {
        let started = Instant::now();
        while !done(self) {
            if started.elapsed() > wait {
                return Err(format!("{what}: not after {wait:?}; {}", self.state()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Polls until the cluster is settled: one member leads, the two others
    /// stream from it, the synchronous one is the one etcd names (so
    /// Patroni may promote it), and every member's Patroni says its server
    /// runs (none is still being rewound or restarted).
    pub fn wait_ready(&self) -> Result<(), String> {
        self.wait_until(
            "a settled leader streaming to two standbys",
            READY_WAIT_MAX,
            |patroni| {
                patroni
                    .leader()
                    .is_some_and(|leader| patroni.settled(leader))
            },
        )
    }

    fn settled(&self, leader: usize) -> bool {
        if self.streams(leader) != Some((2, 1)) {
            return false;
        }
        let url = self.members[leader].socket_url("postgres");
        let Some(sync) = payonce_postgres::client(&url).ok().and_then(|mut client| {
            let row = client
                .query_opt(
                    "SELECT application_name FROM pg_stat_replication WHERE sync_state = 'sync'",
                    &[],
                )
                .ok()??;
            Some(row.get::<_, String>(0))
        }) else {
            return false;
        };
        let dcs = self.dcs();
        let running = dcs
            .members
            .iter()
            .filter(|(_, state)| state == "running")
            .count();
        dcs.sync_standby.as_deref() == Some(sync.as_str()) && running == POSTGRES_MEMBERS
    }

    /// What etcd holds of the cluster now (empty if it cannot be read).
    pub fn dcs(&self) -> Dcs {
        let output = std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.etcd.endpoints().join(",")))
            .arg("--command-timeout=2s")
            .args(["get", "--prefix", &format!("/service/{}/", self.scope)])
            .output();
        let text = output
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let mut dcs = Dcs::default();
        for pair in lines.chunks(2) {
            let [key, value] = pair else { continue };
            let Ok(value) = serde_json::from_str::<serde_json::Value>(value) else {
                continue;
            };
            if key.ends_with("/sync") {
                dcs.sync_standby = value["sync_standby"].as_str().map(str::to_owned);
            } else if let Some((_, name)) = key.split_once("/members/") {
                let state = value["state"].as_str().unwrap_or("").to_owned();
                dcs.members.push((name.to_owned(), state));
            }
        }
        dcs
    }

    /// How many standbys member `n` streams to, and how many of them are
    /// synchronous.
    fn streams(&self, n: usize) -> Option<(i64, i64)> {
        let mut client = payonce_postgres::client(&self.members[n].socket_url("postgres")).ok()?;
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE state = 'streaming'), \
                 count(*) FILTER (WHERE sync_state = 'sync') FROM pg_stat_replication",
                &[],
            )
            .ok()?;
        Some((row.get(0), row.get(1)))
    }

    /// What each member's server says, for messages.
    fn state(&self) -> String {
        (0..self.members.len())
            .map(|n| {
                format!(
                    "{}: {:?} {:?}",
                    self.members[n].name(),
                    self.takes_writes(n),
                    self.streams(n)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Kills the leader (SIGKILL of its Patroni and of its server) and
    /// returns which member it was.
    pub fn kill_leader(&mut self) -> usize {
        let leader = self.leader().expect("a leader to kill");
        self.members[leader].kill().unwrap();
        leader
    }

    /// Starts member `n`'s Patroni again: it rejoins as a standby of the
    /// leader (rewound if it had WAL the leader has not).
    pub fn restart(&mut self, n: usize) {
        self.members[n].start_patroni().unwrap();
    }

    /// Member `n`'s place in [`Patroni::net`].
    pub fn net_member(n: usize) -> usize {
        ETCD_MEMBERS + n
    }

    /// What each member's Patroni and server said last, and what etcd
    /// holds: printed when a test fails with the cluster up.
    pub fn diagnose(&self) -> String {
        let mut said = format!("{}\n{:?}\n", self.state(), self.dcs());
        for member in &self.members {
            let tail = |log: String, lines: usize| {
                let all: Vec<&str> = log.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            };
            said.push_str(&format!(
                "--- {} patroni:\n{}\n--- {} server:\n{}\n",
                member.name(),
                tail(member.patroni_log(), 25),
                member.name(),
                tail(member.server_log(), 15)
            ));
        }
        said
    }

    /// The files' directory (the CA as `ca.crt`).
    pub fn files(&self) -> &std::path::Path {
        self.files.path()
    }
}
