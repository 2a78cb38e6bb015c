//! Records come back exactly, in order, across segments and reopenings.

use payonce_log::{
    Durability, Log, LogConfig, LogError, LogReader, MemStorage, SEGMENT_HEADER_LEN, Storage,
};
use std::sync::Arc;

use crate::support::{
    append_payloads, build_log, expected, on_both, open_collect, payload, payloads, read_payloads,
    small_config,
};

#[test]
fn records_come_back_exactly_across_segments_and_reopenings() {
    // Guards against records lost, reordered or changed by rolling or reopening.
    on_both(|env| {
        let config = small_config();
        let mut count = 0;
        for round in 0..4 {
            let (log, recovery, seen) = open_collect(&env.storage, &config).unwrap();
            assert_eq!(payloads(&seen), expected(count), "round {round}");
            assert_eq!(recovery.records, count);
            assert_eq!(recovery.last_seq, count);
            assert_eq!(recovery.torn_tail, None);
            assert_eq!(log.last_seq(), count);
            assert_eq!(log.durable_seq(), count);
            append_payloads(&log, 25);
            count += 25;
        }
        assert!(env.disk.segments().len() > 4, "the log rolled");
        let (read, recovery) = read_payloads(env.storage.clone(), &config);
        let recovery = recovery.unwrap();
        assert_eq!(read, expected(count));
        assert_eq!(recovery.segments as usize, env.disk.segments().len());
    });
}

#[test]
fn an_empty_directory_becomes_a_log_with_its_first_segment() {
    // Guards against a fresh log that leaves nothing on disk to recognise it by.
    on_both(|env| {
        let (log, recovery) = Log::open(env.storage.clone(), LogConfig::default()).unwrap();
        assert_eq!(recovery.records, 0);
        assert_eq!(recovery.segments, 1);
        assert_eq!(log.last_seq(), 0);
        assert_eq!(env.disk.segments(), ["00000000000000000001.log"]);
        let header = env.disk.bytes("00000000000000000001.log");
        assert_eq!(header.len(), SEGMENT_HEADER_LEN);
        assert_eq!(&header[..8], b"PAYONCE\0");
        assert_eq!(
            u64::from_le_bytes(header[16..24].try_into().unwrap()),
            log.log_id()
        );
        drop(log);
        let reader = LogReader::open(env.storage.clone(), LogConfig::default()).unwrap();
        assert_eq!(reader.scan(|_| Ok::<(), ()>(())).unwrap().records, 0);
    });
}

#[test]
fn appending_after_a_reopen_continues_the_sequence_and_the_chain() {
    // Guards against a reopened writer restarting sequence numbers or the chain.
    on_both(|env| {
        let config = small_config();
        build_log(env, &config, 5);
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        assert_eq!(log.append_durable(&payload(6)).unwrap(), 6);
        drop(log);
        let (_, recovery, seen) = open_collect(&env.storage, &config).unwrap();
        assert_eq!(payloads(&seen), expected(6));
        assert_eq!(recovery.last_seq, 6);
    });
}

#[test]
fn files_that_are_not_segments_are_left_alone() {
    // Guards against choking on, or deleting, a lock file or an index beside the segments.
    on_both(|env| {
        let config = small_config();
        build_log(env, &config, 12);
        env.disk.put("notes.txt", b"kept");
        env.disk.put("1.log", b"not twenty digits");
        env.disk
            .put("00000000000000000001.log.torn-80", b"evidence");
        let (_, _, seen) = open_collect(&env.storage, &config).unwrap();
        assert_eq!(payloads(&seen), expected(12));
        assert_eq!(env.disk.bytes("notes.txt"), b"kept");
        assert_eq!(env.disk.bytes("1.log"), b"not twenty digits");
    });
}

