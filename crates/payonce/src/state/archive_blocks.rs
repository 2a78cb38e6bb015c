//! Settled pairs as bytes, found by key and by withdrawal id while only a
//! little of them is decoded.
//!
//! - **Pair blocks:** the pairs in the order of their keys' hashes (then
//!   their keys), [`PAIRS_PER_BLOCK`] a block, each block its count, its
//!   pairs and the CRC-32 of those bytes.
//! - **Id blocks:** for every pair, its id's hash and its place (pair
//!   block, index), in the order of the hashes, [`IDS_PER_BLOCK`] a block,
//!   checksummed the same way.
//! - **Fences:** each block's first hash, offset and length: all that is
//!   held decoded. A name's hash finds the one block it can be in (or the
//!   run of blocks equal hashes straddle); a lookup reads and checks that
//!   block alone.
//! - **Trailer:** the hash key, the counts, where the fences start, and the
//!   CRC-32 of the fences and the trailer.
//!
//! Names are hashed with SipHash-1-3 under a key drawn for each archive,
//! so that nobody choosing keys or ids can pile them into one block.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;

use payonce_model::{
    Actor, Amount, Currency, Destination, Progress, REPLACED_MAX, Reason, Reference, RequestKey,
    WithdrawalId, WithdrawalState,
};
use siphasher::sip::SipHasher13;

use super::layout::{Funds, stored};
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::fields::In;
use crate::snapshot_format::{SNAPSHOT_HEADER_LEN, SNAPSHOT_READ_LEN, SnapshotFile};
use crate::time::Timestamp;

/// Pairs a pair block holds, but for the last: a lookup decodes this many
/// pairs at most, a few KiB.
pub(super) const PAIRS_PER_BLOCK: usize = 64;
/// Entries an id block holds, but for the last.
pub(super) const IDS_PER_BLOCK: usize = 256;
/// Bytes of a fence: the first hash, the offset, the length.
const FENCE_LEN: usize = 8 + 8 + 4;
/// Bytes of the trailer.
pub(super) const TRAILER_LEN: usize = 8 + 8 + 8 + 8 + 8 + 8 + 4;
/// The most bytes a block can take: a pair's texts are at most a few KiB
/// each, so a block of them stays far below this.
pub(super) const BLOCK_LEN_MAX: usize = 16 << 20;
/// A pair flag: its withdrawal was minted by this ledger.
const CREATED: u8 = 1;
/// A pair flag: its funds left custody.
pub(super) const CAPTURED: u8 = 2;

/// A settled key and the withdrawal it holds, owning its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SettledPair {
    pub(super) key: Box<str>,
    pub(super) claimed_seq: u64,
    pub(super) claimed_at: Timestamp,
    pub(super) state: WithdrawalState,
    pub(super) reference: Option<Box<str>>,
    pub(super) reason: Option<Box<str>>,
    pub(super) requested_by: Box<str>,
    pub(super) replaced: Box<[Reference]>,
    pub(super) id: Box<str>,
    pub(super) destination: Box<str>,
    pub(super) amount: Amount,
    pub(super) currency: Currency,
    pub(super) created: bool,
    /// Free or captured: never held.
    pub(super) funds: Funds,
}

/// A settled pair's fields, borrowed: from a pair read back, or from the
/// state's own slots, so that encoding one copies no text first.
#[derive(Debug, Clone, Copy)]
pub(super) struct PairView<'a> {
    pub(super) key: &'a str,
    pub(super) claimed_seq: u64,
    pub(super) claimed_at: Timestamp,
    pub(super) state: WithdrawalState,
    pub(super) reference: Option<&'a str>,
    pub(super) reason: Option<&'a str>,
    pub(super) requested_by: &'a str,
    pub(super) replaced: &'a [Reference],
    pub(super) id: &'a str,
    pub(super) destination: &'a str,
    pub(super) amount: Amount,
    pub(super) currency: &'a str,
    pub(super) created: bool,
    pub(super) funds: Funds,
}

impl SettledPair {
    pub(super) fn view(&self) -> PairView<'_> {
        PairView {
            key: &self.key,
            claimed_seq: self.claimed_seq,
            claimed_at: self.claimed_at,
            state: self.state,
            reference: self.reference.as_deref(),
            reason: self.reason.as_deref(),
            requested_by: &self.requested_by,
            replaced: &self.replaced,
            id: &self.id,
            destination: &self.destination,
            amount: self.amount,
            currency: self.currency.as_str(),
            created: self.created,
            funds: self.funds,
        }
    }
}

