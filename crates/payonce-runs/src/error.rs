//! Why a run was refused, or could not be read or written: typed, naming
//! the run, the section and the offset, so a caller can set a run aside
//! and say where it is damaged.

use std::fmt;
use std::io;

use crate::hash::HashKey;

/// The parts of a run, in the order they are laid out
/// (docs/run-format.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Section {
    /// The record blocks: the records in the order of their primary names'
    /// hashes.
    Records,
    /// The secondary blocks: (secondary hash, primary hash) entries.
    Secondary,
    /// The Bloom filter over the primary names' hashes.
    PrimaryFilter,
    /// The Bloom filter over the secondary names' hashes.
    SecondaryFilter,
    /// One fence per block: its first hash, offset and length.
    Fences,
    /// The fixed-size trailer at the end.
    Trailer,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::Records => "record blocks",
            Section::Secondary => "secondary blocks",
            Section::PrimaryFilter => "primary filter",
            Section::SecondaryFilter => "secondary filter",
            Section::Fences => "fences",
            Section::Trailer => "trailer",
        })
    }
}

/// Everything that can go wrong opening, reading, writing or merging runs.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// A read from a [`crate::RunSource`] or an append to a
    /// [`crate::RunSink`] failed. Says nothing of the run's bytes.
    Io {
        /// The run read from, once known (a source does not know it).
        run: Option<u64>,
        /// "read" or "append".
        op: &'static str,
        /// Where the read started, or how many bytes the sink held.
        offset: u64,
        /// How many bytes were asked for or given.
        len: u64,
        /// What the operating system, the database or the source said.
        source: io::Error,
    },
    /// A run's bytes do not verify: a checksum, a count, a length, an order
    /// or a layout. The run should be set aside; nothing was believed.
    Corrupt {
        /// The run, as numbered by the caller that opened it.
        run: u64,
        /// The section the damage is in. Damage to the trailer is found
        /// by the checksum that covers the fences and the trailer, and
        /// named as the fences'.
        section: Section,
        /// The byte offset in the run of the block, field or section that
        /// does not verify: never after the damaged byte.
        offset: u64,
        /// What a good run has there.
        expected: String,
        /// What this one has.
        found: String,
    },
    /// A lookup through [`crate::Prefetched`] needed a block the prefetch
    /// did not load (a name not prefetched, or a run set changed since).
    NotPrefetched {
        /// The run whose block was needed.
        run: u64,
        /// Its section.
        section: Section,
        /// The block's number in the section.
        block: u64,
    },
    /// A record given to a writer is longer than its limit.
    TooLarge {
        /// "primary name", "secondary name" or "payload".
        field: &'static str,
        /// Its length.
        len: u64,
        /// The limit ([`crate::NAME_LEN_MAX`], [`crate::PAYLOAD_LEN_MAX`]).
        max: u64,
    },
    /// A writer was given a record or an entry not strictly after the one
    /// before it, or a record after the entries began.
    OutOfOrder {
        /// The section being written.
        section: Section,
        /// The number of the record or entry refused (from 0).
        index: u64,
        /// What must come there.
        expected: String,
        /// What came.
        found: String,
    },
    /// A writer was given more records or entries than the count it was
    /// created with, which its filters were sized for.
    TooMany {
        /// The section being written.
        section: Section,
        /// The count given to [`crate::RunWriter::new`].
        expected: u64,
    },
    /// A writer's secondary entries are not exactly the (secondary hash,
    /// primary hash) pairs of its records.
    EntriesMismatch {
        /// Distinct pairs the records make.
        records: u64,
        /// Entries given.
        entries: u64,
    },
    /// Runs of one set or one merge were written under different hash
    /// keys.
    MixedKeys {
        /// The run whose key differs.
        run: u64,
        /// The key of the first run.
        expected: HashKey,
        /// Its key.
        found: HashKey,
    },
    /// A primary name has a different secondary name in two runs being
    /// merged: the precondition every caller promises is broken.
    SecondaryConflict {
        /// The primary name.
        primary: Vec<u8>,
        /// The newer run holding it.
        newer_run: u64,
        /// The older run holding it with another secondary name.
        older_run: u64,
    },
    /// Two records of a batch share a name: primary names and secondary
    /// names are each distinct within a run.
    DuplicateName {
        /// [`Section::Records`] for a primary name, [`Section::Secondary`]
        /// for a secondary one.
        section: Section,
        /// The name.
        name: Vec<u8>,
    },
    /// An earlier append to the sink failed, so the writer accepts
    /// nothing more: what the sink holds is not a run.
    Poisoned,
    /// [`crate::merge`] was given no run.
    NoInputs,
}

