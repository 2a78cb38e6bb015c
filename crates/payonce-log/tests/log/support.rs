//! Fixtures: the same test body on a real directory and in memory, raw
//! access to the files for tampering, and deterministic payloads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use payonce_log::{
    BATCH_HEADER_LEN, CHECKPOINT_FILE, CHECKPOINT_SLOT_STRIDE, Durability, Faults, FaultyStorage,
    FsStorage, Head, Log, LogConfig, LogError, LogReader, MemStorage, OpenError, PREALLOCATE_LEN,
    Position, Recovery, Storage,
};
use tempfile::TempDir;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Fs,
    Mem,
}

/// One log directory under test, with its fault plan and raw file access.
pub(crate) struct Env {
    pub(crate) kind: Kind,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) faults: Faults,
    pub(crate) disk: Disk,
    _dir: Option<TempDir>,
}

/// The files of a log directory, touched behind the log's back.
pub(crate) enum Disk {
    Fs(PathBuf),
    Mem(MemStorage),
}

impl Env {
    pub(crate) fn new(kind: Kind) -> Env {
        match kind {
            Kind::Fs => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("log");
                let faulty = FaultyStorage::new(Arc::new(FsStorage::new(&path)));
                Env {
                    kind,
                    faults: faulty.faults().clone(),
                    storage: Arc::new(faulty),
                    disk: Disk::Fs(path),
                    _dir: Some(dir),
                }
            }
            Kind::Mem => {
                let mem = MemStorage::new();
                Env {
                    kind,
                    faults: mem.faults().clone(),
                    storage: Arc::new(mem.clone()),
                    disk: Disk::Mem(mem),
                    _dir: None,
                }
            }
        }
    }

    /// A fresh directory of the same kind holding exactly `files`.
    pub(crate) fn with_files(kind: Kind, files: &BTreeMap<String, Vec<u8>>) -> Env {
        let env = Env::new(kind);
        if let Disk::Fs(path) = &env.disk {
            std::fs::create_dir_all(path).unwrap();
        }
        for (name, bytes) in files {
            env.disk.put(name, bytes);
        }
        env
    }

    pub(crate) fn describe(&self, name: &str) -> String {
        self.storage.describe(name)
    }
}

/// Runs `body` on a real directory, then in memory, saying which on failure.
pub(crate) fn on_both(body: impl Fn(&Env)) {
    for kind in [Kind::Fs, Kind::Mem] {
        eprintln!("--- on {kind:?} storage");
        body(&Env::new(kind));
    }
}

impl Disk {
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = match self {
            Disk::Fs(path) => match std::fs::read_dir(path) {
                Ok(entries) => entries
                    .map(|entry| entry.unwrap().file_name().into_string().unwrap())
                    .collect(),
                Err(_) => Vec::new(),
            },
            Disk::Mem(mem) => mem.list().unwrap(),
        };
        names.sort();
        names
    }

    /// Segment file names, oldest first.
    pub(crate) fn segments(&self) -> Vec<String> {
        self.names()
            .into_iter()
            .filter(|name| name.len() == 24 && name.ends_with(".log"))
            .collect()
    }

    pub(crate) fn bytes(&self, name: &str) -> Vec<u8> {
        match self {
            Disk::Fs(path) => std::fs::read(path.join(name)).unwrap(),
            Disk::Mem(mem) => mem.file(name).unwrap(),
        }
    }

    pub(crate) fn put(&self, name: &str, bytes: &[u8]) {
        match self {
            Disk::Fs(path) => {
                std::fs::create_dir_all(path).unwrap();
                std::fs::write(path.join(name), bytes).unwrap();
            }
            Disk::Mem(mem) => mem.put_file(name, bytes),
        }
    }

    pub(crate) fn remove(&self, name: &str) {
        match self {
            Disk::Fs(path) => std::fs::remove_file(path.join(name)).unwrap(),
            Disk::Mem(mem) => mem.remove(name).unwrap(),
        }
    }

    pub(crate) fn rename(&self, from: &str, to: &str) {
        match self {
            Disk::Fs(path) => std::fs::rename(path.join(from), path.join(to)).unwrap(),
            Disk::Mem(mem) => mem.rename(from, to).unwrap(),
        }
    }

    /// Every file and its bytes.
    pub(crate) fn files(&self) -> BTreeMap<String, Vec<u8>> {
        self.names()
            .into_iter()
            .filter(|name| name != "LOCK")
            .map(|name| {
                let bytes = self.bytes(&name);
                (name, bytes)
            })
            .collect()
    }
}

