//! Why the log refused: typed, so a caller can branch on what happened and
//! print where.

use std::fmt;
use std::io;
use std::sync::Arc;

use crate::chain::Head;
use crate::record::TornTail;

/// Everything that can go wrong opening, writing or reading a log.
#[derive(Debug)]
#[non_exhaustive]
pub enum LogError {
    /// A storage operation failed: a read, write, fdatasync, create, rename,
    /// remove or directory sync. Writes, syncs, creates, renames and
    /// directory syncs by a [`crate::Log`] also poison it.
    Io {
        /// The operation, such as "fdatasync" or "rename".
        op: &'static str,
        /// The file or directory it was applied to.
        file: String,
        /// What the operating system (or the fault injector) reported.
        source: io::Error,
    },
    /// Opening for writing found another writer holding the directory's lock,
    /// in this process or another.
    Locked {
        /// The log directory.
        dir: String,
    },
    /// Opening read-only found no segment file in the directory (or no
    /// directory at all).
    NotALog {
        /// The directory.
        dir: String,
    },
    /// A [`crate::LogConfig`] setting is out of range; nothing was opened.
    InvalidConfig {
        /// The setting's field name.
        setting: &'static str,
        /// The value given.
        value: u64,
        /// The rule it broke.
        rule: String,
    },
    /// [`crate::Log::append`] was given a payload longer than the configured
    /// record maximum. Nothing was written and the log is still usable.
    RecordTooLarge {
        /// The payload's length in bytes.
        len: u64,
        /// The configured maximum.
        max: u64,
    },
    /// An earlier write, sync, create, rename or directory sync failed, so
    /// nothing more is accepted or reported durable: a retried fsync can
    /// report success for data that never reached the disk. Reopen the log.
    Poisoned {
        /// The failure that poisoned the writer.
        cause: Arc<LogError>,
    },
    /// Bytes on disk do not verify: a damaged or foreign header, a checksum
    /// or chain mismatch, a gap, overlap or reorder of sequence numbers, a
    /// missing or renamed segment, or damage followed by valid records.
    /// Opening refuses; nothing is repaired.
    Corrupt {
        /// The segment file.
        file: String,
        /// Byte offset in the file of the frame or field that does not verify.
        offset: u64,
        /// The sequence number expected there.
        seq: u64,
        /// The kind of damage.
        damage: Damage,
        /// What a good log has there.
        expected: String,
        /// What this one has.
        found: String,
    },
    /// A segment file is longer than the configured segment maximum; it is
    /// refused before being read into memory. A log must be opened with a
    /// configuration at least as large as the one that wrote it.
    SegmentTooLong {
        /// The segment file.
        file: String,
        /// Its length in bytes.
        len: u64,
        /// The configured maximum.
        max: u64,
    },
    /// The log does not reach a head it must contain: its checkpoint's, its
    /// witness's, or one the caller expects. It was cut (records that
    /// were durable are gone), or restored from an older copy. Nothing was
    /// changed.
    MissingHead {
        /// The log directory.
        dir: String,
        /// Where the head came from.
        from: HeadSource,
        /// The head the log must contain.
        expected: Head,
        /// Where the log ends: its last whole batch.
        head: Head,
        /// Damage found after `head` (which opening would otherwise have
        /// cut as a torn write).
        torn: Option<Box<TornTail>>,
    },
    /// The log reaches a head it must contain, but holds something else
    /// there: the batch that ends at its seq has another digest, or no
    /// batch ends there. A record at or before it was edited, removed,
    /// inserted or reordered, even if every checksum was recomputed.
    HeadMismatch {
        /// The log directory.
        dir: String,
        /// Where the head came from.
        from: HeadSource,
        /// The head the log must contain.
        expected: Head,
        /// The head of the batch that holds `expected.seq`.
        found: Head,
    },
    /// The witness could not be read while opening.
    Witness {
        /// What failed.
        source: io::Error,
    },
    /// [`crate::Log::wait_durable`] was asked about a sequence number that
    /// has not been appended.
    NotAppended {
        /// The sequence number asked about.
        seq: u64,
        /// The last sequence number appended.
        last_seq: u64,
    },
}

/// The kind of damage a [`LogError::Corrupt`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Damage {
    /// A segment header's checksum, magic, version or reserved field is wrong,
    /// or a segment other than the last is shorter than a header.
    Header,
    /// A header's first sequence number differs from its file name.
    Name,
    /// A segment belongs to another log (its log id differs from the first
    /// segment's).
    LogId,
    /// A header's chain value differs from the checksum of the previous
    /// segment's last record.
    Chain,
    /// A frame's checksum does not verify against the previous checksum.
    Checksum,
    /// A frame's length is above the record maximum or runs past the end of
    /// the file.
    Length,
    /// A sequence number is not the next one: a gap, overlap or reorder.
    Sequence,
    /// A segment is missing: the first segment does not start at 1, or a
    /// sealed segment has no successor.
    MissingSegment,
    /// A segment other than the last is not closed by a valid seal naming the
    /// next segment, or bytes follow a seal.
    Seal,
    /// Damage in the last segment is followed by a record that verifies, so
    /// it is not a torn write.
    DamageBeforeValidRecords,
    /// A batch's records verify but do not hash to the chain digest its
    /// header holds.
    Digest,
    /// The checkpoint file is missing from a log that has batches, or
    /// neither of its slots is whole.
    Checkpoint,
    /// A segment of an older format version follows one of the current.
    Version,
}

