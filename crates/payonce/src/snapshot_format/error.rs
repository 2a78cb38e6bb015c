//! Why a snapshot was refused, or could not be written: typed, with the
//! facts (field, offset, limit), so the open that falls back past it, the
//! CLI and tracing all say the same.

use std::fmt;
use std::io;

use payonce_log::Head;
use payonce_runs::RunError;

/// A snapshot that cannot be used, or written. A refused snapshot is set
/// aside, never deleted, and opening falls back to an older one or to a
/// full replay.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading, writing, syncing, listing or renaming failed, in a file
    /// or in the database that keeps it: nothing is known of the snapshot,
    /// and an opening leaves it in place.
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or row, for a person.
        file: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The bytes are shorter or longer than their header says, or than a
    /// header.
    Length {
        /// What the header says the snapshot holds, in bytes (the header's
        /// own length for bytes too short to hold one).
        expected: u64,
        /// What there is.
        found: u64,
    },
    /// A snapshot larger than `SNAPSHOT_LEN_MAX`, refused before
    /// it is read.
    TooLong {
        /// Its length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The header's or the body's checksum does not verify.
    Checksum {
        /// `"header"` or `"body"`.
        part: &'static str,
        /// The checksum stored.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// Written in a snapshot format this build does not read.
    Version {
        /// The format the snapshot says it is in.
        found: u32,
        /// The format this build reads and writes.
        supported: u32,
    },
    /// Taken under another event schema than this build's: its meaning of
    /// the events may differ, so it is replayed again instead.
    Schema {
        /// The schema the snapshot was taken under.
        found: u32,
        /// This build's.
        supported: u32,
    },
    /// Taken of another log: its identity is not this log's.
    OtherLog {
        /// The log id the snapshot names.
        found: u64,
        /// This log's.
        expected: u64,
    },
    /// The log does not hold the head the snapshot names: a snapshot of
    /// another history, of a log rewritten since, or of one later cut.
    HeadNotInLog {
        /// The head the snapshot names.
        head: Head,
        /// What the log holds at that seq: another head, or none (it ends
        /// before it, or no batch ends there).
        found: Option<Head>,
    },
    /// A field breaks its rule, or a limit: the first one found, at its
    /// offset in the snapshot's bytes.
    Invalid {
        /// Which field, as docs/snapshot-format.md names it.
        field: &'static str,
        /// Its offset from the snapshot's first byte: where the field
        /// starts (a text, at its length). 0 for a check across records,
        /// made once all are read (a currency's totals against its
        /// withdrawals' funds, funds outside a claim).
        offset: u64,
        /// What it should be.
        expected: String,
        /// What it is.
        found: String,
    },
    /// The state holds what only a log that diverged leaves (a withdrawal
    /// two keys name): it is never snapshotted.
    Diverged {
        /// The withdrawal.
        withdrawal: String,
    },
    /// The store cannot keep or give the snapshot as asked: it holds one
    /// wrongly (a chunk missing, more or fewer chunks than its length
    /// needs), or the log it would be taken of vouches for none.
    Store {
        /// What the store said.
        detail: String,
    },
    /// A run of settled pairs the manifest names cannot be used: missing,
    /// damaged (its section and offset), another than the manifest names
    /// (its length, checksum or hash key), or unreadable.
    Run {
        /// The run's number.
        run: u64,
        /// What is wrong with it.
        error: RunError,
    },
    /// A settled pair read from a run breaks a rule replay checks.
    Pair {
        /// The run's number.
        run: u64,
        /// The pair's key, as read.
        key: String,
        /// Which rule, and where in the record.
        detail: String,
    },
}

impl SnapshotError {
    /// Whether the snapshot was written by a newer build than this one (a
    /// later format or event schema): nothing says it is wrong, and a
    /// build that reads it may open the ledger next, as in a rolling
    /// deploy. An opening refuses it but leaves it in place.
    pub fn needs_a_newer_build(&self) -> bool {
        match *self {
            SnapshotError::Version { found, supported }
            | SnapshotError::Schema { found, supported } => found > supported,
            _ => false,
        }
    }

    /// A name listed twice in a section starting at `offset`.
    pub(crate) fn listed_twice(field: &'static str, offset: u64, name: String) -> SnapshotError {
        SnapshotError::Invalid {
            field,
            offset,
            expected: "each name listed once".to_owned(),
            found: format!("{name:?} twice"),
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io { op, file, source } => write!(f, "{op} {file}: {source}"),
            SnapshotError::Length { expected, found } => {
                write!(f, "{found} bytes where the header says {expected}")
            }
            SnapshotError::TooLong { len, max } => {
                write!(f, "{len} bytes, more than the limit of {max}")
            }
            SnapshotError::Checksum {
                part,
                stored,
                computed,
            } => write!(
                f,
                "the {part}'s checksum is {computed:#010x}, the stored one {stored:#010x}"
            ),
            SnapshotError::Version { found, supported } => write!(
                f,
                "snapshot format {found}, where this build reads format {supported}"
            ),
            SnapshotError::Schema { found, supported } => write!(
                f,
                "taken under event schema {found}, where this build decides under {supported}"
            ),
            SnapshotError::OtherLog { found, expected } => write!(
                f,
                "a snapshot of log {found:#018x}, not of this log ({expected:#018x})"
            ),
            SnapshotError::HeadNotInLog { head, found } => match found {
                Some(found) => write!(f, "names head {head}, where the log holds {found}"),
                None => write!(f, "names head {head}, which no batch of the log ends at"),
            },
            SnapshotError::Invalid {
                field,
                offset,
                expected,
                found,
            } => write!(
                f,
                "{field} at byte {offset}: expected {expected}, found {found}"
            ),
            SnapshotError::Diverged { withdrawal } => write!(
                f,
                "withdrawal {withdrawal} is named by two keys, which only a diverged log leaves"
            ),
            SnapshotError::Store { detail } => f.write_str(detail),
            SnapshotError::Run { run, error } => write!(f, "run {run}: {error}"),
            SnapshotError::Pair { run, key, detail } => {
                write!(f, "run {run}, the pair of key {key:?}: {detail}")
            }
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io { source, .. } => Some(source),
            SnapshotError::Run { error, .. } => Some(error),
            _ => None,
        }
    }
}
