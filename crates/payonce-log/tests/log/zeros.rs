//! The zeros a writer writes ahead of its records: most batches overwrite
//! them instead of growing the file, a scan ends cleanly where they start,
//! and a power loss while they are being overwritten leaves them, or a torn
//! tail, like any other unsynced write.

use std::io;
use std::sync::{Arc, Mutex};

use payonce_log::{
    BATCH_HEADER_LEN, CrashMode, Fault, Log, LogConfig, LogError, MemStorage, PREALLOCATE_LEN,
    Storage, StorageFile, StorageLock,
};

use crate::support::{
    Disk, Env, Kind, SMALL_SEGMENT_LEN, append_payloads, assert_corrupt, batches, build_log,
    expected, forget_checkpoint, frames, on_both, open_collect, payload, payloads, preallocating,
    read_payloads, records_end, small_config,
};

fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&byte| byte == 0)
}

#[test]
fn most_batches_overwrite_zeros_written_ahead_instead_of_growing_the_file() {
    // Guards against every fdatasync having to commit a new file length, the cost the zeros exist to avoid.
    on_both(|env| {
        let config = preallocating(LogConfig::default());
        let (log, _) = Log::open(env.storage.clone(), config).unwrap();
        let segment = env.disk.segments()[0].clone();
        assert_eq!(
            env.disk.bytes(&segment).len(),
            40,
            "a new segment is its header"
        );
        log.append_durable(&[7; 128]).unwrap();
        // Each batch: its header and one record's frame.
        let batch = BATCH_HEADER_LEN + 144;
        let allocated = 40 + batch + PREALLOCATE_LEN as usize;
        assert_eq!(env.disk.bytes(&segment).len(), allocated);
        for byte in 0..100 {
            log.append_durable(&[byte; 128]).unwrap();
        }
        let bytes = env.disk.bytes(&segment);
        assert_eq!(bytes.len(), allocated, "later batches land inside the file");
        assert_eq!(records_end(&bytes), 40 + 101 * batch);
        assert!(all_zero(&bytes[40 + 101 * batch..]));
    });
}

#[test]
fn the_zeros_never_take_a_segment_past_its_limit_and_may_follow_a_seal() {
    // Guards against a segment file growing past segment_len_max, and against refusing a sealed segment whose zeros were never used.
    on_both(|env| {
        build_log(env, &preallocating(small_config()), 30);
        let segments = env.disk.segments();
        assert!(segments.len() >= 4);
        let mut zeros_after_a_seal = 0;
        for name in &segments {
            let bytes = env.disk.bytes(name);
            assert!(
                bytes.len() <= SMALL_SEGMENT_LEN,
                "{name} is {} bytes",
                bytes.len()
            );
            let end = records_end(&bytes);
            assert!(all_zero(&bytes[end..]), "{name}");
            if name != segments.last().unwrap() && end < bytes.len() {
                zeros_after_a_seal += 1;
            }
        }
        assert!(
            zeros_after_a_seal > 0,
            "some sealed segment has zeros after its seal"
        );
        let (_, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(30));
        assert_eq!(recovery.torn_tail, None);
    });
}

#[test]
fn a_reopened_log_appends_over_the_zeros_after_its_last_record() {
    // Guards against a reopened writer appending after the zeros (a hole) or counting them as torn.
    on_both(|env| {
        let config = preallocating(LogConfig::default());
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        append_payloads(&log, 3);
        log.sync().unwrap();
        drop(log);
        let segment = env.disk.segments()[0].clone();
        let allocated = env.disk.bytes(&segment).len();
        for round in 1..=3u64 {
            let (log, recovery, seen) = open_collect(&env.storage, &config).unwrap();
            assert_eq!(recovery.torn_tail, None, "round {round}");
            assert_eq!(payloads(&seen), expected(2 + round));
            log.append_durable(&payload(3 + round)).unwrap();
            drop(log);
            assert_eq!(env.disk.bytes(&segment).len(), allocated, "round {round}");
        }
        let (_, _, seen) = open_collect(&env.storage, &config).unwrap();
        assert_eq!(payloads(&seen), expected(6));
    });
}

