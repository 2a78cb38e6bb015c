//! payonce-runs benchmarks, a plain `main` that prints a table:
//! `cargo bench -p payonce-runs`.
//!
//! For `PAYONCE_BENCH_RECORDS` records (default 1,000,000) of 220 bytes
//! each as a run holds them (a 36-byte request key, a 23-byte withdrawal
//! id, a 153-byte payload: payonce's settled pairs):
//!
//! - writing a run from a batch in memory (sorting included) into a file;
//! - merging it with a newer run of a tenth as many records, half of
//!   them new and half newer copies of old ones, into a file;
//! - a present name looked up by either name through a warm cache (every
//!   block held), and through a cold one (a new cache per lookup),
//!   reading the file with `O_DIRECT` so that the page cache does not
//!   answer either (where the file system refuses `O_DIRECT`, through the
//!   page cache, and the table says so);
//! - an absent name looked up, and how many of those read a block;
//! - what the run's filters and fences take in memory.
//!
//! `PAYONCE_BENCH_DIR` picks the directory (default: the system temp dir).

// A benchmark that cannot read or write has nothing to report: a panic with
// its location is the report, as in a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use payonce_runs::{
    BlockCache, HashKey, Record, Run, RunError, RunSink, RunSource, merge, write_batch,
};

const KEY_LEN: usize = 36;
const ID_LEN: usize = 23;
const PAYLOAD_LEN: usize = 153;
/// A record as a block holds it: three lengths, two names, the payload.
const RECORD_LEN: usize = 8 + KEY_LEN + ID_LEN + PAYLOAD_LEN;
const LOOKUPS: usize = 20_000;
const ABSENT_LOOKUPS: usize = 1_000_000;
/// `O_DIRECT` on Linux (x86-64 and most others; aarch64 has its own).
#[cfg(target_arch = "aarch64")]
const O_DIRECT: i32 = 0o200000;
#[cfg(not(target_arch = "aarch64"))]
const O_DIRECT: i32 = 0o40000;
/// What `O_DIRECT` reads align to.
const ALIGN: u64 = 4096;

