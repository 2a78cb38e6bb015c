//! `payonce history` on a large log, with and without the audit index,
//! timed as an operator runs it: the built binary, a new process each time.
//!
//! `cargo bench -p payonce-cli`. `PAYONCE_BENCH_EVENTS` sets the log's size
//! (default 1,000,000 events), `PAYONCE_BENCH_DIR` where it is built
//! (default: the system temp dir).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use payonce::{Config, Ledger, ManualClock, NewWithdrawal, SendFailure, Timestamp};
use payonce_log::{Durability, LogConfig};
use payonce_model::WithdrawalRequest;

const PAYONCE: &str = env!("CARGO_BIN_EXE_payonce");
/// 2026-11-30T00:00:00Z.
const START: Timestamp = Timestamp::from_unix_nanos(1_795_996_800_000_000_000);

fn rail(request: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    Ok(request.sent(format!("0x{:x}", request.id().len() * 7919))?)
}

fn never(_: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    panic!("a refused submission must not send")
}

fn config(clock: Arc<ManualClock>) -> Config {
    Config {
        log: LogConfig {
            durability: Durability::Never,
            ..LogConfig::default()
        },
        clock,
        ..Config::default()
    }
}

fn new_withdrawal(ledger: &Ledger, n: u64) -> WithdrawalRequest {
    ledger
        .create(NewWithdrawal {
            amount: format!("{}.{:02}", 10 + n % 990, n % 100).parse().unwrap(),
            currency: if n.is_multiple_of(3) { "EUR" } else { "USDC" }
                .parse()
                .unwrap(),
            destination: format!("0x{n:040x}").parse().unwrap(),
            requested_by: "bench".parse().unwrap(),
        })
        .unwrap()
}

/// A log of about `events` events: withdrawals created and sent (three
/// events each), and a second key trying the first withdrawal at every
/// quarter, so its history is spread over the whole log. Returns that
/// withdrawal's id and key.
fn build(dir: &Path, events: u64, clock: &Arc<ManualClock>) -> (String, String) {
    let ledger = Ledger::init_with(dir, config(clock.clone())).unwrap();
    let target = new_withdrawal(&ledger, 0);
    ledger.submit("req-0", target.clone(), rail).unwrap();
    // Opened, then created, claimed and completed: counted here, because
    // asking the ledger for its state copies all of it.
    let mut written = 4;
    let mut n = 1;
    let quarter = (events / 4).max(1);
    while written < events {
        clock.advance(Duration::from_millis(1));
        let request = new_withdrawal(&ledger, n);
        ledger.submit(&format!("req-{n}"), request, rail).unwrap();
        n += 1;
        written += 3;
        if written % quarter < 3 {
            let refused = ledger.submit(&format!("late-{n}"), target.clone(), never);
            assert!(refused.is_err());
            written += 1;
        }
    }
    ledger.sync().unwrap();
    (target.id().to_string(), "req-0".to_owned())
}

fn payonce(args: &[&str]) -> (Duration, Output) {
    let started = Instant::now();
    let output = Command::new(PAYONCE).args(args).output().unwrap();
    let elapsed = started.elapsed();
    assert!(
        output.status.code().is_some_and(|code| code == 0),
        "payonce {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (elapsed, output)
}

/// Best and median of `runs` runs.
fn timed(runs: usize, args: &[&str]) -> (Duration, Duration, Output) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let (elapsed, output) = payonce(args);
        times.push(elapsed);
        last = Some(output);
    }
    times.sort();
    (times[0], times[runs / 2], last.unwrap())
}

fn events_of(output: &Output) -> serde_json::Value {
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    report["events"].clone()
}

fn ms(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1000.0)
}

