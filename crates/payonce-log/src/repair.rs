//! Acting on a recovery plan: the repairs opening for writing makes, each in
//! its crash-safe order (torn bytes are saved aside before a cut, a torn
//! header is replaced by a rename, an interrupted roll is sealed), the syncs
//! that make what was read durable, and the writer that results.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use crate::config::{Durability, LogConfig};
use crate::error::{LogError, io_error};
use crate::format::{Header, first_chain, is_segment_tmp_name, seal_frame, segment_name};
use crate::record::Recovery;
use crate::recovery::{LogEnd, Newest, Repair};
use crate::storage::{Storage, StorageFile, StorageLock};
use crate::writer::{Active, Log, create_segment};

/// Most copies of torn bytes kept for one segment offset (a crash during
/// recovery can leave earlier copies behind).
const TORN_COPIES_MAX: u32 = 1000;

/// What opening a log for writing will do to its directory, decided before
/// anything is done: the repairs, in order, and what opening will report.
/// Holds the writer lock. Dropping it changes nothing and releases the lock;
/// [`RecoveryPlan::execute`] makes the repairs and returns the writer.
#[derive(Debug)]
pub struct RecoveryPlan {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) config: LogConfig,
    pub(crate) lock: Box<dyn StorageLock>,
    pub(crate) end: LogEnd,
    /// The log id of the writer: the log's, or a new log's.
    pub(crate) log_id: u64,
    pub(crate) repairs: Vec<Repair>,
    pub(crate) recovery: Recovery,
    /// The newest two segments as listed before the scan: those synced last.
    pub(crate) newest_two: Vec<u64>,
}

impl RecoveryPlan {
    /// The repairs, in the order [`RecoveryPlan::execute`] makes them; empty
    /// for a log that ends cleanly.
    pub fn repairs(&self) -> &[Repair] {
        &self.repairs
    }

    /// What opening will report. A [`crate::TornTail`]'s `saved_as` is
    /// `None` until the bytes are saved, since the copy's name is chosen
    /// then (beside any copies an earlier, interrupted open left).
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Makes the repairs in order, syncs the newest two segments (under
    /// [`Durability::Always`]), and returns the writer with what opening
    /// found. A failure stops at the repair that failed; what was done
    /// before it is safe to reopen, as each repair is.
    pub fn execute(self) -> Result<(Log, Recovery), LogError> {
        let mut repairing = Repairing {
            storage: &*self.storage,
            config: &self.config,
            end: &self.end,
            recovery: self.recovery.clone(),
            files: OpenSegments::default(),
            active: None,
        };
        let newest = self.end.newest.segment();
        for repair in &self.repairs {
            // The newest segment's repairs come first. Once they are made the
            // writer takes that segment, checked against what the scan saw,
            // before any segment before it is changed.
            if repairing.active.is_none() && repair.segment() != newest {
                repairing.take_newest()?;
            }
            repairing.make(repair)?;
        }
        if repairing.active.is_none() {
            repairing.take_newest()?;
        }
        let (active, recovery) = repairing.finish();
        if self.config.durability == Durability::Always {
            sync_newest(&*self.storage, &self.newest_two)?;
        }
        // A log created just now has said so already.
        if !matches!(self.end.newest, Newest::Missing) {
            tracing::info!(
                dir = %self.storage.describe(""),
                records = recovery.records,
                segments = recovery.segments,
                last_seq = recovery.last_seq,
                "opened log"
            );
        }
        let log = Log::new(self.storage, self.config, self.log_id, active, self.lock);
        Ok((log, recovery))
    }
}

/// A plan being carried out: the files its repairs opened, the segment the
/// writer will append to once it is taken, and the report so far.
struct Repairing<'a> {
    storage: &'a dyn Storage,
    config: &'a LogConfig,
    end: &'a LogEnd,
    recovery: Recovery,
    files: OpenSegments,
    active: Option<Active>,
}