#[test]
fn leftover_temporary_segments_are_removed_by_a_writer_and_ignored_by_a_reader() {
    // Guards against crash debris from a roll being read as a segment or piling up.
    on_both(|env| {
        let config = small_config();
        build_log(env, &config, 3);
        let tmp = "00000000000000000004.log.tmp";
        env.disk.put(tmp, b"PAYONCE\0 half a header");
        let reader = LogReader::open(env.storage.clone(), config.clone()).unwrap();
        assert_eq!(reader.scan(|_| Ok::<(), ()>(())).unwrap().records, 3);
        assert!(env.disk.names().contains(&tmp.to_owned()));
        let (_, _, seen) = open_collect(&env.storage, &config).unwrap();
        assert_eq!(payloads(&seen), expected(3));
        assert!(!env.disk.names().contains(&tmp.to_owned()));
    });
}

#[test]
fn pending_records_share_one_write_and_one_fdatasync() {
    // Guards against group commit degrading to a write and a sync per record.
    let mem = MemStorage::new();
    let (log, _) = Log::open(Arc::new(mem.clone()), LogConfig::default()).unwrap();
    let before = mem.stats();
    let mut last = 0;
    for seq in 1..=50 {
        last = log.append(&payload(seq)).unwrap();
    }
    assert_eq!(mem.stats(), before, "append does no I/O");
    log.wait_durable(last).unwrap();
    let after = mem.stats();
    assert_eq!(after.writes - before.writes, 1);
    assert_eq!(after.syncs - before.syncs, 1);
    assert_eq!(log.stats().flushes, 1);
    log.wait_durable(7).unwrap();
    assert_eq!(mem.stats(), after, "an already durable record needs no I/O");
}

#[test]
fn durability_never_writes_but_never_syncs() {
    // Guards against Never silently syncing (it is for benchmarks) or not writing at all.
    let mem = MemStorage::new();
    let config = LogConfig {
        durability: Durability::Never,
        ..small_config()
    };
    let (log, _) = Log::open(Arc::new(mem.clone()), config.clone()).unwrap();
    let syncs = mem.stats().syncs;
    append_payloads(&log, 30);
    assert_eq!(mem.stats().syncs, syncs);
    drop(log);
    // A process crash keeps what was written ...
    let (_, _, seen) = open_collect(&(Arc::new(mem.clone()) as Arc<dyn Storage>), &config).unwrap();
    assert_eq!(payloads(&seen), expected(30));
    // ... a power loss may not: records go missing, or the log may not even
    // open, since not even new segments were synced.
    let crashed: Arc<dyn Storage> = Arc::new(mem.crash(payonce_log::CrashMode::DropUnsynced, 1));
    if let Ok((_, recovery, _)) = open_collect(&crashed, &config) {
        assert!(recovery.records < 30);
    }
}

#[test]
fn a_record_too_large_is_refused_without_writing_or_poisoning() {
    // Guards against an oversized record reaching the disk or breaking the writer.
    on_both(|env| {
        let config = small_config();
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        let before = env.disk.files();
        let error = log.append(&[7; 65]).unwrap_err();
        assert!(
            matches!(error, LogError::RecordTooLarge { len: 65, max: 64 }),
            "{error:?}"
        );
        assert!(error.to_string().contains("65 bytes"), "{error}");
        assert_eq!(log.last_seq(), 0);
        assert_eq!(env.disk.files(), before);
        assert_eq!(log.append_durable(&[7; 64]).unwrap(), 1);
    });
}

#[test]
fn empty_payloads_round_trip() {
    // Guards against a zero-length record being mistaken for the end of a segment.
    on_both(|env| {
        let config = small_config();
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        for _ in 0..20 {
            log.append(b"").unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let (_, recovery, seen) = open_collect(&env.storage, &config).unwrap();
        assert_eq!(recovery.records, 20);
        assert!(seen.iter().all(|record| record.payload.is_empty()));
    });
}

#[test]
fn dropping_a_writer_flushes_what_was_appended() {
    // Guards against appended records silently vanishing when the writer is dropped.
    on_both(|env| {
        let config = small_config();
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        for seq in 1..=9 {
            log.append(&payload(seq)).unwrap();
        }
        drop(log);
        let (_, _, seen) = open_collect(&env.storage, &config).unwrap();
        assert_eq!(payloads(&seen), expected(9));
    });
}
