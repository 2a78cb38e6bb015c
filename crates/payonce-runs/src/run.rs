//! A run opened: its trailer, fences and filters read and checked and held
//! in memory, its blocks left where they are and read, checked, one at a
//! time.

use std::fmt;
use std::sync::Arc;

use crate::block::Place;
use crate::bytes::sealed;
use crate::cache::BlockKey;
use crate::checked::CheckedBlock;
use crate::error::{RunError, Section};
use crate::filter::Filter;
use crate::format::{
    BLOCK_OVERHEAD_LEN, ENTRY_LEN, FENCE_LEN, Fence, RECORD_BLOCK_LEN_MIN, TRAILER_LEN, Trailer,
    read_fences,
};
use crate::hash::HashKey;
use crate::record_block::check_record_block;
use crate::secondary::{check_secondary_block, entries_in_block};
use crate::source::RunSource;

/// Bytes [`Run::check_blocks`] reads at a time.
pub const CHECK_READ_LEN: usize = 4 << 20;

/// An immutable run of records, opened: what a lookup needs to find a
/// name's block (the fences) and to skip a run without a read (the
/// filters) is in memory; the blocks are read from its source through a
/// [`crate::BlockCache`].
pub struct Run {
    number: u64,
    source: Box<dyn RunSource>,
    byte_len: u64,
    trailer: Trailer,
    trailer_crc: u32,
    record_fences: Vec<Fence>,
    secondary_fences: Vec<Fence>,
    primary_filter: Option<Filter>,
    secondary_filter: Option<Filter>,
    filter_refusals: Vec<RunError>,
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("number", &self.number)
            .field("byte_len", &self.byte_len)
            .field("records", &self.trailer.records)
            .field("filter_ignored", &self.filter_ignored())
            .finish()
    }
}

/// Reads exactly `len` bytes at `offset` of run `run` into `into`: a
/// failure names the run, a short read is refused as a truncation of
/// `section`.
fn read_exact(
    source: &dyn RunSource,
    (run, section): (u64, Section),
    offset: u64,
    len: usize,
    into: &mut Vec<u8>,
) -> Result<(), RunError> {
    source
        .read_at(offset, len, into)
        .map_err(|error| error.in_run(run))?;
    if into.len() != len {
        let found = format!("{} bytes", into.len());
        return Err(RunError::corrupt(
            run,
            section,
            offset,
            format!("{len} bytes"),
            found,
        ));
    }
    Ok(())
}

impl Run {
    /// Opens the run `source` holds, numbering it `run_number` (the
    /// caller's: it names the run in errors and keys its blocks in a
    /// cache, so two runs open at once need two numbers). Reads and checks
    /// the trailer, the fences and the filters; a filter whose checksum
    /// differs is ignored ([`Run::filter_ignored`]), never believed.
    pub fn open(source: impl RunSource + 'static, run_number: u64) -> Result<Run, RunError> {
        let source: Box<dyn RunSource> = Box::new(source);
        let run = run_number;
        let byte_len = source.byte_len();
        let Some(trailer_at) = byte_len.checked_sub(TRAILER_LEN as u64) else {
            let expected = format!("at least a trailer of {TRAILER_LEN} bytes");
            let found = format!("{byte_len} bytes");
            return Err(RunError::corrupt(run, Section::Trailer, 0, expected, found));
        };
        let mut bytes = Vec::new();
        let place = (run, Section::Trailer);
        read_exact(&*source, place, trailer_at, TRAILER_LEN, &mut bytes)?;
        let (trailer, trailer_crc) = Trailer::decode(&bytes, trailer_at, run)?;
        trailer.check_layout(trailer_at, run)?;
        let fences = read_all_fences(&*source, &trailer, (trailer_at, &bytes), run)?;
        let mut opened = Run {
            number: run,
            source,
            byte_len,
            trailer,
            trailer_crc,
            record_fences: fences.0,
            secondary_fences: fences.1,
            primary_filter: None,
            secondary_filter: None,
            filter_refusals: Vec::new(),
        };
        opened.read_filters()?;
        Ok(opened)
    }

    /// Reads both filters, keeping each whose checksum holds and a
    /// refusal of each other.
    fn read_filters(&mut self) -> Result<(), RunError> {
        let t = self.trailer;
        let filters = [
            (
                Section::PrimaryFilter,
                t.primary_filter_at,
                t.secondary_filter_at,
            ),
            (Section::SecondaryFilter, t.secondary_filter_at, t.fences_at),
        ];
        for (section, at, end) in filters {
            let read = |offset, len, into: &mut Vec<u8>| {
                read_exact(&*self.source, (self.number, section), offset, len, into)
            };
            match Filter::read(at, end - at, read)? {
                Ok(filter) if section == Section::PrimaryFilter => {
                    self.primary_filter = Some(filter)
                }
                Ok(filter) => self.secondary_filter = Some(filter),
                Err((stored, computed)) => {
                    let expected = format!("checksum {computed:#010x} of its bytes");
                    let found = format!("{stored:#010x}");
                    let refusal = RunError::corrupt(self.number, section, at, expected, found);
                    self.filter_refusals.push(refusal);
                }
            }
        }
        Ok(())
    }

