//! Edges of recovery and group commit: records only the page cache held,
//! damage that wipes a chain seed, payloads that look like frames, limits
//! shrunk between runs, and hostile segment names.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use payonce_log::{
    BATCH_HEADER_LEN, CrashMode, Durability, Fault, Log, LogConfig, LogError, LogReader,
    MemStorage, Storage,
};

use crate::support::open_collect;

const SEG1: &str = "00000000000000000001.log";

/// Guards against reporting records durable that only the page cache held: a
/// process that died (or failed a sync) before its fdatasync leaves records
/// a reopen reads back, and they must be synced before being called durable.
#[test]
fn a_reopened_log_syncs_what_it_read_before_calling_it_durable() {
    let mem = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(mem.clone());
    let config = LogConfig::default();
    {
        let (log, _) = Log::open(storage.clone(), config.clone()).unwrap();
        log.append_durable(b"first").unwrap();
        let seq = log.append(b"approve w-1").unwrap();
        // The write lands, its fdatasync fails (or: the process is killed
        // between write and fdatasync).
        mem.faults().arm(Fault::SyncFails { nth: 1 });
        assert!(matches!(
            log.wait_durable(seq),
            Err(LogError::Poisoned { .. })
        ));
    } // poisoned: drop does not flush
    // "The only safe continuation is to reopen and verify."
    let (log, recovery) = Log::open(storage.clone(), config.clone()).unwrap();
    assert_eq!(recovery.last_seq, 2);
    assert_eq!(
        log.durable_seq(),
        2,
        "the reopened log claims seq 2 is durable"
    );
    log.wait_durable(2).unwrap(); // returns Ok at once, no fdatasync
    // Power loss now.
    let after: Arc<dyn Storage> = Arc::new(mem.crash(CrashMode::DropUnsynced, 0));
    drop(log);
    let (_, recovery, _) = open_collect(&after, &config).unwrap();
    assert_eq!(
        recovery.last_seq, 2,
        "wait_durable(2) returned Ok, yet record 2 did not survive a power loss"
    );
}

/// Guards against a panic (or an oversized segment) when a log is reopened
/// with a segment limit too small for its newest segment and its seal.
#[test]
fn a_log_reopened_with_a_smaller_segment_limit_is_refused_not_broken() {
    let mem = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(mem.clone());
    let big = LogConfig {
        record_max: 64,
        segment_len_max: 4096,
        durability: Durability::Always,
        ..LogConfig::default()
    };
    {
        let (log, _) = Log::open(storage.clone(), big.clone()).unwrap();
        for i in 0..20u8 {
            log.append(&[i; 48]).unwrap();
        }
        log.sync().unwrap();
    }
    // Cut the zeros written ahead of the records, so that the file itself
    // fits the smaller limit and only its records and seal do not.
    let len = 40 + BATCH_HEADER_LEN + 20 * 64;
    let records = mem.file(SEG1).unwrap()[..len].to_vec();
    mem.put_file(SEG1, &records);
    let len = len as u64;
    let small = LogConfig {
        segment_len_max: len + 8, // valid, and the file is not too long
        ..big
    };
    let before = mem.file(SEG1).unwrap();

    let error = Log::open(storage.clone(), small.clone()).unwrap_err();

    assert!(
        matches!(
            error,
            LogError::SegmentTooLong {
                len: 1384,
                max: 1392,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(
        mem.file(SEG1).unwrap(),
        before,
        "a refused open changed the segment"
    );
    // With the limit it was written under, the log goes on.
    let (log, _) = Log::open(storage, big).unwrap();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| log.append_durable(&[9; 48])));
    assert!(matches!(outcome, Ok(Ok(21))));
}

/// Guards against a sequence number overflow on crafted input: a segment
/// named u64::MAX is an error, not a panic.
#[test]
fn a_segment_named_for_the_last_sequence_number_is_an_error_not_a_panic() {
    let mem = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(mem.clone());
    {
        let (log, _) = Log::open(storage.clone(), LogConfig::default()).unwrap();
        log.append_durable(b"x").unwrap();
    }
    let first = mem.file(SEG1).unwrap();
    let log_id = u64::from_le_bytes(first[16..24].try_into().unwrap());
    let chain = 0u32;
    let mut seg = Vec::new();
    seg.extend_from_slice(b"PAYONCE\0");
    seg.extend_from_slice(&1u32.to_le_bytes());
    seg.extend_from_slice(&0u32.to_le_bytes());
    seg.extend_from_slice(&log_id.to_le_bytes());
    seg.extend_from_slice(&u64::MAX.to_le_bytes());
    seg.extend_from_slice(&chain.to_le_bytes());
    let header_crc = crc32fast::hash(&seg[0..36]);
    seg.extend_from_slice(&header_crc.to_le_bytes());
    let mut body = Vec::new();
    body.extend_from_slice(&0u32.to_le_bytes()); // empty payload
    body.extend_from_slice(&u64::MAX.to_le_bytes()); // seq
    let mut hasher = crc32fast::Hasher::new_with_initial(chain);
    hasher.update(&body);
    seg.extend_from_slice(&hasher.finalize().to_le_bytes());
    seg.extend_from_slice(&body);
    mem.put_file(&format!("{:020}.log", u64::MAX), &seg);

    let reader = LogReader::open(storage, LogConfig::default()).unwrap();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        let mut records = reader.records_from(u64::MAX).unwrap();
        while let Ok(Some(_)) = records.next_record() {}
        records.recovery()
    }));
    assert!(outcome.is_ok(), "a reader panicked on crafted bytes");
}

