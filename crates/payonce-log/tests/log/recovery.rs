//! Opening after damage: a torn tail is cut (after saving it), an
//! interrupted roll is finished, and everything else is refused without
//! ever returning changed data.

use payonce_log::{
    BATCH_HEADER_LEN, Damage, Log, LogConfig, LogError, LogReader, OpenError, Opening, Repair,
    TornTail,
};

use crate::support::{
    Env, Frame, Kind, Seen, append_payloads, assert_corrupt, batches, build_log, expected, frames,
    layouts, on_both, open_collect, payload, payloads, preallocating, read_payloads, records_end,
    small_config, trim_zeros,
};

/// A log of `count` records whose last segment holds at least two records,
/// written with zeros ahead of the records (the layout with more to get
/// wrong; every test opens it appending, as either layout opens).
fn multi_segment_log(env: &Env, count: u64) -> Vec<String> {
    multi_segment_log_as(env, count, &preallocating(small_config()))
}

/// The same, written with `config`.
fn multi_segment_log_as(env: &Env, count: u64, config: &LogConfig) -> Vec<String> {
    build_log(env, config, count);
    let segments = env.disk.segments();
    assert!(segments.len() >= 3);
    let last = env.disk.bytes(segments.last().unwrap());
    assert!(frames(&last).len() >= 2, "the last segment holds records");
    segments
}

