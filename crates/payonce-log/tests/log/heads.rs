//! Heads a log must contain: its checkpoint's, a witness's, and one expected
//! by the caller. A log that ends before one is refused naming both heads;
//! one that holds another batch there (an edit, even with every checksum
//! recomputed) is refused as a mismatch.

use std::io;
use std::sync::Arc;

use payonce_log::{
    CHECKPOINT_FILE, Head, HeadSource, Log, LogConfig, LogError, LogReader, MemWitness, OpenError,
    Witness, batch_digest,
};

use crate::support::{
    Env, append_batch, append_payloads, batches, checkpoint_at, checkpoint_at_generation, expected,
    frames, layouts, on_both, open_collect, payload, payloads, read_payloads, records_end,
    small_config,
};

/// A log of `count` records, a batch each, closed cleanly; its head.
fn closed_log(env: &Env, config: &LogConfig, count: u64) -> Head {
    let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
    append_payloads(&log, count);
    let head = log.head();
    drop(log);
    head
}

/// The head of the records `payload(1..=count)`, one batch each: what any
/// backend computes from the payloads alone.
fn head_of_single_batches(count: u64) -> Head {
    let mut digest = payonce_log::Digest::GENESIS;
    for seq in 1..=count {
        digest = batch_digest(&digest, seq, [payload(seq).as_slice()]);
    }
    Head { seq: count, digest }
}

#[test]
fn the_head_is_the_chain_digest_of_the_payloads_by_batch() {
    // Guards against the file log hashing other bytes than the documented scheme, which the other backends share.
    on_both(|env| {
        let head = closed_log(env, &small_config(), 12);
        assert_eq!(head, head_of_single_batches(12));
        let (log, recovery) = Log::open(env.storage.clone(), small_config()).unwrap();
        assert_eq!(recovery.head, head);
        assert_eq!(recovery.checkpoint, Some(head), "a clean close checkpoints");
        assert_eq!(log.head(), head);
        // Several records flushed together are one batch of the chain.
        for seq in 13..=15 {
            log.append(&payload(seq)).unwrap();
        }
        log.sync().unwrap();
        let batch = [13, 14, 15].map(payload);
        let digest = batch_digest(&head.digest, 13, batch.iter().map(Vec::as_slice));
        assert_eq!(log.head(), Head { seq: 15, digest });
    });
}

#[test]
fn every_cut_of_a_cleanly_closed_log_is_refused() {
    // Guards against a shortened log (a forgotten claim, a second send) verifying clean.
    for (kind, layout) in layouts() {
        let source = Env::new(kind);
        let head = closed_log(&source, &layout, 20);
        let files = source.disk.files();
        let segments = source.disk.segments();
        let mut cuts = 0;
        // Every segment cut at every batch boundary and inside every batch,
        // and every newer segment removed; also an empty and a header-only
        // newest segment.
        for (index, name) in segments.iter().enumerate() {
            let bytes = &files[name];
            let end = records_end(bytes);
            let mut lens: Vec<usize> = batches(bytes).into_iter().collect();
            lens.extend(frames(bytes).iter().map(|(offset, _)| offset + 3));
            lens.extend([0, 40, end.saturating_sub(1)]);
            if index + 1 < segments.len() {
                lens.push(end);
            }
            for len in lens {
                if len >= end && index + 1 == segments.len() {
                    continue;
                }
                let env = Env::with_files(kind, &files);
                env.disk.put(name, &bytes[..len.min(bytes.len())]);
                for newer in &segments[index + 1..] {
                    env.disk.remove(newer);
                }
                let before = env.disk.files();
                let error = Log::open(env.storage.clone(), layout.clone())
                    .map(|_| ())
                    .unwrap_err();
                let refused = match &error {
                    LogError::MissingHead {
                        from: HeadSource::Checkpoint,
                        expected,
                        head: ended,
                        ..
                    } => {
                        assert_eq!(*expected, head);
                        assert!(ended.seq < head.seq, "{kind:?} {name} cut at {len}");
                        let text = error.to_string();
                        assert!(text.contains(&head.to_string()), "{text}");
                        assert!(text.contains(&ended.to_string()), "{text}");
                        true
                    }
                    // A cut through a sealed segment, or a removed segment
                    // with none after it, is refused as damage first.
                    LogError::Corrupt { .. } => true,
                    _ => false,
                };
                assert!(refused, "{kind:?} {name} cut at {len}: {error:?}");
                assert!(env.disk.files() == before, "a refused open changes nothing");
                let (read, scanned) = read_payloads(env.storage.clone(), &layout);
                assert!(
                    matches!(scanned, Err(OpenError::Log(_))),
                    "{kind:?} {name} cut at {len}: a read verifies clean"
                );
                assert!(read.len() < 20);
                cuts += 1;
            }
        }
        assert!(cuts > 40, "{cuts} cuts");
    }
}

