//! A large PostgreSQL ledger, built fast for measuring replay: the ledger
//! decides every event in memory (a worker of a [`MemoryLog`], the same
//! `decide` and `apply` a worker on PostgreSQL runs), then the events, the
//! batches with their chain digests and the constraint rows are copied
//! into the database with `COPY ... FROM STDIN (FORMAT binary)`, as a
//! worker's transactions would have written them, the index of the events
//! about each key and withdrawal included.
//!
//! What it builds: the ledger's `opened` event, a worker's `started`, then
//! per withdrawal a `created`, a `claimed` and a `completed` event (a
//! 42-byte destination, a 66-byte reference), grouped into batches of
//! `batch_events` consecutive events, as a worker whose threads' decisions
//! share transactions commits them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use payonce::{
    Appended, ClaimChange, Config, Ledger, LedgerError, NewWithdrawal, SendFailure, SharedLog,
    SharedRecord, StoreError, Visit,
};
use payonce_log::chain::{Head, batch_digest};
use payonce_model::{Reference, WithdrawalRequest, WorkerName};
use postgres::Client;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};

use crate::error::BenchError;

/// The name of the worker whose decisions the built ledger holds.
pub const BULK_WORKER: &str = "bulk";

/// A shared log in memory: every event appended, in order, with what each
/// does to the claims. Its lock orders batches as the database's does.
#[derive(Debug, Default)]
pub struct MemoryLog {
    events: Mutex<Vec<Appended>>,
}

impl MemoryLog {
    fn events(&self) -> Result<std::sync::MutexGuard<'_, Vec<Appended>>, StoreError> {
        self.events.lock().map_err(|_| StoreError::Failed {
            detail: "a panic while the memory log was in use".to_owned(),
        })
    }

    /// Every event appended, in order.
    pub fn take(&self) -> Result<Vec<Appended>, StoreError> {
        Ok(std::mem::take(&mut *self.events()?))
    }
}

