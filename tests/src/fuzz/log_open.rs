//! `log_open`: a log directory built from arbitrary bytes, opened for
//! reading and for writing.
//!
//! The input first describes a valid log (small limits, so records roll
//! across several segments), which this module writes with its own encoder
//! of docs/log-format.md (`encode`, written from the document, not by the
//! log's writer): format version 1 (a version the log still reads, and
//! upgrades when it opens one for writing), or version 2, with the records
//! grouped into batches the input cuts (each behind its batch header, its
//! chain digest computed with `sha2`), split at a roll as a flush splits
//! them, and a checkpoint file whose two slots hold heads the input picks
//! (or none). Bit 7 of the input's second byte picks version 2, so inputs
//! written before version 2 existed still build the logs they did. It then
//! damages the log: bit flips, truncations, removed or copied files,
//! files grown past the segment limit, raw bytes written over a file or
//! appended, raw files under segment and other names, and (version 2) a
//! checkpoint slot rewritten whole with another head, generation or log
//! id. How much is known about the result depends on the damage, and the
//! checks say so (see [`log_open`]); every record returned is checked
//! against this module's own reading of the format (`verify`).

mod encode;
mod verify;

use std::convert::Infallible;
use std::io;
use std::sync::Arc;

use payonce_log::{
    BATCH_HEADER_LEN, CHECKPOINT_FILE, CHECKPOINT_LEN, Durability, Log, LogConfig, LogError,
    LogReader, MemStorage, OwnedRecord, SEAL_LEN, SEGMENT_HEADER_LEN, Storage, StorageFile,
    StorageLock, StorageRead,
};

use self::encode::{
    Built, add_checkpoint, build_v1, build_v2, checkpoint_slot, frame_len, header, put_slot,
    segment_name, u64_at,
};
use self::verify::assert_records_verify;
use crate::rng::Rng;

/// Record limits the input chooses from: small, so segments hold few.
const RECORD_MAXES: [u32; 3] = [16, 64, 256];
/// Room beyond the smallest valid segment the input chooses from.
const SEGMENT_SLACK: [u64; 4] = [0, 64, 256, 1024];
/// Zeros after the records of every segment, as a writer leaves them ahead
/// of records it has not written yet, the input chooses from.
const ZERO_TAILS: [u64; 4] = [0, 0, 24, 1024];
/// Zeros the writer of `check_writer` writes ahead, the input chooses from.
const PREALLOCATE_LENS: [u64; 3] = [0, 64, 1 << 20];
/// Most records the input writes.
const RECORDS_MAX: usize = 24;
/// Most records of one batch (format 2) the input asks for.
const BATCH_RECORDS_MAX: usize = 5;
/// Most damage the input does.
const MUTATIONS_MAX: usize = 6;
/// Most bit flips that a crc32 over these frame sizes always detects
/// (Hamming distance 4 or more below 91,607 bits).
const FLIPS_DETECTED_MAX: usize = 3;
/// The log id byte's bit that picks format version 2.
const FORMAT_2_BIT: u8 = 0x80;

/// Reads one byte per choice; zeros once the input runs out.
struct Input<'a> {
    bytes: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((first, rest)) => {
                self.bytes = rest;
                *first
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn take(&mut self, len: usize) -> Vec<u8> {
        let (taken, rest) = self.bytes.split_at(len.min(self.bytes.len()));
        self.bytes = rest;
        let mut bytes = taken.to_vec();
        bytes.resize(len, 0);
        bytes
    }
}

/// A storage that refuses to read more at once than a segment may hold:
/// the log must check its limits before asking.
#[derive(Debug)]
struct Limited {
    inner: MemStorage,
    len_max: u64,
}

impl Limited {
    fn check(&self, len: u64, what: &str) {
        assert!(
            len <= self.len_max,
            "the log asked to {what} {len} bytes; a segment holds at most {}",
            self.len_max
        );
    }
}