/// Where an archive's bytes are read from.
pub(super) trait ArchiveSource: fmt::Debug + Send + Sync {
    /// Reads `len` bytes from `offset` into `into`, replacing what it held.
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError>;
    /// How many bytes there are.
    fn byte_len(&self) -> u64;
    /// Whether its blocks are checked in the background after an opening
    /// believed them ([`SnapshotFile::checked_in_background`]).
    fn checked_in_background(&self) -> bool {
        false
    }
    /// Told that a block failed its checks ([`SnapshotFile::refuse`]).
    fn refuse(&self, error: &SnapshotError) {
        let _ = error;
    }
}

/// An archive kept in memory.
impl ArchiveSource for Vec<u8> {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let bytes = start
            .checked_add(len)
            .and_then(|end| self.get(start..end))
            .ok_or_else(|| SnapshotError::Invalid {
                field: "archive block",
                offset,
                expected: format!("{len} bytes"),
                found: format!("an archive of {} bytes", self.len()),
            })?;
        into.clear();
        into.extend_from_slice(bytes);
        Ok(())
    }

    fn byte_len(&self) -> u64 {
        self.len() as u64
    }
}

#[cfg(test)]
thread_local! {
    /// The hash key archives encoded on this thread are under, if set.
    static DRAWN_KEYS: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}

/// Runs `encode` with every archive it encodes under hash key `keys`
/// rather than one drawn: what a worked example's bytes need.
#[cfg(test)]
pub(crate) fn with_archive_keys<T>(keys: (u64, u64), encode: impl FnOnce() -> T) -> T {
    DRAWN_KEYS.with(|drawn| drawn.set(Some(keys)));
    let encoded = encode();
    DRAWN_KEYS.with(|drawn| drawn.set(None));
    encoded
}

/// Where a snapshot's archive is, for the state loaded from it.
pub(crate) enum ArchiveAt {
    /// Read into memory, whole.
    Memory(Vec<u8>),
    /// Read into memory, whole, and checked whole as it is loaded
    /// ([`Blocks::pairs`]): what an audit reads.
    Checked(Vec<u8>),
    /// Bytes `at` to `at + len` of a snapshot that stays readable
    /// whatever happens to its name ([`SnapshotFile::lasting`]).
    File {
        file: Arc<dyn SnapshotFile>,
        at: u64,
        len: u64,
    },
}

impl ArchiveAt {
    pub(super) fn into_source(self) -> Box<dyn ArchiveSource> {
        match self {
            ArchiveAt::Memory(bytes) | ArchiveAt::Checked(bytes) => Box::new(bytes),
            ArchiveAt::File { file, at, len } => Box::new(FilePart { file, at, len }),
        }
    }
}

/// Part of a snapshot's file, read where it lies.
struct FilePart {
    file: Arc<dyn SnapshotFile>,
    at: u64,
    len: u64,
}

impl fmt::Debug for FilePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes at {} of a snapshot", self.len, self.at)
    }
}

impl ArchiveSource for FilePart {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let fits = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= self.len);
        if !fits {
            return Err(SnapshotError::Invalid {
                field: "archive block",
                offset,
                expected: format!("{len} bytes"),
                found: format!("an archive of {} bytes", self.len),
            });
        }
        into.clear();
        self.file.read_at(self.at + offset, len, into)?;
        if into.len() != len {
            return Err(SnapshotError::Length {
                expected: self.at + self.len,
                found: self.at + offset + into.len() as u64,
            });
        }
        Ok(())
    }

    fn byte_len(&self) -> u64 {
        self.len
    }

    fn checked_in_background(&self) -> bool {
        self.file.checked_in_background()
    }

    fn refuse(&self, error: &SnapshotError) {
        self.file.refuse(error);
    }
}

/// Where a block is, and the first hash in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fence {
    pub(super) first: u64,
    pub(super) at: u64,
    pub(super) len: u32,
}

/// An archive's fences, over the source of its blocks.
#[derive(Debug)]
pub(super) struct Blocks {
    keys: (u64, u64),
    pairs: usize,
    pair_fences: Vec<Fence>,
    id_fences: Vec<Fence>,
    source: Box<dyn ArchiveSource>,
    /// What a refusal's offset is moved by: where the archive starts in a
    /// snapshot, past where a body would.
    shift: u64,
    /// The last event of the state it belongs to: no pair was claimed
    /// after it.
    last_seq: u64,
}

