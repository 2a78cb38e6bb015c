//! Read-only access for audit tools: scans, iterators from any sequence
//! number, and single records fetched by position. Never writes, never
//! takes the writer lock, and tolerates a writer appending at the same time.

use std::io;
use std::sync::Arc;

use crate::chain::Head;
use crate::config::LogConfig;
use crate::error::{Damage, HeadSource, LogError, OpenError, io_error};
use crate::format::{FRAME_HEADER_LEN, SEGMENT_HEADER_LEN, frame_fields, frame_len, segment_name};
use crate::record::{OwnedRecord, Position, Record, Recovery, TornTail};
use crate::scan::{Cursor, list_segments};
use crate::storage::Storage;

/// A log opened read-only.
#[derive(Debug, Clone)]
pub struct LogReader {
    storage: Arc<dyn Storage>,
    config: LogConfig,
    /// Heads a read from the first record must pass.
    required: Vec<Head>,
}

impl LogReader {
    /// Opens the log in `storage` read-only. A directory without a segment
    /// file (or no directory) is [`LogError::NotALog`]. Nothing is verified
    /// yet: [`LogReader::scan`] and [`LogReader::records_from`] verify what
    /// they pass.
    pub fn open(storage: Arc<dyn Storage>, config: LogConfig) -> Result<LogReader, LogError> {
        config.validate()?;
        let not_a_log = || LogError::NotALog {
            dir: storage.describe(""),
        };
        match list_segments(&*storage) {
            Ok(segments) if segments.is_empty() => Err(not_a_log()),
            Ok(_) => Ok(LogReader {
                storage,
                config,
                required: Vec::new(),
            }),
            Err(LogError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Err(not_a_log())
            }
            Err(error) => Err(error),
        }
    }

    /// Requires every read from the first record to pass `head`, expected by
    /// the caller (an auditor's copy of an earlier `payonce head`): such a
    /// read refuses a log that ends before it ([`LogError::MissingHead`])
    /// or holds another batch there ([`LogError::HeadMismatch`]), which
    /// any edit, removal, insertion or reordering of a record up to it
    /// causes, checksums recomputed or not. A read always requires the
    /// head of the log's own checkpoint too.
    pub fn require(&mut self, head: Head) {
        self.required.push(head);
    }