/// [`small_config`]'s `segment_len_max`.
pub(crate) const SMALL_SEGMENT_LEN: usize = 640;

/// Small segments, so a few dozen records span several of them; every
/// batch appended (no zeros ahead), and no checkpoint thread.
pub(crate) fn small_config() -> LogConfig {
    LogConfig {
        record_max: 64,
        segment_len_max: SMALL_SEGMENT_LEN as u64,
        durability: Durability::Always,
        preallocate_len: 0,
        checkpoint_interval: None,
        ..LogConfig::default()
    }
}

/// Rewrites the checkpoint of the log in `env` to hold `head`, as a log
/// whose checkpoint had not caught up when it crashed holds an older one.
pub(crate) fn checkpoint_at(env: &Env, head: Head) {
    checkpoint_at_generation(env, head, 1);
}

/// Rewrites the checkpoint of the log in `env` to hold `head` in both
/// slots, slot 1 the newer at `generation` (at least 1).
pub(crate) fn checkpoint_at_generation(env: &Env, head: Head, generation: u64) {
    let first = env.disk.bytes(&env.disk.segments()[0]);
    let log_id = u64::from_le_bytes(first[16..24].try_into().unwrap());
    let slot = |index: u32, generation: u64| {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"PAYONCK\0");
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.extend_from_slice(&index.to_le_bytes());
        bytes.extend_from_slice(&log_id.to_le_bytes());
        bytes.extend_from_slice(&generation.to_le_bytes());
        bytes.extend_from_slice(&head.seq.to_le_bytes());
        bytes.extend_from_slice(&head.digest.0);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes
    };
    let mut file = slot(0, generation - 1);
    file.resize(CHECKPOINT_SLOT_STRIDE, 0);
    file.extend(slot(1, generation));
    env.disk.put(CHECKPOINT_FILE, &file);
}

/// The log in `env` as a crash before any checkpoint leaves it: the
/// checkpoint holds the genesis head, so a torn last batch is cut.
pub(crate) fn forget_checkpoint(env: &Env) {
    checkpoint_at(env, Head::GENESIS);
}

/// Each storage with each layout of [`small_config`]: records appended,
/// and records written over zeros written ahead of them.
pub(crate) fn layouts() -> Vec<(Kind, LogConfig)> {
    let mut layouts = Vec::new();
    for kind in [Kind::Fs, Kind::Mem] {
        layouts.push((kind, small_config()));
        layouts.push((kind, preallocating(small_config())));
    }
    layouts
}

/// `config` writing zeros ahead of its records.
pub(crate) fn preallocating(config: LogConfig) -> LogConfig {
    LogConfig {
        preallocate_len: PREALLOCATE_LEN,
        ..config
    }
}

/// The payload of record `seq`: 0 to 47 bytes that name it.
pub(crate) fn payload(seq: u64) -> Vec<u8> {
    let len = (seq * 7 % 48) as usize;
    (0..len).map(|i| (seq as usize * 31 + i) as u8).collect()
}

/// What a verified record looked like to a visitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) seq: u64,
    pub(crate) payload: Vec<u8>,
    pub(crate) position: Position,
}

/// Opens for writing, collecting every record the open verified.
pub(crate) fn open_collect(
    storage: &Arc<dyn Storage>,
    config: &LogConfig,
) -> Result<(Log, Recovery, Vec<Seen>), LogError> {
    let mut seen = Vec::new();
    let opened = Log::open_visiting(storage.clone(), config.clone(), |record| {
        seen.push(Seen {
            seq: record.seq,
            payload: record.payload.to_vec(),
            position: record.position,
        });
        Ok::<(), std::convert::Infallible>(())
    });
    match opened {
        Ok((log, recovery)) => Ok((log, recovery, seen)),
        Err(OpenError::Log(error)) => Err(error),
        Err(OpenError::Visit(never)) => match never {},
    }
}

/// Appends `payload(seq)` for `count` more records, each waited for on its
/// own: a batch per record, so every record boundary is a batch boundary.
pub(crate) fn append_payloads(log: &Log, count: u64) {
    for _ in 0..count {
        let seq = log.last_seq() + 1;
        assert_eq!(log.append_durable(&payload(seq)).unwrap(), seq);
    }
}