/// The hash of `name` under `keys`.
pub(super) fn hash(keys: (u64, u64), name: &str) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(keys.0, keys.1);
    hasher.write(name.as_bytes());
    hasher.finish()
}

/// Two words from the process's random source.
pub(super) fn drawn_keys() -> (u64, u64) {
    #[cfg(test)]
    if let Some(keys) = DRAWN_KEYS.with(std::cell::Cell::get) {
        return keys;
    }
    let random = RandomState::new();
    (random.hash_one(0u8), random.hash_one(1u8))
}

impl Blocks {
    /// The hash key of an archive merged from this one: its own.
    pub(super) fn hash_key(&self) -> (u64, u64) {
        self.keys
    }

    /// The archive `source` holds, of a state whose last event is
    /// `last_seq`: its trailer and fences read and checked. A refusal
    /// names an offset `shift` bytes past one in a body.
    pub(super) fn open(
        source: Box<dyn ArchiveSource>,
        shift: u64,
        last_seq: u64,
    ) -> Result<Blocks, SnapshotError> {
        Blocks::open_here(source, shift, last_seq).map_err(|error| error.moved_by(shift))
    }

    fn open_here(
        source: Box<dyn ArchiveSource>,
        shift: u64,
        last_seq: u64,
    ) -> Result<Blocks, SnapshotError> {
        let len = source.byte_len();
        let mut bytes = Vec::new();
        let trailer_at = len.checked_sub(TRAILER_LEN as u64).ok_or_else(|| {
            invalid(
                "archive trailer",
                0,
                "at least a trailer",
                format!("{len} bytes"),
            )
        })?;
        source.read_at(trailer_at, TRAILER_LEN, &mut bytes)?;
        let trailer = Trailer::decode(&bytes, trailer_at)?;
        let fences_len = trailer_at - trailer.fences_at;
        let mut fences = Vec::new();
        source.read_at(trailer.fences_at, fences_len as usize, &mut fences)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&fences);
        crc.update(&bytes[..TRAILER_LEN - 4]);
        if crc.finalize() != trailer.crc {
            let expected = format!("{:#010x}", trailer.crc);
            let found = "bytes whose checksum differs".to_owned();
            return Err(invalid(
                "archive fences",
                trailer.fences_at,
                &expected,
                found,
            ));
        }
        let split = trailer.pair_fences * FENCE_LEN;
        let (at, end) = (trailer.fences_at, trailer.fences_at);
        let (pair_fences, ids_from) = read_fences(&fences[..split], at, 0, end)?;
        let (id_fences, ended) = read_fences(&fences[split..], at + split as u64, ids_from, end)?;
        if ended != end {
            let expected = format!("blocks that end at {end}, where the fences start");
            let found = format!("blocks that end at {ended}");
            return Err(invalid("archive fences", at, &expected, found));
        }
        Ok(Blocks {
            keys: trailer.keys,
            pairs: trailer.pairs,
            pair_fences,
            id_fences,
            source,
            shift,
            last_seq,
        })
    }

    /// Checks every block's checksum, reading the blocks in runs of about
    /// [`SNAPSHOT_READ_LEN`] bytes into one buffer: no field is decoded,
    /// so a damaged byte anywhere is found at the speed of reading, before
    /// the archive is believed (or, for a source that says so, on a thread
    /// of its own after: `archive_check.rs`).
    pub(super) fn check_checksums(&self) -> Result<(), SnapshotError> {
        let fences: Vec<Fence> = self
            .pair_fences
            .iter()
            .chain(&self.id_fences)
            .copied()
            .collect();
        let mut bytes = Vec::new();
        let mut first = 0;
        while first < fences.len() {
            let start = fences[first].at;
            let mut end = first + 1;
            while end < fences.len()
                && fences[end].at + u64::from(fences[end].len) - start <= SNAPSHOT_READ_LEN as u64
            {
                end += 1;
            }
            let last = fences[end - 1];
            let len = (last.at + u64::from(last.len) - start) as usize;
            self.source
                .read_at(start, len, &mut bytes)
                .map_err(|error| error.moved_by(self.shift))?;
            for fence in &fences[first..end] {
                let at = (fence.at - start) as usize;
                let block = &bytes[at..at + fence.len as usize];
                if sealed(block).is_none() {
                    let field = match fence.at < self.id_fences.first().map_or(u64::MAX, |id| id.at)
                    {
                        true => "archive pair block",
                        false => "archive id block",
                    };
                    let found = "bytes whose checksum differs".to_owned();
                    return Err(
                        invalid(field, fence.at, "its checksum", found).moved_by(self.shift)
                    );
                }
            }
            first = end;
        }
        Ok(())
    }

    /// How many pairs it holds.
    pub(super) fn len(&self) -> usize {
        self.pairs
    }

    /// A refusal of pair `number` as it meets the state it is brought back
    /// into, at its block's offset.
    pub(super) fn refused(&self, number: u64, expected: &str, found: String) -> SnapshotError {
        let block = (number / PAIRS_PER_BLOCK as u64) as usize;
        let at = self.pair_fences.get(block).map_or(0, |fence| fence.at);
        invalid("archived pair", at, expected, found).moved_by(self.shift)
    }

    /// Where its bytes are read from.
    #[cfg(test)]
    pub(super) fn source(&self) -> &dyn ArchiveSource {
        &*self.source
    }

    /// The pair of `key`, with its number.
    pub(super) fn find_key(&self, key: &str) -> Result<Option<(u64, SettledPair)>, SnapshotError> {
        self.refusing(self.find_key_here(key))
    }

    fn find_key_here(&self, key: &str) -> Result<Option<(u64, SettledPair)>, SnapshotError> {
        let wanted = hash(self.keys, key);
        let mut found = None;
        in_blocks_of(&self.pair_fences, wanted, |block, _| {
            let pairs = self.pair_block(block)?;
            found = pairs
                .into_iter()
                .enumerate()
                .find(|(_, pair)| &*pair.key == key)
                .map(|(index, pair)| (number(block, index), pair));
            Ok(found.is_some())
        })?;
        Ok(found)
    }

    /// The pair of withdrawal `id`, with its number.
    pub(super) fn find_id(&self, id: &str) -> Result<Option<(u64, SettledPair)>, SnapshotError> {
        self.refusing(self.find_id_here(id))
    }

    fn find_id_here(&self, id: &str) -> Result<Option<(u64, SettledPair)>, SnapshotError> {
        let wanted = hash(self.keys, id);
        let mut found = None;
        in_blocks_of(&self.id_fences, wanted, |block, fence| {
            for (entry, pair_block, index) in self.id_block(block)? {
                if entry != wanted {
                    continue;
                }
                let pair = self.named_pair(pair_block, index, fence.at)?;
                if hash(self.keys, &pair.id) != wanted {
                    let expected = format!("a pair whose id hashes to {wanted:#x}");
                    let found = format!("withdrawal {}", pair.id);
                    return Err(invalid("archive id entry", fence.at, &expected, found));
                }
                if &*pair.id == id {
                    found = Some((number(pair_block as usize, index), pair));
                    return Ok(true);
                }
            }
            Ok(false)
        })?;
        Ok(found)
    }

    /// The pair an entry of the id block at `named_at` names: pair
    /// `index` of pair block `block`, which must exist.
    fn named_pair(
        &self,
        block: u32,
        index: usize,
        named_at: u64,
    ) -> Result<SettledPair, SnapshotError> {
        let pairs = self.pair_block(self.pair_block_number(block, named_at)?)?;
        let count = pairs.len();
        pairs.into_iter().nth(index).ok_or_else(|| {
            let expected = format!("a pair below {count} in block {block}");
            invalid("archive id entry", named_at, &expected, index.to_string())
        })
    }

    /// Every pair, with its number, in block order, once every block is
    /// checked against the others: as many pairs as the trailer says, no
    /// key or id twice, and each id entry naming the one pair whose id
    /// hashes to it. What a lookup cannot see (an entry missing, a name
    /// twice) is refused here.
    pub(super) fn pairs(&self) -> Result<Vec<(u64, SettledPair)>, SnapshotError> {
        self.pairs_here()
            .map_err(|error| error.moved_by(self.shift))
    }

    /// How many pair blocks it has.
    pub(super) fn pair_blocks(&self) -> usize {
        self.pair_fences.len()
    }

    /// The pairs of pair block `block`, each checked.
    pub(super) fn pairs_of_block(&self, block: usize) -> Result<Vec<SettledPair>, SnapshotError> {
        self.refusing(self.pair_block(block))
    }

    /// `read`, its refusal moved to the snapshot's offsets; a refusal of
    /// the snapshot (anything but a failure to read it, which says nothing
    /// of its bytes) is also told to the source ([`ArchiveSource::refuse`]).
    fn refusing<T>(&self, read: Result<T, SnapshotError>) -> Result<T, SnapshotError> {
        read.map_err(|error| {
            let error = error.moved_by(self.shift);
            if !matches!(error, SnapshotError::Io { .. }) {
                self.source.refuse(&error);
            }
            error
        })
    }

    /// Whether its blocks are left to a check in the background
    /// ([`ArchiveSource::checked_in_background`]).
    pub(super) fn checked_in_background(&self) -> bool {
        self.source.checked_in_background()
    }

    /// Tells its source that it failed its checks.
    pub(super) fn refuse(&self, error: &SnapshotError) {
        self.source.refuse(error);
    }

    /// A refusal of pair block `block`, whose pairs meet `expected` not.
    pub(super) fn refused_block(
        &self,
        block: usize,
        expected: &str,
        found: String,
    ) -> SnapshotError {
        let at = self.pair_fences.get(block).map_or(0, |fence| fence.at);
        invalid("archive pairs", at, expected, found).moved_by(self.shift)
    }

    fn pairs_here(&self) -> Result<Vec<(u64, SettledPair)>, SnapshotError> {
        // Not sized by the trailer's count: a block is checked for its
        // count as it is read.
        let mut all = Vec::new();
        for block in 0..self.pair_fences.len() {
            let pairs = self.pair_block(block)?;
            all.extend(
                (0..)
                    .zip(pairs)
                    .map(|(index, pair)| (number(block, index), pair)),
            );
        }
        let at = self.pair_fences.first().map_or(0, |fence| fence.at);
        if all.len() != self.pairs {
            let found = format!("{} pairs in its blocks", all.len());
            return Err(invalid("archive pairs", at, &self.pairs.to_string(), found));
        }
        let mut names = HashSet::with_capacity(2 * all.len());
        let mut ids = HashMap::with_capacity(all.len());
        for (number, pair) in &all {
            ids.insert(*number, hash(self.keys, &pair.id));
            if !names.insert((true, &*pair.key)) || !names.insert((false, &*pair.id)) {
                let expected = "each key and each id once".to_owned();
                let found = format!("key {} or withdrawal {} again", pair.key, pair.id);
                return Err(invalid("archive pairs", at, &expected, found));
            }
        }
        self.check_id_entries(ids)?;
        Ok(all)
    }

    /// Refuses id blocks that do not name each pair of `ids` (a pair's
    /// number to its id's hash) exactly once, under that hash.
    fn check_id_entries(&self, mut ids: HashMap<u64, u64>) -> Result<(), SnapshotError> {
        for block in 0..self.id_fences.len() {
            let at = self.id_fences[block].at;
            for (entry, pair_block, index) in self.id_block(block)? {
                if ids.remove(&number(pair_block as usize, index)) != Some(entry) {
                    let expected = "the one pair whose id hashes to it".to_owned();
                    let found = format!("pair {index} of block {pair_block} for {entry:#x}");
                    return Err(invalid("archive id entry", at, &expected, found));
                }
            }
        }
        match ids.into_keys().next() {
            None => Ok(()),
            Some(number) => {
                let at = self.id_fences.first().map_or(0, |fence| fence.at);
                let expected = "an entry for every pair".to_owned();
                Err(invalid(
                    "archive id blocks",
                    at,
                    &expected,
                    format!("none for pair {number}"),
                ))
            }
        }
    }

    /// Pair block `block`, which an entry of the id block at `named_at`
    /// names, if there is one.
    fn pair_block_number(&self, block: u32, named_at: u64) -> Result<usize, SnapshotError> {
        let number = block as usize;
        if number < self.pair_fences.len() {
            return Ok(number);
        }
        let expected = format!("a pair block below {}", self.pair_fences.len());
        Err(invalid(
            "archive id entry",
            named_at,
            &expected,
            block.to_string(),
        ))
    }

    /// The bytes of the block at `fence`, its checksum checked; an `In`
    /// over them reads its fields.
    fn block(&self, fence: Fence, field: &'static str) -> Result<Vec<u8>, SnapshotError> {
        let mut bytes = Vec::new();
        self.source
            .read_at(fence.at, fence.len as usize, &mut bytes)?;
        let Some(body_len) = sealed(&bytes).map(<[u8]>::len) else {
            let found = "bytes whose checksum differs".to_owned();
            return Err(invalid(field, fence.at, "its checksum", found));
        };
        bytes.truncate(body_len);
        Ok(bytes)
    }

    fn pair_block(&self, block: usize) -> Result<Vec<SettledPair>, SnapshotError> {
        let fence = self.pair_fences[block];
        let bytes = self.block(fence, "archive pair block")?;
        let mut input = In::window(&bytes, fence.at as usize, fence.at as usize + bytes.len());
        let count = usize::from(input.u8("archive pair count")?);
        let wanted = in_block(self.pairs, PAIRS_PER_BLOCK, block);
        if count != wanted {
            let expected = format!("{wanted} pairs");
            return Err(input.invalid("archive pair count", expected, count.to_string()));
        }
        let mut pairs = Vec::with_capacity(count);
        for _ in 0..count {
            pairs.push(read_pair(&mut input, self.last_seq)?);
        }
        ended(&input, fence.at, bytes.len())?;
        let hashes = pairs.iter().map(|pair| hash(self.keys, &pair.key));
        in_order(hashes, &self.pair_fences, block, "archive pair block")?;
        Ok(pairs)
    }

    fn id_block(&self, block: usize) -> Result<Vec<(u64, u32, usize)>, SnapshotError> {
        let fence = self.id_fences[block];
        let bytes = self.block(fence, "archive id block")?;
        let mut input = In::window(&bytes, fence.at as usize, fence.at as usize + bytes.len());
        let count = usize::from(input.u16("archive id count")?);
        let wanted = in_block(self.pairs, IDS_PER_BLOCK, block);
        if count != wanted {
            let expected = format!("{wanted} entries");
            return Err(input.invalid("archive id count", expected, count.to_string()));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let hash = input.u64("archive id hash")?;
            let pair_block = input.u32("archive id block")?;
            let index = usize::from(input.u8("archive id index")?);
            if index >= PAIRS_PER_BLOCK {
                let expected = format!("a pair below {PAIRS_PER_BLOCK}");
                return Err(input.invalid("archive id index", expected, index.to_string()));
            }
            entries.push((hash, pair_block, index));
        }
        ended(&input, fence.at, bytes.len())?;
        let hashes = entries.iter().map(|&(hash, _, _)| hash);
        in_order(hashes, &self.id_fences, block, "archive id block")?;
        Ok(entries)
    }
}