/// Guards against cutting acknowledged records as a torn tail: two flips in
/// the second-to-last record (its checksum and its body) leave no seed to
/// verify the last record from, but a well-formed frame with the next
/// sequence number after it still proves the damage is not a cut-short write.
#[test]
fn damage_to_a_records_checksum_and_body_before_a_good_record_is_refused() {
    let mem = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(mem.clone());
    let config = LogConfig::default();
    {
        let (log, _) = Log::open(storage.clone(), config.clone()).unwrap();
        for i in 0..10u8 {
            log.append_durable(&[i; 40]).unwrap(); // each one acknowledged
        }
    }
    let mut bytes = mem.file(SEG1).unwrap();
    let frame = 16 + 40;
    let penultimate = 40 + 8 * frame;
    bytes[penultimate] ^= 0x01; // its crc field
    bytes[penultimate + 20] ^= 0x01; // its payload
    mem.put_file(SEG1, &bytes);
    match open_collect(&storage, &config) {
        Err(LogError::Corrupt { .. }) => {}
        Ok((_, recovery, seen)) => panic!(
            "acknowledged records 9 and 10 were cut as a torn tail: {} records recovered, {:?}",
            seen.len(),
            recovery.torn_tail
        ),
        Err(error) => panic!("unexpected error {error}"),
    }
}

/// Random damage (flips, overwrites with garbage, truncations, extensions) to
/// a small multi-segment log: open must not panic, and must never return a
/// record that differs from what was appended.
#[test]
fn random_damage_never_panics_or_changes_data() {
    let config = LogConfig {
        record_max: 64,
        segment_len_max: 400,
        durability: Durability::Always,
        ..LogConfig::default()
    };
    let base = MemStorage::new();
    let payload =
        |seq: u64| -> Vec<u8> { (0..(seq * 13 % 65)).map(|i| (seq * 7 + i) as u8).collect() };
    {
        let (log, _) = Log::open(Arc::new(base.clone()), config.clone()).unwrap();
        for seq in 1..=40 {
            log.append(&payload(seq)).unwrap();
            if seq % 3 == 0 {
                log.sync().unwrap();
            }
        }
        log.sync().unwrap();
    }
    let names: Vec<String> = base
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect();
    let mut rng = 0x1234_5678_u64;
    let mut next = move || {
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for round in 0..4000 {
        let mem = MemStorage::new();
        for name in &names {
            mem.put_file(name, &base.file(name).unwrap());
        }
        let damages = 1 + next() % 3;
        for _ in 0..damages {
            let name = &names[(next() % names.len() as u64) as usize];
            let mut bytes = mem.file(name).unwrap();
            match next() % 5 {
                0 | 1 if !bytes.is_empty() => {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << (next() % 8);
                }
                2 if !bytes.is_empty() => {
                    let at = (next() % bytes.len() as u64) as usize;
                    let run = (1 + next() % 24) as usize;
                    for b in bytes.iter_mut().skip(at).take(run) {
                        *b = next() as u8;
                    }
                }
                3 => {
                    let to = (next() % (bytes.len() as u64 + 1)) as usize;
                    bytes.truncate(to);
                }
                _ => {
                    let more = (next() % 40) as usize;
                    for _ in 0..more {
                        bytes.push(next() as u8);
                    }
                }
            }
            mem.put_file(name, &bytes);
        }
        let storage: Arc<dyn Storage> = Arc::new(mem.clone());
        let reader_storage = storage.clone();
        let cfg = config.clone();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            if let Ok(reader) = LogReader::open(reader_storage, cfg.clone())
                && let Ok(mut records) = reader.records_from(1 + round % 41)
            {
                while let Ok(Some(record)) = records.next_record() {
                    assert_eq!(
                        record.payload,
                        &payload(record.seq)[..],
                        "reader returned changed data"
                    );
                }
            }
            open_collect(&storage, &cfg)
        }));
        match outcome {
            Err(_) => panic!("round {round}: open panicked"),
            Ok(Ok((_, recovery, seen))) => {
                for record in &seen {
                    assert_eq!(
                        record.payload,
                        payload(record.seq),
                        "round {round}: changed data"
                    );
                }
                let key = if recovery.last_seq == 40 {
                    "ok-all".to_owned()
                } else {
                    format!("ok-lost-{}", 40 - recovery.last_seq)
                };
                *outcomes.entry(key).or_default() += 1;
            }
            Ok(Err(error)) => {
                let key = match error {
                    LogError::Corrupt { damage, .. } => format!("refused-{damage:?}"),
                    other => format!("error-{other}"),
                };
                *outcomes.entry(key).or_default() += 1;
            }
        }
    }
    assert!(
        outcomes.len() > 1,
        "the damage always had the same effect: {outcomes:?}"
    );
}

