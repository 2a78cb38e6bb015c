//! Configuration limits, checked before anything is opened or allocated.

use payonce_log::{
    BATCH_HEADER_LEN, CHECKPOINT_INTERVAL, CHECKPOINT_RECORDS, Log, LogConfig, LogError, LogReader,
    PREALLOCATE_LEN, RECORD_MAX, RECORD_MAX_CEILING, SEGMENT_LEN_MAX, SEGMENT_LEN_MAX_CEILING,
};

use crate::support::{build_log, on_both, small_config};

#[test]
fn the_default_config_is_valid_and_uses_the_named_limits() {
    // Guards against the defaults drifting from the documented limits.
    let config = LogConfig::default();
    assert_eq!(config.record_max, RECORD_MAX);
    assert_eq!(config.segment_len_max, SEGMENT_LEN_MAX);
    assert_eq!(config.durability, payonce_log::Durability::Always);
    assert_eq!(
        config.preallocate_len, PREALLOCATE_LEN,
        "batches overwrite zeros written ahead"
    );
    assert_eq!(config.checkpoint_records, CHECKPOINT_RECORDS);
    assert_eq!(config.checkpoint_interval, Some(CHECKPOINT_INTERVAL));
    config.validate().unwrap();
}

#[test]
fn out_of_range_limits_are_refused_before_anything_is_created() {
    // Guards against configs where a record cannot fit a segment or a segment cannot fit memory.
    let cases = [
        (
            LogConfig {
                record_max: RECORD_MAX_CEILING + 1,
                ..LogConfig::default()
            },
            "record_max",
        ),
        (
            LogConfig {
                segment_len_max: SEGMENT_LEN_MAX_CEILING + 1,
                ..LogConfig::default()
            },
            "segment_len_max",
        ),
        (
            LogConfig {
                preallocate_len: SEGMENT_LEN_MAX_CEILING + 1,
                ..LogConfig::default()
            },
            "preallocate_len",
        ),
        (
            LogConfig {
                record_max: 64,
                segment_len_max: 40 + BATCH_HEADER_LEN as u64 + 80 + 16 - 1,
                ..LogConfig::default()
            },
            "segment_len_max",
        ),
    ];
    on_both(|env| {
        for (config, setting) in &cases {
            let error = Log::open(env.storage.clone(), config.clone()).unwrap_err();
            assert!(
                matches!(&error, LogError::InvalidConfig { setting: found, .. } if found == setting),
                "{error:?}"
            );
            assert!(error.to_string().contains(setting), "{error}");
            assert!(env.disk.names().is_empty(), "nothing was created");
        }
    });
    LogConfig {
        record_max: 64,
        segment_len_max: 40 + BATCH_HEADER_LEN as u64 + 80 + 16,
        ..LogConfig::default()
    }
    .validate()
    .unwrap();
}

#[test]
fn a_segment_longer_than_the_configured_maximum_is_refused_before_it_is_read() {
    // Guards against reading an unbounded file into memory.
    on_both(|env| {
        build_log(env, &small_config(), 30);
        let config = LogConfig {
            segment_len_max: 200,
            ..small_config()
        };
        let first = env.disk.segments()[0].clone();
        let error = Log::open(env.storage.clone(), config.clone()).unwrap_err();
        assert!(
            matches!(&error, LogError::SegmentTooLong { file, max: 200, .. } if *file == env.describe(&first)),
            "{error:?}"
        );
        let reader = LogReader::open(env.storage.clone(), config).unwrap();
        assert!(reader.scan(|_| Ok::<(), ()>(())).is_err());
    });
}
