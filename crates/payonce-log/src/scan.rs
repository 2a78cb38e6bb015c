//! Verification of a whole log, one frame at a time: the one place that
//! decides what is a record, what is a torn tail and what is corruption.
//! Writers, readers and iterators all walk the log through [`Cursor`].

use crate::chain::{BatchHasher, Digest, Head};
use crate::checkpoint::{self, Found};
use crate::config::LogConfig;
use crate::error::{Damage, HeadSource, LogError, io_error};
use crate::format::{
    ALIGN, BATCH_HEADER_LEN, BATCH_MARKER, BatchHeader, FORMAT_VERSION, FORMAT_VERSION_V1,
    FRAME_HEADER_LEN, Header, SEAL_LEN, SEAL_MARKER, SEGMENT_HEADER_LEN, chained_crc, first_chain,
    frame_fields, frame_len, parse_segment_name, segment_name,
};
use crate::record::TornTail;
use crate::record::{Position, Record};
use std::sync::Arc;

use crate::storage::Storage;

/// Who is scanning: a writer may repair what a crash left; a reader changes
/// nothing and must tolerate a writer working at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Write,
    Read,
}

/// The first sequence numbers of the segment files in `storage`, sorted.
pub(crate) fn list_segments(storage: &dyn Storage) -> Result<Vec<u64>, LogError> {
    let names = storage
        .list()
        .map_err(|error| io_error("list", &storage.describe(""), error))?;
    let mut segments: Vec<u64> = names
        .iter()
        .filter_map(|name| parse_segment_name(name))
        .collect();
    segments.sort_unstable();
    Ok(segments)
}

/// The bytes in the segment files of the log in `storage`, 0 if it has
/// none (or its directory does not exist yet): what opening or scanning it
/// will read, for sizing the work before it starts.
pub fn segments_len(storage: &dyn Storage) -> Result<u64, LogError> {
    let segments = match list_segments(storage) {
        Err(LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(0);
        }
        listed => listed?,
    };
    segments
        .into_iter()
        .map(|first_seq| {
            let name = segment_name(first_seq);
            storage
                .len(&name)
                .map_err(|error| io_error("stat", &storage.describe(&name), error))
        })
        .sum()
}

/// Most times one read-only scan reads the newest segment again because
/// records seemed to follow damage, which a writer writing over zeros at the
/// same moment can make it see (see [`Cursor::reread_segment`]).
const CONCURRENT_REREADS_MAX: u32 = 8;

/// Whether every byte of `bytes` is zero.
fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&byte| byte == 0)
}

/// The length of `bytes` without its trailing zeros.
fn nonzero_extent(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1)
}

/// The last segment, as the scan left it.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    pub(crate) first_seq: u64,
    /// End of the last good frame (or of the header).
    pub(crate) valid_end: u64,
    /// Torn bytes after `valid_end`, up to the last that is not zero.
    pub(crate) torn_len: u64,
    /// The header is shorter than a header: the segment holds nothing.
    pub(crate) header_torn: bool,
    /// The header's [`Header::zeros_ahead`] flag.
    pub(crate) zeros_ahead: bool,
    /// The header's format version (the current one for a torn header).
    pub(crate) version: u32,
}

/// A head the scan must pass, and whether it has.
#[derive(Debug, Clone, Copy)]
struct Required {
    from: HeadSource,
    head: Head,
    met: bool,
}

/// A second-to-last segment left unsealed by a roll cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsealed {
    pub(crate) first_seq: u64,
    pub(crate) valid_end: u64,
    pub(crate) torn_len: u64,
    /// The chain value its seal must continue from.
    pub(crate) chain: u32,
}

/// A frame that does not verify.
#[derive(Debug)]
struct Bad {
    damage: Damage,
    expected: String,
    found: String,
    /// The frame's checksum verified: it is whole, so it cannot be torn.
    whole: bool,
    /// Where the damage is: the frame's offset, or a record's inside the
    /// batch being read (the batch's own offset is where it would be cut).
    at: usize,
    /// Where the batch's declared extent ends, if its header verified.
    batch_end: Option<usize>,
}

/// `bad`, found inside a batch whose declared extent ends at `end`.
fn in_batch(end: usize, bad: Bad) -> Bad {
    Bad {
        batch_end: Some(end),
        ..bad
    }
}

impl Bad {
    fn torn(damage: Damage, at: usize, expected: String, found: String) -> Bad {
        Bad {
            damage,
            expected,
            found,
            whole: false,
            at,
            batch_end: None,
        }
    }

    fn whole(damage: Damage, at: usize, expected: String, found: String) -> Bad {
        Bad {
            whole: true,
            ..Bad::torn(damage, at, expected, found)
        }
    }
}

enum Step {
    Record { len: usize, size: usize, crc: u32 },
    Batch(BatchHeader),
    Seal { next_seq: u64 },
    End,
    Bad(Bad),
}

