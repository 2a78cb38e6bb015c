//! A throwaway PostgreSQL cluster, for tests, benchmarks and the demo: a
//! data directory and a socket directory made with `mktemp -d`, the server
//! listening on the socket alone (`listen_addresses=''`), run as the
//! `postgres` user when this process is root (the server refuses root).
//!
//! It stops on every exit: [`Cluster`]'s drop stops it (`pg_ctl -m fast
//! stop`) and removes its directories, and a watchdog process does the
//! same when this process ends any other way (a panic that aborts, a
//! kill): it waits on a pipe only this process holds.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use payonce::StoreError;
use postgres::{Client, NoTls};

use crate::error::failed;

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

fn cluster_error(step: &str, detail: impl fmt::Display) -> ClusterError {
    ClusterError {
        step: step.to_owned(),
        detail: detail.to_string(),
    }
}

/// A running throwaway cluster.
pub struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    socket: PathBuf,
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
fn find_bin() -> Result<PathBuf, ClusterError> {
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

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

fn mktemp_dir() -> Result<PathBuf, ClusterError> {
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
fn run(step: &str, mut command: Command) -> Result<(), ClusterError> {
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
fn quoted(text: &Path) -> String {
    format!("'{}'", text.display().to_string().replace('\'', r"'\''"))
}

impl Cluster {
    /// Makes and starts a new cluster; about two seconds.
    pub fn start() -> Result<Cluster, ClusterError> {
        let bin = find_bin()?;
        let as_postgres = is_root();
        let (data, socket) = (mktemp_dir()?, mktemp_dir()?);
        let mut cluster = Cluster {
            bin,
            data,
            socket,
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
        cluster.start_server()?;
        Ok(cluster)
    }

    /// `name`, one of the server's tools, run as the `postgres` user when
    /// this process is root.
    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        match self.as_postgres {
            true => {
                let mut command = Command::new("runuser");
                command.args(["-u", "postgres", "--"]).arg(path);
                command
            }
            false => Command::new(path),
        }
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
        let script = format!(
            "cat >/dev/null; {stop} >/dev/null 2>&1; rm -rf {} {}",
            quoted(&self.data),
            quoted(&self.socket)
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| cluster_error("starting the cluster's watchdog", error))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| cluster_error("starting the cluster's watchdog", "no pipe"))?;
        Ok((child, stdin))
    }

    /// Starts the server (again).
    pub fn start_server(&self) -> Result<(), ClusterError> {
        let options = format!(
            "-k {} -p {PORT} -c listen_addresses='' -c max_connections=300",
            self.socket.display()
        );
        let mut start = self.tool("pg_ctl");
        start
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.data.join("server.log"))
            .args(["-w", "-o", &options, "start"]);
        run("pg_ctl start", start)
    }

    /// Stops the server as a crash would: `pg_ctl -m immediate stop`, no
    /// checkpoint; the next start recovers from the WAL.
    pub fn stop_immediate(&self) -> Result<(), ClusterError> {
        run("pg_ctl -m immediate stop", self.stop_command("immediate"))
    }

    /// The URL of database `name` (a Unix socket, as the `postgres` user).
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgresql:///{name}?host={}&port={PORT}&user=postgres",
            self.socket.display()
        )
    }

    /// A connection to the `postgres` database, as its superuser.
    pub fn admin(&self) -> Result<Client, StoreError> {
        Client::connect(&self.url("postgres"), NoTls).map_err(failed)
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
        let _ = std::fs::remove_dir_all(&self.socket);
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
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