/// Refuses block `block` of `fences` unless `hashes`, what it holds, start
/// with its fence's hash, never go down, and pass no hash the next block
/// starts with: a name is then in the block its hash finds.
pub(super) fn in_order(
    hashes: impl Iterator<Item = u64>,
    fences: &[Fence],
    block: usize,
    field: &'static str,
) -> Result<(), SnapshotError> {
    let fence = fences[block];
    let next = fences.get(block + 1).map_or(u64::MAX, |next| next.first);
    let mut last = None;
    for hash in hashes {
        let placed = match last {
            None => hash == fence.first,
            Some(last) => last <= hash && hash <= next,
        };
        if !placed {
            let expected = format!("hashes from {:#x} to {next:#x}, in order", fence.first);
            return Err(invalid(field, fence.at, &expected, format!("{hash:#x}")));
        }
        last = Some(hash);
    }
    Ok(())
}

/// The bytes of `block` before its checksum, if its last 4 bytes are the
/// `crc32` of them.
fn sealed(block: &[u8]) -> Option<&[u8]> {
    let (body, crc) = block.split_at_checked(block.len().checked_sub(4)?)?;
    let stored = u32::from_le_bytes(crc.try_into().ok()?);
    (stored == crc32fast::hash(body)).then_some(body)
}

