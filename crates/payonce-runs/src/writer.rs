//! Writing a run as a stream: the records in primary order, then the
//! secondary entries in secondary order, then `finish` writes the
//! filters, the fences and the trailer. Memory: one block, the filters
//! (sized by the count announced) and the fences, never the records.

use crate::block::BlockBuilder;
use crate::error::{RunError, Section};
use crate::filter::Filter;
use crate::format::{
    BLOCK_LEN_MAX, BLOCK_TARGET_LEN, FENCE_LEN, Fence, NAME_LEN_MAX, PAYLOAD_LEN_MAX, RECORDS_MAX,
    SECONDARY_PER_BLOCK, Trailer,
};
use crate::hash::HashKey;
use crate::record::Record;
use crate::record_block::{push_record, record_len};
use crate::secondary::{SecondaryEntry, push_entry};
use crate::source::RunSink;

/// What a finished run holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Records written.
    pub records: u64,
    /// Secondary entries written.
    pub secondary_entries: u64,
    /// Record blocks written.
    pub record_blocks: u64,
    /// Secondary blocks written.
    pub secondary_blocks: u64,
    /// Bytes written, the trailer included.
    pub bytes: u64,
    /// Bytes of the two filters (what they take in memory once opened).
    pub filter_bytes: u64,
    /// The checksum of the fences and the trailer ([`crate::Run::trailer_crc`]).
    pub trailer_crc: u32,
    /// The hash key it was written under.
    pub hash_key: HashKey,
}

/// The sink and how much of it was written; poisoned by a failed append.
#[derive(Debug)]
struct Out<S> {
    sink: S,
    written: u64,
    poisoned: bool,
}

impl<S: RunSink> Out<S> {
    fn append(&mut self, bytes: &[u8]) -> Result<(), RunError> {
        if self.poisoned {
            return Err(RunError::Poisoned);
        }
        if let Err(error) = self.sink.append(bytes) {
            self.poisoned = true;
            return Err(error);
        }
        self.written += bytes.len() as u64;
        Ok(())
    }
}

/// Writes one run into a [`RunSink`]: [`RunWriter::push_record`] for
/// every record in (primary hash, primary name) order, then
/// [`RunWriter::push_entry`] for every secondary entry in order, then
/// [`RunWriter::finish`]. Input out of order, over its limits or beyond
/// the count announced is refused before anything of it is written; a
/// failed append poisons the writer. What the sink holds is a run only
/// once `finish` returns.
#[derive(Debug)]
pub struct RunWriter<S: RunSink> {
    out: Out<S>,
    key: HashKey,
    expected: u64,
    block: BlockBuilder,
    /// The first hash of the block being filled.
    block_first: u64,
    /// The last record's primary hash and name.
    last_record: Option<(u64, Vec<u8>)>,
    last_entry: Option<SecondaryEntry>,
    /// Where the secondary blocks start, once the first entry came.
    secondary_at: Option<u64>,
    record_fences: Vec<Fence>,
    secondary_fences: Vec<Fence>,
    records: u64,
    entries: u64,
    primary_filter: Filter,
    secondary_filter: Filter,
    tally: Tally,
}

impl<S: RunSink> RunWriter<S> {
    /// A writer of a run of at most `expected_records` records under
    /// `hash_key` into `sink`; its filters are sized for that many.
    pub fn new(sink: S, hash_key: HashKey, expected_records: u64) -> Result<Self, RunError> {
        if expected_records > RECORDS_MAX {
            return Err(RunError::TooLarge {
                field: "record count",
                len: expected_records,
                max: RECORDS_MAX,
            });
        }
        Ok(RunWriter {
            out: Out {
                sink,
                written: 0,
                poisoned: false,
            },
            key: hash_key,
            expected: expected_records,
            block: BlockBuilder::new(),
            block_first: 0,
            last_record: None,
            last_entry: None,
            secondary_at: None,
            record_fences: Vec::new(),
            secondary_fences: Vec::new(),
            records: 0,
            entries: 0,
            primary_filter: Filter::sized_for(expected_records),
            secondary_filter: Filter::sized_for(expected_records),
            tally: Tally::default(),
        })
    }

    /// Adds the next record: its primary name's (hash, name) must come
    /// strictly after the last one's.
    pub fn push_record(&mut self, record: Record<'_>) -> Result<(), RunError> {
        let limits = [
            ("primary name", record.primary.len(), NAME_LEN_MAX),
            ("secondary name", record.secondary.len(), NAME_LEN_MAX),
            ("payload", record.payload.len(), PAYLOAD_LEN_MAX),
        ];
        if let Some(&(field, len, max)) = limits.iter().find(|(_, len, max)| len > max) {
            let (len, max) = (len as u64, max as u64);
            return Err(RunError::TooLarge { field, len, max });
        }
        let primary_hash = self.key.primary_hash(record.primary);
        let secondary_hash = self.key.secondary_hash(record.secondary);
        self.push_hashed(record, primary_hash, secondary_hash)
    }