/// A verifying walk over a log's segments.
pub(crate) struct Cursor {
    storage: Arc<dyn Storage>,
    record_max: u32,
    segment_len_max: u64,
    mode: Mode,
    segments: Vec<u64>,
    index: usize,
    loaded: bool,
    done: bool,
    /// Whether `seq` and `chain` come from the previous segment (or the log's
    /// start), so the next header must continue them.
    continuing: bool,
    buf: Vec<u8>,
    name: String,
    first_seq: u64,
    /// The current segment's header says zeros may follow its records.
    zeros_ahead: bool,
    /// The current segment's format version (the last one read, between
    /// segments).
    version: u32,
    /// Records of the batch being handed out that are still to come.
    batch_left: u32,
    /// The batch being handed out.
    batch: Option<BatchHeader>,
    /// The chain digest of the last whole batch.
    digest: Digest,
    /// The walk started at the log's first record, so it follows the
    /// digest chain (recomputing it, in a read), reads the checkpoint, and
    /// checks required heads.
    chained: bool,
    /// Heads the log must contain.
    required: Vec<Required>,
    /// The checkpoint as the walk found it, before its first segment.
    pub(crate) checkpoint: Option<Found>,
    /// Batches of the current format verified.
    batches: u64,
    /// The checks at the end of the walk ran.
    finished: bool,
    /// Times this scan read a segment again (see [`CONCURRENT_REREADS_MAX`]).
    rereads: u32,
    pos: usize,
    /// The next expected sequence number.
    seq: u64,
    /// The chain value the next frame continues from.
    chain: u32,
    /// Records below this are verified but not handed out.
    from: u64,
    /// The walk may start at a later segment than the first: at the one
    /// holding the lowest sequence number it must check ([`Cursor::start_late`]).
    late: bool,
    /// The head of the last whole batch the walk passed, in any mode.
    pub(crate) last_head: Option<Head>,
    pub(crate) log_id: Option<u64>,
    pub(crate) records: u64,
    pub(crate) segments_verified: u64,
    pub(crate) tail: Option<Tail>,
    pub(crate) unsealed: Option<Unsealed>,
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("segment", &self.name)
            .field("offset", &self.pos)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Cursor {
    /// A cursor over every segment of `segments` (sorted, non-empty), from
    /// the start of the log.
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        config: &LogConfig,
        mode: Mode,
        segments: Vec<u64>,
    ) -> Cursor {
        assert!(!segments.is_empty());
        assert!(segments.windows(2).all(|pair| pair[0] < pair[1]));
        Cursor {
            storage,
            record_max: config.record_max,
            segment_len_max: config.segment_len_max,
            mode,
            segments,
            index: 0,
            loaded: false,
            done: false,
            continuing: true,
            buf: Vec::new(),
            name: String::new(),
            first_seq: 0,
            zeros_ahead: false,
            version: FORMAT_VERSION_V1,
            batch_left: 0,
            batch: None,
            digest: Digest::GENESIS,
            chained: true,
            required: Vec::new(),
            checkpoint: None,
            batches: 0,
            finished: false,
            rereads: 0,
            pos: 0,
            seq: 1,
            chain: 0,
            from: 0,
            late: false,
            last_head: None,
            log_id: None,
            records: 0,
            segments_verified: 0,
            tail: None,
            unsealed: None,
        }
    }

    /// A cursor that starts at the segment holding `from` and hands out
    /// records from `from` on. The segment's header is trusted for the chain
    /// (it is checksummed); the log id is taken from the first segment.
    pub(crate) fn starting_at(
        storage: Arc<dyn Storage>,
        config: &LogConfig,
        segments: Vec<u64>,
        from: u64,
    ) -> Result<Cursor, LogError> {
        // A read from the first record verifies every segment file from the
        // lowest-numbered, as a writer does, so a stray file numbered below
        // the first segment is refused rather than skipped.
        let index = if from <= 1 {
            0
        } else {
            segments
                .partition_point(|&first| first <= from)
                .saturating_sub(1)
        };
        let mut cursor = Cursor::new(storage, config, Mode::Read, segments);
        cursor.from = from;
        if index > 0 {
            cursor.log_id = Some(cursor.read_log_id(cursor.segments[0])?);
            cursor.index = index;
            cursor.continuing = false;
            cursor.chained = false;
        }
        Ok(cursor)
    }

    /// Requires the log to contain `head` (the genesis head always is):
    /// the walk refuses a log that ends before it
    /// ([`LogError::MissingHead`]) or holds another batch there
    /// ([`LogError::HeadMismatch`]). Only before the walk starts, from the
    /// log's first record.
    pub(crate) fn require(&mut self, from: HeadSource, head: Head) -> Result<(), LogError> {
        assert!(
            self.chained && !self.loaded && self.records == 0,
            "heads are required of a whole walk, before it starts"
        );
        if head.seq == 0 {
            if head != Head::GENESIS {
                return Err(self.mismatch(from, head, Head::GENESIS));
            }
            return Ok(());
        }
        self.required.push(Required {
            from,
            head,
            met: false,
        });
        Ok(())
    }

    /// Hands out records from `from` on, and lets a walk from the log's
    /// first record start at a later segment: the one holding the lowest
    /// sequence number it must check, which is `from` or a required head
    /// (the checkpoint's among them), and never past the second-newest
    /// segment, whose seal the open checks. The headers of the segments
    /// passed over are read and checked (their log, their names); their
    /// records are not. A walk through segments of format version 1, whose
    /// digests are computed rather than read, starts at the first. Only
    /// before the walk starts.
    pub(crate) fn start_late(&mut self, from: u64) {
        assert!(
            self.chained && !self.loaded && self.records == 0,
            "a walk starts late only from the log's first record, before it starts"
        );
        self.from = from;
        self.late = true;
    }

    /// Moves the walk's start to the segment [`Cursor::start_late`] says,
    /// once the required heads are all known.
    fn skip_to_late_start(&mut self) -> Result<(), LogError> {
        let lowest = self
            .required
            .iter()
            .map(|required| required.head.seq)
            .filter(|&seq| seq >= 1)
            .fold(self.from, u64::min);
        let holding = self
            .segments
            .partition_point(|&first| first <= lowest)
            .saturating_sub(1);
        let index = holding.min(self.segments.len().saturating_sub(2));
        if index == 0 {
            return Ok(());
        }
        let log_id = self.read_header(self.segments[0])?.log_id;
        let mut version = FORMAT_VERSION_V1;
        for &first_seq in &self.segments[1..=index] {
            let header = self.read_header(first_seq)?;
            let name = segment_name(first_seq);
            if header.first_seq != first_seq {
                return Err(self.corrupt_in(
                    &name,
                    24,
                    first_seq,
                    Damage::Name,
                    format!("first seq {first_seq}, as the file name says"),
                    format!("first seq {}", header.first_seq),
                ));
            }
            if header.log_id != log_id {
                return Err(self.corrupt_in(
                    &name,
                    16,
                    first_seq,
                    Damage::LogId,
                    format!("log id {log_id:#018x}"),
                    format!("log id {:#018x}", header.log_id),
                ));
            }
            version = header.version;
        }
        if version == FORMAT_VERSION_V1 {
            return Ok(());
        }
        self.log_id = Some(log_id);
        self.index = index;
        self.continuing = false;
        Ok(())
    }

    fn mismatch(&self, from: HeadSource, expected: Head, found: Head) -> LogError {
        LogError::HeadMismatch {
            dir: self.storage.describe(""),
            from,
            expected,
            found,
        }
    }

