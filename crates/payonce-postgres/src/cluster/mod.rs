//! A throwaway PostgreSQL cluster, for tests, benchmarks and the demo: a
//! data directory and a socket directory made with `mktemp -d`, the server
//! listening on the socket alone (`listen_addresses=''`), run as the
//! `postgres` user when this process is root (the server refuses root).
//!
//! It stops on every exit: [`Cluster`]'s drop stops it (`pg_ctl -m fast
//! stop`) and removes its directories, and a watchdog process does the
//! same when this process ends any other way (a panic that aborts, a
//! kill): it waits on a pipe only this process holds.
//!
//! For failover tests, a cluster can be given a streaming standby
//! ([`Cluster::standby`]: `pg_basebackup`, `primary_conninfo`), synchronous
//! or asynchronous ([`Replication`]), which can be promoted
//! ([`Cluster::promote`]), and a primary can be killed as a crash would
//! kill it ([`Cluster::kill`], SIGKILL to every process of the server).
//! [`Settings`] puts a server on a port and socket directory of the
//! caller's (so a standby made later can take a dead server's place in a
//! URL that names both: [`hosts_url`]), in a network namespace, listening
//! on a TCP address there, and over TLS ([`ServerTls`]) with `pg_hba.conf`
//! lines of the caller's ([`Settings::hba`]).
//!
//! A test that cannot start a cluster skips, loudly, except under
//! `CI=true`, where it fails (`required`, `for_tests`).

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use payonce::StoreError;
use postgres::Client;

use crate::error::failed;

pub mod patroni;
mod pgbouncer;

pub use pgbouncer::{Pgbouncer, PoolMode};

/// The port the socket is named after: any will do, the socket directory
/// is the cluster's own.
const PORT: u16 = 5432;

/// Where distributions install PostgreSQL's server binaries.
const BIN_DIRS: &str = "/usr/lib/postgresql";

/// Why a cluster could not be started or used.
#[derive(Debug)]
pub struct ClusterError {
    /// What failed.
    pub step: String,
    /// What it said.
    pub detail: String,
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.step, self.detail)
    }
}

impl std::error::Error for ClusterError {}

pub(crate) fn cluster_error(step: &str, detail: impl fmt::Display) -> ClusterError {
    ClusterError {
        step: step.to_owned(),
        detail: detail.to_string(),
    }
}

/// Where a cluster's server listens, and in which network namespace it
/// runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The port its socket is named after, and its TCP port.
    pub port: u16,
    /// The socket directory, the caller's (not removed with the cluster);
    /// `None`: one of its own from `mktemp -d`.
    pub socket: Option<PathBuf>,
    /// The network namespace (`ip netns`) the server runs in.
    pub netns: Option<String>,
    /// A TCP address to listen on besides the socket (in `netns`), which
    /// takes connections from any client with trust unless `hba` says
    /// otherwise.
    pub listen: Option<String>,
    /// TLS on the server (`ssl = on`), with these files.
    pub tls: Option<ServerTls>,
    /// `pg_hba.conf` lines for TCP connections, in place of trusting every
    /// client; connections over the socket stay trusted.
    pub hba: Option<String>,
}

/// A server's TLS files, copied into its data directory.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// Its certificate chain (PEM).
    pub certificate: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA whose client certificates it accepts (`cert` authentication).
    pub client_ca: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            port: PORT,
            socket: None,
            netns: None,
            listen: None,
            tls: None,
            hba: None,
        }
    }
}

/// A TCP port on the loopback interface that nothing listens on now.
pub fn free_port() -> Result<u16, ClusterError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| cluster_error("finding a free port", error))
}

/// How a standby follows its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// The primary's commits wait until the standby has flushed them
    /// (`synchronous_standby_names` naming it, `synchronous_commit = on`).
    Synchronous,
    /// The primary ships its WAL after each commit, without waiting.
    Asynchronous,
}

/// How long a standby has to catch up and start streaming.
const STREAMING_WAIT_MAX: Duration = Duration::from_secs(60);

