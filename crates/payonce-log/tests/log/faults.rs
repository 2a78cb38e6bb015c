//! Storage failures poison the writer: nothing is reported durable that was
//! not synced, and reopening recovers what reached the disk.

use std::io;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use payonce_log::{
    BATCH_HEADER_LEN, CrashMode, Fault, Log, LogError, SYNC_PROBE_BLOCK_MAX, SYNC_PROBE_FILE,
    Storage, overwrite_sync_rate, sync_rate,
};

use crate::support::{
    Disk, Env, Kind, SMALL_SEGMENT_LEN, append_payloads, expected, on_both, open_collect, payload,
    payloads, records_end, small_config,
};

/// Asserts `result` is `Poisoned` by an I/O failure of `op`; returns the cause's kind.
#[track_caller]
fn assert_poisoned<T: std::fmt::Debug>(result: Result<T, LogError>, op: &str) -> io::ErrorKind {
    match result {
        Err(error @ LogError::Poisoned { .. }) => {
            let message = error.to_string();
            assert!(message.contains("reopen the log"), "{message}");
            let LogError::Poisoned { cause } = error else {
                unreachable!()
            };
            match cause.as_ref() {
                LogError::Io {
                    op: found, source, ..
                } => {
                    assert_eq!(*found, op, "the poison names the original failure");
                    source.kind()
                }
                other => panic!("poisoned by {other:?}, expected an I/O failure of {op}"),
            }
        }
        other => panic!("expected a poisoned writer, got {other:?}"),
    }
}

/// Every later call on `log` is refused with the same poison.
#[track_caller]
fn stays_poisoned(log: &Log, op: &str, durable_seq: u64) {
    assert_poisoned(log.append(b"later"), op);
    assert_poisoned(log.wait_durable(log.last_seq()), op);
    assert_poisoned(log.sync(), op);
    assert_poisoned(log.append_durable(b"later"), op);
    assert_eq!(
        log.durable_seq(),
        durable_seq,
        "nothing more is reported durable"
    );
}

#[test]
fn a_failed_fdatasync_poisons_that_call_and_every_later_one() {
    // Guards against retrying an fsync that may have dropped the data, and reporting success.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 3);
        env.faults.arm(Fault::SyncFails { nth: 1 });
        let seq = log.append(&payload(4)).unwrap();
        assert_poisoned(log.wait_durable(seq), "fdatasync");
        stays_poisoned(&log, "fdatasync", 3);
        drop(log);
        let (_, _, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert!(payloads(&seen).starts_with(&expected(3)));
    });
}

#[test]
fn callers_already_waiting_when_a_sync_fails_are_poisoned_too() {
    // Guards against a waiter behind a failed flush being told its record is durable.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        let hold = env.faults.hold_syncs();
        thread::scope(|scope| {
            let leader = scope.spawn(|| log.append_durable(b"leader"));
            hold.wait_for_blocked(1);
            let follower = scope.spawn(|| log.append_durable(b"follower"));
            while log.stats().waiting < 1 {
                thread::yield_now();
            }
            env.faults.arm(Fault::SyncFails { nth: 1 });
            hold.release();
            assert_poisoned(leader.join().unwrap(), "fdatasync");
            assert_poisoned(follower.join().unwrap(), "fdatasync");
        });
        stays_poisoned(&log, "fdatasync", 0);
    });
}

/// One parked caller's record, its answer, and the durable seq it saw on
/// return.
type Woken = (u64, Result<(), LogError>, u64);

