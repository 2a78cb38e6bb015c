//! Why a command could not do its job, which exit code says so, and the
//! one JSON object a `--json` command prints instead of its report.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use payonce::{Divergence, LedgerError, Refusal, StoreError};
use payonce_log::LogError;
use payonce_model::FieldError;
use serde::Serialize;
use serde_json::Value;

use crate::escape::{
    ECHO_LEN_MAX, ECHO_PATH_LEN_MAX, Echo, EchoPath, Escaped, bounded, bounded_within,
};

/// Exit code: the command worked and found nothing wrong.
pub const EXIT_OK: i32 = 0;
/// Exit code: the command worked and found a problem in the log that needs
/// a look: a torn tail (a write cut short, or one in progress) or a
/// divergence (a recorded decision the code would not make again).
pub const EXIT_PROBLEM: i32 = 1;
/// Exit code: a usage or input error; nothing was changed.
pub const EXIT_USAGE: i32 = 2;
/// Exit code: `inflight --older-than` found keys in flight for longer than
/// that. It takes precedence over [`EXIT_PROBLEM`]: a monitor pages for a
/// stuck key only when there is one, and a torn tail alone is not one.
pub const EXIT_OVERDUE: i32 = 3;
/// Exit code: the log is damaged where it cannot be a torn tail (a
/// checksum, chain, sequence, seal or header that does not verify, or a
/// record that is not an event); the error names the file, offset and
/// sequence number. Nothing was changed.
pub const EXIT_DAMAGED: i32 = 4;
/// Exit code: the command failed for a reason other than its input or the
/// log's content: reading or writing failed (a full disk, a permission),
/// or a bug. The error says what failed and what may have changed.
pub const EXIT_FAILED: i32 = 5;

/// What an operator exit was doing when a write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// Opening the ledger for writing: taking the lock, repairing a torn
    /// tail, appending the `opened` event.
    Opening,
    /// Appending and syncing the operator's own event.
    Recording,
}

