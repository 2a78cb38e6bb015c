//! `budget_bench`: a file ledger that runs for years, under its memory
//! budget (docs/performance.md, "A ledger under a memory budget"). Each
//! subcommand is one process, so its resident memory is its own:
//!
//! ```sh
//! budget_bench grow DIR --withdrawals 10000000     # decides them itself, 64 threads, durable
//! budget_bench open DIR                            # a restart: seconds to open, memory
//! budget_bench retries DIR --count 1000000         # random old keys retried, 64 threads
//! budget_bench cold DIR --count 2000               # runs checked, page cache dropped: one retry at a time
//! budget_bench snapshot-cost DIR --more 30000      # what the next snapshot writes
//! budget_bench submits DIR --secs 20 --rounds 3    # new keys at 64 threads, against a fresh ledger
//! ```
//!
//! Withdrawal `n` is `w-n` under key `k-n` (ten digits), its id the
//! caller's own (`Config::accept_foreign_ids`), so a retry is rebuilt from
//! `n` alone and the benchmark holds nothing per withdrawal.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use payonce::{
    Config, DirSnapshots, Ledger, MemoryUse, SNAPSHOTS_DIR, SendFailure, SnapshotPolicy,
};
use payonce_bench::CountingStorage;
use payonce_model::{
    Actor, Amount, Currency, Destination, Reference, WithdrawalId, WithdrawalRequest,
};

#[derive(Debug, Parser)]
#[command(
    name = "budget_bench",
    about = "A file ledger under its memory budget, at scale"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Creates a ledger in DIR (or goes on with the one there) and decides
    /// withdrawals until it holds WITHDRAWALS, printing a line every
    /// REPORT_EVERY.
    Grow {
        dir: PathBuf,
        #[arg(long)]
        withdrawals: u64,
        #[arg(long, default_value_t = 64)]
        threads: usize,
        #[arg(long, default_value_t = 1_000_000)]
        report_every: u64,
    },
    /// Opens the ledger in DIR: seconds, and memory.
    Open { dir: PathBuf },
    /// Opens the ledger in DIR and retries COUNT random keys of it.
    Retries {
        dir: PathBuf,
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        #[arg(long, default_value_t = 64)]
        threads: usize,
    },
    /// Opens the ledger in DIR, waits for its runs' check, drops the page
    /// cache, and retries COUNT random keys one at a time, then submits
    /// COUNT new ones.
    Cold {
        dir: PathBuf,
        #[arg(long, default_value_t = 2_000)]
        count: u64,
    },
    /// Decides MORE withdrawals in DIR, then takes a snapshot: the bytes
    /// it writes against the bytes of the state it names.
    SnapshotCost {
        dir: PathBuf,
        #[arg(long, default_value_t = 30_000)]
        more: u64,
    },
    /// Submits new keys at THREADS threads for SECS seconds on the ledger
    /// in DIR and on a fresh one beside it, in turn, ROUNDS times.
    Submits {
        dir: PathBuf,
        #[arg(long, default_value_t = 64)]
        threads: usize,
        #[arg(long, default_value_t = 20)]
        secs: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Grow {
            dir,
            withdrawals,
            threads,
            report_every,
        } => grow(&dir, withdrawals, threads, report_every),
        Command::Open { dir } => open_only(&dir),
        Command::Retries {
            dir,
            count,
            threads,
        } => retries(&dir, count, threads),
        Command::Cold { dir, count } => cold(&dir, count),
        Command::SnapshotCost { dir, more } => snapshot_cost(&dir, more),
        Command::Submits {
            dir,
            threads,
            secs,
            rounds,
        } => submits(&dir, threads, Duration::from_secs(secs), rounds),
    }
}

/// A ledger in `dir` under the default budget, its snapshots counted.
struct Opened {
    ledger: Ledger,
    counted: CountingStorage,
    seconds: f64,
}

