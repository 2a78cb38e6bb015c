//! payonce ledger benchmarks, a plain `main` that prints tables:
//! `cargo bench -p payonce --bench ledger`.
//!
//! - Durable submits (claim and outcome both synced) with 1, 8 and 64
//!   threads, with the log appending and writing over zeros written ahead
//!   (`preallocate_len`, the default), beside the raw write + fdatasync
//!   rate of the same disk, appending and overwriting, measured in the
//!   same run; with each submit's CPU time and context switches, counted by
//!   its thread from `/proc/thread-self`.
//! - Opening logs of 1M, 3M and 10M events, replaying (and re-deriving)
//!   every event beside opening from the snapshot taken at the log's end:
//!   time and peak memory, each open in a fresh child process, three opens
//!   of each kind per log, alternated, the best of each; the snapshot's
//!   size, and how long taking it held the ledger's lock and took.
//! - Resident bytes per claimed withdrawal, beyond the text of their keys
//!   and ids.
//! - What taking snapshots costs durable submits: 64 threads creating and
//!   submitting for 30 s a run on copies of one ledger, the default
//!   snapshot policy alternated with none.
//!
//! `PAYONCE_BENCH_DIR` picks the directory (default: the system temp dir);
//! `PAYONCE_BENCH_SECS` the seconds per durable measurement (default 3;
//! `PAYONCE_BENCH_SNAPSHOT_SECS` for the snapshots' cost, default 30);
//! `PAYONCE_BENCH_EVENTS` the replay sizes (default `1000000,3000000,10000000`:
//! the second holds 1M claimed withdrawals);
//! `PAYONCE_BENCH_THREADS` the thread counts (default `1,8,64`); `none`
//! leaves a table out.

// A benchmark that cannot read or write has nothing to report: a panic with
// its location is the report, as in a test.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use payonce::{Config, Ledger, NewWithdrawal, SendFailure, SnapshotPolicy};
use payonce_log::{
    Durability, FsStorage, LogConfig, PREALLOCATE_LEN, overwrite_sync_rate, sync_rate,
};
use payonce_model::{Reference, WithdrawalRequest};

/// A claim or outcome event is about this big on disk; the raw loop writes
/// the same size.
const EVENT_LEN: usize = 200;

/// Opens of each replay log, each in a fresh process.
const OPENS: usize = 3;

/// The most submits a second prepared for, whatever the disk: a directory
/// on tmpfs (`PAYONCE_BENCH_DIR=/dev/shm`), whose syncs cost nothing, is
/// bound by the CPU alone.
const SUBMITS_PER_SEC_MAX: f64 = 500_000.0;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(index) = args.iter().position(|arg| arg == "--open-child") {
        open_child(Path::new(&args[index + 1]), &args[index + 2]);
        return;
    }
    // `--build DIR EVENTS`: leave a log behind, for profiling an open.
    if let Some(index) = args.iter().position(|arg| arg == "--build") {
        build_log(
            Path::new(&args[index + 1]),
            args[index + 2].parse().unwrap(),
        );
        return;
    }
    let base = std::env::var_os("PAYONCE_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let secs: u64 = std::env::var("PAYONCE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let sizes: Vec<u64> = numbers("PAYONCE_BENCH_EVENTS", "1000000,3000000,10000000");
    let thread_counts = numbers("PAYONCE_BENCH_THREADS", "1,8,64");
    let duration = Duration::from_secs(secs);
    // Every ledger stays until the end, when this directory is removed: on
    // a disk mounted with `discard`, as this benchmark's was, removing one
    // frees its blocks while the next measurement runs.
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "payonce ledger benchmarks in {} ({} cores, {secs} s per durable run)\n",
        dir.path().display(),
        thread::available_parallelism().map_or(0, |n| n.get())
    );

    if !thread_counts.is_empty() {
        durable_table(dir.path(), thread_counts, duration);
        println!();
    }
    if !sizes.is_empty() {
        replay_table(dir.path(), sizes);
        println!();
    }
    let snapshot_threads = numbers("PAYONCE_BENCH_SNAPSHOTS", "64");
    if let Some(&threads) = snapshot_threads.first() {
        snapshot_cost_table(dir.path(), threads);
    }
}

