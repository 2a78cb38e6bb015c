//! `pg_replay`: how fast a PostgreSQL ledger replays, at sizes where it
//! matters. Builds one ledger per size on a throwaway cluster (decided in
//! memory, copied in with `COPY`: `payonce_bench::pg::bulk`), then times,
//! each in a fresh child process, a new worker's `payonce_postgres::open`
//! replaying every event, `payonce_postgres::verify`, and a new worker's
//! first decision from the ledger's snapshot (taken once, after the
//! build), round after round; with `--compare`,
//! the same children of other builds of this binary alternate with its
//! own on the same databases. Prints a Markdown table (docs/performance.md).
//!
//! ```sh
//! cargo run --release -p payonce-bench --bin pg_replay                        # 200k and 1M withdrawals
//! cargo run --release -p payonce-bench --bin pg_replay -- --withdrawals 2000 --rounds 1  # checks the harness
//! pg_replay --compare ./pg_replay-before   # alternates with another build
//! pg_replay build URL 200000               # into an existing, migrated, empty database
//! pg_replay kept URL                       # first decision, then until the runs are all checked
//! ```

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use payonce::{Config, SnapshotPolicy};
use payonce_bench::pg::bulk;
use payonce_postgres::cluster::Cluster;

#[derive(Debug, Parser)]
#[command(
    name = "pg_replay",
    about = "How fast a new worker opens, and verify reads, a large PostgreSQL ledger",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    child: Option<Child>,
    /// Withdrawals of each ledger built (three events each).
    #[arg(long, value_delimiter = ',', default_value = "200000,1000000")]
    withdrawals: Vec<u64>,
    /// Events per batch (transaction) in the ledgers built.
    #[arg(long, default_value_t = 8)]
    batch_events: usize,
    /// Rounds: each times every build once, in turn.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Other builds of this binary whose children alternate with this one's.
    #[arg(long, value_delimiter = ',')]
    compare: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Child {
    /// Opens the ledger at URL as a new worker replaying every event (no
    /// snapshot); prints seconds and events.
    Open { url: String },
    /// Opens the ledger at URL as a new worker from its newest snapshot and
    /// makes its first decision (a withdrawal created and submitted);
    /// prints the seconds to that decision and the events replayed.
    FirstDecision { url: String },
    /// As `first-decision`, then goes on deciding, one submission after
    /// another, until the worker holds every chunk of the snapshot's
    /// archive (its pin gone from `pg_locks`); prints the seconds to the
    /// first decision, the seconds to the whole archive, the decisions
    /// made meanwhile, and the resident bytes then.
    Kept { url: String },
    /// Takes a snapshot of the ledger at URL as a worker would; prints the
    /// seconds it took and its bytes.
    Snapshot { url: String },
    /// Verifies the ledger at URL; prints seconds and events.
    Verify { url: String },
    /// Opens the ledger at URL from its snapshot, decides MORE withdrawals
    /// at 64 threads, then takes a snapshot: prints the WAL bytes it
    /// wrote, its own bytes, and the WAL bytes of the whole ledger's
    /// tables for comparison.
    SnapshotCost {
        url: String,
        #[arg(long, default_value_t = 30_000)]
        more: u64,
    },
    /// Opens the ledger at URL from its snapshot, waits for its runs'
    /// check, drops the page cache and retries COUNT random old keys one
    /// at a time (`req-N`, as `build`
    /// names them, N below WITHDRAWALS): prints their latencies.
    Cold {
        url: String,
        withdrawals: u64,
        #[arg(long, default_value_t = 2_000)]
        count: u64,
    },
    /// Builds a ledger of WITHDRAWALS sent withdrawals into the migrated,
    /// empty database at URL.
    Build {
        url: String,
        withdrawals: u64,
        #[arg(long, default_value_t = 8)]
        batch_events: usize,
    },
}

/// What a child prints: its seconds and the events it replayed.
fn timed(what: impl FnOnce() -> anyhow::Result<u64>) -> anyhow::Result<()> {
    let start = Instant::now();
    let events = what()?;
    println!("{} {events}", start.elapsed().as_secs_f64());
    Ok(())
}

