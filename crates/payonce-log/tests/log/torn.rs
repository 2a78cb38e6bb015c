//! A power loss during a flush tears at most the last batch, which nothing
//! acknowledged: it is cut, however its pages landed (kept, dropped or out
//! of order), in either layout. Damage before it is refused.

use std::sync::Arc;

use payonce_log::{
    CRASH_PAGE_LEN, CrashMode, Damage, Durability, Fault, Log, LogConfig, LogError, Storage,
};

use crate::support::{Disk, Env, Kind, frames, open_collect};

/// Records of this many bytes make the last batch span several pages.
const BIG: usize = 700;
/// Records in the last batch.
const LAST_BATCH: u64 = 20;

fn big_payload(seq: u64) -> Vec<u8> {
    vec![seq as u8; BIG]
}

/// Both layouts, with no checkpoint thread.
fn layouts() -> [LogConfig; 2] {
    let appending = LogConfig {
        record_max: 1024,
        durability: Durability::Always,
        preallocate_len: 0,
        checkpoint_interval: None,
        ..LogConfig::default()
    };
    let ahead = LogConfig {
        preallocate_len: payonce_log::PREALLOCATE_LEN,
        ..appending.clone()
    };
    [appending, ahead]
}

#[test]
fn torn_last_batches_are_cut_and_damage_before_them_refused_in_every_layout() {
    for config in layouts() {
        let env = Env::new(Kind::Mem);
        let Disk::Mem(mem) = &env.disk else {
            unreachable!("an in-memory environment")
        };
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        for seq in 1..=3 {
            log.append_durable(&big_payload(seq)).unwrap();
        }
        // The last batch, several pages long, is written; its sync fails.
        for seq in 4..4 + LAST_BATCH {
            log.append(&big_payload(seq)).unwrap();
        }
        env.faults.arm(Fault::SyncFails { nth: 1 });
        assert!(log.sync().is_err());
        drop(log);
        assert!(LAST_BATCH as usize * BIG > 3 * CRASH_PAGE_LEN);
        let mut torn = 0;
        for mode in [
            CrashMode::DropUnsynced,
            CrashMode::KeepPrefix,
            CrashMode::Garble,
            CrashMode::Pages,
        ] {
            for seed in 0..48 {
                let crashed = mem.crash(mode, seed);
                let storage: Arc<dyn Storage> = Arc::new(crashed.clone());
                let what = format!("{} {mode:?} {seed}", config.preallocate_len);
                let (log, recovery, seen) = open_collect(&storage, &config)
                    .unwrap_or_else(|error| panic!("{what}: refused: {error}"));
                // Nothing of the torn batch, or all of it.
                let count = seen.len() as u64;
                assert!(count == 3 || count == 3 + LAST_BATCH, "{what}: {count}");
                for record in &seen {
                    assert_eq!(record.payload, big_payload(record.seq), "{what}");
                }
                torn += u64::from(recovery.torn_tail.is_some());
                drop(log);
                // Damage in front of the last batch is refused, not cut.
                let segment = crashed.list().unwrap();
                let segment = segment.iter().find(|name| name.ends_with(".log")).unwrap();
                let mut bytes = crashed.file(segment).unwrap();
                let (second, _) = frames(&bytes)[1];
                bytes[second + 20] ^= 0x10;
                let damaged = mem.crash(mode, seed);
                damaged.put_file(segment, &bytes);
                let storage: Arc<dyn Storage> = Arc::new(damaged);
                match open_collect(&storage, &config) {
                    Err(LogError::Corrupt { seq, damage, .. }) => {
                        assert_eq!((seq, damage), (2, Damage::Checksum), "{what}");
                    }
                    other => panic!(
                        "{what}: damage before the last batch: {:?}",
                        other.map(|_| ())
                    ),
                }
            }
        }
        assert!(torn > 20, "the crashes tore the last batch: {torn}");
    }
}
