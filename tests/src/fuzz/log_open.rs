//! `log_open`: a log directory built from arbitrary bytes, opened for
//! reading and for writing.
//!
//! The input first describes a valid log (small limits, so records roll
//! across several segments), which this module writes with its own encoder
//! of format version 1 of docs/log-format.md (a version the log still reads,
//! and upgrades when it opens one for writing), then damages it: bit flips, truncations, removed
//! or copied segments, segments grown past the limit, raw bytes written
//! over a file or appended, raw files under segment and other names. How
//! much is known about the result depends on the damage, and the checks
//! say so (see [`log_open`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;

use payonce_log::{
    BATCH_HEADER_LEN, CHECKPOINT_FILE, CHECKPOINT_LEN, Durability, FRAME_HEADER_LEN, Log,
    LogConfig, LogError, LogReader, MemStorage, OwnedRecord, SEAL_LEN, SEGMENT_HEADER_LEN, Storage,
    StorageFile, StorageLock,
};

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
/// Most damage the input does.
const MUTATIONS_MAX: usize = 6;
/// Most bit flips that a crc32 over these frame sizes always detects
/// (Hamming distance 4 or more below 91,607 bits).
const FLIPS_DETECTED_MAX: usize = 3;

fn frame_len(len: usize) -> usize {
    FRAME_HEADER_LEN + len.div_ceil(8) * 8
}

fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

