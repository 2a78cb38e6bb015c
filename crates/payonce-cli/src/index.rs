//! The audit index: a sled database beside the log (`DIR/audit-index`) that
//! maps withdrawal ids and request keys to the events that touched them,
//! and times to sequence numbers, so `history` answers without a scan.
//!
//! It is derived data and never trusted over the log:
//! - It records the log's identity (where event 1 is, and the checksum its
//!   chain starts from, which derives from the log's random id) and the last
//!   event indexed with its position. Before use both are read back from the
//!   log and checksum-verified; an index built from another log, or that no
//!   longer matches this one, is ignored (or rebuilt by `payonce index`)
//!   with a warning.
//! - Every event it points to is read back with its checksum verified and
//!   checked to be about the subject asked for.
//! - Events appended since it was last written (the tail) are indexed
//!   first; if that cannot be written, they are kept in memory for this
//!   answer.
//! - Deleting the directory loses nothing: `payonce index` builds it again.
//!
//! An event is posted under the request keys it touches and under the
//! withdrawal it is about (`crate::attribution`): the one it names, or for
//! an event of schema 1 about a key alone, the one the ledger's state before
//! it says the key held. A catch-up replays that state only when it meets
//! such an event, so indexing a log of schema 2 costs no replay. Reading a
//! key's history back, such an event is attributed to the withdrawal whose
//! postings list it.
//!
//! Layout. sled reads a page table at open whose size grows with the number
//! of entries, and a leaf holds at most 16 of them; one entry per subject
//! would make opening a large index slower than the 100 ms an answer may
//! take. So subjects are hashed into [`BUCKETS`] buckets, and each bucket is
//! a short list of chunks of at most [`CHUNK_BYTES_MAX`] bytes. Integers
//! are little-endian unless said otherwise.
//! - tree `meta`: `format` (u32, [`INDEX_FORMAT`]); `first` and `last`
//!   (entries: an event's seq, then its position: segment, offset, chain);
//!   `time_max` (u64, the latest event time indexed, Unix nanoseconds).
//! - tree `postings`: a kind byte (`w` withdrawal, `k` request key), the
//!   bucket (u16 big-endian), the sequence number of the chunk's first entry
//!   (u64 big-endian) -> groups of (subject length u16, subject, entry count
//!   u16, entries of 28 bytes: seq u64, segment u64, offset u64, chain u32).
//!   Big-endian key parts make sled's byte order numeric order, so a
//!   bucket's chunks come back in log order.
//! - tree `times`: an hour (u64 big-endian, Unix hours) -> up to 60 pairs of
//!   (minute of the hour u8, entry): the first event whose running-maximum
//!   time falls in that minute.
//!
//! New entries go into the bucket's last chunk while it has room, else into
//! a new chunk. The postings are written before `meta`'s `last`; an event
//! indexed twice (a write cut short, then a catch-up) is harmless, because
//! lookups drop repeated sequence numbers.

use std::collections::{BTreeMap, HashMap, HashSet, hash_map};
use std::io::Write;
use std::ops::ControlFlow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use payonce::{Event, Timestamp};
use payonce_log::{Position, TornTail};
use payonce_model::{RequestKey, WithdrawalId};
use sled::{Batch, Db, Tree};
use tracing::{info, warn};

use crate::attribution::{Attributed, Attributor};
use crate::cli::IndexArgs;
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::escape::{EchoPath, Escaped};
use crate::logdir::{LogDir, Walked, open_log};
use crate::output::warn_torn_tail;
use crate::subject::HISTORY_EVENTS_MAX;
use payonce::Subject;
use payonce::needs_state;

/// The index's directory inside the log's directory. The log only reads
/// files named like segments, so it never looks inside.
pub const INDEX_DIR: &str = "audit-index";
/// The layout version this build writes and reads.
pub const INDEX_FORMAT: u32 = 1;
/// Buckets subjects are hashed into, per kind.
pub const BUCKETS: u16 = 4096;
/// Most bytes in one chunk: a sled leaf of 16 chunks then stays well under
/// the size at which sled moves values out into separate blob files.
pub const CHUNK_BYTES_MAX: usize = 4096;
/// Buckets written per sled batch.
const BUCKETS_PER_BATCH: usize = 512;
/// Most events indexed in memory before they are written: about 100 MiB.
/// Each write rewrites the last chunk of every bucket it touches, and sled
/// keeps the old versions until its own cleaning, so fewer, larger writes
/// make a smaller index that opens faster.
pub const PENDING_EVENTS_MAX: u64 = 1_048_576;
/// Longest subject accepted when decoding a chunk: longer than any request
/// key or withdrawal id the model allows.
const SUBJECT_LEN_MAX: usize = 1024;
/// Bytes of one entry: seq, segment, offset (u64 each) and chain (u32).
const ENTRY_LEN: usize = 28;
/// sled's page cache: the index is read in small pieces, so a small cache
/// keeps the command's memory low.
const CACHE_BYTES: u64 = 32 << 20;
const NANOS_PER_MINUTE: u64 = 60_000_000_000;

const META_FORMAT: &[u8] = b"format";
const META_FIRST: &[u8] = b"first";
const META_LAST: &[u8] = b"last";
const META_TIME_MAX: &[u8] = b"time_max";
const KIND_WITHDRAWAL: u8 = b'w';
const KIND_KEY: u8 = b'k';

/// One indexed event: its sequence number and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    seq: u64,
    position: Position,
}