mod stress {
    use std::io;
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    use payonce_log::{
        CrashMode, Durability, Log, LogConfig, MemStorage, Storage, StorageFile, StorageLock,
    };

    use crate::support::open_collect;

    /// MemStorage whose fdatasync takes a little while, so more appends land
    /// while a flush is running: it slows the disk, it does not order anything.
    #[derive(Debug)]
    struct Slow(MemStorage);
    #[derive(Debug)]
    struct SlowFile(Box<dyn StorageFile>);

    impl StorageFile for SlowFile {
        fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
            self.0.append(bytes)
        }
        fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
            self.0.write_at(offset, bytes)
        }
        fn sync_data(&mut self) -> io::Result<()> {
            thread::sleep(Duration::from_micros(200));
            self.0.sync_data()
        }
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.0.set_len(len)
        }
    }

    impl Storage for Slow {
        fn describe(&self, name: &str) -> String {
            self.0.describe(name)
        }
        fn list(&self) -> io::Result<Vec<String>> {
            self.0.list()
        }
        fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
            Ok(Box::new(SlowFile(self.0.create_new(name)?)))
        }
        fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
            Ok(Box::new(SlowFile(self.0.open_append(name)?)))
        }
        fn rename(&self, from: &str, to: &str) -> io::Result<()> {
            self.0.rename(from, to)
        }
        fn remove(&self, name: &str) -> io::Result<()> {
            self.0.remove(name)
        }
        fn sync_dir(&self) -> io::Result<()> {
            self.0.sync_dir()
        }
        fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
            self.0.try_lock()
        }
        fn open_read(&self, name: &str) -> io::Result<Box<dyn payonce_log::StorageRead>> {
            self.0.open_read(name)
        }
    }

    #[test]
    fn forty_threads_on_a_slow_disk_get_only_synced_acknowledgements() {
        let mem = MemStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(Slow(mem.clone()));
        let config = LogConfig {
            record_max: 64,
            segment_len_max: 1024,
            durability: Durability::Always,
            ..LogConfig::default()
        };
        let (log, _) = Log::open(storage, config.clone()).unwrap();
        thread::scope(|scope| {
            for t in 0..40u64 {
                let log = &log;
                let mem = &mem;
                let config = &config;
                scope.spawn(move || {
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for i in 0..300u64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let len = (x % 65) as usize;
                        let seq = log.append(&vec![t as u8; len]).unwrap();
                        match x % 4 {
                            0 => {}
                            1 => {
                                let earlier = 1 + (x >> 8) % seq;
                                log.wait_durable(earlier).unwrap();
                            }
                            _ => log.wait_durable(seq).unwrap(),
                        }
                        if t % 8 == 0 && i % 60 == 0 {
                            log.wait_durable(seq).unwrap();
                            let crashed: Arc<dyn Storage> =
                                Arc::new(mem.crash(CrashMode::DropUnsynced, x));
                            let (_, recovery, _) = open_collect(&crashed, config).unwrap();
                            assert!(recovery.last_seq >= seq, "seq {seq} acknowledged but lost");
                        }
                    }
                });
            }
        });
        log.sync().unwrap();
        assert_eq!(log.durable_seq(), 40 * 300);
    }

    #[test]
    fn a_failed_sync_under_load_never_acknowledges_what_was_lost() {
        for round in 0..20u64 {
            let mem = MemStorage::new();
            let storage: Arc<dyn Storage> = Arc::new(Slow(mem.clone()));
            let config = LogConfig {
                record_max: 64,
                segment_len_max: 1024,
                durability: Durability::Always,
                ..LogConfig::default()
            };
            let (log, _) = Log::open(storage, config.clone()).unwrap();
            mem.faults()
                .arm(payonce_log::Fault::SyncFails { nth: 5 + round * 3 });
            let acked: Vec<u64> = thread::scope(|scope| {
                let handles: Vec<_> = (0..24u64)
                    .map(|t| {
                        let log = &log;
                        scope.spawn(move || {
                            let mut acked = 0;
                            for _ in 0..200 {
                                let Ok(seq) = log.append(&[t as u8; 24]) else {
                                    break;
                                };
                                match log.wait_durable(seq) {
                                    Ok(()) => acked = acked.max(seq),
                                    Err(_) => {
                                        assert!(log.wait_durable(seq).is_err());
                                        break;
                                    }
                                }
                            }
                            acked
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let max_acked = acked.into_iter().max().unwrap_or(0);
            assert!(log.check().is_err(), "round {round}: not poisoned");
            let crashed: Arc<dyn Storage> = Arc::new(mem.crash(CrashMode::DropUnsynced, round));
            drop(log);
            let (_, recovery, _) = open_collect(&crashed, &config).unwrap();
            assert!(
                recovery.last_seq >= max_acked,
                "round {round}: acked {max_acked}, survived {}",
                recovery.last_seq
            );
        }
    }
}

/// Builds one frame (crc chained from `chain`) as the log does.
fn frame(chain: u32, seq: u64, payload: &[u8]) -> (Vec<u8>, u32) {
    let mut body = Vec::new();
    body.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    body.extend_from_slice(&seq.to_le_bytes());
    body.extend_from_slice(payload);
    while (body.len() + 4) % 8 != 0 {
        body.push(0);
    }
    let mut hasher = crc32fast::Hasher::new_with_initial(chain);
    hasher.update(&body);
    let crc = hasher.finalize();
    let mut out = crc.to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    (out, crc)
}

/// Guards against a client's payload blocking recovery: a torn record whose
/// payload happens to contain two chained frames with plausible sequence
/// numbers is still a torn tail, since those frames lie inside its own body.
#[test]
fn a_torn_record_whose_payload_holds_frames_is_still_a_torn_tail() {
    let mem = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(mem.clone());
    let config = LogConfig::default();
    let (log, _) = Log::open(storage.clone(), config.clone()).unwrap();
    log.append_durable(b"first").unwrap(); // seq 1
    // Payload of record 2: 8 bytes of padding, then frames "seq 3" and "seq 4"
    // chained from an arbitrary value, then more bytes.
    let (f3, crc3) = frame(0xdead_beef, 3, b"abcdefgh");
    let (f4, _) = frame(crc3, 4, b"ijklmnop");
    let mut payload = vec![0u8; 8];
    payload.extend_from_slice(&f3);
    payload.extend_from_slice(&f4);
    payload.extend_from_slice(&[0x55; 64]);
    // The write of record 2 is torn after the embedded pair (a power loss
    // that keeps a prefix of the unsynced bytes: MemStorage KeepPrefix).
    let seg_before = mem.file(SEG1).unwrap();
    mem.faults().arm(Fault::WriteShort {
        nth: 1,
        landed: 16 + 8 + f3.len() + f4.len() + 8,
    });
    let seq = log.append(&payload).unwrap();
    assert!(log.wait_durable(seq).is_err());
    drop(log);
    assert_ne!(
        mem.file(SEG1).unwrap(),
        seg_before,
        "part of record 2 landed"
    );
    match open_collect(&storage, &config) {
        Ok((_, recovery, seen)) => {
            assert_eq!(seen.len(), 1);
            assert!(recovery.torn_tail.is_some());
        }
        Err(error) => panic!("a legitimate torn write was refused: {error}"),
    }
}