fn main() {
    let records: usize = std::env::var("PAYONCE_BENCH_RECORDS")
        .map(|n| n.parse().unwrap())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir_in(
        std::env::var_os("PAYONCE_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from),
    )
    .unwrap();
    println!("payonce-runs: {records} records of {RECORD_LEN} bytes as a block holds them");
    println!();
    let key = HashKey::new(0x5eed, 0xcafe);
    let arena = Arena::numbered(0..records as u64, 0);
    let older = dir.path().join("older.run");
    let summary = timed_write(&arena, key, &older, "write (sort + blocks + filters)");
    let newer_arena = Arena::numbered(records as u64 / 20 * 19..records as u64 / 20 * 21, 1);
    let newer = dir.path().join("newer.run");
    write_file(&newer_arena, key, &newer);
    timed_merge(
        &older,
        &newer,
        &dir.path().join("merged.run"),
        summary.bytes,
    );
    println!();
    lookups(&older, &arena, records as u64);
}

/// Records' bytes end to end, and where each record's parts lie.
struct Arena {
    bytes: Vec<u8>,
    count: usize,
}

impl Arena {
    /// Records numbered `numbers`; `version` changes their payloads.
    fn numbered(numbers: std::ops::Range<u64>, version: u8) -> Arena {
        let count = (numbers.end - numbers.start) as usize;
        let mut bytes = Vec::with_capacity(count * (RECORD_LEN - 8));
        for n in numbers {
            bytes.extend_from_slice(key_of(n).as_bytes());
            bytes.extend_from_slice(id_of(n).as_bytes());
            let seed = splitmix(n ^ u64::from(version) << 56);
            bytes.extend((0..PAYLOAD_LEN).map(|i| (seed >> (i % 8 * 8)) as u8 ^ i as u8));
        }
        Arena { bytes, count }
    }

    fn records(&self) -> Vec<Record<'_>> {
        (self.bytes.chunks_exact(RECORD_LEN - 8))
            .map(|record| Record {
                primary: &record[..KEY_LEN],
                secondary: &record[KEY_LEN..KEY_LEN + ID_LEN],
                payload: &record[KEY_LEN + ID_LEN..],
            })
            .collect()
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A request key as a client makes one: 36 characters.
fn key_of(n: u64) -> String {
    let (a, b) = (splitmix(n), splitmix(!n));
    let key = format!("{a:016x}-{:04x}-{b:012x}", n % 65_536);
    format!("{:0<36}", &key[..key.len().min(KEY_LEN)])
}

/// A withdrawal id: 23 characters.
fn id_of(n: u64) -> String {
    format!("wd-{n:020}")
}

/// A run's sink: a file, buffered.
struct FileSink(BufWriter<File>);

impl RunSink for FileSink {
    fn append(&mut self, bytes: &[u8]) -> Result<(), RunError> {
        (self.0.write_all(bytes)).map_err(|e| RunError::append_failed(0, bytes.len() as u64, e))
    }
}

fn write_file(arena: &Arena, key: HashKey, path: &Path) -> payonce_runs::RunSummary {
    let mut records = arena.records();
    let mut sink = FileSink(BufWriter::with_capacity(
        1 << 20,
        File::create(path).unwrap(),
    ));
    let summary = write_batch(&mut sink, key, &mut records).unwrap();
    let file = sink.0.into_inner().unwrap();
    file.sync_all().unwrap();
    summary
}

fn timed_write(arena: &Arena, key: HashKey, path: &Path, what: &str) -> payonce_runs::RunSummary {
    let started = Instant::now();
    let summary = write_file(arena, key, path);
    let took = started.elapsed();
    let rate = arena.count as f64 / took.as_secs_f64();
    let mb = summary.bytes as f64 / 1e6 / took.as_secs_f64();
    println!(
        "| {what} | {:.2} s | {rate:.0} records/s | {mb:.0} MB/s |",
        took.as_secs_f64()
    );
    println!(
        "|   run | {} bytes | {} record blocks | {} secondary blocks |",
        summary.bytes, summary.record_blocks, summary.secondary_blocks
    );
    summary
}

fn timed_merge(older: &Path, newer: &Path, merged: &Path, older_bytes: u64) {
    let older = Run::open(PagedSource::open(older), 1).unwrap();
    let newer = Run::open(PagedSource::open(newer), 2).unwrap();
    let cache = BlockCache::new(64 << 20);
    let mut sink = FileSink(BufWriter::with_capacity(
        1 << 20,
        File::create(merged).unwrap(),
    ));
    let started = Instant::now();
    let summary = merge(&[&newer, &older], &cache, &mut sink).unwrap();
    sink.0.into_inner().unwrap().sync_all().unwrap();
    let took = started.elapsed();
    let inputs = older.records_len() + newer.records_len();
    let rate = inputs as f64 / took.as_secs_f64();
    let mb = (older_bytes + newer.byte_len()) as f64 / 1e6 / took.as_secs_f64();
    println!(
        "| merge {} + {} into {} | {:.2} s | {rate:.0} input records/s | {mb:.0} MB/s read |",
        older.records_len(),
        newer.records_len(),
        summary.records,
        took.as_secs_f64()
    );
}

/// A run in a file, read through the page cache.
#[derive(Debug)]
struct PagedSource {
    file: File,
    len: u64,
}

impl PagedSource {
    fn open(path: &Path) -> PagedSource {
        let file = File::open(path).unwrap();
        let len = file.metadata().unwrap().len();
        PagedSource { file, len }
    }
}

impl RunSource for PagedSource {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        into.resize(len, 0);
        (self.file.read_exact_at(into, offset))
            .map_err(|e| RunError::read_failed(offset, len as u64, e))
    }

    fn byte_len(&self) -> u64 {
        self.len
    }
}

/// A run in a file, read around the page cache (`O_DIRECT`): every read
/// is the disk's. Reads are widened to 4 KiB boundaries into an aligned
/// buffer, then the bytes asked for copied out.
#[derive(Debug)]
struct DirectSource {
    file: File,
    len: u64,
}

impl DirectSource {
    fn open(path: &Path) -> Option<DirectSource> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(O_DIRECT)
            .open(path)
            .ok()?;
        let len = file.metadata().ok()?.len();
        let source = DirectSource { file, len };
        // Some file systems open with O_DIRECT and refuse the reads.
        source.read_at(0, 1, &mut Vec::new()).ok()?;
        Some(source)
    }
}