/// An error from a `payonce` command.
#[derive(Debug)]
#[non_exhaustive]
pub enum CliError {
    /// The directory given does not exist.
    NoDirectory {
        /// The path given.
        dir: PathBuf,
    },
    /// The path given for the ledger's directory is a file (or anything
    /// else but a directory).
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The directory holds no payonce log (no segment file). `payonce`
    /// commands never create a ledger: only the demo makes its own.
    NotALog {
        /// The path given.
        dir: PathBuf,
        /// What the directory holds instead, when the ledger listed it
        /// (at most `payonce::FOUND_LISTED_MAX` names).
        found: Vec<String>,
    },
    /// The log is damaged where it cannot be a torn tail: a checksum, chain,
    /// sequence, seal or header that does not verify, or a log record that
    /// is not an event. The error names the place. Exit code 4.
    Damaged {
        /// The log directory.
        dir: PathBuf,
        /// What the ledger found, with file, offset and sequence number.
        error: Box<LedgerError>,
    },
    /// An operator exit's read-only replay, or the ledger's opening, met a
    /// recorded decision the code would not make again. Nothing was
    /// written. Exit code 1, as `verify` reports a divergence.
    Diverged {
        /// The log directory.
        dir: PathBuf,
        /// The recorded event and what the code decides instead.
        divergence: Box<Divergence>,
    },
    /// An operator exit found another process (a running service, or
    /// another `payonce resolve`/`correct`/`release`) holding the log's
    /// writer lock.
    Locked {
        /// The log directory.
        dir: PathBuf,
    },
    /// An operator exit's write failed: opening the ledger for writing, or
    /// recording its event (a full disk, an I/O error). Exit code 5.
    WriteFailed {
        /// The log directory.
        dir: PathBuf,
        /// What was being done.
        step: WriteStep,
        /// What failed, with the file.
        error: Box<LedgerError>,
    },
    /// Reading the log failed for a reason other than damage (a
    /// permission, an I/O error). Exit code 5.
    ReadFailed {
        /// The log directory.
        dir: PathBuf,
        /// What failed, with the file.
        error: Box<LedgerError>,
    },
    /// The ledger failed otherwise. Exit code 5.
    Ledger {
        /// The log directory.
        dir: PathBuf,
        /// What failed.
        error: Box<LedgerError>,
    },
    /// A command-line value broke its field's rules (a key with a control
    /// character, an empty note, ...).
    InvalidArgument {
        /// The argument, as named on the command line.
        argument: &'static str,
        /// The value given (echoed escaped and bounded).
        value: String,
        /// The rule it broke.
        error: FieldError,
    },
    /// Arguments that do not make sense together, such as `--from` after
    /// `--to`.
    Usage {
        /// What is wrong.
        message: String,
    },
    /// `--at` (or `report`'s `--from`, `--to`) is neither a sequence
    /// number nor an RFC 3339 time.
    BadPoint {
        /// The argument.
        argument: &'static str,
        /// The text given.
        text: String,
    },
    /// `--at` (or `report`'s `--from`, `--to`) is an RFC 3339 time outside
    /// the times a ledger records.
    PointOutOfRange {
        /// The argument.
        argument: &'static str,
        /// The text given.
        text: String,
    },
    /// `--at`, `--from` or `--to` names a sequence number past the end of
    /// the log.
    PointPastEnd {
        /// The argument: `--at` or `--from`.
        argument: &'static str,
        /// The sequence number asked for.
        seq: u64,
        /// The log's last sequence number.
        last_seq: u64,
    },
    /// `report --from` or `--to` is a time outside the log's: after its
    /// last event, or before its first.
    OutsideLog {
        /// The argument: `--from` or `--to`.
        argument: &'static str,
        /// The time asked for.
        asked: String,
        /// The log's first event: sequence number and time.
        first: (u64, String),
        /// The log's last event: sequence number and time.
        last: (u64, String),
    },
    /// `report` was asked for more than a page holds: a window with more
    /// events than `REPORT_EVENTS_MAX`, or a page larger than
    /// `REPORT_BYTES_MAX`. Nothing was written.
    ReportTooLarge {
        /// The limit's name.
        limit_name: &'static str,
        /// The limit.
        limit: usize,
        /// What the window held, where it was counted whole (events; a
        /// page stops being written at the limit).
        found: Option<usize>,
        /// What is counted: `events` or `bytes`.
        unit: &'static str,
    },
    /// `history --key` names a request key no event mentions.
    UnknownKey {
        /// The key.
        key: String,
    },
    /// `history --withdrawal` names a withdrawal no event mentions.
    UnknownWithdrawal {
        /// The withdrawal id.
        withdrawal: String,
    },
    /// The outcome file of `resolve` or `correct` cannot be read, is too
    /// large, or is not a valid withdrawal.
    OutcomeFile {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The ledger refused an operator exit; nothing was written.
    Refused {
        /// Why, with the facts.
        refusal: Box<Refusal>,
    },
    /// `release` named a key that has no record: there is nothing to
    /// release (a typing mistake, or a key already released).
    NoRecord {
        /// The key.
        key: String,
    },
    /// An operator exit has no operator: neither `--by` nor `$USER`.
    NoOperator,
    /// `demo DIR` was given a directory that is not empty.
    DemoDirectoryInUse {
        /// The directory.
        dir: PathBuf,
    },
    /// The demo did not go as scripted: a bug, reported with what happened.
    DemoFailed {
        /// What went differently.
        step: String,
    },
    /// `payonce index` could not open, build or write the audit index.
    Index {
        /// The index directory.
        path: PathBuf,
        /// What failed.
        problem: String,
    },
    /// Writing the output failed (other than a closed pipe), or creating
    /// the demo's directory failed.
    Io {
        /// What was being done.
        doing: String,
        /// The operating system's error.
        error: io::Error,
    },
}

/// Where an error is, as far as it says: for `--json` failures.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Location {
    file: Option<String>,
    offset: Option<u64>,
    seq: Option<u64>,
}

impl Location {
    fn file(path: &Path) -> Location {
        Location {
            file: Some(bounded(&path.display().to_string(), ECHO_PATH_LEN_MAX).into_owned()),
            ..Location::default()
        }
    }

