//! Reading a snapshot in the database a chunk at a time, on a connection
//! of its own that pins it ([`Pinned`]): a prune deletes a snapshot's
//! chunks only once it takes the pin's lock exclusively
//! (`crate::snapshots`), so no worker's reading loses its bytes.
//!
//! An opening reads the body through a [`ChunkedFile`]. The archive after
//! it is read through a [`KeptArchive`]: each chunk is fetched when a name,
//! or the checksum pass of `payonce` run in the background, first reads
//! it, and kept. A new worker thus serves once the body and the archive's
//! fences are read, not after every byte of the archive crossed the
//! network. Once every chunk of the archive is kept, the connection, and
//! with it the pin, is closed.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use payonce::{SnapshotError, SnapshotFile};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Statement};
use tracing::{error, info};

use crate::error::describe;
use crate::schema::PIN_LOCK_CLASS;
use crate::store::connect;

/// The longest chunk a reading accepts: a snapshot is read in chunks as
/// long as its first, whatever length the build that wrote it chose
/// (16 MiB before this one), and each is held in memory whole.
pub const SNAPSHOT_CHUNK_LEN_MAX: u64 = 64 << 20;

/// A database that failed `doing` something to the snapshots: an error
/// reading, as a file's would be, so an opening leaves the snapshot in
/// place rather than set it aside (a dropped connection or a timeout says
/// nothing of the snapshot's bytes).
pub(crate) fn store_error(doing: &'static str, error: &postgres::Error) -> SnapshotError {
    SnapshotError::Io {
        op: doing,
        file: "payonce.snapshots".to_owned(),
        source: io::Error::other(describe(error)),
    }
}

