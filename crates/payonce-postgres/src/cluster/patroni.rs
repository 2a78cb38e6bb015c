//! Throwaway PostgreSQL clusters managed as production runs them: members
//! under Patroni, which elects a leader through etcd, fences it and
//! promotes a synchronous standby on its own, for tests of failovers whose
//! timing payonce does not choose.
//!
//! [`Etcd`] is a three-member etcd; [`Member`] one PostgreSQL server under
//! its Patroni, with TLS on TCP (`hostssl` lines only, scram-sha-256) and
//! Patroni's own replication and rewind connections made with
//! `sslmode=verify-full`. Each process runs in the network namespace its
//! caller names (`ip netns exec`), so a test can cut one off; the test's
//! own look-ups go over each server's Unix socket, which no network fault
//! reaches. [`Timings`] are Patroni's `ttl`, `loop_wait` and
//! `retry_timeout`, set for tests. `wal_sender_timeout` is 5 s: a leader
//! Patroni demotes stops only once its WAL senders have sent the shutdown
//! checkpoint, and a sender to a standby cut off waits that long.
//!
//! Processes stop on every exit: the drops kill them, and a watchdog per
//! process does the same when this process ends any other way.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::{
    ClusterError, children_of, cluster_error, find_bin, is_alive, mktemp_dir, quoted, run, watchdog,
};

/// etcd's client port.
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// etcd's peer port.
const ETCD_PEER_PORT: u16 = 2380;
/// Every member's PostgreSQL port.
pub const POSTGRES_PORT: u16 = 5432;
/// Every member's Patroni REST API port.
const REST_PORT: u16 = 8008;

/// How long a process has to come up.
const START_WAIT_MAX: Duration = Duration::from_secs(90);

/// Where a process runs: a network namespace and its address there.
#[derive(Debug, Clone)]
pub struct Place {
    /// The namespace (`ip netns`).
    pub netns: String,
    /// Its address, which the process listens on.
    pub addr: String,
}

/// A process of a test's, run in a namespace, with its watchdog.
struct Process {
    child: Child,
    watchdog: Option<(Child, ChildStdin)>,
}

