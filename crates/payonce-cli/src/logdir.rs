//! Reading a ledger's directory read-only: opening it with clear errors,
//! walking its events with a progress bar, and naming its segment files.
//! A `postgres://` or `postgresql://` URL in place of a directory reads a
//! PostgreSQL ledger the same way, from one read view (a read-only
//! transaction).

use std::fs;
use std::io::ErrorKind;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use std::cell::RefCell;
use std::convert::Infallible;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use payonce::{
    Event, EventLog, Head, LedgerError, ReplayHook, Replaying, State, Verification, decode_event,
};
use payonce_log::{
    FRAME_HEADER_LEN, FsStorage, LogConfig, LogReader, Position, TornTail, parse_segment_name,
    segment_name,
};

use crate::error::CliError;
use crate::escape::EchoPath;
use crate::replay::Until;
use payonce::Subject;

/// How many events pass between two updates of the progress bar: often
/// enough to move smoothly, rarely enough to cost nothing.
const PROGRESS_EVERY: u64 = 4096;

/// A segment file in the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentFile {
    /// The sequence number of its first log record (its name).
    pub(crate) first_seq: u64,
    /// Its length in bytes.
    pub(crate) len: u64,
}

/// A ledger's directory opened read-only.
#[derive(Debug)]
pub(crate) struct LogDir {
    /// The directory, or for PostgreSQL the URL (its password hidden).
    pub(crate) dir: PathBuf,
    source: Source,
    progress: bool,
    /// A PostgreSQL ledger's URL, its password and all: for what reads the
    /// database outside the read view (its snapshots, its batches' rows).
    url: Option<String>,
}

/// Where the events are read from. One per command: the size of the file
/// readers beside a read view costs nothing.
#[allow(clippy::large_enum_variant)]
enum Source {
    Files {
        /// The log's events, decoded and verified as they are read.
        event_log: EventLog,
        /// The same log as opaque log records, for reading one record's
        /// bytes (an event's payload, to know where its frame ends).
        log_reader: LogReader,
    },
    /// One read view of a PostgreSQL ledger.
    Postgres(RefCell<payonce_postgres::ReadView>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Files { event_log, .. } => f.debug_tuple("Files").field(event_log).finish(),
            Source::Postgres(_) => f.write_str("Postgres"),
        }
    }
}

/// What a walk calls with each event, where it is, and the head of the
/// last whole batch read so far (`None` before the first batch ends).
type Visit<'a> =
    dyn FnMut(&Event, Position, Option<Head>) -> Result<ControlFlow<()>, CliError> + 'a;

/// What a walk over the events found: what the library's replay finds.
pub(crate) use payonce::Walked;

/// Refuses a path that is not a directory, telling a missing one from a
/// file (or anything else) given in its place: every command that takes a
/// ledger's directory says the same.
pub(crate) fn check_directory(dir: &Path) -> Result<(), CliError> {
    match fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => Err(CliError::NotADirectory {
            path: dir.to_owned(),
        }),
        // A path that cannot name a file (too long, or through a file) names
        // no directory either.
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::InvalidFilename
            ) =>
        {
            Err(CliError::NoDirectory {
                dir: dir.to_owned(),
            })
        }
        Err(error) => Err(CliError::Io {
            doing: format!("looking at {}", EchoPath(dir)),
            error,
        }),
    }
}

/// Opens the log in `dir` read-only: no lock, no write. A missing directory,
/// a file in its place and a directory without a log are told apart.
pub(crate) fn open_log(dir: &Path, progress: bool) -> Result<LogDir, CliError> {
    if let Some(url) = crate::postgres_url::as_url(dir) {
        let shown = crate::postgres_url::checked(url)?;
        let view = payonce_postgres::ReadView::open(url)
            .map_err(|error| CliError::from_ledger(&shown, LedgerError::Store(error)))?;
        return Ok(LogDir {
            dir: shown,
            source: Source::Postgres(RefCell::new(view)),
            progress: false,
            url: Some(url.to_owned()),
        });
    }
    check_directory(dir)?;
    let event_log = EventLog::open(dir).map_err(|error| CliError::from_ledger(dir, error))?;
    let log_reader = LogReader::open(Arc::new(FsStorage::new(dir)), LogConfig::default())
        .map_err(|error| CliError::from_ledger(dir, LedgerError::Log(error)))?;
    Ok(LogDir {
        dir: dir.to_owned(),
        source: Source::Files {
            event_log,
            log_reader,
        },
        progress,
        url: None,
    })
}

