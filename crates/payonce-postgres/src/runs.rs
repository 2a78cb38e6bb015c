//! Runs of settled pairs in the database: a row of `payonce.runs` (its
//! number, length, chunk count, who wrote it) and its bytes in
//! `payonce.run_chunks`, in chunks of [`RUN_CHUNK_LEN`]. A run is written
//! once, in one transaction on a connection of its own, never under the
//! ledger-wide lock, and shared by every snapshot whose manifest names it.
//!
//! A worker reads a run on a connection of its own that pins it (a shared
//! advisory lock of [`RUN_PIN_LOCK_CLASS`] keyed by its number), a chunk
//! range at a time; a prune deletes a run's chunks only when no snapshot
//! kept names it and it takes that lock exclusively, so no run a worker
//! reads, or has just written and not yet named, goes from under it. A
//! lost connection is made again (whichever host takes writes after a
//! failover), the run found unchanged and pinned again, and the read asked
//! once more.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use payonce::{RunOut, SnapshotError};
use payonce_runs::{RunError, RunSource};
use postgres::{Client, Statement};

use crate::error::describe;
use crate::schema::{RUN_NUMBER_LOCK_CLASS, RUN_PIN_LOCK_CLASS};
use crate::store::connect;

/// Bytes per row of `payonce.run_chunks` this build writes: a cold lookup
/// reads a block of a few KiB, and fetches the chunk it lies in.
pub const RUN_CHUNK_LEN: usize = 64 << 10;

/// A failure `doing` something with runs, which says nothing of a run's
/// bytes.
pub(crate) fn runs_error(doing: &'static str, detail: String) -> SnapshotError {
    SnapshotError::Io {
        op: doing,
        file: "payonce.runs".to_owned(),
        source: io::Error::other(detail),
    }
}

fn failed(doing: &'static str) -> impl Fn(postgres::Error) -> SnapshotError {
    move |error| runs_error(doing, describe(&error))
}

/// The key a run's pin is taken under: its number folded to 32 bits.
pub(crate) fn pin_key(run: i64) -> i32 {
    (run ^ (run >> 32)) as i32
}

/// A run number as the database keeps it.
pub(crate) fn signed(run: u64) -> Result<i64, SnapshotError> {
    i64::try_from(run).map_err(|_| SnapshotError::Store {
        detail: format!("run {run} is past what a bigint holds"),
    })
}

/// A run being written: its transaction open on a connection of its own
/// (dropped unfinished, the connection closes and nothing is kept).
pub(crate) struct PgRunOut {
    client: Client,
    written: Written,
    insert: Statement,
    number: i64,
    writer: String,
    pending: Vec<u8>,
    chunks: i32,
    len: u64,
}

impl PgRunOut {
    /// Begins a run on a new connection to `url`: one numbering at a time,
    /// the next number past every run's.
    pub(crate) fn begin(
        url: &str,
        writer: &str,
        written: &Written,
    ) -> Result<PgRunOut, SnapshotError> {
        let mut client = connect(url)
            .map_err(|error| runs_error("connecting to write a run to", error.to_string()))?;
        client
            .batch_execute("BEGIN")
            .map_err(failed("beginning a run's transaction"))?;
        client
            .execute(
                "SELECT pg_advisory_xact_lock($1, 0)",
                &[&RUN_NUMBER_LOCK_CLASS],
            )
            .map_err(failed("numbering a run"))?;
        let number: i64 = client
            .query_one("SELECT coalesce(max(run), 0) + 1 FROM payonce.runs", &[])
            .map_err(failed("numbering a run"))?
            .get(0);
        let insert = client
            .prepare("INSERT INTO payonce.run_chunks (run, chunk, bytes) VALUES ($1, $2, $3)")
            .map_err(failed("writing a run's chunks"))?;
        Ok(PgRunOut {
            client,
            written: Arc::clone(written),
            insert,
            number,
            writer: writer.to_owned(),
            pending: Vec::with_capacity(RUN_CHUNK_LEN),
            chunks: 0,
            len: 0,
        })
    }

    /// Inserts the next chunk, `pending`'s first `len` bytes.
    fn insert_chunk(&mut self, len: usize) -> Result<(), SnapshotError> {
        let chunk: Vec<u8> = self.pending.drain(..len).collect();
        self.client
            .execute(&self.insert, &[&self.number, &self.chunks, &chunk])
            .map_err(failed("writing a run's chunks"))?;
        self.chunks += 1;
        Ok(())
    }
}

