//! Whole segments and records deleted, duplicated, reordered, renamed or
//! swapped in from another log: every one is refused, naming where.

use payonce_log::{Damage, FORMAT_VERSION, Log, LogConfig, LogReader, OpenError};

use crate::support::{Env, assert_corrupt, build_log, frames, on_both, records_end, small_config};

/// Builds a 30-record log and returns its segment names (at least four).
fn segments(env: &Env) -> Vec<String> {
    build_log(env, &small_config(), 30);
    let segments = env.disk.segments();
    assert!(segments.len() >= 4, "{segments:?}");
    segments
}

/// Asserts that both a writer and a reader refuse the log naming `file`,
/// and returns the writer's (offset, seq, damage).
#[track_caller]
fn refused(env: &Env, file: &str) -> (u64, u64, Damage) {
    refused_with(env, file, &small_config())
}

#[track_caller]
fn refused_with(env: &Env, file: &str, config: &LogConfig) -> (u64, u64, Damage) {
    let file = env.describe(file);
    let reader = LogReader::open(env.storage.clone(), config.clone()).unwrap();
    match reader.scan(|_| Ok::<(), ()>(())) {
        Err(OpenError::Log(error)) => {
            assert_corrupt::<()>(Err(error), &file);
        }
        other => panic!("the reader accepted a tampered log: {other:?}"),
    }
    assert_corrupt(
        Log::open(env.storage.clone(), config.clone()).map(|_| ()),
        &file,
    )
}

#[test]
fn a_deleted_first_segment_is_refused() {
    // Guards against a log silently starting in the middle.
    on_both(|env| {
        let segments = segments(env);
        env.disk.remove(&segments[0]);
        let (_, seq, damage) = refused(env, &segments[1]);
        assert_eq!((seq, damage), (1, Damage::MissingSegment));
    });
}

#[test]
fn a_deleted_middle_segment_is_refused() {
    // Guards against a gap of records going unnoticed between two segments.
    on_both(|env| {
        let segments = segments(env);
        env.disk.remove(&segments[1]);
        let first_missing: u64 = segments[1][..20].parse().unwrap();
        let (_, seq, damage) = refused(env, &segments[2]);
        assert_eq!((seq, damage), (first_missing, Damage::MissingSegment));
    });
}

#[test]
fn a_deleted_last_segment_is_refused() {
    // Guards against losing the newest records without a trace: the seal names them.
    on_both(|env| {
        let segments = segments(env);
        let last = segments.last().unwrap();
        env.disk.remove(last);
        let old = &segments[segments.len() - 2];
        let (offset, seq, damage) = refused(env, old);
        assert_eq!(damage, Damage::MissingSegment);
        assert_eq!(seq, last[..20].parse::<u64>().unwrap());
        assert_eq!(offset as usize, records_end(&env.disk.bytes(old)) - 16);
    });
}

#[test]
fn a_segment_copied_under_another_segments_name_is_refused() {
    // Guards against a duplicated segment being read as the one it replaced.
    on_both(|env| {
        let segments = segments(env);
        env.disk.put(&segments[2], &env.disk.bytes(&segments[1]));
        let (offset, _, damage) = refused(env, &segments[2]);
        assert_eq!((offset, damage), (24, Damage::Name));
    });
}

#[test]
fn a_segment_copied_after_the_last_is_refused() {
    // Guards against an extra copy of old records being appended as a new segment.
    on_both(|env| {
        let segments = segments(env);
        let last = segments.last().unwrap();
        let beyond = format!("{:020}.log", 1000);
        env.disk.put(&beyond, &env.disk.bytes(&segments[1]));
        let (_, _, damage) = refused(env, last);
        assert_eq!(damage, Damage::Seal);
    });
}

#[test]
fn a_stray_segment_numbered_below_the_first_is_refused_by_readers_too() {
    // Guards against a reader skipping a segment file that a writer refuses.
    on_both(|env| {
        let segments = segments(env);
        let stray = format!("{:020}.log", 0);
        env.disk.put(&stray, &env.disk.bytes(&segments[0]));
        let (_, seq, damage) = refused(env, &stray);
        assert_eq!((seq, damage), (1, Damage::MissingSegment));
    });
}

#[test]
fn swapped_segments_are_refused() {
    // Guards against segments read in an order other than the one they were written in.
    on_both(|env| {
        let segments = segments(env);
        let (a, b) = (env.disk.bytes(&segments[1]), env.disk.bytes(&segments[2]));
        env.disk.put(&segments[1], &b);
        env.disk.put(&segments[2], &a);
        let (offset, _, damage) = refused(env, &segments[1]);
        assert_eq!((offset, damage), (24, Damage::Name));
    });
}