impl LogDir {
    /// Whether this is a PostgreSQL ledger, which has no segment files and
    /// no audit index beside it.
    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self.source, Source::Postgres(_))
    }

    /// The files' reader and event log, for what only a directory has.
    fn files(&self) -> Result<(&EventLog, &LogReader), CliError> {
        match &self.source {
            Source::Files {
                event_log,
                log_reader,
            } => Ok((event_log, log_reader)),
            Source::Postgres(_) => Err(CliError::Usage {
                message: format!(
                    "{} is a PostgreSQL ledger: it has no segment files to read one event from",
                    self.dir.display()
                ),
            }),
        }
    }

    /// Requires every walk from the first event to pass `head`: the log
    /// must hold it unchanged, or the walk fails as damage. A PostgreSQL
    /// ledger checks an expected head with `payonce head URL --expect-head`.
    pub(crate) fn require(&mut self, head: Head) -> Result<(), CliError> {
        match &mut self.source {
            Source::Files { event_log, .. } => {
                event_log.require(head);
                Ok(())
            }
            Source::Postgres(_) => Err(CliError::Usage {
                message: format!(
                    "{} is a PostgreSQL ledger: check an expected head with `payonce head \
                     URL --expect-head SEQ:DIGEST`",
                    self.dir.display()
                ),
            }),
        }
    }

    /// A PostgreSQL ledger's URL.
    pub(crate) fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// The log's identity, which a snapshot of it names.
    pub(crate) fn log_id(&self) -> Result<u64, CliError> {
        if let Some(url) = &self.url {
            let store = |error| CliError::from_ledger(&self.dir, LedgerError::Store(error));
            return payonce_postgres::log_id(url)
                .map_err(store)?
                .ok_or_else(|| {
                    CliError::from_ledger(
                        &self.dir,
                        LedgerError::NoLog {
                            dir: self.dir.display().to_string(),
                            found: Vec::new(),
                        },
                    )
                });
        }
        let (_, log_reader) = self.files()?;
        log_reader
            .log_id()
            .map_err(|error| CliError::from_ledger(&self.dir, LedgerError::Log(error)))
    }

    /// The head of the batch that ends at `seq`, read from the log: what a
    /// snapshot naming that head is checked against.
    pub(crate) fn head_at(&self, seq: u64) -> Result<Option<Head>, CliError> {
        if let Some(url) = &self.url {
            return payonce_postgres::head_at(url, seq)
                .map_err(|error| CliError::from_ledger(&self.dir, LedgerError::Store(error)));
        }
        let (_, log_reader) = self.files()?;
        log_reader
            .head_at(seq)
            .map_err(|error| CliError::from_ledger(&self.dir, LedgerError::Log(error)))
    }

    /// The segment files in the directory, in order.
    pub(crate) fn segment_files(&self) -> Result<Vec<SegmentFile>, CliError> {
        if self.is_postgres() {
            return Ok(Vec::new());
        }
        let io = |error| CliError::Io {
            doing: format!("listing {}", EchoPath(&self.dir)),
            error,
        };
        let mut segments = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let Some(first_seq) = entry.file_name().to_str().and_then(parse_segment_name) else {
                continue;
            };
            let len = entry.metadata().map_err(io)?.len();
            segments.push(SegmentFile { first_seq, len });
        }
        segments.sort_by_key(|segment| segment.first_seq);
        Ok(segments)
    }

    /// A torn tail, described for a person: where, how long, what it means.
    pub(crate) fn describe_torn_tail(&self, torn: &TornTail) -> String {
        let file = EchoPath(&self.dir.join(segment_name(torn.segment))).to_string();
        let (what, writer) = if torn.offset == 0 {
            (
                format!(
                    "{} bytes at byte 0 of {file}, a segment whose header never reached the disk",
                    torn.len
                ),
                "saves the segment aside and writes it a new header",
            )
        } else {
            (
                format!(
                    "{} bytes at byte {} of {file}, after the last good event",
                    torn.len, torn.offset
                ),
                "saves those bytes aside and cuts them off",
            )
        };
        format!(
            "torn tail: {what}. It looks like a write cut short (or one in progress, beside a \
             running service). Audit commands leave it as it is; the next writer to open the \
             ledger {writer}"
        )
    }

    /// Reads event `seq` at `position` alone, checksum-verified.
    pub(crate) fn event_at(&self, seq: u64, position: Position) -> Result<Event, CliError> {
        self.files()?
            .0
            .event_at(seq, position)
            .map_err(|error| CliError::from_ledger(&self.dir, error))
    }

    /// Reads event `seq` at `position` alone, checksum-verified, with the
    /// byte offset in its segment where its frame ends (frames are padded
    /// to 8 bytes, as docs/log-format.md says).
    pub(crate) fn event_and_end_at(
        &self,
        seq: u64,
        position: Position,
    ) -> Result<(Event, u64), CliError> {
        let ledger_error = |error| CliError::from_ledger(&self.dir, error);
        let payload = self
            .files()?
            .1
            .read_at(seq, position)
            .map_err(|error| ledger_error(LedgerError::Log(error)))?;
        let event = decode_event(seq, &payload).map_err(ledger_error)?;
        let frame_len = (FRAME_HEADER_LEN as u64 + payload.len() as u64).next_multiple_of(8);
        Ok((event, position.offset + frame_len))
    }

    /// The state just before event `seq`: every event before it applied in
    /// order, as written. No progress bar of its own: it runs inside a
    /// walk, whose bar stands still meanwhile.
    pub(crate) fn state_before(&self, seq: u64) -> Result<State, CliError> {
        let mut state = State::new();
        let mut before = Until::new(|event: &Replaying<'_>| event.seq() >= seq);
        self.replay_showing(&mut state, &mut before, false)?;
        Ok(state)
    }

    /// Replays the log from its first event into `state`, which starts
    /// empty, telling `hook` of each: the library's replay
    /// ([`EventLog::replay`], or [`payonce::replay_scan_with`] over a
    /// PostgreSQL read view), batched, each event verified as it is read,
    /// with a progress bar on a terminal. On an error (damage included)
    /// `state` holds every event applied before it.
    pub(crate) fn replay(
        &self,
        state: &mut State,
        hook: &mut (dyn ReplayHook + Send),
    ) -> Result<Walked, CliError> {
        self.replay_showing(state, hook, self.progress)
    }

    fn replay_showing(
        &self,
        state: &mut State,
        hook: &mut (dyn ReplayHook + Send),
        progress: bool,
    ) -> Result<Walked, CliError> {
        let ledger_error = |error| CliError::from_ledger(&self.dir, error);
        let event_log = match &self.source {
            Source::Files { event_log, .. } => event_log,
            Source::Postgres(view) => {
                let mut view = view.borrow_mut();
                let replayed = payonce::replay_scan_with(state, hook, |visit| {
                    let walked = view.walk_with_heads(|seq, payload, head| {
                        Ok::<_, Infallible>(visit(seq, payload, Some(*head)))
                    });
                    walked.map_err(|error| match error {
                        payonce_postgres::WalkError::Store(error) => error,
                        payonce_postgres::WalkError::Visit(never) => match never {},
                    })
                });
                return replayed.map_err(ledger_error);
            }
        };
        let bar = match progress {
            true => self.progress_bar()?,
            false => None,
        };
        let mut records = 0u64;
        let mut read = |position| {
            records += 1;
            if let Some((bar, offsets)) = &bar
                && records.is_multiple_of(PROGRESS_EVERY)
            {
                bar.set_position(offsets.bytes_before(position));
            }
        };
        let replayed = event_log.replay(state, hook, &mut read);
        if let Some((bar, _)) = bar {
            bar.finish_and_clear();
        }
        replayed.map_err(ledger_error)
    }

    /// [`LogDir::walk`] on a PostgreSQL ledger: its read view, every
    /// batch's chain checked as it is read. There is never a torn tail.
    fn walk_postgres(&self, from: u64, visit: &mut Visit<'_>) -> Result<Walked, CliError> {
        let Source::Postgres(view) = &self.source else {
            unreachable!("called for a PostgreSQL ledger")
        };
        let mut walked = Walked::default();
        let position = Position {
            segment: 0,
            offset: 0,
            chain: 0,
        };
        walked.head = view
            .borrow_mut()
            .walk_with_heads(|seq, payload, head| {
                let event = decode_event(seq, payload)
                    .map_err(|error| CliError::from_ledger(&self.dir, error))?;
                if seq < from {
                    return Ok(ControlFlow::Continue(()));
                }
                walked.events += 1;
                walked.last_seq = seq;
                visit(&event, position, Some(*head))
            })
            .map_err(|error| match error {
                payonce_postgres::WalkError::Store(error) => {
                    CliError::from_ledger(&self.dir, LedgerError::Store(error))
                }
                payonce_postgres::WalkError::Visit(error) => error,
            })?;
        Ok(walked)
    }

    /// For a PostgreSQL ledger, `payonce verify`'s replay of its read
    /// view: every batch's chain checked and every decision re-derived by
    /// the library, reading and applying on two threads. `None` for a
    /// directory.
    pub(crate) fn verify_postgres(&self) -> Option<Result<(Verification, Head), CliError>> {
        let Source::Postgres(view) = &self.source else {
            return None;
        };
        let mut view = view.borrow_mut();
        let mut head = Head::default();
        let report = payonce::verify_scan(|visit| {
            head = view.scan(visit)?;
            Ok(())
        });
        Some(
            report
                .map(|report| (report, head))
                .map_err(|error| CliError::from_ledger(&self.dir, error)),
        )
    }

    /// For a PostgreSQL ledger, the first `limit` events about `subject`,
    /// in order, found through the database's index of the events about
    /// each key and withdrawal, each event's batch checked against its
    /// chain digest (`payonce_postgres::ReadView::events_about`). `None`
    /// for a directory.
    pub(crate) fn events_about_postgres(
        &self,
        subject: &Subject,
        limit: usize,
    ) -> Option<Result<Vec<Event>, CliError>> {
        let Source::Postgres(view) = &self.source else {
            return None;
        };
        let ledger_error = |error| CliError::from_ledger(&self.dir, error);
        let found = view.borrow_mut().events_about(subject, limit);
        Some(match found {
            Ok(found) => found
                .iter()
                .map(|(seq, payload)| decode_event(*seq, payload).map_err(ledger_error))
                .collect(),
            Err(error) => Err(ledger_error(LedgerError::Store(error))),
        })
    }

    /// Visits every event from `from` on, in order, verified as read, until
    /// the end or until `visit` breaks. Damage is an error naming its place;
    /// a torn tail ends the walk and is reported in [`Walked`].
    pub(crate) fn walk(
        &self,
        from: u64,
        mut visit: impl FnMut(&Event, Position) -> Result<ControlFlow<()>, CliError>,
    ) -> Result<Walked, CliError> {
        self.walk_with_heads(from, &mut |event, position, _| visit(event, position))
    }

    /// [`LogDir::walk`], handing `visit` with each event the head of the
    /// last whole batch read so far, this event's included if it ends its
    /// batch: what a report names as the heads around its window. From
    /// the first event, each head was recomputed along the chain.
    pub(crate) fn walk_with_heads(
        &self,
        from: u64,
        visit: &mut Visit<'_>,
    ) -> Result<Walked, CliError> {
        let event_log = match &self.source {
            Source::Files { event_log, .. } => event_log,
            Source::Postgres(_) => return self.walk_postgres(from, visit),
        };
        let bar = self.progress_bar()?;
        let ledger_error = |error| CliError::from_ledger(&self.dir, error);
        let mut events = event_log.events_from(from).map_err(ledger_error)?;
        let mut walked = Walked::default();
        let outcome = loop {
            let next = match events.next_event() {
                Ok(next) => next,
                Err(error) => break Err(ledger_error(error)),
            };
            let Some((event, position)) = next else {
                // The log reports an empty newest segment as the torn tail
                // opening for writing repairs, as it does any other.
                walked.torn_tail = events.torn_tail();
                walked.head = events.head();
                break Ok(());
            };
            walked.events += 1;
            walked.last_seq = event.seq;
            if let Some((bar, offsets)) = &bar
                && walked.events % PROGRESS_EVERY == 0
            {
                bar.set_position(offsets.bytes_before(position));
            }
            match visit(&event, position, events.last_head()) {
                Ok(ControlFlow::Continue(())) => {}
                Ok(ControlFlow::Break(())) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        if let Some((bar, _)) = bar {
            bar.finish_and_clear();
        }
        outcome.map(|()| walked)
    }

    fn progress_bar(&self) -> Result<Option<(ProgressBar, Offsets)>, CliError> {
        if !self.progress {
            return Ok(None);
        }
        let offsets = Offsets::new(&self.segment_files()?);
        let bar = ProgressBar::new(offsets.total);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message("reading the log");
        Ok(Some((bar, offsets)))
    }
}

/// Where each segment starts if the segments were one file, for the
/// progress bar.
#[derive(Debug)]
struct Offsets {
    starts: Vec<(u64, u64)>,
    total: u64,
}

impl Offsets {
    fn new(segments: &[SegmentFile]) -> Offsets {
        let mut total = 0;
        let starts = segments
            .iter()
            .map(|segment| {
                let start = total;
                total += segment.len;
                (segment.first_seq, start)
            })
            .collect();
        Offsets { starts, total }
    }

    fn bytes_before(&self, position: Position) -> u64 {
        let index = self
            .starts
            .partition_point(|(first_seq, _)| *first_seq <= position.segment);
        let start = index
            .checked_sub(1)
            .and_then(|i| self.starts.get(i))
            .map_or(0, |(_, start)| *start);
        start + position.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against a progress bar that jumps back between segments.
    #[test]
    fn progress_offsets_add_up_across_segments() {
        let offsets = Offsets::new(&[
            SegmentFile {
                first_seq: 1,
                len: 100,
            },
            SegmentFile {
                first_seq: 50,
                len: 80,
            },
        ]);
        let at = |segment, offset| Position {
            segment,
            offset,
            chain: 0,
        };
        assert_eq!(offsets.total, 180);
        assert_eq!(offsets.bytes_before(at(1, 40)), 40);
        assert_eq!(offsets.bytes_before(at(50, 40)), 140);
    }
}