/// The durable submits' table: the disk's raw rates, then every thread
/// count in both layouts.
fn durable_table(dir: &Path, thread_counts: Vec<usize>, duration: Duration) {
    let storage = FsStorage::new(dir);
    let raw = sync_rate(&storage, EVENT_LEN, duration).unwrap();
    let overwrite = overwrite_sync_rate(&storage, EVENT_LEN, duration).unwrap();
    let limit = raw / 2.0;
    println!(
        "| measurement | log layout | submits/s | vs half the raw fdatasync rate | CPU µs per submit | context switches per submit |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    println!(
        "| half the raw write + fdatasync rate ({EVENT_LEN} bytes: {raw:.0}/s) | appended | {limit:.0} | 100% | | |"
    );
    println!(
        "| half the raw overwrite + fdatasync rate ({overwrite:.0}/s) | zeros ahead | {:.0} | {:.0}% | | |",
        overwrite / 2.0,
        overwrite / 2.0 / limit * 100.0
    );
    // A sync covers at most one record of each thread, and a submit makes
    // two: prepared for four times that, as the disk's rate varies by the
    // second.
    let sync_max = raw.max(overwrite);
    for threads in thread_counts {
        let rate_max = (2.0 * sync_max * threads as f64).min(SUBMITS_PER_SEC_MAX);
        for (layout, preallocate_len) in [("appended", 0), ("zeros ahead", PREALLOCATE_LEN)] {
            let run = durable_submits(dir, threads, preallocate_len, duration, rate_max);
            println!(
                "| durable submit, {threads} thread{} | {layout} | {:.0} | {:.0}% | {:.1} | {:.2} |",
                plural(threads),
                run.rate,
                run.rate / limit * 100.0,
                run.cost.cpu_ns as f64 / 1000.0 / run.submits as f64,
                run.cost.switches as f64 / run.submits as f64,
            );
        }
    }
}

/// Claimed withdrawals in the ledger each run of [`snapshot_cost_table`]
/// starts from.
const SNAPSHOT_COST_HELD: u64 = 200_000;

/// Rounds of [`snapshot_cost_table`], each a run without snapshots and one
/// with.
const SNAPSHOT_COST_ROUNDS: usize = 3;

/// Seconds per run of [`snapshot_cost_table`] by default
/// (`PAYONCE_BENCH_SNAPSHOT_SECS`): long enough for the default policy to
/// pace its snapshots as it does in a running service, where a snapshot
/// that took `t` is followed by none for `19 t` (at 200,000 to 2M
/// withdrawals under this load, `t` is 1 to 3 s).
const SNAPSHOT_COST_SECS: u64 = 30;

/// Durable creates and submits at `threads` threads, each run on a fresh
/// copy of a ledger holding [`SNAPSHOT_COST_HELD`] claimed withdrawals,
/// alternating the default snapshot policy with no snapshots.
fn snapshot_cost_table(dir: &Path, threads: usize) {
    let secs: u64 = std::env::var("PAYONCE_BENCH_SNAPSHOT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SNAPSHOT_COST_SECS);
    let base = dir.join("snapshot-cost");
    held_ledger(&base);
    println!(
        "| {secs} s runs, {threads} threads creating and submitting, from {SNAPSHOT_COST_HELD} claimed withdrawals | submits/s | snapshots taken | lock held at most | taking them, all told |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..2 * SNAPSHOT_COST_ROUNDS {
        let on = round % 2 == 1;
        let snapshots = match on {
            true => SnapshotPolicy {
                at_close: false,
                ..SnapshotPolicy::default()
            },
            false => SnapshotPolicy::never(),
        };
        let ledger_dir = dir.join(format!("snapshot-cost-{round}"));
        copy_dir(&base, &ledger_dir);
        let ledger = Ledger::open_with(
            &ledger_dir,
            Config {
                snapshots,
                ..Config::default()
            },
        )
        .unwrap();
        let rate = create_and_submit(&ledger, threads, Duration::from_secs(secs));
        let stats = ledger.snapshot_stats().unwrap();
        drop(ledger);
        rates[usize::from(on)].push(rate);
        println!(
            "| snapshots {} | {rate:.0} | {} | {:.1} ms | {:.2} s |",
            if on { "on" } else { "off" },
            stats.taken,
            stats.lock_held_max.as_secs_f64() * 1000.0,
            stats.took_total.as_secs_f64()
        );
    }
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let (off, on) = (median(&mut rates[0]), median(&mut rates[1]));
    println!(
        "| medians: off {off:.0}, on {on:.0} | {:+.1}% | | | |",
        (on / off - 1.0) * 100.0
    );
}

/// A ledger in `dir` holding [`SNAPSHOT_COST_HELD`] claimed and sent
/// withdrawals, built without syncs, with a snapshot at its end; synced.
fn held_ledger(dir: &Path) {
    let creating = Config {
        log: LogConfig {
            durability: Durability::Never,
            ..LogConfig::default()
        },
        snapshots: SnapshotPolicy::never(),
        ..Config::default()
    };
    let ledger = Ledger::init_with(dir, creating).unwrap();
    for index in 0..SNAPSHOT_COST_HELD {
        let request = new_withdrawal(&ledger);
        ledger
            .submit(&format!("held-{index:08}"), request, rail)
            .unwrap();
    }
    ledger.snapshot().unwrap();
    drop(ledger);
    sync_dir_files(dir);
    sync_dir_files(&dir.join("snapshots"));
}

/// Copies the ledger directory `from` (its files and its `snapshots/`) to
/// `to`, synced.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => {
                fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    sync_dir_files(to);
}

