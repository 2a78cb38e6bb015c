//! A snapshot in the database, pinned while a worker reads it: each of a
//! few connections ([`PINNED_CONNECTIONS_MAX`]) holds a shared advisory
//! lock on it ([`PIN_LOCK_CLASS`]), and a prune deletes a snapshot's
//! chunks only if it takes that lock exclusively (`crate::snapshots`), so
//! no worker's reading loses its bytes. [`Pinned`] fetches runs of chunks
//! on these connections, each run one prepared query.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use payonce::SnapshotError;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Statement};
use tracing::{error, warn};

use crate::error::describe;
use crate::schema::PIN_LOCK_CLASS;
use crate::store::connect;

/// The longest chunk a reading accepts: a snapshot is read in chunks as
/// long as its first, whatever length the build that wrote it chose (4 MiB
/// before this one, 16 MiB before that), and each is held in memory whole.
pub const SNAPSHOT_CHUNK_LEN_MAX: u64 = 64 << 20;

/// The most connections a reading of one snapshot holds at once: the
/// background pass, lookups beside it, and the threads reading a body.
/// A thread finding them all busy waits for one.
pub const PINNED_CONNECTIONS_MAX: usize = 4;

/// A database that failed `doing` something to the snapshots: an error
/// reading, as a file's would be, so an opening leaves the snapshot in
/// place rather than set it aside (a dropped connection or a timeout says
/// nothing of the snapshot's bytes).
pub(crate) fn store_error(doing: &'static str, error: &postgres::Error) -> SnapshotError {
    io_error(doing, describe(error))
}

/// A failure `doing` something that says nothing of the snapshot.
fn io_error(doing: &'static str, detail: String) -> SnapshotError {
    SnapshotError::Io {
        op: doing,
        file: "payonce.snapshots".to_owned(),
        source: io::Error::other(detail),
    }
}

/// What the row of a snapshot says: its length in bytes, its number of
/// chunks, and the digest of the head it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotRow {
    pub(crate) len: u64,
    pub(crate) chunks: i32,
    digest: Vec<u8>,
}

/// The row of the snapshot at `seq`.
pub(crate) fn row_of(client: &mut Client, seq: i64) -> Result<SnapshotRow, SnapshotError> {
    let row = client
        .query_one(
            "SELECT len, chunks, digest FROM payonce.snapshots WHERE seq = $1",
            &[&seq],
        )
        .map_err(|error| store_error("reading a snapshot's row", &error))?;
    let (len, chunks, digest): (i64, i32, Vec<u8>) = (row.get(0), row.get(1), row.get(2));
    Ok(SnapshotRow {
        len: len.unsigned_abs(),
        chunks,
        digest,
    })
}

/// The length of every chunk of the snapshot at `seq` but its last: its
/// first chunk's, which must be between 1 byte and
/// [`SNAPSHOT_CHUNK_LEN_MAX`] and leave the chunks its row counts for its
/// length. Read without fetching the chunk's bytes.
fn chunk_len_of(client: &mut Client, seq: i64, row: &SnapshotRow) -> Result<u64, SnapshotError> {
    let found = client
        .query_opt(
            "SELECT octet_length(bytes) FROM payonce.snapshot_chunks WHERE seq = $1 AND chunk = 0",
            &[&seq],
        )
        .map_err(|error| store_error("reading a snapshot's first chunk", &error))?;
    let Some(found) = found else {
        return Err(SnapshotError::Store {
            detail: format!("chunk 0 of snapshot {seq} is missing"),
        });
    };
    let chunk_len = u64::from(found.get::<_, i32>(0).unsigned_abs());
    if chunk_len == 0 || chunk_len > SNAPSHOT_CHUNK_LEN_MAX {
        return Err(SnapshotError::Store {
            detail: format!(
                "chunk 0 of snapshot {seq} holds {chunk_len} bytes, where a chunk holds from 1 to \
                 {SNAPSHOT_CHUNK_LEN_MAX} (SNAPSHOT_CHUNK_LEN_MAX)"
            ),
        });
    }
    let (len, chunks) = (row.len, row.chunks);
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

/// The key of the pin on snapshot `seq` in [`PIN_LOCK_CLASS`]: its high
/// and low words folded into one. Two snapshots may share a key, so a
/// prune may leave one for later while a reading pins the other; one
/// never has two.
pub(crate) fn pin_key(seq: i64) -> i32 {
    (seq ^ (seq >> 32)) as i32
}

/// The query that reads a run of a snapshot's chunks.
const CHUNKS_QUERY: &str = "SELECT chunk, bytes FROM payonce.snapshot_chunks \
     WHERE seq = $1 AND chunk BETWEEN $2 AND $3 ORDER BY chunk";

/// A connection on which a snapshot is pinned (a shared advisory lock,
/// held until the connection closes), with [`CHUNKS_QUERY`] prepared on
/// it.
struct PinnedConnection {
    client: Client,
    chunks: Statement,
}

impl PinnedConnection {
    /// A new connection to `url` pinning snapshot `seq`.
    fn open(url: &str, seq: i64) -> Result<PinnedConnection, SnapshotError> {
        let mut client = connect(url)
            .map_err(|error| io_error("connecting to read a snapshot from", error.to_string()))?;
        client
            .execute(
                "SELECT pg_advisory_lock_shared($1, $2)",
                &[&PIN_LOCK_CLASS, &pin_key(seq)],
            )
            .map_err(|error| store_error("pinning a snapshot", &error))?;
        let chunks = client
            .prepare(CHUNKS_QUERY)
            .map_err(|error| store_error("preparing to read a snapshot", &error))?;
        Ok(PinnedConnection { client, chunks })
    }
}

/// The connections of a reading.
struct Pool {
    idle: Vec<PinnedConnection>,
    /// Connections open, idle or reading.
    open: usize,
    /// Whether every connection was closed, and the pin with them: nothing
    /// more is to be read.
    unpinned: bool,
}

/// One chunk's bytes, within the run of chunks fetched with it in one
/// query: one allocation for the run, copied out of the rows (a row kept
/// would keep the connection's read buffer, and every message after it
/// would be read into fresh memory).
#[derive(Clone)]
pub(crate) struct Chunk {
    run: Arc<Vec<u8>>,
    at: usize,
    len: usize,
}

impl Chunk {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.run[self.at..self.at + self.len]
    }

    /// Its bytes alone, without the rest of its run.
    pub(crate) fn alone(&self) -> Chunk {
        Chunk {
            run: Arc::new(self.bytes().to_vec()),
            at: 0,
            len: self.len,
        }
    }
}