/// Parks 48 callers behind a held flush: 24 whose records it covers and 24
/// that need the next one. Then releases it (after arming `fault`, if any)
/// and returns what every caller saw, failing if one is never woken.
fn park_48_behind_a_held_flush(env: &Env, fault: Option<Fault>) -> (Arc<Log>, Vec<Woken>) {
    const EACH: u64 = 24;
    let log = Arc::new(Log::open(env.storage.clone(), small_config()).unwrap().0);
    let hold = env.faults.hold_syncs();
    let covered: Vec<u64> = (1..=EACH)
        .map(|seq| log.append(&payload(seq)).unwrap())
        .collect();
    let (answers, answered) = mpsc::channel::<Woken>();
    // `seq` None: append a record first, then wait for it.
    let wait = |seq: Option<u64>| {
        let log = Arc::clone(&log);
        let answers = answers.clone();
        thread::spawn(move || {
            let seq = seq.unwrap_or_else(|| log.append(b"next flush").unwrap());
            let result = log.wait_durable(seq);
            answers.send((seq, result, log.durable_seq())).unwrap();
        })
    };
    let leader = wait(Some(EACH));
    hold.wait_for_blocked(1);
    for seq in covered {
        wait(Some(seq));
    }
    for _ in 0..EACH {
        wait(None);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while log.stats().waiting < 2 * EACH {
        assert!(
            Instant::now() < deadline,
            "every caller parks behind the held flush"
        );
        thread::yield_now();
    }
    if let Some(fault) = fault {
        env.faults.arm(fault);
    }
    hold.release();
    let woken = (0..=2 * EACH)
        .map(|_| {
            answered
                .recv_timeout(Duration::from_secs(60))
                .expect("every parked caller is woken")
        })
        .collect();
    leader.join().unwrap();
    (log, woken)
}

#[test]
fn every_caller_parked_behind_a_flush_is_woken_when_it_lands() {
    // Guards against a waiter left parked, or woken before its record is durable.
    on_both(|env| {
        let (log, woken) = park_48_behind_a_held_flush(env, None);
        for (seq, result, durable_seq) in woken {
            result.unwrap();
            assert!(
                durable_seq >= seq,
                "{seq} answered durable at {durable_seq}"
            );
        }
        assert_eq!(log.durable_seq(), 48);
        assert_eq!(log.stats().waiting, 0);
    });
}

#[test]
fn every_caller_parked_behind_a_failing_flush_is_woken_poisoned() {
    // Guards against a waiter for the failed flush, or for the one after it, left parked or told it is durable.
    on_both(|env| {
        let (log, woken) = park_48_behind_a_held_flush(env, Some(Fault::SyncFails { nth: 1 }));
        for (_, result, _) in woken {
            assert_poisoned(result, "fdatasync");
        }
        assert_eq!(log.stats().waiting, 0);
        stays_poisoned(&log, "fdatasync", 0);
    });
}

#[test]
fn a_failed_write_poisons_the_writer() {
    // Guards against a lost write being followed by writes that leave a hole.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 2);
        env.faults.arm(Fault::WriteFails { nth: 1 });
        assert_poisoned(log.append_durable(&payload(3)), "write");
        stays_poisoned(&log, "write", 2);
        drop(log);
        let (log, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(2));
        assert_eq!(recovery.torn_tail, None);
        append_payloads(&log, 1);
    });
}

#[test]
fn a_short_write_poisons_and_its_partial_record_is_a_torn_tail_after_reopening() {
    // Guards against a partly written record being returned, or refusing to open after it.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 2);
        // Checksum, length and the low byte of the seq: the landed bytes
        // end in one that is not zero, so all of them count as torn.
        env.faults.arm(Fault::WriteShort { nth: 1, landed: 9 });
        assert_poisoned(log.append_durable(&payload(3)), "write");
        drop(log);
        let (log, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(2));
        assert_eq!(recovery.torn_tail.unwrap().len, 9);
        append_payloads(&log, 1);
        drop(log);
        let (_, _, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(3));
    });
}

#[test]
fn running_out_of_space_mid_record_poisons_and_reopening_cuts_the_partial_record() {
    // Guards against a full disk leaving a half record that is returned or blocks the log.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 3);
        env.faults.arm(Fault::NoSpace { budget: 30 });
        for seq in 4..=6 {
            log.append(&[seq as u8; 40]).unwrap();
        }
        let kind = assert_poisoned(log.sync(), "write");
        assert_eq!(kind, io::ErrorKind::StorageFull);
        stays_poisoned(&log, "write", 3);
        drop(log);
        env.faults.disarm_all();
        let (_, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(3));
        let tail = recovery.torn_tail.unwrap();
        assert_eq!(tail.len, 30);
    });
}

/// Appends until the log has rolled at least once past `segments` segments.
fn append_until_roll(env: &Env, log: &Log) -> Result<u64, LogError> {
    let segments = env.disk.segments().len();
    let mut seq = 0;
    for _ in 0..100 {
        seq = log.append_durable(&payload(log.last_seq() + 1))?;
        if env.disk.segments().len() > segments {
            break;
        }
    }
    Ok(seq)
}

#[test]
fn a_failure_at_any_step_of_a_roll_poisons_and_reopening_recovers() {
    // Guards against a half-done roll leaving a log that will not open or lost records.
    let faults = [
        ("create", Fault::CreateFails { nth: 1 }),
        ("rename", Fault::RenameFails { nth: 1 }),
        ("sync directory", Fault::DirSyncFails { nth: 1 }),
    ];
    for (op, fault) in faults {
        on_both(|env| {
            let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
            append_payloads(&log, 3);
            let durable = log.durable_seq();
            env.faults.arm(fault);
            assert_poisoned(append_until_roll(env, &log), op);
            let acknowledged = log.durable_seq();
            assert!(acknowledged >= durable);
            drop(log);
            let (log, _, seen) = open_collect(&env.storage, &small_config()).unwrap();
            assert!(seen.len() as u64 >= acknowledged);
            assert_eq!(payloads(&seen), expected(seen.len() as u64), "{op}");
            assert!(!env.disk.names().iter().any(|name| name.ends_with(".tmp")));
            append_until_roll(env, &log).unwrap();
        });
    }
}

