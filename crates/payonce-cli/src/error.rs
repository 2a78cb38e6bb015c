//! Why a command could not do its job, and which exit code says so.

use std::fmt;
use std::io;
use std::path::PathBuf;

use payonce::{LedgerError, Refusal};
use payonce_log::LogError;
use payonce_model::FieldError;

use crate::escape::Escaped;

/// Exit code: the command worked and found nothing wrong.
pub const EXIT_OK: i32 = 0;
/// Exit code: the command worked and found a problem (damage, a divergence,
/// a torn tail, or keys in flight past `--older-than`).
pub const EXIT_PROBLEM: i32 = 1;
/// Exit code: a usage or input error; nothing was changed.
pub const EXIT_USAGE: i32 = 2;

/// An error from a `payonce` command.
#[derive(Debug)]
#[non_exhaustive]
pub enum CliError {
    /// The directory given does not exist or is not a directory.
    NoDirectory {
        /// The path given.
        dir: PathBuf,
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
    /// sequence, seal or header that does not verify, a log record that is
    /// not an event, or (for the operator exits) a recorded decision the code
    /// would not make again. The error names the place. Exit code 1.
    Damaged {
        /// The log directory.
        dir: PathBuf,
        /// What the ledger found, with file, offset and sequence number.
        error: Box<LedgerError>,
    },
    /// An operator exit found another process (a running service, or
    /// another `payonce resolve`/`release`) holding the log's writer lock.
    Locked {
        /// The log directory.
        dir: PathBuf,
    },
    /// Reading or writing the log failed for a reason other than damage,
    /// such as an I/O error.
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
        /// The value given (printed escaped).
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
    /// `--at` is neither a sequence number nor an RFC 3339 time.
    BadPoint {
        /// The text given.
        text: String,
    },
    /// `--at` names a sequence number past the end of the log.
    PointPastEnd {
        /// The sequence number asked for.
        seq: u64,
        /// The log's last sequence number.
        last_seq: u64,
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
    /// The outcome file of `resolve` cannot be read, is too large, or is not
    /// a valid withdrawal.
    OutcomeFile {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The ledger refused an operator's resolve or release; nothing was
    /// written.
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

impl CliError {
    /// The process exit code for this error: 1 for damage found in the log,
    /// 2 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Damaged { .. } => EXIT_PROBLEM,
            _ => EXIT_USAGE,
        }
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
            LedgerError::Log(LogError::Corrupt { .. } | LogError::SegmentTooLong { .. })
            | LedgerError::BadEvent { .. }
            | LedgerError::MisplacedEvent { .. }
            | LedgerError::Divergence(_) => CliError::Damaged {
                dir,
                error: Box::new(error),
            },
            LedgerError::Refused(refusal) => CliError::Refused {
                refusal: Box::new(refusal),
            },
            error => CliError::Ledger {
                dir,
                error: Box::new(error),
            },
        }
    }

    pub(crate) fn output(error: io::Error) -> CliError {
        CliError::Io {
            doing: "writing the output".to_owned(),
            error,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = |p: &PathBuf| p.display().to_string();
        match self {
            CliError::NoDirectory { dir } => {
                write!(
                    f,
                    "{} does not exist or is not a directory",
                    Escaped(&path(dir))
                )
            }
            CliError::NotALog { dir, found } => {
                write!(
                    f,
                    "{} is not a payonce log: it holds no segment file (0000...0001.log)",
                    Escaped(&path(dir))
                )?;
                if !found.is_empty() {
                    write!(f, " but {}", Escaped(&found.join(", ")))?;
                }
                f.write_str(". payonce commands never create a ledger")
            }
            CliError::Damaged { dir, error } => write!(
                f,
                "the log in {} is damaged: {}",
                Escaped(&path(dir)),
                Escaped(&error.to_string())
            ),
            CliError::Locked { dir } => write!(
                f,
                "the ledger in {} is open for writing by another process (a running service holds \
                 its writer lock); stop it, or close the key through the service, then try again. \
                 Nothing was written",
                Escaped(&path(dir))
            ),
            CliError::Ledger { dir, error } => write!(
                f,
                "the ledger in {}: {}",
                Escaped(&path(dir)),
                Escaped(&error.to_string())
            ),
            CliError::InvalidArgument {
                argument,
                value,
                error,
            } => write!(f, "{argument} \"{}\" is refused: {error}", Escaped(value)),
            CliError::Usage { message } => write!(f, "{}", Escaped(message)),
            CliError::BadPoint { text } => write!(
                f,
                "--at \"{}\" is neither a sequence number (like 42) nor an RFC 3339 time (like \
                 2026-11-30T12:03:07Z or 2026-11-30T13:03:07+01:00)",
                Escaped(text)
            ),
            CliError::PointPastEnd { seq, last_seq } => {
                write!(
                    f,
                    "--at {seq} is past the end of the log, whose last event is {last_seq}"
                )
            }
            CliError::UnknownKey { key } => {
                write!(
                    f,
                    "request key {} appears in no event of this log",
                    Escaped(key)
                )
            }
            CliError::UnknownWithdrawal { withdrawal } => write!(
                f,
                "withdrawal {} appears in no event of this log",
                Escaped(withdrawal)
            ),
            CliError::OutcomeFile { file, problem } => write!(
                f,
                "outcome file {}: {}",
                Escaped(&path(file)),
                Escaped(problem)
            ),
            CliError::Refused { refusal } => {
                write!(
                    f,
                    "refused: {}; the key was not changed",
                    Escaped(&refusal.to_string())
                )
            }
            CliError::NoRecord { key } => write!(
                f,
                "request key {} has no record in this ledger (never claimed, or already \
                 released): there is nothing to release; nothing was written",
                Escaped(key)
            ),
            CliError::NoOperator => f.write_str(
                "no operator: pass --by NAME (or set $USER) so the event records who acted",
            ),
            CliError::DemoDirectoryInUse { dir } => write!(
                f,
                "{} is not empty: the demo needs a new or empty directory",
                Escaped(&path(dir))
            ),
            CliError::DemoFailed { step } => {
                write!(
                    f,
                    "the demo went differently than scripted: {}",
                    Escaped(step)
                )
            }
            CliError::Index { path: p, problem } => {
                write!(f, "audit index {}: {}", Escaped(&path(p)), Escaped(problem))
            }
            CliError::Io { doing, error } => {
                write!(f, "{}: {}", Escaped(doing), Escaped(&error.to_string()))
            }
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Damaged { error, .. } | CliError::Ledger { error, .. } => {
                Some(error.as_ref())
            }
            CliError::InvalidArgument { error, .. } => Some(error),
            CliError::Refused { refusal } => Some(refusal.as_ref()),
            CliError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}