impl Process {
    /// Runs `words` in `place`'s namespace, its output appended to `log`;
    /// `also_kill` names what the watchdog kills besides (a shell word).
    fn spawn(
        place: &Place,
        words: &[String],
        log: &Path,
        also_kill: &str,
    ) -> Result<Process, ClusterError> {
        let output = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|error| cluster_error(&format!("opening {}", log.display()), error))?;
        let errors = output
            .try_clone()
            .map_err(|error| cluster_error("cloning a log file", error))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &place.netns])
            .args(words)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            .spawn()
            .map_err(|error| cluster_error(&format!("starting {}", words[0]), error))?;
        let watchdog = watchdog(&format!(
            "kill -KILL {} {also_kill} 2>/dev/null",
            child.id()
        ))?;
        Ok(Process {
            child,
            watchdog: Some(watchdog),
        })
    }

    /// SIGKILL to it and every process under it, and to `others`.
    fn kill(&mut self, others: &[String]) {
        let mut pids = descendants(&self.child.id().to_string());
        pids.push(self.child.id().to_string());
        pids.extend(others.iter().cloned());
        let _ = Command::new("kill").arg("-KILL").args(&pids).output();
        let _ = self.child.wait();
    }

    /// Sends `signal` (`STOP`, `CONT`) to it.
    fn signal(&self, signal: &str) -> Result<(), ClusterError> {
        let mut kill = Command::new("kill");
        kill.arg(format!("-{signal}"))
            .arg(self.child.id().to_string());
        run(&format!("kill -{signal}"), kill)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill(&[]);
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// `pid`'s children, theirs, and so on.
fn descendants(pid: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut next = vec![pid.to_owned()];
    while let Some(pid) = next.pop() {
        for child in children_of(&pid) {
            next.push(child.clone());
            found.push(child);
        }
    }
    found
}

/// A three-member etcd, each member in a namespace of its own.
pub struct Etcd {
    places: Vec<Place>,
    members: Vec<Process>,
    dir: PathBuf,
}

impl Etcd {
    /// Starts one member in each of `places` as one cluster; returns once
    /// it answers with a leader.
    pub fn start(places: &[Place]) -> Result<Etcd, ClusterError> {
        let dir = mktemp_dir()?;
        let token = dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cluster: Vec<String> = places
            .iter()
            .enumerate()
            .map(|(n, place)| format!("e{n}=http://{}:{ETCD_PEER_PORT}", place.addr))
            .collect();
        let mut members = Vec::new();
        for (n, place) in places.iter().enumerate() {
            let peer = format!("http://{}:{ETCD_PEER_PORT}", place.addr);
            let client = format!("http://{}:{ETCD_CLIENT_PORT}", place.addr);
            let words: Vec<String> = [
                "etcd",
                "--name",
                &format!("e{n}"),
                "--data-dir",
                &dir.join(format!("e{n}")).display().to_string(),
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
                "--initial-cluster",
                &cluster.join(","),
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &token,
            ]
            .map(str::to_owned)
            .to_vec();
            let log = dir.join(format!("e{n}.log"));
            members.push(Process::spawn(place, &words, &log, "")?);
        }
        let etcd = Etcd {
            places: places.to_vec(),
            members,
            dir,
        };
        etcd.wait_healthy(START_WAIT_MAX)?;
        Ok(etcd)
    }

    /// The client endpoints, `ADDR:PORT` each.
    pub fn endpoints(&self) -> Vec<String> {
        self.places
            .iter()
            .map(|place| format!("{}:{ETCD_CLIENT_PORT}", place.addr))
            .collect()
    }

    /// Whether the cluster answers a linearizable read (it has a quorum),
    /// asked of every member, within `timeout`.
    pub fn has_quorum(&self, timeout: Duration) -> bool {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints().join(",")))
            .arg(format!("--command-timeout={}ms", timeout.as_millis()))
            .args(["get", "--prefix", "/nothing"])
            .output()
            .is_ok_and(|output| output.status.success())
    }

    /// Polls until the cluster has a quorum, for at most `wait`.
    pub fn wait_healthy(&self, wait: Duration) -> Result<(), ClusterError> {
        let started = Instant::now();
        while !self.has_quorum(Duration::from_secs(1)) {
            if started.elapsed() > wait {
                return Err(cluster_error("waiting for etcd", self.logs()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Freezes member `n` (SIGSTOP): it answers nothing, as a member whose
    /// host hangs.
    pub fn freeze(&self, n: usize) -> Result<(), ClusterError> {
        self.members[n].signal("STOP")
    }

    /// Thaws member `n` (SIGCONT).
    pub fn thaw(&self, n: usize) -> Result<(), ClusterError> {
        self.members[n].signal("CONT")
    }

    fn logs(&self) -> String {
        (0..self.members.len())
            .map(|n| {
                std::fs::read_to_string(self.dir.join(format!("e{n}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for n in 0..self.members.len() {
            let _ = self.thaw(n);
        }
        self.members.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Patroni's timings, set for tests.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// `ttl`: how long the leader key lives without being renewed, s.
    pub ttl: u32,
    /// `loop_wait`: the pause between two of Patroni's cycles, s.
    pub loop_wait: u32,
    /// `retry_timeout`: how long Patroni retries etcd and PostgreSQL
    /// before it gives up on them (a leader then demotes itself), s.
    pub retry_timeout: u32,
}

/// What every member of a Patroni cluster shares.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Patroni's `scope`: the cluster's name in etcd.
    pub name: String,
    /// The etcd endpoints (`ADDR:PORT`).
    pub etcd: Vec<String>,
    /// Its timings.
    pub timings: Timings,
    /// The CA that signed every member's certificate (PEM).
    pub ca: PathBuf,
    /// The password of `postgres` and of `replicator`.
    pub password: String,
}

/// One PostgreSQL server under its Patroni.
pub struct Member {
    name: String,
    place: Place,
    dir: PathBuf,
    config: PathBuf,
    patroni: Option<Process>,
}

impl Member {
    /// Writes member `name`'s configuration in `scope` (its certificate
    /// and key, `certificate` and `key`, for its address in `place`) and
    /// starts its Patroni, which bootstraps the cluster if no member has,
    /// and otherwise makes it a standby of the leader.
    pub fn start(
        scope: &Scope,
        name: &str,
        place: &Place,
        certificate: &Path,
        key: &Path,
    ) -> Result<Member, ClusterError> {
        let dir = mktemp_dir()?;
        for sub in ["sock", "pglog", "log"] {
            std::fs::create_dir(dir.join(sub))
                .map_err(|error| cluster_error("making a member's directories", error))?;
        }
        let files = [
            (certificate, "server.crt"),
            (key, "server.key"),
            (&scope.ca, "ca.crt"),
        ];
        for (source, target) in files {
            std::fs::copy(source, dir.join(target))
                .map_err(|error| cluster_error(&format!("copying {}", source.display()), error))?;
        }
        let config = dir.join("patroni.yml");
        std::fs::write(&config, member_yaml(scope, name, place, &dir))
            .map_err(|error| cluster_error("writing patroni.yml", error))?;
        let mut chown = Command::new("chown");
        chown.args(["-R", "postgres"]).arg(&dir);
        run("chown postgres", chown)?;
        let mut chmod = Command::new("chmod");
        chmod.arg("600").arg(dir.join("server.key"));
        run("chmod 600", chmod)?;
        let mut member = Member {
            name: name.to_owned(),
            place: place.clone(),
            dir,
            config,
            patroni: None,
        };
        member.start_patroni()?;
        Ok(member)
    }

    /// Starts its Patroni (again), which starts its server.
    pub fn start_patroni(&mut self) -> Result<(), ClusterError> {
        let words: Vec<String> = ["runuser", "-u", "postgres", "--", "patroni"]
            .map(str::to_owned)
            .into_iter()
            .chain([self.config.display().to_string()])
            .collect();
        let also = format!(
            "$(head -1 {} 2>/dev/null)",
            quoted(&self.data().join("postmaster.pid"))
        );
        self.patroni = Some(Process::spawn(
            &self.place,
            &words,
            &self.dir.join("log/patroni.out"),
            &also,
        )?);
        Ok(())
    }

    /// Kills it as a crash would: SIGKILL to its Patroni and to every
    /// process of its server, at once. Neither is started again.
    pub fn kill(&mut self) -> Result<(), ClusterError> {
        let postmaster = self.postmaster();
        let mut server: Vec<String> = postmaster.iter().flat_map(|pid| descendants(pid)).collect();
        server.extend(postmaster.clone());
        if let Some(mut patroni) = self.patroni.take() {
            patroni.kill(&server);
        }
        let started = Instant::now();
        while postmaster.as_deref().is_some_and(is_alive) {
            if started.elapsed() > START_WAIT_MAX {
                return Err(cluster_error("killing a member", "its postmaster lives on"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Its server's postmaster, from its pid file.
    fn postmaster(&self) -> Option<String> {
        let file = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        let pid = file.lines().next()?.trim().to_owned();
        pid.parse::<u32>().is_ok().then_some(pid)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Its name in the cluster.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it runs.
    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The URL of database `name` on its Unix socket, as `postgres`: what
    /// a test looks with, whatever the network does.
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "postgresql:///{database}?host={}&port={POSTGRES_PORT}&user=postgres",
            self.dir.join("sock").display()
        )
    }

    /// Its server's log (`log_line_prefix = '%m [%p] '`, every statement
    /// that writes logged).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pglog/postgresql.log")).unwrap_or_default()
    }

    /// Patroni's log.
    pub fn patroni_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/patroni.log")).unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Member `name`'s `patroni.yml`, its files in `dir`.
fn member_yaml(scope: &Scope, name: &str, place: &Place, dir: &Path) -> String {
    let Timings {
        ttl,
        loop_wait,
        retry_timeout,
    } = scope.timings;
    let (addr, dir) = (&place.addr, dir.display());
    let etcd = scope.etcd.join(",");
    let bin = find_bin()
        .map(|bin| bin.display().to_string())
        .unwrap_or_default();
    let password = &scope.password;
    let mut yaml = format!(
        "scope: {}\nname: {name}\nlog:\n  dir: {dir}/log\n  level: INFO\n\
         restapi:\n  listen: {addr}:{REST_PORT}\n  connect_address: {addr}:{REST_PORT}\n\
         etcd3:\n  hosts: {etcd}\n  protocol: http\n",
        scope.name
    );
    let _ = write!(
        yaml,
        "bootstrap:\n  dcs:\n    ttl: {ttl}\n    loop_wait: {loop_wait}\n    \
         retry_timeout: {retry_timeout}\n    maximum_lag_on_failover: 1048576\n    \
         synchronous_mode: true\n    synchronous_mode_strict: true\n    postgresql:\n      \
         use_pg_rewind: true\n      remove_data_directory_on_rewind_failure: true\n      \
         remove_data_directory_on_diverged_timelines: true\n      parameters:\n        \
         wal_log_hints: 'on'\n        max_connections: 200\n        \
         synchronous_commit: 'on'\n        wal_keep_size: 256MB\n        \
         wal_sender_timeout: 5s\n  \
         initdb:\n  - encoding: UTF8\n  - auth-local: trust\n"
    );
    let ssl = format!("sslmode: verify-full\n      sslrootcert: {dir}/ca.crt\n");
    let _ = write!(
        yaml,
        "postgresql:\n  listen: {addr}:{POSTGRES_PORT}\n  connect_address: {addr}:{POSTGRES_PORT}\n  \
         data_dir: {dir}/data\n  bin_dir: {bin}\n  pgpass: {dir}/pgpass\n  use_unix_socket: true\n  \
         authentication:\n    superuser:\n      username: postgres\n      password: {password}\n      \
         {ssl}    replication:\n      username: replicator\n      password: {password}\n      {ssl}  \
         parameters:\n    unix_socket_directories: {dir}/sock\n    ssl: 'on'\n    \
         ssl_cert_file: {dir}/server.crt\n    ssl_key_file: {dir}/server.key\n    \
         fsync: 'on'\n    logging_collector: 'on'\n    log_directory: {dir}/pglog\n    \
         log_filename: postgresql.log\n    log_line_prefix: '%m [%p] '\n    \
         log_statement: mod\n    log_parameter_max_length: 0\n  pg_hba:\n  \
         - local all all trust\n  - local replication all trust\n  \
         - hostssl replication replicator 0.0.0.0/0 scram-sha-256\n  \
         - hostssl all all 0.0.0.0/0 scram-sha-256\n"
    );
    yaml
}
