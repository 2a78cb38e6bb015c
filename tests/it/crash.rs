//! A child process submitting from several threads is killed with SIGKILL
//! at random moments, during its open and while submitting; after every
//! kill the ledger is reopened and checked against the rail's and the
//! client's own durable records, and the run reports where the kills
//! landed (see `payonce_tests::crash`).
//!
//! `PAYONCE_CRASH_KILLS=N` asks for N kills (a long run: add `--release`),
//! `PAYONCE_PG_CRASH_KILLS=N` as many of a PostgreSQL worker;
//! `PAYONCE_CRASH_SEED=S` replays a run's delays and choices.

use std::time::Duration;

use payonce_tests::crash::{self, Backend, CrashConfig};
use payonce_tests::rng::seed_from_env;

/// Kills in the normal run, about 40 s of a debug build on two cores (a
/// round costs some 45 ms, most of it syncs); `PAYONCE_CRASH_KILLS` asks for
/// more.
const KILLS: u64 = 800;

/// Threads submitting through one ledger, so kills land while a group
/// commit is being written and synced.
const THREADS: usize = 8;

/// Rounds on one ledger before a fresh one: see `docs/reliability.md`.
const ROUNDS_PER_LEDGER: u64 = 20;

#[test]
fn a_killed_process_never_sends_twice_and_keeps_every_acknowledged_outcome() {
    // Guards against a kill anywhere in opening or submitting, with several threads sharing a flush, that sends a withdrawal twice, sends before its claim is durable, loses an acknowledged outcome or leaves a log whose replay disagrees.
    run_kills(
        Backend::File,
        "PAYONCE_CRASH_KILLS",
        KILLS,
        Duration::from_millis(20),
    );
}

#[test]
fn a_killed_worker_on_postgres_never_sends_twice_and_keeps_every_acknowledged_outcome() {
    // Guards against a kill of a worker mid-batch, mid-commit or mid-send that sends a withdrawal twice, sends before its claim is committed, loses an acknowledged outcome or leaves a log whose replay disagrees.
    if payonce_postgres::cluster::for_tests().is_none() {
        return;
    }
    run_kills(
        Backend::Postgres,
        "PAYONCE_PG_CRASH_KILLS",
        PG_KILLS,
        PG_WINDOW,
    );
}

/// Kills on PostgreSQL in the normal run: a round costs some 250 ms in a
/// debug build (the child connects, replays and starts; the check reopens
/// and verifies twice), so about 40 s; `PAYONCE_PG_CRASH_KILLS` asks for
/// more.
const PG_KILLS: u64 = 150;

/// Submitting kills on PostgreSQL land within this long after the child is
/// ready: a batch there takes a few round trips and a commit, so a window
/// as short as the file log's leaves the later kill points nearly empty.
const PG_WINDOW: Duration = Duration::from_millis(150);

fn run_kills(backend: Backend, kills_var: &str, default_kills: u64, window: Duration) {
    let seed = seed_from_env("PAYONCE_CRASH_SEED");
    let kills = std::env::var(kills_var)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_kills);
    eprintln!(
        "crash test ({}): seed {seed}, {kills} kills; replay with PAYONCE_CRASH_SEED={seed}",
        backend.name()
    );
    let config = CrashConfig {
        backend,
        child: env!("CARGO_BIN_EXE_crash_child").into(),
        kills,
        seed,
        threads: THREADS,
        rounds_per_ledger: ROUNDS_PER_LEDGER,
        open_percent: 10,
        submitting_window: window,
    };
    let root = tempfile::tempdir().unwrap();
    let report = match crash::run(&config, root.path()) {
        Ok(report) => report,
        Err(failure) => {
            let _kept = root.keep();
            panic!(
                "crash test seed {seed} failed after kill {} of {kills}: {}\n\
                 the ledger and trails are in {}\n\
                 replay with PAYONCE_CRASH_SEED={seed} {kills_var}={kills}",
                failure.kill,
                failure.message,
                failure.dir.display()
            );
        }
    };
    eprintln!(
        "crash test ({}): {} kills in {:.1} s on {} ledgers ({} threads each child); {} sends, {} \
         acknowledged; open took at most {} ms; {} kills cut a snapshot's write, {} a run's, {} \
         reopenings started from a snapshot\n{}",
        backend.name(),
        report.table.total(),
        report.elapsed.as_secs_f64(),
        report.ledgers,
        THREADS,
        report.sends,
        report.acks,
        report.open_max.as_millis(),
        report.snapshot_writes_cut,
        report.run_writes_cut,
        report.opens_from_snapshot,
        report.table
    );
    if backend == Backend::File {
        // The run must have reached what it claims to check: a child takes
        // snapshots every few dozen events, and some kills land inside one.
        assert!(
            report.snapshot_writes_cut > 0
                && report.run_writes_cut > 0
                && report.opens_from_snapshot > 0,
            "seed {seed}: {} kills cut a snapshot's write, {} a run's, {} reopenings started \
             from one",
            report.snapshot_writes_cut,
            report.run_writes_cut,
            report.opens_from_snapshot
        );
    }
    let missing = report.table.missing();
    assert!(
        missing.is_empty(),
        "seed {seed}: no kill landed at {missing:?}: the run did not test them\n{}",
        report.table
    );
}