impl SharedLog for MemoryLog {
    fn scan(&self, after: u64, visit: Visit<'_>) -> Result<(), StoreError> {
        let events = self.events()?;
        let start = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(events.len());
        for event in &events[start..] {
            if visit(event.seq, &event.payload).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn begin(&self, after: u64) -> Result<Vec<SharedRecord>, StoreError> {
        let events = self.events()?;
        let start = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(events.len());
        Ok(events[start..]
            .iter()
            .map(|event| SharedRecord {
                seq: event.seq,
                payload: event.payload.clone(),
            })
            .collect())
    }

    fn commit(&self, batch: &[Appended]) -> Result<(), StoreError> {
        self.events()?.extend_from_slice(batch);
        Ok(())
    }

    fn head(&self) -> Result<Head, StoreError> {
        // Only a database's head is pinned; this one is never asked for.
        Ok(Head::default())
    }
}

/// The withdrawal every submission creates.
fn new_withdrawal() -> NewWithdrawal {
    // Constants that parse: a failure is a bug of this file.
    #[allow(clippy::unwrap_used)]
    NewWithdrawal {
        amount: "25.00".parse().unwrap(),
        currency: "USDC".parse().unwrap(),
        destination: "0x52908400098527886E0F7030069857D2E4169EE7"
            .parse()
            .unwrap(),
        requested_by: "bench".parse().unwrap(),
    }
}

/// The rail: sent at once, with a reference of 66 characters.
fn rail(request: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    let failed = |error: &dyn std::fmt::Display| SendFailure::Failed(error.to_string().into());
    let reference = Reference::new(format!("0x{:0>64}", request.id().as_str()))
        .map_err(|error| failed(&error))?;
    request
        .approve()
        .and_then(|r| r.start_sending())
        .and_then(|r| r.mark_sent(reference))
        .map_err(|error| failed(&error))
}

/// Decides the events of a ledger of `withdrawals` sent withdrawals in
/// memory, as worker [`BULK_WORKER`] decides them.
pub fn decide_in_memory(withdrawals: u64) -> Result<Vec<Appended>, BenchError> {
    let log = Arc::new(MemoryLog::default());
    drop(Ledger::init_shared(log.clone(), Config::default())?);
    let worker = WorkerName::new(BULK_WORKER)?;
    let ledger = Ledger::open_shared(log.clone(), worker, Config::default())?;
    for index in 0..withdrawals {
        let request = ledger.create(new_withdrawal())?;
        let key = format!("req-{index:010}");
        ledger
            .submit(&key, request, rail)
            .map_err(|error| BenchError::Unexpected {
                store: "payonce in memory",
                key: key.clone(),
                answer: error.to_string(),
            })?;
    }
    drop(ledger);
    Ok(log.take().map_err(LedgerError::Store)?)
}

/// The constraint rows of `events`: claims and releases, each claim in
/// the next round of its withdrawal and of its key, as the batch's insert
/// numbers them.
#[derive(Debug, Default)]
struct ConstraintRows<'a> {
    /// `(withdrawal, round, key, seq)`.
    claims: Vec<(&'a str, i64, &'a str, i64)>,
    /// `(seq, key, key_round, withdrawal, round)`.
    releases: Vec<(i64, &'a str, i64, &'a str, i64)>,
}

fn constraint_rows(events: &[Appended]) -> ConstraintRows<'_> {
    let mut rows = ConstraintRows::default();
    let mut released_keys: HashMap<&str, i64> = HashMap::new();
    let mut released_withdrawals: HashMap<&str, i64> = HashMap::new();
    for event in events {
        let seq = signed(event.seq);
        match &event.claim {
            Some(ClaimChange::Claims { key, withdrawal }) => {
                let round = released_withdrawals.get(withdrawal.as_str()).copied();
                let key_round = released_keys.get(key.as_str()).copied();
                rows.claims
                    .push((withdrawal.as_str(), round.unwrap_or(0), key.as_str(), seq));
                debug_assert_eq!(round, key_round, "the benchmark's keys hold one withdrawal");
            }
            Some(ClaimChange::Frees { key, withdrawal }) => {
                let key_round = released_keys.entry(key.as_str()).or_default();
                let round = released_withdrawals.entry(withdrawal.as_str()).or_default();
                rows.releases
                    .push((seq, key.as_str(), *key_round, withdrawal.as_str(), *round));
                *key_round += 1;
                *round += 1;
            }
            _ => {}
        }
    }
    rows
}

fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Copies `rows` into `table`'s `columns` with `COPY ... FROM STDIN (FORMAT
/// binary)`.
fn copy_in<'a, R: 'a>(
    client: &mut Client,
    table: &str,
    columns: &str,
    types: &[Type],
    rows: impl IntoIterator<Item = R>,
    fields: impl Fn(&R) -> Vec<&(dyn ToSql + Sync)>,
) -> Result<u64, BenchError> {
    let step = "COPY FROM STDIN";
    let postgres = |source| BenchError::Postgres { step, source };
    let sink = client
        .copy_in(&format!(
            "COPY payonce.{table} ({columns}) FROM STDIN (FORMAT binary)"
        ))
        .map_err(postgres)?;
    let mut writer = BinaryCopyInWriter::new(sink, types);
    for row in rows {
        writer.write(&fields(&row)).map_err(postgres)?;
    }
    writer.finish().map_err(postgres)
}