    /// The head of the last whole batch; the genesis head for a walk that
    /// started past the first segment, which cannot know it.
    pub(crate) fn head(&self) -> Head {
        if !self.chained {
            return Head::GENESIS;
        }
        Head {
            seq: self.seq - 1,
            digest: self.digest,
        }
    }

    /// The walk passed the batch `first_seq..=head.seq`: any required head
    /// in it must be exactly `head`.
    fn reach(&mut self, first_seq: u64, head: Head) -> Result<(), LogError> {
        let mut mismatch = None;
        for required in &mut self.required {
            if !required.met && (first_seq..=head.seq).contains(&required.head.seq) {
                required.met = true;
                if required.head != head && mismatch.is_none() {
                    mismatch = Some((required.from, required.head));
                }
            }
        }
        match mismatch {
            Some((from, expected)) => Err(self.mismatch(from, expected, head)),
            None => Ok(()),
        }
    }

    /// The checks once the walk has ended: a log with batches has its
    /// checkpoint, and reaches every required head.
    fn finish(&mut self) -> Result<(), LogError> {
        if !self.chained {
            return Ok(());
        }
        if self.checkpoint.is_none() && self.batches > 0 {
            return Err(LogError::Corrupt {
                file: self.storage.describe(crate::format::CHECKPOINT_FILE),
                offset: 0,
                seq: 0,
                damage: Damage::Checkpoint,
                expected: "the checkpoint file of a log with batches of format version 2"
                    .to_owned(),
                found: "no such file".to_owned(),
            });
        }
        let head = self.head();
        let torn = self.tail.as_ref().and_then(|tail| {
            (tail.torn_len > 0 || tail.header_torn).then(|| {
                Box::new(TornTail {
                    segment: tail.first_seq,
                    offset: tail.valid_end,
                    len: tail.torn_len,
                    saved_as: None,
                })
            })
        });
        match self.required.iter().find(|required| !required.met) {
            Some(required) => Err(LogError::MissingHead {
                dir: self.storage.describe(""),
                from: required.from,
                expected: required.head,
                head,
                torn,
            }),
            None => Ok(()),
        }
    }

    fn read_log_id(&self, first_seq: u64) -> Result<u64, LogError> {
        Ok(self.read_header(first_seq)?.log_id)
    }

    /// Walks to record `seq` and answers the head of the batch that ends
    /// there, if one does.
    pub(crate) fn head_ending_at(mut self, seq: u64) -> Result<Option<Head>, LogError> {
        while let Some(record) = self.next_record()? {
            if record.seq >= seq {
                break;
            }
        }
        Ok(self.last_head.filter(|head| head.seq == seq))
    }

    /// The log id in the first segment's header.
    pub(crate) fn first_log_id(&self) -> Result<u64, LogError> {
        self.read_log_id(self.segments[0])
    }

    /// The checked header of segment `first_seq`, read alone.
    fn read_header(&self, first_seq: u64) -> Result<Header, LogError> {
        let name = segment_name(first_seq);
        let bytes = self
            .storage
            .read_range(&name, 0, SEGMENT_HEADER_LEN)
            .map_err(|error| io_error("read", &self.storage.describe(&name), error))?;
        if bytes.len() < SEGMENT_HEADER_LEN {
            return Err(self.corrupt_in(
                &name,
                0,
                first_seq,
                Damage::Header,
                format!("a {SEGMENT_HEADER_LEN}-byte header"),
                format!("{} bytes", bytes.len()),
            ));
        }
        Header::decode(&bytes).map_err(|fault| {
            let (expected, found) = fault.expected_found();
            self.corrupt_in(&name, 0, first_seq, Damage::Header, expected, found)
        })
    }

    fn corrupt_in(
        &self,
        name: &str,
        offset: u64,
        seq: u64,
        damage: Damage,
        expected: String,
        found: String,
    ) -> LogError {
        LogError::Corrupt {
            file: self.storage.describe(name),
            offset,
            seq,
            damage,
            expected,
            found,
        }
    }

    fn corrupt(&self, offset: u64, damage: Damage, expected: String, found: String) -> LogError {
        self.corrupt_in(&self.name, offset, self.seq, damage, expected, found)
    }

    fn is_last(&self) -> bool {
        self.index + 1 == self.segments.len()
    }

