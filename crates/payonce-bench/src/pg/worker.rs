//! One worker process of the PostgreSQL benchmark: its threads submit
//! withdrawals of their own until the time is up.

use std::time::{Duration, Instant};

use payonce::Ledger;
use payonce_model::WithdrawalRequest;
use postgres::Client;

use crate::error::BenchError;
use crate::pg::plain::{self, PlainAnswer};
use crate::pg::{
    PG_SECS_MAX, PG_THREADS_MAX, Side, WorkerFigures, connect, payonce_config, pg_error,
};

/// What each thread of a side holds while it runs.
enum Seat {
    Payonce(Ledger),
    Client(Box<Client>),
}

fn setting(setting: &'static str, value: impl ToString, rule: &'static str) -> BenchError {
    BenchError::Setting {
        setting,
        value: value.to_string(),
        rule,
    }
}

/// Runs worker `worker` of `side` on the database at `url`: connects
/// (`threads` connections, or one ledger the threads share), calls
/// `ready`, which returns once every worker may start, then has every
/// thread work for `secs` seconds.
pub fn run_worker(
    side: Side,
    url: &str,
    worker: &str,
    threads: usize,
    secs: f64,
    ready: impl FnOnce() -> Result<(), BenchError>,
) -> Result<WorkerFigures, BenchError> {
    if threads == 0 || threads > PG_THREADS_MAX {
        return Err(setting("threads", threads, "1 to PG_THREADS_MAX (256)"));
    }
    if !(secs > 0.0 && secs <= PG_SECS_MAX) {
        return Err(setting(
            "secs",
            secs,
            "more than 0 and at most PG_SECS_MAX (600)",
        ));
    }
    let seats = match side {
        Side::Payonce => {
            let ledger = payonce_postgres::open(url, worker, payonce_config())?;
            (0..threads)
                .map(|_| Seat::Payonce(ledger.clone()))
                .collect()
        }
        Side::Plain | Side::Raw => (0..threads)
            .map(|_| connect(url).map(|client| Seat::Client(Box::new(client))))
            .collect::<Result<Vec<_>, _>>()?,
    };
    ready()?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let results: Vec<Result<Vec<u32>, BenchError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = seats
            .into_iter()
            .enumerate()
            .map(|(thread, seat)| scope.spawn(move || work(side, seat, worker, thread, deadline)))
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(thread, handle)| {
                handle
                    .join()
                    .unwrap_or(Err(BenchError::ThreadPanicked { thread }))
            })
            .collect()
    });
    let elapsed_secs = start.elapsed().as_secs_f64();
    let mut latencies_us = Vec::new();
    for result in results {
        latencies_us.extend(result?);
    }
    Ok(WorkerFigures {
        units: latencies_us.len() as u64,
        elapsed_secs,
        latencies_us,
    })
}

/// One thread's loop: a unit at a time until `deadline`; the latency of
/// each, in microseconds.
fn work(
    side: Side,
    mut seat: Seat,
    worker: &str,
    thread: usize,
    deadline: Instant,
) -> Result<Vec<u32>, BenchError> {
    let mut latencies = Vec::new();
    let amount = "10";
    for n in 0u64.. {
        let started = Instant::now();
        if started >= deadline {
            break;
        }
        let id = format!("w-{worker}-{thread}-{n}");
        let key = format!("k-{worker}-{thread}-{n}");
        let reference = || format!("0x{worker}{thread}x{n}");
        match (&mut seat, side) {
            (Seat::Payonce(ledger), _) => {
                let request = WithdrawalRequest::new(
                    id.parse()?,
                    amount.parse()?,
                    "USDC".parse()?,
                    "0xbench".parse()?,
                    "bench".parse()?,
                );
                ledger
                    .submit(&key, &request, |request| Ok(request.sent(reference())?))
                    .map_err(|error| BenchError::Unexpected {
                        store: "payonce",
                        key: key.clone(),
                        answer: error.to_string(),
                    })?;
            }
            (Seat::Client(client), Side::Plain) => {
                let answer = plain::submit(client, &key, &id, amount, reference)?;
                if answer != PlainAnswer::Sent {
                    return Err(BenchError::Unexpected {
                        store: "plain",
                        key,
                        answer: format!("{answer:?}"),
                    });
                }
            }
            (Seat::Client(client), _) => {
                client
                    .execute(
                        "INSERT INTO raw_rows (worker, n, payload) VALUES ($1, $2, $3)",
                        &[&worker, &(n as i64), &key.as_bytes()],
                    )
                    .map_err(pg_error("inserting a raw row"))?;
            }
        }
        let micros = started.elapsed().as_micros();
        latencies.push(u32::try_from(micros).unwrap_or(u32::MAX));
    }
    Ok(latencies)
}