impl Entry {
    fn encode_into(&self, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(&self.seq.to_le_bytes());
        bytes.extend_from_slice(&self.position.segment.to_le_bytes());
        bytes.extend_from_slice(&self.position.offset.to_le_bytes());
        bytes.extend_from_slice(&self.position.chain.to_le_bytes());
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(ENTRY_LEN);
        self.encode_into(&mut bytes);
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<Entry> {
        if bytes.len() != ENTRY_LEN {
            return None;
        }
        let u64_at = |at: usize| {
            bytes
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let chain = bytes
            .get(24..28)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)?;
        Some(Entry {
            seq: u64_at(0)?,
            position: Position {
                segment: u64_at(8)?,
                offset: u64_at(16)?,
                chain,
            },
        })
    }
}

/// `n` as a sled key part. sled orders keys byte by byte, so only
/// big-endian bytes sort in numeric order; these bytes are key material for
/// ordering, never an integer read back, which stays little-endian
/// everywhere else.
#[allow(clippy::big_endian_bytes)]
fn ordered_u64(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Reads back what [`ordered_u64`] wrote.
#[allow(clippy::big_endian_bytes)]
fn read_ordered_u64(bytes: [u8; 8]) -> u64 {
    u64::from_be_bytes(bytes)
}

/// See [`ordered_u64`].
#[allow(clippy::big_endian_bytes)]
fn ordered_u16(n: u16) -> [u8; 2] {
    n.to_be_bytes()
}

/// The bucket of `subject`: FNV-1a, written out so that it never changes
/// between builds (the standard library's hasher may).
fn bucket(subject: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in subject.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(BUCKETS)) as u16
}

fn bucket_prefix(kind: u8, bucket: u16) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(11);
    prefix.push(kind);
    prefix.extend_from_slice(&ordered_u16(bucket));
    prefix
}

/// A chunk's groups: (subject, entries), in the order written.
type Groups = Vec<(String, Vec<Entry>)>;

fn encode_group(subject: &str, entries: &[Entry], bytes: &mut Vec<u8>) {
    assert!(
        subject.len() <= SUBJECT_LEN_MAX && entries.len() <= usize::from(u16::MAX),
        "a group fits its length fields"
    );
    bytes.extend_from_slice(&(subject.len() as u16).to_le_bytes());
    bytes.extend_from_slice(subject.as_bytes());
    bytes.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for entry in entries {
        entry.encode_into(bytes);
    }
}

/// Bytes a group of `count` entries for `subject` takes.
fn group_len(subject: &str, count: usize) -> usize {
    2 + subject.len() + 2 + count * ENTRY_LEN
}

fn decode_chunk(bytes: &[u8]) -> Result<Groups, String> {
    if bytes.len() > CHUNK_BYTES_MAX {
        return Err("a chunk with too many bytes".to_owned());
    }
    decode_groups(bytes)
}

/// Groups with the same subject gathered into one, in order of first
/// appearance, entries in order.
fn regroup(groups: Groups) -> Groups {
    let mut order: HashMap<String, usize> = HashMap::new();
    let mut gathered: Groups = Vec::new();
    for (subject, entries) in groups {
        match order.get(&subject) {
            Some(&at) => gathered[at].1.extend(entries),
            None => {
                order.insert(subject.clone(), gathered.len());
                gathered.push((subject, entries));
            }
        }
    }
    gathered
}

fn decode_groups(bytes: &[u8]) -> Result<Groups, String> {
    let bad = |what: &str| Err(format!("a chunk with {what}"));
    let mut groups = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some((len, after)) = rest.split_first_chunk::<2>() else {
            return bad("a cut subject length");
        };
        let len = usize::from(u16::from_le_bytes(*len));
        if len > SUBJECT_LEN_MAX || after.len() < len + 2 {
            return bad("a bad subject length");
        }
        let (subject, after) = after.split_at(len);
        let Ok(subject) = std::str::from_utf8(subject) else {
            return bad("a subject that is not text");
        };
        let Some((count, after)) = after.split_first_chunk::<2>() else {
            return bad("a cut entry count");
        };
        let count = usize::from(u16::from_le_bytes(*count));
        if count == 0 || after.len() < count * ENTRY_LEN {
            return bad("a bad entry count");
        }
        let (entries, after) = after.split_at(count * ENTRY_LEN);
        let entries = entries
            .chunks_exact(ENTRY_LEN)
            .map(Entry::decode)
            .collect::<Option<Vec<Entry>>>()
            .ok_or_else(|| "a chunk with an unreadable entry".to_owned())?;
        groups.push((subject.to_owned(), entries));
        rest = after;
    }
    Ok(groups)
}

/// Runs `work`, turning a panic inside sled (it panics on some damage) into
/// a message.
fn guarded<T>(work: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(work))
        .unwrap_or_else(|_| Err("the index's storage panicked while reading it".to_owned()))
}

fn sled_error(error: sled::Error) -> String {
    error.to_string()
}

/// The open database and its trees.
struct Trees {
    db: Db,
    meta: Tree,
    postings: Tree,
    times: Tree,
    /// Tests set this to make every write fail, as a full disk would.
    #[cfg(test)]
    refuse_writes: bool,
}

impl Trees {
    fn open(path: &Path) -> Result<Trees, String> {
        guarded(|| {
            let db = sled::Config::new()
                .path(path)
                .cache_capacity(CACHE_BYTES)
                .mode(sled::Mode::HighThroughput)
                .open()
                .map_err(sled_error)?;
            let tree = |name: &str| db.open_tree(name).map_err(sled_error);
            Ok(Trees {
                meta: tree("meta")?,
                postings: tree("postings")?,
                times: tree("times")?,
                db,
                #[cfg(test)]
                refuse_writes: false,
            })
        })
    }

    fn clear(&self) -> Result<(), String> {
        guarded(|| {
            for tree in [&self.meta, &self.postings, &self.times] {
                tree.clear().map_err(sled_error)?;
            }
            self.db.flush().map_err(sled_error).map(drop)
        })
    }

