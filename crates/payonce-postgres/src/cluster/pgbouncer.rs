//! A throwaway PgBouncer in front of one server of a test's, on a socket
//! directory of its own: what tests run workers and audits through, in
//! session pooling mode (which payonce needs) and in transaction pooling
//! mode (which payonce refuses).
//!
//! It runs as the `postgres` user when this process is root (PgBouncer
//! refuses root), takes any client without a password (`auth_type =
//! any`), and logs in to the server as `postgres` over the server's
//! socket. Its drop stops it (SIGINT, PgBouncer's "shut down at once") and
//! removes its directory; a watchdog does the same when this process ends
//! any other way.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::{ClusterError, cluster_error, is_root, mktemp_dir, quoted, run, watchdog};

/// How long PgBouncer has to open its socket.
const START_WAIT_MAX: Duration = Duration::from_secs(30);

/// How a pooler hands server sessions to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A client keeps one server session for as long as it is connected.
    Session,
    /// A client gets whichever server session is free for each
    /// transaction.
    Transaction,
}

impl PoolMode {
    fn word(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// A running PgBouncer.
pub struct Pgbouncer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    watchdog: Option<(Child, ChildStdin)>,
}

impl fmt::Debug for Pgbouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pgbouncer")
            .field("dir", &self.dir)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// The configuration of a PgBouncer in `dir` on `port`, pooling in `mode`
/// connections to every database of the server on socket directory
/// `server` and port `server_port`.
fn ini(dir: &Path, port: u16, mode: PoolMode, server: &Path, server_port: u16) -> String {
    let dir = dir.display();
    format!(
        "[databases]\n\
         * = host={} port={server_port} user=postgres\n\
         [pgbouncer]\n\
         listen_addr =\n\
         listen_port = {port}\n\
         unix_socket_dir = {dir}\n\
         auth_type = any\n\
         pool_mode = {}\n\
         pidfile = {dir}/pgbouncer.pid\n\
         logfile = {dir}/pgbouncer.log\n\
         max_client_conn = 1000\n\
         default_pool_size = 200\n\
         server_login_retry = 0.2\n\
         server_connect_timeout = 2\n\
         query_wait_timeout = 10\n\
         ignore_startup_parameters = extra_float_digits\n",
        server.display(),
        mode.word()
    )
}

impl Pgbouncer {
    /// Starts a PgBouncer listening on `port` (its socket, in a directory
    /// of its own) in `mode`, in front of every database of the server
    /// whose socket directory is `server` and port `server_port`; returns
    /// once its socket is open.
    pub fn start(
        mode: PoolMode,
        server: &Path,
        server_port: u16,
        port: u16,
    ) -> Result<Pgbouncer, ClusterError> {
        let dir = mktemp_dir()?;
        let as_postgres = is_root();
        if as_postgres {
            let mut chown = Command::new("chown");
            chown.arg("postgres").arg(&dir);
            run("chown postgres", chown)?;
        }
        let config = dir.join("pgbouncer.ini");
        std::fs::write(&config, ini(&dir, port, mode, server, server_port))
            .map_err(|error| cluster_error("writing pgbouncer.ini", error))?;
        let pidfile = quoted(&dir.join("pgbouncer.pid"));
        let watchdog = watchdog(&format!(
            "kill -INT $(cat {pidfile} 2>/dev/null) 2>/dev/null; rm -rf {}",
            quoted(&dir)
        ))?;
        let mut bouncer = Pgbouncer {
            dir,
            port,
            child: None,
            watchdog: Some(watchdog),
        };
        let mut command = match as_postgres {
            true => {
                let mut command = Command::new("runuser");
                command.args(["-u", "postgres", "--", "pgbouncer"]);
                command
            }
            false => Command::new("pgbouncer"),
        };
        command
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command
            .spawn()
            .map_err(|error| cluster_error("starting pgbouncer", error))?;
        bouncer.child = Some(child);
        bouncer.wait_for_socket()?;
        Ok(bouncer)
    }

    /// Polls until the socket is there, or PgBouncer has ended.
    fn wait_for_socket(&mut self) -> Result<(), ClusterError> {
        let socket = self.dir.join(format!(".s.PGSQL.{}", self.port));
        let started = Instant::now();
        while !socket.exists() {
            let ended = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if ended.is_some() || started.elapsed() > START_WAIT_MAX {
                let log =
                    std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default();
                return Err(cluster_error(
                    "starting pgbouncer",
                    format!("no socket ({ended:?}); its log:\n{log}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Its socket directory.
    pub fn socket(&self) -> &Path {
        &self.dir
    }

    /// The port its socket is named after.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `database` through it, as the `postgres` user.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgresql:///{database}?host={}&port={}&user=postgres",
            self.dir.display(),
            self.port
        )
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pgbouncer.pid")) {
            let _ = Command::new("kill").arg("-INT").arg(pid.trim()).output();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}
