//! `payonce serve` as a child process of the test.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

/// The server's process, killed when dropped, so a failed check leaves
/// nothing running.
pub struct Served {
    child: Child,
    stdout: BufReader<ChildStdout>,
    /// What it writes on stderr, when the test reads it.
    stderr: Option<JoinHandle<String>>,
}

impl Served {
    /// Starts `payonce serve ARGS --listen 127.0.0.1:0`; returns it and
    /// its base URL (`http://` or `https://`) once it listens.
    pub fn start(args: &[String]) -> (Served, String) {
        Served::spawn(args, Stdio::inherit())
    }

    /// As [`Served::start`], keeping what it writes on stderr for
    /// [`Served::stop`].
    pub fn start_capturing(args: &[String]) -> (Served, String) {
        Served::spawn(args, Stdio::piped())
    }

    fn spawn(args: &[String], stderr: Stdio) -> (Served, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_payonce"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        // Read on a thread of its own, so a full pipe never stalls it.
        let stderr = child.stderr.take().map(|mut stderr| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = stderr.read_to_string(&mut text);
                text
            })
        });
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut served = Served {
            child,
            stdout,
            stderr,
        };
        let line = served.next_line();
        let base = line.trim().rsplit(' ').next().unwrap().to_owned();
        assert!(
            base.starts_with("http://127.0.0.1:") || base.starts_with("https://127.0.0.1:"),
            "{line}"
        );
        (served, base)
    }

    /// The next line it prints on stdout (empty once it has closed it).
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
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
        self.stdout.read_to_string(&mut printed).unwrap();
        (self.child.wait().unwrap(), printed)
    }

    /// SIGTERM, then what it printed: on stdout and, if captured, stderr.
    pub fn stop(mut self) -> (String, String) {
        self.terminate();
        let (status, printed) = self.wait();
        assert!(status.success(), "{status:?}");
        let stderr = self.stderr.take().map(|thread| thread.join().unwrap());
        (printed, stderr.unwrap_or_default())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill();
    }
}