#[test]
fn a_checkpoint_at_the_last_generation_starts_the_generations_again() {
    // Guards against a checkpoint slot no writer writes (an edit, its crc
    // recomputed) at the last generation panicking the writer's next
    // checkpoint on overflow, or wrapping it to a generation that loses to
    // the stale slot, so that the checkpoint would never move again.
    on_both(|env| {
        let head = closed_log(env, &small_config(), 3);
        checkpoint_at_generation(env, head, u64::MAX - 1);
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        let mut last = head;
        for _ in 0..3 {
            append_payloads(&log, 1);
            last = log.checkpoint().unwrap();
        }
        drop(log);
        let bytes = env.disk.bytes(CHECKPOINT_FILE);
        let generation =
            |at: usize| u64::from_le_bytes(bytes[at + 24..at + 32].try_into().unwrap());
        assert_eq!(
            (generation(0), generation(4096)),
            (1, 2),
            "the generations started again from 0"
        );
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        drop(log);
        let cut = |env: &Env| {
            let last_segment = env.disk.segments().last().unwrap().clone();
            let bytes = env.disk.bytes(&last_segment);
            let end = *batches(&bytes).last().unwrap();
            env.disk.put(&last_segment, &bytes[..end]);
        };
        cut(env);
        let error = Log::open(env.storage.clone(), small_config())
            .map(|_| ())
            .unwrap_err();
        let LogError::MissingHead { expected, .. } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(*expected, last, "the checkpoint moved on to the last head");
    });
}

#[test]
fn a_log_cut_before_its_checkpoint_is_refused_naming_both_heads() {
    // Guards against the refusal an operator sees leaving out what is missing.
    on_both(|env| {
        let head = closed_log(env, &small_config(), 20);
        let last = env.disk.segments().last().unwrap().clone();
        let bytes = env.disk.bytes(&last);
        let cut = *batches(&bytes).last().unwrap();
        env.disk.put(&last, &bytes[..cut]);
        let error = Log::open(env.storage.clone(), small_config())
            .map(|_| ())
            .unwrap_err();
        let LogError::MissingHead {
            from,
            expected,
            head: ended,
            torn,
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!((*from, *expected), (HeadSource::Checkpoint, head));
        assert_eq!(*ended, head_of_single_batches(19));
        assert_eq!(*torn, None);
        let text = error.to_string();
        assert!(text.contains("its checkpoint"), "{text}");
        assert!(text.contains(&format!("{head}")), "{text}");
        assert!(text.contains(&format!("{ended}")), "{text}");
    });
}

#[test]
fn a_torn_batch_after_the_checkpoint_is_cut_and_one_before_it_is_refused() {
    // Guards against the checkpoint refusing the torn write a crash leaves, or a crash's cut hiding an acknowledged batch.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 5);
        assert_eq!(log.checkpoint().unwrap().seq, 5);
        append_batch(&log, 3);
        let head = log.head();
        // A crash: the checkpoint holds seq 5.
        let files = env.disk.files();
        drop(log);
        let name = files.keys().rfind(|name| name.ends_with(".log")).unwrap();
        let bytes = &files[name];
        let last = *batches(bytes).last().unwrap();
        let records = frames(bytes);
        let (second_in_last, _) = records[records.len() - 2];
        // Cut inside the last batch (three records): all of it goes, even
        // its whole first record: none of it was acknowledged.
        let torn = Env::with_files(env.kind, &files);
        torn.disk.put(name, &bytes[..second_in_last + 5]);
        let (_, recovery, seen) = open_collect(&torn.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(5));
        assert_eq!(recovery.torn_tail.unwrap().offset, last as u64);
        // Had the checkpoint reached the last batch, the same cut is refused.
        let refused = Env::with_files(env.kind, &files);
        checkpoint_at(&refused, head);
        refused.disk.put(name, &bytes[..second_in_last + 5]);
        assert!(matches!(
            Log::open(refused.storage.clone(), small_config()).map(|_| ()),
            Err(LogError::MissingHead { torn: Some(_), .. })
        ));
    });
}

