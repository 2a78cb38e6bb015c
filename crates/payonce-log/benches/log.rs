//! payonce-log benchmarks, a plain `main` that prints a table:
//! `cargo bench -p payonce-log`.
//!
//! - Durable appends (128-byte records, append + wait_durable in a loop) with
//!   1, 4, 16 and 64 threads, each appending and writing over zeros
//!   written ahead (`preallocate_len`, the default), beside the raw rates
//!   of a write and an fdatasync on a file in the same directory,
//!   appending and overwriting, measured in the same run.
//! - The checkpoint's cost at 64 threads: the default (a checkpoint every
//!   second and every `CHECKPOINT_RECORDS` records, by a thread of the
//!   log's own) beside
//!   none until close, alternating, and how far the checkpoint trailed the
//!   durable head meanwhile (the window in which a cut goes unnoticed).
//! - A full verify-and-iterate scan beside a plain read of the same files,
//!   and SHA-256 of the same payloads alone: the chain digest's share.
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

use payonce_log::{
    CHECKPOINT_RECORDS, Digest, Durability, FsStorage, Log, LogConfig, LogReader, PREALLOCATE_LEN,
    batch_digest, overwrite_sync_rate, sync_rate,
};

const RECORD_LEN: usize = 128;
/// A 128-byte record's frame: 16 bytes of header, the payload, no padding.
const FRAME_LEN: usize = 16 + RECORD_LEN;
const SCAN_RECORDS: u64 = 2_000_000;
const SCAN_ROUNDS: usize = 5;
/// Records per batch in the hashing-alone measurement: about what one
/// flush of [`PENDING_LEN_MAX`](payonce_log::PENDING_LEN_MAX) holds.
const SCAN_BATCH: usize = 16 << 20 >> 7;
/// Rounds of the checkpoint comparison, each running both settings.
const CHECKPOINT_ROUNDS: usize = 5;
/// How often the checkpoint comparison samples how far the checkpoint
/// trails the durable head.
const LAG_SAMPLE_EVERY: Duration = Duration::from_millis(5);

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

    let storage = FsStorage::new(dir.path());
    let raw = sync_rate(&storage, FRAME_LEN, duration).unwrap();
    let overwrite = overwrite_sync_rate(&storage, FRAME_LEN, duration).unwrap();
    println!("| measurement | layout | records/s | records per fdatasync | vs raw fdatasync |");
    println!("| --- | --- | ---: | ---: | ---: |");
    println!("| raw write + fdatasync, {FRAME_LEN} bytes | appended | {raw:.0} | 1 | 100% |");
    println!(
        "| raw overwrite + fdatasync, {FRAME_LEN} bytes | zeros ahead | {overwrite:.0} | 1 | {:.0}% |",
        overwrite / raw * 100.0
    );
    for threads in [1, 4, 16, 64] {
        for (layout, preallocate_len) in [("appended", 0), ("zeros ahead", PREALLOCATE_LEN)] {
            let config = LogConfig {
                preallocate_len,
                ..LogConfig::default()
            };
            let (rate, per_sync, _) = durable_appends(dir.path(), threads, config, duration);
            println!(
                "| durable append, {threads} thread{} | {layout} | {rate:.0} | {per_sync:.1} | {:.0}% |",
                if threads == 1 { "" } else { "s" },
                rate / raw * 100.0
            );
        }
    }
    println!();
    checkpoint_cost(dir.path(), duration);
    println!();

    let (plain, scan, bytes, hashing) = scan_vs_plain_read(dir.path());
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
    println!(
        "\nSHA-256 chain digest of the same payloads alone: {:.3} s, {:.0}% of the scan \
         ({:.2} GiB/s of payload, {:.1} ns per record)",
        hashing,
        hashing / scan * 100.0,
        (SCAN_RECORDS as usize * RECORD_LEN) as f64 / hashing / (1u64 << 30) as f64,
        hashing / SCAN_RECORDS as f64 * 1e9
    );
}

