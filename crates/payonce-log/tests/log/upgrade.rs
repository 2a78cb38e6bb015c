//! Logs written in format version 1 (the committed fixtures, written by the
//! last build that wrote that version): they verify, and opening one for
//! writing seals its newest segment and goes on in a new segment of the
//! current format, with a checkpoint, never writing into the old segments.

use std::collections::BTreeMap;
use std::path::Path;

use payonce_log::{
    FORMAT_VERSION, FORMAT_VERSION_V1, Head, HeadSource, Log, LogConfig, LogError, LogReader,
    OpenError, batch_digest,
};

use crate::support::{
    Env, Kind, batches, expected, open_collect, payload, payloads, read_payloads, records_end,
    small_config,
};

/// The fixture's files, by name.
fn fixture(layout: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1")
        .join(layout);
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        files.insert(name, std::fs::read(entry.path()).unwrap());
    }
    files
}

/// The configuration the fixtures were written with.
fn v1_config() -> LogConfig {
    LogConfig {
        segment_len_max: 400,
        ..small_config()
    }
}

fn version(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[8..12].try_into().unwrap())
}

/// The head of a log of version 1 segments: each segment's records are one
/// batch of the chain.
fn v1_head(files: &BTreeMap<String, Vec<u8>>) -> Head {
    let mut digest = payonce_log::Digest::GENESIS;
    let mut seq = 0;
    let firsts: Vec<u64> = files
        .keys()
        .map(|name| name[..20].parse().unwrap())
        .collect();
    for (index, &first) in firsts.iter().enumerate() {
        let last = firsts.get(index + 1).map_or(30, |next| next - 1);
        let records: Vec<Vec<u8>> = (first..=last).map(payload).collect();
        digest = batch_digest(&digest, first, records.iter().map(Vec::as_slice));
        seq = last;
    }
    Head { seq, digest }
}

#[test]
fn a_version_1_log_verifies_and_opens_into_the_current_format() {
    // Guards against an upgrade refusing a log written by the previous build, losing a record, or rewriting its old segments.
    for layout in ["appended", "zeros-ahead"] {
        for kind in [Kind::Fs, Kind::Mem] {
            let files = fixture(layout);
            assert!(
                files
                    .values()
                    .all(|bytes| version(bytes) == FORMAT_VERSION_V1)
            );
            let env = Env::with_files(kind, &files);
            // Read-only, it verifies as it is, and reports its chain head.
            let (read, scanned) = read_payloads(env.storage.clone(), &v1_config());
            assert_eq!(read, expected(30), "{layout} {kind:?}");
            let report = scanned.unwrap();
            assert_eq!(report.head, v1_head(&files));
            assert_eq!(report.checkpoint, None, "version 1 has no checkpoint");
            assert_eq!(env.disk.files(), files, "reading changes nothing");
            // Opened for writing: sealed, rolled, checkpointed.
            let (log, recovery, seen) = open_collect(&env.storage, &v1_config()).unwrap();
            assert_eq!(payloads(&seen), expected(30));
            assert_eq!(recovery.head, v1_head(&files));
            assert_eq!(log.head(), v1_head(&files));
            log.append_durable(&payload(31)).unwrap();
            drop(log);
            let segments = env.disk.segments();
            let newest = env.disk.bytes(segments.last().unwrap());
            assert_eq!(segments.last().unwrap(), "00000000000000000031.log");
            assert_eq!(version(&newest), FORMAT_VERSION);
            assert_eq!(batches(&newest).len(), 1);
            for (name, old) in &files {
                let now = env.disk.bytes(name);
                let end = records_end(old);
                assert_eq!(&now[..end], &old[..end], "{name}: old records unchanged");
                assert_eq!(version(&now), FORMAT_VERSION_V1);
            }
            let (_, recovery, seen) = open_collect(&env.storage, &v1_config()).unwrap();
            assert_eq!(payloads(&seen), expected(31));
            assert_eq!(recovery.checkpoint.unwrap().seq, 31);
        }
    }
}

#[test]
fn an_upgraded_log_cut_back_to_its_version_1_segments_is_refused() {
    // Guards against the upgrade leaving a way to forget what was written after it.
    for layout in ["appended", "zeros-ahead"] {
        let files = fixture(layout);
        let env = Env::with_files(Kind::Mem, &files);
        let (log, _) = Log::open(env.storage.clone(), v1_config()).unwrap();
        log.append_durable(&payload(31)).unwrap();
        drop(log);
        env.disk.remove("00000000000000000031.log");
        let error = Log::open(env.storage.clone(), v1_config())
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(
                error,
                LogError::MissingHead {
                    from: HeadSource::Checkpoint,
                    ..
                } | LogError::Corrupt { .. }
            ),
            "{error:?}"
        );
        let reader = LogReader::open(env.storage.clone(), v1_config()).unwrap();
        assert!(matches!(
            reader.scan(|_| Ok::<(), ()>(())),
            Err(OpenError::Log(_))
        ));
    }
}