impl Repairing<'_> {
    /// Makes one repair of the plan.
    fn make(&mut self, repair: &Repair) -> Result<(), LogError> {
        match *repair {
            Repair::CreateFirstSegment { log_id } => {
                self.active = Some(create_first_segment(self.storage, self.config, log_id)?);
            }
            Repair::ReplaceTornHeader {
                segment,
                len,
                log_id,
                chain,
            } => {
                let header = Header {
                    log_id,
                    first_seq: segment,
                    chain,
                    zeros_ahead: self.config.zeros_ahead(),
                };
                let (active, saved_as) = replace_torn_header(self.storage, &header, len)?;
                self.saved(segment, 0, saved_as);
                self.active = Some(active);
            }
            Repair::CutTornTail {
                segment,
                offset,
                len,
            } => {
                let file = self.files.get(self.storage, segment)?;
                let saved_as = cut_tail(self.storage, file, &segment_name(segment), offset, len)?;
                self.saved(segment, offset, saved_as);
            }
            Repair::SealInterruptedRoll {
                segment,
                offset,
                next_seq,
                chain,
            } => {
                let Some(active) = &self.active else {
                    unreachable!("the newest segment is taken before the roll is sealed");
                };
                assert_eq!(chain, active.chain);
                assert_eq!(
                    next_seq, active.next_seq,
                    "the newest segment holds no record"
                );
                let file = self.files.get(self.storage, segment)?;
                seal_roll(self.storage, file, segment, offset, chain, next_seq)?;
            }
        }
        Ok(())
    }

    /// Notes where the torn bytes at `offset` of `segment` were saved, if
    /// they are the ones reported.
    fn saved(&mut self, segment: u64, offset: u64, saved_as: String) {
        if let Some(torn) = &mut self.recovery.torn_tail
            && (torn.segment, torn.offset) == (segment, offset)
            && torn.saved_as.is_none()
        {
            torn.saved_as = Some(saved_as);
        }
    }

    /// Takes the newest segment, with a whole header, as the one the writer
    /// appends to, after checking that its file is as the scan and the cut
    /// left it.
    fn take_newest(&mut self) -> Result<(), LogError> {
        let Newest::Whole {
            segment,
            records_end,
            zeros_ahead,
            ..
        } = self.end.newest
        else {
            unreachable!("a segment is made anew by a repair, or its header is whole");
        };
        let name = segment_name(segment);
        let file = self.files.take(self.storage, segment)?;
        // What follows the records is zeros written ahead (the scan
        // checked), cut above if anything else was there.
        let allocated = self
            .storage
            .len(&name)
            .map_err(|error| io_error("stat", &self.storage.describe(&name), error))?;
        if allocated < records_end || allocated > self.config.segment_len_max {
            // Only another program, despite the lock, changes a file
            // between the scan and here: a fault of the world.
            return Err(io_error(
                "stat",
                &self.storage.describe(&name),
                io::Error::other(format!(
                    "the file is {allocated} bytes, changed while the log was opened \
                     (its records end at byte {records_end})"
                )),
            ));
        }
        self.active = Some(Active {
            file,
            name,
            len: records_end,
            next_seq: self.end.next_seq,
            chain: self.end.chain,
            unsynced: false,
            allocated,
            zeros_ahead,
        });
        Ok(())
    }

    /// The segment the writer appends to, and the report with where torn
    /// bytes were saved.
    fn finish(self) -> (Active, Recovery) {
        let Some(active) = self.active else {
            unreachable!("every plan ends with the newest segment taken");
        };
        (active, self.recovery)
    }
}

/// Segment files a repair opened, kept for the next repair of the same file
/// and for the writer, so each is opened once.
#[derive(Default)]
struct OpenSegments {
    files: Vec<(u64, Box<dyn StorageFile>)>,
}

impl OpenSegments {
    /// The open file of `segment`, opened now if no repair has yet.
    fn get(
        &mut self,
        storage: &dyn Storage,
        segment: u64,
    ) -> Result<&mut dyn StorageFile, LogError> {
        let file = self.take(storage, segment)?;
        let index = self.files.len();
        self.files.push((segment, file));
        Ok(&mut *self.files[index].1)
    }