/// Appends `payload(seq)` for `count` more records and waits for them
/// once: one batch (a part per segment it reaches).
pub(crate) fn append_batch(log: &Log, count: u64) {
    for _ in 0..count {
        let seq = log.last_seq() + 1;
        assert_eq!(log.append(&payload(seq)).unwrap(), seq);
    }
    log.sync().unwrap();
}

/// A log with `count` records of `payload(seq)` in `env`, a batch each
/// ([`append_payloads`]), closed again, its checkpoint then rewound to the
/// genesis head ([`forget_checkpoint`]): the torn-tail rules see it as a
/// crash right after its last sync left it.
pub(crate) fn build_log(env: &Env, config: &LogConfig, count: u64) {
    let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
    append_payloads(&log, count);
    drop(log);
    forget_checkpoint(env);
}

/// Every payload a read-only scan of `storage` hands out, and how it ended.
pub(crate) fn read_payloads(
    storage: Arc<dyn Storage>,
    config: &LogConfig,
) -> (Vec<Vec<u8>>, Result<Recovery, OpenError<()>>) {
    let reader = LogReader::open(storage, config.clone()).unwrap();
    let mut read = Vec::new();
    let scanned = reader.scan(|record| {
        read.push(record.payload.to_vec());
        Ok::<(), ()>(())
    });
    (read, scanned)
}

/// The payloads of records 1..=count.
pub(crate) fn expected(count: u64) -> Vec<Vec<u8>> {
    (1..=count).map(payload).collect()
}

pub(crate) fn payloads(seen: &[Seen]) -> Vec<Vec<u8>> {
    seen.iter().map(|record| record.payload.clone()).collect()
}

/// A frame's byte offset in its segment and its seq (`None` for a seal).
pub(crate) type Frame = (usize, Option<u64>);

/// The frames of a segment's bytes, in order: records and the seal, not
/// batch headers (see [`batches`]).
pub(crate) fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut offset = 40;
    let mut frames = Vec::new();
    while offset + 16 <= bytes.len() {
        if bytes[offset..offset + 16].iter().all(|&byte| byte == 0) {
            break; // the zeros written ahead of the records
        }
        let len = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
        let seq = u64::from_le_bytes(bytes[offset + 8..offset + 16].try_into().unwrap());
        if len == u32::MAX - 1 {
            offset += BATCH_HEADER_LEN;
        } else if len == u32::MAX {
            frames.push((offset, None));
            offset += 16;
        } else {
            frames.push((offset, Some(seq)));
            offset += 16 + (len as usize).div_ceil(8) * 8;
        }
    }
    frames
}

/// The byte offsets of the batch headers of a segment's bytes.
pub(crate) fn batches(bytes: &[u8]) -> Vec<usize> {
    let mut offset = 40;
    let mut found = Vec::new();
    while offset + 16 <= bytes.len() && bytes[offset..offset + 16].iter().any(|&byte| byte != 0) {
        let len = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
        if len == u32::MAX - 1 {
            found.push(offset);
            let extent = u32::from_le_bytes(bytes[offset + 20..offset + 24].try_into().unwrap());
            offset += BATCH_HEADER_LEN + extent as usize;
        } else {
            break;
        }
    }
    found
}

/// `bytes` without its trailing zeros: what the log counts as torn.
pub(crate) fn trim_zeros(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |index| index + 1);
    &bytes[..end]
}

/// Where the frames of a segment's `bytes` end: what follows is the zeros
/// the writer wrote ahead of them.
pub(crate) fn records_end(bytes: &[u8]) -> usize {
    match frames(bytes).last() {
        None => 40,
        Some(&(offset, None)) => offset + 16,
        Some(&(offset, Some(_))) => {
            let len = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
            offset + 16 + (len as usize).div_ceil(8) * 8
        }
    }
}

/// Asserts `result` is a `Corrupt` refusal naming `file`; returns its offset
/// and seq.
#[track_caller]
pub(crate) fn assert_corrupt<T: std::fmt::Debug>(
    result: Result<T, LogError>,
    file: &str,
) -> (u64, u64, payonce_log::Damage) {
    match result {
        Err(LogError::Corrupt {
            file: found,
            offset,
            seq,
            damage,
            ..
        }) => {
            assert_eq!(found, file, "the refusal names the damaged file");
            (offset, seq, damage)
        }
        other => panic!("expected a refusal naming {file}, got {other:?}"),
    }
}
