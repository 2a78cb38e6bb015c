//! Read-only access: beside a writer, from any sequence number, and one
//! record at a time by position.

use std::sync::Arc;
use std::thread;

use payonce_log::{
    Damage, FsStorage, Log, LogConfig, LogError, LogReader, MemStorage, Position, segments_len,
};

use crate::support::{
    Env, append_payloads, build_log, expected, frames, on_both, open_collect, payload, payloads,
    records_end, small_config,
};

#[test]
fn a_directory_without_segments_is_not_a_log() {
    // Guards against an audit of the wrong directory reporting an empty log.
    let dir = tempfile::tempdir().unwrap();
    for path in [dir.path().to_path_buf(), dir.path().join("missing")] {
        let error =
            LogReader::open(Arc::new(FsStorage::new(&path)), LogConfig::default()).unwrap_err();
        assert!(matches!(error, LogError::NotALog { .. }), "{error:?}");
        assert!(error.to_string().contains("not a payonce log"), "{error}");
    }
    let error = LogReader::open(Arc::new(MemStorage::new()), LogConfig::default()).unwrap_err();
    assert!(matches!(error, LogError::NotALog { .. }), "{error:?}");
    assert!(
        !dir.path().join("missing").exists(),
        "a reader creates nothing"
    );
}

#[test]
fn a_reader_reports_a_torn_tail_without_cutting_it_or_taking_the_lock() {
    // Guards against an audit tool modifying the log or blocking its writer.
    on_both(|env| {
        build_log(env, &small_config(), 20);
        let last = env.disk.segments().last().unwrap().clone();
        let mut bytes = env.disk.bytes(&last);
        let clean_len = records_end(&bytes);
        bytes.truncate(clean_len);
        bytes.extend_from_slice(&[0xEE; 13]);
        env.disk.put(&last, &bytes);
        let reader = LogReader::open(env.storage.clone(), small_config()).unwrap();
        let recovery = reader.scan(|_| Ok::<(), ()>(())).unwrap();
        assert_eq!(recovery.records, 20);
        let tail = recovery.torn_tail.unwrap();
        assert_eq!(
            (tail.offset as usize, tail.len, tail.saved_as),
            (clean_len, 13, None)
        );
        assert_eq!(env.disk.bytes(&last), bytes, "the reader cut nothing");
        // A writer can open beside the reader, and then cuts the tail.
        let (_, recovery, _) = open_collect(&env.storage, &small_config()).unwrap();
        assert!(recovery.torn_tail.unwrap().saved_as.is_some());
    });
}