fn run_child(child: Child) -> anyhow::Result<()> {
    match child {
        Child::Open { url } => timed(|| {
            let config = Config {
                snapshots: SnapshotPolicy::off(),
                ..Config::default()
            };
            let ledger = payonce_postgres::open(&url, "replay-bench", config)?;
            Ok(ledger.last_seq())
        }),
        Child::FirstDecision { url } => {
            timed(|| first_decision(&url).map(|(_, replayed)| replayed))
        }
        Child::Kept { url } => kept(&url),
        Child::Snapshot { url } => timed(|| {
            let ledger = payonce_postgres::open(&url, "snapshot-bench", never())?;
            let taken = ledger
                .snapshot()?
                .context("a new worker's state is newer than any snapshot")?;
            Ok(taken.len)
        }),
        Child::SnapshotCost { url, more } => snapshot_cost(&url, more),
        Child::Cold {
            url,
            withdrawals,
            count,
        } => cold(&url, withdrawals, count),
        Child::Verify { url } => timed(|| {
            let (report, _) = payonce_postgres::verify(&url)?;
            if !report.divergences.is_empty() {
                bail!("{} divergences", report.divergences.len());
            }
            Ok(report.events)
        }),
        Child::Build {
            url,
            withdrawals,
            batch_events,
        } => build(&url, withdrawals, batch_events).map(|_| ()),
    }
}

/// Snapshots loaded, none taken: the measured processes leave the
/// ledger's snapshots as they found them.
fn never() -> Config {
    Config {
        snapshots: SnapshotPolicy::never(),
        ..Config::default()
    }
}

/// A new worker opens from the newest snapshot and decides one submission:
/// returns the worker and the events it replayed after the snapshot.
fn first_decision(url: &str) -> anyhow::Result<(payonce::Ledger, u64)> {
    let ledger = payonce_postgres::open(url, "first-decision", never())?;
    let replayed = ledger.recovery().replayed;
    if ledger.recovery().snapshot.is_none() {
        bail!(
            "no snapshot was loaded: {:?}",
            ledger.recovery().snapshots_set_aside
        );
    }
    decide(&ledger, "first")?;
    Ok((ledger, replayed))
}

/// One submission of a new withdrawal on `ledger`, its key `{name}-{seq}`.
fn decide(ledger: &payonce::Ledger, name: &str) -> anyhow::Result<()> {
    let request = ledger.create(payonce::NewWithdrawal {
        amount: "1".parse()?,
        currency: "USDC".parse()?,
        destination: "0xfirst".parse()?,
        requested_by: "bench".parse()?,
    })?;
    let key = format!("{name}-{}", ledger.last_seq());
    ledger.submit(&key, &request, |request| Ok(request.sent("0xf1")?))?;
    Ok(())
}

/// [`Child::Kept`].
fn kept(url: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    let (ledger, _) = first_decision(url)?;
    let first = start.elapsed().as_secs_f64();
    let mut decisions = 0u64;
    loop {
        match ledger.runs_checked() {
            Some(Ok(())) => break,
            Some(Err(damage)) => bail!("the runs failed their check: {damage}"),
            None if ledger.memory()?.runs == 0 => break,
            None => {}
        }
        decide(&ledger, "meanwhile")?;
        decisions += 1;
    }
    let whole = start.elapsed().as_secs_f64();
    let status = std::fs::read_to_string("/proc/self/status")?;
    let resident = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    println!("{first} {whole} {decisions} {resident}");
    drop(ledger);
    Ok(())
}

/// The database's WAL position, in bytes.
fn wal_lsn(client: &mut postgres::Client) -> anyhow::Result<i64> {
    let row = client.query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", &[])?;
    Ok(row.try_get(0)?)
}