    /// Verifies the whole log, handing every record to `visit` in order, and
    /// reports what it found, a torn tail included (the tail may be a write
    /// in progress). Refuses damage that is not a torn tail, after visiting
    /// the records before it.
    pub fn scan<E>(
        &self,
        mut visit: impl FnMut(Record<'_>) -> Result<(), E>,
    ) -> Result<Recovery, OpenError<E>> {
        let mut records = self.records_from(1)?;
        while let Some(record) = records.next_record()? {
            visit(record).map_err(OpenError::Visit)?;
        }
        Ok(records.recovery())
    }

    /// Records from `seq` on (from the first if `seq` is below it), starting
    /// at the segment that holds `seq`, found by binary search over the
    /// segment names. Every frame of that segment is verified, those before
    /// `seq` too, since each checksum chains from the one before.
    pub fn records_from(&self, seq: u64) -> Result<Records, LogError> {
        let segments = list_segments(&*self.storage)?;
        if segments.is_empty() {
            return Err(LogError::NotALog {
                dir: self.storage.describe(""),
            });
        }
        let mut cursor = Cursor::starting_at(self.storage.clone(), &self.config, segments, seq)?;
        if seq <= 1 {
            for &head in &self.required {
                cursor.require(HeadSource::Expected, head)?;
            }
        }
        Ok(Records {
            cursor,
            failed: false,
        })
    }

    /// The head of the batch that ends at `seq`, read from the segment
    /// holding it (its records' checksums verified up to `seq`): `None` if
    /// no whole batch ends there. What a snapshot of the records' meaning
    /// is checked against before it is believed.
    pub fn head_at(&self, seq: u64) -> Result<Option<Head>, LogError> {
        if seq == 0 {
            return Ok(Some(Head::GENESIS));
        }
        let segments = list_segments(&*self.storage)?;
        let cursor = Cursor::starting_at(self.storage.clone(), &self.config, segments, seq)?;
        cursor.head_ending_at(seq)
    }

    /// The log's identity: the id in its first segment's header.
    pub fn log_id(&self) -> Result<u64, LogError> {
        let segments = list_segments(&*self.storage)?;
        let cursor = Cursor::starting_at(self.storage.clone(), &self.config, segments, 1)?;
        cursor.first_log_id()
    }

    /// Reads and verifies the one record `seq` at `position`, as a scan
    /// reported it, without scanning: its sequence number must match and its
    /// checksum must verify chained from `position.chain`.
    pub fn read_at(&self, seq: u64, position: Position) -> Result<Vec<u8>, LogError> {
        let name = segment_name(position.segment);
        let frame = FrameAt {
            file: self.storage.describe(&name),
            name,
            seq,
            position,
        };
        let (head, len) = self.read_head(&frame)?;
        let body = self.read_body(&frame, len)?;
        let stored = frame_fields(&head, 0).0;
        let mut hasher = crc32fast::Hasher::new_with_initial(position.chain);
        hasher.update(&head[4..]);
        hasher.update(&body);
        let computed = hasher.finalize();
        if computed != stored {
            return Err(frame.corrupt(
                Damage::Checksum,
                format!(
                    "checksum {computed:#010x} (chained from {:#010x})",
                    position.chain
                ),
                format!("stored checksum {stored:#010x}"),
            ));
        }
        let mut payload = body;
        payload.truncate(len as usize);
        assert_eq!(payload.len(), len as usize);
        Ok(payload)
    }

    /// Reads the header of the frame `read_at` was asked for and checks its
    /// place, length and sequence number: (the header's bytes, the payload
    /// length).
    fn read_head(&self, frame: &FrameAt) -> Result<(Vec<u8>, u32), LogError> {
        let offset = frame.position.offset;
        if offset < SEGMENT_HEADER_LEN as u64 || !offset.is_multiple_of(8) {
            return Err(frame.corrupt(
                Damage::Length,
                "a frame offset past the header, a multiple of 8".to_owned(),
                format!("offset {offset}"),
            ));
        }
        let head = self
            .storage
            .read_range(&frame.name, offset, FRAME_HEADER_LEN)
            .map_err(|error| io_error("read", &frame.file, error))?;
        if head.len() < FRAME_HEADER_LEN {
            return Err(frame.corrupt(
                Damage::Length,
                format!("a {FRAME_HEADER_LEN}-byte frame header"),
                format!("{} bytes before the end of the file", head.len()),
            ));
        }
        let (_, len, found_seq) = frame_fields(&head, 0);
        if len > self.config.record_max {
            return Err(frame.corrupt(
                Damage::Length,
                format!("a record length of at most {}", self.config.record_max),
                format!("length {len}"),
            ));
        }
        if found_seq != frame.seq {
            return Err(frame.corrupt(
                Damage::Sequence,
                format!("seq {}", frame.seq),
                format!("seq {found_seq}"),
            ));
        }
        Ok((head, len))
    }

    /// Reads the payload and padding after a frame header that said `len`.
    fn read_body(&self, frame: &FrameAt, len: u32) -> Result<Vec<u8>, LogError> {
        let body_len = frame_len(len) as usize - FRAME_HEADER_LEN;
        let body = self
            .storage
            .read_range(
                &frame.name,
                frame.position.offset + FRAME_HEADER_LEN as u64,
                body_len,
            )
            .map_err(|error| io_error("read", &frame.file, error))?;
        if body.len() < body_len {
            return Err(frame.corrupt(
                Damage::Length,
                format!("a {}-byte frame", frame_len(len)),
                format!(
                    "{} bytes before the end of the file",
                    FRAME_HEADER_LEN + body.len()
                ),
            ));
        }
        Ok(body)
    }
}

/// The frame [`LogReader::read_at`] was asked for: where it is, and the
/// sequence number it must hold.
struct FrameAt {
    name: String,
    /// The segment file, as refusals name it.
    file: String,
    seq: u64,
    position: Position,
}

impl FrameAt {
    /// A refusal of this frame.
    fn corrupt(&self, damage: Damage, expected: String, found: String) -> LogError {
        LogError::Corrupt {
            file: self.file.clone(),
            offset: self.position.offset,
            seq: self.seq,
            damage,
            expected,
            found,
        }
    }
}

/// Verified records in order, from a [`LogReader`]. Yields an error once and
/// then ends; ends quietly at a torn tail, which [`Records::torn_tail`] then
/// reports.
#[derive(Debug)]
pub struct Records {
    cursor: Cursor,
    failed: bool,
}

impl Records {
    /// The next verified record, borrowed: no copy of the payload.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, LogError> {
        if self.failed {
            return Ok(None);
        }
        match self.cursor.next_record() {
            Ok(record) => Ok(record),
            Err(error) => {
                self.failed = true;
                Err(error)
            }
        }
    }

    /// The torn tail found at the end, once the records are exhausted: torn
    /// bytes after the last record, or a newest segment whose header never
    /// reached the disk, even an empty one, which opening for writing saves
    /// aside and replaces alike.
    pub fn torn_tail(&self) -> Option<TornTail> {
        let tail = self.cursor.tail.as_ref()?;
        (tail.torn_len > 0 || tail.header_torn).then_some(TornTail {
            segment: tail.first_seq,
            offset: tail.valid_end,
            len: tail.torn_len,
            saved_as: None,
        })
    }

    /// The head of the last whole batch read: the log's head once the
    /// records are exhausted. [`Head::GENESIS`] for a read that started
    /// past the first segment, which cannot know the chain.
    pub fn head(&self) -> Head {
        self.cursor.head()
    }

    /// The head of the last whole batch read so far: after a record that
    /// ends its batch, that batch's head (a segment of format version 1 is
    /// one batch, whose head is known once the next record, or the end, is
    /// read). `None` before the first batch ends. Mid-batch, unlike
    /// [`Records::head`], it never names a record the batch has not
    /// ended at. For a read from the first record the digest was
    /// recomputed along the chain; from elsewhere it is the batch header's.
    pub fn last_head(&self) -> Option<Head> {
        self.cursor.last_head
    }

    /// What the walk found so far; complete once the records are exhausted.
    pub fn recovery(&self) -> Recovery {
        let (next_seq, _) = self.cursor.end_state();
        Recovery {
            records: self.cursor.records,
            segments: self.cursor.segments_verified,
            last_seq: next_seq.saturating_sub(1),
            torn_tail: self.torn_tail(),
            interrupted_roll: self.cursor.unsealed.is_some(),
            head: self.cursor.head(),
            checkpoint: self.cursor.checkpoint.map(|found| found.slot.head),
        }
    }
}

impl Iterator for Records {
    type Item = Result<OwnedRecord, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
            .map(|record| record.map(|record| record.to_owned_record()))
            .transpose()
    }
}