#[test]
fn a_failed_seal_write_leaves_a_roll_that_reopening_finishes() {
    // Guards against the window between a new segment's rename and the old one's seal.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 3);
        // Fill the first segment without rolling, then fail the write after
        // the new segment's header: the seal.
        let segments = env.disk.segments().len();
        let mut next = log.last_seq() + 1;
        loop {
            let len = records_end(&env.disk.bytes(&env.disk.segments()[segments - 1]));
            let frame = BATCH_HEADER_LEN + 16 + payload(next).len().div_ceil(8) * 8;
            if len + frame + 16 > SMALL_SEGMENT_LEN {
                break;
            }
            log.append_durable(&payload(next)).unwrap();
            next += 1;
        }
        // The roll writes the new header (write 1), then the seal (write 2).
        env.faults.arm(Fault::WriteFails { nth: 2 });
        // A record of the largest size cannot fit either.
        let last_payload = vec![9; 64];
        assert_poisoned(log.append_durable(&last_payload), "write");
        drop(log);
        let (_, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert!(recovery.interrupted_roll, "{recovery:?}");
        assert_eq!(payloads(&seen), expected(next - 1));
    });
}

#[test]
fn a_directory_sync_that_failed_in_a_roll_is_redone_before_anything_is_written_after_it() {
    // Guards against records synced into a segment whose directory entry a power loss drops.
    let env = Env::new(Kind::Mem);
    let Disk::Mem(mem) = &env.disk else {
        unreachable!("an in-memory environment")
    };
    let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
    append_payloads(&log, 3);
    env.faults.arm(Fault::DirSyncFails { nth: 1 });
    assert_poisoned(append_until_roll(&env, &log), "sync directory");
    drop(log);
    // The same process reopens: the new segment's entry is visible, not durable.
    let (log, _, _) = open_collect(&env.storage, &small_config()).unwrap();
    let acknowledged = log.append_durable(&payload(log.last_seq() + 1)).unwrap();
    drop(log);
    for seed in 0..16 {
        let crashed: Arc<dyn Storage> = Arc::new(mem.crash(CrashMode::DropUnsynced, seed));
        let (_, _, seen) = open_collect(&crashed, &small_config())
            .unwrap_or_else(|error| panic!("seed {seed}: a power loss leaves {error}"));
        assert!(seen.len() as u64 >= acknowledged, "seed {seed}");
        assert_eq!(payloads(&seen), expected(seen.len() as u64), "seed {seed}");
    }
}

#[test]
fn a_seal_that_landed_but_was_never_synced_is_synced_when_reopening() {
    // Guards against records synced after a seal that a power loss drops.
    let env = Env::new(Kind::Mem);
    let Disk::Mem(mem) = &env.disk else {
        unreachable!("an in-memory environment")
    };
    let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
    append_payloads(&log, 3);
    // Fill the segment without rolling, as in the test above.
    let mut next = log.last_seq() + 1;
    loop {
        let segments = env.disk.segments();
        let len = records_end(&env.disk.bytes(segments.last().unwrap()));
        let frame = BATCH_HEADER_LEN + 16 + payload(next).len().div_ceil(8) * 8;
        if len + frame + 16 > SMALL_SEGMENT_LEN {
            break;
        }
        log.append_durable(&payload(next)).unwrap();
        next += 1;
    }
    // The roll writes the new header (write 1), then the seal (write 2),
    // which lands whole before the write reports failure.
    env.faults.arm(Fault::WriteShort { nth: 2, landed: 16 });
    assert_poisoned(log.append_durable(&[9; 64]), "write");
    drop(log);
    // The same process reopens: the seal is visible, not durable.
    let (log, _, _) = open_collect(&env.storage, &small_config()).unwrap();
    let acknowledged = log.append_durable(&payload(log.last_seq() + 1)).unwrap();
    drop(log);
    for seed in 0..16 {
        let crashed: Arc<dyn Storage> = Arc::new(mem.crash(CrashMode::DropUnsynced, seed));
        let (_, _, seen) = open_collect(&crashed, &small_config())
            .unwrap_or_else(|error| panic!("seed {seed}: a power loss leaves {error}"));
        assert!(seen.len() as u64 >= acknowledged, "seed {seed}");
    }
}