#[test]
fn a_power_loss_while_overwriting_the_zeros_leaves_them_or_a_torn_tail() {
    // Guards against a crash model, or a scan, that treats overwritten zeros as if they were appended bytes.
    let env = Env::new(Kind::Mem);
    let Disk::Mem(mem) = &env.disk else {
        unreachable!("an in-memory environment")
    };
    let config = preallocating(LogConfig::default());
    let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
    append_payloads(&log, 2);
    log.sync().unwrap();
    let segment = env.disk.segments()[0].clone();
    let durable = env.disk.bytes(&segment);
    // Record 3 is written over the zeros, and its sync fails.
    env.faults.arm(Fault::SyncFails { nth: 1 });
    log.append(&payload(3)).unwrap();
    assert!(log.sync().is_err());
    drop(log);
    assert_ne!(env.disk.bytes(&segment), durable, "record 3 was written");
    for mode in [
        CrashMode::DropUnsynced,
        CrashMode::KeepPrefix,
        CrashMode::Garble,
    ] {
        for seed in 0..64 {
            let crashed = mem.crash(mode, seed);
            let after = crashed.file(&segment).unwrap();
            assert_eq!(
                after.len(),
                durable.len(),
                "{mode:?} {seed}: the length was synced"
            );
            if mode == CrashMode::DropUnsynced {
                assert_eq!(after, durable, "the zeros under record 3 are back");
            }
            let storage: Arc<dyn Storage> = Arc::new(crashed);
            let (_, recovery, seen) = open_collect(&storage, &config)
                .unwrap_or_else(|error| panic!("{mode:?} {seed}: {error}"));
            let count = seen.len() as u64;
            assert!((2..=3).contains(&count), "{mode:?} {seed}: {count} records");
            assert_eq!(payloads(&seen), expected(count), "{mode:?} {seed}");
            if let Some(tail) = recovery.torn_tail {
                assert_eq!(
                    tail.offset as usize,
                    records_end(&durable),
                    "{mode:?} {seed}"
                );
            }
        }
    }
}

#[test]
fn by_default_every_batch_is_appended_and_either_layout_reopens_as_the_other() {
    // Guards against zeros written ahead unasked, into a segment whose header does not allow them, and against a log written one way refusing to open the other way.
    on_both(|env| {
        let appending = small_config();
        let ahead = preallocating(small_config());
        build_log(env, &appending, 30);
        for name in env.disk.segments() {
            let bytes = env.disk.bytes(&name);
            assert_eq!(bytes.len(), records_end(&bytes), "{name}: no zeros");
        }
        let first_segments = env.disk.segments().len();
        // Reopened with zeros ahead: only the segments it creates get them.
        let (log, recovery, seen) = open_collect(&env.storage, &ahead).unwrap();
        assert_eq!((recovery.torn_tail, payloads(&seen)), (None, expected(30)));
        append_payloads(&log, 30);
        log.sync().unwrap();
        drop(log);
        let segments = env.disk.segments();
        assert!(segments.len() > first_segments + 1);
        let newest = env.disk.bytes(segments.last().unwrap());
        assert!(
            newest.len() > records_end(&newest),
            "the new segments have zeros"
        );
        let old = env.disk.bytes(&segments[first_segments - 1]);
        assert_eq!(old.len(), records_end(&old), "the old newest got none");
        // Reopened appending, it writes over the zeros it finds.
        let (log, recovery, seen) = open_collect(&env.storage, &appending).unwrap();
        assert_eq!((recovery.torn_tail, payloads(&seen)), (None, expected(60)));
        log.append_durable(&payload(61)).unwrap();
        drop(log);
        let after = env.disk.bytes(segments.last().unwrap());
        assert_eq!(after.len(), newest.len(), "written over the zeros");
        let (_, _, seen) = open_collect(&env.storage, &appending).unwrap();
        assert_eq!(payloads(&seen), expected(61));
    });
}

