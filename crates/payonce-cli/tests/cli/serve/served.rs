//! `payonce serve` as a child process of the test.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};

/// The server's process, killed when dropped, so a failed check leaves
/// nothing running.
pub struct Served(Child);

impl Served {
    /// Starts `payonce serve ARGS --listen 127.0.0.1:0`; returns it and
    /// its base URL once it listens.
    pub fn start(args: &[String]) -> (Served, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_payonce"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        child.stdout = Some(stdout.into_inner());
        let addr = line.trim().rsplit("http://").next().unwrap().to_owned();
        assert!(addr.starts_with("127.0.0.1:"), "{line}");
        (Served(child), format!("http://{addr}"))
    }

    /// SIGKILL, and waits for it to die.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM failed");
    }

    /// Waits for it to exit; returns how, and what else it printed.
    pub fn wait(&mut self) -> (ExitStatus, String) {
        let mut printed = String::new();
        if let Some(stdout) = self.0.stdout.as_mut() {
            stdout.read_to_string(&mut printed).unwrap();
        }
        (self.0.wait().unwrap(), printed)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill();
    }
}