#[test]
fn the_sync_probe_syncs_every_block_and_leaves_no_file_behind() {
    // Guards against a benchmark's disk limit measured without syncing, and a probe file left in a directory.
    on_both(|env| {
        // Beside a log, as a benchmark runs it (this also creates the directory).
        drop(Log::open(env.storage.clone(), small_config()).unwrap());
        let storage = env.storage.as_ref();
        let probe_left = || {
            storage
                .list()
                .unwrap()
                .contains(&SYNC_PROBE_FILE.to_owned())
        };

        type Probe = fn(&dyn Storage, usize, Duration) -> io::Result<f64>;
        for probe in [sync_rate as Probe, overwrite_sync_rate] {
            let rate = probe(storage, 128, Duration::from_millis(20)).unwrap();
            assert!(rate > 0.0, "{rate}");
            assert!(!probe_left());

            // A failing sync ends the probe at once, with the failure.
            env.faults.arm(Fault::SyncFails { nth: 1 });
            assert!(probe(storage, 128, Duration::from_secs(5)).is_err());
            assert!(!probe_left());

            for block_len in [0, SYNC_PROBE_BLOCK_MAX + 1] {
                let error = probe(storage, block_len, Duration::from_millis(1)).unwrap_err();
                assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
                assert!(
                    error.to_string().contains(&block_len.to_string()),
                    "{error}"
                );
                assert!(!probe_left());
            }
        }
    });
}

#[test]
fn opens_that_fail_while_saving_a_torn_tail_leave_no_copy_behind() {
    // Guards against repeated failed opens piling up empty `.torn-N` files in an incident directory.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 2);
        env.faults.arm(Fault::WriteShort { nth: 1, landed: 9 });
        assert_poisoned(log.append_durable(&payload(3)), "write");
        drop(log);
        let torn_copies = || -> Vec<String> {
            env.storage
                .list()
                .unwrap()
                .into_iter()
                .filter(|name| name.contains(".torn-"))
                .collect()
        };
        for _ in 0..3 {
            // The copy's write fails, then its sync: the open refuses each time.
            env.faults.arm(Fault::WriteFails { nth: 1 });
            assert!(Log::open(env.storage.clone(), small_config()).is_err());
            env.faults.disarm_all();
            env.faults.arm(Fault::SyncFails { nth: 1 });
            assert!(Log::open(env.storage.clone(), small_config()).is_err());
            env.faults.disarm_all();
            assert_eq!(torn_copies(), Vec::<String>::new());
        }
        let (_, recovery) = Log::open(env.storage.clone(), small_config()).unwrap();
        let saved_as = recovery.torn_tail.unwrap().saved_as.unwrap();
        assert_eq!(torn_copies().len(), 1, "one copy, once the open succeeds");
        assert!(saved_as.ends_with(&torn_copies()[0]), "{saved_as}");
    });
}

/// A storage that counts the removals of files that do not exist: a
/// repair that cleans up after itself removes only what it made.
#[derive(Debug)]
struct CountingRemovals {
    inner: Arc<dyn Storage>,
    missing: std::sync::atomic::AtomicUsize,
}

impl Storage for CountingRemovals {
    fn describe(&self, name: &str) -> String {
        self.inner.describe(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn create_new(&self, name: &str) -> io::Result<Box<dyn payonce_log::StorageFile>> {
        self.inner.create_new(name)
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn payonce_log::StorageFile>> {
        self.inner.open_append(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        let result = self.inner.remove(name);
        if matches!(&result, Err(error) if error.kind() == io::ErrorKind::NotFound) {
            self.missing
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        result
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn try_lock(&self) -> io::Result<Option<Box<dyn payonce_log::StorageLock>>> {
        self.inner.try_lock()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn payonce_log::StorageRead>> {
        self.inner.open_read(name)
    }
}

#[test]
fn an_open_whose_torn_copy_cannot_be_created_removes_nothing() {
    // A removal of a copy never made fails where no fault was injected: a
    // simulated world counted it as a storage failure of its own.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 2);
        env.faults.arm(Fault::WriteShort { nth: 1, landed: 9 });
        assert_poisoned(log.append_durable(&payload(3)), "write");
        drop(log);
        let counting = Arc::new(CountingRemovals {
            inner: env.storage.clone(),
            missing: Default::default(),
        });
        env.faults.arm(Fault::CreateFails { nth: 1 });
        let error = Log::open(counting.clone(), small_config()).unwrap_err();
        assert!(error.to_string().contains("create"), "{error}");
        env.faults.disarm_all();
        assert_eq!(
            counting.missing.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "removed a file that was never made"
        );
        let (_, recovery) = Log::open(counting.clone(), small_config()).unwrap();
        assert!(recovery.torn_tail.unwrap().saved_as.is_some());
    });
}