    /// Its number, as given to [`Run::open`].
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The hash key it was written under.
    pub fn hash_key(&self) -> HashKey {
        self.trailer.hash_key
    }

    /// How many records it holds.
    pub fn records_len(&self) -> u64 {
        self.trailer.records
    }

    /// How many secondary entries it holds (as many as records, but for
    /// records whose two hashes both collide).
    pub fn secondary_len(&self) -> u64 {
        self.trailer.entries
    }

    /// How many bytes it takes.
    pub fn byte_len(&self) -> u64 {
        self.byte_len
    }

    /// The checksum of its fences and trailer: with its number, what
    /// tells its blocks from another run's in a cache.
    pub fn trailer_crc(&self) -> u32 {
        self.trailer_crc
    }

    /// Whether a filter failed its checksum and is ignored: the run then
    /// reads blocks for every name of that kind, and answers right.
    pub fn filter_ignored(&self) -> bool {
        !self.filter_refusals.is_empty()
    }

    /// Why each ignored filter was refused: its section and offset.
    pub fn filter_refusals(&self) -> &[RunError] {
        &self.filter_refusals
    }

    /// Bytes its filters take in memory: 2 × [`crate::BITS_PER_NAME`] / 8
    /// bytes a record, about (less once a filter is ignored).
    pub fn filter_bytes(&self) -> u64 {
        let filters = [&self.primary_filter, &self.secondary_filter];
        filters.into_iter().flatten().map(Filter::byte_len).sum()
    }

    /// Bytes its fences take in memory: one per block, about 0.7 bytes a
    /// record of 220 bytes.
    pub fn fence_bytes(&self) -> u64 {
        let fences = self.record_fences.len() + self.secondary_fences.len();
        (fences * std::mem::size_of::<Fence>()) as u64
    }

    /// Whether a record with primary name `name` may be here: `false` only
    /// if it is not, and then a lookup reads nothing.
    pub fn might_hold_primary(&self, name: &[u8]) -> bool {
        self.might_hold_primary_hash(self.trailer.hash_key.primary_hash(name))
    }

    /// Whether a record with secondary name `name` may be here: `false`
    /// only if it is not, and then a lookup reads nothing.
    pub fn might_hold_secondary(&self, name: &[u8]) -> bool {
        self.might_hold_secondary_hash(self.trailer.hash_key.secondary_hash(name))
    }

    pub(crate) fn might_hold_primary_hash(&self, hash: u64) -> bool {
        (self.primary_filter.as_ref()).is_none_or(|filter| filter.may_hold(hash))
    }

    pub(crate) fn might_hold_secondary_hash(&self, hash: u64) -> bool {
        (self.secondary_filter.as_ref()).is_none_or(|filter| filter.may_hold(hash))
    }

    pub(crate) fn record_fences(&self) -> &[Fence] {
        &self.record_fences
    }

    pub(crate) fn secondary_fences(&self) -> &[Fence] {
        &self.secondary_fences
    }

    /// The key its block `number` of `section` is cached under.
    pub(crate) fn block_key(&self, section: Section, number: usize) -> BlockKey {
        BlockKey {
            run: self.number,
            trailer_crc: self.trailer_crc,
            section,
            block: number as u64,
        }
    }
}