fn chained(chain: u32, bytes: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(chain);
    hasher.update(bytes);
    hasher.finalize()
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut field = [0; 4];
    field.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(field)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

/// A segment header, as docs/log-format.md lays it out; `zeros_ahead` sets
/// flag bit 0.
fn header(log_id: u64, first_seq: u64, chain: u32, zeros_ahead: bool) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SEGMENT_HEADER_LEN);
    bytes.extend_from_slice(b"PAYONCE\0");
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&u32::from(zeros_ahead).to_le_bytes());
    bytes.extend_from_slice(&log_id.to_le_bytes());
    bytes.extend_from_slice(&first_seq.to_le_bytes());
    bytes.extend_from_slice(&chain.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Appends a record frame chained from `chain`; returns its crc.
fn push_frame(bytes: &mut Vec<u8>, chain: u32, seq: u64, payload: &[u8]) -> u32 {
    let start = bytes.len();
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(start + frame_len(payload.len()), 0);
    let crc = chained(chain, &bytes[start + 4..]);
    bytes[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

fn push_seal(bytes: &mut Vec<u8>, chain: u32, next_seq: u64) {
    let mut seal = Vec::with_capacity(SEAL_LEN);
    seal.extend_from_slice(&[0; 4]);
    seal.extend_from_slice(&u32::MAX.to_le_bytes());
    seal.extend_from_slice(&next_seq.to_le_bytes());
    let crc = chained(chain, &seal[4..]);
    seal[0..4].copy_from_slice(&crc.to_le_bytes());
    bytes.extend_from_slice(&seal);
}

/// A valid log: segment name to bytes, plus where each record's frame is.
struct Built {
    files: BTreeMap<String, Vec<u8>>,
    payloads: Vec<Vec<u8>>,
    /// Per record: segment name, frame offset, frame length.
    frames: Vec<(String, usize, usize)>,
    last_segment: String,
}

/// The log `payloads` make, each segment followed by up to `zero_tail` zeros
/// (flagged in its header when there are any), as a writer leaves them.
fn build(log_id: u64, config: &LogConfig, payloads: Vec<Vec<u8>>, zero_tail: u64) -> Built {
    let zeros_ahead = zero_tail > 0;
    let room = usize::try_from(config.segment_len_max).unwrap_or(usize::MAX) - SEAL_LEN;
    let mut files = BTreeMap::new();
    let mut frames = Vec::new();
    let mut chain = crc32fast::hash(&log_id.to_le_bytes());
    let mut name = segment_name(1);
    let mut bytes = header(log_id, 1, chain, zeros_ahead);
    for (index, payload) in payloads.iter().enumerate() {
        let seq = index as u64 + 1;
        if bytes.len() + frame_len(payload.len()) > room {
            push_seal(&mut bytes, chain, seq);
            files.insert(std::mem::take(&mut name), std::mem::take(&mut bytes));
            name = segment_name(seq);
            bytes = header(log_id, seq, chain, zeros_ahead);
        }
        frames.push((name.clone(), bytes.len(), frame_len(payload.len())));
        chain = push_frame(&mut bytes, chain, seq, payload);
    }
    files.insert(name.clone(), bytes);
    for bytes in files.values_mut() {
        let len = (bytes.len() as u64 + zero_tail).min(config.segment_len_max);
        bytes.resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
    }
    Built {
        files,
        payloads,
        frames,
        last_segment: name,
    }
}

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
    /// copied segments, segments grown: nothing that can forge a record.
    Detectable,
    /// Raw bytes from the input: records may be forged.
    Raw,
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
    fn len(&self, name: &str) -> io::Result<u64> {
        self.inner.len(name)
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

/// Checks each record against the bytes of its file, with this module's
/// own reading of the format: the frame's crc verifies from the chain the
/// record names, the chain continues from the previous record's crc (the
/// first from the log id of the first segment), fields and payload match.
fn assert_records_verify(mem: &MemStorage, records: &[OwnedRecord]) {
    let mut chain = None;
    for (index, record) in records.iter().enumerate() {
        assert_eq!(record.seq, index as u64 + 1, "records out of sequence");
        let name = segment_name(record.position.segment);
        let Some(bytes) = mem.file(&name) else {
            panic!("record {} names segment {name}, which is gone", record.seq);
        };
        let expected_chain = match chain {
            Some(chain) => chain,
            None => {
                let first = mem.file(&segment_name(1)).unwrap_or_default();
                assert!(
                    first.len() >= SEGMENT_HEADER_LEN,
                    "record 1 without a first segment header"
                );
                crc32fast::hash(&u64_at(&first, 16).to_le_bytes())
            }
        };
        assert_eq!(
            record.position.chain, expected_chain,
            "record {} does not chain from the one before",
            record.seq
        );
        let offset = usize::try_from(record.position.offset).unwrap_or(usize::MAX);
        assert!(
            offset >= SEGMENT_HEADER_LEN && offset % 8 == 0,
            "record {} at a bad offset",
            record.seq
        );
        let size = frame_len(record.payload.len());
        assert!(
            offset + size <= bytes.len(),
            "record {} runs past its file",
            record.seq
        );
        let frame = &bytes[offset..offset + size];
        let stored = u32_at(frame, 0);
        assert_eq!(
            chained(expected_chain, &frame[4..]),
            stored,
            "record {} does not verify",
            record.seq
        );
        assert_eq!(
            u32_at(frame, 4) as usize,
            record.payload.len(),
            "record {} length",
            record.seq
        );
        assert_eq!(
            u64_at(frame, 8),
            record.seq,
            "record {} seq field",
            record.seq
        );
        assert_eq!(
            &frame[16..16 + record.payload.len()],
            &record.payload[..],
            "record {} payload",
            record.seq
        );
        chain = Some(stored);
    }
}

fn payloads(records: &[OwnedRecord]) -> Vec<Vec<u8>> {
    records.iter().map(|r| r.payload.clone()).collect()
}

/// Builds a log from the input, damages it as the input says, then checks:
/// - reading never panics, never asks storage for more than a segment, and
///   every record it returns verifies by this module's own reading of the
///   format, in sequence from 1, chained;
/// - reading twice gives the same; reading from any record gives the rest;
///   `read_at` gives each record again;
/// - undamaged, every record comes back; cut short, exactly the records
///   before the cut, with a torn tail; one bit flipped, all records or a
///   refusal, except that a flip in the very last record may cut it as torn;
///   with damage that cannot forge a record, a prefix of the records;
/// - opening for writing visits the records reading returns, and succeeds
///   exactly when reading does; afterwards a record appended and synced
///   follows them.
///
/// # Panics
/// When a property does not hold: that is the finding.
pub fn log_open(data: &[u8]) {
    let mut input = Input { bytes: data };
    let choice = input.byte();
    let record_max = RECORD_MAXES[usize::from(choice) % RECORD_MAXES.len()];
    let slack = SEGMENT_SLACK[usize::from(choice / 4) % SEGMENT_SLACK.len()];
    let config = LogConfig {
        record_max,
        // Room for the batch header the writer of `check_writer` puts in
        // front of the record it appends.
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
    let log_id = 0x5eed_0000 + u64::from(input.byte());
    let count = usize::from(input.byte()) % (RECORDS_MAX + 1);
    let written: Vec<Vec<u8>> = (0..count)
        .map(|_| {
            let len = usize::from(input.byte()) % (record_max as usize + 1);
            input.take(len)
        })
        .collect();
    let built = build(log_id, &config, written, zero_tail);

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
        assert_records_verify(&mem, records);
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
    let kind = input.byte() % 8;
    let file_choice = usize::from(input.byte());
    let name = (!names.is_empty()).then(|| names[file_choice % names.len()].clone());
    let detectable = |damage: Damage| match damage {
        Damage::Raw => Damage::Raw,
        _ => Damage::Detectable,
    };
    let untouched = damage == Damage::None;
    match (kind, name) {
        (0, Some(name)) => {
            let mut bytes = mem.file(&name).unwrap_or_default();
            if bytes.is_empty() {
                return damage;
            }
            let offset = usize::from(input.u16()) % bytes.len();
            bytes[offset] ^= 1 << (input.byte() % 8);
            mem.put_file(&name, &bytes);
            *flips += 1;
            if untouched {
                Damage::OneFlip(offset, name)
            } else {
                detectable(damage)
            }
        }
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
            let mut bytes = mem.file(&name).unwrap_or_default();
            let offset = usize::from(input.u16()) % (bytes.len() + 1);
            let len = usize::from(input.byte() % 64);
            let raw = input.take(len);
            let end = (offset + len).min(bytes.len());
            bytes.splice(offset..end, raw);
            mem.put_file(&name, &bytes);
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
            let mut bytes = mem.file(&name).unwrap_or_default();
            let len = usize::from(input.byte() % 64);
            bytes.extend(input.take(len));
            mem.put_file(&name, &bytes);
            Damage::Raw
        }
        _ => {
            // A file of raw bytes, maybe behind a valid header so that the
            // fuzzer gets past it, under a segment or another name.
            let seq = u64::from(input.byte() % 32);
            let name = match input.byte() % 6 {
                0..=2 => segment_name(seq),
                3 => format!("{}.tmp", segment_name(seq)),
                4 => format!("{}.torn-40", segment_name(seq)),
                _ => "notes.txt".to_owned(),
            };
            let mut bytes = Vec::new();
            if input.byte().is_multiple_of(2) {
                let chain =
                    u32::from_le_bytes([input.byte(), input.byte(), input.byte(), input.byte()]);
                let first = mem.file(&segment_name(1)).unwrap_or_default();
                let log_id = if first.len() >= 24 {
                    u64_at(&first, 16)
                } else {
                    0
                };
                bytes = header(log_id, seq, chain, input.byte().is_multiple_of(2));
            }
            let len = usize::from(input.u16()) % 512;
            bytes.extend(input.take(len));
            mem.put_file(&name, &bytes);
            Damage::Raw
        }
    }
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

fn check_against_built(
    built: &Built,
    damage: &Damage,
    records: &[OwnedRecord],
    end: &Result<String, String>,
) {
    let got = payloads(records);
    let all = &built.payloads;
    match damage {
        Damage::None => {
            assert!(end.is_ok(), "an undamaged log does not read: {end:?}");
            assert_eq!(&got, all, "an undamaged log reads differently");
        }
        &Damage::CutNewest(cut) => {
            let kept = built
                .frames
                .iter()
                .filter(|(name, offset, size)| name != &built.last_segment || offset + size <= cut)
                .count();
            assert!(end.is_ok(), "a log cut short does not read: {end:?}");
            assert_eq!(
                got,
                all[..kept],
                "a log cut at byte {cut} of its newest segment"
            );
        }
        Damage::OneFlip(offset, name) => {
            let offset = *offset;
            let in_last_record = built
                .frames
                .last()
                .is_some_and(|(frame_name, start, size)| {
                    frame_name == name && *start <= offset && offset < start + size
                });
            let cut_as_torn = in_last_record && got.len() + 1 == all.len() && end.is_ok();
            assert!(
                end.is_err() || &got == all || cut_as_torn,
                "one flipped bit at byte {offset} of {name} lost records silently: \
                 {} of {} returned ({end:?})",
                got.len(),
                all.len()
            );
            assert!(
                got.len() <= all.len() && got == all[..got.len()],
                "a flipped bit changed a record"
            );
        }
        Damage::Detectable => {
            assert!(
                got.len() <= all.len() && got == all[..got.len()],
                "damage that cannot forge a record returned records that were not written"
            );
        }
        Damage::Raw => {}
    }
}

/// Opening for writing agrees with reading; a record appended afterwards
/// follows the others.
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
