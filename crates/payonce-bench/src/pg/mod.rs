//! payonce on PostgreSQL beside the same protocol written plainly and
//! beside the server's raw commit rate, on one cluster in one run.
//!
//! A measurement is one [`Side`] with some worker processes of some
//! threads each, on a fresh database of the cluster ([`prepare`]). Each
//! worker process runs [`run_worker`]: it connects, says it is ready,
//! waits for the word, then every thread submits withdrawals of its own
//! under keys of its own against a zero-latency rail for a fixed time.
//! The parent adds the workers' reports up ([`Measured::combine`]) and
//! checks what the database holds afterwards ([`check`]).
//!
//! A submission is two decisions made durable, whichever side: the claim,
//! committed before the send, and the outcome, committed after it.

pub mod bulk;
mod plain;
mod worker;

use std::fmt::Write as _;

use payonce::{Config, LedgerError};
use payonce_postgres::cluster::Cluster;
use postgres::Client;
use serde::{Deserialize, Serialize};

use crate::error::BenchError;

pub use crate::pg::worker::run_worker;

/// The threads one worker process runs at most.
pub const PG_THREADS_MAX: usize = 256;

/// The seconds one measurement runs at most.
pub const PG_SECS_MAX: f64 = 600.0;

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Side {
    /// payonce's shared ledger: `Ledger::submit` through
    /// `payonce_postgres::open`, each worker batching its threads.
    Payonce,
    /// The protocol as a team writes it without payonce: a claims table
    /// with unique constraints, one connection per thread, one
    /// transaction per step (claim, then outcome).
    Plain,
    /// The server's limit: one single-row INSERT per transaction, one
    /// connection per thread, as `pgbench` measures it.
    Raw,
}

impl Side {
    /// Every side, in the order measured.
    pub const EVERY: [Side; 3] = [Side::Raw, Side::Plain, Side::Payonce];

    /// Its name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Side::Payonce => "payonce",
            Side::Plain => "plain",
            Side::Raw => "raw",
        }
    }

    /// The side named `name`.
    pub fn from_name(name: &str) -> Option<Side> {
        Side::EVERY.into_iter().find(|side| side.name() == name)
    }

    /// Durable decisions per unit of work: a submission is a claim and an
    /// outcome; a raw insert is one commit.
    pub fn decisions_per_unit(self) -> u64 {
        match self {
            Side::Payonce | Side::Plain => 2,
            Side::Raw => 1,
        }
    }
}

/// The configuration every payonce worker of the benchmark opens with: ids
/// chosen by the client, so no withdrawal needs creating first, on the
/// plain side neither.
pub fn payonce_config() -> Config {
    Config {
        accept_foreign_ids: true,
        ..Config::default()
    }
}

pub(crate) fn pg_error(step: &'static str) -> impl FnOnce(postgres::Error) -> BenchError {
    move |source| BenchError::Postgres { step, source }
}

/// A connection made as every payonce connection is (libpq's options and
/// environment, TLS as `sslmode` says).
pub(crate) fn connect(url: &str) -> Result<Client, BenchError> {
    payonce_postgres::client(url)
        .map_err(|error| BenchError::from(LedgerError::from(payonce::StoreError::from(error))))
}

/// A fresh database on `cluster`, made ready for `side`: the payonce
/// schema and a ledger, the plain claims table, or the raw table. Returns
/// its URL.
pub fn prepare(cluster: &Cluster, side: Side) -> Result<String, BenchError> {
    let store = |error: payonce::StoreError| BenchError::from(LedgerError::from(error));
    let url = cluster.database().map_err(store)?;
    match side {
        Side::Payonce => {
            payonce_postgres::migrate(&url).map_err(store)?;
            drop(payonce_postgres::init(&url, payonce_config())?);
        }
        Side::Plain => plain::create(&mut connect(&url)?)?,
        Side::Raw => connect(&url)?
            .batch_execute(
                "CREATE TABLE raw_rows (id bigserial PRIMARY KEY, worker text NOT NULL, \
                 n bigint NOT NULL, payload bytea NOT NULL)",
            )
            .map_err(pg_error("creating the raw table"))?,
    }
    Ok(url)
}

/// What one worker process measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerFigures {
    /// Units of work done: submissions, or raw inserts.
    pub units: u64,
    /// Seconds from the word to its last thread's end.
    pub elapsed_secs: f64,
    /// Every unit's latency, in microseconds.
    pub latencies_us: Vec<u32>,
}

