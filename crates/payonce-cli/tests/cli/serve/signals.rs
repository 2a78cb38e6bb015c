//! `payonce serve` and its signals at awkward moments: a SIGHUP before it
//! listens, and a SIGTERM while a reload hangs on its file. A FIFO as the
//! tokens file holds the service at a read for as long as the test wants,
//! and opening its other end says when the service has reached that read.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::TOKENS;
use super::served::Served;
use crate::fixture::arg;

/// Longest a test waits for the service to exit: a bound on a hang.
const EXIT_TIME_MAX: Duration = Duration::from_secs(30);

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Opens the FIFO at `path` for writing, which returns once the service
/// has opened it to read.
fn writer(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new().write(true).open(path).unwrap()
}

/// The arguments of a service on a new ledger in `scratch`, reading its
/// tokens from `tokens`.
fn args(scratch: &Path, tokens: &Path) -> Vec<String> {
    let ledger = arg(&scratch.join("ledger"));
    ["--init", "--dir", &ledger, "--tokens", &arg(tokens)]
        .map(str::to_owned)
        .into()
}

// Guards against a SIGHUP sent while the service starts (a rotation
// signalled as it comes up) taking its default action and ending the
// process before it listens.
#[test]
fn a_sighup_during_start_up_is_remembered_and_rereads_the_files_once_it_listens() {
    let scratch = tempfile::tempdir().unwrap();
    let tokens = scratch.path().join("tokens.toml");
    mkfifo(&tokens);
    let mut served = Served::launch_with(&args(scratch.path(), &tokens), &[]);
    // The service is reading its tokens file: it has not opened its
    // ledger, and does not listen.
    let mut file = writer(&tokens);
    served.signal("HUP");
    file.write_all(TOKENS.as_bytes()).unwrap();
    drop(file);
    served.listening();
    // The SIGHUP it remembered rereads the file, now that it listens.
    let mut file = writer(&tokens);
    file.write_all(TOKENS.as_bytes()).unwrap();
    drop(file);
    let reloaded = served.next_line();
    assert!(
        reloaded.contains("reloaded the tokens file (3 callers)"),
        "{reloaded}"
    );
    served.terminate();
    let (status, printed) = served.wait_within(EXIT_TIME_MAX);
    assert!(status.success(), "{status:?}: {}", served.stderr());
    assert!(printed.contains("stopped"), "{printed}");
}

// Guards against a reload whose file never ends (a FIFO, a hung network
// mount) holding SIGTERM: the service stops waiting for it and shuts down.
#[test]
fn sigterm_stops_the_service_while_a_reload_hangs_on_its_file() {
    let scratch = tempfile::tempdir().unwrap();
    let tokens = scratch.path().join("tokens.toml");
    std::fs::write(&tokens, TOKENS).unwrap();
    let mut served = Served::launch_with(&args(scratch.path(), &tokens), &[]);
    served.listening();
    std::fs::remove_file(&tokens).unwrap();
    mkfifo(&tokens);
    served.signal("HUP");
    // The reload is reading the FIFO, and nothing will be written to it.
    let _file = writer(&tokens);
    served.terminate();
    let (status, printed) = served.wait_within(EXIT_TIME_MAX);
    assert!(status.success(), "{status:?}: {}", served.stderr());
    assert!(
        printed.contains("stopped; every running send was recorded"),
        "{printed}"
    );
    assert!(!printed.contains("reloaded"), "{printed}");
}

// Guards against a reload line lost with its stdout (a closed pipe, a
// full disk), which said nothing but to a tracing subscriber the binary
// does not have.
#[test]
fn a_reload_line_stdout_cannot_take_goes_to_stderr() {
    let scratch = tempfile::tempdir().unwrap();
    let tokens = scratch.path().join("tokens.toml");
    std::fs::write(&tokens, TOKENS).unwrap();
    let mut served = Served::launch_with(&args(scratch.path(), &tokens), &[]);
    served.listening();
    served.close_stdout();
    served.signal("HUP");
    // Past the warnings of a tokens file others can read.
    let line = loop {
        let line = served.next_err_line();
        if line.is_empty() || !line.contains("warning") {
            break line;
        }
    };
    assert!(
        line.contains("payonce serve: reloaded the tokens file (3 callers)")
            && line.contains("not on stdout"),
        "{line}"
    );
    served.terminate();
}
