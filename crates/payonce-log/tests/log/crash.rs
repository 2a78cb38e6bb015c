//! Seeded random workloads cut by simulated power loss: every acknowledged
//! record survives, in order, and nothing appears that was never appended.
//!
//! Replay one seed with `PAYONCE_LOG_SEED=<seed> cargo test -p payonce-log crash`.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use payonce_log::{
    BATCH_HEADER_LEN, CrashMode, Fault, Log, LogConfig, LogError, MemStorage, PREALLOCATE_LEN,
    Storage,
};

use crate::support::{open_collect, small_config};

/// A tiny generator for the workload, independent of the crate's own.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn random_payload(rng: &mut Rng, record_max: u32) -> Vec<u8> {
    let len = rng.below(u64::from(record_max) + 1) as usize;
    (0..len).map(|_| rng.next() as u8).collect()
}

fn random_fault(rng: &mut Rng) -> Fault {
    let nth = rng.below(6) + 1;
    match rng.below(7) {
        0 => Fault::WriteFails { nth },
        1 => Fault::WriteShort {
            nth,
            landed: rng.below(100) as usize,
        },
        2 => Fault::SyncFails { nth },
        3 => Fault::DirSyncFails { nth },
        4 => Fault::RenameFails { nth },
        5 => Fault::CreateFails { nth },
        _ => Fault::NoSpace {
            budget: rng.below(600),
        },
    }
}

/// Opens the crashed storage, retrying through injected faults (each retry
/// crashes again first, as a failed recovery would end), and checks the
/// records against the model. Returns the open log and the records it holds.
fn reopen_and_check(
    seed: u64,
    rng: &mut Rng,
    mut storage: MemStorage,
    config: &LogConfig,
    appended: &[Vec<u8>],
    acknowledged: usize,
) -> (Log, MemStorage, Vec<Vec<u8>>) {
    for attempt in 0..4 {
        if attempt < 3 && rng.below(3) == 0 {
            storage.faults().arm(random_fault(rng));
        }
        let shared: Arc<dyn Storage> = Arc::new(storage.clone());
        match open_collect(&shared, config) {
            Ok((log, _, seen)) => {
                storage.faults().disarm_all();
                let records: Vec<Vec<u8>> = seen.into_iter().map(|record| record.payload).collect();
                assert!(
                    records.len() >= acknowledged,
                    "seed {seed}: {} records after the crash, {acknowledged} were acknowledged",
                    records.len()
                );
                assert!(
                    records.len() <= appended.len(),
                    "seed {seed}: {} records, only {} appended",
                    records.len(),
                    appended.len()
                );
                for (index, record) in records.iter().enumerate() {
                    assert_eq!(
                        record,
                        &appended[index],
                        "seed {seed}: record {} changed",
                        index + 1
                    );
                }
                return (log, storage, records);
            }
            Err(LogError::Io { .. }) => {
                storage = storage.crash(CrashMode::KeepPrefix, rng.next());
            }
            Err(error) => panic!("seed {seed}: the log refused to open after a crash: {error}"),
        }
    }
    panic!("seed {seed}: could not reopen after repeated faults");
}

fn run(seed: u64) {
    let mut rng = Rng(seed);
    let config = LogConfig {
        record_max: 48,
        segment_len_max: 40 + (BATCH_HEADER_LEN as u64 + 64) * (1 + rng.below(6)) + 16,
        // Both layouts: zeros written ahead of the records, or none.
        preallocate_len: [0, 64, PREALLOCATE_LEN][rng.below(3) as usize],
        ..small_config()
    };
    let storage = MemStorage::new();
    let (mut log, _) = Log::open(Arc::new(storage.clone()), config.clone()).unwrap();
    let mut storage = storage;
    let mut appended: Vec<Vec<u8>> = Vec::new();
    let mut acknowledged = 0;
    for _generation in 0..3 {
        let steps = rng.below(40);
        for _ in 0..steps {
            match rng.below(10) {
                0..=4 => {
                    let payload = random_payload(&mut rng, config.record_max);
                    if let Ok(seq) = log.append(&payload) {
                        assert_eq!(seq as usize, appended.len() + 1, "seed {seed}");
                        appended.push(payload);
                    }
                }
                5..=7 if !appended.is_empty() => {
                    let seq = rng.below(appended.len() as u64) + 1;
                    if log.wait_durable(seq).is_ok() {
                        acknowledged = acknowledged.max(seq as usize);
                    }
                }
                8 => {
                    if let Ok(seq) = log.sync() {
                        acknowledged = acknowledged.max(seq as usize);
                    }
                }
                _ => storage.faults().arm(random_fault(&mut rng)),
            }
        }
        let mode = match rng.below(4) {
            0 => CrashMode::DropUnsynced,
            1 => CrashMode::KeepPrefix,
            2 => CrashMode::Garble,
            _ => CrashMode::Pages,
        };
        let crashed = storage.crash(mode, rng.next());
        drop(log);
        let (reopened, crashed, records) =
            reopen_and_check(seed, &mut rng, crashed, &config, &appended, acknowledged);
        // The survivors are the new truth: unacknowledged records that did
        // not survive are gone for good.
        appended = records;
        acknowledged = appended.len();
        log = reopened;
        storage = crashed;
    }
}

#[test]
fn acknowledged_records_survive_any_simulated_power_loss() {
    // Guards against records reported durable too early, and crashes that make the log unopenable.
    let seeds: Vec<u64> = match std::env::var("PAYONCE_LOG_SEED") {
        Ok(seed) => vec![seed.parse().expect("PAYONCE_LOG_SEED is a number")],
        Err(_) => (0..400).collect(),
    };
    for seed in seeds {
        if let Err(panic) = panic::catch_unwind(AssertUnwindSafe(|| run(seed))) {
            eprintln!(
                "crash simulation failed with seed {seed}; replay with PAYONCE_LOG_SEED={seed}"
            );
            panic::resume_unwind(panic);
        }
    }
}