/// A running throwaway cluster.
pub struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    /// Whether `socket` is this cluster's own, removed with it.
    socket_owned: bool,
    settings: Settings,
    as_postgres: bool,
    /// Closing it (by dropping it, or by this process ending) stops the
    /// cluster from the watchdog.
    watchdog: Option<(Child, ChildStdin)>,
    databases: AtomicU64,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("data", &self.data)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// The newest server binaries installed: `pg_config --bindir`'s, else the
/// highest version under [`BIN_DIRS`].
pub(crate) fn find_bin() -> Result<PathBuf, ClusterError> {
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(BIN_DIRS)
        .map_err(|error| cluster_error(&format!("looking for PostgreSQL in {BIN_DIRS}"), error))?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        cluster_error(
            "looking for PostgreSQL",
            format!("no initdb under {BIN_DIRS}"),
        )
    })
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

pub(crate) fn mktemp_dir() -> Result<PathBuf, ClusterError> {
    let output = Command::new("mktemp")
        .args(["-d", "-t", "payonce-pg.XXXXXX"])
        .output()
        .map_err(|error| cluster_error("mktemp -d", error))?;
    if !output.status.success() {
        return Err(cluster_error(
            "mktemp -d",
            String::from_utf8_lossy(&output.stderr),
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// Runs `command`, and says what it printed if it failed.
pub(crate) fn run(step: &str, mut command: Command) -> Result<(), ClusterError> {
    let output = command
        .output()
        .map_err(|error| cluster_error(step, error))?;
    if output.status.success() {
        return Ok(());
    }
    Err(cluster_error(
        step,
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    ))
}

/// Quotes `text` for `sh`.
pub(crate) fn quoted(text: &Path) -> String {
    format!("'{}'", text.display().to_string().replace('\'', r"'\''"))
}

impl Cluster {
    /// Makes and starts a new cluster; about two seconds.
    pub fn start() -> Result<Cluster, ClusterError> {
        Cluster::start_with(Settings::default())
    }

    /// A cluster not yet made: its directories, owned by the server's
    /// user, and its watchdog.
    fn prepare(settings: Settings) -> Result<Cluster, ClusterError> {
        let bin = find_bin()?;
        let as_postgres = is_root();
        let data = mktemp_dir()?;
        let (socket, socket_owned) = match &settings.socket {
            Some(socket) => (socket.clone(), false),
            None => (mktemp_dir()?, true),
        };
        let mut cluster = Cluster {
            bin,
            data,
            socket,
            socket_owned,
            settings,
            as_postgres,
            watchdog: None,
            databases: AtomicU64::new(0),
        };
        if as_postgres {
            let mut chown = Command::new("chown");
            chown
                .args(["-R", "postgres"])
                .arg(&cluster.data)
                .arg(&cluster.socket);
            run("chown postgres", chown)?;
        }
        cluster.watchdog = Some(cluster.spawn_watchdog()?);
        Ok(cluster)
    }

    /// Makes and starts a new cluster as `settings` say.
    pub fn start_with(settings: Settings) -> Result<Cluster, ClusterError> {
        let cluster = Cluster::prepare(settings)?;
        let mut initdb = cluster.tool("initdb");
        initdb
            .arg("-D")
            .arg(&cluster.data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        run("initdb", initdb)?;
        // In the configuration file rather than on the command line, which
        // would win over `ALTER SYSTEM`: a test turns them off that way.
        let conf = cluster.data.join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut file| file.write_all(b"\nfsync = on\nsynchronous_commit = on\n"))
            .map_err(|error| cluster_error("writing postgresql.conf", error))?;
        match &cluster.settings.hba {
            Some(lines) => {
                let hba = format!("local all all trust\nlocal replication all trust\n{lines}\n");
                std::fs::write(cluster.data.join("pg_hba.conf"), hba)
                    .map_err(|error| cluster_error("writing pg_hba.conf", error))?;
            }
            // Inside the test's own network namespace: no one else there.
            None if cluster.settings.listen.is_some() => append(
                &cluster.data.join("pg_hba.conf"),
                "\nhost all all 0.0.0.0/0 trust\n",
            )?,
            None => {}
        }
        if let Some(tls) = &cluster.settings.tls {
            cluster.install_tls(tls)?;
        }
        cluster.start_server()?;
        Ok(cluster)
    }

    /// Copies `tls`'s files into the data directory (where a standby's
    /// base backup finds them too) and turns TLS on.
    fn install_tls(&self, tls: &ServerTls) -> Result<(), ClusterError> {
        let mut conf =
            String::from("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        let mut files = vec![(&tls.certificate, "server.crt"), (&tls.key, "server.key")];
        if let Some(ca) = &tls.client_ca {
            files.push((ca, "client_ca.crt"));
            conf.push_str("ssl_ca_file = 'client_ca.crt'\n");
        }
        for (source, name) in files {
            let target = self.data.join(name);
            std::fs::copy(source, &target)
                .map_err(|error| cluster_error(&format!("copying {}", source.display()), error))?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))
                    .map_err(|error| cluster_error("chmod 600", error))?;
            }
            if self.as_postgres {
                let mut chown = Command::new("chown");
                chown.arg("postgres").arg(&target);
                run("chown postgres", chown)?;
            }
        }
        append(&self.data.join("postgresql.conf"), &conf)
    }

    /// Makes a standby of this cluster as `settings` say, streaming from
    /// it (`pg_basebackup`, then `primary_conninfo`), and starts it; once
    /// it streams, and for [`Replication::Synchronous`] once this cluster
    /// names it in `synchronous_standby_names` and counts it synchronous,
    /// returns it.
    pub fn standby(
        &self,
        settings: Settings,
        replication: Replication,
    ) -> Result<Cluster, ClusterError> {
        static STANDBYS: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "standby_{}_{}",
            std::process::id(),
            STANDBYS.fetch_add(1, Ordering::Relaxed)
        );
        let standby = Cluster::prepare(settings)?;
        let mut backup = standby.tool("pg_basebackup");
        backup
            .arg("-D")
            .arg(&standby.data)
            .arg("-h")
            .arg(&self.socket)
            .args(["-p", &self.settings.port.to_string(), "-U", "postgres"])
            .args(["-X", "stream", "-R", "--no-sync", "-c", "fast"]);
        run("pg_basebackup", backup)?;
        // After what `-R` wrote: the last setting of a name wins.
        append(
            &standby.data.join("postgresql.auto.conf"),
            &format!(
                "\nprimary_conninfo = 'host={} port={} user=postgres application_name={name}'\n",
                self.socket.display(),
                self.settings.port
            ),
        )?;
        standby.start_server()?;
        if replication == Replication::Synchronous {
            self.set(&format!("synchronous_standby_names = '\"{name}\"'"))?;
        }
        let wanted = match replication {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        self.wait_for_standby(&name, wanted)?;
        Ok(standby)
    }

    /// Waits until this cluster's standby `name` streams, in `sync_state`
    /// `wanted`.
    fn wait_for_standby(&self, name: &str, wanted: &str) -> Result<(), ClusterError> {
        let started = Instant::now();
        let step = "waiting for the standby to stream";
        let mut admin = self.admin().map_err(|error| cluster_error(step, error))?;
        loop {
            let row = admin
                .query_opt(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1",
                    &[&name],
                )
                .map_err(|error| cluster_error(step, error))?;
            let state = row.map(|row| (row.get::<_, String>(0), row.get::<_, String>(1)));
            if state
                .as_ref()
                .is_some_and(|(state, sync)| state == "streaming" && sync == wanted)
            {
                return Ok(());
            }
            if started.elapsed() > STREAMING_WAIT_MAX {
                return Err(cluster_error(step, format!("{name} is {state:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sets `setting` (`name = value`) with `ALTER SYSTEM`, and reloads.
    fn set(&self, setting: &str) -> Result<(), ClusterError> {
        let step = format!("ALTER SYSTEM SET {setting}");
        self.admin()
            .and_then(|mut admin| {
                // Two statements: ALTER SYSTEM runs in no transaction block,
                // which a multi-statement query is.
                admin.batch_execute(&step).map_err(failed)?;
                admin
                    .batch_execute("SELECT pg_reload_conf()")
                    .map_err(failed)
            })
            .map_err(|error| cluster_error(&step, error))
    }

    /// Promotes this standby (`pg_ctl promote`, waiting until it takes
    /// writes). It copied its primary's `synchronous_standby_names`, and
    /// has no standby of its own: every commit would wait forever, so it is
    /// cleared, as a failover manager does when no synchronous candidate
    /// is left.
    pub fn promote(&self) -> Result<(), ClusterError> {
        let mut promote = self.tool("pg_ctl");
        promote.arg("-D").arg(&self.data).args(["-w", "promote"]);
        run("pg_ctl promote", promote)?;
        self.set("synchronous_standby_names = ''")
    }

    /// Cuts this standby off from its primary (`primary_conninfo` cleared):
    /// it receives nothing more, as an asynchronous standby that lags.
    /// Returns once its WAL receiver has stopped: the reload reaches it a
    /// moment after, and until then commits still stream.
    pub fn disconnect(&self) -> Result<(), ClusterError> {
        self.set("primary_conninfo = ''")?;
        let step = "waiting for the standby to stop receiving";
        let mut admin = self.admin().map_err(|error| cluster_error(step, error))?;
        let started = Instant::now();
        loop {
            let receiving: i64 = admin
                .query_one("SELECT count(*) FROM pg_stat_wal_receiver", &[])
                .map_err(|error| cluster_error(step, error))?
                .get(0);
            if receiving == 0 {
                return Ok(());
            }
            if started.elapsed() > STREAMING_WAIT_MAX {
                return Err(cluster_error(step, "its WAL receiver runs on"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the server as a crash would: SIGKILL to the postmaster and to
    /// every process it started, at once. Nothing is flushed, nothing is
    /// answered, and the server is not restarted.
    pub fn kill(&self) -> Result<(), ClusterError> {
        let step = "killing the server";
        let pid_file = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .map_err(|error| cluster_error(step, error))?;
        let pid = pid_file
            .lines()
            .next()
            .map(str::trim)
            .filter(|pid| pid.parse::<u32>().is_ok())
            .ok_or_else(|| cluster_error(step, "no pid in postmaster.pid"))?
            .to_owned();
        let mut pids = vec![pid.clone()];
        pids.extend(children_of(&pid));
        // A backend may have ended between the listing and the signal, which
        // `kill` reports as a failure: what counts is that the postmaster
        // is gone.
        let _ = Command::new("kill").arg("-KILL").args(&pids).output();
        let started = Instant::now();
        while is_alive(&pid) {
            if started.elapsed() > STREAMING_WAIT_MAX {
                return Err(cluster_error(
                    step,
                    format!("the postmaster {pid} lives on"),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // A zombie left unreaped (a container's first process may reap
        // none) still answers `kill -0`, and a server started later on this
        // socket would take its lock file for a live one's: the dead
        // server's socket and lock go with it.
        let socket = self.socket.join(format!(".s.PGSQL.{}", self.settings.port));
        let lock = self
            .socket
            .join(format!(".s.PGSQL.{}.lock", self.settings.port));
        for file in [socket, lock] {
            match std::fs::remove_file(&file) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    return Err(cluster_error(step, format!("{}: {error}", file.display())));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The socket directory.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The port its socket is named after, and its TCP port.
    pub fn port(&self) -> u16 {
        self.settings.port
    }

    /// The URL of database `name` on the TCP address the server listens
    /// on ([`Settings::listen`]), as reached from its network namespace.
    pub fn tcp_url(&self, name: &str) -> Option<String> {
        let address = self.settings.listen.as_ref()?;
        Some(format!(
            "postgresql://postgres@{address}:{}/{name}?sslmode=disable",
            self.settings.port
        ))
    }

    /// `name`, one of the server's tools, run as the `postgres` user when
    /// this process is root.
    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        let mut words: Vec<std::ffi::OsString> = Vec::new();
        if let Some(netns) = &self.settings.netns {
            words.extend(["ip", "netns", "exec", netns].map(Into::into));
        }
        if self.as_postgres {
            words.extend(["runuser", "-u", "postgres", "--"].map(Into::into));
        }
        words.push(path.into_os_string());
        let mut command = Command::new(&words[0]);
        command.args(&words[1..]);
        command
    }

    fn stop_command(&self, mode: &str) -> Command {
        let mut stop = self.tool("pg_ctl");
        stop.arg("-D")
            .arg(&self.data)
            .args(["-m", mode, "-w", "stop"]);
        stop
    }

    /// A shell that waits for this process's end (its pipe closing), then
    /// stops the cluster and removes its directories.
    fn spawn_watchdog(&self) -> Result<(Child, ChildStdin), ClusterError> {
        let stop = format!("{:?}", self.stop_command("fast"));
        let socket = match self.socket_owned {
            true => quoted(&self.socket),
            false => String::new(),
        };
        watchdog(&format!(
            "{stop} >/dev/null 2>&1; rm -rf {} {socket}",
            quoted(&self.data),
        ))
    }

    /// Starts the server (again).
    pub fn start_server(&self) -> Result<(), ClusterError> {
        let options = format!(
            "-k {} -p {} -c listen_addresses='{}' -c max_connections=300",
            self.socket.display(),
            self.settings.port,
            self.settings.listen.as_deref().unwrap_or("")
        );
        let mut start = self.tool("pg_ctl");
        start
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.data.join("server.log"))
            .args(["-w", "-o", &options, "start"]);
        run("pg_ctl start", start).map_err(|error| {
            // The server's own words, before its directory goes.
            let log = std::fs::read_to_string(self.data.join("server.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            cluster_error(
                "pg_ctl start",
                format!("{error}; server.log ends:\n{}", tail.join("\n")),
            )
        })
    }

    /// Stops the server as a crash would: `pg_ctl -m immediate stop`, no
    /// checkpoint; the next start recovers from the WAL.
    pub fn stop_immediate(&self) -> Result<(), ClusterError> {
        run("pg_ctl -m immediate stop", self.stop_command("immediate"))
    }

    /// The URL of database `name` (a Unix socket, as the `postgres` user).
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgresql:///{name}?host={}&port={}&user=postgres",
            self.socket.display(),
            self.settings.port
        )
    }

    /// A connection to the `postgres` database, as its superuser.
    pub fn admin(&self) -> Result<Client, StoreError> {
        Ok(crate::client(&self.url("postgres"))?)
    }

    /// Creates a new, empty database and returns its URL.
    pub fn database(&self) -> Result<String, StoreError> {
        let number = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("ledger_{}_{number}", std::process::id());
        self.admin()?
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(failed)?;
        Ok(self.url(&name))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop_command("fast").output();
        let _ = std::fs::remove_dir_all(&self.data);
        if self.socket_owned {
            let _ = std::fs::remove_dir_all(&self.socket);
        }
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// The URL of database `name` on every one of `clusters`, in order, in
/// the authority form (`postgresql://%2Fsocket:port,.../name`), on their
/// sockets: a worker given it connects to whichever accepts writes.
pub fn hosts_url(clusters: &[&Cluster], name: &str) -> String {
    let hosts: Vec<String> = clusters
        .iter()
        .map(|cluster| {
            let socket = cluster.socket.display().to_string().replace('/', "%2F");
            format!("{socket}:{}", cluster.settings.port)
        })
        .collect();
    format!(
        "postgresql://{}/{name}?user=postgres&target_session_attrs=read-write",
        hosts.join(",")
    )
}

/// Whether process `pid` runs (a zombie does not).
pub(crate) fn is_alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// The processes whose parent is `pid`, from `/proc`.
pub(crate) fn children_of(pid: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces.
            let after = stat.rsplit_once(')')?.1;
            let parent = after.split_whitespace().nth(1)?;
            (parent == pid).then(|| entry.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

/// A shell that waits for this process's end (its pipe, whose writing end
/// is returned, closing), then runs `script`: what stops a test's servers
/// however this process ends.
pub(crate) fn watchdog(script: &str) -> Result<(Child, ChildStdin), ClusterError> {
    let mut child = Command::new("sh")
        .args(["-c", &format!("cat >/dev/null; {script}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| cluster_error("starting a watchdog", error))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| cluster_error("starting a watchdog", "no pipe"))?;
    Ok((child, stdin))
}

/// Appends `text` to the file at `path`.
pub(crate) fn append(path: &Path, text: &str) -> Result<(), ClusterError> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|error| cluster_error(&format!("writing {}", path.display()), error))
}

/// Whether tests must fail, not skip, when no cluster can be started: on
/// CI (`CI=true`).
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true")
}

/// Writes `detail` where a person will see it, flushed.
pub fn shout(detail: &str) {
    let mut err = std::io::stderr();
    let _ = writeln!(err, "\n!!! {detail}\n");
    let _ = err.flush();
}

/// The cluster every test of this process shares, started on first use;
/// `None`, after a loud message, when none can be started outside CI.
///
/// # Panics
/// Under `CI=true`, when no cluster can be started: tests there fail, never
/// skip.
pub fn for_tests() -> Option<&'static Cluster> {
    static CLUSTER: std::sync::OnceLock<Result<Cluster, String>> = std::sync::OnceLock::new();
    let started = CLUSTER.get_or_init(|| Cluster::start().map_err(|error| error.to_string()));
    usable(started.as_ref().map_err(String::as_str), required())
}

/// A cluster of the calling test's own, for a test that changes the whole
/// server's settings; `None`, after a loud message, when none can be
/// started outside CI.
///
/// # Panics
/// Under `CI=true`, when no cluster can be started.
pub fn own_for_tests() -> Option<Cluster> {
    let started = Cluster::start().map_err(|error| error.to_string());
    usable(started.as_ref().map_err(String::as_str), required())?;
    started.ok()
}

/// What a test does with the cluster it asked for: uses it; fails when
/// none could be started and a cluster is `required`; skips, loudly,
/// otherwise.
fn usable<T>(started: Result<T, &str>, required: bool) -> Option<T> {
    match started {
        Ok(cluster) => Some(cluster),
        Err(error) if required => {
            panic!("CI=true, and no PostgreSQL cluster could be started for the tests: {error}")
        }
        Err(error) => {
            shout(&format!(
                "SKIPPING a PostgreSQL test: no cluster could be started ({error}). Install \
                 PostgreSQL (apt-get install postgresql); under CI=true this fails"
            ));
            None
        }
    }
}

/// A new database with the payonce schema applied, on the cluster every
/// test of this process shares: its URL, or `None` (after a loud message)
/// when no cluster can be started outside CI.
///
/// # Panics
/// When the database cannot be made, and under `CI=true` when no cluster
/// can be started.
pub fn test_database() -> Option<String> {
    let cluster = for_tests()?;
    let url = cluster
        .database()
        .unwrap_or_else(|error| panic!("creating a test database: {error}"));
    crate::migrate(&url).unwrap_or_else(|error| panic!("migrating a test database: {error}"));
    Some(url)
}

#[cfg(test)]
mod tests {
    use super::usable;

    #[test]
    #[should_panic(expected = "CI=true, and no PostgreSQL cluster could be started")]
    fn under_ci_a_test_whose_cluster_cannot_start_fails() {
        let _ = usable::<()>(Err("initdb: not found"), true);
    }

    #[test]
    fn outside_ci_it_skips_and_a_started_cluster_is_used() {
        assert_eq!(usable::<()>(Err("initdb: not found"), false), None);
        assert_eq!(usable(Ok(7), true), Some(7));
    }
}