impl RunOut for PgRunOut {
    fn append(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.pending.extend_from_slice(bytes);
        self.len += bytes.len() as u64;
        while self.pending.len() >= RUN_CHUNK_LEN {
            self.insert_chunk(RUN_CHUNK_LEN)?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<u64, SnapshotError> {
        if !self.pending.is_empty() || self.chunks == 0 {
            let len = self.pending.len();
            self.insert_chunk(len)?;
        }
        let len = signed(self.len)?;
        self.client
            .execute(
                "INSERT INTO payonce.runs (run, len, chunks, written_by) VALUES ($1, $2, $3, $4)",
                &[&self.number, &len, &self.chunks, &self.writer],
            )
            .map_err(failed("writing a run's row"))?;
        // Pinned before it is committed, so that no prune takes it before
        // the writer reads it: the connection becomes its reader's.
        self.client
            .execute(
                "SELECT pg_advisory_lock_shared($1, $2)",
                &[&RUN_PIN_LOCK_CLASS, &pin_key(self.number)],
            )
            .map_err(failed("pinning a run"))?;
        self.client
            .batch_execute("COMMIT")
            .map_err(failed("committing a run"))?;
        let number = self.number.unsigned_abs();
        if let Ok(mut written) = self.written.lock() {
            written.insert(number, self.client);
        }
        Ok(number)
    }
}

/// What a run's row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunRow {
    len: u64,
    chunks: i32,
}

/// The connections pinning the runs a store wrote and has not opened yet,
/// by number: a run is opened on the connection that wrote it.
pub(crate) type Written = Arc<Mutex<HashMap<u64, Client>>>;

/// A connection pinning a run, with its chunks' query prepared.
struct Pinned {
    client: Client,
    chunks: Statement,
}

/// A run read a chunk range at a time, pinned while it is held.
pub(crate) struct PgRun {
    url: String,
    number: i64,
    row: RunRow,
    connection: Mutex<Option<Pinned>>,
}

impl std::fmt::Debug for PgRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "payonce.runs run {}", self.number)
    }
}

impl PgRun {
    /// Run `number` of the ledger at `url`, pinned: `None` if no row names
    /// it or its chunks are gone.
    pub(crate) fn open(
        url: &str,
        number: u64,
        written: &Written,
    ) -> Result<Option<Arc<PgRun>>, SnapshotError> {
        let own = written
            .lock()
            .ok()
            .and_then(|mut written| written.remove(&number));
        let number = signed(number)?;
        let pinned = match own {
            Some(client) => pin_on(client, number)?,
            None => pin(url, number)?,
        };
        let (pinned, row) = match pinned {
            Some(found) => found,
            None => return Ok(None),
        };
        Ok(Some(Arc::new(PgRun {
            url: url.to_owned(),
            number,
            row,
            connection: Mutex::new(Some(pinned)),
        })))
    }

    /// The pinned connection, made again if it was lost, and the run found
    /// as it was.
    fn connection(&self) -> Result<MutexGuard<'_, Option<Pinned>>, SnapshotError> {
        let mut held = self
            .connection
            .lock()
            .map_err(|_| runs_error("reading a run", "a reader panicked".to_owned()))?;
        if held.as_ref().is_none_or(|pinned| pinned.client.is_closed()) {
            *held = None;
            let (pinned, row) =
                pin(&self.url, self.number)?.ok_or_else(|| SnapshotError::Store {
                    detail: format!("run {} is gone from the database", self.number),
                })?;
            if row != self.row {
                return Err(SnapshotError::Store {
                    detail: format!("run {}'s row changed while it was read", self.number),
                });
            }
            *held = Some(pinned);
        }
        Ok(held)
    }

    fn read_chunks(
        &self,
        offset: u64,
        len: usize,
        into: &mut Vec<u8>,
    ) -> Result<(), SnapshotError> {
        let chunk_len = RUN_CHUNK_LEN as u64;
        let (first, last) = (offset / chunk_len, (offset + len as u64 - 1) / chunk_len);
        let range = (
            i32::try_from(first).unwrap_or(i32::MAX),
            i32::try_from(last).unwrap_or(i32::MAX),
        );
        let rows = match self.query_chunks(range) {
            // A connection lost since the last read is found lost only
            // now (its peer gone, a failover): made again, the run pinned
            // again, and asked once more.
            Err(_) => {
                self.reset();
                self.query_chunks(range)?
            }
            Ok(rows) => rows,
        };
        let mut bytes = Vec::with_capacity(rows.len() * RUN_CHUNK_LEN);
        for (expected, row) in (range.0..).zip(&rows) {
            let (chunk, part): (i32, &[u8]) = (row.get(0), row.get(1));
            if chunk != expected {
                return Err(SnapshotError::Store {
                    detail: format!("run {}: chunk {expected} missing", self.number),
                });
            }
            bytes.extend_from_slice(part);
        }
        let start = (offset - first * chunk_len) as usize;
        into.clear();
        into.extend_from_slice(bytes.get(start..start + len).unwrap_or_default());
        Ok(())
    }
}

impl PgRun {
    /// Chunks `range` of the run, in order.
    fn query_chunks(&self, range: (i32, i32)) -> Result<Vec<postgres::Row>, SnapshotError> {
        let mut held = self.connection()?;
        let Some(pinned) = held.as_mut() else {
            unreachable!("a connection was made above");
        };
        pinned
            .client
            .query(&pinned.chunks, &[&self.number, &range.0, &range.1])
            .map_err(failed("reading a run's chunks"))
    }

