//! A worker process of the PostgreSQL race test: opens the ledger at URL as
//! WORKER, writes `ready`, waits for a line on its standard input, then
//! submits every withdrawal of IDS (one JSON withdrawal a line) from
//! THREADS threads, each under keys of its own, and reports on its
//! standard output one line per send (`send ID KEY`, written before the
//! send returns: the rail's record) and per answer (`won ID KEY`, `lost ID
//! KEY HOLDER`, or `error ID KEY MESSAGE`).
//!
//! Usage: `pg_worker URL WORKER THREADS IDS`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Write};
use std::sync::Mutex;

use payonce::{Config, SubmitError};
use payonce_model::WithdrawalRequest;

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let mut out = out.lock().unwrap();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, worker, threads, ids] = args.as_slice() else {
        eprintln!("usage: pg_worker URL WORKER THREADS IDS");
        std::process::exit(2);
    };
    let threads: usize = threads.parse().unwrap();
    let withdrawals: Vec<WithdrawalRequest> = std::fs::read_to_string(ids)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let ledger = payonce_postgres::open(url, worker, Config::default()).unwrap();
    let out = Mutex::new(std::io::stdout());
    say(&out, "ready");
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (ledger, out, withdrawals) = (&ledger, &out, &withdrawals);
            scope.spawn(move || {
                // Each thread walks the withdrawals from its own place, so
                // threads race each other on every one.
                let start = thread * withdrawals.len() / threads;
                for n in 0..withdrawals.len() {
                    let request = &withdrawals[(start + n) % withdrawals.len()];
                    let key = format!("{worker}-t{thread}-{}", request.id());
                    let result = ledger.submit(&key, request, |request| {
                        say(out, &format!("send {} {key}", request.id()));
                        Ok(request.sent(format!("0x{key}"))?)
                    });
                    let line = match result {
                        Ok(_) => format!("won {} {key}", request.id()),
                        Err(SubmitError::Ledger(error)) if error.refusal().is_some() => {
                            let holder = error.refusal().and_then(|r| r.holder()).unwrap();
                            format!("lost {} {key} {holder}", request.id())
                        }
                        Err(error) => format!("error {} {key} {error}", request.id()),
                    };
                    say(out, &line);
                }
            });
        }
    });
}