    /// The next verified record, `None` at the end of the log.
    #[inline]
    pub(crate) fn next_record(&mut self) -> Result<Option<Record<'_>>, LogError> {
        loop {
            if self.done {
                if !self.finished {
                    self.finished = true;
                    self.finish()?;
                }
                return Ok(None);
            }
            if !self.loaded {
                self.load_segment()?;
                continue;
            }
            let offset = self.pos;
            match self.step_any() {
                Step::Batch(header) => {
                    self.batch_left = header.count;
                    self.batch = Some(header);
                    self.pos = offset + BATCH_HEADER_LEN;
                    self.batches += 1;
                }
                Step::Record { len, size, crc } => {
                    let seq = self.seq;
                    let chain = self.chain;
                    let Some(next) = self.seq.checked_add(1) else {
                        return Err(self.corrupt(
                            offset as u64,
                            Damage::Sequence,
                            "a seq below u64::MAX".to_owned(),
                            format!("seq {}", self.seq),
                        ));
                    };
                    self.chain = crc;
                    self.seq = next;
                    self.pos = offset + size;
                    self.records += 1;
                    if self.batch_left > 0 {
                        self.batch_left -= 1;
                        if self.batch_left == 0 {
                            self.end_batch()?;
                        }
                    }
                    if seq < self.from {
                        continue;
                    }
                    let start = offset + FRAME_HEADER_LEN;
                    let payload = &self.buf[start..start + len];
                    assert_eq!(payload.len(), len);
                    return Ok(Some(Record {
                        seq,
                        payload,
                        position: Position {
                            segment: self.first_seq,
                            offset: offset as u64,
                            chain,
                        },
                    }));
                }
                Step::Seal { next_seq } => self.end_sealed(offset, next_seq)?,
                Step::End => self.end_unsealed(offset, None)?,
                Step::Bad(bad) => self.end_unsealed(offset, Some(bad))?,
            }
        }
    }

    /// What stands at `self.pos` if it is the end, a short header or a
    /// seal; otherwise the fields of the frame header there (a record's,
    /// or a batch header's first 16 bytes). `expected` names what a short
    /// header should have been.
    #[inline]
    fn step_boundary(&self, expected: impl FnOnce() -> String) -> Result<(u32, u32, u64), Step> {
        let buf = &self.buf;
        let offset = self.pos;
        let remaining = buf.len() - offset;
        let header_len = remaining.min(FRAME_HEADER_LEN);
        if remaining == 0
            || self.zeros_ahead
                && is_zero(&buf[offset..offset + header_len])
                && is_zero(&buf[offset..])
        {
            // Nothing left, or only zeros written ahead of the records. (No
            // record has seq 0, so a zero frame header is never one.)
            return Err(Step::End);
        }
        if remaining < FRAME_HEADER_LEN {
            return Err(Step::Bad(Bad::torn(
                Damage::Length,
                offset,
                expected(),
                format!("{remaining} bytes before the end of the file"),
            )));
        }
        let (stored, len, seq) = frame_fields(buf, offset);
        if len == SEAL_MARKER {
            let computed = chained_crc(self.chain, &buf[offset + 4..offset + SEAL_LEN]);
            if computed != stored {
                return Err(Step::Bad(self.checksum_bad(stored, computed, seq, "seal")));
            }
            return Err(Step::Seal { next_seq: seq });
        }
        Ok((stored, len, seq))
    }

    /// Examines the frame at `self.pos`.
    #[inline]
    fn step(&self) -> Step {
        let buf = &self.buf;
        let offset = self.pos;
        let remaining = buf.len() - offset;
        let (stored, len, seq) =
            match self.step_boundary(|| format!("a {FRAME_HEADER_LEN}-byte frame header")) {
                Ok(fields) => fields,
                Err(step) => return step,
            };
        if len > self.record_max {
            return Step::Bad(self.oversized(stored, len));
        }
        let size = frame_len(len) as usize;
        if size > remaining {
            return Step::Bad(Bad::torn(
                Damage::Length,
                offset,
                format!("a {size}-byte frame (length {len})"),
                format!("{remaining} bytes before the end of the file"),
            ));
        }
        let computed = chained_crc(self.chain, &buf[offset + 4..offset + size]);
        if computed != stored {
            return Step::Bad(self.checksum_bad(stored, computed, seq, "record"));
        }
        if seq != self.seq {
            return Step::Bad(Bad::whole(
                Damage::Sequence,
                offset,
                format!("seq {}", self.seq),
                format!("a whole record with seq {seq}"),
            ));
        }
        Step::Record {
            len: len as usize,
            size,
            crc: stored,
        }
    }

    /// What stands at `self.pos`, read by the current segment's format.
    #[inline]
    fn step_any(&self) -> Step {
        if self.version == FORMAT_VERSION_V1 {
            self.step()
        } else if self.batch_left > 0 {
            self.step_in_batch()
        } else {
            self.step_batch()
        }
    }

    /// The next record of a batch whose frames [`Cursor::step_batch`]
    /// verified already.
    #[inline]
    fn step_in_batch(&self) -> Step {
        let (crc, len, seq) = frame_fields(&self.buf, self.pos);
        debug_assert_eq!(seq, self.seq);
        Step::Record {
            len: len as usize,
            size: frame_len(len) as usize,
            crc,
        }
    }

    /// Examines what stands at `self.pos`, a batch boundary of a segment of
    /// the current format: a batch (its header and every record frame in
    /// its extent verified, and its digest, in a walk from the start), a
    /// seal, the end, or damage.
    fn step_batch(&self) -> Step {
        let buf = &self.buf;
        let offset = self.pos;
        let remaining = buf.len() - offset;
        let marker = match self.step_boundary(|| format!("a {BATCH_HEADER_LEN}-byte batch header"))
        {
            Ok((_, marker, _)) => marker,
            Err(step) => return step,
        };
        let log_id = self.log_id.unwrap_or_default();
        let header = (marker == BATCH_MARKER && remaining >= BATCH_HEADER_LEN)
            .then(|| BatchHeader::decode(&buf[offset..], log_id))
            .flatten();
        let Some(header) = header else {
            return Step::Bad(Bad::torn(
                Damage::Checksum,
                offset,
                format!("a batch header of seq {} that verifies", self.seq),
                format!(
                    "{} bytes that do not (length field {marker:#010x})",
                    remaining.min(BATCH_HEADER_LEN)
                ),
            ));
        };
        match self.check_batch(offset, &header) {
            Ok(()) => Step::Batch(header),
            Err(bad) => Step::Bad(bad),
        }
    }

    /// Checks the batch whose header at `offset` verified: it continues the
    /// log, and its extent holds exactly its records, each verifying and
    /// chained, hashing to its digest.
    fn check_batch(&self, offset: usize, header: &BatchHeader) -> Result<(), Bad> {
        let whole =
            |damage, expected: String, found: String| Bad::whole(damage, offset, expected, found);
        if header.first_seq != self.seq {
            return Err(whole(
                Damage::Sequence,
                format!("a batch starting at seq {}", self.seq),
                format!("a whole batch header starting at seq {}", header.first_seq),
            ));
        }
        if header.chain != self.chain {
            return Err(whole(
                Damage::Chain,
                format!("a batch chained from {:#010x}", self.chain),
                format!("a whole batch header chained from {:#010x}", header.chain),
            ));
        }
        let extent = header.extent as usize;
        let fits = offset as u64 + (BATCH_HEADER_LEN + extent) as u64 <= self.segment_len_max;
        if header.count == 0
            || !extent.is_multiple_of(ALIGN)
            || (extent as u64) < u64::from(header.count) * FRAME_HEADER_LEN as u64
            || !fits
        {
            return Err(whole(
                Damage::Length,
                "a batch of at least one record inside the segment".to_owned(),
                format!(
                    "a whole batch header of {} records in {extent} bytes",
                    header.count
                ),
            ));
        }
        let end = offset + BATCH_HEADER_LEN + extent;
        let mut bad = self.check_batch_records(offset, header, end)?;
        if let Some(hasher) = bad.take()
            && hasher.finish() != header.digest
        {
            return Err(whole(
                Damage::Digest,
                format!("the digest {} the batch header holds", header.digest),
                "records that hash to another".to_owned(),
            ));
        }
        Ok(())
    }

    /// Checks the record frames of the batch at `offset`, which end at
    /// `end`; returns the digest being computed, in a walk from the start.
    fn check_batch_records(
        &self,
        offset: usize,
        header: &BatchHeader,
        end: usize,
    ) -> Result<Option<BatchHasher>, Bad> {
        let buf = &self.buf;
        if end > buf.len() {
            return Err(in_batch(
                end,
                Bad::torn(
                    Damage::Length,
                    offset,
                    format!("a batch of {} bytes", end - offset),
                    format!("{} bytes before the end of the file", buf.len() - offset),
                ),
            ));
        }
        // A read from the first record (verify, an audit, an expected head)
        // recomputes every digest. Opening for writing trusts the digest a
        // batch header holds, which its checksum covers against accidents:
        // what it checks, the checkpoint's and a witness's heads, are
        // against loss and rollback, and hashing every batch again would
        // double the cost of replay.
        let mut hasher = (self.chained && self.mode == Mode::Read)
            .then(|| BatchHasher::new(&self.digest, header.first_seq, header.count));
        let mut at = offset + BATCH_HEADER_LEN;
        let mut chain = header.chain;
        for index in 0..u64::from(header.count) {
            let seq = header.first_seq + index;
            let (stored, len, size) = self
                .check_batch_frame(at, end, chain, seq)
                .map_err(|bad| in_batch(end, bad))?;
            if let Some(hasher) = &mut hasher {
                hasher.record(&buf[at + FRAME_HEADER_LEN..at + FRAME_HEADER_LEN + len]);
            }
            chain = stored;
            at += size;
        }
        if at != end {
            return Err(in_batch(
                end,
                Bad::whole(
                    Damage::Length,
                    at,
                    format!("the batch's records ending at byte {end}"),
                    format!("its {} records ending at byte {at}", header.count),
                ),
            ));
        }
        Ok(hasher)
    }

    /// Checks the frame at `at` of a batch whose extent ends at `end`: record
    /// `seq`, chained from `chain`. Returns its checksum, payload length and
    /// frame size.
    fn check_batch_frame(
        &self,
        at: usize,
        end: usize,
        chain: u32,
        seq: u64,
    ) -> Result<(u32, usize, usize), Bad> {
        let buf = &self.buf;
        if at + FRAME_HEADER_LEN > end {
            return Err(Bad::torn(
                Damage::Length,
                at,
                format!("record {seq} inside the batch's extent"),
                format!("the extent ends at byte {end}"),
            ));
        }
        let (stored, len, found_seq) = frame_fields(buf, at);
        let expected_len = || format!("a record length of at most {}", self.record_max);
        if len > self.record_max {
            // Whole if it verifies: written with a larger record_max.
            let size = frame_len(len);
            let whole = at as u64 + size <= end as u64
                && chained_crc(chain, &buf[at + 4..at + size as usize]) == stored;
            if whole {
                let found =
                    format!("a whole record of length {len}, written with a larger record_max");
                return Err(Bad::whole(Damage::Length, at, expected_len(), found));
            }
            return Err(Bad::torn(
                Damage::Length,
                at,
                expected_len(),
                format!("length {len}"),
            ));
        }
        let size = frame_len(len) as usize;
        if at + size > end {
            let expected = format!("record {seq} inside the batch's extent, ending at byte {end}");
            return Err(Bad::torn(
                Damage::Length,
                at,
                expected,
                format!("length {len}"),
            ));
        }
        let computed = chained_crc(chain, &buf[at + 4..at + size]);
        if computed != stored {
            return Err(Bad::torn(
                Damage::Checksum,
                at,
                format!("record checksum {computed:#010x} (seq {seq} chained from {chain:#010x})"),
                format!("stored checksum {stored:#010x}, seq field {found_seq}"),
            ));
        }
        if found_seq != seq {
            return Err(Bad::whole(
                Damage::Sequence,
                at,
                format!("seq {seq}"),
                format!("a whole record with seq {found_seq}"),
            ));
        }
        Ok((stored, len as usize, size))
    }

    /// The last record of a batch was handed out: its digest is the chain's.
    fn end_batch(&mut self) -> Result<(), LogError> {
        let Some(header) = self.batch.take() else {
            unreachable!("a batch is being handed out");
        };
        self.digest = header.digest;
        let head = Head {
            seq: self.seq - 1,
            digest: header.digest,
        };
        self.last_head = Some(head);
        if self.chained {
            self.reach(header.first_seq, head)?;
        }
        Ok(())
    }

    /// A segment of format version 1 ends at `end`: its records are one
    /// batch of the digest chain.
    fn finish_v1_segment(&mut self, end: usize) -> Result<(), LogError> {
        if !self.chained || self.version != FORMAT_VERSION_V1 || self.seq == self.first_seq {
            return Ok(());
        }
        let count = u32::try_from(self.seq - self.first_seq).unwrap_or(u32::MAX);
        let mut hasher = BatchHasher::new(&self.digest, self.first_seq, count);
        let mut at = SEGMENT_HEADER_LEN;
        while at < end {
            let (_, len, _) = frame_fields(&self.buf, at);
            let start = at + FRAME_HEADER_LEN;
            hasher.record(&self.buf[start..start + len as usize]);
            at += frame_len(len) as usize;
        }
        assert_eq!(at, end, "the segment's records were verified");
        self.digest = hasher.finish();
        let head = Head {
            seq: self.seq - 1,
            digest: self.digest,
        };
        self.last_head = Some(head);
        self.reach(self.first_seq, head)
    }

    /// After damage at `bad_offset` in the newest segment of the current
    /// format, the offset of a later batch header: a batch of this log
    /// written after the damaged one, which was therefore synced before it
    /// and is not a torn write. Searched past the damaged batch's extent if
    /// its header verified (inside it are its own records), else past the
    /// damage.
    fn later_batch(&self, bad_offset: usize, bad: &Bad) -> Option<usize> {
        let buf = &self.buf;
        let log_id = self.log_id?;
        let mut candidate = bad.batch_end.unwrap_or(bad_offset + ALIGN);
        while candidate + BATCH_HEADER_LEN <= buf.len() {
            if let Some(header) = BatchHeader::decode(&buf[candidate..], log_id) {
                let fit = ((candidate - bad_offset) / FRAME_HEADER_LEN) as u64 + 1;
                if header.first_seq > self.seq && header.first_seq <= self.seq.saturating_add(fit) {
                    return Some(candidate);
                }
            }
            candidate += ALIGN;
        }
        None
    }

    /// The frame at `self.pos`, whose length `len` is above the record
    /// maximum. A frame that verifies despite its length was written with a
    /// larger limit: it is whole, so it is refused rather than cut as torn.
    fn oversized(&self, stored: u32, len: u32) -> Bad {
        let buf = &self.buf;
        let offset = self.pos;
        let size = frame_len(len);
        let whole = size <= (buf.len() - offset) as u64
            && chained_crc(self.chain, &buf[offset + 4..offset + size as usize]) == stored;
        let expected = format!("a record length of at most {}", self.record_max);
        if whole {
            let found = format!("a whole record of length {len}, written with a larger record_max");
            Bad::whole(Damage::Length, offset, expected, found)
        } else {
            Bad::torn(Damage::Length, offset, expected, format!("length {len}"))
        }
    }

    fn checksum_bad(&self, stored: u32, computed: u32, seq: u64, what: &str) -> Bad {
        Bad::torn(
            Damage::Checksum,
            self.pos,
            format!(
                "{what} checksum {computed:#010x} (seq {} chained from {:#010x})",
                self.seq, self.chain
            ),
            format!("stored checksum {stored:#010x}, seq field {seq}"),
        )
    }

    /// Reads `segments[index]` and checks its header.
    fn load_segment(&mut self) -> Result<(), LogError> {
        let first_load = self.segments_verified == 0;
        if first_load && self.chained {
            // Before any segment is read: what the checkpoint names was
            // written before it, so this walk sees it. Required at once, so
            // a log whose first segment is torn or empty is refused too.
            self.checkpoint = checkpoint::read(&*self.storage)?;
            if let Some(found) = self.checkpoint {
                self.require(HeadSource::Checkpoint, found.slot.head)?;
            }
            if self.late {
                self.skip_to_late_start()?;
            }
        }
        let first_seq = self.segments[self.index];
        self.name = segment_name(first_seq);
        self.first_seq = first_seq;
        self.read_segment()?;
        self.check_continues(first_seq)?;
        if self.buf.len() < SEGMENT_HEADER_LEN {
            return self.end_at_short_header(first_seq);
        }
        let header = Header::decode(&self.buf[..SEGMENT_HEADER_LEN]).map_err(|fault| {
            let (expected, found) = fault.expected_found();
            self.corrupt(0, Damage::Header, expected, found)
        })?;
        self.check_header(&header, first_seq)?;
        if self.index > 0 && self.continuing && header.version < self.version {
            return Err(self.corrupt(
                8,
                Damage::Version,
                format!(
                    "format version {} or later, as the segment before",
                    self.version
                ),
                format!("format version {}", header.version),
            ));
        }
        if first_load
            && self.chained
            && let Some(found) = self.checkpoint
        {
            checkpoint::check_log(&*self.storage, &found, header.log_id)?;
        }
        self.version = header.version;
        self.seq = first_seq;
        self.chain = header.chain;
        self.zeros_ahead = header.zeros_ahead;
        self.continuing = true;
        self.pos = SEGMENT_HEADER_LEN;
        self.loaded = true;
        self.segments_verified += 1;
        Ok(())
    }

    /// Reads the current segment file whole into the buffer, refusing one
    /// longer than `segment_len_max` before reading it.
    fn read_segment(&mut self) -> Result<(), LogError> {
        let describe = |storage: &Arc<dyn Storage>, name: &str| storage.describe(name);
        let len = self
            .storage
            .len(&self.name)
            .map_err(|error| io_error("stat", &describe(&self.storage, &self.name), error))?;
        if len > self.segment_len_max {
            return Err(LogError::SegmentTooLong {
                file: describe(&self.storage, &self.name),
                len,
                max: self.segment_len_max,
            });
        }
        self.storage
            .read_into(&self.name, self.segment_len_max, &mut self.buf)
            .map_err(|error| io_error("read", &describe(&self.storage, &self.name), error))?;
        assert!(self.buf.len() as u64 <= self.segment_len_max);
        Ok(())
    }

    /// Refuses a segment whose name is not the sequence number the log has
    /// reached: a segment is missing before it, or it overlaps the one before.
    fn check_continues(&self, first_seq: u64) -> Result<(), LogError> {
        if !self.continuing || first_seq == self.seq {
            return Ok(());
        }
        let damage = if self.index == 0 || first_seq > self.seq {
            Damage::MissingSegment
        } else {
            Damage::Sequence
        };
        Err(self.corrupt(
            0,
            damage,
            format!("a segment starting at seq {}", self.seq),
            format!("segment {} (starting at seq {first_seq})", self.name),
        ))
    }

    /// A segment shorter than a header: a torn tail if it is the newest,
    /// damage anywhere else.
    fn end_at_short_header(&mut self, first_seq: u64) -> Result<(), LogError> {
        if !self.is_last() {
            return Err(self.corrupt(
                0,
                Damage::Header,
                format!("a {SEGMENT_HEADER_LEN}-byte header"),
                format!("{} bytes", self.buf.len()),
            ));
        }
        // The newest segment's header never fully reached the disk: it holds
        // no record, so it is a torn tail.
        self.tail = Some(Tail {
            first_seq,
            valid_end: 0,
            torn_len: self.buf.len() as u64,
            header_torn: true,
            zeros_ahead: false,
            version: FORMAT_VERSION,
        });
        self.done = true;
        Ok(())
    }

    /// Checks that a decoded header belongs where it is: the name it is
    /// filed under, the log of the first segment, and the chain carried from
    /// the previous segment.
    fn check_header(&mut self, header: &Header, first_seq: u64) -> Result<(), LogError> {
        if header.first_seq != first_seq {
            return Err(self.corrupt(
                24,
                Damage::Name,
                format!("first seq {first_seq}, as the file name says"),
                format!("first seq {}", header.first_seq),
            ));
        }
        match self.log_id {
            None => self.log_id = Some(header.log_id),
            Some(log_id) if log_id != header.log_id => {
                return Err(self.corrupt(
                    16,
                    Damage::LogId,
                    format!("log id {log_id:#018x}"),
                    format!("log id {:#018x}", header.log_id),
                ));
            }
            Some(_) => {}
        }
        if !self.continuing {
            return Ok(());
        }
        let chain = if self.index == 0 {
            first_chain(header.log_id)
        } else {
            self.chain
        };
        if header.chain != chain {
            return Err(self.corrupt(
                32,
                Damage::Chain,
                format!("chain value {chain:#010x} carried from the previous segment"),
                format!("chain value {:#010x}", header.chain),
            ));
        }
        Ok(())
    }

    /// A valid seal at `offset` closes the current segment.
    fn end_sealed(&mut self, offset: usize, next_seq: u64) -> Result<(), LogError> {
        let offset_u64 = offset as u64;
        self.finish_v1_segment(offset)?;
        if next_seq != self.seq {
            return Err(self.corrupt(
                offset_u64,
                Damage::Seal,
                format!("a seal naming seq {}", self.seq),
                format!("a seal naming seq {next_seq}"),
            ));
        }
        let after = offset + SEAL_LEN;
        let extent = self.torn_extent(after);
        if extent > 0 {
            let expected = if self.zeros_ahead {
                "nothing but zeros after the seal"
            } else {
                "nothing after the seal"
            };
            return Err(self.corrupt(
                after as u64,
                Damage::Seal,
                expected.to_owned(),
                format!("{extent} bytes"),
            ));
        }
        if self.is_last() && self.mode == Mode::Read {
            // A writer may have renamed the next segment into place after
            // this scan listed the directory: look again.
            let now = list_segments(&*self.storage)?;
            self.segments
                .extend(now.into_iter().filter(|&first| first > self.first_seq));
        }
        if self.is_last() {
            return Err(self.corrupt(
                offset_u64,
                Damage::MissingSegment,
                format!("segment {} named by the seal", segment_name(next_seq)),
                "no such segment".to_owned(),
            ));
        }
        self.index += 1;
        self.loaded = false;
        Ok(())
    }

    /// The current segment ends at `offset` without a seal, cleanly or with
    /// the bad frame `bad`.
    fn end_unsealed(&mut self, offset: usize, bad: Option<Bad>) -> Result<(), LogError> {
        if self.is_last() {
            self.end_newest(offset, bad)
        } else {
            self.end_before_newest(offset, bad)
        }
    }

    /// The newest segment ends at `offset`: the end of the log, with a torn
    /// tail after it unless the bad frame there is whole or a record that
    /// verifies follows it.
    fn end_newest(&mut self, offset: usize, bad: Option<Bad>) -> Result<(), LogError> {
        let offset_u64 = offset as u64;
        if let Some(bad) = bad {
            if bad.whole {
                return Err(self.corrupt(bad.at as u64, bad.damage, bad.expected, bad.found));
            }
            let (evidence, what) = if self.version == FORMAT_VERSION_V1 {
                (self.evidence_after(offset), "a record that verifies")
            } else {
                (self.later_batch(offset, &bad), "a later batch")
            };
            if let Some(evidence) = evidence {
                if self.mode == Mode::Read
                    && (self.zeros_ahead || self.version != FORMAT_VERSION_V1)
                    && self.rereads < CONCURRENT_REREADS_MAX
                {
                    // A writer writing while this scan copied the file can
                    // leave a page not yet written before one it has
                    // filled: read again before calling it damage.
                    self.rereads += 1;
                    return self.reread_segment(offset);
                }
                return Err(self.corrupt(
                    bad.at as u64,
                    bad.damage,
                    bad.expected,
                    format!(
                        "{}; {what} follows at byte {evidence}, so this is not a torn write",
                        bad.found
                    ),
                ));
            }
        }
        self.finish_v1_segment(offset)?;
        self.tail = Some(Tail {
            first_seq: self.first_seq,
            valid_end: offset_u64,
            torn_len: self.torn_extent(offset) as u64,
            header_torn: false,
            zeros_ahead: self.zeros_ahead,
            version: self.version,
        });
        self.done = true;
        Ok(())
    }

    /// A segment before the newest ends at `offset` without a seal: a roll
    /// cut short if the newest segment holds no record yet (or, for a
    /// reader, if a writer has sealed it since), damage otherwise.
    fn end_before_newest(&mut self, offset: usize, bad: Option<Bad>) -> Result<(), LogError> {
        let offset_u64 = offset as u64;
        let torn_len = self.torn_extent(offset) as u64;
        // A roll cut short leaves the segment before the newest unsealed (or
        // with part of its seal) while the newest holds no record yet.
        let torn_seal = match &bad {
            None => true,
            Some(bad) => !bad.whole && torn_len <= SEAL_LEN as u64,
        };
        if torn_seal && self.index + 2 == self.segments.len() {
            let next = segment_name(self.segments[self.index + 1]);
            let next_len = self
                .storage
                .len(&next)
                .map_err(|error| io_error("stat", &self.storage.describe(&next), error))?;
            if next_len <= SEGMENT_HEADER_LEN as u64 {
                self.finish_v1_segment(offset)?;
                self.unsealed = Some(Unsealed {
                    first_seq: self.first_seq,
                    valid_end: offset_u64,
                    torn_len,
                    chain: self.chain,
                });
                self.index += 1;
                self.loaded = false;
                return Ok(());
            }
            if self.mode == Mode::Read && self.sealed_since(offset)? {
                self.finish_v1_segment(offset)?;
                self.index += 1;
                self.loaded = false;
                return Ok(());
            }
        }
        Err(match bad {
            Some(bad) => self.corrupt(bad.at as u64, bad.damage, bad.expected, bad.found),
            None => self.corrupt(
                offset_u64,
                Damage::Seal,
                format!("a seal naming seq {}", self.seq),
                "the end of the file".to_owned(),
            ),
        })
    }

    /// Reads the current segment again and goes on from `offset`. The bytes
    /// before it were verified and a writer never changes them: if they
    /// changed, that is damage.
    fn reread_segment(&mut self, offset: usize) -> Result<(), LogError> {
        let bytes = self
            .storage
            .read(&self.name, self.segment_len_max)
            .map_err(|error| io_error("read", &self.storage.describe(&self.name), error))?;
        assert!(bytes.len() as u64 <= self.segment_len_max);
        let verified = &self.buf[..offset];
        if let Some(changed) = (0..offset).find(|&at| bytes.get(at) != verified.get(at)) {
            return Err(self.corrupt(
                changed as u64,
                Damage::Checksum,
                "the bytes this scan verified a moment ago".to_owned(),
                "different bytes on reading again".to_owned(),
            ));
        }
        self.buf = bytes;
        assert_eq!(self.pos, offset);
        Ok(())
    }

    /// Whether a writer has sealed the current segment at `offset` since it
    /// was read: a reader can catch a roll between its steps.
    fn sealed_since(&self, offset: usize) -> Result<bool, LogError> {
        let rest_max = self.segment_len_max.saturating_sub(offset as u64);
        let bytes = self
            .storage
            .read_range(
                &self.name,
                offset as u64,
                usize::try_from(rest_max).unwrap_or(usize::MAX),
            )
            .map_err(|error| io_error("read", &self.storage.describe(&self.name), error))?;
        if bytes.len() < SEAL_LEN {
            return Ok(false);
        }
        let (stored, len, next_seq) = frame_fields(&bytes, 0);
        let rest = &bytes[SEAL_LEN..];
        Ok(len == SEAL_MARKER
            && next_seq == self.seq
            && chained_crc(self.chain, &bytes[4..SEAL_LEN]) == stored
            && (rest.is_empty() || self.zeros_ahead && is_zero(rest)))
    }

    /// After a bad frame at `bad_offset` in the last segment, the offset of
    /// a later frame that proves the damage is not a torn write:
    ///
    /// - anywhere after it, a frame that verifies chained from the damaged
    ///   frame's stored checksum, or from the checksum recomputed over it
    ///   (a flip in the checksum field itself);
    /// - past the damaged frame's own extent (where its length field says it
    ///   ends, or anywhere if that length is impossible), and unless it looks
    ///   like a write cut short (its own sequence number and a body running
    ///   past the end of the file): a pair of frames that verify as a chain
    ///   on their own, or, exactly where the next record would start, a
    ///   well-formed frame carrying the next sequence number (damage that
    ///   took out the checksum and the body together).
    ///
    /// Bytes inside the damaged frame's extent are its own payload, which a
    /// client chose and which often holds small little-endian integers:
    /// frame-shaped bytes there prove nothing unless they chain from the
    /// damaged frame itself.
    fn evidence_after(&self, bad_offset: usize) -> Option<usize> {
        let buf = &self.buf;
        let mut seeds: [Option<u32>; 2] = [None, None];
        // Where the damaged frame says it ends, if its length is possible.
        let mut extent_end = None;
        let mut cut_short = true;
        if bad_offset + FRAME_HEADER_LEN <= buf.len() {
            let (stored, len, seq) = frame_fields(buf, bad_offset);
            seeds[0] = Some(stored);
            cut_short = false;
            if len <= self.record_max {
                let size = frame_len(len) as usize;
                extent_end = Some(bad_offset + size);
                if bad_offset + size <= buf.len() {
                    seeds[1] = Some(chained_crc(
                        self.chain,
                        &buf[bad_offset + 4..bad_offset + size],
                    ));
                } else {
                    cut_short = seq == self.seq;
                }
            }
        }
        let mut candidate = bad_offset + ALIGN;
        while candidate + FRAME_HEADER_LEN <= buf.len() {
            if let Some((stored, size, seq)) = self.plausible_frame(candidate, bad_offset) {
                let covered = &buf[candidate + 4..candidate + size];
                for seed in seeds.iter().flatten() {
                    if chained_crc(*seed, covered) == stored {
                        return Some(candidate);
                    }
                }
                let beyond = extent_end.is_none_or(|end| candidate >= end);
                if !cut_short && beyond {
                    if Some(candidate) == extent_end && seq == self.seq.saturating_add(1) {
                        return Some(candidate);
                    }
                    let next = candidate + size;
                    if next + FRAME_HEADER_LEN <= buf.len()
                        && let Some((next_stored, next_size, next_seq)) =
                            self.plausible_frame(next, bad_offset)
                        && next_seq == seq + 1
                        && chained_crc(stored, &buf[next + 4..next + next_size]) == next_stored
                    {
                        return Some(candidate);
                    }
                }
            }
            candidate += ALIGN;
        }
        None
    }

    /// The frame at `offset` if its length fits the limit and the file, and
    /// its sequence number is one that could follow a bad frame at
    /// `bad_offset`: (stored checksum, frame size, seq).
    fn plausible_frame(&self, offset: usize, bad_offset: usize) -> Option<(u32, usize, u64)> {
        let buf = &self.buf;
        let (stored, len, seq) = frame_fields(buf, offset);
        let size = if len == SEAL_MARKER {
            SEAL_LEN
        } else if len <= self.record_max {
            frame_len(len) as usize
        } else {
            return None;
        };
        if offset + size > buf.len() {
            return None;
        }
        // Every frame takes at least FRAME_HEADER_LEN bytes, which bounds how
        // many records fit between the damage and here.
        let fit = ((offset - bad_offset) / FRAME_HEADER_LEN) as u64 + 1;
        if seq < self.seq || seq > self.seq.saturating_add(fit) {
            return None;
        }
        Some((stored, size, seq))
    }

    /// The bytes from `offset` to the end of the current segment that are not
    /// free space: all of them, or, in a segment flagged as having zeros
    /// ahead, up to the last byte that is not zero.
    fn torn_extent(&self, offset: usize) -> usize {
        let rest = &self.buf[offset..];
        if self.zeros_ahead {
            nonzero_extent(rest)
        } else {
            rest.len()
        }
    }

    /// The chain value and next sequence number where the scan stopped.
    pub(crate) fn end_state(&self) -> (u64, u32) {
        (self.seq, self.chain)
    }
}