#[test]
fn truncating_the_last_record_at_any_byte_recovers_exactly_the_complete_records() {
    // Guards against a write cut short losing complete records or returning a partial one.
    for (kind, layout) in layouts() {
        let source = Env::new(kind);
        let count = 20;
        let segments = multi_segment_log_as(&source, count, &layout);
        let last_name = segments.last().unwrap().clone();
        let files = source.disk.files();
        // The segment as far as its records go; the zeros after them are
        // another test's subject.
        let last = &files[&last_name][..records_end(&files[&last_name])];
        let (frame, seq) = *frames(last).last().unwrap();
        assert_eq!(seq, Some(count));
        // The last record's batch, from its header: what a torn write of it
        // leaves is cut from there.
        let start = *batches(last).last().unwrap();
        assert_eq!(start + BATCH_HEADER_LEN, frame);
        for len in start..=last.len() {
            let env = Env::with_files(kind, &files);
            env.disk.put(&last_name, &last[..len]);
            let (log, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
            let complete = if len == last.len() { count } else { count - 1 };
            assert_eq!(payloads(&seen), expected(complete), "{kind:?} cut at {len}");
            // In a segment with zeros ahead, zeros at the very end are not
            // counted torn: the writer may have written them there.
            let torn = if layout.preallocate_len > 0 {
                trim_zeros(&last[start..len]).len()
            } else {
                len - start
            };
            if torn == 0 || len == last.len() {
                assert_eq!(recovery.torn_tail, None);
            } else {
                let saved_as = format!("{last_name}.torn-{start}");
                assert_eq!(
                    recovery.torn_tail,
                    Some(TornTail {
                        segment: last_name[..20].parse().unwrap(),
                        offset: start as u64,
                        len: torn as u64,
                        saved_as: Some(saved_as.clone()),
                    })
                );
                assert_eq!(env.disk.bytes(&saved_as), &last[start..start + torn]);
                assert_eq!(env.disk.bytes(&last_name), &last[..start]);
            }
            // The log goes on from the last complete record.
            assert_eq!(
                log.append_durable(&payload(complete + 1)).unwrap(),
                complete + 1
            );
            drop(log);
            let (_, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
            assert_eq!(payloads(&seen), expected(complete + 1));
            assert_eq!(recovery.torn_tail, None);
        }
    }
}

#[test]
fn truncating_the_last_segments_header_at_any_byte_recovers_every_earlier_record() {
    // Guards against a torn segment header being refused, or costing earlier records.
    for kind in [Kind::Fs, Kind::Mem] {
        let source = Env::new(kind);
        let segments = multi_segment_log(&source, 20);
        let last_name = segments.last().unwrap().clone();
        let first_in_last: u64 = last_name[..20].parse().unwrap();
        let files = source.disk.files();
        for len in 0..40 {
            let env = Env::with_files(kind, &files);
            env.disk.put(&last_name, &files[&last_name][..len]);
            let (log, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
            assert_eq!(
                payloads(&seen),
                expected(first_in_last - 1),
                "{kind:?} cut at {len}"
            );
            let tail = recovery.torn_tail.unwrap();
            assert_eq!(
                (tail.segment, tail.offset, tail.len),
                (first_in_last, 0, len as u64)
            );
            let saved_as = tail.saved_as.unwrap();
            assert_eq!(env.disk.bytes(&saved_as), &files[&last_name][..len]);
            assert_eq!(
                log.append_durable(&payload(first_in_last)).unwrap(),
                first_in_last
            );
            drop(log);
            let (_, _, seen) = open_collect(&env.storage, &small_config()).unwrap();
            assert_eq!(payloads(&seen), expected(first_in_last));
        }
    }
}

#[test]
fn a_torn_header_on_the_only_segment_starts_the_log_afresh() {
    // Guards against a log that crashed while being created refusing to open forever.
    on_both(|env| {
        env.disk.put("00000000000000000001.log", b"PAYONCE\0\x01\0");
        let (log, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert!(seen.is_empty());
        assert_eq!(recovery.torn_tail.unwrap().len, 10);
        assert_eq!(log.append_durable(b"first").unwrap(), 1);
    });
}

/// Opens `env` read-only and for writing, and checks that neither returns
/// changed data: each either recovers a torn tail in `last` (returning a
/// prefix of the records, all of them if the flip is in the zeros after
/// them, which start at `zeros_from`) or refuses naming `file`.
fn check_flip(env: &Env, count: u64, file: &str, at: usize, last: &str, zeros_from: usize) {
    let context = format!("{:?}: bit flipped in {file} at byte {at}", env.kind);
    let (read, scanned) = read_payloads(env.storage.clone(), &small_config());
    assert_eq!(
        read,
        expected(read.len() as u64),
        "{context}: reader returned changed data"
    );
    let opened = open_collect(&env.storage, &small_config());
    match (&opened, scanned) {
        (Ok((_, recovery, seen)), Ok(scan)) => {
            assert_eq!(payloads(seen), expected(seen.len() as u64), "{context}");
            assert_eq!(file, last, "{context}: only the last segment may be cut");
            let tail = recovery
                .torn_tail
                .as_ref()
                .expect("a recovery cuts a torn tail");
            if at >= zeros_from {
                // Nothing after the records but the flipped byte: cut it.
                assert_eq!(seen.len() as u64, count, "{context}");
                assert_eq!(tail.offset as usize, zeros_from, "{context}");
            } else {
                assert!(
                    (seen.len() as u64) < count,
                    "{context}: the flip went unnoticed"
                );
            }
            assert!(
                tail.offset as usize <= at,
                "{context}: cut after the damage"
            );
            assert_eq!(scan.torn_tail.map(|tail| tail.offset), Some(tail.offset));
            assert_eq!(scan.records, recovery.records, "{context}");
        }
        (Err(_), Err(OpenError::Log(scan_error))) => {
            let expected_file = env.describe(file);
            let (offset, _, _) = assert_corrupt(opened.map(|_| ()), &expected_file);
            assert!(
                offset as usize <= at,
                "{context}: refusal at {offset}, after the damage"
            );
            assert_corrupt::<()>(Err(scan_error), &expected_file);
        }
        (opened, scanned) => {
            panic!("{context}: reader and writer disagree: {opened:?} / {scanned:?}")
        }
    }
}

#[test]
fn a_flipped_bit_at_any_byte_never_changes_returned_data() {
    // Guards against any byte of the log going unchecked.
    for (kind, layout) in layouts() {
        let source = Env::new(kind);
        let count = 20;
        let segments = multi_segment_log_as(&source, count, &layout);
        let last = segments.last().unwrap().clone();
        let files = source.disk.files();
        let zeros_from = records_end(&files[&last]);
        assert_eq!(
            zeros_from < files[&last].len(),
            layout.preallocate_len > 0,
            "zeros follow the records exactly when written ahead"
        );
        for name in &segments {
            for at in 0..files[name].len() {
                let env = Env::with_files(kind, &files);
                let mut bytes = files[name].clone();
                bytes[at] ^= 1 << (at % 8);
                env.disk.put(name, &bytes);
                check_flip(&env, count, name, at, &last, zeros_from);
            }
        }
    }
}

/// The last segment's name and bytes, and its frames, of a fresh 20-record log.
fn last_segment(env: &Env) -> (String, Vec<u8>, Vec<Frame>) {
    let segments = multi_segment_log(env, 20);
    let name = segments.last().unwrap().clone();
    let bytes = env.disk.bytes(&name);
    let frames = frames(&bytes);
    (name, bytes, frames)
}

#[test]
fn damage_followed_by_a_valid_record_in_the_last_segment_is_refused_not_cut() {
    // Guards against mid-log corruption being mistaken for a torn tail and cut away.
    on_both(|env| {
        let (name, mut bytes, frames) = last_segment(env);
        let (offset, seq) = frames[0];
        bytes[offset + 16] ^= 0x40;
        env.disk.put(&name, &bytes);
        let error = Log::open(env.storage.clone(), small_config()).map(|_| ());
        let message = error.as_ref().unwrap_err().to_string();
        let (at, at_seq, damage) = assert_corrupt(error, &env.describe(&name));
        assert_eq!(
            (at, at_seq, damage),
            (offset as u64, seq.unwrap(), Damage::Checksum)
        );
        assert!(message.contains("not a torn write"), "{message}");
        assert_eq!(env.disk.bytes(&name), bytes, "nothing was cut");
    });
}

#[test]
fn a_flipped_checksum_field_followed_by_a_valid_record_is_refused() {
    // Guards against damage to a checksum field hiding that the records after it are intact.
    on_both(|env| {
        let (name, mut bytes, frames) = last_segment(env);
        let (offset, seq) = frames[0];
        bytes[offset] ^= 0x01;
        env.disk.put(&name, &bytes);
        let (at, at_seq, _) = assert_corrupt(
            Log::open(env.storage.clone(), small_config()).map(|_| ()),
            &env.describe(&name),
        );
        assert_eq!((at, at_seq), (offset as u64, seq.unwrap()));
    });
}

#[test]
fn several_damaged_frames_followed_by_two_valid_records_are_refused() {
    // Guards against wide damage being cut as a torn tail because no frame chains from it.
    on_both(|env| {
        let build = Env::new(env.kind);
        let (log, _) = Log::open(build.storage.clone(), small_config()).unwrap();
        let last_frames = || frames(&build.disk.bytes(build.disk.segments().last().unwrap()));
        while log.last_seq() < 20 || last_frames().len() < 4 {
            append_payloads(&log, 1);
        }
        drop(log);
        let name = build.disk.segments().last().unwrap().clone();
        let mut bytes = build.disk.bytes(&name);
        let frames = frames(&bytes);
        // Garble the whole of the first two frames.
        for byte in &mut bytes[frames[0].0..frames[2].0] {
            *byte = 0xA5;
        }
        for (name, file) in build.disk.files() {
            env.disk.put(&name, &file);
        }
        env.disk.put(&name, &bytes);
        let (at, _, _) = assert_corrupt(
            Log::open(env.storage.clone(), small_config()).map(|_| ()),
            &env.describe(&name),
        );
        assert_eq!(at, frames[0].0 as u64);
    });
}

#[test]
fn an_interrupted_roll_is_finished_at_open() {
    // Guards against refusing, or leaving unsealed, a roll cut between rename and seal.
    for torn_seal in [0, 5, 16] {
        on_both(|env| {
            let segments = multi_segment_log(env, 20);
            let (old, new) = (&segments[segments.len() - 2], &segments[segments.len() - 1]);
            let first_in_new: u64 = new[..20].parse().unwrap();
            // The state a crash before the seal reached the disk leaves: the
            // new segment holds only its header; the old lacks its seal.
            let old_bytes = env.disk.bytes(old);
            let sealed_len = records_end(&old_bytes);
            let mut unsealed = old_bytes[..sealed_len - 16].to_vec();
            if torn_seal > 0 {
                // Part (or a garbled whole) of the seal landed.
                let mut seal = old_bytes[sealed_len - 16..sealed_len - 16 + torn_seal].to_vec();
                seal[0] ^= 0xFF;
                unsealed.extend_from_slice(&seal);
            }
            env.disk.put(old, &unsealed);
            env.disk.put(new, &env.disk.bytes(new)[..40]);
            let (log, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
            assert!(recovery.interrupted_roll);
            assert_eq!(payloads(&seen), expected(first_in_new - 1));
            assert_eq!(recovery.torn_tail.is_some(), torn_seal > 0);
            assert_eq!(
                env.disk.bytes(old),
                old_bytes[..sealed_len],
                "the seal is back"
            );
            append_payloads(&log, 3);
            drop(log);
            let (_, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
            assert!(!recovery.interrupted_roll);
            assert_eq!(payloads(&seen), expected(first_in_new + 2));
        });
    }
}

#[test]
fn an_unsealed_segment_before_one_holding_records_is_refused() {
    // Guards against a lost seal being excused when the next segment already has records.
    on_both(|env| {
        let segments = multi_segment_log(env, 20);
        let old = &segments[segments.len() - 2];
        let bytes = env.disk.bytes(old);
        let seal_at = records_end(&bytes) - 16;
        env.disk.put(old, &bytes[..seal_at]);
        let (at, _, damage) = assert_corrupt(
            Log::open(env.storage.clone(), small_config()).map(|_| ()),
            &env.describe(old),
        );
        assert_eq!((at, damage), (seal_at as u64, Damage::Seal));
    });
}

#[test]
fn a_stale_record_copied_to_the_end_is_never_returned() {
    // Guards against a replayed old record being accepted because its own checksum verifies.
    on_both(|env| {
        let (name, mut bytes, frames) = last_segment(env);
        let (offset, _) = frames[0];
        // The record's frame alone: the next batch's header follows it.
        let size = frames[1].0 - BATCH_HEADER_LEN - offset;
        let stale = bytes[offset..offset + size].to_vec();
        bytes.truncate(records_end(&bytes));
        let end = bytes.len();
        bytes.extend_from_slice(&stale);
        env.disk.put(&name, &bytes);
        let (log, recovery, seen): (_, _, Vec<Seen>) =
            open_collect(&env.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(20));
        assert_eq!(
            recovery.torn_tail.unwrap().len as usize,
            trim_zeros(&stale).len()
        );
        drop(log);
        // A whole old batch, its header included, is not a torn write:
        // refused, and nothing is cut.
        let batch = batches(&bytes)[0];
        let stale = bytes[batch..frames[1].0 - BATCH_HEADER_LEN].to_vec();
        bytes.truncate(end);
        bytes.extend_from_slice(&stale);
        env.disk.put(&name, &bytes);
        let roomy = LogConfig {
            segment_len_max: 1024,
            ..small_config()
        };
        let (_, seq, damage) = assert_corrupt(
            Log::open(env.storage.clone(), roomy).map(|_| ()),
            &env.describe(&name),
        );
        assert_eq!((seq, damage), (21, Damage::Sequence));
        assert_eq!(env.disk.bytes(&name), bytes, "nothing was cut");
    });
}

#[test]
fn a_record_written_with_a_larger_limit_is_refused_not_cut() {
    // Guards against a smaller record_max at reopen cutting a good last record as torn.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        log.append_durable(&[1; 10]).unwrap();
        log.append_durable(&[2; 60]).unwrap();
        drop(log);
        let config = LogConfig {
            record_max: 32,
            ..small_config()
        };
        let name = env.disk.segments()[0].clone();
        let before = env.disk.bytes(&name);
        assert_eq!(records_end(&before), 40 + 2 * BATCH_HEADER_LEN + 32 + 80);
        let (_, seq, damage) = assert_corrupt(
            Log::open(env.storage.clone(), config).map(|_| ()),
            &env.describe(&name),
        );
        assert_eq!((seq, damage), (2, Damage::Length));
        assert_eq!(env.disk.bytes(&name), before, "nothing was cut");
    });
}

#[test]
fn a_visitor_error_stops_the_open() {
    // Guards against a ledger replay failure being ignored or the log opening anyway.
    on_both(|env| {
        build_log(env, &small_config(), 10);
        let mut visited = 0;
        let result = Log::open_visiting(env.storage.clone(), small_config(), |record| {
            visited += 1;
            if record.seq == 4 {
                Err("bad event")
            } else {
                Ok(())
            }
        });
        assert!(matches!(result, Err(OpenError::Visit("bad event"))));
        assert_eq!(visited, 4);
        // The lock was released with the failed open.
        assert!(Log::open(env.storage.clone(), small_config()).is_ok());
    });
}

/// A 20-record log whose last record's frame is cut to its first 7 bytes:
/// a torn tail. Returns the last segment's name, its bytes before the cut,
/// and where the cut record's batch starts.
fn torn_last_record(env: &Env) -> (String, Vec<u8>, usize) {
    let (name, bytes, frames) = last_segment(env);
    let (frame, _) = *frames.last().unwrap();
    let offset = *batches(&bytes).last().unwrap();
    assert_eq!(offset + BATCH_HEADER_LEN, frame);
    env.disk.put(&name, &bytes[..frame + 7]);
    (name, bytes, offset)
}

/// Starts opening `env` for writing and reads every record: the scan's
/// verdict on the whole log, given before anything is repaired.
fn scan_whole(env: &Env) -> (Opening, u64) {
    let mut opening = Log::scan_to_open(env.storage.clone(), small_config()).unwrap();
    let mut visited = 0;
    while opening.next_record().unwrap().is_some() {
        visited += 1;
    }
    (opening, visited)
}

#[test]
fn a_refusal_after_the_scan_drops_the_plan_and_repairs_nothing() {
    // Guards against a replay that runs behind the scan refusing only after the open cut a torn tail.
    on_both(|env| {
        let (_, _, offset) = torn_last_record(env);
        let before = env.disk.files();
        let (opening, visited) = scan_whole(env);
        assert_eq!(visited, 19, "every whole record was visited first");
        let plan = opening.plan().unwrap();
        assert_eq!(
            plan.recovery().torn_tail.as_ref().unwrap().offset,
            offset as u64
        );
        // The replay refuses: the plan is dropped, not executed.
        drop(plan);
        assert!(
            env.disk.files() == before,
            "the refused open changed no file"
        );
        // Accepted, the same open cuts the tail.
        let (_, recovery) = scan_whole(env).0.plan().unwrap().execute().unwrap();
        assert_eq!(recovery.torn_tail.unwrap().offset, offset as u64);
    });
}

#[test]
fn a_plan_names_every_repair_before_making_any() {
    // Guards against an open changing a file before its plan says so, or doing other than it said.
    on_both(|env| {
        let segments = multi_segment_log(env, 20);
        let (old, new) = (&segments[segments.len() - 2], &segments[segments.len() - 1]);
        let (old_seq, new_seq): (u64, u64) =
            (old[..20].parse().unwrap(), new[..20].parse().unwrap());
        // A roll cut short after five bytes of its seal landed.
        let old_bytes = env.disk.bytes(old);
        let seal_at = records_end(&old_bytes) - 16;
        let mut unsealed = old_bytes[..seal_at + 5].to_vec();
        unsealed[seal_at] ^= 0xFF;
        env.disk.put(old, &unsealed);
        env.disk.put(new, &env.disk.bytes(new)[..40]);
        let before = env.disk.files();
        let plan = scan_whole(env).0.plan().unwrap();
        // The seal chains from the checksum of the segment's last record.
        let (last_record, _) = frames(&old_bytes[..seal_at]).pop().unwrap();
        let chain = u32::from_le_bytes(old_bytes[last_record..last_record + 4].try_into().unwrap());
        assert_eq!(
            plan.repairs(),
            [
                Repair::CutTornTail {
                    segment: old_seq,
                    offset: seal_at as u64,
                    len: trim_zeros(&unsealed[seal_at..]).len() as u64,
                },
                Repair::SealInterruptedRoll {
                    segment: old_seq,
                    offset: seal_at as u64,
                    next_seq: new_seq,
                    chain,
                },
            ]
        );
        let planned = plan.recovery().clone();
        assert!(planned.interrupted_roll);
        assert_eq!(planned.torn_tail.as_ref().unwrap().saved_as, None);
        assert!(env.disk.files() == before, "planning changed no file");
        let (_, recovery) = plan.execute().unwrap();
        let saved_as = format!("{old}.torn-{seal_at}");
        let mut expected_recovery = planned;
        expected_recovery.torn_tail.as_mut().unwrap().saved_as = Some(saved_as.clone());
        assert_eq!(
            recovery, expected_recovery,
            "the open did what its plan said"
        );
        assert_eq!(env.disk.bytes(&saved_as), trim_zeros(&unsealed[seal_at..]));
        assert_eq!(
            env.disk.bytes(old),
            old_bytes[..seal_at + 16],
            "the seal is back"
        );
    });
}

#[test]
fn dropping_a_plan_changes_nothing_and_releases_the_lock_in_every_case() {
    // Guards against a plan that is not executed leaving any case's directory changed or locked.
    type Setup = fn(&Env);
    // Each case, and how many repairs its plan lists.
    let cases: [(&str, Setup, usize); 5] = [
        (
            "an empty directory: its first segment and checkpoint",
            |_| {},
            2,
        ),
        ("a clean end", |env| build_log(env, &small_config(), 20), 0),
        ("a torn tail", |env| drop(torn_last_record(env)), 1),
        (
            "a torn header",
            |env| {
                let segments = multi_segment_log(env, 20);
                let last = segments.last().unwrap();
                env.disk.put(last, &env.disk.bytes(last)[..12]);
            },
            1,
        ),
        (
            "an interrupted roll",
            |env| {
                let segments = multi_segment_log(env, 20);
                let (old, new) = (&segments[segments.len() - 2], &segments[segments.len() - 1]);
                let old_bytes = env.disk.bytes(old);
                env.disk
                    .put(old, &old_bytes[..records_end(&old_bytes) - 16]);
                env.disk.put(new, &env.disk.bytes(new)[..40]);
            },
            1,
        ),
    ];
    for (case, setup, repairs) in cases {
        on_both(|env| {
            setup(env);
            let before = env.disk.files();
            let plan = scan_whole(env).0.plan().unwrap();
            assert_eq!(
                plan.repairs().len(),
                repairs,
                "{case}: {:?}",
                plan.repairs()
            );
            drop(plan);
            assert!(
                env.disk.files() == before,
                "{case}: a dropped plan changed a file"
            );
            // The lock went with the plan: the same directory opens.
            let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
            log.append_durable(b"after").unwrap();
        });
    }
}

#[test]
fn a_refused_scan_hands_out_nothing_more_and_releases_the_lock() {
    // Guards against records after damage reaching a caller that went on reading.
    on_both(|env| {
        let (name, mut bytes, frames) = last_segment(env);
        bytes[frames[0].0 + 16] ^= 0x40;
        env.disk.put(&name, &bytes);
        let mut opening = Log::scan_to_open(env.storage.clone(), small_config()).unwrap();
        let refused = loop {
            match opening.next_record() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the damage went unnoticed"),
                Err(error) => break error,
            }
        };
        assert_corrupt::<()>(Err(refused), &env.describe(&name));
        assert!(opening.next_record().unwrap().is_none());
        drop(opening);
        assert!(matches!(
            Log::open(env.storage.clone(), small_config()),
            Err(LogError::Corrupt { .. })
        ));
    });
}

#[test]
fn a_crash_while_saving_a_torn_tail_is_recovered_on_the_next_open() {
    // Guards against recovery itself being unsafe to interrupt.
    on_both(|env| {
        let (name, bytes, offset) = torn_last_record(env);
        // A previous recovery saved the bytes and crashed before truncating.
        let cut = offset + BATCH_HEADER_LEN + 7;
        env.disk
            .put(&format!("{name}.torn-{offset}"), &bytes[offset..cut]);
        let (_, recovery, seen) = open_collect(&env.storage, &small_config()).unwrap();
        assert_eq!(payloads(&seen), expected(19));
        let saved_as = recovery.torn_tail.unwrap().saved_as.unwrap();
        assert_eq!(saved_as, format!("{name}.torn-{offset}.1"));
        assert_eq!(env.disk.bytes(&saved_as), trim_zeros(&bytes[offset..cut]));
    });
}

#[test]
fn refusals_are_errors_not_panics_for_truncated_non_last_segments() {
    // Guards against a short middle segment being read past its end.
    on_both(|env| {
        let segments = multi_segment_log(env, 20);
        env.disk.put(&segments[1], b"PAYONCE");
        let result = Log::open(env.storage.clone(), small_config()).map(|_| ());
        let (_, _, damage) = assert_corrupt(result, &env.describe(&segments[1]));
        assert_eq!(damage, Damage::Header);
        assert!(matches!(
            LogReader::open(env.storage.clone(), small_config())
                .unwrap()
                .scan(|_| Ok::<(), ()>(())),
            Err(OpenError::Log(LogError::Corrupt { .. }))
        ));
    });
}
