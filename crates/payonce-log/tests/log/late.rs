//! Opening for writing from a later segment: a reader that holds what the
//! records up to some seq mean (a snapshot of them) asks only for the
//! records after it. The walk starts at the segment holding the lowest seq
//! it must check, so the checkpoint, a witness and the snapshot's own head
//! are still checked, a torn tail is still cut, and damage in what it
//! reads is still refused.

use std::sync::Arc;

use payonce_log::{Damage, Head, HeadSource, Log, LogConfig, LogError, LogReader, MemWitness};

use crate::support::{
    Env, Kind, append_payloads, assert_corrupt, checkpoint_at, layouts, on_both, payload,
    small_config,
};

/// A log of `count` records, one batch each, closed cleanly.
fn closed_log(env: &Env, config: &LogConfig, count: u64) {
    let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
    append_payloads(&log, count);
    drop(log);
}

/// Opens for writing, handing out only the records after `after`, the
/// log required to hold `head`; the seqs handed out and the writer.
fn open_after(
    env: &Env,
    config: &LogConfig,
    after: u64,
    head: Head,
) -> Result<(Vec<u64>, Log), LogError> {
    let mut opening = Log::scan_to_open(env.storage.clone(), config.clone())?;
    opening.require(HeadSource::Snapshot, head)?;
    opening.start_after(after);
    let mut seqs = Vec::new();
    while let Some(record) = opening.next_record()? {
        assert_eq!(
            record.payload,
            payload(record.seq),
            "record {} is its own",
            record.seq
        );
        seqs.push(record.seq);
    }
    let (log, _) = opening.plan()?.execute()?;
    Ok((seqs, log))
}

/// The head of the batch ending at `seq`, as a read-only reader finds it.
fn head_at(env: &Env, config: &LogConfig, seq: u64) -> Option<Head> {
    LogReader::open(env.storage.clone(), config.clone())
        .unwrap()
        .head_at(seq)
        .unwrap()
}

#[test]
fn a_late_open_hands_out_the_records_after_the_snapshot_and_appends_after_the_last() {
    // Guards against a late start that skips records after the snapshot, or leaves the writer's chain where the walk began.
    for (kind, config) in layouts() {
        let env = Env::new(kind);
        closed_log(&env, &config, 60);
        assert!(
            env.disk.segments().len() >= 4,
            "{kind:?}: the log spans segments"
        );
        let head = head_at(&env, &config, 40).expect("every record ends a batch");
        let (seqs, log) = open_after(&env, &config, 40, head).unwrap();
        assert_eq!(seqs, (41..=60).collect::<Vec<_>>(), "{kind:?}");
        append_payloads(&log, 3);
        let reopened_head = log.head();
        drop(log);
        // A full open agrees on every record and on the head the late writer continued.
        let (log, recovery) = Log::open(env.storage.clone(), config.clone()).unwrap();
        assert_eq!(recovery.last_seq, 63);
        assert_eq!(log.head(), reopened_head);
        drop(log);
        let reader = LogReader::open(env.storage.clone(), config.clone()).unwrap();
        assert_eq!(
            reader.scan(|_| Ok::<(), ()>(())).unwrap().head,
            reopened_head
        );
    }
}

#[test]
fn a_late_open_reads_fewer_segments_than_a_full_one() {
    // Guards against a late start that still reads every segment: the point of a snapshot is an open that costs the tail.
    on_both(|env| {
        let config = small_config();
        closed_log(env, &config, 90);
        let segments = env.disk.segments().len() as u64;
        let head = head_at(env, &config, 85).unwrap();
        let mut opening = Log::scan_to_open(env.storage.clone(), config.clone()).unwrap();
        opening.require(HeadSource::Snapshot, head).unwrap();
        opening.start_after(85);
        while opening.next_record().unwrap().is_some() {}
        let (_, recovery) = opening.plan().unwrap().execute().unwrap();
        assert!(
            recovery.segments <= 2,
            "{} of {segments} segments read",
            recovery.segments
        );
        assert!(segments > 4);
    });
}

