//! `payonce head` and `payonce verify --expect-head`: a head kept by an
//! auditor proves later that the log still holds every event up to it,
//! unchanged, or the verification fails as damage.

use std::path::Path;
use std::sync::Arc;

use payonce::{Head, Ledger, ManualClock};
use payonce_log::{FsStorage, Log, LogConfig, LogReader};

use crate::fixture::{START, arg, config, payonce, scenario};

/// The last line of `text`.
fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or_default()
}

/// The payloads of every record of the log in `dir`.
fn payloads(dir: &Path) -> Vec<Vec<u8>> {
    let reader = LogReader::open(Arc::new(FsStorage::new(dir)), LogConfig::default()).unwrap();
    reader
        .records_from(1)
        .unwrap()
        .map(|record| record.unwrap().payload)
        .collect()
}

/// A log in `dir` holding `payloads`, a flush each, closed cleanly.
fn write_log(dir: &Path, payloads: &[Vec<u8>]) {
    let (log, _) = Log::open(Arc::new(FsStorage::new(dir)), LogConfig::default()).unwrap();
    for payload in payloads {
        log.append_durable(payload).unwrap();
    }
}

#[test]
fn head_prints_the_ledgers_durable_head_on_its_last_line() {
    // Guards against `payonce head` printing something `--expect-head` or another backend would not compute.
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let ledger = Ledger::open_with(dir.path(), config(Arc::new(ManualClock::new(START)))).unwrap();
    let head = ledger.head().unwrap();
    drop(ledger);
    let run = payonce(&["head", &arg(dir.path())]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let printed: Head = last_line(&run.stdout).parse().unwrap();
    // Dropping the ledger closed it cleanly: nothing after its head.
    assert_eq!(printed, head);
    let json = payonce(&["head", &arg(dir.path()), "--json"]).json();
    assert_eq!(json["head"], head.to_string());
    assert_eq!(json["seq"], head.seq);
}

#[test]
fn verify_with_the_expected_head_passes_on_the_log_that_holds_it() {
    // Guards against an expected head refusing the genuine log, or one it has grown past.
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let head = last_line(&payonce(&["head", &arg(dir.path())]).stdout).to_owned();
    // The ledger goes on; the head it had is still in it.
    drop(Ledger::open_with(dir.path(), config(Arc::new(ManualClock::new(START)))).unwrap());
    let run = payonce(&["verify", &arg(dir.path()), "--expect-head", &head]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(&format!("expected   {head}: held")),
        "{}",
        run.stdout
    );
    let json = payonce(&["verify", &arg(dir.path()), "--expect-head", &head, "--json"]).json();
    assert_eq!(json["expected_head"], head);
}

#[test]
fn a_forged_event_with_its_checksums_recomputed_fails_verify_against_the_expected_head() {
    // Guards against an edited destination or amount passing an audit because the writer's own code recomputed every checksum.
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let head = last_line(&payonce(&["head", &arg(dir.path())]).stdout).to_owned();
    let genuine = payloads(dir.path());
    // A rewrite with the key of event 3 changed: every checksum, batch
    // header and the checkpoint are the log's own code's, so only the
    // re-derived decisions could tell, and those are an auditor's guess.
    let mut forged = genuine.clone();
    let at = forged[2]
        .windows(5)
        .position(|window| window == b"req-1")
        .unwrap();
    forged[2][at + 4] = b'9';
    let rewritten = tempfile::tempdir().unwrap();
    write_log(rewritten.path(), &forged);
    let run = payonce(&["verify", &arg(rewritten.path()), "--expect-head", &head]);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("does not hold the expected head"),
        "{}",
        run.stderr
    );
    // A log cut before the head is refused too, naming both heads.
    let cut = tempfile::tempdir().unwrap();
    write_log(cut.path(), &genuine[..genuine.len() - 2]);
    let run = payonce(&["verify", &arg(cut.path()), "--expect-head", &head]);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains(&head), "{}", run.stderr);
    // A malformed head is a usage error naming what is wrong.
    let run = payonce(&["verify", &arg(dir.path()), "--expect-head", "12:abc"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("64 lowercase hex digits"),
        "{}",
        run.stderr
    );
}