/// Calls `look` on each block (number, fence) of `fences` a name
/// hashing to `wanted` can be in, the last first, until it says found.
pub(super) fn in_blocks_of(
    fences: &[Fence],
    wanted: u64,
    mut look: impl FnMut(usize, Fence) -> Result<bool, SnapshotError>,
) -> Result<(), SnapshotError> {
    // Blocks before the first starting after the hash; of those, only
    // the last can hold it, and the ones before it while it starts
    // with that very hash (equal hashes straddling a boundary).
    let mut block = fences.partition_point(|fence| fence.first <= wanted);
    while block > 0 {
        block -= 1;
        if look(block, fences[block])? || fences[block].first < wanted {
            break;
        }
    }
    Ok(())
}

/// How many of `total` entries block `block` holds, `per_block` a block
/// but for the last: what the trailer's count says it must.
fn in_block(total: usize, per_block: usize, block: usize) -> usize {
    total
        .saturating_sub(block.saturating_mul(per_block))
        .min(per_block)
}

/// A pair's number in its archive: its place among the blocks.
pub(super) fn number(block: usize, index: usize) -> u64 {
    (block * PAIRS_PER_BLOCK + index) as u64
}

/// A refusal of `field` at archive byte `offset`, named, as `In`'s are, as
/// if the archive were a snapshot's body.
fn invalid(field: &'static str, offset: u64, expected: &str, found: String) -> SnapshotError {
    SnapshotError::Invalid {
        field,
        offset: offset + SNAPSHOT_HEADER_LEN as u64,
        expected: expected.to_owned(),
        found,
    }
}