    /// [`RunWriter::push_record`] of a record within its limits whose
    /// names' hashes under this writer's key are known.
    pub(crate) fn push_hashed(
        &mut self,
        record: Record<'_>,
        primary_hash: u64,
        secondary_hash: u64,
    ) -> Result<(), RunError> {
        self.check_record_order(record.primary, primary_hash)?;
        let len = record_len(&record);
        if self.block.count() > 0 && self.block.sealed_len_with(len) > BLOCK_TARGET_LEN {
            self.flush_block(Section::Records)?;
        }
        if self.block.count() == 0 {
            self.block_first = primary_hash;
        }
        push_record(&mut self.block, &record);
        let last = self.last_record.get_or_insert_with(|| (0, Vec::new()));
        last.0 = primary_hash;
        last.1.clear();
        last.1.extend_from_slice(record.primary);
        self.primary_filter.insert(primary_hash);
        self.tally.record(primary_hash, secondary_hash);
        self.records += 1;
        Ok(())
    }

    fn check_record_order(&self, primary: &[u8], hash: u64) -> Result<(), RunError> {
        let refuse = |expected: String, found: String| {
            let (section, index) = (Section::Records, self.records);
            Err(RunError::OutOfOrder {
                section,
                index,
                expected,
                found,
            })
        };
        if self.secondary_at.is_some() {
            return refuse("records before entries".into(), "a record".into());
        }
        if self.records == self.expected {
            let section = Section::Records;
            let expected = self.expected;
            return Err(RunError::TooMany { section, expected });
        }
        match &self.last_record {
            Some((last_hash, last)) if (*last_hash, last.as_slice()) >= (hash, primary) => refuse(
                format!("after {last_hash:#x}, {}", last.escape_ascii()),
                format!("{hash:#x}, {}", primary.escape_ascii()),
            ),
            _ => Ok(()),
        }
    }

    /// Adds the next secondary entry, after every record: strictly after
    /// the last entry.
    pub fn push_entry(&mut self, entry: SecondaryEntry) -> Result<(), RunError> {
        if self.secondary_at.is_none() {
            self.end_records()?;
        }
        if self.last_entry.is_some_and(|last| last >= entry) {
            return Err(RunError::OutOfOrder {
                section: Section::Secondary,
                index: self.entries,
                expected: format!("after {:?}", self.last_entry),
                found: format!("{entry:?}"),
            });
        }
        if self.entries == self.expected {
            let (section, expected) = (Section::Secondary, self.expected);
            return Err(RunError::TooMany { section, expected });
        }
        if self.block.count() as usize == SECONDARY_PER_BLOCK {
            self.flush_block(Section::Secondary)?;
        }
        if self.block.count() == 0 {
            self.block_first = entry.secondary_hash;
        }
        push_entry(&mut self.block, entry);
        self.last_entry = Some(entry);
        self.secondary_filter.insert(entry.secondary_hash);
        self.tally.entry(entry);
        self.entries += 1;
        Ok(())
    }

    /// Writes the last record block, if any: the secondary blocks start.
    fn end_records(&mut self) -> Result<(), RunError> {
        if self.block.count() > 0 {
            self.flush_block(Section::Records)?;
        }
        self.secondary_at = Some(self.out.written);
        Ok(())
    }

    /// Seals and writes the block being filled, and its fence.
    fn flush_block(&mut self, section: Section) -> Result<(), RunError> {
        let at = self.out.written;
        let count = self.block.count();
        let bytes = self.block.seal();
        assert!(bytes.len() <= BLOCK_LEN_MAX);
        assert!(section != Section::Records || count == 1 || bytes.len() <= BLOCK_TARGET_LEN);
        assert!(section != Section::Secondary || count as usize <= SECONDARY_PER_BLOCK);
        let len = bytes.len() as u32;
        self.out.append(bytes)?;
        let fence = Fence {
            first: self.block_first,
            at,
            len,
        };
        match section {
            Section::Records => self.record_fences.push(fence),
            _ => self.secondary_fences.push(fence),
        }
        self.block.reset();
        Ok(())
    }

