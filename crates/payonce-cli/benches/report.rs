//! `payonce report` on a large log: a one-hour window of a log of about a
//! million events, with and without the audit index, and the page at
//! `REPORT_EVENTS_MAX` events opened in headless Chromium beside a blank
//! page. Timed as an auditor runs it: the built binary, a new process each
//! time, the runs alternated.
//!
//! `cargo bench -p payonce-cli --bench report`. `PAYONCE_BENCH_EVENTS`
//! sets the log's size (default 1,000,000 events), `PAYONCE_BENCH_DIR`
//! where it is built (default: the system temp dir), `PAYONCE_BENCH_PAGE`
//! a path to keep the page at the limit at.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use payonce::{Config, Ledger, ManualClock, NewWithdrawal, SendFailure, Timestamp};
use payonce_log::{Durability, LogConfig};
use payonce_model::WithdrawalRequest;

const PAYONCE: &str = env!("CARGO_BIN_EXE_payonce");
/// 2026-11-16T00:00:00Z.
const START: Timestamp = Timestamp::from_unix_nanos(1_794_787_200_000_000_000);
/// The log's pace: one withdrawal (three events) every three seconds, so
/// an hour holds 3,600 events, under `REPORT_EVENTS_MAX`.
const EVERY: Duration = Duration::from_secs(3);

fn rail(request: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    Ok(request.sent(format!("0x{:x}", request.id().len() * 7919))?)
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

/// A log of about `events` events, withdrawals created and sent; every
/// hundredth fails and is resolved a minute later by an operator.
fn build(dir: &Path, events: u64, clock: &Arc<ManualClock>) {
    let ledger = Ledger::init_with(dir, config(clock.clone())).unwrap();
    let mut written = 1;
    let mut n = 0u64;
    while written < events {
        clock.advance(EVERY);
        let request = ledger
            .create(NewWithdrawal {
                amount: format!("{}.{:02}", 10 + n % 990, n % 100).parse().unwrap(),
                currency: if n.is_multiple_of(3) { "EUR" } else { "USDC" }
                    .parse()
                    .unwrap(),
                destination: format!("0x{n:040x}").parse().unwrap(),
                requested_by: "bench".parse().unwrap(),
            })
            .unwrap();
        let key = format!("req-{n}");
        if n % 100 == 99 {
            let failed = ledger.submit(&key, request.clone(), |_| {
                Err::<WithdrawalRequest, _>(SendFailure::failed("timed out"))
            });
            assert!(failed.is_err());
            ledger
                .resolve(&key, rail(&request).unwrap(), "found it on the rail", "ops")
                .unwrap();
            written += 1;
        } else {
            ledger.submit(&key, request, rail).unwrap();
        }
        n += 1;
        written += 3;
    }
    ledger.sync().unwrap();
}

fn run(program: &str, args: &[&str]) -> Duration {
    let started = Instant::now();
    let output = Command::new(program).args(args).output().unwrap();
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

fn chromium(page: &Path) -> Duration {
    let profile = tempfile::tempdir().unwrap();
    let profile = format!("--user-data-dir={}", profile.path().display());
    let url = format!("file://{}", page.display());
    run(
        "chromium",
        &[
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &profile,
            "--dump-dom",
            &url,
        ],
    )
}

fn secs(duration: Duration) -> String {
    format!("{:.3}", duration.as_secs_f64())
}

/// Best and median.
fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    format!(
        "{} s, median {} s",
        secs(times[0]),
        secs(times[times.len() / 2])
    )
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
    build(&dir, events, &clock);
    println!(
        "log: {} events in {:.1} s (Durability::Never)",
        payonce::verify(&dir).unwrap().events,
        started.elapsed().as_secs_f64()
    );
    let end = payonce::Clock::now(&*clock);
    let (from, to) = (
        end.minus(Duration::from_secs(3600)).to_string(),
        end.to_string(),
    );
    let out = temp.path().join("hour.html");
    let out_text = out.to_str().unwrap();
    let hour = [
        "report", dir_text, "--from", &from, "--to", &to, "-o", out_text,
    ];
    let no_index: Vec<&str> = hour.iter().copied().chain(["--no-index"]).collect();
    run(PAYONCE, &["index", dir_text]);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        with.push(run(PAYONCE, &hour));
        without.push(run(PAYONCE, &no_index));
    }
    let page = std::fs::metadata(&out).unwrap().len();
    println!("report, one hour ({from} to {to}), {page} bytes:");
    println!("  with the audit index:    {}", summary(with));
    println!("  without (--no-index):    {}", summary(without));

    let limit = payonce_cli::REPORT_EVENTS_MAX as u64;
    let full = temp.path().join("limit.html");
    let (a, b) = (
        (events / 2).to_string(),
        (events / 2 + limit - 1).to_string(),
    );
    let at_limit = ["report", dir_text, "--from", &a, "--to", &b, "-o"];
    run(
        PAYONCE,
        &[at_limit.as_slice(), &[full.to_str().unwrap()]].concat(),
    );
    if let Some(keep) = std::env::var_os("PAYONCE_BENCH_PAGE") {
        std::fs::copy(&full, keep).unwrap();
    }
    let blank = temp.path().join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><title>blank</title>").unwrap();
    let (mut opened, mut blank_opened) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        opened.push(chromium(&full));
        blank_opened.push(chromium(&blank));
    }
    println!(
        "page at REPORT_EVENTS_MAX ({limit} events, {} bytes, limit {}):",
        std::fs::metadata(&full).unwrap().len(),
        payonce_cli::REPORT_BYTES_MAX
    );
    println!("  chromium --dump-dom, the page:  {}", summary(opened));
    println!(
        "  chromium --dump-dom, blank:     {}",
        summary(blank_opened)
    );
}