/// Reads and checks the fences of the run whose trailer `trailer` (its
/// bytes given too) is at `trailer_at`: their checksum, with the
/// trailer's, then their layout.
fn read_all_fences(
    source: &dyn RunSource,
    trailer: &Trailer,
    (trailer_at, trailer_bytes): (u64, &[u8]),
    run: u64,
) -> Result<(Vec<Fence>, Vec<Fence>), RunError> {
    let at = trailer.fences_at;
    let mut bytes = Vec::new();
    read_exact(
        source,
        (run, Section::Fences),
        at,
        (trailer_at - at) as usize,
        &mut bytes,
    )?;
    bytes.extend_from_slice(trailer_bytes);
    if let Err((stored, computed)) = sealed(&bytes) {
        let expected = format!("checksum {computed:#010x} of the fences and the trailer");
        let found = format!("{stored:#010x}");
        return Err(RunError::corrupt(run, Section::Fences, at, expected, found));
    }
    bytes.truncate((trailer_at - at) as usize);
    let split = trailer.record_blocks as usize * FENCE_LEN;
    let records = (0, trailer.secondary_at);
    let record_fences = read_fences(&bytes[..split], at, records, RECORD_BLOCK_LEN_MIN, run)?;
    let secondary = (trailer.secondary_at, trailer.primary_filter_at);
    let entry_block_min = BLOCK_OVERHEAD_LEN + ENTRY_LEN;
    let secondary_at = at + split as u64;
    let secondary_fences = read_fences(
        &bytes[split..],
        secondary_at,
        secondary,
        entry_block_min,
        run,
    )?;
    for (number, fence) in secondary_fences.iter().enumerate() {
        let entries = entries_in_block(trailer.entries, number as u64);
        if u64::from(fence.len) != BLOCK_OVERHEAD_LEN as u64 + entries * ENTRY_LEN as u64 {
            let offset = secondary_at + (number * FENCE_LEN) as u64;
            let expected = format!("a block of {entries} entries");
            let found = format!("{} bytes", fence.len);
            return Err(RunError::corrupt(
                run,
                Section::Fences,
                offset,
                expected,
                found,
            ));
        }
    }
    Ok((record_fences, secondary_fences))
}

impl Run {
    /// Checks every block's checksum, reading the blocks in pieces of
    /// about [`CHECK_READ_LEN`] into one buffer and decoding nothing: a
    /// damaged byte anywhere in the blocks is found at the speed of
    /// reading. The first block whose checksum differs is refused.
    pub fn check_blocks(&self) -> Result<(), RunError> {
        let fences: Vec<(Section, Fence)> = (self.record_fences.iter())
            .map(|&fence| (Section::Records, fence))
            .chain(
                self.secondary_fences
                    .iter()
                    .map(|&f| (Section::Secondary, f)),
            )
            .collect();
        let mut bytes = Vec::new();
        let mut first = 0;
        while let Some(&(_, start)) = fences.get(first) {
            let mut end = first + 1;
            while let Some((_, next)) = fences.get(end)
                && next.end() - start.at <= CHECK_READ_LEN as u64
            {
                end += 1;
            }
            let piece_len = (fences[end - 1].1.end() - start.at) as usize;
            let place = (self.number, fences[first].0);
            read_exact(&*self.source, place, start.at, piece_len, &mut bytes)?;
            for &(section, fence) in &fences[first..end] {
                let from = (fence.at - start.at) as usize;
                let block = &bytes[from..from + fence.len as usize];
                if let Err((stored, computed)) = sealed(block) {
                    let expected = format!("checksum {computed:#010x} of its bytes");
                    let found = format!("{stored:#010x}");
                    let number = self.number;
                    return Err(RunError::corrupt(
                        number, section, fence.at, expected, found,
                    ));
                }
            }
            first = end;
        }
        Ok(())
    }

    /// The bytes and place of block `number` of `fences`, in `section`.
    fn read_block(
        &self,
        section: Section,
        fences: &[Fence],
        number: usize,
    ) -> Result<(Vec<u8>, Place), RunError> {
        let fence = fences[number];
        let place = Place {
            run: self.number,
            section,
            at: fence.at,
            first: fence.first,
            next: fences.get(number + 1).map_or(u64::MAX, |next| next.first),
        };
        let mut bytes = Vec::new();
        let at = (self.number, section);
        read_exact(&*self.source, at, fence.at, fence.len as usize, &mut bytes)?;
        Ok((bytes, place))
    }

    /// Record block `number`, read and checked.
    pub(crate) fn read_record_block(&self, number: usize) -> Result<Arc<CheckedBlock>, RunError> {
        let (bytes, place) = self.read_block(Section::Records, &self.record_fences, number)?;
        let mut spans = Vec::new();
        check_record_block(&bytes, &place, self.trailer.hash_key, &mut spans)?;
        Ok(Arc::new(CheckedBlock::of_records(bytes, &spans)))
    }

    /// Secondary block `number`, read and checked.
    pub(crate) fn read_secondary_block(
        &self,
        number: usize,
    ) -> Result<Arc<CheckedBlock>, RunError> {
        let fences = &self.secondary_fences;
        let (bytes, place) = self.read_block(Section::Secondary, fences, number)?;
        let wanted = entries_in_block(self.trailer.entries, number as u64);
        check_secondary_block(&bytes, &place, wanted, &mut Vec::new())?;
        Ok(Arc::new(CheckedBlock::of_entries(bytes)))
    }

    /// Block `number` of `section`, read and checked.
    pub(crate) fn read_checked(
        &self,
        section: Section,
        number: usize,
    ) -> Result<Arc<CheckedBlock>, RunError> {
        match section {
            Section::Secondary => self.read_secondary_block(number),
            _ => self.read_record_block(number),
        }
    }
}