#[test]
fn a_snapshot_head_the_log_does_not_hold_is_refused() {
    // Guards against believing a snapshot of another history: its head must be the log's own at that seq.
    on_both(|env| {
        let config = small_config();
        closed_log(env, &config, 30);
        let real = head_at(env, &config, 20).unwrap();
        let mut other = real;
        other.digest.0[0] ^= 1;
        match open_after(env, &config, 20, other) {
            Err(LogError::HeadMismatch {
                from,
                expected,
                found,
                ..
            }) => {
                assert_eq!(from, HeadSource::Snapshot);
                assert_eq!((expected, found), (other, real));
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
        let beyond = Head {
            seq: 31,
            digest: real.digest,
        };
        assert!(matches!(
            open_after(env, &config, 31, beyond),
            Err(LogError::MissingHead {
                from: HeadSource::Snapshot,
                ..
            })
        ));
    });
}

#[test]
fn a_late_open_still_refuses_a_log_shorter_than_its_checkpoint() {
    // Guards against a snapshot hiding a cut log: the checkpoint's head is required, wherever the walk starts.
    on_both(|env| {
        let config = small_config();
        closed_log(env, &config, 60);
        let early = head_at(env, &config, 10).unwrap();
        let newest = env.disk.segments().last().unwrap().clone();
        env.disk.remove(&newest);
        match open_after(env, &config, 10, early) {
            Err(LogError::MissingHead { from, .. }) => assert_eq!(from, HeadSource::Checkpoint),
            Err(LogError::Corrupt { damage, .. }) => {
                assert!(
                    matches!(damage, Damage::Seal | Damage::MissingSegment),
                    "{damage:?}"
                )
            }
            other => panic!("expected the cut log refused, got {other:?}"),
        }
    });
}

#[test]
fn a_late_open_checks_a_witness_head_in_an_early_segment() {
    // Guards against a witness passed over: a rolled-back log is refused even if the snapshot is recent.
    on_both(|env| {
        let config = small_config();
        closed_log(env, &config, 60);
        let witness = Arc::new(MemWitness::new());
        let mut forged = head_at(env, &config, 5).unwrap();
        forged.digest.0[3] ^= 0x40;
        payonce_log::Witness::publish(&*witness, forged).unwrap();
        let head = head_at(env, &config, 55).unwrap();
        let mut opening = Log::scan_to_open(env.storage.clone(), config.clone()).unwrap();
        opening.witness(witness).unwrap();
        opening.require(HeadSource::Snapshot, head).unwrap();
        opening.start_after(55);
        let refused = loop {
            match opening.next_record() {
                Ok(Some(_)) => {}
                Ok(None) => break opening.plan().map(|_| ()),
                Err(error) => break Err(error),
            }
        };
        assert!(
            matches!(
                refused,
                Err(LogError::HeadMismatch {
                    from: HeadSource::Witness,
                    ..
                })
            ),
            "{refused:?}"
        );
    });
}

#[test]
fn a_late_open_refuses_a_foreign_segment_among_those_it_passes_over() {
    // Guards against a segment of another log, or a renamed one, slipping in among the segments a late start does not read.
    let env = Env::new(Kind::Mem);
    let config = small_config();
    closed_log(&env, &config, 60);
    let head = head_at(&env, &config, 55).unwrap();
    let second = env.disk.segments()[1].clone();
    let mut bytes = env.disk.bytes(&second);
    // Another log id, the header's checksum recomputed: whole, but foreign.
    bytes[16] ^= 0xFF;
    let crc = crc32fast::hash(&bytes[0..36]);
    bytes[36..40].copy_from_slice(&crc.to_le_bytes());
    env.disk.put(&second, &bytes);
    let (_, _, damage) =
        assert_corrupt(open_after(&env, &config, 55, head), &env.describe(&second));
    assert_eq!(damage, Damage::LogId);
}

#[test]
fn a_late_open_still_cuts_a_torn_tail() {
    // Guards against a late start that treats a torn tail differently from a full open.
    on_both(|env| {
        let config = small_config();
        closed_log(env, &config, 40);
        let head = head_at(env, &config, 30).unwrap();
        checkpoint_at(env, head);
        let newest = env.disk.segments().last().unwrap().clone();
        let mut bytes = env.disk.bytes(&newest);
        bytes.extend_from_slice(&[0xAB; 11]);
        env.disk.put(&newest, &bytes);
        let (seqs, log) = open_after(env, &config, 30, head).unwrap();
        assert_eq!(seqs, (31..=40).collect::<Vec<_>>());
        assert_eq!(log.last_seq(), 40);
        drop(log);
        let torn = env
            .disk
            .names()
            .into_iter()
            .filter(|name| name.contains(".torn-"))
            .count();
        assert_eq!(torn, 1, "the torn bytes are saved aside");
    });
}

#[test]
fn head_at_answers_only_where_a_batch_ends() {
    // Guards against a head found inside a batch: a snapshot binds only to a head the log itself holds.
    on_both(|env| {
        let config = small_config();
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        append_payloads(&log, 3);
        for seq in 4..=6 {
            log.append(&payload(seq)).unwrap();
        }
        log.sync().unwrap();
        let head = log.head();
        drop(log);
        assert_eq!(head_at(env, &config, 6), Some(head));
        assert_eq!(
            head_at(env, &config, 5),
            None,
            "5 is inside the batch 4..=6"
        );
        assert_eq!(head_at(env, &config, 7), None, "past the end");
        assert_eq!(head_at(env, &config, 0), Some(Head::GENESIS));
    });
}