#[test]
fn a_forged_record_with_its_crcs_recomputed_is_detected_against_an_expected_head() {
    // Guards against an edit of an old record (an amount, a destination) passing an audit because every checksum verifies.
    on_both(|env| {
        let head = closed_log(env, &small_config(), 20);
        // Rewrite the log from scratch with record 7 changed: every frame,
        // batch header, seal and checksum is the writer's own, and so is
        // the checkpoint.
        let forged = Env::new(env.kind);
        let (log, _) = Log::open(forged.storage.clone(), small_config()).unwrap();
        for seq in 1..=20 {
            let mut bytes = payload(seq);
            if seq == 7 {
                bytes = b"to: mallory".to_vec();
            }
            log.append_durable(&bytes).unwrap();
        }
        drop(log);
        // With no head expected, it verifies clean: CRCs do not detect edits.
        let (read, scanned) = read_payloads(forged.storage.clone(), &small_config());
        assert!(scanned.is_ok());
        assert_eq!(read.len(), 20);
        // Against the head the auditor kept, it is refused.
        let mut reader = LogReader::open(forged.storage.clone(), small_config()).unwrap();
        reader.require(head);
        let error = reader.scan(|_| Ok::<(), ()>(())).unwrap_err();
        let OpenError::Log(LogError::HeadMismatch {
            from,
            expected,
            found,
            ..
        }) = error
        else {
            panic!("{error:?}");
        };
        assert_eq!(
            (from, expected, found.seq),
            (HeadSource::Expected, head, 20)
        );
        assert_ne!(found.digest, head.digest);
        // The genuine log passes the same head, and any earlier head of it.
        let mut reader = LogReader::open(env.storage.clone(), small_config()).unwrap();
        reader.require(head);
        reader.require(head_of_single_batches(7));
        assert!(reader.scan(|_| Ok::<(), ()>(())).is_ok());
    });
}

#[test]
fn removing_inserting_or_reordering_records_is_detected_against_an_expected_head() {
    // Guards against a rewritten history that keeps the last record's place passing the expected head.
    on_both(|env| {
        let head = closed_log(env, &small_config(), 20);
        let histories: [Vec<Vec<u8>>; 3] = [
            // Record 3 removed, a record added at the end to keep the count.
            (1..=21).filter(|&seq| seq != 3).map(payload).collect(),
            // A record inserted before record 10, record 20 dropped.
            (1..=19)
                .flat_map(|seq| {
                    if seq == 10 {
                        vec![b"inserted".to_vec(), payload(seq)]
                    } else {
                        vec![payload(seq)]
                    }
                })
                .collect(),
            // Records 4 and 5 swapped.
            (1..=20)
                .map(|seq| {
                    payload(if seq == 4 {
                        5
                    } else if seq == 5 {
                        4
                    } else {
                        seq
                    })
                })
                .collect(),
        ];
        for history in histories {
            let forged = Env::new(env.kind);
            let (log, _) = Log::open(forged.storage.clone(), small_config()).unwrap();
            for bytes in &history {
                log.append_durable(bytes).unwrap();
            }
            drop(log);
            let mut reader = LogReader::open(forged.storage.clone(), small_config()).unwrap();
            reader.require(head);
            assert!(matches!(
                reader.scan(|_| Ok::<(), ()>(())),
                Err(OpenError::Log(LogError::HeadMismatch { .. }))
            ));
        }
    });
}

#[test]
fn an_expected_head_the_log_has_not_reached_is_refused() {
    // Guards against `verify --expect-head` passing a log restored from before the head was taken.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        append_payloads(&log, 10);
        let old = env.disk.files();
        append_payloads(&log, 5);
        let head = log.head();
        drop(log);
        let restored = Env::new(env.kind);
        for (name, bytes) in &old {
            restored.disk.put(name, bytes);
        }
        let mut reader = LogReader::open(restored.storage.clone(), small_config()).unwrap();
        reader.require(head);
        assert!(matches!(
            reader.scan(|_| Ok::<(), ()>(())),
            Err(OpenError::Log(LogError::MissingHead {
                from: HeadSource::Expected,
                ..
            }))
        ));
    });
}

/// A witness whose database is down: it cannot be read.
#[derive(Debug)]
struct Unreadable;

impl Witness for Unreadable {
    fn publish(&self, _: Head) -> io::Result<()> {
        Ok(())
    }

    fn last(&self) -> io::Result<Option<Head>> {
        Err(io::Error::other("the witness's database is down"))
    }
}

/// Opens `env` for writing with `witness`.
fn open_witnessed(env: &Env, witness: Arc<dyn Witness>) -> Result<Log, LogError> {
    let mut opening = Log::scan_to_open(env.storage.clone(), small_config())?;
    opening.witness(witness)?;
    while opening.next_record()?.is_some() {}
    Ok(opening.plan()?.execute()?.0)
}