/// Refuses bytes after a block's last field.
fn ended(input: &In<'_>, at: u64, len: usize) -> Result<(), SnapshotError> {
    let read = input.at() - at as usize;
    if read == len {
        return Ok(());
    }
    let found = format!("{} bytes more", len - read);
    Err(invalid(
        "archive block end",
        at + read as u64,
        "no more bytes",
        found,
    ))
}

/// The trailer's fields.
struct Trailer {
    keys: (u64, u64),
    pairs: usize,
    pair_fences: usize,
    fences_at: u64,
    crc: u32,
}

impl Trailer {
    fn decode(bytes: &[u8], at: u64) -> Result<Trailer, SnapshotError> {
        let mut input = In::window(bytes, at as usize, at as usize + bytes.len());
        let keys = (
            input.u64("archive hash key")?,
            input.u64("archive hash key")?,
        );
        let pairs = input.u64("archive pairs")?;
        let pair_fences = input.u64("archive pair blocks")?;
        let id_fences = input.u64("archive id blocks")?;
        let fences_at = input.u64("archive fences offset")?;
        let crc = input.u32("archive checksum")?;
        let fences = pair_fences.checked_add(id_fences);
        let fits = fences
            .and_then(|fences| fences.checked_mul(FENCE_LEN as u64))
            .is_some_and(|len| fences_at.checked_add(len) == Some(at));
        let blocks_fit = pairs.div_ceil(PAIRS_PER_BLOCK as u64) == pair_fences
            && pairs.div_ceil(IDS_PER_BLOCK as u64) == id_fences;
        if !fits || !blocks_fit {
            let expected = "fences that end where the trailer starts, one per block".to_owned();
            let found = format!("{pairs} pairs, {pair_fences} + {id_fences} fences at {fences_at}");
            return Err(invalid("archive trailer", at, &expected, found));
        }
        Ok(Trailer {
            keys,
            pairs: pairs as usize,
            pair_fences: pair_fences as usize,
            fences_at,
            crc,
        })
    }
}

