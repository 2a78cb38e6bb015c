//! The index of the events about each request key and each withdrawal
//! (`key_events`, `withdrawal_events`, schema version 2): which rows a
//! batch writes beside its events, how a migration from version 1 writes
//! them for the events already there, and how an audit that follows one
//! key or withdrawal reads its events through it, each event's batch
//! checked against its chain digest.
//!
//! The rows say which events are about what as the ledger said it when it
//! appended them ([`Appended`]'s `keys` and `withdrawal`), or as an audit
//! that scans the whole log attributes them (the migration): the keys
//! each event touches, and the withdrawal it is about.

use payonce::{
    Appended, Event, State, StoreError, Subject, apply, decode_event, needs_state, withdrawal_of,
};
use payonce_log::chain::{Digest, batch_digest};
use postgres::Transaction;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;

use crate::error::{damaged, failed};
use crate::follow::{signed, unsigned};
use crate::pipeline::Pipeline;

/// Events the migration reads at a time while it writes their rows.
const BACKFILL_EVENTS_MAX: i64 = 65_536;

/// The index rows of some events: `(key, seq)` and `(withdrawal, seq)`.
#[derive(Debug, Default)]
pub(crate) struct Rows<'a> {
    pub(crate) keys: Vec<&'a str>,
    pub(crate) key_seqs: Vec<i64>,
    pub(crate) withdrawals: Vec<&'a str>,
    pub(crate) withdrawal_seqs: Vec<i64>,
}

impl<'a> Rows<'a> {
    /// The rows of a batch's events, as the ledger handed them over.
    pub(crate) fn of(batch: &'a [Appended]) -> Rows<'a> {
        let mut rows = Rows::default();
        for event in batch {
            let seq = signed(event.seq);
            for key in &event.keys {
                rows.keys.push(key.as_str());
                rows.key_seqs.push(seq);
            }
            if let Some(withdrawal) = &event.withdrawal {
                rows.withdrawals.push(withdrawal.as_str());
                rows.withdrawal_seqs.push(seq);
            }
        }
        rows
    }
}

/// Writes the index rows of every event the log holds, in `transaction`
/// (the migration's, under the ledger-wide lock): each event attributed as
/// `payonce history`'s scan attributes it, through the state before it
/// where it does not name its withdrawal. Returns the events read.
pub(crate) fn backfill(transaction: &mut Transaction<'_>) -> Result<u64, StoreError> {
    let mut state = State::new();
    let mut after = 0i64;
    loop {
        let rows = transaction
            .query(
                "SELECT seq, payload FROM payonce.events WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[&after, &BACKFILL_EVENTS_MAX],
            )
            .map_err(failed)?;
        let Some(last) = rows.last() else {
            return Ok(unsigned(after));
        };
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq = unsigned(row.get(0));
            let event = decode_event(seq, row.get(1))
                .map_err(|error| damaged(seq, format!("event {seq} cannot be indexed: {error}")))?;
            let withdrawal = match needs_state(&event) {
                true => withdrawal_of(&state, &event.kind),
                false => event.kind.withdrawal().cloned(),
            };
            apply(&mut state, &event);
            events.push((event, withdrawal));
        }
        after = last.get(0);
        copy_rows(transaction, &events)?;
    }
}

/// Copies the index rows of `events` (each with the withdrawal it is
/// about) into the index's tables.
fn copy_rows(
    transaction: &mut Transaction<'_>,
    events: &[(Event, Option<payonce_model::WithdrawalId>)],
) -> Result<(), StoreError> {
    let sink = transaction
        .copy_in("COPY payonce.key_events (key, seq) FROM STDIN (FORMAT binary)")
        .map_err(failed)?;
    let mut writer = BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::INT8]);
    for (event, _) in events {
        let seq = signed(event.seq);
        for key in event.kind.keys_touched() {
            writer.write(&[&key.as_str(), &seq]).map_err(failed)?;
        }
    }
    writer.finish().map_err(failed)?;
    let sink = transaction
        .copy_in("COPY payonce.withdrawal_events (withdrawal, seq) FROM STDIN (FORMAT binary)")
        .map_err(failed)?;
    let mut writer = BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::INT8]);
    for (event, withdrawal) in events {
        if let Some(withdrawal) = withdrawal {
            writer
                .write(&[&withdrawal.as_str(), &signed(event.seq)])
                .map_err(failed)?;
        }
    }
    writer.finish().map_err(failed)?;
    Ok(())
}

