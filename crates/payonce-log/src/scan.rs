//! Verification of a whole log, one frame at a time: the one place that
//! decides what is a record, what is a torn tail and what is corruption.
//! Writers, readers and iterators all walk the log through [`Cursor`].

use crate::config::LogConfig;
use crate::error::{Damage, LogError, io_error};
use crate::format::{
    ALIGN, FRAME_HEADER_LEN, Header, SEAL_LEN, SEAL_MARKER, SEGMENT_HEADER_LEN, chained_crc,
    first_chain, frame_fields, frame_len, parse_segment_name, segment_name,
};
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
}

enum Step {
    Record { len: usize, size: usize, crc: u32 },
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
    /// Times this scan read a segment again (see [`CONCURRENT_REREADS_MAX`]).
    rereads: u32,
    pos: usize,
    /// The next expected sequence number.
    seq: u64,
    /// The chain value the next frame continues from.
    chain: u32,
    /// Records below this are verified but not handed out.
    from: u64,
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
            rereads: 0,
            pos: 0,
            seq: 1,
            chain: 0,
            from: 0,
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
        }
        Ok(cursor)
    }

    fn read_log_id(&self, first_seq: u64) -> Result<u64, LogError> {
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
        Header::decode(&bytes)
            .map(|header| header.log_id)
            .map_err(|fault| {
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
                return Ok(None);
            }
            if !self.loaded {
                self.load_segment()?;
                continue;
            }
            let offset = self.pos;
            match self.step() {
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

    /// Examines the frame at `self.pos`.
    #[inline]
    fn step(&self) -> Step {
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
            return Step::End;
        }
        if remaining < FRAME_HEADER_LEN {
            return Step::Bad(Bad {
                damage: Damage::Length,
                expected: format!("a {FRAME_HEADER_LEN}-byte frame header"),
                found: format!("{remaining} bytes before the end of the file"),
                whole: false,
            });
        }
        let (stored, len, seq) = frame_fields(buf, offset);
        if len == SEAL_MARKER {
            let computed = chained_crc(self.chain, &buf[offset + 4..offset + SEAL_LEN]);
            if computed != stored {
                return Step::Bad(self.checksum_bad(stored, computed, seq, "seal"));
            }
            return Step::Seal { next_seq: seq };
        }
        if len > self.record_max {
            return Step::Bad(self.oversized(stored, len));
        }
        let size = frame_len(len) as usize;
        if size > remaining {
            return Step::Bad(Bad {
                damage: Damage::Length,
                expected: format!("a {size}-byte frame (length {len})"),
                found: format!("{remaining} bytes before the end of the file"),
                whole: false,
            });
        }
        let computed = chained_crc(self.chain, &buf[offset + 4..offset + size]);
        if computed != stored {
            return Step::Bad(self.checksum_bad(stored, computed, seq, "record"));
        }
        if seq != self.seq {
            return Step::Bad(Bad {
                damage: Damage::Sequence,
                expected: format!("seq {}", self.seq),
                found: format!("a whole record with seq {seq}"),
                whole: true,
            });
        }
        Step::Record {
            len: len as usize,
            size,
            crc: stored,
        }
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
        Bad {
            damage: Damage::Length,
            expected: format!("a record length of at most {}", self.record_max),
            found: if whole {
                format!("a whole record of length {len}, written with a larger record_max")
            } else {
                format!("length {len}")
            },
            whole,
        }
    }

    fn checksum_bad(&self, stored: u32, computed: u32, seq: u64, what: &str) -> Bad {
        Bad {
            damage: Damage::Checksum,
            expected: format!(
                "{what} checksum {computed:#010x} (seq {} chained from {:#010x})",
                self.seq, self.chain
            ),
            found: format!("stored checksum {stored:#010x}, seq field {seq}"),
            whole: false,
        }
    }

    /// Reads `segments[index]` and checks its header.
    fn load_segment(&mut self) -> Result<(), LogError> {
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
                return Err(self.corrupt(offset_u64, bad.damage, bad.expected, bad.found));
            }
            if let Some(evidence) = self.evidence_after(offset) {
                if self.mode == Mode::Read
                    && self.zeros_ahead
                    && self.rereads < CONCURRENT_REREADS_MAX
                {
                    // A writer writing over the zeros while this scan
                    // copied the file can leave a page still zero before
                    // one it has filled: read again before calling it
                    // damage.
                    self.rereads += 1;
                    return self.reread_segment(offset);
                }
                return Err(self.corrupt(
                    offset_u64,
                    bad.damage,
                    bad.expected,
                    format!(
                        "{}; a record that verifies follows at byte {evidence}, so this is \
                         not a torn write",
                        bad.found
                    ),
                ));
            }
        }
        self.tail = Some(Tail {
            first_seq: self.first_seq,
            valid_end: offset_u64,
            torn_len: self.torn_extent(offset) as u64,
            header_torn: false,
            zeros_ahead: self.zeros_ahead,
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
                self.index += 1;
                self.loaded = false;
                return Ok(());
            }
        }
        Err(match bad {
            Some(bad) => self.corrupt(offset_u64, bad.damage, bad.expected, bad.found),
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