/// Fences from `bytes`, which start at `at`, and where their last block
/// ends: the first block starts at `from`, each after the one before it,
/// and the last ends by `blocks_end`.
fn read_fences(
    bytes: &[u8],
    at: u64,
    from: u64,
    blocks_end: u64,
) -> Result<(Vec<Fence>, u64), SnapshotError> {
    let mut input = In::window(bytes, at as usize, at as usize + bytes.len());
    let mut fences = Vec::with_capacity(bytes.len() / FENCE_LEN);
    let mut block_end = from;
    let mut last = 0u64;
    while input.at() < at as usize + bytes.len() {
        let fence = Fence {
            first: input.u64("archive fence hash")?,
            at: input.u64("archive fence offset")?,
            len: input.u32("archive fence length")?,
        };
        let end = fence.at.checked_add(u64::from(fence.len));
        let in_order = fence.at == block_end && fence.first >= last;
        if !in_order || end.is_none_or(|end| end > blocks_end) || fence.len as usize > BLOCK_LEN_MAX
        {
            let expected = format!("a block from {block_end}, hashes in order");
            let found = format!("{} bytes at {}", fence.len, fence.at);
            return Err(input.invalid("archive fence", expected, found));
        }
        (block_end, last) = (end.unwrap_or_default(), fence.first);
        fences.push(fence);
    }
    Ok((fences, block_end))
}