#[test]
fn a_renamed_segment_is_refused() {
    // Guards against a segment's name and contents disagreeing about where it starts.
    on_both(|env| {
        let segments = segments(env);
        let first: u64 = segments[1][..20].parse().unwrap();
        let renamed = format!("{:020}.log", first + 1);
        env.disk.rename(&segments[1], &renamed);
        let (_, _, damage) = refused(env, &renamed);
        assert_eq!(damage, Damage::MissingSegment);
    });
}

#[test]
fn a_segment_from_another_log_is_refused() {
    // Guards against mixing two logs whose records happen to line up.
    on_both(|env| {
        let segments = segments(env);
        let other = Env::new(env.kind);
        build_log(&other, &small_config(), 30);
        assert_eq!(
            other.disk.segments(),
            segments,
            "both logs have the same shape"
        );
        env.disk.put(&segments[1], &other.disk.bytes(&segments[1]));
        let (offset, _, damage) = refused(env, &segments[1]);
        assert_eq!((offset, damage), (16, Damage::LogId));
    });
}

#[test]
fn a_record_cut_out_of_a_segment_is_refused() {
    // Guards against a missing record inside a segment going unnoticed.
    on_both(|env| {
        let segments = segments(env);
        let mut bytes = env.disk.bytes(&segments[1]);
        let frames = frames(&bytes);
        let (start, seq) = frames[1];
        let end = frames[2].0;
        bytes.drain(start..end);
        env.disk.put(&segments[1], &bytes);
        let (offset, at_seq, _) = refused(env, &segments[1]);
        assert_eq!((offset as usize, at_seq), (start, seq.unwrap()));
    });
}

#[test]
fn two_records_swapped_inside_a_segment_are_refused() {
    // Guards against reordered records being accepted because each verifies alone.
    on_both(|env| {
        let segments = segments(env);
        let mut bytes = env.disk.bytes(&segments[1]);
        let frames = frames(&bytes);
        let (a, b, c) = (frames[0].0, frames[1].0, frames[2].0);
        let mut swapped = bytes[..a].to_vec();
        swapped.extend_from_slice(&bytes[b..c]);
        swapped.extend_from_slice(&bytes[a..b]);
        swapped.extend_from_slice(&bytes[c..]);
        bytes = swapped;
        env.disk.put(&segments[1], &bytes);
        let (offset, _, _) = refused(env, &segments[1]);
        assert_eq!(offset as usize, a);
    });
}

#[test]
fn bytes_after_a_seal_are_refused() {
    // Guards against records smuggled in after a segment was closed.
    on_both(|env| {
        let segments = segments(env);
        let mut bytes = env.disk.bytes(&segments[0]);
        let sealed_len = records_end(&bytes);
        // Zeros may follow a seal (written ahead of records that never
        // came); anything else may not.
        bytes.truncate(sealed_len);
        bytes.extend_from_slice(&[0; 8]);
        bytes.extend_from_slice(&[0xAB; 8]);
        env.disk.put(&segments[0], &bytes);
        let roomy = LogConfig {
            segment_len_max: 1024,
            ..small_config()
        };
        let (offset, _, damage) = refused_with(env, &segments[0], &roomy);
        assert_eq!((offset as usize, damage), (sealed_len, Damage::Seal));
    });
}

#[test]
fn a_header_with_an_unknown_version_is_refused() {
    // Guards against reading a future format as if it were this one.
    on_both(|env| {
        let segments = segments(env);
        let mut bytes = env.disk.bytes(&segments[0]);
        bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let crc = crc32fast::hash(&bytes[..36]);
        bytes[36..40].copy_from_slice(&crc.to_le_bytes());
        env.disk.put(&segments[0], &bytes);
        let error = Log::open(env.storage.clone(), small_config()).unwrap_err();
        let found = format!("format version {}", FORMAT_VERSION + 1);
        assert!(error.to_string().contains(&found), "{error}");
        let (offset, _, damage) = refused(env, &segments[0]);
        assert_eq!((offset, damage), (0, Damage::Header));
    });
}

#[test]
fn a_damaged_header_of_the_last_segment_is_refused() {
    // Guards against a whole but damaged header being cut as if it were torn.
    on_both(|env| {
        let segments = segments(env);
        let last = segments.last().unwrap();
        let mut bytes = env.disk.bytes(last);
        bytes[20] ^= 1;
        env.disk.put(last, &bytes);
        let (offset, _, damage) = refused(env, last);
        assert_eq!((offset, damage), (0, Damage::Header));
    });
}