    fn of_ledger(error: &LedgerError) -> Location {
        match error {
            LedgerError::Log(error) => Location::of_log(error),
            LedgerError::BadEvent { seq, .. } | LedgerError::MisplacedEvent { seq, .. } => {
                Location {
                    seq: Some(*seq),
                    ..Location::default()
                }
            }
            LedgerError::Divergence(divergence) => Location {
                seq: Some(divergence.seq),
                ..Location::default()
            },
            _ => Location::default(),
        }
    }

    fn of_log(error: &LogError) -> Location {
        let file = |file: &str| Some(bounded(file, ECHO_PATH_LEN_MAX).into_owned());
        match error {
            LogError::Corrupt {
                file: at,
                offset,
                seq,
                ..
            } => Location {
                file: file(at),
                offset: Some(*offset),
                seq: Some(*seq),
            },
            LogError::Io { file: at, .. } | LogError::SegmentTooLong { file: at, .. } => Location {
                file: file(at),
                ..Location::default()
            },
            LogError::Poisoned { cause } => Location::of_log(cause),
            _ => Location::default(),
        }
    }
}

/// What a `--json` command prints on stdout when it fails: one object.
#[derive(Debug, Serialize)]
struct ErrorJson {
    /// The kind of failure, a stable snake_case name.
    error: &'static str,
    /// The error in words, as on stderr.
    message: String,
    exit_code: i32,
    file: Option<String>,
    offset: Option<u64>,
    seq: Option<u64>,
    /// The ledger's refusal as data, for a refused operator exit.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Value>,
}