fn read_pair(input: &mut In<'_>, last_seq: u64) -> Result<SettledPair, SnapshotError> {
    let key = input.text::<RequestKey>("archived key")?;
    let claimed_seq = input.u64("archived claim seq")?;
    if !(1..=last_seq).contains(&claimed_seq) {
        let expected = format!("a seq from 1 to {last_seq}");
        return Err(input.invalid("archived claim seq", expected, claimed_seq.to_string()));
    }
    let claimed_at = Timestamp::from_unix_nanos(input.u64("archived claim time")?);
    let outcome = read_outcome(input)?;
    let id = input.text::<WithdrawalId>("archived withdrawal id")?;
    let destination = input.text::<Destination>("archived destination")?;
    let amount = input.amount("archived amount", "archived amount scale")?;
    let currency = input.text::<Currency>("archived currency")?;
    let flags = input.u8("archived flags")?;
    if flags & !(CREATED | CAPTURED) != 0 {
        let expected = format!("only bits {:#04b}", CREATED | CAPTURED);
        return Err(input.invalid("archived flags", expected, flags.to_string()));
    }
    Ok(SettledPair {
        key: key.into(),
        claimed_seq,
        claimed_at,
        state: outcome.state,
        reference: outcome.reference.map(|text| text.as_str().into()),
        reason: outcome.reason.map(|text| text.as_str().into()),
        requested_by: outcome.requested_by.as_str().into(),
        replaced: outcome.replaced.into(),
        id: id.into(),
        destination: destination.into(),
        amount,
        currency: stored(currency, Currency::new),
        created: flags & CREATED != 0,
        funds: if flags & CAPTURED != 0 {
            Funds::Captured
        } else {
            Funds::Free
        },
    })
}

/// A settled outcome: its state and texts, checked as the model checks
/// them.
struct Outcome {
    state: WithdrawalState,
    reference: Option<Reference>,
    reason: Option<Reason>,
    requested_by: Actor,
    replaced: Vec<Reference>,
}

/// A settled outcome's state and texts, checked as the model checks them.
fn read_outcome(input: &mut In<'_>) -> Result<Outcome, SnapshotError> {
    let at = input.offset();
    let number = input.u8("archived state")?;
    let state = WithdrawalState::ALL
        .get(usize::from(number))
        .copied()
        .filter(|state| state.is_settled())
        .ok_or_else(|| {
            let expected = "a settled state".to_owned();
            input.invalid("archived state", expected, number.to_string())
        })?;
    let reference = input.optional::<Reference>("archived reference")?;
    let reason = input.optional::<Reason>("archived reason")?;
    let requested_by = input.text::<Actor>("archived requester")?;
    let count = usize::from(input.u8("archived replaced count")?);
    if count > REPLACED_MAX {
        let expected = format!("at most {REPLACED_MAX}");
        return Err(input.invalid("archived replaced count", expected, count.to_string()));
    }
    let mut replaced = Vec::with_capacity(count);
    for _ in 0..count {
        let text = input.text::<Reference>("archived replaced reference")?;
        replaced.push(stored(text, Reference::new));
    }
    let outcome = Outcome {
        state,
        reference: reference.map(|text| stored(text, Reference::new)),
        reason: reason.map(|text| stored(text, Reason::new)),
        requested_by: stored(requested_by, Actor::new),
        replaced,
    };
    let checked = Progress::new(
        state,
        outcome.reference.clone(),
        outcome.reason.clone(),
        outcome.requested_by.clone(),
        outcome.replaced.clone(),
    );
    match checked {
        Ok(_) => Ok(outcome),
        Err(error) => {
            Err(input.invalid_at(at, "archived outcome", error.to_string(), state.to_string()))
        }
    }
}

/// A state's byte on disk: its place in `WithdrawalState::ALL`.
pub(super) fn state_number(state: WithdrawalState) -> u8 {
    let number = WithdrawalState::ALL
        .iter()
        .position(|&known| known == state);
    number.unwrap_or_else(|| unreachable!("every state is in ALL")) as u8
}
