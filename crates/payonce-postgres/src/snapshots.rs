//! Snapshots of the projections in the database: [`PgSnapshots`], the
//! `payonce::SnapshotStore` of a PostgreSQL ledger (docs/postgres.md,
//! "Snapshots"). A snapshot is a row of `payonce.snapshots` (its seq,
//! head digest, length and chunk count, who wrote it, when) and its bytes
//! (the live part of the state and the manifest naming its runs) in
//! `payonce.snapshot_chunks`, written in one transaction on a connection of
//! its own, never under the ledger-wide lock, so taking one does not hold
//! up any worker's batch. Rows are never updated or deleted; the chunks of
//! all but the newest two are pruned. A snapshot an opening refused is set
//! aside by a row of `payonce.snapshot_refusals`. The runs of settled pairs
//! its manifest names are `crate::runs`'.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use payonce::{
    RunOut, RunStore, SNAPSHOT_LEN_MAX, SnapshotError, SnapshotStore, StoredSnapshot, snapshots,
};
use payonce_runs::RunSource;
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use crate::error::describe;
use crate::redacted;
use crate::runs::{PgRun, PgRunOut, Written};
use crate::store::connect;

/// Bytes per row of `payonce.snapshot_chunks` this build writes: far
/// below the 1 GB a `bytea` holds, so a snapshot is written a chunk at a
/// time.
pub const SNAPSHOT_CHUNK_LEN: usize = 64 << 10;

/// A failure `doing` something that says nothing of the snapshot.
pub(crate) fn store_error(doing: &'static str, error: &postgres::Error) -> SnapshotError {
    SnapshotError::Io {
        op: doing,
        file: "payonce.snapshots".to_owned(),
        source: io::Error::other(describe(error)),
    }
}

/// What the row of a snapshot says: its length in bytes and its number of
/// chunks.
struct SnapshotRow {
    len: u64,
    chunks: i32,
}

/// The row of the snapshot at `seq`.
fn row_of(client: &mut Client, seq: i64) -> Result<SnapshotRow, SnapshotError> {
    let row = client
        .query_one(
            "SELECT len, chunks FROM payonce.snapshots WHERE seq = $1",
            &[&seq],
        )
        .map_err(|error| store_error("reading a snapshot's row", &error))?;
    let (len, chunks): (i64, i32) = (row.get(0), row.get(1));
    Ok(SnapshotRow {
        len: len.unsigned_abs(),
        chunks,
    })
}

/// The snapshots of the PostgreSQL ledger at a URL, on a connection of their
/// own.
pub struct PgSnapshots {
    url: String,
    shown: String,
    writer: String,
    client: Mutex<Client>,
    /// The runs written and not opened yet, pinned by their writers'
    /// connections.
    written: Written,
}

impl std::fmt::Debug for PgSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgSnapshots({})", self.shown)
    }
}

impl PgSnapshots {
    /// The snapshots of the ledger at `url`, written as `writer` (a worker's
    /// name, or an operator's command).
    pub fn connect(url: &str, writer: &str) -> Result<PgSnapshots, payonce::StoreError> {
        Ok(PgSnapshots {
            url: url.to_owned(),
            shown: redacted(url),
            writer: writer.to_owned(),
            client: Mutex::new(connect(url)?),
            written: Written::default(),
        })
    }

    /// The snapshots' connection, made again (to whichever host takes
    /// writes: after a failover, the promoted standby) if it was lost.
    fn client(&self) -> Result<MutexGuard<'_, Client>, SnapshotError> {
        let mut client = self.client.lock().map_err(|_| SnapshotError::Io {
            op: "taking the snapshots' connection",
            file: self.shown.clone(),
            source: io::Error::other("a thread panicked with it"),
        })?;
        if client.is_closed() {
            *client = connect(&self.url).map_err(|error| SnapshotError::Io {
                op: "connecting again for snapshots to",
                file: self.shown.clone(),
                source: io::Error::other(error.to_string()),
            })?;
        }
        Ok(client)
    }

    fn name(seq: u64) -> String {
        format!("payonce.snapshots seq {seq}")
    }
}

/// A seq as the database keeps it.
fn signed(seq: u64) -> Result<i64, SnapshotError> {
    i64::try_from(seq).map_err(|_| SnapshotError::Store {
        detail: format!("seq {seq} is past what a bigint holds"),
    })
}