#[test]
fn zeros_in_place_of_records_that_others_chain_after_are_refused_not_cut() {
    // Guards against cutting records found after a run of zeros: they may be acknowledged records behind a zeroed page, not a batch whose pages landed out of order.
    on_both(|env| {
        build_log(env, &preallocating(small_config()), 20);
        let name = env.disk.segments().last().unwrap().clone();
        let mut bytes = env.disk.bytes(&name);
        let records = frames(&bytes);
        assert!(records.len() >= 3, "the last segment holds three records");
        let (hole, next) = (records[0].0, records[1].0);
        bytes[hole..next].fill(0);
        env.disk.put(&name, &bytes);
        let (offset, _, _) = assert_corrupt(
            Log::open(env.storage.clone(), small_config()).map(|_| ()),
            &env.describe(&name),
        );
        assert_eq!(offset as usize, hole);
        assert_eq!(env.disk.bytes(&name), bytes, "nothing was cut");
    });
}

/// A directory whose next read of one file returns `stale` instead: what a
/// reader sees when its copy of a page happened before a writer filled it
/// and its copy of the next page after.
#[derive(Debug)]
struct TornRead {
    inner: MemStorage,
    name: String,
    stale: Mutex<Option<Vec<u8>>>,
}

impl Storage for TornRead {
    fn describe(&self, name: &str) -> String {
        self.inner.describe(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn read(&self, name: &str, len_max: u64) -> io::Result<Vec<u8>> {
        if name == self.name
            && let Some(stale) = self.stale.lock().unwrap().take()
        {
            return Ok(stale);
        }
        self.inner.read(name, len_max)
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
    fn open_read(&self, name: &str) -> io::Result<Box<dyn payonce_log::StorageRead>> {
        self.inner.open_read(name)
    }
}

#[test]
fn a_reader_that_copied_a_page_before_the_writer_filled_it_reads_again() {
    // Guards against an audit beside a healthy writer reporting damage that a writer writing over zeros made it see for a moment.
    let mem = MemStorage::new();
    let config = preallocating(LogConfig::default());
    let (log, _) = Log::open(Arc::new(mem.clone()), config.clone()).unwrap();
    append_payloads(&log, 20);
    log.sync().unwrap();
    let name = "00000000000000000001.log".to_owned();
    let mut stale = mem.file(&name).unwrap();
    let records = frames(&stale);
    stale[records[15].0..records[17].0].fill(0);
    let storage = Arc::new(TornRead {
        inner: mem.clone(),
        name: name.clone(),
        stale: Mutex::new(Some(stale)),
    });
    let (read, recovery) = read_payloads(storage, &config);
    let recovery = recovery.unwrap();
    assert_eq!(read, expected(20));
    assert_eq!(recovery.torn_tail, None);
    // The same zeros on disk are damage: the reader reads again, then refuses.
    let mut holed = mem.file(&name).unwrap();
    holed[records[15].0..records[17].0].fill(0);
    mem.put_file(&name, &holed);
    let (_, scanned) = read_payloads(Arc::new(mem), &config);
    assert!(matches!(
        scanned,
        Err(payonce_log::OpenError::Log(LogError::Corrupt { .. }))
    ));
}

#[test]
fn zeros_after_the_records_of_a_segment_not_flagged_for_them_are_a_torn_tail() {
    // Guards against zeros hiding lost records in the default layout, where the writer never writes them.
    on_both(|env| {
        let appending = LogConfig {
            preallocate_len: 0,
            ..LogConfig::default()
        };
        let (log, _) = Log::open(env.storage.clone(), appending.clone()).unwrap();
        append_payloads(&log, 5);
        drop(log);
        // A crash before the checkpoint reached the last records.
        forget_checkpoint(env);
        let segment = env.disk.segments()[0].clone();
        let mut bytes = env.disk.bytes(&segment);
        let cut = batches(&bytes)[3];
        bytes[cut..].fill(0);
        env.disk.put(&segment, &bytes);
        let (_, recovery, seen) = open_collect(&env.storage, &appending).unwrap();
        assert_eq!(payloads(&seen), expected(3));
        let tail = recovery
            .torn_tail
            .expect("the zeros are reported and saved");
        assert_eq!(
            (tail.offset as usize, tail.len as usize),
            (cut, bytes.len() - cut)
        );
    });
}