impl RunError {
    /// A read of `len` bytes at `offset` that failed: what a
    /// [`crate::RunSource`] returns.
    pub fn read_failed(offset: u64, len: u64, source: io::Error) -> RunError {
        RunError::Io {
            run: None,
            op: "read",
            offset,
            len,
            source,
        }
    }

    /// An append of `len` bytes to a sink holding `offset` that failed:
    /// what a [`crate::RunSink`] returns.
    pub fn append_failed(offset: u64, len: u64, source: io::Error) -> RunError {
        RunError::Io {
            run: None,
            op: "append",
            offset,
            len,
            source,
        }
    }

    /// The offset in the run a refusal or a failed read names, if any.
    pub fn offset(&self) -> Option<u64> {
        match self {
            RunError::Io { offset, .. } | RunError::Corrupt { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// Whether the run's bytes were refused (as opposed to failing to be
    /// read, or a caller's input being refused).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, RunError::Corrupt { .. })
    }

    pub(crate) fn corrupt(
        run: u64,
        section: Section,
        offset: u64,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> RunError {
        RunError::Corrupt {
            run,
            section,
            offset,
            expected: expected.into(),
            found: found.into(),
        }
    }

    /// The same error, naming run `number` if it named none.
    pub(crate) fn in_run(self, number: u64) -> RunError {
        match self {
            RunError::Io {
                run: None,
                op,
                offset,
                len,
                source,
            } => RunError::Io {
                run: Some(number),
                op,
                offset,
                len,
                source,
            },
            other => other,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Io {
                run,
                op,
                offset,
                len,
                source,
            } => {
                write!(f, "{op} of {len} bytes at {offset}")?;
                if let Some(run) = run {
                    write!(f, " of run {run}")?;
                }
                write!(f, " failed: {source}")
            }
            RunError::Corrupt {
                run,
                section,
                offset,
                expected,
                found,
            } => write!(
                f,
                "run {run} is damaged in its {section} at byte {offset}: expected {expected}, found {found}"
            ),
            RunError::NotPrefetched {
                run,
                section,
                block,
            } => write!(
                f,
                "block {block} of the {section} of run {run} was not prefetched"
            ),
            _ => self.fmt_input(f),
        }
    }
}

impl RunError {
    /// The refusals of what a caller gave a writer, a set or a merge.
    fn fmt_input(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::TooLarge { field, len, max } => {
                write!(f, "a {field} of {len} bytes is longer than {max}")
            }
            RunError::OutOfOrder {
                section,
                index,
                expected,
                found,
            } => write!(
                f,
                "{section}: item {index} is out of order: expected {expected}, found {found}"
            ),
            RunError::TooMany { section, expected } => {
                write!(f, "{section}: more than the {expected} announced")
            }
            RunError::EntriesMismatch { records, entries } => write!(
                f,
                "the records make {records} secondary entries, but {entries} were given or differ"
            ),
            RunError::MixedKeys {
                run,
                expected,
                found,
            } => write!(
                f,
                "run {run} is under hash key {found:?}, not {expected:?} as the others"
            ),
            RunError::SecondaryConflict {
                primary,
                newer_run,
                older_run,
            } => write!(
                f,
                "primary name {} has another secondary name in run {older_run} than in run {newer_run}",
                primary.escape_ascii()
            ),
            RunError::DuplicateName { section, name } => {
                write!(f, "{section}: name {} twice", name.escape_ascii())
            }
            RunError::Poisoned => f.write_str("a previous append failed; the sink holds no run"),
            RunError::NoInputs => f.write_str("a merge needs at least one run"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
