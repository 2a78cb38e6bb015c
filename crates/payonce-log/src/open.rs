//! Opening a log for writing, in phases: [`Log::scan_to_open`] takes the
//! lock and starts a scan ([`Opening`]), [`Opening::next_record`] hands out
//! every verified record, [`Opening::plan`] classifies how the log ends into
//! a [`RecoveryPlan`] without changing anything, and
//! [`RecoveryPlan::execute`] makes its repairs and returns the writer.
//!
//! A reader that already holds what the records up to some seq mean (the
//! ledger, from a snapshot) asks the log for the head of the batch ending
//! there (`Opening::head_at`), and starts the walk at the segment holding
//! the lowest seq it must check (`Opening::start_after`; the late start
//! itself is `scan.rs`'s).

use std::convert::Infallible;
use std::sync::Arc;

use crate::chain::Head;
use crate::config::{Durability, LogConfig};
use crate::error::{HeadSource, LogError, OpenError, io_error};
use crate::format::segment_name;
use crate::record::{Record, Recovery};
use crate::recovery::{LogEnd, Newest, SealDoesNotFit, decide, reported};
use crate::repair::{RecoveryPlan, remove_tmp_debris};
use crate::scan::{Cursor, Mode, list_segments};
use crate::storage::{Storage, StorageLock};
use crate::witness::Witness;
use crate::writer::{Log, new_log_id};

/// A log being opened for writing: its records, verified in order by
/// [`Opening::next_record`], then, once they are all read, a plan for what
/// to repair ([`Opening::plan`]). Holds the writer lock; dropping it changes
/// nothing more and releases the lock.
#[derive(Debug)]
pub struct Opening {
    storage: Arc<dyn Storage>,
    config: LogConfig,
    lock: Box<dyn StorageLock>,
    /// The newest two segments as listed: the ones the open syncs last.
    newest_two: Vec<u64>,
    /// The scan of the segments; `None` for a directory without any.
    cursor: Option<Cursor>,
    scan: Scan,
    /// Where the writer will publish its heads.
    witness: Option<Arc<dyn Witness>>,
}

/// Where the scan of an [`Opening`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Records may follow.
    Running,
    /// The last record was handed out: the end of the log is known.
    Ended,
    /// The scan refused the log; nothing may be planned on it.
    Refused,
}

impl Log {
    /// Opens the log in `storage` for writing, creating it if the directory
    /// is empty or missing. See [`Log::open_visiting`].
    pub fn open(storage: Arc<dyn Storage>, config: LogConfig) -> Result<(Log, Recovery), LogError> {
        match Log::open_visiting(storage, config, |_| Ok::<(), Infallible>(())) {
            Ok(opened) => Ok(opened),
            Err(OpenError::Log(error)) => Err(error),
            Err(OpenError::Visit(never)) => match never {},
        }
    }

