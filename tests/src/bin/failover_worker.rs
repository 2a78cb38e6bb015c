//! A worker process of the failover and partition tests: opens the ledger
//! at URL (which may name several hosts) as WORKER, writes `ready`, then
//! for every line `round IDS` on its standard input submits every
//! withdrawal of IDS (one JSON withdrawal a line) from THREADS threads,
//! each under keys of its own, and writes `done` once every submission is
//! answered.
//!
//! Its rail records every send durably: `send ID KEY` is appended to the
//! file RAIL and flushed to the disk (`sync_data`) before the send
//! returns. A submission the ledger cannot record (no primary, a lost
//! connection) is tried again under the same key, as a client retries,
//! until it is answered, for at most `RETRY_MAX`. Its standard output has
//! one line per answer: `told ID KEY REFERENCE` (an outcome, sent now or
//! replayed), `lost ID KEY HOLDER` (refused: another key holds it),
//! `refused ID KEY WHY` (refused otherwise), `rewound ID KEY MESSAGE` (the
//! log was rewound under the worker: it appends nothing more),
//! `gaveup ID KEY ERROR`; `errors N SLOWEST_MS` per round (the answers
//! "cannot record" it was given and the slowest of them), and `head
//! SEQ:DIGEST`, the head it read last, before `done`.
//!
//! Usage: `failover_worker URL WORKER THREADS RAIL`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use payonce::{Config, Ledger, SubmitError};
use payonce_model::WithdrawalRequest;

/// How long a submission is tried again while the ledger cannot record it.
const RETRY_MAX: Duration = Duration::from_secs(120);

/// The pause between two tries, as a client's retry.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// What a round's submissions were told "cannot record": how many times,
/// and the slowest answer.
#[derive(Default)]
struct Errors {
    count: u64,
    slowest: Duration,
}

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let mut out = out.lock().unwrap();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// The rail: the send's record on the disk before it returns.
fn send(rail: &Mutex<std::fs::File>, request: &WithdrawalRequest, key: &str) {
    let mut file = rail.lock().unwrap();
    writeln!(file, "send {} {key}", request.id()).unwrap();
    file.sync_data().unwrap();
}

/// Submits `request` under `key` until it is answered; the line that says
/// how.
fn submit(
    ledger: &Ledger,
    rail: &Mutex<std::fs::File>,
    errors: &Mutex<Errors>,
    request: &WithdrawalRequest,
    key: &str,
) -> String {
    let id = request.id();
    let started = Instant::now();
    loop {
        let asked = Instant::now();
        let result = ledger.submit(key, request, |request| {
            send(rail, request, key);
            Ok(request.sent(format!("0x{key}"))?)
        });
        let error = match result {
            Ok(outcome) => return format!("told {id} {key} {}", outcome.reference().unwrap()),
            Err(SubmitError::Ledger(error)) if error.refusal().is_some() => {
                let refusal = error.refusal().unwrap();
                return match refusal.holder() {
                    Some(holder) if holder.as_str() != key => format!("lost {id} {key} {holder}"),
                    _ => format!("refused {id} {key} {}", one_line(&error.to_string())),
                };
            }
            Err(error) => one_line(&error.to_string()),
        };
        if error.contains("rewound") {
            return format!("rewound {id} {key} {error}");
        }
        let mut errors = errors.lock().unwrap();
        errors.count += 1;
        errors.slowest = errors.slowest.max(asked.elapsed());
        drop(errors);
        if started.elapsed() > RETRY_MAX {
            return format!("gaveup {id} {key} {error}");
        }
        std::thread::sleep(RETRY_PAUSE);
    }
}

fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

/// Submits every withdrawal of `withdrawals` from `threads` threads, each
/// walking them from its own place under keys of its own.
fn round(
    ledger: &Ledger,
    worker: &str,
    threads: usize,
    rail: &Mutex<std::fs::File>,
    out: &Mutex<std::io::Stdout>,
    withdrawals: &[WithdrawalRequest],
) {
    let errors = Mutex::new(Errors::default());
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let errors = &errors;
            scope.spawn(move || {
                let start = thread * withdrawals.len() / threads;
                for n in 0..withdrawals.len() {
                    let request = &withdrawals[(start + n) % withdrawals.len()];
                    let key = format!("{worker}-t{thread}-{}", request.id());
                    say(out, &submit(ledger, rail, errors, request, &key));
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    say(
        out,
        &format!("errors {} {}", errors.count, errors.slowest.as_millis()),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, worker, threads, rail] = args.as_slice() else {
        eprintln!("usage: failover_worker URL WORKER THREADS RAIL");
        std::process::exit(2);
    };
    let threads: usize = threads.parse().unwrap();
    let rail = Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(rail)
            .unwrap(),
    );
    let ledger = payonce_postgres::open(url, worker, Config::default()).unwrap();
    let out = Mutex::new(std::io::stdout());
    say(&out, "ready");
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let Some(ids) = line.strip_prefix("round ") else {
            panic!("unknown command {line}");
        };
        let withdrawals: Vec<WithdrawalRequest> = std::fs::read_to_string(ids)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        round(&ledger, worker, threads, &rail, &out, &withdrawals);
        match ledger.head() {
            Ok(head) => say(&out, &format!("head {head}")),
            Err(error) => say(&out, &format!("nohead {}", one_line(&error.to_string()))),
        }
        say(&out, "done");
    }
}