/// The first `limit` events about `subject` the index lists, in order,
/// with their bytes: read on `conn` (a read view's transaction), each
/// event's whole batch read with it and its chain digest checked from the
/// digest of the batch before, so every event handed back is one the
/// chain vouches for.
pub(crate) fn events_about(
    conn: &mut Pipeline,
    subject: &Subject,
    limit: usize,
) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let query = match subject {
        Subject::Key(_) => {
            "SELECT seq FROM payonce.key_events WHERE key = $1 ORDER BY seq LIMIT $2"
        }
        Subject::Withdrawal(_) => {
            "SELECT seq FROM payonce.withdrawal_events WHERE withdrawal = $1 ORDER BY seq LIMIT $2"
        }
    };
    let name = subject.as_str();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let listed: Vec<i64> = conn
        .query(query, &[&name, &limit])
        .map_err(failed)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let rows = conn.query(BATCHES_OF, &[&listed]).map_err(failed)?;
    let mut batches = Vec::new();
    for row in &rows {
        let first_seq = unsigned(row.get(0));
        if batches
            .last()
            .is_none_or(|batch: &BatchRead| batch.first_seq != first_seq)
        {
            batches.push(BatchRead {
                first_seq,
                last_seq: unsigned(row.get(1)),
                digest: row.get(2),
                prev: row.get(3),
                events: Vec::new(),
            });
        }
        if let Some(batch) = batches.last_mut() {
            batch
                .events
                .push((unsigned(row.get(4)), unsigned(row.get(5)), row.get(6)));
        }
    }
    let mut found = Vec::with_capacity(listed.len());
    let mut listed = listed.into_iter().map(unsigned).peekable();
    for batch in batches {
        batch.check()?;
        for (seq, _, payload) in batch.events {
            if listed.next_if_eq(&seq).is_some() {
                found.push((seq, payload));
            }
        }
    }
    match listed.next() {
        Some(seq) => Err(damaged(
            seq,
            format!("the index lists event {seq}, which is in no batch of the log"),
        )),
        None => Ok(found),
    }
}

/// Every event of the batches that hold the events `$1` lists, in order,
/// each with its batch's row and the digest of the batch before it.
const BATCHES_OF: &str = "
SELECT b.first_seq, b.last_seq, b.digest, p.digest, e.seq, e.batch, e.payload
FROM payonce.batches b
LEFT JOIN payonce.batches p ON p.last_seq = b.first_seq - 1
JOIN payonce.events e ON e.seq BETWEEN b.first_seq AND b.last_seq
WHERE b.first_seq IN (SELECT batch FROM payonce.events WHERE seq = ANY($1))
ORDER BY e.seq";

/// A batch read whole for the index: its row, the digest of the batch
/// before it, and its events `(seq, batch, payload)`.
struct BatchRead {
    first_seq: u64,
    last_seq: u64,
    digest: Vec<u8>,
    prev: Option<Vec<u8>>,
    events: Vec<(u64, u64, Vec<u8>)>,
}

impl BatchRead {
    /// Checks the batch is whole and chains from the batch before it.
    fn check(&self) -> Result<(), StoreError> {
        let (first, last) = (self.first_seq, self.last_seq);
        for (expected, (seq, batch, _)) in (first..).zip(&self.events) {
            if *seq != expected || *batch != first {
                return Err(damaged(
                    expected,
                    format!(
                        "the batch of events {first} to {last} does not hold event {expected} \
                         where it belongs"
                    ),
                ));
            }
        }
        if first + self.events.len() as u64 != last + 1 {
            return Err(damaged(
                first,
                format!("the batch of events {first} to {last} is not whole"),
            ));
        }
        let prev = match (&self.prev, first) {
            (None, 1) => Digest::GENESIS,
            (Some(prev), _) => Digest(<[u8; 32]>::try_from(prev.as_slice()).map_err(|_| {
                damaged(
                    first,
                    format!("the digest of the batch before event {first} is not 32 bytes"),
                )
            })?),
            (None, _) => {
                return Err(damaged(
                    first,
                    format!(
                        "no batch ends at event {}, before the batch of {first} to {last}",
                        first - 1
                    ),
                ));
            }
        };
        let digest = batch_digest(
            &prev,
            first,
            self.events.iter().map(|(_, _, payload)| payload.as_slice()),
        );
        if digest.0.as_slice() != self.digest.as_slice() {
            return Err(damaged(
                first,
                format!(
                    "the batch of events {first} to {last} does not chain: its events and the \
                     digest of the batch before it give {digest}"
                ),
            ));
        }
        Ok(())
    }
}
