//! What can stop a benchmark, with the facts to find the cause.

use std::fmt;
use std::io;
use std::path::PathBuf;

use payonce::LedgerError;
use payonce_log::LogError;
use payonce_model::FieldError;
use payonce_model::codec::CodecError;

/// An error from the harness or one of the stores it drives.
#[derive(Debug)]
#[non_exhaustive]
pub enum BenchError {
    /// A setting is outside its limits; nothing was run.
    Setting {
        /// The setting.
        setting: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// A generated value failed the model's validation: a harness bug.
    Invalid(FieldError),
    /// A file or directory could not be read or written.
    Io {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// payonce failed (not a refusal: refusals are answers).
    Ledger {
        /// The request key, if the failure was about one.
        key: Option<String>,
        /// What the ledger said (boxed: it is large, and rare).
        source: Box<LedgerError>,
    },
    /// payonce's log could not be read for counting.
    Log {
        /// The log's directory.
        dir: PathBuf,
        /// What the log said.
        source: LogError,
    },
    /// SQLite failed.
    Sqlite {
        /// The protocol step that failed.
        step: &'static str,
        /// The request key, if the failure was about one.
        key: Option<String>,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// sled failed.
    Sled {
        /// The protocol step that failed.
        step: &'static str,
        /// The request key, if the failure was about one.
        key: Option<String>,
        /// What sled said.
        source: sled::Error,
    },
    /// A stored value could not be encoded or decoded.
    Codec {
        /// What was being encoded or decoded.
        what: &'static str,
        /// What the codec said.
        source: CodecError,
    },
    /// A store answered something the protocol cannot produce: a harness
    /// or store bug.
    Unexpected {
        /// The store.
        store: &'static str,
        /// The request key.
        key: String,
        /// What it answered.
        answer: String,
    },
    /// PostgreSQL failed, in the plain implementation or the raw inserts.
    Postgres {
        /// The step that failed.
        step: &'static str,
        /// What the server or the connection said.
        source: postgres::Error,
    },
    /// A worker process of the PostgreSQL benchmark could not be talked
    /// to, or failed.
    Worker {
        /// The worker.
        worker: String,
        /// What went wrong.
        detail: String,
    },
    /// A submitting thread panicked.
    ThreadPanicked {
        /// The thread's index.
        thread: usize,
    },
    /// A figure the harness reads from the system was not there.
    Proc {
        /// The file read.
        path: &'static str,
        /// What was missing.
        field: &'static str,
    },
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = |key: &Option<String>| match key {
            Some(key) => format!(" for request key {key}"),
            None => String::new(),
        };
        match self {
            BenchError::Setting {
                setting,
                value,
                rule,
            } => write!(f, "setting {setting} = {value}: must be {rule}"),
            BenchError::Invalid(error) => write!(f, "generated an invalid value: {error}"),
            BenchError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            BenchError::Ledger { key: k, source } => {
                write!(f, "payonce failed{}: {source}", key(k))
            }
            BenchError::Log { dir, source } => {
                write!(f, "reading the log in {}: {source}", dir.display())
            }
            BenchError::Sqlite {
                step,
                key: k,
                source,
            } => write!(f, "SQLite failed at {step}{}: {source}", key(k)),
            BenchError::Sled {
                step,
                key: k,
                source,
            } => write!(f, "sled failed at {step}{}: {source}", key(k)),
            BenchError::Codec { what, source } => write!(f, "{what}: {source}"),
            BenchError::Unexpected { store, key, answer } => {
                write!(f, "{store} answered request key {key} with {answer}")
            }
            BenchError::Postgres { step, source } => {
                write!(f, "PostgreSQL failed at {step}: {source}")
            }
            BenchError::Worker { worker, detail } => write!(f, "worker {worker}: {detail}"),
            BenchError::ThreadPanicked { thread } => {
                write!(f, "submitting thread {thread} panicked")
            }
            BenchError::Proc { path, field } => write!(f, "{path} has no {field}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Invalid(error) => Some(error),
            BenchError::Io { source, .. } => Some(source),
            BenchError::Ledger { source, .. } => Some(source.as_ref()),
            BenchError::Log { source, .. } => Some(source),
            BenchError::Sqlite { source, .. } => Some(source),
            BenchError::Sled { source, .. } => Some(source),
            BenchError::Codec { source, .. } => Some(source),
            BenchError::Postgres { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<FieldError> for BenchError {
    fn from(error: FieldError) -> Self {
        BenchError::Invalid(error)
    }
}

impl From<LedgerError> for BenchError {
    fn from(source: LedgerError) -> Self {
        BenchError::ledger(None)(source)
    }
}

impl BenchError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> BenchError {
        let path = path.into();
        move |source| BenchError::Io { path, source }
    }

    pub(crate) fn ledger(key: Option<&str>) -> impl FnOnce(LedgerError) -> BenchError {
        let key = key.map(str::to_owned);
        move |source| BenchError::Ledger {
            key,
            source: Box::new(source),
        }
    }

    pub(crate) fn sqlite(
        step: &'static str,
        key: Option<&str>,
    ) -> impl FnOnce(rusqlite::Error) -> BenchError {
        let key = key.map(str::to_owned);
        move |source| BenchError::Sqlite { step, key, source }
    }

    pub(crate) fn sled(
        step: &'static str,
        key: Option<&str>,
    ) -> impl FnOnce(sled::Error) -> BenchError {
        let key = key.map(str::to_owned);
        move |source| BenchError::Sled { step, key, source }
    }

    pub(crate) fn codec(what: &'static str) -> impl FnOnce(CodecError) -> BenchError {
        move |source| BenchError::Codec { what, source }
    }
}