/// One snapshot's row and its pinned connections.
pub(crate) struct Pinned {
    url: String,
    writer: String,
    pub(crate) seq: i64,
    pub(crate) row: SnapshotRow,
    /// Bytes in every chunk but the last ([`chunk_len_of`]).
    pub(crate) chunk_len: u64,
    pool: Mutex<Pool>,
    /// Signalled when a connection is given back.
    given_back: Condvar,
    /// Whether a refusal of it is in the database: held while it is
    /// written, so a second refusal returns once the first is there.
    refused: Mutex<bool>,
    /// Whether a failure to write the refusal was logged.
    refusal_failed: AtomicBool,
}

impl Pinned {
    /// The snapshot at `seq` of the ledger at `url`, pinned, its row
    /// checked; refused as `writer` if its archive fails its checks.
    pub(crate) fn open(url: &str, writer: &str, seq: i64) -> Result<Pinned, SnapshotError> {
        let mut connection = PinnedConnection::open(url, seq)?;
        let row = row_of(&mut connection.client, seq)?;
        let chunk_len = chunk_len_of(&mut connection.client, seq, &row)?;
        Ok(Pinned {
            url: url.to_owned(),
            writer: writer.to_owned(),
            seq,
            row,
            chunk_len,
            pool: Mutex::new(Pool {
                idle: vec![connection],
                open: 1,
                unpinned: false,
            }),
            given_back: Condvar::new(),
            refused: Mutex::new(false),
            refusal_failed: AtomicBool::new(false),
        })
    }