    /// Opens the log in `storage` for writing, handing every record to
    /// `visit` as it is verified, in order, in the same pass: the phases of
    /// [`Log::scan_to_open`] run one after the other.
    ///
    /// Takes the directory's writer lock, removes leftover temporary segment
    /// files, verifies every segment and record, cuts a torn tail off the
    /// last segment (after copying it aside to `<segment>.torn-<offset>`)
    /// and finishes a segment roll a crash interrupted. Any other damage
    /// refuses with [`LogError::Corrupt`]. A refusal can come after some
    /// records were visited: discard what the visitor built on an error.
    pub fn open_visiting<E>(
        storage: Arc<dyn Storage>,
        config: LogConfig,
        mut visit: impl FnMut(Record<'_>) -> Result<(), E>,
    ) -> Result<(Log, Recovery), OpenError<E>> {
        let mut opening = Log::scan_to_open(storage, config)?;
        while let Some(record) = opening.next_record()? {
            visit(record).map_err(OpenError::Visit)?;
        }
        Ok(opening.plan()?.execute()?)
    }

    /// Starts opening the log in `storage` for writing: takes the
    /// directory's writer lock ([`LogError::Locked`] if another writer holds
    /// it), removes leftover temporary segment files, syncs the directory
    /// (under [`Durability::Always`]) and lists the segments. Writes nothing
    /// else: the records are verified by [`Opening::next_record`], and what
    /// a crash left is repaired only by [`RecoveryPlan::execute`].
    pub fn scan_to_open(storage: Arc<dyn Storage>, config: LogConfig) -> Result<Opening, LogError> {
        config.validate()?;
        let dir = storage.describe("");
        let lock = storage
            .try_lock()
            .map_err(|error| io_error("lock", &dir, error))?
            .ok_or_else(|| LogError::Locked { dir: dir.clone() })?;
        remove_tmp_debris(&*storage)?;
        if config.durability == Durability::Always {
            // A directory sync that failed before (poisoning the last writer)
            // can leave an entry, such as a segment just renamed into place,
            // that this process sees but a power loss would drop. Make every
            // entry durable before writing a seal that names it or records
            // into it.
            storage
                .sync_dir()
                .map_err(|error| io_error("sync directory", &dir, error))?;
        }
        let segments = list_segments(&*storage)?;
        let newest_two = segments.iter().rev().take(2).copied().collect();
        let cursor = (!segments.is_empty())
            .then(|| Cursor::new(storage.clone(), &config, Mode::Write, segments));
        Ok(Opening {
            storage,
            config,
            lock,
            newest_two,
            cursor,
            scan: Scan::Running,
            witness: None,
        })
    }
}

impl Opening {
    /// Checks the log against `witness` and publishes the writer's heads to
    /// it: reads the witness's last head, which the log must then contain
    /// ([`LogError::MissingHead`] if it ends before it, as a log restored
    /// from an older copy does; [`LogError::HeadMismatch`] if it holds
    /// another batch there). A witness that cannot be read refuses
    /// ([`LogError::Witness`]). Only before the first record is read.
    pub fn witness(&mut self, witness: Arc<dyn Witness>) -> Result<(), LogError> {
        let last = witness
            .last()
            .map_err(|source| LogError::Witness { source })?;
        if let Some(head) = last {
            self.require(HeadSource::Witness, head)?;
        }
        self.witness = Some(witness);
        Ok(())
    }

    /// Requires the log to contain `head`, as [`Opening::witness`] does
    /// with the witness's. Only before the first record is read.
    pub fn require(&mut self, from: HeadSource, head: Head) -> Result<(), LogError> {
        match &mut self.cursor {
            Some(cursor) => cursor.require(from, head),
            // A directory without segments holds only the genesis head.
            None if head.seq == 0 => Ok(()),
            None => Err(LogError::MissingHead {
                dir: self.storage.describe(""),
                from,
                expected: head,
                head: Head::GENESIS,
                torn: None,
            }),
        }
    }

    /// Hands out only the records after `seq`, and lets the walk start at
    /// a later segment than the first: the one holding the lowest sequence
    /// number it must check (`seq + 1`, the checkpoint's head, a witness's
    /// or a required head), and never past the second-newest segment. The
    /// headers of the segments passed over are checked; their records are
    /// not read. For a reader that holds what the records up to `seq`
    /// mean already, and has required a head at or after `seq` that
    /// vouches for them ([`Opening::require`], [`Opening::head_at`]). Only
    /// before the first record is read, and after every head is required.
    pub fn start_after(&mut self, seq: u64) {
        if let Some(cursor) = &mut self.cursor {
            cursor.start_late(seq.saturating_add(1));
        }
    }

    /// The head of the batch that ends at `seq`, read from the log: `None`
    /// if no whole batch of the log ends there (the log ends before it, or
    /// a batch goes on past it). Reads the segment holding `seq` alone,
    /// verifying its records' checksums up to `seq`, without changing
    /// where the walk of this opening is.
    pub fn head_at(&self, seq: u64) -> Result<Option<Head>, LogError> {
        if seq == 0 {
            return Ok(Some(Head::GENESIS));
        }
        let segments = list_segments(&*self.storage)?;
        if segments.is_empty() {
            return Ok(None);
        }
        let cursor = Cursor::starting_at(self.storage.clone(), &self.config, segments, seq)?;
        cursor.head_ending_at(seq)
    }