impl CliError {
    /// The process exit code for this error; see [`EXIT_USAGE`] and the
    /// constants beside it.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Diverged { .. } => EXIT_PROBLEM,
            CliError::Damaged { .. } => EXIT_DAMAGED,
            CliError::WriteFailed { .. }
            | CliError::ReadFailed { .. }
            | CliError::Ledger { .. }
            | CliError::DemoFailed { .. }
            | CliError::Io { .. } => EXIT_FAILED,
            _ => EXIT_USAGE,
        }
    }

    /// The kind of failure as a stable snake_case name, the `error` field
    /// of [`CliError::to_json_line`].
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::NoDirectory { .. } => "no_directory",
            CliError::NotADirectory { .. } => "not_a_directory",
            CliError::NotALog { .. } => "not_a_log",
            CliError::Damaged { .. } => "damaged",
            CliError::Diverged { .. } => "divergence",
            CliError::Locked { .. } => "locked",
            CliError::WriteFailed { .. } => "write_failed",
            CliError::ReadFailed { .. } => "read_failed",
            CliError::Ledger { .. } => "ledger_failed",
            CliError::InvalidArgument { .. } => "invalid_argument",
            CliError::Usage { .. } => "usage",
            CliError::BadPoint { .. } => "bad_point",
            CliError::PointOutOfRange { .. } => "point_out_of_range",
            CliError::PointPastEnd { .. } => "point_past_end",
            CliError::OutsideLog { .. } => "outside_log",
            CliError::ReportTooLarge { .. } => "report_too_large",
            CliError::UnknownKey { .. } => "unknown_key",
            CliError::UnknownWithdrawal { .. } => "unknown_withdrawal",
            CliError::OutcomeFile { .. } => "outcome_file",
            CliError::Refused { .. } => "refused",
            CliError::NoRecord { .. } => "no_record",
            CliError::NoOperator => "no_operator",
            CliError::DemoDirectoryInUse { .. } => "demo_directory_in_use",
            CliError::DemoFailed { .. } => "demo_failed",
            CliError::Index { .. } => "index",
            CliError::Io { .. } => "io",
        }
    }

    fn location(&self) -> Location {
        match self {
            CliError::NoDirectory { dir }
            | CliError::NotALog { dir, .. }
            | CliError::Locked { dir }
            | CliError::DemoDirectoryInUse { dir } => Location::file(dir),
            CliError::NotADirectory { path } | CliError::Index { path, .. } => Location::file(path),
            CliError::OutcomeFile { file, .. } => Location::file(file),
            CliError::Damaged { error, .. }
            | CliError::WriteFailed { error, .. }
            | CliError::ReadFailed { error, .. }
            | CliError::Ledger { error, .. } => Location::of_ledger(error),
            CliError::Diverged { divergence, .. } => Location {
                seq: Some(divergence.seq),
                ..Location::default()
            },
            CliError::PointPastEnd { seq, .. } => Location {
                seq: Some(*seq),
                ..Location::default()
            },
            _ => Location::default(),
        }
    }

    /// The one JSON object a command given `--json` prints on stdout when
    /// it fails: `error` (its [`CliError::kind`]), `message`, `exit_code`,
    /// and `file`, `offset` and `seq` (null where not known).
    pub fn to_json_line(&self) -> String {
        let Location { file, offset, seq } = self.location();
        let refusal = match self {
            CliError::Refused { refusal } => serde_json::to_value(refusal).ok(),
            _ => None,
        };
        let report = ErrorJson {
            error: self.kind(),
            message: self.to_string(),
            exit_code: self.exit_code(),
            file,
            offset,
            seq,
            refusal,
        };
        // Plain data; serialising it cannot fail. Written here rather than
        // through `json::to_json`, which would make the error module depend
        // on the modules that report errors.
        serde_json::to_string(&report).unwrap_or_else(|_| {
            format!(
                "{{\"error\":\"{}\",\"exit_code\":{}}}",
                report.error, report.exit_code
            )
        })
    }

    /// Sorts a ledger error met while reading or opening the log in `dir`.
    pub(crate) fn from_ledger(dir: impl Into<PathBuf>, error: LedgerError) -> CliError {
        let dir = dir.into();
        match error {
            LedgerError::Log(LogError::NotALog { .. }) => CliError::NotALog {
                dir,
                found: Vec::new(),
            },
            LedgerError::NoLog { found, .. } => CliError::NotALog { dir, found },
            LedgerError::Log(LogError::Locked { .. }) => CliError::Locked { dir },
            LedgerError::Log(
                LogError::Corrupt { .. }
                | LogError::SegmentTooLong { .. }
                | LogError::MissingHead { .. }
                | LogError::HeadMismatch { .. },
            )
            | LedgerError::BadEvent { .. }
            | LedgerError::MisplacedEvent { .. } => CliError::Damaged {
                dir,
                error: Box::new(error),
            },
            LedgerError::Store(StoreError::Damaged { .. }) => CliError::Damaged {
                dir,
                error: Box::new(error),
            },
            LedgerError::Store(StoreError::Failed { .. } | StoreError::Unknown { .. }) => {
                CliError::ReadFailed {
                    dir,
                    error: Box::new(error),
                }
            }
            LedgerError::Divergence(divergence) => CliError::Diverged { dir, divergence },
            LedgerError::Refused(refusal) => CliError::Refused {
                refusal: Box::new(refusal),
            },
            LedgerError::Log(LogError::Io { .. } | LogError::Poisoned { .. }) => {
                CliError::ReadFailed {
                    dir,
                    error: Box::new(error),
                }
            }
            error => CliError::Ledger {
                dir,
                error: Box::new(error),
            },
        }
    }

    /// Sorts a ledger error met while an operator exit writes: a failed
    /// write is told apart from the refusals and damage reading can meet.
    pub(crate) fn from_writer(dir: &Path, step: WriteStep, error: LedgerError) -> CliError {
        match error {
            LedgerError::Store(StoreError::Failed { .. } | StoreError::Unknown { .. }) => {
                CliError::WriteFailed {
                    dir: dir.to_owned(),
                    step,
                    error: Box::new(error),
                }
            }
            LedgerError::Log(LogError::Io { .. } | LogError::Poisoned { .. }) => {
                CliError::WriteFailed {
                    dir: dir.to_owned(),
                    step,
                    error: Box::new(error),
                }
            }
            error => CliError::from_ledger(dir, error),
        }
    }

    pub(crate) fn output(error: io::Error) -> CliError {
        CliError::Io {
            doing: "writing the output".to_owned(),
            error,
        }
    }
}