    /// Writes the last blocks, the filters, the fences and the trailer:
    /// refused if the entries are not exactly those of the records.
    pub fn finish(mut self) -> Result<RunSummary, RunError> {
        if self.secondary_at.is_none() {
            self.end_records()?;
        }
        if self.block.count() > 0 {
            self.flush_block(Section::Secondary)?;
        }
        if !self.tally.matches() {
            return Err(RunError::EntriesMismatch {
                records: self.tally.from_records.0,
                entries: self.tally.from_entries.0,
            });
        }
        let secondary_at = self.secondary_at.unwrap_or_default();
        let primary_filter_at = self.out.written;
        let out = &mut self.out;
        self.primary_filter.encode(|bytes| out.append(bytes))?;
        let secondary_filter_at = out.written;
        self.secondary_filter.encode(|bytes| out.append(bytes))?;
        let trailer = Trailer {
            hash_key: self.key,
            records: self.records,
            entries: self.entries,
            record_blocks: self.record_fences.len() as u64,
            secondary_blocks: self.secondary_fences.len() as u64,
            secondary_at,
            primary_filter_at,
            secondary_filter_at,
            fences_at: out.written,
        };
        let trailer_crc = self.write_fences_and_trailer(&trailer)?;
        Ok(RunSummary {
            records: self.records,
            secondary_entries: self.entries,
            record_blocks: trailer.record_blocks,
            secondary_blocks: trailer.secondary_blocks,
            bytes: self.out.written,
            filter_bytes: self.primary_filter.byte_len() + self.secondary_filter.byte_len(),
            trailer_crc,
            hash_key: self.key,
        })
    }

    /// Writes the fences and `trailer`, checked against what was written
    /// first, and returns the checksum that seals them.
    fn write_fences_and_trailer(&mut self, trailer: &Trailer) -> Result<u32, RunError> {
        let fences = self.record_fences.iter().chain(&self.secondary_fences);
        let fences_len = (self.record_fences.len() + self.secondary_fences.len()) * FENCE_LEN;
        let trailer_at = trailer.fences_at + fences_len as u64;
        trailer
            .check_layout(trailer_at, 0)
            .unwrap_or_else(|error| panic!("a writer wrote a layout it refuses: {error}"));
        let mut crc = crc32fast::Hasher::new();
        let mut piece = Vec::with_capacity(FENCE_PIECE * FENCE_LEN);
        for (number, fence) in fences.enumerate() {
            fence.encode(&mut piece);
            if (number + 1) % FENCE_PIECE == 0 {
                crc.update(&piece);
                self.out.append(&piece)?;
                piece.clear();
            }
        }
        piece.extend_from_slice(&trailer.encode());
        crc.update(&piece);
        let trailer_crc = crc.finalize();
        piece.extend_from_slice(&trailer_crc.to_le_bytes());
        self.out.append(&piece)?;
        assert_eq!(
            self.out.written,
            trailer_at + crate::format::TRAILER_LEN as u64
        );
        Ok(trailer_crc)
    }
}

/// Fences encoded and appended at a time.
const FENCE_PIECE: usize = 1 << 16;

/// The distinct (secondary hash, primary hash) pairs the records make,
/// and the entries given, each as a count and a sum of the pairs mixed:
/// equal when the entries are the records' (a streaming check, in
/// constant memory but for records sharing one primary hash).
#[derive(Debug, Default)]
struct Tally {
    from_records: (u64, u64),
    from_entries: (u64, u64),
    /// The primary hash of the last record, and the secondary hashes of
    /// the records under it so far.
    primary: Option<u64>,
    secondaries: Vec<u64>,
}

impl Tally {
    fn record(&mut self, primary_hash: u64, secondary_hash: u64) {
        if self.primary != Some(primary_hash) {
            self.primary = Some(primary_hash);
            self.secondaries.clear();
        }
        if !self.secondaries.contains(&secondary_hash) {
            self.secondaries.push(secondary_hash);
            let entry = SecondaryEntry {
                secondary_hash,
                primary_hash,
            };
            add(&mut self.from_records, entry);
        }
    }

    fn entry(&mut self, entry: SecondaryEntry) {
        add(&mut self.from_entries, entry);
    }

    fn matches(&self) -> bool {
        self.from_records == self.from_entries
    }
}

fn add((count, sum): &mut (u64, u64), entry: SecondaryEntry) {
    *count += 1;
    *sum = sum.wrapping_add(mix(entry.secondary_hash, entry.primary_hash));
}

/// Two hashes mixed into one word (SplitMix64's finaliser over both).
fn mix(secondary: u64, primary: u64) -> u64 {
    let mut x = secondary ^ primary.rotate_left(29).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