    fn meta_entry(&self, name: &[u8]) -> Result<Option<Entry>, String> {
        match self.meta.get(name).map_err(sled_error)? {
            None => Ok(None),
            Some(bytes) => Entry::decode(&bytes)
                .map(Some)
                .ok_or_else(|| format!("its {} mark is unreadable", String::from_utf8_lossy(name))),
        }
    }

    fn read_meta(&self) -> Result<Meta, String> {
        guarded(|| {
            let format = self
                .meta
                .get(META_FORMAT)
                .map_err(sled_error)?
                .and_then(|b| b.as_ref().try_into().ok().map(u32::from_le_bytes));
            let time_max = self
                .meta
                .get(META_TIME_MAX)
                .map_err(sled_error)?
                .and_then(|b| b.as_ref().try_into().ok().map(u64::from_le_bytes))
                .unwrap_or(0);
            Ok(Meta {
                format,
                first: self.meta_entry(META_FIRST)?,
                last: self.meta_entry(META_LAST)?,
                time_max,
            })
        })
    }

    /// Adds new entries to a bucket: into its last chunk while it has room,
    /// then into new chunks.
    fn add_postings(
        &self,
        kind: u8,
        bucket: u16,
        subjects: &Groups,
        batch: &mut Batch,
    ) -> Result<(), String> {
        {
            let prefix = bucket_prefix(kind, bucket);
            let (mut key, mut bytes) = match self.postings.scan_prefix(&prefix).next_back() {
                Some(found) => {
                    let (key, value) = found.map_err(sled_error)?;
                    (Some(key.to_vec()), value.to_vec())
                }
                None => (None, Vec::new()),
            };
            // A new chunk's key must sort after the last one's, even when an
            // event is indexed a second time.
            let mut key_seq = key
                .as_ref()
                .and_then(|key| key.get(3..11))
                .and_then(|bytes| bytes.try_into().ok())
                .map_or(0, read_ordered_u64);
            let mut changed = false;
            for (subject, entries) in subjects {
                let mut rest: &[Entry] = entries.as_slice();
                while let Some(first) = rest.first() {
                    let room = CHUNK_BYTES_MAX.saturating_sub(bytes.len());
                    let fits = room.saturating_sub(group_len(subject, 0)) / ENTRY_LEN;
                    if key.is_none() || fits == 0 {
                        if let Some(full) = key.take()
                            && changed
                        {
                            batch.insert(full, std::mem::take(&mut bytes));
                        }
                        key_seq = first.seq.max(key_seq + 1);
                        let mut new_key = prefix.clone();
                        new_key.extend_from_slice(&ordered_u64(key_seq));
                        key = Some(new_key);
                        bytes.clear();
                        changed = false;
                        continue;
                    }
                    let (now, later) = rest.split_at(fits.min(rest.len()));
                    encode_group(subject, now, &mut bytes);
                    changed = true;
                    rest = later;
                }
            }
            if let Some(key) = key
                && changed
            {
                assert!(
                    bytes.len() <= CHUNK_BYTES_MAX,
                    "a chunk stays within its limit"
                );
                batch.insert(key, bytes);
            }
        }
        Ok(())
    }

    /// Writes what `pending` holds, then the marks, then flushes.
    fn write(&self, pending: &Pending) -> Result<(), String> {
        #[cfg(test)]
        if self.refuse_writes {
            return Err("writes refused by the test".to_owned());
        }
        guarded(|| {
            self.meta
                .insert(META_FORMAT, &INDEX_FORMAT.to_le_bytes())
                .map_err(sled_error)?;
            let mut buckets: Vec<(&(u8, u16), &Vec<u8>)> = pending.buckets.iter().collect();
            buckets.sort_by_key(|(bucket, _)| **bucket);
            // Several smaller batches keep the memory a write needs small;
            // a write cut short between them is repaired by the next one.
            for part in buckets.chunks(BUCKETS_PER_BATCH) {
                let mut batch = Batch::default();
                for ((kind, bucket), bytes) in part {
                    let groups = regroup(decode_groups(bytes)?);
                    self.add_postings(*kind, *bucket, &groups, &mut batch)?;
                }
                self.postings.apply_batch(batch).map_err(sled_error)?;
            }
            let mut hours: BTreeMap<u64, Vec<(u8, Entry)>> = BTreeMap::new();
            for (minute, entry) in &pending.times {
                hours
                    .entry(minute / 60)
                    .or_default()
                    .push(((minute % 60) as u8, *entry));
            }
            for (hour, minutes) in hours {
                let key = ordered_u64(hour);
                let mut all = match self.times.get(key).map_err(sled_error)? {
                    Some(bytes) => decode_minutes(&bytes)?,
                    None => Vec::new(),
                };
                for (minute, entry) in minutes {
                    if !all.iter().any(|(m, _)| *m == minute) {
                        all.push((minute, entry));
                    }
                }
                all.sort_by_key(|(minute, _)| *minute);
                self.times
                    .insert(key, encode_minutes(&all))
                    .map_err(sled_error)?;
            }
            if let Some(first) = pending.first {
                self.meta
                    .insert(META_FIRST, first.encode())
                    .map_err(sled_error)?;
            }
            self.meta
                .insert(META_TIME_MAX, &pending.time_max.to_le_bytes())
                .map_err(sled_error)?;
            if let Some(last) = pending.last {
                self.meta
                    .insert(META_LAST, last.encode())
                    .map_err(sled_error)?;
            }
            // sled writes are durable only after a flush. The index is
            // derived data, so this is for speed next time, not for safety.
            self.db.flush().map_err(sled_error).map(drop)
        })
    }

