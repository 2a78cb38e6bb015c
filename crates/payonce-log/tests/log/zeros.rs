//! The zeros a writer writes ahead of its records: most batches overwrite
//! them instead of growing the file, a scan ends cleanly where they start,
//! and a power loss while they are being overwritten leaves them, or a torn
//! tail, like any other unsynced write.

use std::sync::Arc;

use payonce_log::{CrashMode, Fault, Log, LogConfig, PREALLOCATE_LEN, Storage};

use crate::support::{
    Disk, Env, Kind, append_payloads, assert_corrupt, build_log, expected, frames, on_both,
    open_collect, payload, payloads, preallocating, records_end, small_config,
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
        let allocated = 40 + 144 + PREALLOCATE_LEN as usize;
        assert_eq!(env.disk.bytes(&segment).len(), allocated);
        for byte in 0..100 {
            log.append_durable(&[byte; 128]).unwrap();
        }
        let bytes = env.disk.bytes(&segment);
        assert_eq!(bytes.len(), allocated, "later batches land inside the file");
        assert_eq!(records_end(&bytes), 40 + 101 * 144);
        assert!(all_zero(&bytes[40 + 101 * 144..]));
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
            assert!(bytes.len() <= 400, "{name} is {} bytes", bytes.len());
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
    // Guards against zeros written ahead unasked, and against a log written one way refusing to open the other way.
    on_both(|env| {
        let appending = LogConfig::default();
        let (log, _) = Log::open(env.storage.clone(), appending.clone()).unwrap();
        append_payloads(&log, 5);
        log.sync().unwrap();
        drop(log);
        let segment = env.disk.segments()[0].clone();
        let bytes = env.disk.bytes(&segment);
        assert_eq!(
            bytes.len(),
            records_end(&bytes),
            "no zeros after the records"
        );
        // Reopened with zeros ahead, it grows them; reopened without, it
        // appends over them as over any zeros it finds.
        for (round, config) in [preallocating(LogConfig::default()), appending.clone()]
            .iter()
            .enumerate()
        {
            let (log, recovery, seen) = open_collect(&env.storage, config).unwrap();
            assert_eq!(recovery.torn_tail, None);
            assert_eq!(payloads(&seen), expected(5 + round as u64));
            log.append_durable(&payload(6 + round as u64)).unwrap();
        }
        let bytes = env.disk.bytes(&segment);
        assert!(bytes.len() > records_end(&bytes), "the zeros stay");
        let (_, _, seen) = open_collect(&env.storage, &appending).unwrap();
        assert_eq!(payloads(&seen), expected(7));
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
