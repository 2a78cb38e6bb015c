//! payonce-log benchmarks, a plain `main` that prints a table:
//! `cargo bench -p payonce-log`.
//!
//! - Durable appends (128-byte records, append + wait_durable in a loop) with
//!   1, 4, 16 and 64 threads, each appending (the default) and writing over
//!   zeros written ahead (`preallocate_len`), beside the raw rate of write +
//!   fdatasync on a file in the same directory, measured in the same run.
//! - A full verify-and-iterate scan beside a plain read of the same files.
//!
//! `PAYONCE_BENCH_DIR` picks the directory (default: the system temp dir);
//! `PAYONCE_BENCH_SECS` the seconds per durable measurement (default 3).

// A benchmark that cannot read or write has nothing to report: a panic with
// its location is the report, as in a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use payonce_log::{Durability, FsStorage, Log, LogConfig, LogReader, PREALLOCATE_LEN, sync_rate};

const RECORD_LEN: usize = 128;
/// A 128-byte record's frame: 16 bytes of header, the payload, no padding.
const FRAME_LEN: usize = 16 + RECORD_LEN;
const SCAN_RECORDS: u64 = 2_000_000;
const SCAN_ROUNDS: usize = 5;

fn main() {
    let base = std::env::var_os("PAYONCE_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let secs: u64 = std::env::var("PAYONCE_BENCH_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(3);
    let duration = Duration::from_secs(secs);
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "payonce-log benchmarks in {} ({} cores, {secs} s per durable run)",
        dir.path().display(),
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();

    let raw = sync_rate(&FsStorage::new(dir.path()), FRAME_LEN, duration).unwrap();
    println!("| measurement | layout | records/s | records per fdatasync | vs raw fdatasync |");
    println!("| --- | --- | ---: | ---: | ---: |");
    println!("| raw write + fdatasync, {FRAME_LEN} bytes | appended | {raw:.0} | 1 | 100% |");
    for threads in [1, 4, 16, 64] {
        for (layout, preallocate_len) in [("appended", 0), ("zeros ahead", PREALLOCATE_LEN)] {
            let (rate, per_sync) = durable_appends(dir.path(), threads, preallocate_len, duration);
            println!(
                "| durable append, {threads} thread{} | {layout} | {rate:.0} | {per_sync:.1} | {:.0}% |",
                if threads == 1 { "" } else { "s" },
                rate / raw * 100.0
            );
        }
    }
    println!();

    let (plain, scan, bytes) = scan_vs_plain_read(dir.path());
    println!(
        "| {} records of {RECORD_LEN} bytes ({:.0} MiB) | records/s | GiB/s | vs plain read |",
        SCAN_RECORDS,
        bytes as f64 / (1 << 20) as f64
    );
    println!("| --- | ---: | ---: | ---: |");
    for (name, seconds) in [
        ("plain read of the segment files", plain),
        ("verify-and-iterate scan", scan),
    ] {
        println!(
            "| {name} | {:.0} | {:.2} | {:.0}% |",
            SCAN_RECORDS as f64 / seconds,
            bytes as f64 / seconds / (1u64 << 30) as f64,
            plain / seconds * 100.0
        );
    }
}

/// `threads` threads each appending a record and waiting for it to be
/// durable, for `duration`, writing `preallocate_len` zeros ahead:
/// (records/s, records per flush).
fn durable_appends(
    dir: &Path,
    threads: usize,
    preallocate_len: u64,
    duration: Duration,
) -> (f64, f64) {
    let log_dir = dir.join(format!("durable-{threads}-{preallocate_len}"));
    let config = LogConfig {
        preallocate_len,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(Arc::new(FsStorage::new(&log_dir)), config).unwrap();
    let start = Instant::now();
    let deadline = start + duration;
    thread::scope(|scope| {
        for thread in 0..threads {
            let log = &log;
            scope.spawn(move || {
                let payload = [thread as u8; RECORD_LEN];
                while Instant::now() < deadline {
                    let seq = log.append(&payload).unwrap();
                    log.wait_durable(seq).unwrap();
                }
            });
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let stats = log.stats();
    drop(log);
    fs::remove_dir_all(log_dir).unwrap();
    (
        stats.durable_seq as f64 / elapsed,
        stats.durable_seq as f64 / stats.flushes.max(1) as f64,
    )
}

/// Best-of-rounds seconds for a plain read of every segment file and for a
/// verifying scan of the same log, and the bytes read.
fn scan_vs_plain_read(dir: &Path) -> (f64, f64, u64) {
    let log_dir = dir.join("scan");
    let config = LogConfig {
        durability: Durability::Never,
        ..LogConfig::default()
    };
    let storage = Arc::new(FsStorage::new(&log_dir));
    {
        let (log, _) = Log::open(storage.clone(), config.clone()).unwrap();
        let payload = [0xC3u8; RECORD_LEN];
        for _ in 0..SCAN_RECORDS {
            log.append(&payload).unwrap();
        }
        log.sync().unwrap();
    }
    let mut files: Vec<_> = fs::read_dir(&log_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    files.sort();
    let reader = LogReader::open(storage, config).unwrap();
    let mut plain = f64::MAX;
    let mut scan = f64::MAX;
    let mut bytes = 0;
    for _ in 0..SCAN_ROUNDS {
        let start = Instant::now();
        bytes = 0;
        for file in &files {
            bytes += black_box(fs::read(file).unwrap()).len() as u64;
        }
        plain = plain.min(start.elapsed().as_secs_f64());

        let start = Instant::now();
        let mut records = 0u64;
        let mut payload_bytes = 0usize;
        reader
            .scan(|record| {
                records += 1;
                payload_bytes += record.payload.len();
                Ok::<(), ()>(())
            })
            .unwrap();
        scan = scan.min(start.elapsed().as_secs_f64());
        assert_eq!(records, SCAN_RECORDS);
        black_box(payload_bytes);
    }
    fs::remove_dir_all(log_dir).unwrap();
    (plain, scan, bytes)
}