    /// Every written entry of `subject`, in log order, without repeats.
    fn lookup(&self, kind: u8, subject: &str) -> Result<Vec<Entry>, String> {
        guarded(|| {
            let mut entries = Vec::new();
            for found in self
                .postings
                .scan_prefix(bucket_prefix(kind, bucket(subject)))
            {
                let (_, value) = found.map_err(sled_error)?;
                for (name, group) in decode_chunk(&value)? {
                    if name == subject {
                        entries.extend(group);
                    }
                }
            }
            entries.sort_by_key(|entry| entry.seq);
            entries.dedup_by_key(|entry| entry.seq);
            Ok(entries)
        })
    }
}

fn encode_minutes(minutes: &[(u8, Entry)]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(minutes.len() * (1 + ENTRY_LEN));
    for (minute, entry) in minutes {
        bytes.push(*minute);
        entry.encode_into(&mut bytes);
    }
    bytes
}

fn decode_minutes(bytes: &[u8]) -> Result<Vec<(u8, Entry)>, String> {
    if !bytes.len().is_multiple_of(1 + ENTRY_LEN) || bytes.len() > 60 * (1 + ENTRY_LEN) {
        return Err(format!("a time entry of {} bytes", bytes.len()));
    }
    bytes
        .chunks_exact(1 + ENTRY_LEN)
        .map(|pair| {
            let minute = pair[0];
            let entry = Entry::decode(&pair[1..]).filter(|_| minute < 60);
            entry
                .map(|entry| (minute, entry))
                .ok_or_else(|| "an unreadable time entry".to_owned())
        })
        .collect()
}

/// The index's marks.
#[derive(Debug, Default, Clone, Copy)]
struct Meta {
    format: Option<u32>,
    first: Option<Entry>,
    last: Option<Entry>,
    time_max: u64,
}

/// What a usable index's marks say about the log now.
#[derive(Debug, Clone, Copy)]
struct Checked {
    meta: Meta,
    /// Whether nothing follows the last indexed event: its segment is the
    /// newest and ends right after it.
    up_to_date: bool,
}

impl Checked {
    /// Where a new or rebuilt index starts: before the first event.
    fn from_start() -> Checked {
        Checked {
            meta: Meta::default(),
            up_to_date: false,
        }
    }
}

/// Reads the index's marks back from the log: `Err` says why the index
/// does not match it.
fn check(trees: &Trees, log: &LogDir) -> Result<Checked, String> {
    let meta = trees.read_meta()?;
    match meta.format {
        Some(INDEX_FORMAT) => {}
        Some(other) => {
            return Err(format!(
                "it has layout version {other}; this build reads version {INDEX_FORMAT}"
            ));
        }
        None => return Err("it has no layout version: it was never completely written".to_owned()),
    }
    let (first, last) = match (meta.first, meta.last) {
        (None, None) => {
            return Ok(Checked {
                meta,
                up_to_date: false,
            });
        }
        (Some(first), Some(last)) => (first, last),
        _ => return Err("its marks are incomplete".to_owned()),
    };
    if first.seq != 1 || log.event_at(first.seq, first.position).is_err() {
        return Err(
            "it was built from another log: this log's first event is not where, or not \
                    what, the index recorded"
                .to_owned(),
        );
    }
    let Ok((_, end)) = log.event_and_end_at(last.seq, last.position) else {
        return Err(format!(
            "it does not match this log: event {} is not where, or not what, the index recorded \
             (the log was replaced, or the index comes from a copy of another log)",
            last.seq
        ));
    };
    // Segments only grow, and only by whole log records or by a torn write, so
    // a newest segment that still ends where the last indexed event ends
    // holds nothing after it.
    let segments = log.segment_files().map_err(|error| error.to_string())?;
    let up_to_date = segments
        .last()
        .is_some_and(|newest| newest.first_seq == last.position.segment && newest.len == end);
    Ok(Checked { meta, up_to_date })
}

/// Events indexed in memory and not yet written.
#[derive(Debug, Default)]
struct Pending {
    /// (kind, bucket) -> groups of one entry each, encoded as in a chunk:
    /// about 40 bytes an entry, where maps of strings to lists would take
    /// several times that.
    buckets: HashMap<(u8, u16), Vec<u8>>,
    /// Unix minute -> the first event whose running-maximum time falls in it.
    times: BTreeMap<u64, Entry>,
    first: Option<Entry>,
    last: Option<Entry>,
    time_max: u64,
    events: u64,
}

impl Pending {
    fn after(meta: &Meta) -> Pending {
        Pending {
            last: meta.last,
            time_max: meta.time_max,
            ..Pending::default()
        }
    }

    fn add(&mut self, event: &Event, position: Position, withdrawal: Option<&WithdrawalId>) {
        let entry = Entry {
            seq: event.seq,
            position,
        };
        if let Some(withdrawal) = withdrawal {
            self.post(KIND_WITHDRAWAL, withdrawal, entry);
        }
        for key in event.kind.keys_touched() {
            self.post(KIND_KEY, key, entry);
        }
        let at = event.at.unix_nanos();
        if at > self.time_max {
            let minute = at / NANOS_PER_MINUTE;
            if self.time_max == 0 || minute > self.time_max / NANOS_PER_MINUTE {
                self.times.entry(minute).or_insert(entry);
            }
            self.time_max = at;
        }
        if event.seq == 1 {
            self.first = Some(entry);
        }
        self.last = Some(entry);
        self.events += 1;
    }

    fn post(&mut self, kind: u8, subject: &str, entry: Entry) {
        let bytes = self.buckets.entry((kind, bucket(subject))).or_default();
        encode_group(subject, &[entry], bytes);
    }

    /// The entries of `subject` not yet written.
    fn entries(&self, kind: u8, subject: &str) -> Result<Vec<Entry>, String> {
        let Some(bytes) = self.buckets.get(&(kind, bucket(subject))) else {
            return Ok(Vec::new());
        };
        Ok(decode_groups(bytes)?
            .into_iter()
            .filter(|(name, _)| name == subject)
            .flat_map(|(_, entries)| entries)
            .collect())
    }

