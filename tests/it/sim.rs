//! The deterministic simulator over many seeds: several clients racing
//! around the real ledger, a rail with latency and timeouts, storage faults
//! and power losses, every step checked (see `payonce_tests::sim`).
//!
//! `PAYONCE_SIM_SEEDS=N` simulates N seeds (a long run: add `--release`),
//! from `PAYONCE_SIM_FIRST` (else from the clock); `PAYONCE_SIM_SEED=S`
//! replays one seed, and `PAYONCE_TRACE=1` prints its every step.

use std::time::Instant;

use payonce_tests::rng::seed_from_env;
use payonce_tests::sim::{self, SimStats};

/// Seeds in the normal test run.
const SEEDS: u64 = 250;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|text| text.parse().ok())
}

fn report(stats: &SimStats, seconds: f64) {
    let w = &stats.world;
    eprintln!(
        "simulated {} seeds in {seconds:.1} s: {} events, {} ledger steps; {} withdrawals, \
         {} submissions ({} retries, {} device races, {} re-drives, {} webhooks, {} client \
         timeouts); rail: {} calls, {} moved money, {} later reports ({} moved an outcome on); \
         {} refusals; operator: {} resolves, {} releases, {} corrections ({} recorded); power \
         losses: {} ({} dropping, {} keeping a prefix, {} garbling unsynced \
         bytes, {} by page; {} inside an operation); faults: {} armed, {} fired, {} failed opens, {} \
         restarts; {} clean reopens, {} backup restores refused; snapshots: {} taken, {} \
         restored, {} opens from one, {} refused; runs: {} merges, {} cut by a fault",
        stats.seeds,
        stats.events,
        w.steps,
        stats.withdrawals,
        stats.submissions,
        stats.retries,
        stats.races,
        stats.redrives,
        stats.webhooks,
        stats.client_timeouts,
        w.rail_calls,
        w.money_moved,
        stats.rail_reports,
        w.advances,
        w.refusals,
        w.operator_resolves,
        w.operator_releases,
        stats.corrections,
        w.corrections,
        w.crashes(),
        w.crashes_dropping,
        w.crashes_keeping,
        w.crashes_garbling,
        w.crashes_paging,
        w.crashes_mid_operation,
        w.faults_armed,
        w.faults_fired,
        w.failed_opens,
        stats.restarts,
        w.reopens,
        w.rollbacks_refused,
        w.snapshots_taken,
        w.snapshots_restored,
        w.opens_from_snapshot,
        w.snapshots_refused,
        w.runs_merged,
        w.merges_cut,
    );
}

#[test]
fn simulated_services_never_send_twice_nor_lose_what_they_acknowledged() {
    // Guards against any schedule of clients, rail answers, faults and power losses that breaks a safety claim.
    let started = Instant::now();
    if let Some(seed) = env_u64("PAYONCE_SIM_SEED") {
        let stats = sim::run(seed);
        report(&stats, started.elapsed().as_secs_f64());
        return;
    }
    let first = seed_from_env("PAYONCE_SIM_FIRST");
    let count = env_u64("PAYONCE_SIM_SEEDS").unwrap_or(SEEDS);
    eprintln!("simulating {count} seeds from {first}; replay one with PAYONCE_SIM_SEED=<seed>");
    let stats = match sim::run_seeds(first, count) {
        Ok(stats) => stats,
        Err(failure) => panic!(
            "simulation seed {} failed: {}\nreplay it with: {}",
            failure.seed,
            failure.message,
            sim::replay_command(failure.seed)
        ),
    };
    report(&stats, started.elapsed().as_secs_f64());
    // The run must have reached what it claims to check.
    let w = &stats.world;
    assert!(w.money_moved > 0 && w.operator_resolves > 0 && w.operator_releases > 0);
    assert!(w.crashes_dropping > 0 && w.crashes_keeping > 0 && w.crashes_garbling > 0);
    assert!(w.crashes_paging > 0);
    assert!(w.crashes_mid_operation > 0 && w.faults_fired > 0 && stats.restarts > 0);
    assert!(w.snapshots_taken > 0 && w.snapshots_restored > 0);
    assert!(w.opens_from_snapshot > 0 && w.snapshots_refused > 0);
    assert!(w.runs_merged > 0 && w.merges_cut > 0);
}

#[test]
fn a_seed_replays_exactly() {
    // Guards against a schedule that depends on anything but the seed.
    let seed = seed_from_env("PAYONCE_SIM_SEED");
    for seed in [seed, seed.wrapping_add(1)] {
        assert_eq!(sim::run(seed), sim::run(seed), "seed {seed}");
    }
}