    /// The log's identity: the id in its first segment's header; `None`
    /// for a directory without segments.
    pub fn log_id(&self) -> Result<Option<u64>, LogError> {
        match &self.cursor {
            Some(cursor) => cursor.first_log_id().map(Some),
            None => Ok(None),
        }
    }

    /// The next verified record; `None` after the last. Damage that is not
    /// a torn tail is an error ([`LogError::Corrupt`]), after which the scan
    /// hands out nothing more and the opening is only to be dropped.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, LogError> {
        if self.scan != Scan::Running {
            return Ok(None);
        }
        let Some(cursor) = &mut self.cursor else {
            self.scan = Scan::Ended;
            return Ok(None);
        };
        match cursor.next_record() {
            Ok(Some(record)) => Ok(Some(record)),
            Ok(None) => {
                self.scan = Scan::Ended;
                Ok(None)
            }
            Err(error) => {
                self.scan = Scan::Refused;
                Err(error)
            }
        }
    }

    /// Classifies how the log ends (cleanly, a torn tail, a torn header, an
    /// interrupted roll, an empty directory) into the plan of repairs that
    /// opening makes, changing nothing on disk. Refuses, before anything is
    /// changed, a newest segment with no room for a seal under this
    /// configuration's `segment_len_max` ([`LogError::SegmentTooLong`]).
    ///
    /// # Panics
    ///
    /// Unless [`Opening::next_record`] has returned `None` without an error
    /// before it: a plan is made only from a log whose every record was
    /// verified and handed out.
    pub fn plan(self) -> Result<RecoveryPlan, LogError> {
        assert_eq!(
            self.scan,
            Scan::Ended,
            "a log is planned only once its scan has ended without a refusal"
        );
        let checkpoint = self.cursor.as_ref().and_then(|cursor| cursor.checkpoint);
        let (end, records, segments) = match &self.cursor {
            None => (LogEnd::empty(), 0, 0),
            Some(cursor) => (
                LogEnd::scanned(cursor),
                cursor.records,
                cursor.segments_verified,
            ),
        };
        let fresh_log_id = new_log_id().map_err(|source| LogError::Io {
            op: "getrandom",
            file: self.storage.describe(""),
            source,
        })?;
        let repairs = decide(&end, self.config.segment_len_max, fresh_log_id).map_err(
            |SealDoesNotFit {
                 segment,
                 records_end,
             }| LogError::SegmentTooLong {
                file: self.storage.describe(&segment_name(segment)),
                len: records_end,
                max: self.config.segment_len_max,
            },
        )?;
        let recovery = reported(&end, &repairs, records, segments);
        Ok(RecoveryPlan {
            log_id: end.log_id.unwrap_or(fresh_log_id),
            storage: self.storage,
            config: self.config,
            lock: self.lock,
            end,
            repairs,
            recovery,
            newest_two: self.newest_two,
            checkpoint,
            witness: self.witness,
        })
    }
}

impl LogEnd {
    /// The end of a directory without segments.
    fn empty() -> LogEnd {
        LogEnd {
            newest: Newest::Missing,
            unsealed: None,
            log_id: None,
            next_seq: 1,
            chain: 0,
            head: Head::GENESIS,
            checkpoint: None,
        }
    }

    /// The end of the log `cursor` has scanned to its last record.
    fn scanned(cursor: &Cursor) -> LogEnd {
        let Some(tail) = &cursor.tail else {
            unreachable!("a finished scan describes the last segment");
        };
        let newest = if tail.header_torn {
            Newest::TornHeader {
                segment: tail.first_seq,
                len: tail.torn_len,
            }
        } else {
            assert!(
                cursor.log_id.is_some(),
                "a segment with a whole header gave the log id"
            );
            Newest::Whole {
                segment: tail.first_seq,
                records_end: tail.valid_end,
                torn_len: tail.torn_len,
                zeros_ahead: tail.zeros_ahead,
                version: tail.version,
            }
        };
        let (next_seq, chain) = cursor.end_state();
        LogEnd {
            newest,
            unsealed: cursor.unsealed.clone(),
            log_id: cursor.log_id,
            next_seq,
            chain,
            head: cursor.head(),
            checkpoint: cursor.checkpoint.map(|found| found.slot.head),
        }
    }
}