    /// Forgets the entries once written; the marks stay.
    fn written(&mut self) {
        self.buckets.clear();
        self.times.clear();
        self.first = None;
        self.events = 0;
    }
}

/// Checks that the events an index lists under a subject, read back in
/// order, are about it, as far as each event and those before it can tell.
struct About<'a> {
    subject: &'a Subject,
    /// The keys that earlier events about the withdrawal named with it.
    keys_named: HashSet<RequestKey>,
}

impl<'a> About<'a> {
    fn new(subject: &'a Subject) -> About<'a> {
        About {
            subject,
            keys_named: HashSet::new(),
        }
    }

    /// Whether `event`, the next listed, is about the subject.
    fn check(&mut self, event: &Event) -> bool {
        let id = match self.subject {
            Subject::Key(key) => return event.kind.keys_touched().contains(&key),
            Subject::Withdrawal(id) => id,
        };
        match event.kind.withdrawal() {
            Some(named) if named == id => {
                if let Some(key) = event.kind.key() {
                    self.keys_named.insert(key.clone());
                }
                true
            }
            Some(_) => false,
            // An event of schema 1 about a key alone was attributed through
            // the state before it, which only a replay knows. What the
            // events can tell: the key held this withdrawal, so an earlier
            // event about it named the key.
            None => {
                needs_state(event)
                    && event
                        .kind
                        .key()
                        .is_some_and(|key| self.keys_named.contains(key))
            }
        }
    }
}

/// What bringing an index up to date did.
struct CaughtUp {
    pending: Pending,
    walked: Walked,
    /// Events indexed by this catch-up.
    new_events: u64,
    /// Why the new events could not be written, if they could not.
    write_failure: Option<String>,
}

/// Indexes the events after `checked`'s last, handing them to `write`
/// every [`PENDING_EVENTS_MAX`] events and at the end; if a write fails,
/// keeps the rest in memory.
fn catch_up(
    log: &LogDir,
    checked: &Checked,
    write: &mut dyn FnMut(&Pending) -> Result<(), String>,
) -> Result<CaughtUp, CliError> {
    let mut pending = Pending::after(&checked.meta);
    if checked.up_to_date {
        return Ok(CaughtUp {
            pending,
            walked: Walked::default(),
            new_events: 0,
            write_failure: None,
        });
    }
    let mut write_failure = None;
    let mut new_events = 0;
    let from = checked.meta.last.map_or(1, |last| last.seq + 1);
    // A catch-up from the middle of the log replays the state before it
    // only if an event of schema 1 needs it, so a log of schema 2 is
    // indexed without one.
    let mut attributor = Attributor::starting_at(from);
    let walked = log.walk(from, |event, position| {
        if event.seq < from {
            return Ok(ControlFlow::Continue(()));
        }
        let withdrawal = attributor.attribute(log, event)?;
        pending.add(event, position, withdrawal.as_ref());
        new_events += 1;
        if write_failure.is_none() && pending.events >= PENDING_EVENTS_MAX {
            match write(&pending) {
                Ok(()) => pending.written(),
                Err(problem) => write_failure = Some(problem),
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    if write_failure.is_none() && pending.events > 0 {
        match write(&pending) {
            Ok(()) => pending.written(),
            Err(problem) => write_failure = Some(problem),
        }
    }
    info!(new_events, from, "audit index brought up to date");
    Ok(CaughtUp {
        pending,
        walked,
        new_events,
        write_failure,
    })
}

fn warn_user(err: &mut dyn Write, message: &str) -> Result<(), CliError> {
    warn!(message, "audit index");
    writeln!(err, "warning: {}", Escaped(message)).map_err(CliError::output)
}

/// An index opened for a query and brought up to date with the log.
pub(crate) struct QueryIndex {
    trees: Trees,
    pending: Pending,
    path: PathBuf,
    /// A torn tail met while indexing the tail of the log.
    pub(crate) torn_tail: Option<TornTail>,
}

/// Why an index is passed over, and what to do about it.
fn ignored_message(path: &Path, log: &LogDir, why: &str) -> String {
    format!(
        "the audit index {} is not used: {why}. Answering from the log instead; `payonce index \
         {}` rebuilds it",
        path.display(),
        log.dir.display()
    )
}

/// Whether `path` holds what sled writes, so a query never creates a
/// database where there was none.
fn looks_like_index(path: &Path) -> bool {
    path.join("conf").is_file() && path.join("db").is_file()
}

/// Opens the index beside `log` for a query and brings it up to date.
/// `None` when there is none, or (after a warning on `err`) when it cannot
/// be opened or does not match the log: the caller then scans.
pub(crate) fn open_for_query(
    log: &LogDir,
    err: &mut dyn Write,
) -> Result<Option<QueryIndex>, CliError> {
    let path = log.dir.join(INDEX_DIR);
    if !path.exists() {
        return Ok(None);
    }
    let ignored = |why: &str| ignored_message(&path, log, why);
    if !looks_like_index(&path) {
        warn_user(err, &ignored("it does not look like a sled database"))?;
        return Ok(None);
    }
    let trees = match Trees::open(&path) {
        Ok(trees) => trees,
        Err(problem) => {
            warn_user(err, &ignored(&format!("it cannot be opened ({problem})")))?;
            return Ok(None);
        }
    };
    use_for_query(log, trees, path, err)
}

/// Checks an open index against the log and brings it up to date; see
/// [`open_for_query`].
fn use_for_query(
    log: &LogDir,
    trees: Trees,
    path: PathBuf,
    err: &mut dyn Write,
) -> Result<Option<QueryIndex>, CliError> {
    let ignored = |why: &str| ignored_message(&path, log, why);
    let checked = match check(&trees, log) {
        Ok(checked) => checked,
        Err(problem) => {
            warn_user(err, &ignored(&problem))?;
            return Ok(None);
        }
    };
    let caught = match catch_up(log, &checked, &mut |pending| trees.write(pending)) {
        Ok(caught) => caught,
        Err(CliError::Index { problem, .. }) => {
            warn_user(err, &ignored(&problem))?;
            return Ok(None);
        }
        Err(other) => return Err(other),
    };
    if let Some(problem) = &caught.write_failure {
        warn_user(
            err,
            &format!(
                "the audit index {} cannot be updated ({problem}); using it with the {} newest \
                 events indexed in memory",
                path.display(),
                caught.pending.events
            ),
        )?;
    }
    Ok(Some(QueryIndex {
        trees,
        pending: caught.pending,
        path,
        torn_tail: caught.walked.torn_tail,
    }))
}

impl QueryIndex {
    /// Every entry of `subject`, written or still in memory, in log order
    /// without repeats.
    fn entries(&self, kind: u8, subject: &str) -> Result<Vec<Entry>, String> {
        let mut entries = self.trees.lookup(kind, subject)?;
        entries.extend(self.pending.entries(kind, subject)?);
        entries.sort_by_key(|entry| entry.seq);
        entries.dedup_by_key(|entry| entry.seq);
        Ok(entries)
    }

    /// Whether the index lists any event about `subject`, without reading
    /// the log: how `report` refuses an unknown key or withdrawal before
    /// its replay. `Err` says why the index cannot be trusted for it.
    pub(crate) fn mentions(&self, subject: &Subject) -> Result<bool, String> {
        let (kind, text) = match subject {
            Subject::Key(key) => (KIND_KEY, key.as_str()),
            Subject::Withdrawal(id) => (KIND_WITHDRAWAL, id.as_str()),
        };
        Ok(!self.entries(kind, text)?.is_empty())
    }

    /// Every event that touched `subject`, read back from the log and
    /// verified, each with the withdrawal it is about. `Err` says why the
    /// index cannot be trusted for this answer.
    pub(crate) fn events_of(
        &self,
        log: &LogDir,
        subject: &Subject,
    ) -> Result<Vec<Attributed>, String> {
        let (kind, text) = match subject {
            Subject::Key(key) => (KIND_KEY, key.as_str()),
            Subject::Withdrawal(id) => (KIND_WITHDRAWAL, id.as_str()),
        };
        let mut entries = self.entries(kind, text)?;
        let indexed_through = self.pending.last.map_or(0, |last| last.seq);
        // One more than a history lists, so it knows there were more.
        entries.truncate(HISTORY_EVENTS_MAX + 1);
        let mut events = Vec::with_capacity(entries.len());
        let mut about = About::new(subject);
        for entry in entries {
            if entry.seq > indexed_through {
                return Err(format!(
                    "it lists event {} beyond the last it indexed ({indexed_through})",
                    entry.seq
                ));
            }
            let event = log.event_at(entry.seq, entry.position).map_err(|error| {
                format!(
                    "the event it lists as {} does not verify: {error}",
                    entry.seq
                )
            })?;
            if !about.check(&event) {
                return Err(format!(
                    "it lists event {} under a subject that event is not about",
                    entry.seq
                ));
            }
            events.push(event);
        }
        match subject {
            // Listed under the withdrawal: each is about it.
            Subject::Withdrawal(id) => Ok(events
                .into_iter()
                .map(|event| Attributed {
                    event,
                    withdrawal: Some(id.clone()),
                })
                .collect()),
            Subject::Key(_) => self.attribute_key_events(events),
        }
    }

    /// The withdrawal each of a key's events is about: the one it names, or
    /// for an event of schema 1 about the key alone, the one indexing
    /// attributed it to (through the state before it): among the
    /// withdrawals the key's earlier events name, the one whose entries
    /// list it.
    fn attribute_key_events(&self, events: Vec<Event>) -> Result<Vec<Attributed>, String> {
        // Newest last: the withdrawal a key holds is most often the one it
        // last named.
        let mut named: Vec<WithdrawalId> = Vec::new();
        let mut listed: HashMap<WithdrawalId, Vec<Entry>> = HashMap::new();
        let mut attributed = Vec::with_capacity(events.len());
        for event in events {
            let withdrawal = if needs_state(&event) {
                self.indexed_under(event.seq, &named, &mut listed)?
            } else {
                event.kind.withdrawal().cloned()
            };
            if let Some(id) = event.kind.withdrawal() {
                named.retain(|earlier| earlier != id);
                named.push(id.clone());
            }
            attributed.push(Attributed { event, withdrawal });
        }
        Ok(attributed)
    }

    /// The withdrawal among `candidates` whose entries list event `seq`;
    /// `listed` keeps the entries read so far.
    fn indexed_under(
        &self,
        seq: u64,
        candidates: &[WithdrawalId],
        listed: &mut HashMap<WithdrawalId, Vec<Entry>>,
    ) -> Result<Option<WithdrawalId>, String> {
        for id in candidates.iter().rev() {
            let entries = match listed.entry(id.clone()) {
                hash_map::Entry::Occupied(found) => found.into_mut(),
                hash_map::Entry::Vacant(slot) => slot.insert(self.entries(KIND_WITHDRAWAL, id)?),
            };
            if entries
                .binary_search_by_key(&seq, |entry| entry.seq)
                .is_ok()
            {
                return Ok(Some(id.clone()));
            }
        }
        Ok(None)
    }

    /// The first event whose running-maximum time falls in a minute after
    /// `time`'s: it and every event after it are stamped later than `time`.
    /// Verified: that event is read back and must be stamped later.
    fn time_bound(&self, log: &LogDir, time: Timestamp) -> Result<Option<u64>, String> {
        let after = time.unix_nanos() / NANOS_PER_MINUTE + 1;
        let written = guarded(|| {
            for found in self.trees.times.range(ordered_u64(after / 60)..) {
                let (key, value) = found.map_err(sled_error)?;
                let hour = key
                    .as_ref()
                    .try_into()
                    .map(read_ordered_u64)
                    .map_err(|_| "an unreadable time key".to_owned())?;
                for (minute, entry) in decode_minutes(&value)? {
                    if hour * 60 + u64::from(minute) >= after {
                        return Ok(Some(entry));
                    }
                }
            }
            Ok(None)
        })?;
        let in_memory = self.pending.times.range(after..).next().map(|(_, e)| *e);
        let entry = match (written, in_memory) {
            (Some(a), Some(b)) => Some(if a.seq <= b.seq { a } else { b }),
            (a, b) => a.or(b),
        };
        let Some(entry) = entry else {
            return Ok(None);
        };
        let event = log.event_at(entry.seq, entry.position).map_err(|error| {
            format!(
                "its time entry for event {} does not verify: {error}",
                entry.seq
            )
        })?;
        if event.at <= time {
            return Err(format!(
                "it places event {} after {time}, but that event is stamped {}",
                entry.seq, event.at
            ));
        }
        Ok(Some(entry.seq))
    }

    /// Where the index is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// For `state --at TIME`: the sequence number the replay need not reach,
/// from the index if there is a usable one. A bound that does not verify is
/// ignored with a warning.
pub(crate) fn time_bound(
    log: &LogDir,
    time: Timestamp,
    err: &mut dyn Write,
) -> Result<Option<u64>, CliError> {
    let Some(index) = open_for_query(log, err)? else {
        return Ok(None);
    };
    match index.time_bound(log, time) {
        Ok(bound) => Ok(bound),
        Err(problem) => {
            warn_user(
                err,
                &format!(
                    "the audit index {} is not used to place the time: {problem}",
                    index.path().display()
                ),
            )?;
            Ok(None)
        }
    }
}

/// `payonce index DIR [--rebuild]`: builds the index, or brings it up to
/// date; an index that does not match the log is rebuilt.
pub(crate) fn index_command(
    args: &IndexArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let log = open_log(&args.dir, env.progress)?;
    if log.is_postgres() {
        return Err(CliError::Usage {
            message: "a PostgreSQL ledger needs no audit index: its history is one query away"
                .to_owned(),
        });
    }
    let path = log.dir.join(INDEX_DIR);
    let existed = path.exists();
    let mut building = Building::open(&path, existed)?;
    let (checked, rebuilt) = match &building.trees {
        Some(trees) => check_or_clear(trees, &log, &path, args.rebuild, err)?,
        None => (Checked::from_start(), args.rebuild),
    };
    let caught = match catch_up(&log, &checked, &mut |pending| building.write(pending)) {
        Ok(caught) => caught,
        Err(error) => {
            building.abandon();
            return Err(error);
        }
    };
    // A log with nothing to index still gets its (empty) index.
    let written = match (&caught.write_failure, building.trees.is_some()) {
        (Some(problem), _) => Err(problem.clone()),
        (None, false) => building.write(&caught.pending),
        (None, true) => Ok(()),
    };
    if let Err(problem) = written {
        return Err(index_error(&path, format!("cannot be written: {problem}")));
    }
    // sled recovers what was just written from its own log the first time
    // it opens it again, which is slow after a large build; pay that here
    // rather than in the first `history`.
    drop(building);
    if caught.new_events > 0 {
        drop(Trees::open(&path));
    }
    let through = caught.pending.last.map_or(0, |last| last.seq);
    writeln!(
        out,
        "audit index {}: {} through seq {through} ({} events indexed by this run)",
        EchoPath(&path),
        if rebuilt || !existed || checked.meta.last.is_none() {
            "built"
        } else {
            "up to date"
        },
        caught.new_events
    )
    .map_err(CliError::output)?;
    let torn = warn_torn_tail(&log, caught.walked.torn_tail.as_ref(), err)?;
    Ok(Status::problem_if(torn))
}

/// The error `payonce index` ends with when the index at `path` cannot be
/// built or written.
fn index_error(path: &Path, problem: String) -> CliError {
    CliError::Index {
        path: path.to_owned(),
        problem,
    }
}

/// The index `payonce index` builds: the one that existed, opened at once,
/// or a new one, created only when there is something to write. A build
/// that fails on the log first (damage, or a directory whose segment file
/// is not a payonce log's) so writes nothing beside it, and one that fails
/// after creating it removes it again.
struct Building {
    path: PathBuf,
    trees: Option<Trees>,
    created: bool,
}

impl Building {
    fn open(path: &Path, existed: bool) -> Result<Building, CliError> {
        let trees = if existed {
            Some(open_to_build(path, existed)?)
        } else {
            None
        };
        Ok(Building {
            path: path.to_owned(),
            trees,
            created: false,
        })
    }

    /// Writes `pending`, creating the index first if it is new.
    fn write(&mut self, pending: &Pending) -> Result<(), String> {
        if self.trees.is_none() {
            self.trees = Some(Trees::open(&self.path)?);
            self.created = true;
        }
        match &self.trees {
            Some(trees) => trees.write(pending),
            None => unreachable!("the index was opened above"),
        }
    }

    /// Removes the index this build created, after the build failed.
    fn abandon(self) {
        if self.created {
            drop(self.trees);
            if let Err(error) = std::fs::remove_dir_all(&self.path) {
                warn!(%error, path = %self.path.display(), "could not remove the abandoned audit index");
            }
        }
    }
}

/// Opens (or creates) the index at `path` for building. A directory there
/// that holds something other than a sled database is refused rather than
/// written into: it is not ours to change.
fn open_to_build(path: &Path, existed: bool) -> Result<Trees, CliError> {
    let empty = path
        .read_dir()
        .is_ok_and(|mut entries| entries.next().is_none());
    if existed && !empty && !looks_like_index(path) {
        return Err(index_error(
            path,
            "the directory exists and does not look like a sled database; move it away and run \
             again"
                .to_owned(),
        ));
    }
    Trees::open(path).map_err(|problem| {
        index_error(
            path,
            format!(
                "cannot be opened ({problem}). It is derived data: delete the directory and run \
                 `payonce index` again"
            ),
        )
    })
}

/// Where building an existing index starts: after the last event indexed,
/// if no rebuild was asked for and it matches the log. An
/// index to rebuild (asked for, or not matching the log, which is said on
/// `err`) is cleared first. Returns the marks to start from and whether
/// the index was rebuilt.
fn check_or_clear(
    trees: &Trees,
    log: &LogDir,
    path: &Path,
    rebuild: bool,
    err: &mut dyn Write,
) -> Result<(Checked, bool), CliError> {
    let (checked, rebuilt) = if rebuild {
        (Checked::from_start(), true)
    } else {
        match check(trees, log) {
            Ok(found) => (found, false),
            Err(problem) => {
                warn_user(
                    err,
                    &format!("the audit index {} is rebuilt: {problem}", path.display()),
                )?;
                (Checked::from_start(), true)
            }
        }
    };
    if rebuilt {
        trees
            .clear()
            .map_err(|problem| index_error(path, problem))?;
    }
    Ok((checked, rebuilt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> Entry {
        Entry {
            seq,
            position: Position {
                segment: 1,
                offset: 40 + seq * 8,
                chain: seq as u32,
            },
        }
    }

    // Guards against a bucket that changes between builds (an index built
    // by one build would then be misread by the next).
    #[test]
    fn buckets_are_stable() {
        assert_eq!(bucket(""), (0xcbf2_9ce4_8422_2325u64 % 4096) as u16);
        assert_eq!(bucket("w-1"), bucket("w-1"));
        assert!(bucket("w-1") < BUCKETS);
    }

    // Guards against chunks that lose or garble entries on the way to disk.
    #[test]
    fn chunks_round_trip_and_refuse_garbage() {
        let mut bytes = Vec::new();
        encode_group("w-1", &[entry(3), entry(7)], &mut bytes);
        encode_group("req-1", &[entry(4)], &mut bytes);
        let groups = decode_chunk(&bytes).unwrap();
        assert_eq!(
            groups,
            vec![
                ("w-1".to_owned(), vec![entry(3), entry(7)]),
                ("req-1".to_owned(), vec![entry(4)])
            ]
        );
        assert!(decode_chunk(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_chunk(&[0xff, 0xff, 0]).is_err());
        assert!(decode_chunk(&vec![0; CHUNK_BYTES_MAX + 1]).is_err());
    }

    // Guards against time entries that point anywhere but a minute.
    #[test]
    fn minutes_round_trip_and_refuse_garbage() {
        let minutes = vec![(0, entry(1)), (59, entry(9))];
        assert_eq!(decode_minutes(&encode_minutes(&minutes)).unwrap(), minutes);
        let mut bad = encode_minutes(&minutes);
        bad[0] = 60;
        assert!(decode_minutes(&bad).is_err());
        assert!(decode_minutes(&[1, 2, 3]).is_err());
    }

    // Guards against losing the tail's events when the index cannot be
    // written (a full disk): they are used from memory for this answer.
    #[test]
    fn a_tail_that_cannot_be_written_is_used_from_memory() {
        use payonce::{Ledger, NewWithdrawal, SendFailure};
        use payonce_model::WithdrawalRequest;

        let dir = tempfile::tempdir().unwrap();
        drop(Ledger::init(dir.path()).unwrap());
        let submit = |key: &str| {
            let ledger = Ledger::open(dir.path()).unwrap();
            let request = ledger
                .create(NewWithdrawal {
                    amount: "5".parse().unwrap(),
                    currency: "USDC".parse().unwrap(),
                    destination: "0xabc".parse().unwrap(),
                    requested_by: "alice".parse().unwrap(),
                })
                .unwrap();
            let send = |r: &WithdrawalRequest| -> Result<WithdrawalRequest, SendFailure> {
                Ok(r.sent("0x1")?)
            };
            ledger.submit(key, request, send).unwrap();
        };
        submit("req-1");
        let args = IndexArgs {
            dir: dir.path().to_owned(),
            rebuild: false,
        };
        let env = Env::quiet(Timestamp::default());
        index_command(&args, &env, &mut Vec::new(), &mut Vec::new()).unwrap();
        submit("req-late");
        let log = open_log(dir.path(), false).unwrap();
        let path = dir.path().join(INDEX_DIR);
        let mut trees = Trees::open(&path).unwrap();
        let indexed_before = trees.read_meta().unwrap().last.unwrap().seq;
        trees.refuse_writes = true;
        let mut err = Vec::new();
        let index = use_for_query(&log, trees, path.clone(), &mut err)
            .unwrap()
            .unwrap();
        let warning = String::from_utf8(err).unwrap();
        assert!(
            warning.contains("cannot be updated (writes refused by the test)"),
            "{warning}"
        );
        assert!(
            warning.contains("the 4 newest events indexed in memory"),
            "{warning}"
        );
        let key = Subject::Key("req-late".parse().unwrap());
        let events = index.events_of(&log, &key).unwrap();
        let names: Vec<&str> = events.iter().map(|e| e.event.kind.name()).collect();
        assert_eq!(names, ["claimed", "completed"]);
        drop(index);
        let trees = Trees::open(&path).unwrap();
        assert_eq!(trees.read_meta().unwrap().last.unwrap().seq, indexed_before);
    }
}