    /// Drops the pinned connection, so the next read makes it again.
    fn reset(&self) {
        if let Ok(mut held) = self.connection.lock() {
            *held = None;
        }
    }
}

impl RunSource for PgRun {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        if len == 0 {
            into.clear();
            return Ok(());
        }
        self.read_chunks(offset, len, into).map_err(|error| {
            RunError::read_failed(offset, len as u64, io::Error::other(error.to_string()))
        })
    }

    fn byte_len(&self) -> u64 {
        self.row.len
    }
}

/// A new connection to `url` pinning run `number`, and the run's row;
/// `None` if no row names it or no chunk is left.
fn pin(url: &str, number: i64) -> Result<Option<(Pinned, RunRow)>, SnapshotError> {
    let mut client = connect(url)
        .map_err(|error| runs_error("connecting to read a run from", error.to_string()))?;
    client
        .execute(
            "SELECT pg_advisory_lock_shared($1, $2)",
            &[&RUN_PIN_LOCK_CLASS, &pin_key(number)],
        )
        .map_err(failed("pinning a run"))?;
    pin_on(client, number)
}

/// Run `number`'s row, read on `client`, which pins it, and the
/// connection with its chunks' query prepared; `None` if no row names it
/// or no chunk is left.
fn pin_on(mut client: Client, number: i64) -> Result<Option<(Pinned, RunRow)>, SnapshotError> {
    let row = client
        .query_opt(
            "SELECT len, chunks FROM payonce.runs r WHERE run = $1 \
             AND EXISTS (SELECT 1 FROM payonce.run_chunks c WHERE c.run = r.run) \
             AND NOT EXISTS (SELECT 1 FROM payonce.run_refusals f WHERE f.run = r.run)",
            &[&number],
        )
        .map_err(failed("reading a run's row"))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let chunks = client
        .prepare(
            "SELECT chunk, bytes FROM payonce.run_chunks \
             WHERE run = $1 AND chunk BETWEEN $2 AND $3 ORDER BY chunk",
        )
        .map_err(failed("reading a run's chunks"))?;
    let row = RunRow {
        len: row.get::<_, i64>(0).unsigned_abs(),
        chunks: row.get(1),
    };
    Ok(Some((Pinned { client, chunks }, row)))
}

/// The numbers of the runs `client`'s database holds chunks of.
pub(crate) fn list(client: &mut Client) -> Result<Vec<u64>, SnapshotError> {
    let rows = client
        .query(
            "SELECT run FROM payonce.runs r \
             WHERE EXISTS (SELECT 1 FROM payonce.run_chunks c WHERE c.run = r.run) ORDER BY run",
            &[],
        )
        .map_err(failed("listing runs"))?;
    Ok(rows
        .iter()
        .map(|row| row.get::<_, i64>(0).unsigned_abs())
        .collect())
}

/// Deletes run `number`'s chunks unless a reader pins it (then a later
/// prune does); its row stays. Returns whether it was deleted.
pub(crate) fn remove(client: &mut Client, number: u64) -> Result<bool, SnapshotError> {
    let number = signed(number)?;
    let mut transaction = client.transaction().map_err(failed("pruning a run"))?;
    let free: bool = transaction
        .query_one(
            "SELECT pg_try_advisory_xact_lock($1, $2)",
            &[&RUN_PIN_LOCK_CLASS, &pin_key(number)],
        )
        .map_err(failed("pruning a run"))?
        .get(0);
    if !free {
        tracing::info!(
            run = number,
            "run pinned by a reader: its chunks stay until a later prune"
        );
        return Ok(false);
    }
    transaction
        .execute("DELETE FROM payonce.run_chunks WHERE run = $1", &[&number])
        .map_err(failed("pruning a run"))?;
    transaction.commit().map_err(failed("pruning a run"))?;
    Ok(true)
}

/// Sets run `number` of the ledger at `url` aside, by a row of
/// `payonce.run_refusals`: every snapshot naming it is set aside from
/// then on. Told in words where it cannot be written.
pub(crate) fn set_aside(url: &str, writer: &str, number: u64, error: &SnapshotError) {
    let written = signed(number).and_then(|run| {
        let mut client = connect(url)
            .map_err(|error| runs_error("connecting to set a run aside in", error.to_string()))?;
        client
            .execute(
                "INSERT INTO payonce.run_refusals (run, refused_by, detail) VALUES ($1, $2, $3) \
                 ON CONFLICT (run) DO NOTHING",
                &[&run, &writer, &error.to_string()],
            )
            .map_err(failed("setting a run aside"))
    });
    match written {
        Ok(_) => tracing::error!(run = number, %error, "set a damaged run aside"),
        Err(refusal) => {
            tracing::error!(run = number, %error, %refusal, "could not set a damaged run aside")
        }
    }
}