/// A library's error about the log in `dir`, escaped, with the directory
/// bounded wherever the text names it.
fn ledger_words(dir: &Path, error: &impl fmt::Display) -> String {
    bounded_within(
        &error.to_string(),
        &[&dir.display().to_string()],
        ECHO_PATH_LEN_MAX,
    )
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::NoDirectory { dir } => write!(f, "{} does not exist", EchoPath(dir)),
            CliError::NotADirectory { path } => write!(
                f,
                "{} is not a directory: give the ledger's directory, the one that holds its \
                 segment files (0000...0001.log)",
                EchoPath(path)
            ),
            CliError::NotALog { dir, found } => {
                write!(
                    f,
                    "{} is not a payonce log: it holds no segment file (0000...0001.log)",
                    EchoPath(dir)
                )?;
                if !found.is_empty() {
                    let found: Vec<String> = found.iter().map(|n| Echo(n).to_string()).collect();
                    write!(f, " but {}", found.join(", "))?;
                }
                f.write_str(". payonce commands never create a ledger")
            }
            CliError::Damaged { dir, error } => write!(
                f,
                "the log in {} is damaged: {}. Nothing was changed",
                EchoPath(dir),
                ledger_words(dir, error)
            ),
            CliError::Diverged { dir, divergence } => write!(
                f,
                "the log in {} holds a decision the code would not make again: {}. Nothing was \
                 written; `payonce verify` lists every divergence",
                EchoPath(dir),
                ledger_words(dir, divergence)
            ),
            CliError::Locked { dir } => write!(
                f,
                "the ledger in {} is open for writing by another process (a running service holds \
                 its writer lock); stop it, or close the key through the service, then try again. \
                 Nothing was written",
                EchoPath(dir)
            ),
            CliError::WriteFailed { dir, step, error } => write_failed_words(f, dir, *step, error),
            CliError::ReadFailed { dir, error } => write!(
                f,
                "reading the log in {} failed: {}. Nothing was changed",
                EchoPath(dir),
                ledger_words(dir, &first_failure(error))
            ),
            CliError::Ledger { dir, error } => write!(
                f,
                "the ledger in {}: {}",
                EchoPath(dir),
                ledger_words(dir, error)
            ),
            CliError::InvalidArgument {
                argument,
                value,
                error,
            } => write!(f, "{argument} \"{}\" is refused: {error}", Echo(value)),
            CliError::Usage { message } => write!(f, "{}", Escaped(message)),
            CliError::OutsideLog { .. } | CliError::ReportTooLarge { .. } => self.fmt_report(f),
            other => other.fmt_query(f),
        }
    }
}

/// The failure itself: a poisoned log says "a previous write failed;
/// reopen the log", which is advice for a service; a command that failed
/// once says what failed.
fn first_failure(error: &LedgerError) -> String {
    let mut log = match error {
        LedgerError::Log(log) => log,
        other => return other.to_string(),
    };
    while let LogError::Poisoned { cause } = log {
        log = cause;
    }
    log.to_string()
}

/// What a failed write of an operator exit changed, in words.
fn write_failed_words(
    f: &mut fmt::Formatter<'_>,
    dir: &Path,
    step: WriteStep,
    error: &LedgerError,
) -> fmt::Result {
    let error = ledger_words(dir, &first_failure(error));
    match step {
        WriteStep::Opening => write!(
            f,
            "opening the ledger in {} for writing failed: {error}. The key was not changed. If \
             the failure cut a write short, the log now ends in a torn tail, which the next \
             writer to open it saves aside and cuts; free the space (or fix the fault) and try \
             again",
            EchoPath(dir)
        ),
        WriteStep::Recording => write!(
            f,
            "recording the operator's event in {} failed: {error}. It may or may not have \
             reached the disk: look at the key's history before trying again",
            EchoPath(dir)
        ),
    }
}