    /// The file of `segment`, taken out of the set (opened now if no repair
    /// has yet).
    fn take(
        &mut self,
        storage: &dyn Storage,
        segment: u64,
    ) -> Result<Box<dyn StorageFile>, LogError> {
        if let Some(index) = self.files.iter().position(|(open, _)| *open == segment) {
            return Ok(self.files.swap_remove(index).1);
        }
        let name = segment_name(segment);
        storage
            .open_append(&name)
            .map_err(|error| io_error("open", &storage.describe(&name), error))
    }
}

/// Creates segment 1 of a new log, with the configured durability.
fn create_first_segment(
    storage: &dyn Storage,
    config: &LogConfig,
    log_id: u64,
) -> Result<Active, LogError> {
    let header = Header {
        log_id,
        first_seq: 1,
        chain: first_chain(log_id),
        zeros_ahead: config.zeros_ahead(),
    };
    let file = create_segment(storage, config.durability, &header)?;
    tracing::info!(
        dir = %storage.describe(""),
        log_id = format_args!("{log_id:#018x}"),
        "created a new log"
    );
    Ok(Active::fresh(file, &header))
}

/// Replaces a newest segment of `len` bytes, shorter than a header, by the
/// segment `header` describes. Returns it and where the torn bytes went.
fn replace_torn_header(
    storage: &dyn Storage,
    header: &Header,
    len: u64,
) -> Result<(Active, String), LogError> {
    let name = segment_name(header.first_seq);
    // Keep the torn header's bytes, then put a whole segment in its place
    // atomically (rename over it), so a crash during this repair leaves
    // either the torn file or the new one.
    let saved_as = save_aside(storage, &name, 0, len)?;
    let file = create_segment(storage, Durability::Always, header)?;
    tracing::warn!(
        file = %storage.describe(&name),
        bytes = len,
        saved_as = %saved_as,
        "replaced a segment whose header was torn"
    );
    Ok((Active::fresh(file, header), saved_as))
}

/// Finishes a roll a crash interrupted: the newest segment exists and holds
/// no record, so the one before it is sealed, naming it.
fn seal_roll(
    storage: &dyn Storage,
    file: &mut dyn StorageFile,
    segment: u64,
    offset: u64,
    chain: u32,
    next_seq: u64,
) -> Result<(), LogError> {
    let seal = seal_frame(chain, next_seq);
    let describe = storage.describe(&segment_name(segment));
    // At the end of the records, over any zeros written ahead.
    file.write_at(offset, &seal)
        .map_err(|error| io_error("write", &describe, error))?;
    file.sync_data()
        .map_err(|error| io_error("fdatasync", &describe, error))?;
    tracing::info!(file = %describe, "sealed a segment whose roll a crash interrupted");
    Ok(())
}

/// Syncs the newest two segments, as listed before the scan.
fn sync_newest(storage: &dyn Storage, newest_two: &[u64]) -> Result<(), LogError> {
    // A writer that failed before in this same system (and was poisoned)
    // can have left bytes that are visible, and verified by the scan, but
    // were never synced: records at the end of the newest segment, the seal
    // of the one before it. Older segments were synced before a later one
    // was written. Make them durable before anything is written after them
    // or reported durable.
    for &first_seq in newest_two {
        let name = segment_name(first_seq);
        let describe = storage.describe(&name);
        storage
            .open_append(&name)
            .map_err(|error| io_error("open", &describe, error))?
            .sync_data()
            .map_err(|error| io_error("fdatasync", &describe, error))?;
    }
    Ok(())
}

/// Removes temporary segment files: a roll that crashed before its rename.
pub(crate) fn remove_tmp_debris(storage: &dyn Storage) -> Result<(), LogError> {
    let names = storage
        .list()
        .map_err(|error| io_error("list", &storage.describe(""), error))?;
    let mut removed = false;
    let debris = |name: &&String| is_segment_tmp_name(name) || is_torn_copy_part(name);
    for name in names.iter().filter(debris) {
        tracing::warn!(file = %storage.describe(name), "removing a file a crash left half made");
        storage
            .remove(name)
            .map_err(|error| io_error("remove", &storage.describe(name), error))?;
        removed = true;
    }
    if removed {
        storage
            .sync_dir()
            .map_err(|error| io_error("sync directory", &storage.describe(""), error))?;
    }
    Ok(())
}