/// `threads` threads each creating a withdrawal and submitting it under a
/// new key, durably, until `duration` has passed: submits a second.
fn create_and_submit(ledger: &Ledger, threads: usize, duration: Duration) -> f64 {
    let start = Instant::now();
    let deadline = start + duration;
    let submits: usize = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || {
                    let mut count = 0;
                    while Instant::now() < deadline {
                        let request = new_withdrawal(ledger);
                        ledger
                            .submit(&format!("t{thread}-{count}"), request, rail)
                            .unwrap();
                        count += 1;
                    }
                    count
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    submits as f64 / start.elapsed().as_secs_f64()
}

/// Submits every thread's slice of withdrawals on `ledger` until `duration`
/// has passed: the rate, the submits, and what the threads spent.
fn submit_all(
    ledger: &Ledger,
    slices: &[&[WithdrawalRequest]],
    first_thread: usize,
    duration: Duration,
) -> (f64, usize, ThreadCost) {
    let start = Instant::now();
    let deadline = start + duration;
    let (submits, cost) = thread::scope(|scope| {
        let workers: Vec<_> = slices
            .iter()
            .enumerate()
            .map(|(thread, withdrawals)| {
                scope.spawn(move || {
                    submit_until(ledger, first_thread + thread, withdrawals, deadline)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .fold(
                (0, ThreadCost::default()),
                |(submits, cost), (count, spent)| (submits + count, cost.add(spent)),
            )
    });
    (
        submits as f64 / start.elapsed().as_secs_f64(),
        submits,
        cost,
    )
}

/// The replay table: a log of each size built, then opened in children.
fn replay_table(dir: &Path, sizes: Vec<u64>) {
    println!(
        "| log | withdrawals | full replay, best of {OPENS} | events/s | from a snapshot, best of {OPENS} | faster | snapshot | bytes per withdrawal | loaded at | taking it: lock held, all told | peak memory, full / snapshot | resident bytes per claimed withdrawal, beyond key and id text |"
    );
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for (index, events) in sizes.into_iter().enumerate() {
        // Numbered too, so a size given twice builds a second log.
        let ledger_dir = dir.join(format!("replay-{index}-{events}"));
        let built = build_log(&ledger_dir, events);
        // Alternated, each in a fresh process, so both read a log at rest
        // under the same conditions.
        let mut full = Vec::new();
        let mut snapshot = Vec::new();
        for _ in 0..OPENS {
            full.push(open_in_child(&ledger_dir, "full"));
            snapshot.push(open_in_child(&ledger_dir, "snapshot"));
        }
        let best = |opens: &[Opened]| {
            opens
                .iter()
                .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
                .cloned()
                .unwrap()
        };
        let (full, snapshot) = (best(&full), best(&snapshot));
        // Each open records its own opening: the log grows by one event per open.
        assert!(full.events.abs_diff(snapshot.events) <= 2 * OPENS as u64);
        let per_withdrawal = (full.resident_after_kib - full.resident_before_kib) as f64 * 1024.0
            / built.withdrawals as f64;
        println!(
            "| {events} events | {} | {:.2} s | {:.0} | {:.3} s | {:.1}x | {:.0} MiB | {:.0} | {:.0} MiB/s | {:.0} ms, {:.2} s | {} / {} MiB | {:.0} |",
            built.withdrawals,
            full.seconds,
            full.events as f64 / full.seconds,
            snapshot.seconds,
            full.seconds / snapshot.seconds,
            built.snapshot_len as f64 / (1 << 20) as f64,
            built.snapshot_len as f64 / built.withdrawals as f64,
            built.snapshot_len as f64 / (1 << 20) as f64 / snapshot.seconds,
            built.lock_held.as_secs_f64() * 1000.0,
            built.took.as_secs_f64(),
            full.peak_kib / 1024,
            snapshot.peak_kib / 1024,
            per_withdrawal - built.text_bytes,
        );
    }
}

/// The comma-separated numbers in environment variable `name`, or
/// `default`; none for `none`, which leaves that table out.
fn numbers<T: std::str::FromStr<Err: std::fmt::Debug>>(name: &str, default: &str) -> Vec<T> {
    let list = std::env::var(name).unwrap_or_else(|_| default.to_owned());
    if list == "none" {
        return Vec::new();
    }
    list.split(',').map(|n| n.trim().parse().unwrap()).collect()
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn new_withdrawal(ledger: &Ledger) -> WithdrawalRequest {
    ledger
        .create(NewWithdrawal {
            amount: "25.00".parse().unwrap(),
            currency: "USDC".parse().unwrap(),
            destination: "0x52908400098527886E0F7030069857D2E4169EE7"
                .parse()
                .unwrap(),
            requested_by: "bench".parse().unwrap(),
        })
        .unwrap()
}

/// The rail: answers at once with a reference.
fn rail(request: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    let reference = Reference::new(format!("0x{:0>64}", request.id().as_str())).unwrap();
    Ok(request
        .approve()
        .unwrap()
        .start_sending()
        .unwrap()
        .mark_sent(reference)
        .unwrap())
}

/// What a thread spent: CPU time and context switches (voluntary or not),
/// as `/proc/thread-self` counts them.
#[derive(Debug, Clone, Copy, Default)]
struct ThreadCost {
    cpu_ns: u64,
    switches: u64,
}

impl ThreadCost {
    /// The calling thread's totals so far.
    fn now() -> ThreadCost {
        let schedstat = fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        let cpu_ns = schedstat
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let status = fs::read_to_string("/proc/thread-self/status").unwrap();
        let switches = status
            .lines()
            .filter(|line| line.contains("ctxt_switches:"))
            .map(|line| {
                line.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        ThreadCost { cpu_ns, switches }
    }

    fn since(self, start: ThreadCost) -> ThreadCost {
        ThreadCost {
            cpu_ns: self.cpu_ns - start.cpu_ns,
            switches: self.switches - start.switches,
        }
    }

    fn add(self, other: ThreadCost) -> ThreadCost {
        ThreadCost {
            cpu_ns: self.cpu_ns + other.cpu_ns,
            switches: self.switches + other.switches,
        }
    }
}

/// A durable submit run: its rate, and what its threads spent.
struct DurableRun {
    rate: f64,
    submits: usize,
    cost: ThreadCost,
}

/// `threads` threads each submitting new withdrawals for `duration`, with
/// the durable defaults but for the log writing `preallocate_len` zeros
/// ahead. Withdrawals are created before the clock starts (enough for
/// `rate_max` submits a second), on the log opened without syncs and then
/// synced and reopened: creating is not what is measured.
fn durable_submits(
    dir: &Path,
    threads: usize,
    preallocate_len: u64,
    duration: Duration,
    rate_max: f64,
) -> DurableRun {
    let ledger_dir = dir.join(format!("submit-{threads}-{preallocate_len}"));
    let log = LogConfig {
        preallocate_len,
        ..LogConfig::default()
    };
    let creating = Config {
        log: LogConfig {
            durability: Durability::Never,
            ..log.clone()
        },
        ..Config::default()
    };
    let ledger = Ledger::init_with(&ledger_dir, creating).unwrap();
    let per_thread = ((duration.as_secs_f64() * rate_max) as usize / threads).max(2_000);
    let prepared: Vec<Vec<WithdrawalRequest>> = (0..threads)
        .map(|_| (0..per_thread).map(|_| new_withdrawal(&ledger)).collect())
        .collect();
    drop(ledger);
    sync_dir_files(&ledger_dir);
    let config = Config {
        log,
        ..Config::default()
    };
    let ledger = Ledger::open_with(&ledger_dir, config).unwrap();
    let slices: Vec<&[WithdrawalRequest]> = prepared.iter().map(Vec::as_slice).collect();
    let (rate, submits, cost) = submit_all(&ledger, &slices, 0, duration);
    drop(ledger);
    DurableRun {
        rate,
        submits,
        cost,
    }
}

/// One thread of [`durable_submits`]: submits `withdrawals` under keys of
/// its own until `deadline`; how many, and what the thread spent.
fn submit_until(
    ledger: &Ledger,
    thread: usize,
    withdrawals: &[WithdrawalRequest],
    deadline: Instant,
) -> (usize, ThreadCost) {
    let start = ThreadCost::now();
    let mut count = 0;
    for (index, request) in withdrawals.iter().enumerate() {
        if Instant::now() >= deadline {
            break;
        }
        ledger
            .submit(&format!("t{thread}-{index}"), request.clone(), rail)
            .unwrap();
        count += 1;
    }
    assert!(
        Instant::now() >= deadline,
        "ran out of prepared withdrawals"
    );
    (count, ThreadCost::now().since(start))
}

/// Syncs every file in `dir`, and `dir` itself.
fn sync_dir_files(dir: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        fs::File::open(entry.unwrap().path())
            .unwrap()
            .sync_all()
            .unwrap();
    }
    fs::File::open(dir).unwrap().sync_all().unwrap();
}

/// What [`build_log`] left.
struct Built {
    withdrawals: u64,
    /// The average bytes of key plus id text.
    text_bytes: f64,
    /// The snapshot taken at its end.
    snapshot_len: u64,
    lock_held: Duration,
    took: Duration,
}

/// Fills a ledger with about `events` events (created, claimed, completed
/// per withdrawal) without syncing each, and takes a snapshot at its end.
fn build_log(dir: &Path, events: u64) -> Built {
    let config = Config {
        log: LogConfig {
            durability: Durability::Never,
            ..LogConfig::default()
        },
        snapshots: SnapshotPolicy::never(),
        ..Config::default()
    };
    let ledger = Ledger::init_with(dir, config).unwrap();
    let withdrawals = events / 3;
    let mut text = 0usize;
    for index in 0..withdrawals {
        let request = new_withdrawal(&ledger);
        let key = format!("req-{index:08}");
        text += key.len() + request.id().len();
        ledger.submit(&key, request, rail).unwrap();
    }
    ledger.sync().unwrap();
    let taken = ledger.snapshot().unwrap().unwrap();
    drop(ledger);
    // Built without syncs, for speed, the log is left in the kernel's cache
    // to be written back, perhaps while the opens run. A ledger with the
    // default durability has synced every record before it is reopened.
    sync_dir_files(dir);
    Built {
        withdrawals,
        text_bytes: text as f64 / withdrawals as f64,
        snapshot_len: taken.len,
        lock_held: taken.lock_held,
        took: taken.took,
    }
}

#[derive(Clone)]
struct Opened {
    seconds: f64,
    events: u64,
    peak_kib: u64,
    resident_before_kib: u64,
    resident_after_kib: u64,
}

/// Opens the ledger in a fresh process, so peak memory is the open's alone.
fn open_in_child(dir: &Path, how: &str) -> Opened {
    let output = Command::new(std::env::current_exe().unwrap())
        .arg("--open-child")
        .arg(dir)
        .arg(how)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let field = |name: &str| -> String {
        text.split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .unwrap()
            .to_owned()
    };
    Opened {
        seconds: field("seconds").parse().unwrap(),
        events: field("events").parse().unwrap(),
        peak_kib: field("peak_kib").parse().unwrap(),
        resident_before_kib: field("before_kib").parse().unwrap(),
        resident_after_kib: field("after_kib").parse().unwrap(),
    }
}

fn status_kib(name: &str) -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with(name)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Opens the ledger in `dir` replaying every event (`how` is `full`) or
/// from its newest snapshot, taking none; `set-apart` then sets its settled
/// pairs apart ([`Config::set_apart_settled`]).
fn open_child(dir: &Path, how: &str) {
    let snapshots = match how {
        "full" => SnapshotPolicy::off(),
        _ => SnapshotPolicy::never(),
    };
    let config = Config {
        snapshots,
        set_apart_settled: how == "set-apart",
        ..Config::default()
    };
    let before = status_kib("VmRSS:");
    let start = Instant::now();
    let ledger = Ledger::open_with(dir, config).unwrap();
    assert_eq!(ledger.recovery().snapshot.is_some(), how != "full");
    let seconds = start.elapsed().as_secs_f64();
    let events = ledger.last_seq();
    let after = status_kib("VmRSS:");
    let peak = status_kib("VmHWM:");
    println!(
        "seconds={seconds} events={events} peak_kib={peak} before_kib={before} after_kib={after}"
    );
    drop(ledger);
}