    fn pool(&self) -> Result<MutexGuard<'_, Pool>, SnapshotError> {
        self.pool.lock().map_err(|_| {
            io_error(
                "reading a snapshot",
                "a thread panicked reading it".to_owned(),
            )
        })
    }

    /// Chunks `first` to `last` from the database, in one query, each
    /// checked to be there and as long as the snapshot's length says. A
    /// connection found lost is made again, pinned again, and the query
    /// asked once more.
    pub(crate) fn fetch(&self, first: u64, last: u64) -> Result<Vec<Chunk>, SnapshotError> {
        assert!(first <= last, "a run of chunks is read forward");
        let number = |chunk: u64| {
            i32::try_from(chunk).map_err(|_| SnapshotError::Store {
                detail: format!("chunk {chunk} is past what an integer holds"),
            })
        };
        let range = (number(first)?, number(last)?);
        let mut connection = self.take()?;
        let mut fetched = self.fetch_on(&mut connection, (first, last), range);
        if fetched.is_err() && connection.client.is_closed() {
            warn!(
                seq = self.seq,
                "a snapshot's reading lost its connection: connecting again"
            );
            self.give_back(None)?;
            connection = self.take()?;
            fetched = self.fetch_on(&mut connection, (first, last), range);
        }
        let kept = (!connection.client.is_closed()).then_some(connection);
        self.give_back(kept)?;
        fetched
    }

    /// An idle connection, a new one if fewer than
    /// [`PINNED_CONNECTIONS_MAX`] are open, or the next one given back.
    fn take(&self) -> Result<PinnedConnection, SnapshotError> {
        let mut pool = self.pool()?;
        loop {
            if let Some(connection) = pool.idle.pop() {
                if !connection.client.is_closed() {
                    return Ok(connection);
                }
                pool.open -= 1;
                continue;
            }
            if pool.open < PINNED_CONNECTIONS_MAX {
                pool.open += 1;
                drop(pool);
                let opened = self.pinned_again();
                if opened.is_err() {
                    self.give_back(None)?;
                }
                return opened;
            }
            pool = self.given_back.wait(pool).map_err(|_| {
                io_error(
                    "reading a snapshot",
                    "a thread panicked reading it".to_owned(),
                )
            })?;
        }
    }

    /// Gives a connection taken back, or counts one closed (`None`). Once
    /// the reading is unpinned, no connection is kept.
    fn give_back(&self, connection: Option<PinnedConnection>) -> Result<(), SnapshotError> {
        let mut pool = self.pool()?;
        match connection {
            Some(connection) if !pool.unpinned => pool.idle.push(connection),
            _ => pool.open -= 1,
        }
        self.given_back.notify_one();
        Ok(())
    }

    /// [`Pinned::fetch`] on `connection`.
    fn fetch_on(
        &self,
        connection: &mut PinnedConnection,
        (first, last): (u64, u64),
        (from, to): (i32, i32),
    ) -> Result<Vec<Chunk>, SnapshotError> {
        let failed = |error| store_error("reading a snapshot's chunks", &error);
        let len = self.row.len;
        let end = len.min((last + 1).saturating_mul(self.chunk_len));
        let mut run = Vec::with_capacity(end.saturating_sub(first * self.chunk_len) as usize);
        let mut places = Vec::new();
        let mut rows = connection
            .client
            .query_raw(
                &connection.chunks,
                [&self.seq as &dyn postgres::types::ToSql, &from, &to],
            )
            .map_err(failed)?;
        let mut wanted = first;
        while let Some(row) = rows.next().map_err(failed)? {
            let (chunk, bytes): (i32, &[u8]) = (row.get(0), row.get(1));
            if i64::from(chunk) != wanted as i64 {
                break;
            }
            let start = wanted * self.chunk_len;
            let expected = (len - start).min(self.chunk_len);
            if bytes.len() as u64 != expected {
                let found = start + bytes.len() as u64;
                return Err(SnapshotError::Length {
                    expected: len,
                    found,
                });
            }
            places.push((run.len(), bytes.len()));
            run.extend_from_slice(bytes);
            wanted += 1;
        }
        if wanted <= last {
            return Err(SnapshotError::Store {
                detail: format!("chunk {wanted} of snapshot {} is missing", self.seq),
            });
        }
        let run = Arc::new(run);
        let chunk = |(at, len)| Chunk {
            run: Arc::clone(&run),
            at,
            len,
        };
        Ok(places.into_iter().map(chunk).collect())
    }

    /// A new pinned connection, once the snapshot's row is found as it was
    /// and holding every chunk still: a connection lost, or one more
    /// thread reading at once. A row changed or chunks gone (pruned while
    /// the pin was lost, or a failover to a server that holds another
    /// snapshot of that seq) fail as a reading does, never as damage.
    fn pinned_again(&self) -> Result<PinnedConnection, SnapshotError> {
        let mut connection = PinnedConnection::open(&self.url, self.seq)?;
        let row = row_of(&mut connection.client, self.seq)?;
        let held: i64 = connection
            .client
            .query_one(
                "SELECT count(*) FROM payonce.snapshot_chunks WHERE seq = $1",
                &[&self.seq],
            )
            .map_err(|error| store_error("counting a snapshot's chunks", &error))?
            .get(0);
        if row != self.row || held != i64::from(self.row.chunks) {
            let detail = format!(
                "snapshot {} holds {held} of its {} chunks, its row {}: pruned or replaced while \
                 its reading was cut off",
                self.seq,
                self.row.chunks,
                if row == self.row {
                    "as it was"
                } else {
                    "changed"
                }
            );
            return Err(io_error("pinning a snapshot again", detail));
        }
        Ok(connection)
    }

    /// Closes the connections, and with them the pin.
    pub(crate) fn unpin(&self) -> Result<(), SnapshotError> {
        let mut pool = self.pool()?;
        pool.unpinned = true;
        pool.open -= pool.idle.len();
        pool.idle.clear();
        Ok(())
    }

    /// Sets the snapshot aside, on a connection of its own, unless a
    /// refusal of it is in the database already: a block of its archive
    /// failed its checks after an opening believed it. A refusal that
    /// could not be written is tried again at the next failure.
    pub(crate) fn refuse(&self, refusal: &SnapshotError) {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if *refused {
            return;
        }
        let written = connect(&self.url)
            .map_err(|error| error.to_string())
            .and_then(|mut client| {
                client
                    .execute(
                        "INSERT INTO payonce.snapshot_refusals (seq, refused_by) VALUES ($1, $2) \
                         ON CONFLICT (seq) DO NOTHING",
                        &[&self.seq, &self.writer],
                    )
                    .map_err(|error| describe(&error))
            });
        match written {
            Ok(_) => {
                *refused = true;
                error!(seq = self.seq, error = %refusal,
                    "snapshot set aside (payonce.snapshot_refusals): its archive failed its checks");
            }
            Err(failure) if !self.refusal_failed.swap(true, Ordering::SeqCst) => {
                error!(seq = self.seq, error = %refusal, %failure,
                    "the archive failed its checks, and the refusal could not be written");
            }
            Err(_) => {}
        }
    }
}