#[test]
fn a_log_behind_its_witness_is_refused() {
    // Guards against a restored disk snapshot silently forgetting every claim since it was taken.
    on_both(|env| {
        let witness = MemWitness::new();
        let log = open_witnessed(env, Arc::new(witness.clone())).unwrap();
        append_payloads(&log, 8);
        log.checkpoint().unwrap();
        // The snapshot: log and checkpoint together, as a disk restore has them.
        let snapshot = env.disk.files();
        append_payloads(&log, 6);
        let head = log.head();
        drop(log);
        assert_eq!(witness.head(), Some(head), "a clean close publishes");
        let published = witness.published();
        assert!(published.windows(2).all(|pair| pair[0].seq < pair[1].seq));
        // Restored, the log is consistent with its own checkpoint ...
        let restored = Env::with_files(env.kind, &snapshot);
        assert!(Log::open(restored.storage.clone(), small_config()).is_ok());
        // ... and refused by the witness, which names both heads.
        let restored = Env::with_files(env.kind, &snapshot);
        let error = open_witnessed(&restored, Arc::new(witness.clone()))
            .map(|_| ())
            .unwrap_err();
        let LogError::MissingHead {
            from: HeadSource::Witness,
            expected,
            head: ended,
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!((*expected, ended.seq), (head, 8));
        assert!(error.to_string().contains("its witness"), "{error}");
        // The log that is not behind opens with it.
        let log = open_witnessed(env, Arc::new(witness.clone())).unwrap();
        assert_eq!(log.head(), head);
    });
}

#[test]
fn a_witness_that_cannot_be_read_refuses_the_open() {
    // Guards against a log opening unchecked because its witness was down.
    on_both(|env| {
        closed_log(env, &small_config(), 3);
        assert!(matches!(
            open_witnessed(env, Arc::new(Unreadable)).map(|_| ()),
            Err(LogError::Witness { .. })
        ));
    });
}

#[test]
fn checkpoints_follow_the_record_count_and_a_roll() {
    // Guards against the checkpoint lagging without bound while the log runs.
    on_both(|env| {
        let config = LogConfig {
            checkpoint_records: 4,
            ..small_config()
        };
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        append_payloads(&log, 3);
        assert_eq!(log.stats().checkpoint_seq, 0);
        append_payloads(&log, 1);
        assert_eq!(log.stats().checkpoint_seq, 4, "{:?}", log.stats());
        // A roll checkpoints the last head of the segment it closes.
        let segments = env.disk.segments().len();
        while env.disk.segments().len() == segments {
            append_payloads(&log, 1);
        }
        let sealed = log.last_seq() - 1;
        assert!(log.stats().checkpoint_seq >= sealed, "{:?}", log.stats());
    });
}

#[test]
fn records_that_do_not_hash_to_their_batch_headers_digest_fail_a_read() {
    // Guards against a read trusting the digest a batch header holds, which an editor can leave as it was.
    on_both(|env| {
        let genuine = Env::new(env.kind);
        closed_log(&genuine, &small_config(), 12);
        // The same log with record 7 changed, every checksum its writer's.
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        for seq in 1..=12 {
            let mut bytes = payload(seq);
            if seq == 7 {
                bytes[0] ^= 0xff;
            }
            log.append_durable(&bytes).unwrap();
        }
        drop(log);
        // Put the genuine digest back in record 7's batch header, with its
        // checksum recomputed: the header verifies, its records do not hash
        // to it.
        let (name, at) = env
            .disk
            .segments()
            .into_iter()
            .find_map(|name| {
                let bytes = env.disk.bytes(&name);
                batches(&bytes)
                    .into_iter()
                    .find(|&at| u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()) == 7)
                    .map(|at| (name, at))
            })
            .unwrap();
        let genuine_bytes = genuine.disk.bytes(&name);
        let mut bytes = env.disk.bytes(&name);
        bytes[at + 32..at + 64].copy_from_slice(&genuine_bytes[at + 32..at + 64]);
        let log_id = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        let seed = crc32fast::hash(&log_id.to_le_bytes());
        let mut crc = crc32fast::Hasher::new_with_initial(seed);
        crc.update(&bytes[at + 4..at + 64]);
        bytes[at..at + 4].copy_from_slice(&crc.finalize().to_le_bytes());
        env.disk.put(&name, &bytes);
        let (read, scanned) = read_payloads(env.storage.clone(), &small_config());
        let Err(OpenError::Log(LogError::Corrupt { seq, damage, .. })) = scanned else {
            panic!("{scanned:?}");
        };
        assert_eq!((seq, damage), (7, payonce_log::Damage::Digest));
        assert_eq!(read.len(), 6, "nothing of the batch was handed out");
    });
}