fn main() {
    let events: u64 = std::env::var("PAYONCE_BENCH_EVENTS")
        .ok()
        .map_or(1_000_000, |n| n.parse().unwrap());
    let base = std::env::var_os("PAYONCE_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let temp = tempfile::tempdir_in(base).unwrap();
    let dir = temp.path().join("ledger");
    let dir_text = dir.to_str().unwrap();
    let clock = Arc::new(ManualClock::new(START));

    let started = Instant::now();
    let (withdrawal, key) = build(&dir, events, &clock);
    let built = started.elapsed();
    let log_bytes: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum();
    let verify = payonce::verify(&dir).unwrap();
    println!(
        "log: {} events, {} segments, {:.0} MiB, built in {:.1} s (Durability::Never)",
        verify.events,
        verify.segments,
        log_bytes as f64 / (1 << 20) as f64,
        built.as_secs_f64()
    );

    let history_w = ["history", dir_text, "--withdrawal", &withdrawal, "--json"];
    let history_k = ["history", dir_text, "--key", &key, "--json"];
    let scan_w: Vec<&str> = history_w.iter().copied().chain(["--no-index"]).collect();
    let scan_k: Vec<&str> = history_k.iter().copied().chain(["--no-index"]).collect();

    let (scan_best, scan_median, scan_output) = timed(3, &scan_w);
    let (scan_key_best, scan_key_median, scan_key_output) = timed(3, &scan_k);
    let (index_built, _) = payonce(&["index", dir_text]);
    let index_bytes: u64 = std::fs::read_dir(dir.join("audit-index"))
        .unwrap()
        .filter_map(|entry| entry.unwrap().metadata().ok())
        .map(|metadata| metadata.len())
        .sum();
    // The first query after a build opens what sled just wrote, which it
    // may recover from its own log rather than from a snapshot.
    let (first_after_build, _) = payonce(&history_w);
    let (index_best, index_median, index_output) = timed(10, &history_w);
    let (index_key_best, index_key_median, index_key_output) = timed(10, &history_k);
    assert_eq!(
        events_of(&scan_output),
        events_of(&index_output),
        "index and scan differ"
    );
    assert_eq!(
        events_of(&scan_key_output),
        events_of(&index_key_output),
        "index and scan differ"
    );
    let found = events_of(&index_output).as_array().unwrap().len();

    // The service appends 1,000 more events; the next history indexes them
    // first.
    {
        let ledger = Ledger::open_with(&dir, config(clock.clone())).unwrap();
        for n in 0..333 {
            clock.advance(Duration::from_millis(1));
            let request = new_withdrawal(&ledger, 10_000_000 + n);
            ledger.submit(&format!("tail-{n}"), request, rail).unwrap();
        }
        ledger.sync().unwrap();
    }
    let (catch_up, catch_up_output) = payonce(&history_w);
    assert_eq!(events_of(&catch_up_output), events_of(&index_output));

    println!();
    println!(
        "| `payonce history` on {} events | best ms | median ms |",
        verify.events
    );
    println!("| --- | ---: | ---: |");
    let row = |what: String, best: Duration, median: Option<Duration>| {
        println!(
            "| {what} | {} | {} |",
            ms(best),
            median.map_or_else(String::new, ms)
        );
    };
    row(
        format!("--withdrawal {withdrawal} ({found} events), one scan (--no-index)"),
        scan_best,
        Some(scan_median),
    );
    row(
        format!("--key {key}, one scan (--no-index)"),
        scan_key_best,
        Some(scan_key_median),
    );
    row(
        format!("--withdrawal {withdrawal}, audit index up to date"),
        index_best,
        Some(index_median),
    );
    row(
        format!("--key {key}, audit index up to date"),
        index_key_best,
        Some(index_key_median),
    );
    row(
        format!("--withdrawal {withdrawal}, first run after `payonce index`"),
        first_after_build,
        None,
    );
    row(
        format!("--withdrawal {withdrawal}, index 1,000 events behind (indexes them first)"),
        catch_up,
        None,
    );
    println!();
    println!(
        "index build (`payonce index`): {:.1} s, {:.0} MiB on disk",
        index_built.as_secs_f64(),
        index_bytes as f64 / (1 << 20) as f64
    );
}