impl Storage for Limited {
    fn describe(&self, name: &str) -> String {
        self.inner.describe(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn read(&self, name: &str, len_max: u64) -> io::Result<Vec<u8>> {
        self.check(len_max, "read");
        self.inner.read(name, len_max)
    }
    fn read_range(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        if name == CHECKPOINT_FILE {
            // A file of its own fixed size, whatever the segments' limit.
            assert_eq!(len, CHECKPOINT_LEN, "the log reads its checkpoint whole");
        } else {
            self.check(len as u64, "read a range of");
        }
        self.inner.read_range(name, offset, len)
    }
    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        self.inner.create_new(name)
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        self.inner.open_append(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
        self.inner.try_lock()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>> {
        self.inner.open_read(name)
    }
}

/// A full read-only scan: the records, and how it ended.
type Scan = (Vec<OwnedRecord>, Result<String, String>);

fn scan(storage: &Arc<Limited>, config: &LogConfig) -> Option<Scan> {
    let reader = match LogReader::open(storage.clone(), config.clone()) {
        Ok(reader) => reader,
        Err(LogError::NotALog { .. }) => return None,
        Err(error) => return Some((Vec::new(), Err(error.to_string()))),
    };
    let mut records = Vec::new();
    let result = reader.scan(|record| {
        records.push(record.to_owned_record());
        Ok::<(), Infallible>(())
    });
    let end = match result {
        Ok(recovery) => Ok(format!("{recovery:?}")),
        Err(error) => Err(error.to_string()),
    };
    Some((records, end))
}

/// What is known about the damage done.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Damage {
    /// None: the log is exactly as built.
    None,
    /// Only the newest segment was cut short, at this length.
    CutNewest(usize),
    /// One bit flipped, in this file at this offset.
    OneFlip(usize, String),
    /// Bit flips (few enough to be detected), truncations, removed or
    /// copied files, files grown, checkpoint slots rewritten whole: nothing
    /// that can forge a record.
    Detectable,
    /// Raw bytes from the input: records may be forged.
    Raw,
}

fn payloads(records: &[OwnedRecord]) -> Vec<Vec<u8>> {
    records.iter().map(|r| r.payload.clone()).collect()
}

/// The limits the input's first byte picks, and the zeros after every
/// segment.
fn config(choice: u8) -> (LogConfig, u64) {
    let record_max = RECORD_MAXES[usize::from(choice) % RECORD_MAXES.len()];
    let slack = SEGMENT_SLACK[usize::from(choice / 4) % SEGMENT_SLACK.len()];
    let config = LogConfig {
        record_max,
        // Room for a batch header in front of a record of the largest size
        // (format 2, and the writer of `check_writer`).
        segment_len_max: (SEGMENT_HEADER_LEN
            + BATCH_HEADER_LEN
            + frame_len(record_max as usize)
            + SEAL_LEN) as u64
            + slack,
        durability: Durability::Always,
        preallocate_len: PREALLOCATE_LENS[usize::from(choice / 64) % PREALLOCATE_LENS.len()],
        checkpoint_records: 0,
        checkpoint_interval: None,
    };
    let zero_tail = ZERO_TAILS[usize::from(choice / 16) % ZERO_TAILS.len()];
    assert!(config.validate().is_ok(), "the harness makes valid configs");
    (config, zero_tail)
}

/// The valid log the input describes after its first byte: the log id
/// byte (bit 7: format 2), the record count, each record's length and
/// payload; in format 2 then the batch sizes and the checkpoint.
fn build(input: &mut Input<'_>, config: &LogConfig, zero_tail: u64) -> Built {
    let id_byte = input.byte();
    let log_id = 0x5eed_0000 + u64::from(id_byte & !FORMAT_2_BIT);
    let count = usize::from(input.byte()) % (RECORDS_MAX + 1);
    let record_max = config.record_max as usize;
    let written: Vec<Vec<u8>> = (0..count)
        .map(|_| {
            let len = usize::from(input.byte()) % (record_max + 1);
            input.take(len)
        })
        .collect();
    if id_byte & FORMAT_2_BIT == 0 {
        return build_v1(log_id, config, written, zero_tail);
    }
    let mut sizes = Vec::new();
    let mut left = count;
    while left > 0 {
        let size = (1 + usize::from(input.byte()) % BATCH_RECORDS_MAX).min(left);
        sizes.push(size);
        left -= size;
    }
    let mut built = build_v2(log_id, config, written, &sizes, zero_tail);
    // A byte of 0xf0 or more: no checkpoint file. Otherwise bit 0 says which
    // slot is newer; the next two bytes count back from the newest head to
    // the newer slot's, then from there to the older's, as a writer moves
    // the checkpoint forward; then the older slot's generation.
    let flags = input.byte();
    if flags < 0xf0 {
        let last = built.heads.len() - 1;
        let newer_head = last - usize::from(input.byte()) % built.heads.len();
        let older_head = newer_head - usize::from(input.byte()) % (newer_head + 1);
        let newer = u32::from(flags & 1);
        let mut heads = [older_head; 2];
        heads[newer as usize] = newer_head;
        add_checkpoint(&mut built, heads, newer, u64::from(input.byte()));
    }
    built
}

/// Builds a log from the input, damages it as the input says, then checks:
/// - reading never panics, never asks storage for more than a segment, and
///   every record it returns verifies by this module's own reading of the
///   format (`verify`): in sequence from 1, chained, in whole batches
///   that hash to their digests, reaching the checkpoint's head when the
///   scan ends cleanly;
/// - reading twice gives the same; reading from any record gives the rest;
///   `read_at` gives each record again;
/// - the records against what was written, per kind of damage
///   (`check_against_built`);
/// - opening for writing visits the records reading returns, and succeeds
///   exactly when reading does (but for a batch whose records do not hash
///   to its digest, which only a read recomputes); afterwards a record
///   appended and synced follows them.
///
/// # Panics
/// When a property does not hold: that is the finding.
pub fn log_open(data: &[u8]) {
    let mut input = Input { bytes: data };
    let (config, zero_tail) = config(input.byte());
    let built = build(&mut input, &config, zero_tail);
    let mem = MemStorage::new();
    for (name, bytes) in &built.files {
        mem.put_file(name, bytes);
    }
    let mut damage = Damage::None;
    let mut flips = 0;
    let mutations = usize::from(input.byte()) % (MUTATIONS_MAX + 1);
    for _ in 0..mutations {
        damage = mutate(
            &mem,
            &mut input,
            &config,
            &built,
            damage.clone(),
            &mut flips,
        );
    }
    if flips > FLIPS_DETECTED_MAX && damage != Damage::Raw {
        damage = Damage::Raw;
    }

    let storage = Arc::new(Limited {
        inner: mem.clone(),
        len_max: config.segment_len_max,
    });
    let first = scan(&storage, &config);
    let second = scan(&storage, &config);
    assert_eq!(first, second, "reading twice gave different results");
    if let Some((records, end)) = &first {
        assert_records_verify(&mem, records, end.is_ok());
        check_reads(&storage, &config, records, end.is_ok());
        check_against_built(&built, &damage, records, end);
    }
    check_writer(&storage, &config, first.as_ref());
}

fn mutate(
    mem: &MemStorage,
    input: &mut Input<'_>,
    config: &LogConfig,
    built: &Built,
    damage: Damage,
    flips: &mut usize,
) -> Damage {
    let names: Vec<String> = mem.list().unwrap_or_default();
    // Format 1 keeps the eight kinds it had, so older inputs mean the same.
    let kind = input.byte() % if built.version == 1 { 8 } else { 9 };
    let file_choice = usize::from(input.byte());
    let name = (!names.is_empty()).then(|| names[file_choice % names.len()].clone());
    let detectable = |damage: Damage| match damage {
        Damage::Raw => Damage::Raw,
        _ => Damage::Detectable,
    };
    match (kind, name) {
        (0, Some(name)) => flip(mem, input, name, damage, flips),
        (1, Some(name)) => {
            let bytes = mem.file(&name).unwrap_or_default();
            let cut = usize::from(input.u16()) % (bytes.len() + 1);
            mem.put_file(&name, &bytes[..cut]);
            match damage {
                Damage::None if name == built.last_segment => Damage::CutNewest(cut),
                Damage::CutNewest(earlier) if name == built.last_segment => {
                    Damage::CutNewest(earlier.min(cut))
                }
                other => detectable(other),
            }
        }
        (2, Some(name)) => {
            let _ = mem.remove(&name);
            let _ = mem.sync_dir();
            detectable(damage)
        }
        (3, Some(name)) => {
            let bytes = mem.file(&name).unwrap_or_default();
            let target = segment_name(u64::from(input.byte() % 32));
            mem.put_file(&target, &bytes);
            detectable(damage)
        }
        (4, Some(name)) => {
            raw_bytes(mem, input, &name, false);
            Damage::Raw
        }
        (5, Some(name)) => {
            let mut bytes = mem.file(&name).unwrap_or_default();
            bytes.resize(
                usize::try_from(config.segment_len_max).unwrap_or(usize::MAX) + 1,
                0,
            );
            mem.put_file(&name, &bytes);
            detectable(damage)
        }
        (6, Some(name)) => {
            raw_bytes(mem, input, &name, true);
            Damage::Raw
        }
        (8, _) => {
            rewrite_slot(mem, input, built);
            detectable(damage)
        }
        _ => {
            raw_file(mem, input, built);
            Damage::Raw
        }
    }
}

/// Raw bytes from the input written over file `name` at an offset it
/// picks, or appended to it.
fn raw_bytes(mem: &MemStorage, input: &mut Input<'_>, name: &str, append: bool) {
    let mut bytes = mem.file(name).unwrap_or_default();
    if append {
        let len = usize::from(input.byte() % 64);
        bytes.extend(input.take(len));
    } else {
        let offset = usize::from(input.u16()) % (bytes.len() + 1);
        let len = usize::from(input.byte() % 64);
        let raw = input.take(len);
        let end = (offset + len).min(bytes.len());
        bytes.splice(offset..end, raw);
    }
    mem.put_file(name, &bytes);
}

/// Flips one bit of file `name`.
fn flip(
    mem: &MemStorage,
    input: &mut Input<'_>,
    name: String,
    damage: Damage,
    flips: &mut usize,
) -> Damage {
    let mut bytes = mem.file(&name).unwrap_or_default();
    if bytes.is_empty() {
        return damage;
    }
    let offset = usize::from(input.u16()) % bytes.len();
    bytes[offset] ^= 1 << (input.byte() % 8);
    mem.put_file(&name, &bytes);
    *flips += 1;
    match damage {
        Damage::None => Damage::OneFlip(offset, name),
        Damage::Raw => Damage::Raw,
        _ => Damage::Detectable,
    }
}

/// Rewrites one checkpoint slot whole (its crc recomputed): a head of the
/// log, or one past it, or one with another digest; a generation the input
/// picks (up to the largest); the log's id or another. It cannot forge a
/// record.
fn rewrite_slot(mem: &MemStorage, input: &mut Input<'_>, built: &Built) {
    let mut file = mem.file(CHECKPOINT_FILE).unwrap_or_default();
    let index = u32::from(input.byte() % 2);
    let (seq, mut digest) = built.heads[usize::from(input.byte()) % built.heads.len()];
    let how = input.byte();
    let seq = if how % 4 == 1 { seq + 1 } else { seq };
    if how % 4 == 2 {
        digest[usize::from(how / 4) % 32] ^= 1;
    }
    let log_id = built.log_id ^ u64::from(how % 4 == 3);
    // Now and then a generation at the very end of the range.
    let generation = match input.byte() {
        high @ 0xf0.. => u64::MAX - u64::from(high & 0x0f),
        low => u64::from(low),
    };
    put_slot(
        &mut file,
        index,
        &checkpoint_slot(log_id, index, generation, (seq, digest)),
    );
    mem.put_file(CHECKPOINT_FILE, &file);
}

/// A file of raw bytes, maybe behind a valid header of the log's format so
/// that the fuzzer gets past it, under a segment or another name.
fn raw_file(mem: &MemStorage, input: &mut Input<'_>, built: &Built) {
    let seq = u64::from(input.byte() % 32);
    let name = match input.byte() % 6 {
        0..=2 => segment_name(seq),
        3 => format!("{}.tmp", segment_name(seq)),
        4 => format!("{}.torn-40", segment_name(seq)),
        _ => "notes.txt".to_owned(),
    };
    let mut bytes = Vec::new();
    if input.byte().is_multiple_of(2) {
        let chain = u32::from_le_bytes([input.byte(), input.byte(), input.byte(), input.byte()]);
        let first = mem.file(&segment_name(1)).unwrap_or_default();
        let log_id = if first.len() >= 24 {
            u64_at(&first, 16)
        } else {
            0
        };
        let zeros_ahead = input.byte().is_multiple_of(2);
        bytes = header(built.version, log_id, seq, chain, zeros_ahead);
    }
    let len = usize::from(input.u16()) % 512;
    bytes.extend(input.take(len));
    mem.put_file(&name, &bytes);
}

/// Reading from any record gives the rest, and `read_at` gives each again.
fn check_reads(
    storage: &Arc<Limited>,
    config: &LogConfig,
    records: &[OwnedRecord],
    complete: bool,
) {
    let Ok(reader) = LogReader::open(storage.clone(), config.clone()) else {
        panic!("a log that scanned does not open");
    };
    for record in records {
        let payload = reader
            .read_at(record.seq, record.position)
            .unwrap_or_else(|error| panic!("read_at({}) after a scan: {error}", record.seq));
        assert_eq!(
            payload, record.payload,
            "read_at({}) differs from the scan",
            record.seq
        );
    }
    if !complete {
        return;
    }
    let last = records.len() as u64;
    for from in [1, last / 2 + 1, last, last + 1] {
        let rest: Result<Vec<OwnedRecord>, LogError> = reader
            .records_from(from)
            .and_then(|records| records.collect());
        let rest =
            rest.unwrap_or_else(|error| panic!("records_from({from}) after a clean scan: {error}"));
        let skip = usize::try_from(from.saturating_sub(1))
            .unwrap_or(usize::MAX)
            .min(records.len());
        assert_eq!(
            rest,
            records[skip..],
            "records_from({from}) differs from the scan"
        );
    }
}

/// Exactly the first `kept` records and a clean end, or a refusal if a log
/// ending there is owed one: it ends before its checkpoint's head (format 2
/// without a checkpoint file: it holds a batch), the point of the
/// checkpoint.
fn expect_exactly(
    built: &Built,
    kept: usize,
    got: &[Vec<u8>],
    end: &Result<String, String>,
    what: &str,
) {
    if built.must_refuse(kept) {
        assert!(
            end.is_err(),
            "{what} ends after {kept} records, before its checkpoint's head ({:?}), \
             and reads {} records: {end:?}",
            built.checkpoint,
            got.len()
        );
    } else {
        assert!(end.is_ok(), "{what} does not read: {end:?}");
        assert_eq!(got, &built.payloads[..kept], "{what}");
    }
}

/// One bit flipped in a log of format 1: every record or a refusal, or, in
/// the very last record, that record cut as torn.
fn check_flip_v1(
    built: &Built,
    offset: usize,
    name: &str,
    got: &[Vec<u8>],
    end: &Result<String, String>,
) {
    let all = &built.payloads;
    let in_last_record = built
        .units
        .last()
        .is_some_and(|unit| unit.segment == name && unit.start <= offset && offset < unit.end);
    let cut_as_torn = in_last_record && got.len() + 1 == all.len() && end.is_ok();
    assert!(
        end.is_err() || got == all || cut_as_torn,
        "one flipped bit at byte {offset} of {name} lost records silently: \
         {} of {} returned ({end:?})",
        got.len(),
        all.len()
    );
}

/// One bit flipped in a log of format 2. In the checkpoint file: every
/// record (the other slot, or the same head, still holds). In the zeros
/// after the newest segment's records: every record. Inside the last batch:
/// that batch cut as torn, or refused if that ends before the checkpoint's
/// head (or, in its header, refused: a payload after it may hold what looks
/// like a later batch header). Anywhere else: refused, for a later batch
/// header or segment follows the damage.
fn check_flip_v2(
    built: &Built,
    offset: usize,
    name: &str,
    got: &[Vec<u8>],
    end: &Result<String, String>,
) {
    let all = built.payloads.len();
    let what = format!("a log with one bit flipped at byte {offset} of {name}");
    let last = built.units.last();
    let tail_start = last.map_or(SEGMENT_HEADER_LEN, |unit| unit.end);
    if name == CHECKPOINT_FILE || name == built.last_segment && offset >= tail_start {
        return expect_exactly(built, all, got, end, &what);
    }
    match last {
        Some(unit) if unit.segment == name && unit.start <= offset => {
            if offset < unit.header_end && end.is_err() {
                return;
            }
            expect_exactly(built, all - unit.count, got, end, &what);
        }
        _ => assert!(
            end.is_err(),
            "{what}, before the last batch, is not refused: {} of {all} records",
            got.len()
        ),
    }
}

/// The records against what was written, by the kind of damage:
/// - none: every record;
/// - the newest segment cut: exactly the records of the whole frames
///   (format 1) or batches (format 2) before the cut, the torn last one cut;
/// - one bit flipped: [`check_flip_v1`], [`check_flip_v2`];
/// - damage that cannot forge a record: a prefix of the records;
///
/// and, where [`expect_exactly`] says so, a refusal instead when the log
/// ends before its checkpoint's head.
fn check_against_built(
    built: &Built,
    damage: &Damage,
    records: &[OwnedRecord],
    end: &Result<String, String>,
) {
    let got = payloads(records);
    let all = &built.payloads;
    if *damage != Damage::Raw {
        assert!(
            got.len() <= all.len() && got == all[..got.len()],
            "damage that cannot forge a record returned records that were not written \
             ({damage:?})"
        );
    }
    match damage {
        Damage::None => expect_exactly(built, all.len(), &got, end, "an undamaged log"),
        &Damage::CutNewest(cut) => {
            let what = format!("a log cut at byte {cut} of its newest segment");
            expect_exactly(built, built.kept_before(cut), &got, end, &what);
        }
        Damage::OneFlip(offset, name) if built.version == 1 => {
            check_flip_v1(built, *offset, name, &got, end);
        }
        Damage::OneFlip(offset, name) => check_flip_v2(built, *offset, name, &got, end),
        Damage::Detectable | Damage::Raw => {}
    }
}

/// Opening for writing agrees with reading (but for a batch that does not
/// hash to its digest, which only a read recomputes); a record appended
/// afterwards follows the others.
fn check_writer(storage: &Arc<Limited>, config: &LogConfig, read: Option<&Scan>) {
    let mut visited = Vec::new();
    let opened = Log::open_visiting(storage.clone(), config.clone(), |record| {
        visited.push(record.to_owned_record());
        Ok::<(), Infallible>(())
    });
    let log = match (opened, read) {
        (Ok((log, recovery)), Some((records, Ok(_)))) => {
            assert_eq!(
                &visited, records,
                "the writer visits other records than the reader read"
            );
            assert_eq!(
                recovery.last_seq,
                records.len() as u64,
                "the writer's last seq"
            );
            log
        }
        (Ok((log, recovery)), None) => {
            assert_eq!(recovery.records, 0, "a new log has records");
            log
        }
        (Err(error), Some((_, Err(_)))) => {
            let _ = error;
            return;
        }
        (Ok(_), Some((_, Err(refused))))
            if refused.contains(&payonce_log::Damage::Digest.to_string()) =>
        {
            // By design: opening for writing follows the digests the batch
            // headers hold without hashing the records again, and only a
            // read from the first record recomputes them. Only raw bytes
            // with every crc recomputed get here.
            return;
        }
        (Ok(_), Some((_, Err(refused)))) => {
            panic!("the writer opens a log the reader refuses: {refused}")
        }
        (Err(error), _) => panic!("the writer refuses a log the reader reads: {error}"),
    };
    let appended = log.append_durable(b"after reopening");
    let seq = appended.unwrap_or_else(|error| panic!("appending after a repair: {error}"));
    drop(log);
    let Some((records, end)) = scan(storage, config) else {
        panic!("the log is gone after writing to it");
    };
    assert!(
        end.is_ok(),
        "the log does not read after a repair and an append: {end:?}"
    );
    assert_eq!(records.len() as u64, seq, "records after appending");
    let mut expected = read
        .map(|(records, _)| payloads(records))
        .unwrap_or_default();
    expected.push(b"after reopening".to_vec());
    assert_eq!(
        payloads(&records),
        expected,
        "the records after a repair and an append"
    );
}

/// An input of the layout [`log_open`] reads, from `rng`: a log of either
/// format, mostly with a checkpoint, then no damage, one or a few. Random
/// bytes would seldom describe a valid log; these always do, and the
/// damage bytes are random.
pub fn random_input(rng: &mut Rng) -> Vec<u8> {
    let mut byte = || u8::try_from(rng.below(256)).unwrap_or(0);
    let choice = byte();
    let record_max = RECORD_MAXES[usize::from(choice) % RECORD_MAXES.len()] as usize;
    let id = byte();
    let count = byte();
    let mut bytes = vec![choice, id, count];
    let count = usize::from(count) % (RECORDS_MAX + 1);
    for _ in 0..count {
        let len = byte();
        bytes.push(len);
        bytes.extend((0..usize::from(len) % (record_max + 1)).map(|_| byte()));
    }
    if id & FORMAT_2_BIT != 0 {
        let mut left = count;
        while left > 0 {
            let size = byte();
            bytes.push(size);
            left -= (1 + usize::from(size) % BATCH_RECORDS_MAX).min(left);
        }
        bytes.extend((0..4).map(|_| byte()));
    }
    let mutations = [0, 1, 1, 1, 2, 3][usize::from(byte()) % 6];
    bytes.push(mutations);
    bytes.extend((0..64).map(|_| byte()));
    bytes
}