/// 64 threads appending durably with the default checkpoints and with none
/// until close, alternating rounds; prints the medians, the ratio, and how
/// far the checkpoint trailed the durable head in the default runs.
fn checkpoint_cost(dir: &Path, duration: Duration) {
    let with = LogConfig::default();
    let without = LogConfig {
        checkpoint_records: 0,
        checkpoint_interval: None,
        ..LogConfig::default()
    };
    let mut rates = [Vec::new(), Vec::new()];
    let mut lags = Vec::new();
    let mut checkpoints = 0;
    for round in 0..CHECKPOINT_ROUNDS {
        // Alternate which goes first, so neither always follows the other.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let config = [&with, &without][which].clone();
            let (rate, _, lag) = durable_appends(dir, 64, config, duration);
            rates[which].push(rate);
            if which == 0 {
                checkpoints += lag.checkpoints;
                lags.push(lag);
            }
        }
    }
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let (on, off) = (median(&mut rates[0]), median(&mut rates[1]));
    println!("| 64 threads, zeros ahead | records/s (median of {CHECKPOINT_ROUNDS}) | rounds |");
    println!("| --- | ---: | --- |");
    println!(
        "| checkpoints every 1 s and {CHECKPOINT_RECORDS} records (default) | {on:.0} | {:.0?} |",
        rates[0]
    );
    println!(
        "| no checkpoint until close | {off:.0} | {:.0?} |",
        rates[1]
    );
    println!(
        "\ncheckpoint cost: {:.1}% of throughput",
        (1.0 - on / off) * 100.0
    );
    let max = lags.iter().map(|lag| lag.max).max().unwrap_or(0);
    let samples: u64 = lags.iter().map(|lag| lag.samples).sum();
    let mean = lags.iter().map(|lag| lag.sum).sum::<u64>() as f64 / samples.max(1) as f64;
    println!(
        "checkpoint behind the durable head, sampled every {LAG_SAMPLE_EVERY:?}: mean {mean:.0} \
         records, max {max} records ({:.0} ms at the median rate); {checkpoints} checkpoints in \
         {CHECKPOINT_ROUNDS} runs of {duration:?}",
        max as f64 / on * 1000.0
    );
}

/// How far a log's checkpoint trailed its durable head while it ran.
#[derive(Debug, Default)]
struct Lag {
    max: u64,
    sum: u64,
    samples: u64,
    checkpoints: u64,
}

/// `threads` threads each appending a record and waiting for it to be
/// durable, for `duration`, on a log opened with `config`: (records/s,
/// records per flush, how far the checkpoint trailed the durable head).
fn durable_appends(
    dir: &Path,
    threads: usize,
    config: LogConfig,
    duration: Duration,
) -> (f64, f64, Lag) {
    let log_dir = tempfile::tempdir_in(dir).unwrap();
    let (log, _) = Log::open(Arc::new(FsStorage::new(log_dir.path())), config).unwrap();
    let start = Instant::now();
    let deadline = start + duration;
    let mut lag = Lag::default();
    thread::scope(|scope| {
        let (sampled, lag) = (&log, &mut lag);
        scope.spawn(move || {
            while Instant::now() < deadline {
                thread::sleep(LAG_SAMPLE_EVERY);
                let stats = sampled.stats();
                // Ahead for a moment while a batch rolls a segment.
                let behind = stats.durable_seq.saturating_sub(stats.checkpoint_seq);
                lag.max = lag.max.max(behind);
                lag.sum += behind;
                lag.samples += 1;
            }
        });
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
    lag.checkpoints = stats.checkpoints;
    drop(log);
    (
        stats.durable_seq as f64 / elapsed,
        stats.durable_seq as f64 / stats.flushes.max(1) as f64,
        lag,
    )
}

/// Best-of-rounds seconds for a plain read of every segment file, for a
/// verifying scan of the same log, the bytes read, and best-of-rounds
/// seconds for the chain digest of the same payloads alone, in batches of
/// the size the scan's log was flushed in.
fn scan_vs_plain_read(dir: &Path) -> (f64, f64, u64, f64) {
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
    let mut hashing = f64::MAX;
    let mut bytes = 0;
    let payloads = vec![[0xC3u8; RECORD_LEN]; SCAN_RECORDS as usize];
    for _ in 0..SCAN_ROUNDS {
        let start = Instant::now();
        let mut digest = Digest::GENESIS;
        for (index, batch) in payloads.chunks(SCAN_BATCH).enumerate() {
            let first_seq = (index * SCAN_BATCH) as u64 + 1;
            digest = batch_digest(&digest, first_seq, batch.iter().map(|p| p.as_slice()));
        }
        black_box(digest);
        hashing = hashing.min(start.elapsed().as_secs_f64());

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
    (plain, scan, bytes, hashing)
}
