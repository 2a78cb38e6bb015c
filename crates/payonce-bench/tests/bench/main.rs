//! The comparison harness works: every store answers the same seeded
//! workload alike, built states survive reopening, and the quick mode of
//! the binary prints its table.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

mod pg;

use std::process::Command;

use payonce_bench::{
    BuildFigures, Mix, OpenFigures, RunFigures, StoreKind, Tally, WorkloadSpec, disagreements,
    timed_run,
};

/// Every store, variants included.
const STORES: [StoreKind; 5] = StoreKind::EVERY;

/// The workload's seed: `PAYONCE_BENCH_SEED` replays a failure.
fn seed() -> u64 {
    std::env::var("PAYONCE_BENCH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(20_261_130)
}

fn replay_hint(seed: u64) -> String {
    format!("replay with: PAYONCE_BENCH_SEED={seed} cargo test -p payonce-bench")
}

#[test]
fn every_store_answers_every_submission_of_a_seeded_workload_alike() {
    // Guards against a store whose protocol differs from payonce's (a missed
    // refusal, a send for a claimed withdrawal, a lost outcome): the
    // comparison would then measure different work.
    let seed = seed();
    let spec = WorkloadSpec {
        seed,
        threads: 4,
        submissions_per_thread: 150,
        mix: Mix::EVERY_ANSWER,
    };
    let reports: Vec<RunFigures> = STORES
        .iter()
        .map(|&store| {
            let dir = tempfile::tempdir().unwrap();
            timed_run(store, dir.path(), spec)
                .unwrap_or_else(|error| panic!("{store}: {error}; {}", replay_hint(seed)))
        })
        .collect();
    assert_eq!(
        disagreements(&reports),
        None,
        "the stores answered differently; {}",
        replay_hint(seed)
    );
    let tally = &reports[0].tally;
    assert_eq!(tally.total(), 600);
    for (answer, count) in [
        ("sent", tally.sent),
        ("replayed", tally.replayed),
        ("send failed", tally.send_failed),
        ("in flight", tally.in_flight),
        ("key reused", tally.key_reused),
        ("claimed by another key", tally.claimed),
    ] {
        assert!(
            count > 0,
            "no submission was answered {answer}: {tally:?}; {}",
            replay_hint(seed)
        );
    }
    assert_eq!(tally.unknown, 0, "every withdrawal was created first");
}

#[test]
fn the_agreement_check_reports_stores_that_answer_differently() {
    // Guards against a check that cannot fail: the same run with one
    // answer changed is a disagreement.
    let seed = seed();
    let spec = WorkloadSpec {
        seed,
        threads: 1,
        submissions_per_thread: 30,
        mix: Mix::STANDARD,
    };
    let dir = tempfile::tempdir().unwrap();
    let report = timed_run(StoreKind::Payonce, dir.path(), spec).unwrap();
    let mut other = report.clone();
    other.store = StoreKind::Sled;
    assert_eq!(disagreements(&[report.clone(), other.clone()]), None);
    other.digest ^= 1;
    let found = disagreements(&[report.clone(), other]).expect("a different digest disagrees");
    assert_eq!(found.len(), 2);
    let mut counted = report.clone();
    counted.tally = Tally {
        sent: report.tally.sent - 1,
        replayed: report.tally.replayed + 1,
        ..report.tally.clone()
    };
    assert!(disagreements(&[report, counted]).is_some());
}

#[test]
fn a_built_state_answers_the_same_after_reopening() {
    // Guards against an open figure that times an empty or different store:
    // the reopened store must give the outcome it recorded. The build and
    // the reopening each run in a process of their own, as the benchmark
    // runs them: sled 0.34 lets its directory's lock go only once its
    // threads end, after the `Db` is dropped, so a reopening in the same
    // process could find the directory still locked.
    let seed = seed();
    let mut tallies = Vec::new();
    for store in STORES {
        let dir = tempfile::tempdir().unwrap();
        let name = store.name().to_ascii_lowercase();
        let dir_arg = dir.path().display().to_string();
        let seed_arg = seed.to_string();
        let built: BuildFigures = in_child(&[
            "build",
            "--store",
            &name,
            "--dir",
            &dir_arg,
            "--seed",
            &seed_arg,
            "--submissions",
            "300",
        ]);
        assert_eq!(built.submissions, 300);
        assert!(built.disk_bytes > 0, "{store} wrote nothing");
        assert!(
            !built.probe_reference.is_empty(),
            "{store}: the probe key has no outcome; {}",
            replay_hint(seed)
        );
        let opened: OpenFigures = in_child(&[
            "open",
            "--store",
            &name,
            "--dir",
            &dir_arg,
            "--probe-key",
            &built.probe_key,
        ]);
        assert_eq!(
            opened.probe_reference.as_deref(),
            Some(built.probe_reference.as_str()),
            "{store} forgot an outcome across reopening; {}",
            replay_hint(seed)
        );
        tallies.push(built.tally);
    }
    assert!(
        tallies.iter().all(|tally| *tally == tallies[0]),
        "the stores answered the build differently: {tallies:?}; {}",
        replay_hint(seed)
    );
}

/// Runs the benchmark binary's hidden child command `args` and parses the
/// JSON report it prints.
fn in_child<T: serde::de::DeserializeOwned>(args: &[&str]) -> T {
    let output = Command::new(env!("CARGO_BIN_EXE_payonce-bench"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_quick_comparison_runs_every_store_in_a_child_and_prints_the_table() {
    // Guards against a broken binary: children that fail, reports that do
    // not parse, or a table without its rows.
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_payonce-bench"))
        .args([
            "--quick",
            "--threads",
            "1,4",
            "--submissions",
            "60,120",
            "--rounds",
            "2",
        ])
        .args(["--open-submissions", "300", "--sync-secs", "0.1", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for row in [
        "| figure | payonce | SQLite | sled | sled-flush-only | payonce/SQLite | payonce/sled | payonce/sled-flush-only |",
        "| submits/s, 1 thread |",
        "| submits per fdatasync, 4 threads |",
        "| p99 latency, 4 threads (µs) |",
        "| peak resident memory, 4 threads run (MiB) |",
        "| open after 300 submissions (ms) |",
        "| disk bytes per submission |",
        "target: payonce at least 1.3x SQLite at 1 thread: ",
        "target: payonce at least 20x SQLite at 4 threads: ",
        "target: payonce at least 3x sled at 4 threads: ",
        "every store answered every submission alike",
        "submits/s of each round (the table shows the median):",
    ] {
        assert!(stdout.contains(row), "no {row:?} in:\n{stdout}");
    }
    let missing: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains(" - |"))
        // sled-flush-only shares sled's built state: it has no open figures.
        .filter(|line| {
            !line.starts_with("| open ")
                && !line.contains("after open")
                && !line.contains("disk bytes")
        })
        .collect();
    assert!(
        missing.is_empty(),
        "figures are missing: {missing:?}\n{stdout}"
    );
    // The scratch directory is removed when the run ends.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