#[test]
fn a_reader_beside_a_rolling_writer_always_sees_a_verified_prefix() {
    // Guards against a reader refusing, or misreading, a log a writer is appending to and rolling.
    on_both(|env| {
        let config = small_config();
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        append_payloads(&log, 1);
        let reader = LogReader::open(env.storage.clone(), config.clone()).unwrap();
        let total = 300;
        let done = std::sync::atomic::AtomicBool::new(false);
        thread::scope(|scope| {
            scope.spawn(|| {
                append_payloads(&log, total - 1);
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            let mut scans = 0;
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let mut read = Vec::new();
                let recovery = reader
                    .scan(|record| {
                        read.push(record.payload.to_vec());
                        Ok::<(), ()>(())
                    })
                    .unwrap_or_else(|error| panic!("scan {scans} refused: {error:?}"));
                assert_eq!(read, expected(read.len() as u64), "scan {scans}");
                assert_eq!(recovery.records as usize, read.len());
                scans += 1;
                if finished {
                    assert_eq!(read.len() as u64, total);
                    break;
                }
            }
            eprintln!("{scans} scans while the writer appended");
        });
    });
}

#[test]
fn records_from_any_seq_start_exactly_there() {
    // Guards against an iterator that starts in the wrong segment or skips a record.
    on_both(|env| {
        build_log(env, &small_config(), 40);
        let reader = LogReader::open(env.storage.clone(), small_config()).unwrap();
        for from in 0..=42 {
            let seqs: Vec<u64> = reader
                .records_from(from)
                .unwrap()
                .map(|record| record.unwrap().seq)
                .collect();
            let start = from.max(1);
            assert_eq!(seqs, (start..=40).collect::<Vec<_>>(), "from {from}");
        }
        let record = reader.records_from(33).unwrap().next().unwrap().unwrap();
        assert_eq!(record.payload, payload(33));
    });
}

#[test]
fn records_from_verifies_the_segment_it_starts_in() {
    // Guards against seeking past damage without checking it.
    on_both(|env| {
        build_log(env, &small_config(), 40);
        let segments = env.disk.segments();
        let name = &segments[2];
        let mut bytes = env.disk.bytes(name);
        let (offset, seq) = frames(&bytes)[0];
        bytes[offset + 8] ^= 4;
        env.disk.put(name, &bytes);
        let reader = LogReader::open(env.storage.clone(), small_config()).unwrap();
        let from = seq.unwrap() + 2;
        let results: Vec<_> = reader.records_from(from).unwrap().collect();
        assert_eq!(results.len(), 1, "one error, then the iterator ends");
        let error = results.into_iter().next().unwrap().unwrap_err();
        assert!(
            matches!(&error, LogError::Corrupt { file, offset: at, .. }
                if *file == env.describe(name) && *at == offset as u64),
            "{error:?}"
        );
    });
}

#[test]
fn read_at_fetches_and_verifies_exactly_the_record_at_a_position() {
    // Guards against an index position returning another record or unverified bytes.
    on_both(|env| {
        let config = small_config();
        build_log(env, &config, 30);
        let (log, _, seen) = open_collect(&env.storage, &config).unwrap();
        drop(log);
        let reader = LogReader::open(env.storage.clone(), config.clone()).unwrap();
        let mut scanned = Vec::new();
        reader
            .scan(|record| {
                scanned.push(record.position);
                Ok::<(), ()>(())
            })
            .unwrap();
        let positions: Vec<Position> = seen.iter().map(|record| record.position).collect();
        assert_eq!(positions, scanned, "writer and reader agree on positions");
        for record in &seen {
            assert_eq!(
                reader.read_at(record.seq, record.position).unwrap(),
                record.payload
            );
        }
        let record = &seen[11];
        let wrong_seq = reader.read_at(record.seq + 1, record.position).unwrap_err();
        assert!(
            matches!(
                wrong_seq,
                LogError::Corrupt {
                    damage: Damage::Sequence,
                    ..
                }
            ),
            "{wrong_seq:?}"
        );
        let wrong_chain = Position {
            chain: record.position.chain ^ 1,
            ..record.position
        };
        let error = reader.read_at(record.seq, wrong_chain).unwrap_err();
        assert!(
            matches!(
                error,
                LogError::Corrupt {
                    damage: Damage::Checksum,
                    ..
                }
            ),
            "{error:?}"
        );
        // A flipped payload byte is caught without a scan.
        let name = format!("{:020}.log", record.position.segment);
        let mut bytes = env.disk.bytes(&name);
        bytes[record.position.offset as usize + 12] ^= 0x10;
        env.disk.put(&name, &bytes);
        let error = reader.read_at(record.seq, record.position).unwrap_err();
        assert!(
            matches!(&error, LogError::Corrupt { file, offset, seq, .. }
                if *file == env.describe(&name) && *offset == record.position.offset && *seq == record.seq),
            "{error:?}"
        );
        assert_eq!(payloads(&seen), expected(30));
    });
}

#[test]
fn a_visitor_error_stops_a_read_only_scan() {
    // Guards against an audit tool's failure being swallowed by the scan.
    let env = Env::new(crate::support::Kind::Mem);
    build_log(&env, &small_config(), 5);
    let reader = LogReader::open(env.storage.clone(), small_config()).unwrap();
    let result = reader.scan(|record| {
        if record.seq == 2 {
            Err(record.seq)
        } else {
            Ok(())
        }
    });
    assert!(matches!(result, Err(payonce_log::OpenError::Visit(2))));
}

#[test]
fn segments_len_counts_the_segment_files_only() {
    // Guards against sizing an open by files that are not the log's, or failing before the log exists.
    let parent = tempfile::tempdir().unwrap();
    let missing = FsStorage::new(parent.path().join("not-yet"));
    assert_eq!(segments_len(&missing).unwrap(), 0);
    on_both(|env| {
        assert_eq!(segments_len(&*env.storage).unwrap(), 0);
        build_log(env, &small_config(), 30);
        let segments = env.disk.segments();
        let first = &segments[0];
        // Names a segment's could be mistaken for: a roll's debris, a
        // torn tail saved aside, anything else.
        for other in [
            format!("{first}.tmp"),
            format!("{first}.torn-40"),
            "notes.txt".to_owned(),
        ] {
            env.disk.put(&other, b"not a segment");
        }
        assert!(segments.len() > 1);
        let expected: usize = segments.iter().map(|name| env.disk.bytes(name).len()).sum();
        assert_eq!(segments_len(&*env.storage).unwrap(), expected as u64);
    });
}

#[test]
fn an_empty_newest_segment_is_the_torn_tail_a_reader_reports_as_a_writer_does() {
    // Guards against verify calling a log clean that the next writer repairs, saving `.torn-0`.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 2);
        drop(log);
        // A segment renamed into place whose header never reached the disk.
        env.disk.put("00000000000000000003.log", b"");
        let reader = LogReader::open(env.storage.clone(), small_config()).unwrap();
        let read = reader.scan(|_| Ok::<(), ()>(())).unwrap();
        let torn = read
            .torn_tail
            .expect("the reader reports the empty segment");
        assert_eq!((torn.segment, torn.offset, torn.len), (3, 0, 0));
        let (_, opened) = Log::open(env.storage.clone(), small_config()).unwrap();
        let repaired = opened.torn_tail.unwrap();
        assert_eq!((repaired.segment, repaired.offset, repaired.len), (3, 0, 0));
    });
}