/// The suffix of a copy of torn bytes while it is written: the copy takes
/// its name only once it is whole and synced, so an open that fails while
/// saving leaves no empty or partial copy behind.
const TORN_PART_SUFFIX: &str = ".part";

/// Whether `name` is a copy of torn bytes a crash or a failure left half
/// written: its bytes are still in the segment, which is cut only after
/// the copy is whole.
fn is_torn_copy_part(name: &str) -> bool {
    name.strip_suffix(TORN_PART_SUFFIX)
        .is_some_and(|copy| copy.contains(".torn-"))
}

/// Copies `len` bytes of `name` from `offset` to a new file beside it,
/// durably, and returns the copy's name.
fn save_aside(
    storage: &dyn Storage,
    name: &str,
    offset: u64,
    len: u64,
) -> Result<String, LogError> {
    let len_usize = usize::try_from(len).unwrap_or(usize::MAX);
    let bytes = storage
        .read_range(name, offset, len_usize)
        .map_err(|error| io_error("read", &storage.describe(name), error))?;
    assert_eq!(bytes.len() as u64, len, "torn bytes are read back whole");
    let existing: BTreeSet<String> = storage
        .list()
        .map_err(|error| io_error("list", &storage.describe(""), error))?
        .into_iter()
        .collect();
    let base = format!("{name}.torn-{offset}");
    let aside = std::iter::once(base.clone())
        .chain((1..=TORN_COPIES_MAX).map(|copy| format!("{base}.{copy}")))
        .find(|candidate| !existing.contains(candidate))
        .ok_or_else(|| LogError::Io {
            op: "save torn bytes",
            file: storage.describe(&base),
            source: io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{TORN_COPIES_MAX} copies exist already"),
            ),
        })?;
    let part = format!("{aside}{TORN_PART_SUFFIX}");
    write_whole(storage, &part, &bytes)?;
    storage
        .rename(&part, &aside)
        .map_err(|error| io_error("rename", &storage.describe(&part), error))?;
    storage
        .sync_dir()
        .map_err(|error| io_error("sync directory", &storage.describe(""), error))?;
    Ok(aside)
}

/// Writes `bytes` to the new file `name` and syncs it. A file created but
/// not written whole is removed, if it can be: the torn bytes are still in
/// the segment, so a failed copy is only in the way of the next attempt
/// (and a copy that cannot be removed is removed by the next open).
fn write_whole(storage: &dyn Storage, name: &str, bytes: &[u8]) -> Result<(), LogError> {
    let describe = storage.describe(name);
    let mut file = storage
        .create_new(name)
        .map_err(|error| io_error("create", &describe, error))?;
    let written = file
        .append(bytes)
        .map_err(|error| io_error("write", &describe, error))
        .and_then(|()| {
            file.sync_data()
                .map_err(|error| io_error("fdatasync", &describe, error))
        });
    if written.is_err() {
        drop(file);
        let _ = storage.remove(name);
    }
    written
}

/// Saves the torn bytes of `name` after `valid_end`, then truncates the file
/// there and syncs it. Returns where the bytes were saved.
fn cut_tail(
    storage: &dyn Storage,
    file: &mut dyn StorageFile,
    name: &str,
    valid_end: u64,
    torn_len: u64,
) -> Result<String, LogError> {
    let saved_as = save_aside(storage, name, valid_end, torn_len)?;
    let describe = storage.describe(name);
    file.set_len(valid_end)
        .map_err(|error| io_error("truncate", &describe, error))?;
    file.sync_data()
        .map_err(|error| io_error("fdatasync", &describe, error))?;
    tracing::warn!(
        file = %describe,
        offset = valid_end,
        bytes = torn_len,
        saved_as = %saved_as,
        "cut a torn tail off the log"
    );
    Ok(saved_as)
}