/// [`Child::SnapshotCost`].
fn snapshot_cost(url: &str, more: u64) -> anyhow::Result<()> {
    let ledger = payonce_postgres::open(url, "snapshot-cost", never())?;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..64)
            .map(|thread| {
                let ledger = &ledger;
                scope.spawn(move || -> anyhow::Result<()> {
                    for _ in (thread..more).step_by(64) {
                        decide(ledger, &format!("more-{thread}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|worker| worker.join().unwrap_or_else(|_| bail!("a worker panicked")))
    })?;
    let mut client = postgres::Client::connect(url, postgres::NoTls)?;
    let before = wal_lsn(&mut client)?;
    let taken = ledger.snapshot()?.context("no snapshot taken")?;
    let wal = wal_lsn(&mut client)? - before;
    let tables: i64 = client
        .query_one(
            "SELECT (SELECT coalesce(sum(length(bytes)), 0) FROM payonce.run_chunks) \
             + (SELECT coalesce(sum(length(bytes)), 0) FROM payonce.snapshot_chunks)",
            &[],
        )?
        .try_get::<_, i64>(0)?;
    println!(
        "wal_bytes={wal} snapshot_len={} stored_bytes={tables} seconds={:.2}",
        taken.len,
        taken.took.as_secs_f64()
    );
    Ok(())
}

/// [`Child::Cold`].
fn cold(url: &str, withdrawals: u64, count: u64) -> anyhow::Result<()> {
    let ledger = payonce_postgres::open(url, "cold", never())?;
    // Retries of a worker that serves, not one whose pass still reads
    // every block after its opening.
    let begun = Instant::now();
    loop {
        match ledger.runs_checked() {
            Some(Ok(())) => break,
            Some(Err(damage)) => bail!("the runs failed their check: {damage}"),
            None if ledger.memory()?.runs == 0 => break,
            None => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    println!("runs checked in {:.1} s", begun.elapsed().as_secs_f64());
    if std::process::Command::new("sync").status()?.success() {
        std::fs::write("/proc/sys/vm/drop_caches", "3").context("dropping the page cache")?;
    }
    let mut state = withdrawals;
    let mut micros = Vec::with_capacity(count as usize);
    for _ in 0..count {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let key = format!("req-{:010}", (state >> 33) % withdrawals);
        let begun = Instant::now();
        let outcome = ledger
            .outcome(&key)?
            .with_context(|| format!("{key} has no outcome"))?;
        ledger.submit(&key, &outcome, |_| bail_send(&key))?;
        micros.push(begun.elapsed().as_micros() as u64);
    }
    micros.sort_unstable();
    let at = |share: f64| {
        micros[((micros.len() as f64 * share) as usize).min(micros.len() - 1)] as f64 / 1000.0
    };
    println!(
        "retries={count} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} blocks_read={}",
        at(0.5),
        at(0.99),
        at(1.0),
        ledger.memory()?.blocks_read
    );
    Ok(())
}

/// A send for a key that was settled long ago: never made.
fn bail_send(key: &str) -> Result<payonce_model::WithdrawalRequest, payonce::SendFailure> {
    Err(payonce::SendFailure::failed(format!(
        "{key} was settled: a retry sends nothing"
    )))
}

/// Builds a ledger into the database at `url`; returns its events.
fn build(url: &str, withdrawals: u64, batch_events: usize) -> anyhow::Result<u64> {
    payonce_postgres::migrate(url)?;
    let start = Instant::now();
    let events = bulk::decide_in_memory(withdrawals)?;
    let decided = start.elapsed();
    let head = bulk::copy_into(url, &events, batch_events)?;
    eprintln!(
        "built {withdrawals} withdrawals, {} events, head {head}: decided in {:.1} s, copied in {:.1} s",
        events.len(),
        decided.as_secs_f64(),
        (start.elapsed() - decided).as_secs_f64()
    );
    Ok(head.seq)
}

/// Runs `binary`'s `what` child on `url`: its seconds and events.
fn measure(binary: &str, what: &str, url: &str) -> anyhow::Result<(f64, u64)> {
    let output = Command::new(binary)
        .args([what, url])
        .output()
        .with_context(|| format!("running {binary} {what}"))?;
    if !output.status.success() {
        bail!(
            "{binary} {what} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut fields = text.split_whitespace();
    let (Some(secs), Some(events)) = (fields.next(), fields.next()) else {
        bail!("{binary} {what} printed {text:?}");
    };
    Ok((secs.parse()?, events.parse()?))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(child) = cli.child {
        return run_child(child);
    }
    let cluster = Cluster::start()?;
    let this = std::env::current_exe()?.display().to_string();
    let builds: Vec<String> = std::iter::once(this).chain(cli.compare).collect();
    println!(
        "| withdrawals | events | build | what | median s | min to max s | events/s (median) |"
    );
    println!("| ---: | ---: | --- | --- | ---: | --- | ---: |");
    for withdrawals in cli.withdrawals {
        let url = cluster.database()?;
        build(&url, withdrawals, cli.batch_events)?;
        let (secs, len) = measure(&builds[0], "snapshot", &url)?;
        eprintln!("took a snapshot of {len} bytes in {secs:.2} s");
        for what in ["open", "verify", "first-decision"] {
            let mut times = vec![Vec::new(); builds.len()];
            let mut events = 0;
            for _ in 0..cli.rounds {
                for (build, times) in builds.iter().zip(&mut times) {
                    let (secs, replayed) = measure(build, what, &url)?;
                    times.push(secs);
                    events = replayed;
                }
            }
            for (build, times) in builds.iter().zip(&mut times) {
                let (min, max) = times
                    .iter()
                    .fold((f64::MAX, 0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
                let median = median(times);
                println!(
                    "| {withdrawals} | {events} | {build} | {what} | {median:.3} | {min:.3} to {max:.3} | {:.0} |",
                    events as f64 / median
                );
            }
        }
    }
    Ok(())
}
