//! Snapshots of the projections in the database: [`PgSnapshots`], the
//! `payonce::SnapshotStore` of a PostgreSQL ledger (docs/postgres.md,
//! "Snapshots"). A snapshot is a row of `payonce.snapshots` (its seq,
//! head digest, length and chunk count, who wrote it, when) and its bytes
//! in `payonce.snapshot_chunks`, written in one transaction on a
//! connection of its own, never under the ledger-wide lock, so taking one
//! does not hold up any worker's batch. Rows are never updated or deleted;
//! the chunks of all but the newest two are pruned. A snapshot an opening
//! refused is set aside by a row of `payonce.snapshot_refusals`.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use payonce::{
    SNAPSHOT_LEN_MAX, SnapshotError, SnapshotFile, SnapshotStore, StoredSnapshot, snapshots,
};
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use crate::error::describe;
use crate::redacted;
use crate::store::connect;

/// Bytes per row of `payonce.snapshot_chunks` this build writes: far
/// below the 1 GB a `bytea` holds, so a snapshot is written and read a
/// chunk at a time. 4 MiB, where chunks of 16 MiB made a new worker's
/// first decision at 10M withdrawals 1 s slower (docs/performance.md):
/// the server's and the worker's buffers for a chunk that size were fresh
/// memory each time.
pub const SNAPSHOT_CHUNK_LEN: usize = 4 << 20;

/// The longest chunk a reading accepts: a snapshot is read in chunks as
/// long as its first, whatever length the build that wrote it chose
/// (16 MiB before this one), and each is held in memory whole.
pub const SNAPSHOT_CHUNK_LEN_MAX: u64 = 64 << 20;

