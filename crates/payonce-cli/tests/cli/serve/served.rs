//! `payonce serve` as a child process of the test.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// Longest a test waits for a line on stderr: a bound on a hang.
pub const LINE_TIME_MAX: Duration = Duration::from_secs(30);

/// The server's process, killed when dropped, so a failed check leaves
/// nothing running.
pub struct Served {
    child: Child,
    /// What it writes on stdout; taken by [`Served::wait_within`] and
    /// [`Served::close_stdout`].
    stdout: Option<BufReader<ChildStdout>>,
    /// The lines it writes on stderr, when the test reads them.
    stderr: Option<Receiver<String>>,
}

impl Served {
    /// Starts `payonce serve ARGS --listen 127.0.0.1:0`; returns it and
    /// its base URL (`http://` or `https://`) once it listens.
    pub fn start(args: &[String]) -> (Served, String) {
        let mut served = Served::launch(args, &[], Stdio::inherit());
        let base = served.listening();
        (served, base)
    }

    /// As [`Served::start`], keeping what it writes on stderr for
    /// [`Served::stop`].
    pub fn start_capturing(args: &[String]) -> (Served, String) {
        let mut served = Served::launch(args, &[], Stdio::piped());
        let base = served.listening();
        (served, base)
    }

    /// Starts `payonce serve ARGS --listen 127.0.0.1:0` with `env` added to
    /// its environment, keeping its stderr, without waiting for it to
    /// listen ([`Served::listening`] does).
    pub fn launch_with(args: &[String], env: &[(&str, &str)]) -> Served {
        Served::launch(args, env, Stdio::piped())
    }

    fn launch(args: &[String], env: &[(&str, &str)], stderr: Stdio) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_payonce"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        // Read on a thread of its own, so a full pipe never stalls it.
        let stderr = child.stderr.take().map(|stderr| {
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { return };
                    if sender.send(format!("{line}\n")).is_err() {
                        return;
                    }
                }
            });
            receiver
        });
        let stdout = child.stdout.take().map(BufReader::new);
        Served {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits for the line that says where it listens; its base URL.
    pub fn listening(&mut self) -> String {
        let line = self.next_line();
        let base = line.trim().rsplit(' ').next().unwrap().to_owned();
        assert!(
            base.starts_with("http://127.0.0.1:") || base.starts_with("https://127.0.0.1:"),
            "{line}"
        );
        base
    }

    /// The next line it prints on stdout (empty once it has closed it).
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.as_mut().unwrap().read_line(&mut line).unwrap();
        line
    }

    /// SIGKILL, and waits for it to die.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (`TERM`, `HUP`).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} failed");
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Waits for it to exit; returns how, and what else it printed.
    pub fn wait(&mut self) -> (ExitStatus, String) {
        let mut printed = String::new();
        let stdout = self.stdout.as_mut().unwrap();
        stdout.read_to_string(&mut printed).unwrap();
        (self.child.wait().unwrap(), printed)
    }

    /// As [`Served::wait`], failing the test if it has not exited within
    /// `bound` (a bound on a hang, not a wait: it returns as soon as the
    /// process closes its stdout).
    pub fn wait_within(&mut self, bound: Duration) -> (ExitStatus, String) {
        let mut stdout = self.stdout.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut printed = String::new();
            let _ = stdout.read_to_string(&mut printed);
            let _ = sender.send(printed);
        });
        let printed = receiver
            .recv_timeout(bound)
            .unwrap_or_else(|_| panic!("payonce serve still runs after {bound:?}"));
        (self.child.wait().unwrap(), printed)
    }

    /// The next line it writes on stderr (if captured; empty once it has
    /// closed it), failing the test if none comes within
    /// [`LINE_TIME_MAX`] (a bound on a hang, not a wait).
    pub fn next_err_line(&mut self) -> String {
        let lines = self.stderr.as_ref().unwrap();
        match lines.recv_timeout(LINE_TIME_MAX) {
            Ok(line) => line,
            Err(RecvTimeoutError::Disconnected) => String::new(),
            Err(RecvTimeoutError::Timeout) => panic!("no line on stderr in {LINE_TIME_MAX:?}"),
        }
    }

    /// What else it wrote on stderr, once it has exited (if captured).
    pub fn stderr(&mut self) -> String {
        let lines = self.stderr.take();
        lines.map_or(String::new(), |lines| lines.iter().collect())
    }

    /// Closes the test's end of its stdout: what it writes there fails.
    pub fn close_stdout(&mut self) {
        self.stdout = None;
    }

    /// SIGTERM, then what it printed: on stdout and, if captured, stderr.
    pub fn stop(mut self) -> (String, String) {
        self.terminate();
        let (status, printed) = self.wait();
        assert!(status.success(), "{status:?}");
        (printed, self.stderr())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill();
    }
}