impl SnapshotStore for PgSnapshots {
    fn list(&self) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        let rows = self
            .client()?
            .query(
                "SELECT s.seq FROM payonce.snapshots s \
                 WHERE NOT EXISTS (SELECT 1 FROM payonce.snapshot_refusals r WHERE r.seq = s.seq) \
                   AND EXISTS (SELECT 1 FROM payonce.snapshot_chunks c WHERE c.seq = s.seq) \
                 ORDER BY s.seq DESC",
                &[],
            )
            .map_err(|error| store_error("listing snapshots", &error))?;
        Ok(rows
            .iter()
            .map(|row| {
                let seq = row.get::<_, i64>(0).unsigned_abs();
                StoredSnapshot {
                    seq,
                    name: PgSnapshots::name(seq),
                }
            })
            .collect())
    }

    fn read(&self, snapshot: &StoredSnapshot) -> Result<Vec<u8>, SnapshotError> {
        let mut client = self.client()?;
        let seq = signed(snapshot.seq)?;
        let row = row_of(&mut client, seq)?;
        let (len, chunks) = (row.len, row.chunks);
        if len > SNAPSHOT_LEN_MAX {
            return Err(SnapshotError::TooLong {
                len,
                max: SNAPSHOT_LEN_MAX,
            });
        }
        // Row by row, so only the snapshot's bytes are held, not every
        // row beside them.
        let mut rows = client
            .query_raw(
                "SELECT chunk, bytes FROM payonce.snapshot_chunks WHERE seq = $1 ORDER BY chunk",
                [seq],
            )
            .map_err(|error| store_error("reading a snapshot's chunks", &error))?;
        let mut bytes = Vec::new();
        let mut read = 0i32;
        while let Some(row) = rows
            .next()
            .map_err(|error| store_error("reading a snapshot's chunks", &error))?
        {
            let (chunk, part): (i32, &[u8]) = (row.get(0), row.get(1));
            if chunk != read || bytes.len() as u64 + part.len() as u64 > len {
                return Err(SnapshotError::Length {
                    expected: len,
                    found: bytes.len() as u64 + part.len() as u64,
                });
            }
            bytes.extend_from_slice(part);
            read += 1;
        }
        if read != chunks {
            return Err(SnapshotError::Store {
                detail: format!("{read} chunks where the row says {chunks}"),
            });
        }
        Ok(bytes)
    }

    fn write(&self, seq: u64, bytes: &[u8]) -> Result<StoredSnapshot, SnapshotError> {
        let info = snapshots::info(bytes)?;
        assert_eq!(info.seq, seq, "a snapshot is stored under its own seq");
        let chunks = bytes.chunks(SNAPSHOT_CHUNK_LEN);
        let count = i32::try_from(chunks.len()).map_err(|_| SnapshotError::TooLong {
            len: bytes.len() as u64,
            max: SNAPSHOT_CHUNK_LEN as u64 * i32::MAX as u64,
        })?;
        let mut client = self.client()?;
        let mut transaction = client
            .transaction()
            .map_err(|error| store_error("beginning a snapshot's transaction", &error))?;
        let row = signed(seq)?;
        let inserted = transaction
            .execute(
                "INSERT INTO payonce.snapshots (seq, digest, format_version, len, chunks, written_by) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (seq) DO NOTHING",
                &[
                    &row,
                    &&info.head.digest.0[..],
                    &i32::try_from(payonce::SNAPSHOT_FORMAT_VERSION).unwrap_or(i32::MAX),
                    &(bytes.len() as i64),
                    &count,
                    &self.writer,
                ],
            )
            .map_err(|error| store_error("inserting a snapshot's row", &error))?;
        if inserted == 1 {
            let failed = |error| store_error("inserting a snapshot's chunk", &error);
            let insert = transaction
                .prepare(
                    "INSERT INTO payonce.snapshot_chunks (seq, chunk, bytes) VALUES ($1, $2, $3)",
                )
                .map_err(failed)?;
            for (chunk, part) in (0i32..).zip(chunks) {
                transaction
                    .execute(&insert, &[&row, &chunk, &part])
                    .map_err(failed)?;
            }
        }
        // A snapshot of this seq another worker wrote first is the same
        // state: one is enough.
        transaction
            .commit()
            .map_err(|error| store_error("committing a snapshot", &error))?;
        Ok(StoredSnapshot {
            seq,
            name: PgSnapshots::name(seq),
        })
    }

    fn set_aside(&self, snapshot: &StoredSnapshot) -> Result<String, SnapshotError> {
        self.client()?
            .execute(
                "INSERT INTO payonce.snapshot_refusals (seq, refused_by) VALUES ($1, $2) \
                 ON CONFLICT (seq) DO NOTHING",
                &[&signed(snapshot.seq)?, &self.writer],
            )
            .map_err(|error| store_error("setting a snapshot aside", &error))?;
        Ok(format!(
            "{} (refused: payonce.snapshot_refusals)",
            snapshot.name
        ))
    }

    fn prune(&self, kept: usize) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        let old: Vec<StoredSnapshot> = self.list()?.into_iter().skip(kept).collect();
        let mut client = self.client()?;
        for snapshot in &old {
            client
                .execute(
                    // The two snapshots of highest seq keep their chunks
                    // whatever the table's trigger is asked.
                    "DELETE FROM payonce.snapshot_chunks WHERE seq = $1 AND seq < ( \
                         SELECT min(seq) FROM ( \
                             SELECT seq FROM payonce.snapshots ORDER BY seq DESC LIMIT 2) newest)",
                    &[&signed(snapshot.seq)?],
                )
                .map_err(|error| store_error("pruning a snapshot's chunks", &error))?;
        }
        Ok(old)
    }
}

impl RunStore for PgSnapshots {
    fn create_run(&self) -> Result<Box<dyn RunOut + '_>, SnapshotError> {
        Ok(Box::new(PgRunOut::begin(
            &self.url,
            &self.writer,
            &self.written,
        )?))
    }

    fn open_run(&self, number: u64) -> Result<Arc<dyn RunSource>, SnapshotError> {
        match PgRun::open(&self.url, number, &self.written)? {
            Some(run) => Ok(run),
            None => Err(SnapshotError::Store {
                detail: format!("run {number}, which the manifest names, is not in the database"),
            }),
        }
    }

    fn list_runs(&self) -> Result<Vec<u64>, SnapshotError> {
        crate::runs::list(&mut *self.client()?)
    }

    fn remove_run(&self, number: u64) -> Result<(), SnapshotError> {
        crate::runs::remove(&mut *self.client()?, number).map(drop)
    }

    fn checked_in_background(&self) -> bool {
        true
    }

    fn aside_hook(&self, number: u64) -> Option<payonce::SetRunAside> {
        let (url, writer) = (self.url.clone(), self.writer.clone());
        Some(Arc::new(move |error: &SnapshotError| {
            crate::runs::set_aside(&url, &writer, number, error);
        }))
    }
}