/// The snapshots of the PostgreSQL ledger at a URL, on a connection of their
/// own.
pub struct PgSnapshots {
    url: String,
    shown: String,
    writer: String,
    client: Mutex<Client>,
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

/// A database that failed `doing` something to the snapshots: an error
/// reading, as a file's would be, so an opening leaves the snapshot in
/// place rather than set it aside (a dropped connection or a timeout says
/// nothing of the snapshot's bytes).
fn store_error(doing: &'static str, error: &postgres::Error) -> SnapshotError {
    SnapshotError::Io {
        op: doing,
        file: "payonce.snapshots".to_owned(),
        source: io::Error::other(describe(error)),
    }
}

/// What the row of the snapshot at `seq` says: its length in bytes and
/// its number of chunks.
fn row_of(client: &mut Client, seq: i64) -> Result<(u64, i32), SnapshotError> {
    let row = client
        .query_one(
            "SELECT len, chunks FROM payonce.snapshots WHERE seq = $1",
            &[&seq],
        )
        .map_err(|error| store_error("reading a snapshot's row", &error))?;
    let (len, chunks): (i64, i32) = (row.get(0), row.get(1));
    Ok((len.unsigned_abs(), chunks))
}

/// The length of every chunk of the snapshot at `seq` but its last: its
/// first chunk's, which must be between 1 byte and
/// [`SNAPSHOT_CHUNK_LEN_MAX`] and leave the `chunks` its row counts for
/// its `len` bytes. Read without fetching the chunk's bytes.
fn chunk_len_of(
    client: &mut Client,
    seq: i64,
    (len, chunks): (u64, i32),
) -> Result<u64, SnapshotError> {
    let row = client
        .query_opt(
            "SELECT octet_length(bytes) FROM payonce.snapshot_chunks WHERE seq = $1 AND chunk = 0",
            &[&seq],
        )
        .map_err(|error| store_error("reading a snapshot's first chunk", &error))?;
    let Some(row) = row else {
        return Err(SnapshotError::Store {
            detail: format!("chunk 0 of snapshot {seq} is missing"),
        });
    };
    let chunk_len = u64::from(row.get::<_, i32>(0).unsigned_abs());
    if chunk_len == 0 || chunk_len > SNAPSHOT_CHUNK_LEN_MAX {
        return Err(SnapshotError::Store {
            detail: format!(
                "chunk 0 of snapshot {seq} holds {chunk_len} bytes, where a chunk holds from 1 to \
                 {SNAPSHOT_CHUNK_LEN_MAX} (SNAPSHOT_CHUNK_LEN_MAX)"
            ),
        });
    }
    let needed = len.div_ceil(chunk_len).max(1);
    if i64::from(chunks) != needed as i64 {
        return Err(SnapshotError::Store {
            detail: format!(
                "{chunks} chunks where a length of {len} bytes in chunks of {chunk_len} needs {needed}"
            ),
        });
    }
    Ok(chunk_len)
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
        let (len, chunks) = row_of(&mut client, seq)?;
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

    fn open(
        &self,
        snapshot: &StoredSnapshot,
    ) -> Result<Option<Box<dyn SnapshotFile + '_>>, SnapshotError> {
        let seq = signed(snapshot.seq)?;
        let mut client = self.client()?;
        let (len, chunks) = row_of(&mut client, seq)?;
        let chunk_len = chunk_len_of(&mut client, seq, (len, chunks))?;
        Ok(Some(Box::new(ChunkedFile {
            store: self,
            seq,
            len,
            chunk_len,
            last: Mutex::new(Vec::new()),
        })))
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
            for (chunk, part) in (0i32..).zip(chunks) {
                transaction
                    .execute(
                        "INSERT INTO payonce.snapshot_chunks (seq, chunk, bytes) VALUES ($1, $2, $3)",
                        &[&row, &chunk, &part],
                    )
                    .map_err(|error| store_error("inserting a snapshot's chunk", &error))?;
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

/// A snapshot in the database, read a chunk at a time: each thread reading
/// it keeps the last chunk it fetched, so reading on in order fetches each
/// chunk once per thread.
struct ChunkedFile<'a> {
    store: &'a PgSnapshots,
    seq: i64,
    len: u64,
    /// Bytes in every chunk but the last ([`chunk_len_of`]).
    chunk_len: u64,
    /// By thread, the last chunk fetched.
    last: Mutex<Vec<Fetched>>,
}

/// A chunk a thread fetched: the thread, the chunk's number, its bytes.
/// Copied out of the row: a row kept would keep the connection's read
/// buffer, and every message after it would be read into fresh memory.
type Fetched = (ThreadId, u64, Arc<Vec<u8>>);

impl ChunkedFile<'_> {
    /// Chunk `chunk`'s bytes: this thread's last, or fetched.
    fn chunk(&self, chunk: u64) -> Result<Arc<Vec<u8>>, SnapshotError> {
        let thread = std::thread::current().id();
        let poisoned = |_| SnapshotError::Store {
            detail: "a thread panicked reading a snapshot".to_owned(),
        };
        let kept = (self.last.lock().map_err(poisoned)?.iter())
            .find(|(by, at, _)| *by == thread && *at == chunk)
            .map(|(_, _, bytes)| bytes.clone());
        if let Some(bytes) = kept {
            return Ok(bytes);
        }
        let bytes = Arc::new(self.fetch(chunk)?);
        let mut last = self.last.lock().map_err(poisoned)?;
        last.retain(|(by, _, _)| *by != thread);
        last.push((thread, chunk, bytes.clone()));
        Ok(bytes)
    }

    /// Chunk `chunk` from the database, checked to be as long as the
    /// snapshot's length says.
    fn fetch(&self, chunk: u64) -> Result<Vec<u8>, SnapshotError> {
        let number = i32::try_from(chunk).map_err(|_| SnapshotError::Store {
            detail: format!("chunk {chunk} is past what an integer holds"),
        })?;
        let row = (self.store.client()?)
            .query_opt(
                "SELECT bytes FROM payonce.snapshot_chunks WHERE seq = $1 AND chunk = $2",
                &[&self.seq, &number],
            )
            .map_err(|error| store_error("reading a snapshot's chunk", &error))?;
        let Some(row) = row else {
            return Err(SnapshotError::Store {
                detail: format!("chunk {chunk} of snapshot {} is missing", self.seq),
            });
        };
        let bytes: Vec<u8> = row.get(0);
        let start = chunk * self.chunk_len;
        let expected = (self.len - start).min(self.chunk_len);
        if bytes.len() as u64 != expected {
            return Err(SnapshotError::Length {
                expected: self.len,
                found: start + bytes.len() as u64,
            });
        }
        Ok(bytes)
    }
}

impl SnapshotFile for ChunkedFile<'_> {
    fn byte_len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let end = offset.saturating_add(len as u64).min(self.len);
        let mut at = offset;
        while at < end {
            let chunk = at / self.chunk_len;
            let bytes = self.chunk(chunk)?;
            let within = (at % self.chunk_len) as usize;
            let taken = (bytes.len() - within).min((end - at) as usize);
            into.extend_from_slice(&bytes[within..within + taken]);
            at += taken as u64;
        }
        Ok(())
    }
}