/// Opens (or with `init`, creates) the ledger in `dir` as a service would,
/// but for the ids, which are the caller's, and `adjust`.
fn open(dir: &Path, init: bool, adjust: impl FnOnce(&mut Config)) -> anyhow::Result<Opened> {
    if init {
        // Created in an empty directory, as a ledger must be; its
        // snapshots' directory comes after.
        drop(Ledger::init_with(dir, Config::default())?);
    }
    let counted = CountingStorage::new(&dir.join(SNAPSHOTS_DIR))?;
    let mut config = Config {
        accept_foreign_ids: true,
        snapshot_store: Some(Arc::new(DirSnapshots::on(Arc::new(counted.clone())))),
        ..Config::default()
    };
    adjust(&mut config);
    let start = Instant::now();
    let ledger = Ledger::open_with(dir, config)?;
    Ok(Opened {
        ledger,
        counted,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Withdrawal `n`, as its client holds it.
fn withdrawal(n: u64) -> WithdrawalRequest {
    let parse = |what: &str, error: String| -> ! { panic!("{what}: {error}") };
    WithdrawalRequest::new(
        WithdrawalId::new(format!("w-{n:010}")).unwrap_or_else(|e| parse("id", e.to_string())),
        Amount::parse("25.00").unwrap_or_else(|e| parse("amount", e.to_string())),
        Currency::new("USDC").unwrap_or_else(|e| parse("currency", e.to_string())),
        Destination::new("0x52908400098527886E0F7030069857D2E4169EE7")
            .unwrap_or_else(|e| parse("destination", e.to_string())),
        Actor::new("bench").unwrap_or_else(|e| parse("actor", e.to_string())),
    )
}

fn key(n: u64) -> String {
    format!("k-{n:010}")
}

/// The rail: answers at once with a 66-byte reference.
fn sent(request: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    let reference = Reference::new(format!("0x{:0>64}", request.id().as_str()))
        .map_err(|error| SendFailure::failed(error.to_string()))?;
    request
        .approve()
        .and_then(|request| request.start_sending())
        .and_then(|request| request.mark_sent(reference))
        .map_err(|error| SendFailure::failed(error.to_string()))
}

/// Submits withdrawal `n` under its key, expecting its send (a new key) or
/// its replay (an old one).
fn submit(ledger: &Ledger, n: u64) -> anyhow::Result<()> {
    let request = withdrawal(n);
    let answer = ledger
        .submit(&key(n), &request, sent)
        .with_context(|| format!("withdrawal {n}"))?;
    if answer.id() != request.id() {
        bail!("withdrawal {n} answered for {}", answer.id());
    }
    Ok(())
}

/// The process's `VmRSS` or `VmHWM`, in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = (status.lines())
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// One line of what the process and its ledger hold now.
fn memory_line(memory: &MemoryUse) -> String {
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    format!(
        "rss_mib={:.0} hwm_mib={:.0} live_mib={:.0} live_keys={} cache_mib={:.0} filter_mib={:.1} \
         runs={} blocks_read={} reads_under_lock={}",
        status_mib("VmRSS:"),
        status_mib("VmHWM:"),
        mib(memory.live_bytes),
        memory.live_keys,
        mib(memory.cache_bytes),
        mib(memory.filter_bytes),
        memory.runs,
        memory.blocks_read,
        memory.reads_under_lock,
    )
}

/// Runs `work(n)` for each `n` from `first` to `last` (excluded) on
/// `threads` threads, calling `report(done)` from this thread every
/// `every` done.
fn run_range(
    threads: usize,
    (first, last): (u64, u64),
    work: impl Fn(u64) -> anyhow::Result<()> + Sync,
    every: u64,
    mut report: impl FnMut(u64),
) -> anyhow::Result<()> {
    let next = AtomicU64::new(first);
    let done = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= last {
                            return Ok(());
                        }
                        work(n)?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let mut reported = 0;
        while workers.iter().any(|worker| !worker.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            let now = done.load(Ordering::Relaxed);
            if now / every > reported / every {
                report(now);
                reported = now;
            }
        }
        join_all(workers)
    })
}

/// Where the number of withdrawals the ledger in `dir` holds is kept,
/// beside it: withdrawals `0` to that number less one.
fn count_file(dir: &Path) -> PathBuf {
    dir.with_extension("withdrawals")
}

/// How many withdrawals the ledger in `dir` holds, as `grow` left them.
fn held(dir: &Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(count_file(dir)).context("no ledger grown there")?;
    Ok(text.trim().parse()?)
}

/// Records that the ledger in `dir` holds withdrawals below `n`, so that
/// the next command's new ones are new.
fn set_held(dir: &Path, n: u64) -> anyhow::Result<()> {
    Ok(std::fs::write(count_file(dir), n.to_string())?)
}

fn grow(dir: &Path, withdrawals: u64, threads: usize, every: u64) -> anyhow::Result<()> {
    let first = held(dir).unwrap_or(0);
    let opened = open(dir, first == 0, |_| {})?;
    let ledger = &opened.ledger;
    println!("growing from {first} to {withdrawals} withdrawals, {threads} threads");
    let start = Instant::now();
    let mut last = (first, 0.0);
    run_range(
        threads,
        (first, withdrawals),
        |n| submit(ledger, n),
        every,
        |done| {
            let secs = start.elapsed().as_secs_f64();
            let rate = (first + done - last.0) as f64 / (secs - last.1);
            last = (first + done, secs);
            let memory = ledger.memory().map(|m| memory_line(&m)).unwrap_or_default();
            println!(
                "withdrawals={} secs={secs:.0} rate={rate:.0} written_mib={:.0} {memory}",
                first + done,
                opened.counted.written() as f64 / (1 << 20) as f64,
            );
        },
    )?;
    set_held(dir, withdrawals)?;
    let memory = ledger.memory()?;
    println!("grown: {}", memory_line(&memory));
    drop(opened.ledger);
    println!(
        "closed: written_mib={:.0} state_mib={:.0}",
        opened.counted.written() as f64 / (1 << 20) as f64,
        state_bytes(dir)? as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// The bytes of the newest snapshot in `dir` and of the runs it names: the
/// state's size on disk.
fn state_bytes(dir: &Path) -> anyhow::Result<u64> {
    let store = DirSnapshots::beside(dir);
    let snapshots = payonce::SnapshotStore::list(&store)?;
    let newest = snapshots.first().context("no snapshot")?;
    let bytes = payonce::SnapshotStore::read(&store, newest)?;
    let body_len = u64::from_le_bytes(bytes[72..80].try_into()?) as usize;
    let at = payonce::SNAPSHOT_HEADER_LEN + body_len;
    let manifest = payonce::snapshots::Manifest::decode(&bytes[at..], body_len)?;
    Ok(bytes.len() as u64 + manifest.runs.iter().map(|run| run.len).sum::<u64>())
}

fn open_only(dir: &Path) -> anyhow::Result<()> {
    let opened = open(dir, false, |_| {})?;
    let memory = opened.ledger.memory()?;
    println!(
        "opened: seconds={:.3} from_snapshot={} replayed={} {}",
        opened.seconds,
        opened.ledger.recovery().snapshot.is_some(),
        opened.ledger.recovery().replayed,
        memory_line(&memory)
    );
    Ok(())
}

/// A pseudo-random sequence (SplitMix64), seeded.
fn random(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Latencies' percentiles, in milliseconds.
fn percentiles(mut micros: Vec<u64>) -> String {
    micros.sort_unstable();
    let at = |share: f64| {
        let index = ((micros.len() as f64 * share) as usize).min(micros.len().saturating_sub(1));
        micros.get(index).copied().unwrap_or(0) as f64 / 1000.0
    };
    format!(
        "p50_ms={:.3} p99_ms={:.3} max_ms={:.3}",
        at(0.50),
        at(0.99),
        at(1.0)
    )
}

fn retries(dir: &Path, count: u64, threads: usize) -> anyhow::Result<()> {
    let opened = open(dir, false, |_| {})?;
    let of = held(dir)?;
    println!("opened in {:.3} s, {of} withdrawals", opened.seconds);
    let ledger = &opened.ledger;
    let latencies = std::sync::Mutex::new(Vec::with_capacity(count as usize));
    let start = Instant::now();
    run_range(
        threads,
        (0, count),
        |n| {
            let mut draw = random(n);
            let old = draw() % of;
            let begun = Instant::now();
            submit(ledger, old)?;
            let micros = begun.elapsed().as_micros() as u64;
            if let Ok(mut latencies) = latencies.lock() {
                latencies.push(micros);
            }
            Ok(())
        },
        count / 4,
        |done| {
            println!(
                "retried={done} {}",
                memory_line(&ledger.memory().unwrap_or_else(|e| panic!("{e}")))
            )
        },
    )?;
    let secs = start.elapsed().as_secs_f64();
    let latencies = latencies.into_inner().unwrap_or_default();
    println!(
        "retries={count} secs={secs:.1} rate={:.0} {} {}",
        count as f64 / secs,
        percentiles(latencies),
        memory_line(&ledger.memory()?)
    );
    Ok(())
}

/// Writes back dirty pages and drops the page cache: root only.
fn drop_page_cache() -> anyhow::Result<()> {
    let synced = std::process::Command::new("sync").status()?;
    if !synced.success() {
        bail!("sync failed");
    }
    std::fs::write("/proc/sys/vm/drop_caches", "3").context("dropping the page cache (root only)")
}

fn cold(dir: &Path, count: u64) -> anyhow::Result<()> {
    drop_page_cache()?;
    let opened = open(dir, false, |_| {})?;
    let of = held(dir)?;
    let ledger = &opened.ledger;
    println!("opened cold in {:.3} s, {of} withdrawals", opened.seconds);
    // Retries of a ledger that serves, not one still checking its runs,
    // whose pass reads every block once after an opening.
    let begun = Instant::now();
    let checked = loop {
        match ledger.runs_checked() {
            Some(checked) => break checked,
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    checked.map_err(|damage| anyhow::anyhow!("a run failed its check: {damage}"))?;
    println!("runs checked in {:.1} s", begun.elapsed().as_secs_f64());
    drop_page_cache()?;
    let mut draw = random(of);
    let mut latencies = Vec::with_capacity(count as usize);
    let read_before = ledger.memory()?.blocks_read;
    for _ in 0..count {
        let old = draw() % of;
        let begun = Instant::now();
        submit(ledger, old)?;
        latencies.push(begun.elapsed().as_micros() as u64);
    }
    let read = ledger.memory()?.blocks_read - read_before;
    println!(
        "cold retries={count} blocks_read={read} {}",
        percentiles(latencies)
    );
    let read_before = ledger.memory()?.blocks_read;
    for n in of..of + count {
        submit(ledger, n)?;
    }
    set_held(dir, of + count)?;
    let read = ledger.memory()?.blocks_read - read_before;
    println!(
        "new keys={count} blocks_read={read} share_without_a_read={:.4}",
        1.0 - read as f64 / count as f64
    );
    Ok(())
}

fn snapshot_cost(dir: &Path, more: u64) -> anyhow::Result<()> {
    let full = state_bytes(dir)?;
    let opened = open(dir, false, |config| {
        config.snapshots = SnapshotPolicy::never();
        config.settle_in_background = false;
    })?;
    let of = held(dir)?;
    run_range(
        64,
        (of, of + more),
        |n| submit(&opened.ledger, n),
        more,
        |_| {},
    )?;
    set_held(dir, of + more)?;
    let before = opened.counted.written();
    let taken = opened.ledger.snapshot()?.context("no snapshot taken")?;
    let written = opened.counted.written() - before;
    println!(
        "snapshot after {more} more of {of}: written={written} snapshot_len={} full_state={full} \
         share={:.4} took_ms={}",
        taken.len,
        written as f64 / full as f64,
        taken.took.as_millis()
    );
    Ok(())
}

fn submits(dir: &Path, threads: usize, secs: Duration, rounds: usize) -> anyhow::Result<()> {
    let fresh_dir = dir.with_extension("fresh");
    let _ = std::fs::remove_dir_all(&fresh_dir);
    let big = open(dir, false, |_| {})?;
    let fresh = open(&fresh_dir, true, |_| {})?;
    let mut next_big = held(dir)?;
    let mut next_fresh = 0;
    for round in 0..rounds {
        for (name, opened, next) in [
            ("large", &big, &mut next_big),
            ("fresh", &fresh, &mut next_fresh),
        ] {
            let done = submit_for(&opened.ledger, threads, secs, *next)?;
            *next += done;
            if name == "large" {
                set_held(dir, *next)?;
            }
            println!(
                "round={round} ledger={name} submits_per_s={:.0} {}",
                done as f64 / secs.as_secs_f64(),
                memory_line(&opened.ledger.memory()?)
            );
        }
    }
    Ok(())
}

/// Submits new withdrawals from `first` on, at `threads` threads, for
/// `secs`; returns how many.
fn submit_for(ledger: &Ledger, threads: usize, secs: Duration, first: u64) -> anyhow::Result<u64> {
    let next = AtomicU64::new(first);
    let until = Instant::now() + secs;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    while Instant::now() < until {
                        submit(ledger, next.fetch_add(1, Ordering::Relaxed))?;
                    }
                    Ok(())
                })
            })
            .collect();
        join_all(workers)
    })?;
    Ok(next.load(Ordering::Relaxed) - first)
}

/// Waits for every worker: the first error, if one failed or panicked.
fn join_all(
    workers: Vec<std::thread::ScopedJoinHandle<'_, anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    workers
        .into_iter()
        .try_for_each(|worker| worker.join().unwrap_or_else(|_| bail!("a worker panicked")))
}