/// Where a head that a log must contain comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeadSource {
    /// The log's own checkpoint file.
    Checkpoint,
    /// The witness the log was opened with.
    Witness,
    /// The caller, such as `payonce verify --expect-head`.
    Expected,
    /// A snapshot of what the records mean, which a reader of the log
    /// keeps beside it and which names the head it was taken at.
    Snapshot,
}

impl HeadSource {
    /// The head it gave, named for a sentence: "its checkpoint's head".
    fn head(self) -> &'static str {
        match self {
            HeadSource::Checkpoint => "its checkpoint's head",
            HeadSource::Witness => "its witness's head",
            HeadSource::Expected => "the expected head",
            HeadSource::Snapshot => "its snapshot's head",
        }
    }
}

impl fmt::Display for HeadSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeadSource::Checkpoint => "its checkpoint",
            HeadSource::Witness => "its witness",
            HeadSource::Expected => "the expected head",
            HeadSource::Snapshot => "its snapshot",
        })
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Damage::Header => "bad segment header",
            Damage::Name => "segment name differs from its header",
            Damage::LogId => "segment of another log",
            Damage::Chain => "chain broken between segments",
            Damage::Checksum => "checksum mismatch",
            Damage::Length => "bad record length",
            Damage::Sequence => "sequence number out of order",
            Damage::MissingSegment => "missing segment",
            Damage::Seal => "bad or missing seal",
            Damage::DamageBeforeValidRecords => "damage followed by valid records",
            Damage::Digest => "chain digest mismatch",
            Damage::Checkpoint => "bad or missing checkpoint",
            Damage::Version => "format version out of order",
        })
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io { op, file, source } => write!(f, "{op} {file}: {source}"),
            LogError::Locked { dir } => {
                write!(f, "log {dir} is locked by another writer")
            }
            LogError::NotALog { dir } => {
                write!(f, "{dir} is not a payonce log: it holds no segment file")
            }
            LogError::InvalidConfig {
                setting,
                value,
                rule,
            } => write!(f, "log config {setting} = {value}: {rule}"),
            LogError::RecordTooLarge { len, max } => {
                write!(f, "record of {len} bytes refused: at most {max}")
            }
            LogError::Poisoned { cause } => {
                write!(f, "a previous write failed ({cause}); reopen the log")
            }
            LogError::Corrupt {
                file,
                offset,
                seq,
                damage,
                expected,
                found,
            } => write!(
                f,
                "log corrupt: {damage} in {file} at byte {offset} (seq {seq}): expected {expected}, found {found}"
            ),
            LogError::SegmentTooLong { file, len, max } => write!(
                f,
                "segment {file} is {len} bytes; the configured maximum is {max}"
            ),
            LogError::MissingHead {
                dir,
                from,
                expected,
                head,
                torn,
            } => {
                write!(
                    f,
                    "log {dir} ends at head {head}, before {} {expected}: \
                     records that were there are gone",
                    from.head()
                )?;
                if let Some(torn) = torn {
                    write!(
                        f,
                        " (damage follows it in segment {} at byte {}, {} bytes)",
                        torn.segment, torn.offset, torn.len
                    )?;
                }
                Ok(())
            }
            LogError::HeadMismatch {
                dir,
                from,
                expected,
                found,
            } => {
                if found.seq == expected.seq {
                    write!(
                        f,
                        "log {dir} does not hold {} {expected}: the batch ending at seq {} \
                         hashes to {}, so a record up to it was changed",
                        from.head(),
                        found.seq,
                        found.digest
                    )
                } else {
                    write!(
                        f,
                        "log {dir} does not hold {} {expected}: no batch ends at seq {}, the \
                         one holding it ends at {found}, so a record up to it was changed",
                        from.head(),
                        expected.seq
                    )
                }
            }
            LogError::Witness { source } => {
                write!(f, "reading the log's witness failed: {source}")
            }
            LogError::NotAppended { seq, last_seq } => write!(
                f,
                "seq {seq} has not been appended; the last appended is {last_seq}"
            ),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            LogError::Poisoned { cause } => Some(cause.as_ref()),
            LogError::Witness { source } => Some(source),
            _ => None,
        }
    }
}

/// Why [`crate::Log::open_visiting`] or [`crate::LogReader::scan`] stopped:
/// the log's fault or the visitor's.
#[derive(Debug)]
pub enum OpenError<E> {
    /// The log could not be opened or verified.
    Log(LogError),
    /// The visitor returned an error; the scan stopped at that record.
    Visit(E),
}

impl<E> From<LogError> for OpenError<E> {
    fn from(error: LogError) -> Self {
        OpenError::Log(error)
    }
}

impl<E: fmt::Display> fmt::Display for OpenError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Log(error) => error.fmt(f),
            OpenError::Visit(error) => write!(f, "visiting a log record failed: {error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for OpenError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Log(error) => Some(error),
            OpenError::Visit(error) => Some(error),
        }
    }
}

/// Shorthand for an [`LogError::Io`].
pub(crate) fn io_error(op: &'static str, file: &str, source: io::Error) -> LogError {
    LogError::Io {
        op,
        file: file.to_owned(),
        source,
    }
}