impl CliError {
    /// The words of the errors about the window a report was asked for.
    fn fmt_report(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::OutsideLog {
                argument,
                asked,
                first,
                last,
            } => write!(
                f,
                "{argument} {} is outside the log, whose events run from seq {} ({}) to seq {} \
                 ({}). Nothing was written",
                Echo(asked),
                first.0,
                first.1,
                last.0,
                last.1
            ),
            CliError::ReportTooLarge {
                limit_name,
                limit,
                found,
                unit,
            } => write!(
                f,
                "the report would hold more than {limit_name}, {limit} {unit}{}: give a \
                 narrower window (--from, --to) or name the keys or withdrawals to follow (--key, \
                 --withdrawal). Nothing was written",
                found.map_or_else(String::new, |found| format!("; the window holds {found}"))
            ),
            other => other.fmt_query(f),
        }
    }

    /// The words of the errors about what a command was asked: points,
    /// subjects, files, refusals, the demo and the index.
    fn fmt_query(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::BadPoint { argument, text } => write!(
                f,
                "{argument} \"{}\" is neither a sequence number (like 42) nor an RFC 3339 time (like \
                 2026-11-30T12:03:07Z or 2026-11-30T13:03:07+01:00)",
                Echo(text)
            ),
            CliError::PointOutOfRange { argument, text } => write!(
                f,
                "{argument} \"{}\" is outside the times a ledger records: from {} to {}",
                Echo(text),
                payonce::Timestamp::from_unix_nanos(0),
                payonce::Timestamp::from_unix_nanos(u64::MAX)
            ),
            CliError::PointPastEnd {
                argument,
                seq,
                last_seq,
            } => write!(
                f,
                "{argument} {seq} is past the end of the log, whose last event is {last_seq}"
            ),
            CliError::UnknownKey { key } => {
                write!(
                    f,
                    "request key {} appears in no event of this log",
                    Echo(key)
                )
            }
            CliError::UnknownWithdrawal { withdrawal } => write!(
                f,
                "withdrawal {} appears in no event of this log",
                Echo(withdrawal)
            ),
            CliError::OutcomeFile { file, problem } => {
                write!(f, "outcome file {}: {}", EchoPath(file), Escaped(problem))
            }
            CliError::Refused { refusal } => {
                let named: Vec<&str> = [refusal.key(), refusal.holder()]
                    .into_iter()
                    .flatten()
                    .map(|key| key.as_str())
                    .chain(refusal.withdrawal().map(|id| id.as_str()))
                    .collect();
                write!(
                    f,
                    "refused: {}; the key was not changed",
                    bounded_within(&refusal.to_string(), &named, ECHO_LEN_MAX)
                )
            }
            CliError::NoRecord { key } => write!(
                f,
                "request key {} has no record in this ledger (never claimed, or already \
                 released): there is nothing to release; nothing was written",
                Echo(key)
            ),
            CliError::NoOperator => f.write_str(
                "no operator: pass --by NAME (or set $USER) so the event records who acted",
            ),
            other => other.fmt_tooling(f),
        }
    }

    /// The words of the errors of the demo, the index and the output.
    fn fmt_tooling(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::DemoDirectoryInUse { dir } => write!(
                f,
                "{} is not empty: the demo needs a new or empty directory",
                EchoPath(dir)
            ),
            CliError::DemoFailed { step } => {
                write!(
                    f,
                    "the demo went differently than scripted: {}",
                    Escaped(step)
                )
            }
            CliError::Index { path, problem } => {
                write!(f, "audit index {}: {}", EchoPath(path), Escaped(problem))
            }
            CliError::Io { doing, error } => {
                write!(f, "{}: {}", Escaped(doing), Escaped(&error.to_string()))
            }
            // Every other variant is worded by `fmt` or `fmt_query`.
            other => write!(f, "{}", other.kind()),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Damaged { error, .. }
            | CliError::WriteFailed { error, .. }
            | CliError::ReadFailed { error, .. }
            | CliError::Ledger { error, .. } => Some(error.as_ref()),
            CliError::InvalidArgument { error, .. } => Some(error),
            CliError::Refused { refusal } => Some(refusal.as_ref()),
            CliError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}
