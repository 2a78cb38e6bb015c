//! The child's trail: one file per submitting thread, one line per step,
//! which the test reads after the kill to check the ledger against and to
//! tell where each thread was.
//!
//! A line is written with one `write` on a file opened for appending, so a
//! kill leaves every line whole except perhaps the last, which is dropped
//! when read. A process kill keeps every completed write (the page cache
//! outlives the process), so only the lines that stand for another party's
//! own durable record, the rail's sends and the client's acknowledgements,
//! are also synced, as a rail and a client would sync them.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What made a thread submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// A withdrawal it has just created, under a fresh key.
    New,
    /// A second device: a fresh key for a withdrawal some thread created.
    Second,
    /// A client retry: a key and withdrawal some thread submitted and heard
    /// an answer for.
    Retry,
}

impl Attempt {
    fn name(self) -> &'static str {
        match self {
            Attempt::New => "new",
            Attempt::Second => "second",
            Attempt::Retry => "retry",
        }
    }

    fn from_name(name: &str) -> Option<Attempt> {
        [Attempt::New, Attempt::Second, Attempt::Retry]
            .into_iter()
            .find(|attempt| attempt.name() == name)
    }
}

/// One line of a thread's trail, in the order a thread writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// About to create a withdrawal: a durable ledger write that claims
    /// nothing.
    Create,
    /// About to submit `withdrawal` under `key`.
    Begin {
        /// Why.
        attempt: Attempt,
        /// The request key.
        key: String,
        /// The withdrawal's id.
        withdrawal: String,
    },
    /// The rail sent `withdrawal` for `key` and answers `reference`; synced
    /// before the send returns, so this is the rail's own durable record.
    Send {
        /// The withdrawal's id.
        withdrawal: String,
        /// The request key whose claim ran the send.
        key: String,
        /// The rail's reference.
        reference: String,
    },
    /// `submit` returned an outcome with `reference` for `key`; synced
    /// before the thread goes on, so this is the client's durable record.
    Ack {
        /// The request key.
        key: String,
        /// The outcome's reference.
        reference: String,
    },
    /// `submit` returned the send's failure: the outcome is unknown.
    Failed {
        /// The request key.
        key: String,
    },
    /// `submit` refused the key.
    Refused {
        /// The request key.
        key: String,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Create => write!(f, "create"),
            Step::Begin {
                attempt,
                key,
                withdrawal,
            } => write!(f, "begin {} {key} {withdrawal}", attempt.name()),
            Step::Send {
                withdrawal,
                key,
                reference,
            } => write!(f, "send {withdrawal} {key} {reference}"),
            Step::Ack { key, reference } => write!(f, "ack {key} {reference}"),
            Step::Failed { key } => write!(f, "failed {key}"),
            Step::Refused { key } => write!(f, "refused {key}"),
        }
    }
}

impl Step {
    /// The step a line says, or `None` if it is not one.
    pub fn parse(line: &str) -> Option<Step> {
        let words: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let step = match words.as_slice() {
            [create] if create == "create" => Step::Create,
            [begin, attempt, key, withdrawal] if begin == "begin" => Step::Begin {
                attempt: Attempt::from_name(attempt)?,
                key: key.clone(),
                withdrawal: withdrawal.clone(),
            },
            [send, withdrawal, key, reference] if send == "send" => Step::Send {
                withdrawal: withdrawal.clone(),
                key: key.clone(),
                reference: reference.clone(),
            },
            [ack, key, reference] if ack == "ack" => Step::Ack {
                key: key.clone(),
                reference: reference.clone(),
            },
            [failed, key] if failed == "failed" => Step::Failed { key: key.clone() },
            [refused, key] if refused == "refused" => Step::Refused { key: key.clone() },
            _ => return None,
        };
        Some(step)
    }
}

/// The trail file of thread `thread` in `dir`.
pub fn trail_path(dir: &Path, thread: usize) -> PathBuf {
    dir.join(format!("thread-{thread}.log"))
}

/// Appends one thread's steps to its trail file.
#[derive(Debug)]
pub struct TrailWriter {
    file: File,
}

impl TrailWriter {
    /// Opens (creating it if needed) the trail of `thread` in `dir`.
    pub fn open(dir: &Path, thread: usize) -> io::Result<TrailWriter> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(trail_path(dir, thread))?;
        Ok(TrailWriter { file })
    }

    /// Writes `step`: once this returns, a kill of this process keeps it.
    pub fn note(&mut self, step: &Step) -> io::Result<()> {
        self.file.write_all(format!("{step}\n").as_bytes())
    }

    /// Writes `step` and syncs it: once this returns, it survives a power
    /// loss too, as the rail's and the client's records must.
    pub fn note_durably(&mut self, step: &Step) -> io::Result<()> {
        self.note(step)?;
        self.file.sync_data()
    }
}

/// The whole lines of the trail of `thread` in `dir`; none if the thread
/// never opened it.
pub fn read_trail(dir: &Path, thread: usize) -> Result<Vec<Step>, String> {
    let path = trail_path(dir, thread);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(format!("reading {}: {error}", path.display())),
    };
    // A line without its newline was being written when the child died.
    let whole = text.rsplit_once('\n').map_or("", |(whole, _)| whole);
    whole
        .lines()
        .map(|line| {
            Step::parse(line).ok_or_else(|| format!("{}: not a step: {line:?}", path.display()))
        })
        .collect()
}