impl RunSource for DirectSource {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        let start = offset / ALIGN * ALIGN;
        let end = (offset + len as u64).div_ceil(ALIGN) * ALIGN;
        let mut buffer = vec![0u8; (end - start + ALIGN) as usize];
        let skew = (ALIGN - buffer.as_ptr() as u64 % ALIGN) % ALIGN;
        let aligned = &mut buffer[skew as usize..][..(end - start) as usize];
        let mut done = 0;
        while done < aligned.len() {
            let read = (self.file.read_at(&mut aligned[done..], start + done as u64))
                .map_err(|e| RunError::read_failed(offset, len as u64, e))?;
            if read == 0 {
                break;
            }
            done += read;
        }
        let from = (offset - start) as usize;
        into.clear();
        into.extend_from_slice(&aligned[from..(from + len).min(done)]);
        Ok(())
    }

    fn byte_len(&self) -> u64 {
        self.len
    }
}

/// Percentiles of `took`, in microseconds.
fn percentiles(mut took: Vec<Duration>) -> String {
    took.sort_unstable();
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    let mean = took.iter().sum::<Duration>().as_secs_f64() * 1e6 / took.len() as f64;
    format!(
        "mean {mean:.2} µs | p50 {:.2} µs | p99 {:.2} µs",
        at(0.5),
        at(0.99)
    )
}

fn lookups(path: &Path, arena: &Arena, records: u64) {
    let (direct, how) = match DirectSource::open(path) {
        Some(source) => (Run::open(source, 1).unwrap(), "O_DIRECT"),
        None => (
            Run::open(PagedSource::open(path), 1).unwrap(),
            "page cache (no O_DIRECT)",
        ),
    };
    let paged = Run::open(PagedSource::open(path), 2).unwrap();
    let names: Vec<u64> = (0..LOOKUPS as u64)
        .map(|i| splitmix(i ^ 0xabc) % records)
        .collect();
    let all = arena.records();
    let warm = BlockCache::new(1 << 30);
    for &n in &names {
        paged.get(&warm, all[n as usize].primary).unwrap().unwrap();
        paged
            .get_by_secondary(&warm, all[n as usize].secondary)
            .unwrap()
            .unwrap();
    }
    let time = |run: &Run, cold: bool, secondary: bool| {
        let mut took = Vec::with_capacity(names.len());
        for &n in &names {
            let fresh;
            let cache = match cold {
                true => {
                    fresh = BlockCache::new(1 << 20);
                    &fresh
                }
                false => &warm,
            };
            let record = &all[n as usize];
            let started = Instant::now();
            let found = match secondary {
                false => run.get(cache, record.primary),
                true => run.get_by_secondary(cache, record.secondary),
            };
            took.push(started.elapsed());
            assert_eq!(black_box(found.unwrap().unwrap()).payload(), record.payload);
        }
        percentiles(took)
    };
    println!(
        "| present, by primary name, warm cache | {} |",
        time(&paged, false, false)
    );
    println!(
        "| present, by secondary name, warm cache | {} |",
        time(&paged, false, true)
    );
    println!(
        "| present, by primary name, cold cache, {how} | {} |",
        time(&direct, true, false)
    );
    println!(
        "| present, by secondary name, cold cache, {how} | {} |",
        time(&direct, true, true)
    );
    absent(&paged, &warm);
    println!(
        "| memory | filters {} bytes ({:.2} a record) | fences {} bytes ({:.2} a record) |",
        paged.filter_bytes(),
        paged.filter_bytes() as f64 / records as f64,
        paged.fence_bytes(),
        paged.fence_bytes() as f64 / records as f64
    );
}

fn absent(run: &Run, warm: &BlockCache) {
    let absent: Vec<String> = (0..ABSENT_LOOKUPS as u64)
        .map(|n| key_of(n | 1 << 62))
        .collect();
    let misses = warm.stats().misses;
    let started = Instant::now();
    let mut passed = 0;
    for name in &absent {
        passed += usize::from(run.might_hold_primary(name.as_bytes()));
        assert!(black_box(run.get(warm, name.as_bytes()).unwrap()).is_none());
    }
    let took = started.elapsed();
    println!(
        "| absent, by primary name | mean {:.3} µs | {passed} of {ABSENT_LOOKUPS} passed the filter | {} blocks read |",
        took.as_secs_f64() * 1e6 / ABSENT_LOOKUPS as f64,
        warm.stats().misses - misses
    );
}