/// What the row of the snapshot at `seq` says: its length in bytes and
/// its number of chunks.
pub(crate) fn row_of(client: &mut Client, seq: i64) -> Result<(u64, i32), SnapshotError> {
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

/// The key of the pin on snapshot `seq` in [`PIN_LOCK_CLASS`]: its high
/// and low words folded into one. Two snapshots may share a key, so a
/// prune may wait for a reading of another; one never has two.
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
        let mut client = connect(url).map_err(|error| SnapshotError::Io {
            op: "connecting to read a snapshot from",
            file: "payonce.snapshots".to_owned(),
            source: io::Error::other(error.to_string()),
        })?;
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

/// One snapshot's row, read on a connection of its own that pins it.
pub(crate) struct Pinned {
    url: String,
    writer: String,
    seq: i64,
    len: u64,
    chunks: i32,
    /// Bytes in every chunk but the last ([`chunk_len_of`]).
    chunk_len: u64,
    /// The connections not reading now: one for each thread that read at
    /// once, so a lookup does not wait behind the background pass.
    idle: Mutex<Vec<PinnedConnection>>,
    /// Whether every connection was closed, and the pin with them: nothing
    /// more is to be read.
    unpinned: AtomicBool,
    /// Whether a refusal of it was written: held while it is written, so a
    /// second refusal returns once the first is in the database.
    refused: Mutex<bool>,
}

impl Pinned {
    /// The snapshot at `seq` of the ledger at `url`, pinned, its row
    /// checked; refused as `writer` if its archive fails its checks.
    pub(crate) fn open(url: &str, writer: &str, seq: i64) -> Result<Pinned, SnapshotError> {
        let mut connection = PinnedConnection::open(url, seq)?;
        let (len, chunks) = row_of(&mut connection.client, seq)?;
        let chunk_len = chunk_len_of(&mut connection.client, seq, (len, chunks))?;
        Ok(Pinned {
            url: url.to_owned(),
            writer: writer.to_owned(),
            seq,
            len,
            chunks,
            chunk_len,
            idle: Mutex::new(vec![connection]),
            unpinned: AtomicBool::new(false),
            refused: Mutex::new(false),
        })
    }

    fn idle(&self) -> Result<MutexGuard<'_, Vec<PinnedConnection>>, SnapshotError> {
        self.idle.lock().map_err(|_| SnapshotError::Store {
            detail: "a thread panicked reading a snapshot".to_owned(),
        })
    }

    /// Chunks `first` to `last` from the database, in one query, each
    /// checked to be there and as long as the snapshot's length says. A
    /// connection that was lost is made again and pinned again, and the
    /// snapshot must still hold every chunk (chunks are never changed,
    /// only pruned whole).
    fn fetch(&self, first: u64, last: u64) -> Result<Vec<Chunk>, SnapshotError> {
        assert!(first <= last, "a run of chunks is read forward");
        let number = |chunk: u64| {
            i32::try_from(chunk).map_err(|_| SnapshotError::Store {
                detail: format!("chunk {chunk} is past what an integer holds"),
            })
        };
        let (from, to) = (number(first)?, number(last)?);
        let idle = self.idle()?.pop().filter(|idle| !idle.client.is_closed());
        let mut connection = match idle {
            Some(connection) => connection,
            None => self.pinned_again()?,
        };
        let fetched = self.fetch_on(&mut connection, (first, last), (from, to));
        // Checked under the lock `unpin` takes, so no connection, and no
        // pin, outlives it.
        let mut idle = self.idle()?;
        if !self.unpinned.load(Ordering::SeqCst) && !connection.client.is_closed() {
            idle.push(connection);
        }
        fetched
    }

    /// [`Pinned::fetch`] on `connection`.
    fn fetch_on(
        &self,
        connection: &mut PinnedConnection,
        (first, last): (u64, u64),
        (from, to): (i32, i32),
    ) -> Result<Vec<Chunk>, SnapshotError> {
        let failed = |error| store_error("reading a snapshot's chunks", &error);
        let end = self.len.min((last + 1).saturating_mul(self.chunk_len));
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
            let expected = (self.len - start).min(self.chunk_len);
            if bytes.len() as u64 != expected {
                return Err(SnapshotError::Length {
                    expected: self.len,
                    found: start + bytes.len() as u64,
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

    /// A new pinned connection, once the snapshot is found to hold every
    /// chunk still: a connection lost, or a second thread reading at once.
    fn pinned_again(&self) -> Result<PinnedConnection, SnapshotError> {
        let mut connection = PinnedConnection::open(&self.url, self.seq)?;
        let held: i64 = connection
            .client
            .query_one(
                "SELECT count(*) FROM payonce.snapshot_chunks WHERE seq = $1",
                &[&self.seq],
            )
            .map_err(|error| store_error("counting a snapshot's chunks", &error))?
            .get(0);
        if held != i64::from(self.chunks) {
            return Err(SnapshotError::Store {
                detail: format!(
                    "snapshot {} holds {held} of its {} chunks: pruned while its reading was cut off",
                    self.seq, self.chunks
                ),
            });
        }
        Ok(connection)
    }

    /// Closes the connections, and with them the pin.
    fn unpin(&self) -> Result<(), SnapshotError> {
        let mut idle = self.idle()?;
        self.unpinned.store(true, Ordering::SeqCst);
        idle.clear();
        Ok(())
    }

    /// Sets the snapshot aside, once, on a connection of its own: a block
    /// of its archive failed its checks after an opening believed it.
    fn refuse(&self, refusal: &SnapshotError) {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if *refused {
            return;
        }
        *refused = true;
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
            Ok(_) => error!(seq = self.seq, error = %refusal,
                "snapshot set aside (payonce.snapshot_refusals): its archive failed its checks"),
            Err(failure) => error!(seq = self.seq, error = %refusal, %failure,
                "the archive failed its checks, and the refusal could not be written"),
        }
    }
}

/// One chunk's bytes, within the run of chunks fetched with it in one
/// query: one allocation for the run, copied out of the rows (a row kept
/// would keep the connection's read buffer, and every message after it
/// would be read into fresh memory).
#[derive(Clone)]
struct Chunk {
    run: Arc<Vec<u8>>,
    at: usize,
    len: usize,
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        &self.run[self.at..self.at + self.len]
    }
}

/// A snapshot in the database as an opening reads it: each thread reading
/// it keeps the last chunk it fetched, so reading on in order fetches each
/// chunk once per thread.
pub(crate) struct ChunkedFile {
    pinned: Arc<Pinned>,
    /// By thread, the last chunk fetched.
    last: Mutex<Vec<Fetched>>,
}

/// A chunk a thread fetched: the thread, the chunk's number, its bytes.
type Fetched = (ThreadId, u64, Chunk);

impl ChunkedFile {
    pub(crate) fn new(pinned: Pinned) -> ChunkedFile {
        ChunkedFile {
            pinned: Arc::new(pinned),
            last: Mutex::new(Vec::new()),
        }
    }

    /// Chunks `first` to `last`: this thread's last chunk if it is the
    /// first of them, the rest fetched in one query; the last of them is
    /// kept as this thread's.
    fn chunks(&self, first: u64, last: u64) -> Result<Vec<Chunk>, SnapshotError> {
        let thread = std::thread::current().id();
        let poisoned = |_| SnapshotError::Store {
            detail: "a thread panicked reading a snapshot".to_owned(),
        };
        let kept = (self.last.lock().map_err(poisoned)?.iter())
            .find(|(by, at, _)| *by == thread && *at == first)
            .map(|(_, _, bytes)| bytes.clone());
        let mut chunks: Vec<Chunk> = kept.into_iter().collect();
        let from = first + chunks.len() as u64;
        if from <= last {
            chunks.extend(self.pinned.fetch(from, last)?);
        }
        let mut kept = self.last.lock().map_err(poisoned)?;
        kept.retain(|(by, _, _)| *by != thread);
        if let Some(bytes) = chunks.last() {
            kept.push((thread, last, bytes.clone()));
        }
        Ok(chunks)
    }
}

/// Appends bytes `offset` to `offset + len` (cut at `total`) of a
/// snapshot in chunks of `chunk_len` to `into`, the chunks from the first
/// to the last the bytes are in given by `chunks`.
fn read_chunks(
    (offset, len, total, chunk_len): (u64, usize, u64, u64),
    into: &mut Vec<u8>,
    chunks: impl FnOnce(u64, u64) -> Result<Vec<Chunk>, SnapshotError>,
) -> Result<(), SnapshotError> {
    let end = offset.saturating_add(len as u64).min(total);
    if offset >= end {
        return Ok(());
    }
    let first = offset / chunk_len;
    let mut at = offset;
    for chunk in chunks(first, (end - 1) / chunk_len)? {
        let bytes = chunk.bytes();
        let within = (at % chunk_len) as usize;
        let taken = (bytes.len() - within).min((end - at) as usize);
        into.extend_from_slice(&bytes[within..within + taken]);
        at += taken as u64;
    }
    assert_eq!(at, end, "every chunk of a read is read");
    Ok(())
}

impl SnapshotFile for ChunkedFile {
    fn byte_len(&self) -> u64 {
        self.pinned.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let shape = (offset, len, self.pinned.len, self.pinned.chunk_len);
        read_chunks(shape, into, |first, last| self.chunks(first, last))
    }

    fn lasting(&self, from: u64) -> Option<Arc<dyn SnapshotFile>> {
        let first = from.min(self.pinned.len) / self.pinned.chunk_len;
        let count = self.pinned.chunks.unsigned_abs() as u64;
        let kept = (first..count).map(|_| None).collect::<Vec<_>>();
        Some(Arc::new(KeptArchive {
            pinned: Arc::clone(&self.pinned),
            first,
            missing: AtomicUsize::new(kept.len()),
            kept: Mutex::new(kept),
        }))
    }
}

/// A snapshot's archive, from chunk `first` on: each chunk fetched when
/// first read and kept, the pin let go once every one is.
struct KeptArchive {
    pinned: Arc<Pinned>,
    first: u64,
    kept: Mutex<Vec<Option<Chunk>>>,
    missing: AtomicUsize,
}

impl KeptArchive {
    /// Chunks `first` to `last`: those kept, and each run of the others
    /// fetched in one query and kept.
    fn chunks(&self, first: u64, last: u64) -> Result<Vec<Chunk>, SnapshotError> {
        let poisoned = |_| SnapshotError::Store {
            detail: "a thread panicked reading a snapshot".to_owned(),
        };
        if first < self.first {
            return Err(SnapshotError::Store {
                detail: format!("chunk {first} is before the archive's, {}", self.first),
            });
        }
        let slots = (first - self.first) as usize..=(last - self.first) as usize;
        let mut found: Vec<Option<Chunk>> = {
            let kept = self.kept.lock().map_err(poisoned)?;
            let Some(kept) = kept.get(slots.clone()) else {
                unreachable!("a read ends within the snapshot, so within its chunks")
            };
            kept.to_vec()
        };
        // Each run of missing chunks fetched without the lock, so kept
        // ones are read meanwhile.
        let mut at = 0;
        while at < found.len() {
            if found[at].is_some() {
                at += 1;
                continue;
            }
            let run = found[at..]
                .iter()
                .take_while(|chunk| chunk.is_none())
                .count();
            let fetched = self
                .pinned
                .fetch(first + at as u64, first + (at + run - 1) as u64)?;
            for (place, chunk) in found[at..at + run].iter_mut().zip(fetched) {
                *place = Some(chunk);
            }
            self.keep(*slots.start() + at, &found[at..at + run])?;
            at += run;
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// Keeps `chunks`, from slot `from` on; lets the pin go once every
    /// chunk of the archive is kept.
    fn keep(&self, from: usize, chunks: &[Option<Chunk>]) -> Result<(), SnapshotError> {
        let poisoned = |_| SnapshotError::Store {
            detail: "a thread panicked reading a snapshot".to_owned(),
        };
        let mut kept = self.kept.lock().map_err(poisoned)?;
        let mut newly = 0;
        for (place, bytes) in kept[from..from + chunks.len()].iter_mut().zip(chunks) {
            if place.is_none() {
                place.clone_from(bytes);
                newly += 1;
            }
        }
        if newly > 0 && self.missing.fetch_sub(newly, Ordering::SeqCst) == newly {
            drop(kept);
            info!(
                seq = self.pinned.seq,
                "every chunk of the archive kept: the snapshot is unpinned"
            );
            self.pinned.unpin()?;
        }
        Ok(())
    }
}

impl SnapshotFile for KeptArchive {
    fn byte_len(&self) -> u64 {
        self.pinned.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let shape = (offset, len, self.pinned.len, self.pinned.chunk_len);
        read_chunks(shape, into, |first, last| self.chunks(first, last))
    }

    fn checked_in_background(&self) -> bool {
        true
    }

    fn refuse(&self, error: &SnapshotError) {
        self.pinned.refuse(error);
    }
}
