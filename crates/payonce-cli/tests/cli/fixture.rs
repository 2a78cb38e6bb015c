//! Logs built with the library, a way to run the binary, and a snapshot of
//! a directory's bytes.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use payonce::{Config, CountingEpochs, Ledger, ManualClock, NewWithdrawal, SendFailure, Timestamp};
use payonce_log::{Durability, LogConfig};
use payonce_model::{Reference, WithdrawalRequest};

/// 2025-01-01T00:00:00Z: well before any day these tests run, so ages of
/// keys in flight are large.
pub const START: Timestamp = Timestamp::from_unix_nanos(1_735_689_600_000_000_000);

/// The text of a rail error that tries to clear the screen.
pub const HOSTILE_ERROR: &str = "node said \u{1b}[2J\u{7} goodbye";

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {}", self.stdout))
    }
}

/// Runs the built binary with `args`, without `$USER`.
pub fn payonce<S: AsRef<OsStr>>(args: &[S]) -> Run {
    payonce_as(None, args)
}

/// Runs the built binary with `args` and `$USER` set to `user`, if any.
pub fn payonce_as<S: AsRef<OsStr>>(user: Option<&str>, args: &[S]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payonce"));
    command.args(args).env_remove("USER");
    if let Some(user) = user {
        command.env("USER", user);
    }
    let output = command.output().unwrap();
    Run {
        code: output.status.code().expect("the binary exits, not killed"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// `dir` as an argument.
pub fn arg(dir: &Path) -> String {
    dir.to_str().unwrap().to_owned()
}

/// Every file in `dir` (not the audit index) and its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_file())
        .map(|entry| {
            (
                entry.file_name().into_string().unwrap(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect()
}

/// A fast ledger on `clock` whose every opening mints ids in epoch 1, so
/// tests can name the ids they expect ([`minted`]).
pub fn config(clock: Arc<ManualClock>) -> Config {
    Config {
        log: LogConfig {
            durability: Durability::Never,
            ..LogConfig::default()
        },
        clock,
        epochs: Arc::new(CountingEpochs::new(1)),
        ..Config::default()
    }
}

/// The id a ledger opened with [`config`] mints for the withdrawal created
/// by event `seq`: `w-1-<seq>`.
pub fn minted(seq: u64) -> String {
    format!("w-1-{seq}")
}

pub fn sent(request: &WithdrawalRequest, reference: &str) -> WithdrawalRequest {
    request
        .approve()
        .unwrap()
        .start_sending()
        .unwrap()
        .mark_sent(Reference::new(reference).unwrap())
        .unwrap()
}

pub fn new_withdrawal(ledger: &Ledger, amount: &str) -> WithdrawalRequest {
    ledger
        .create(NewWithdrawal {
            amount: amount.parse().unwrap(),
            currency: "USDC".parse().unwrap(),
            destination: "0xabc".parse().unwrap(),
            requested_by: "alice".parse().unwrap(),
        })
        .unwrap()
}

/// A withdrawal the ledger never created (`w-999`, 5 USDC): a claim of it
/// written straight to a log is a decision the code would not make.
pub fn payonce_test_request() -> WithdrawalRequest {
    WithdrawalRequest::new(
        "w-999".parse().unwrap(),
        "5".parse().unwrap(),
        "USDC".parse().unwrap(),
        "0xabc".parse().unwrap(),
        "alice".parse().unwrap(),
    )
}

/// What [`scenario`] built, to ask about.
pub struct Scenario {
    pub clock: Arc<ManualClock>,
    /// Sent under req-1; req-2 was refused for it.
    pub sent: WithdrawalRequest,
    /// Its send under req-3 failed with [`HOSTILE_ERROR`]: in flight, held.
    pub failed: WithdrawalRequest,
    /// The rail refused it under req-4: in flight, not held.
    pub rejected: WithdrawalRequest,
    /// The seq of req-3's claim.
    pub failed_claim_seq: u64,
    /// The time of req-3's claim.
    pub failed_claim_at: Timestamp,
    /// The log's last seq.
    pub last_seq: u64,
}

/// A closed ledger in `dir`, one event a minute from [`START`]:
///
/// 1 opened; 2 created w-1-2; 3 req-1 claimed w-1-2; 4 completed sent; 5
/// req-2 refused (w-1-2 claimed by req-1); 6 created w-1-6; 7 req-3 claimed
/// w-1-6; 8 send_failed (hostile text); 9 created w-1-9; 10 req-4 claimed
/// w-1-9; 11 send_rejected; 12 req-3 refused (in flight).
pub fn scenario(dir: &Path) -> Scenario {
    let clock = Arc::new(ManualClock::new(START));
    let ledger = Ledger::init_with(dir, config(clock.clone())).unwrap();
    let tick = || clock.advance(Duration::from_secs(60));
    tick();
    let sent_request = new_withdrawal(&ledger, "25.00");
    tick();
    ledger
        .submit("req-1", sent_request.clone(), |r| {
            Ok::<_, SendFailure>(sent(r, "0xfeed"))
        })
        .unwrap();
    tick();
    let refused = ledger.submit("req-2", sent_request.clone(), |_| {
        Err::<WithdrawalRequest, _>(SendFailure::failed("must not send"))
    });
    assert!(refused.unwrap_err().refusal().is_some());
    tick();
    let failed = new_withdrawal(&ledger, "10.00");
    tick();
    let failed_claim_at = clock.now_for_tests();
    let error = ledger.submit("req-3", failed.clone(), |_| {
        Err::<WithdrawalRequest, _>(SendFailure::failed(HOSTILE_ERROR))
    });
    assert!(error.is_err());
    let failed_claim_seq = ledger
        .state()
        .unwrap()
        .record("req-3")
        .unwrap()
        .claimed_seq();
    tick();
    let rejected = new_withdrawal(&ledger, "7.50");
    tick();
    let refusal = ledger.submit("req-4", rejected.clone(), |_| {
        Err::<WithdrawalRequest, _>(SendFailure::rejected("insufficient hot wallet"))
    });
    assert!(refusal.is_err());
    tick();
    let again = ledger.submit("req-3", failed.clone(), |_| {
        Err::<WithdrawalRequest, _>(SendFailure::failed("must not send"))
    });
    assert!(again.unwrap_err().refusal().is_some());
    let last_seq = ledger.state().unwrap().last_seq();
    assert_eq!(last_seq, 12, "the scenario's events are as documented");
    Scenario {
        clock,
        sent: sent_request,
        failed,
        rejected,
        failed_claim_seq,
        failed_claim_at,
        last_seq,
    }
}

/// Reads a clock without the `Clock` trait in scope at every call site.
trait NowForTests {
    fn now_for_tests(&self) -> Timestamp;
}

impl NowForTests for ManualClock {
    fn now_for_tests(&self) -> Timestamp {
        payonce::Clock::now(self)
    }
}

/// The one segment file of a small log.
pub fn first_segment(dir: &Path) -> std::path::PathBuf {
    dir.join("00000000000000000001.log")
}

/// Writes `bytes` right after the last record of the one segment of the
/// log in `dir`, over the zeros the writer wrote ahead of its records, as a
/// write torn by a power loss leaves them; returns where they start.
pub fn tear_last_record(dir: &Path, bytes: &[u8]) -> u64 {
    use std::os::unix::fs::FileExt;
    let storage = Arc::new(payonce_log::FsStorage::new(dir));
    let reader = payonce_log::LogReader::open(storage, LogConfig::default()).unwrap();
    let last = reader.records_from(1).unwrap().last().unwrap().unwrap();
    assert_eq!(last.position.segment, 1, "a small log has one segment");
    let end = last.position.offset
        + (payonce_log::FRAME_HEADER_LEN + last.payload.len().div_ceil(8) * 8) as u64;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(first_segment(dir))
        .unwrap();
    file.write_all_at(bytes, end).unwrap();
    end
}

/// A log in `dir` holding an opening, a claim under `req-x` for a
/// withdrawal the ledger never created, and its outcome: the claim (seq 2)
/// is a decision the code would not make.
pub fn diverged(dir: &Path) {
    use payonce::{Event, EventKind, SCHEMA_VERSION};
    let storage = Arc::new(payonce_log::FsStorage::new(dir));
    let (log, _) = payonce_log::Log::open(storage, LogConfig::default()).unwrap();
    let request = payonce_test_request();
    let kinds = [
        EventKind::Opened {
            accept_foreign_ids: false,
            epoch: None,
        },
        EventKind::Claimed {
            key: "req-x".parse().unwrap(),
            request: request.clone(),
            worker: None,
        },
        EventKind::Completed {
            key: "req-x".parse().unwrap(),
            outcome: sent(&request, "0x1"),
        },
    ];
    for (index, kind) in kinds.into_iter().enumerate() {
        let event = Event {
            schema: SCHEMA_VERSION,
            seq: index as u64 + 1,
            at: START,
            kind,
        };
        let seq = log.append(&event.encode().unwrap()).unwrap();
        log.wait_durable(seq).unwrap();
    }
}

/// Writes `content` as an outcome file in `dir` and returns its path.
pub fn outcome_file(dir: &Path, name: &str, content: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    arg(&path)
}

/// A closed ledger in `dir` whose one withdrawal was sent: no key in
/// flight, nothing held.
pub fn settled(dir: &Path) -> WithdrawalRequest {
    let clock = Arc::new(ManualClock::new(START));
    let ledger = Ledger::init_with(dir, config(clock)).unwrap();
    let request = new_withdrawal(&ledger, "5.00");
    ledger
        .submit("req-settled", &request, |r| {
            Ok::<_, SendFailure>(sent(r, "0xdone"))
        })
        .unwrap()
}

/// Every command that takes a ledger's directory, with the arguments that
/// follow it; `file` is an outcome file for those that read one.
pub fn commands_on_a_directory(file: &str) -> Vec<(&'static str, Vec<String>)> {
    let owned = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    vec![
        ("verify", owned(&[])),
        ("history", owned(&["--key", "req-1"])),
        ("state", owned(&[])),
        ("inflight", owned(&[])),
        ("export", owned(&[])),
        (
            "resolve",
            owned(&["req-3", "--outcome", file, "--note", "n", "--by", "ops"]),
        ),
        (
            "correct",
            owned(&["req-1", "--outcome", file, "--note", "n", "--by", "ops"]),
        ),
        ("release", owned(&["req-4", "--note", "n", "--by", "ops"])),
    ]
}

/// Runs `command DIR rest...`.
pub fn run_on(command: &str, dir: &str, rest: &[String]) -> Run {
    let mut args = vec![command.to_owned(), dir.to_owned()];
    args.extend_from_slice(rest);
    payonce(&args)
}

/// A withdrawal, sent, as an outcome file holds it.
pub fn a_sent_outcome() -> String {
    let request = WithdrawalRequest::new(
        "w-1-6".parse().unwrap(),
        "10".parse().unwrap(),
        "USDC".parse().unwrap(),
        "0xabc".parse().unwrap(),
        "alice".parse().unwrap(),
    );
    serde_json::to_string(&sent(&request, "0x1")).unwrap()
}

/// The name of the segment file whose first record is `first_seq`.
pub fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

/// Runs the built binary with `args` where no file can grow (a file size
/// limit of 0, its signal ignored), as on a full disk: every write that
/// appends fails with an I/O error, and reading works.
pub fn payonce_on_a_full_disk<S: AsRef<OsStr>>(args: &[S]) -> Run {
    let output = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_payonce"))
        .args(args)
        .env_remove("USER")
        .output()
        .unwrap();
    Run {
        code: output.status.code().expect("the binary exits, not killed"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}