/// Copies `events` into the empty ledger at `url` (its schema applied) in
/// batches of `batch_events` events, each with its chain digest, and the
/// constraint rows of its claims and releases. Returns the head.
pub fn copy_into(url: &str, events: &[Appended], batch_events: usize) -> Result<Head, BenchError> {
    let postgres = |step| move |source| BenchError::Postgres { step, source };
    let mut client = super::connect(url)?;
    let client = &mut client;
    // The copies share one transaction: a ledger half copied is never seen.
    client.batch_execute("BEGIN").map_err(postgres("BEGIN"))?;
    let mut head = Head::default();
    let mut batches = Vec::new();
    for batch in events.chunks(batch_events.max(1)) {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            continue;
        };
        let digest = batch_digest(
            &head.digest,
            first.seq,
            batch.iter().map(|event| event.payload.as_slice()),
        );
        batches.push((signed(first.seq), signed(last.seq), digest.0.to_vec()));
        head = Head {
            seq: last.seq,
            digest,
        };
    }
    let worker = BULK_WORKER;
    let written_under = payonce_postgres::SCHEMA_VERSION;
    copy_in(
        client,
        "batches",
        "first_seq, last_seq, digest, worker, written_under",
        &[Type::INT8, Type::INT8, Type::BYTEA, Type::TEXT, Type::INT4],
        &batches,
        |(first, last, digest)| vec![first, last, digest, &worker, &written_under],
    )?;
    let batch_of = |seq: u64| {
        let index = (seq - 1) / batch_events.max(1) as u64;
        signed(index * batch_events.max(1) as u64 + 1)
    };
    let event_rows: Vec<(i64, i64, &[u8])> = events
        .iter()
        .map(|event| {
            (
                signed(event.seq),
                batch_of(event.seq),
                event.payload.as_slice(),
            )
        })
        .collect();
    copy_in(
        client,
        "events",
        "seq, batch, payload",
        &[Type::INT8, Type::INT8, Type::BYTEA],
        &event_rows,
        |(seq, batch, payload)| vec![seq, batch, payload],
    )?;
    copy_constraint_rows(client, &constraint_rows(events))?;
    copy_index_rows(client, events)?;
    client
        .batch_execute("COMMIT; ANALYZE")
        .map_err(postgres("COMMIT"))?;
    Ok(head)
}

/// The rows of the index of the events about each key and withdrawal, as
/// a worker's batch writes them from what the ledger hands it.
fn copy_index_rows(client: &mut Client, events: &[Appended]) -> Result<(), BenchError> {
    let keys: Vec<(&str, i64)> = events
        .iter()
        .flat_map(|event| {
            event
                .keys
                .iter()
                .map(|key| (key.as_str(), signed(event.seq)))
        })
        .collect();
    copy_in(
        client,
        "key_events",
        "key, seq",
        &[Type::TEXT, Type::INT8],
        &keys,
        |(key, seq)| vec![key, seq],
    )?;
    let withdrawals: Vec<(&str, i64)> = events
        .iter()
        .filter_map(|event| Some((event.withdrawal.as_ref()?.as_str(), signed(event.seq))))
        .collect();
    copy_in(
        client,
        "withdrawal_events",
        "withdrawal, seq",
        &[Type::TEXT, Type::INT8],
        &withdrawals,
        |(withdrawal, seq)| vec![withdrawal, seq],
    )?;
    Ok(())
}

fn copy_constraint_rows(client: &mut Client, rows: &ConstraintRows<'_>) -> Result<(), BenchError> {
    copy_in(
        client,
        "withdrawal_claims",
        "withdrawal, round, key, seq",
        &[Type::TEXT, Type::INT8, Type::TEXT, Type::INT8],
        &rows.claims,
        |(withdrawal, round, key, seq)| vec![withdrawal, round, key, seq],
    )?;
    copy_in(
        client,
        "key_claims",
        "key, round, withdrawal, seq",
        &[Type::TEXT, Type::INT8, Type::TEXT, Type::INT8],
        &rows.claims,
        |(withdrawal, round, key, seq)| vec![key, round, withdrawal, seq],
    )?;
    copy_in(
        client,
        "releases",
        "seq, key, key_round, withdrawal, round",
        &[Type::INT8, Type::TEXT, Type::INT8, Type::TEXT, Type::INT8],
        &rows.releases,
        |(seq, key, key_round, withdrawal, round)| vec![seq, key, key_round, withdrawal, round],
    )?;
    Ok(())
}