/// One measurement: a side, its workers and threads, and its figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    /// What was measured.
    pub side: Side,
    /// Worker processes.
    pub workers: usize,
    /// Threads over all of them.
    pub threads: usize,
    /// Units of work done over all of them.
    pub units: u64,
    /// Units per second (over the slowest worker's elapsed time).
    pub units_per_sec: f64,
    /// Durable decisions per second.
    pub decisions_per_sec: f64,
    /// Median latency of a unit, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency of a unit, milliseconds.
    pub p99_ms: f64,
}

impl Measured {
    /// The figures of `side` from its workers' reports.
    pub fn combine(side: Side, threads: usize, reports: &[WorkerFigures]) -> Measured {
        let units: u64 = reports.iter().map(|report| report.units).sum();
        let elapsed = reports
            .iter()
            .map(|report| report.elapsed_secs)
            .fold(0.0, f64::max);
        let mut latencies: Vec<u64> = reports
            .iter()
            .flat_map(|report| report.latencies_us.iter().map(|&us| u64::from(us)))
            .collect();
        latencies.sort_unstable();
        let units_per_sec = match elapsed > 0.0 {
            true => units as f64 / elapsed,
            false => 0.0,
        };
        Measured {
            side,
            workers: reports.len(),
            threads,
            units,
            units_per_sec,
            decisions_per_sec: units_per_sec * side.decisions_per_unit() as f64,
            p50_ms: crate::run::percentile(&latencies, 50.0) / 1000.0,
            p99_ms: crate::run::percentile(&latencies, 99.0) / 1000.0,
        }
    }
}

/// Checks what a measurement left in the database at `url`: every unit
/// done is there, payonce's log verifies clean with nothing in flight,
/// and every plain claim has its outcome.
pub fn check(side: Side, url: &str, units: u64) -> Result<(), BenchError> {
    let unexpected = |answer: String| BenchError::Unexpected {
        store: side.name(),
        key: "(every key)".to_owned(),
        answer,
    };
    match side {
        Side::Payonce => {
            let (report, _) = payonce_postgres::verify(url).map_err(BenchError::ledger(None))?;
            if !report.is_clean() || report.in_flight != 0 || report.keys as u64 != units {
                return Err(unexpected(format!(
                    "a log of {} keys, {} in flight, {} divergences, for {units} submissions",
                    report.keys,
                    report.in_flight,
                    report.divergences.len()
                )));
            }
        }
        Side::Plain => {
            let (claims, settled) = plain::count(&mut connect(url)?)?;
            if claims != units || settled != units {
                return Err(unexpected(format!(
                    "{claims} claims, {settled} with an outcome, for {units} submissions"
                )));
            }
        }
        Side::Raw => {
            let rows: i64 = connect(url)?
                .query_one("SELECT count(*) FROM raw_rows", &[])
                .map_err(pg_error("counting raw rows"))?
                .get(0);
            if rows as u64 != units {
                return Err(unexpected(format!("{rows} rows for {units} inserts")));
            }
        }
    }
    Ok(())
}

/// The figures as a Markdown table, each beside the plain side's at the
/// same workers and threads and beside the raw commit rate at one thread.
pub fn pg_table(rows: &[Measured]) -> String {
    let raw_one = rows
        .iter()
        .find(|row| row.side == Side::Raw && row.threads == 1)
        .map(|row| row.decisions_per_sec);
    let plain_at = |workers: usize, threads: usize| {
        rows.iter()
            .find(|row| row.side == Side::Plain && row.workers == workers && row.threads == threads)
            .map(|row| row.decisions_per_sec)
    };
    let ratio = |value: f64, base: Option<f64>| match base {
        Some(base) if base > 0.0 => format!("{:.0}%", 100.0 * value / base),
        _ => "-".to_owned(),
    };
    let mut table = String::from(
        "| side | workers | threads | decisions/s | submissions/s | p50 ms | p99 ms | vs plain | vs raw, 1 thread |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let submissions = match row.side {
            Side::Raw => "-".to_owned(),
            _ => format!("{:.0}", row.units_per_sec),
        };
        let vs_plain = match row.side {
            Side::Payonce => ratio(row.decisions_per_sec, plain_at(row.workers, row.threads)),
            _ => "-".to_owned(),
        };
        let _ = writeln!(
            table,
            "| {} | {} | {} | {:.0} | {submissions} | {:.2} | {:.2} | {vs_plain} | {} |",
            row.side.name(),
            row.workers,
            row.threads,
            row.decisions_per_sec,
            row.p50_ms,
            row.p99_ms,
            ratio(row.decisions_per_sec, raw_one),
        );
    }
    table
}
