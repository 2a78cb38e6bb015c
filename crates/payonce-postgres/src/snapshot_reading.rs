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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use payonce::{SnapshotError, SnapshotFile};
use postgres::Client;
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

/// A connection on which `seq` is pinned: a shared advisory lock, held
/// until the connection closes.
fn pinned_client(url: &str, seq: i64) -> Result<Client, SnapshotError> {
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
    Ok(client)
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
    /// `None` once nothing more is to be read: the pin is gone.
    client: Mutex<Option<Client>>,
    /// Whether a refusal of it was written: held while it is written, so a
    /// second refusal returns once the first is in the database.
    refused: Mutex<bool>,
}

impl Pinned {
    /// The snapshot at `seq` of the ledger at `url`, pinned, its row
    /// checked; refused as `writer` if its archive fails its checks.
    pub(crate) fn open(url: &str, writer: &str, seq: i64) -> Result<Pinned, SnapshotError> {
        let mut client = pinned_client(url, seq)?;
        let (len, chunks) = row_of(&mut client, seq)?;
        let chunk_len = chunk_len_of(&mut client, seq, (len, chunks))?;
        Ok(Pinned {
            url: url.to_owned(),
            writer: writer.to_owned(),
            seq,
            len,
            chunks,
            chunk_len,
            client: Mutex::new(Some(client)),
            refused: Mutex::new(false),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<Client>>, SnapshotError> {
        self.client.lock().map_err(|_| SnapshotError::Store {
            detail: "a thread panicked reading a snapshot".to_owned(),
        })
    }

    /// Chunk `chunk` from the database, checked to be as long as the
    /// snapshot's length says. A connection that was lost is made again
    /// and pinned again, and the snapshot must still hold every chunk
    /// (chunks are never changed, only pruned whole).
    fn fetch(&self, chunk: u64) -> Result<Vec<u8>, SnapshotError> {
        let number = i32::try_from(chunk).map_err(|_| SnapshotError::Store {
            detail: format!("chunk {chunk} is past what an integer holds"),
        })?;
        let mut client = self.lock()?;
        if client.as_ref().is_none_or(Client::is_closed) {
            *client = Some(self.pinned_again()?);
        }
        let Some(client) = client.as_mut() else {
            unreachable!("a connection was just made")
        };
        let row = client
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

    /// A new pinned connection, once the snapshot is found to hold every
    /// chunk still.
    fn pinned_again(&self) -> Result<Client, SnapshotError> {
        let mut client = pinned_client(&self.url, self.seq)?;
        let held: i64 = client
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
        Ok(client)
    }

    /// Closes the connection, and with it the pin.
    fn unpin(&self) -> Result<(), SnapshotError> {
        *self.lock()? = None;
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

/// A snapshot in the database as an opening reads it: each thread reading
/// it keeps the last chunk it fetched, so reading on in order fetches each
/// chunk once per thread.
pub(crate) struct ChunkedFile {
    pinned: Arc<Pinned>,
    /// By thread, the last chunk fetched.
    last: Mutex<Vec<Fetched>>,
}

/// A chunk a thread fetched: the thread, the chunk's number, its bytes.
/// Copied out of the row: a row kept would keep the connection's read
/// buffer, and every message after it would be read into fresh memory.
type Fetched = (ThreadId, u64, Arc<Vec<u8>>);

impl ChunkedFile {
    pub(crate) fn new(pinned: Pinned) -> ChunkedFile {
        ChunkedFile {
            pinned: Arc::new(pinned),
            last: Mutex::new(Vec::new()),
        }
    }

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
        let bytes = Arc::new(self.pinned.fetch(chunk)?);
        let mut last = self.last.lock().map_err(poisoned)?;
        last.retain(|(by, _, _)| *by != thread);
        last.push((thread, chunk, bytes.clone()));
        Ok(bytes)
    }
}

/// Appends bytes `offset` to `offset + len` (cut at `total`) of a
/// snapshot in chunks of `chunk_len` to `into`, each chunk's bytes from
/// `chunk`.
fn read_chunks(
    (offset, len, total, chunk_len): (u64, usize, u64, u64),
    into: &mut Vec<u8>,
    mut chunk: impl FnMut(u64) -> Result<Arc<Vec<u8>>, SnapshotError>,
) -> Result<(), SnapshotError> {
    let end = offset.saturating_add(len as u64).min(total);
    let mut at = offset;
    while at < end {
        let bytes = chunk(at / chunk_len)?;
        let within = (at % chunk_len) as usize;
        let taken = (bytes.len() - within).min((end - at) as usize);
        into.extend_from_slice(&bytes[within..within + taken]);
        at += taken as u64;
    }
    Ok(())
}

impl SnapshotFile for ChunkedFile {
    fn byte_len(&self) -> u64 {
        self.pinned.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let shape = (offset, len, self.pinned.len, self.pinned.chunk_len);
        read_chunks(shape, into, |chunk| self.chunk(chunk))
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
    kept: Mutex<Vec<Option<Arc<Vec<u8>>>>>,
    missing: AtomicUsize,
}

impl KeptArchive {
    /// Chunk `chunk`'s bytes: kept, or fetched and kept.
    fn chunk(&self, chunk: u64) -> Result<Arc<Vec<u8>>, SnapshotError> {
        let poisoned = |_| SnapshotError::Store {
            detail: "a thread panicked reading a snapshot".to_owned(),
        };
        let slot = chunk
            .checked_sub(self.first)
            .map(|slot| slot as usize)
            .ok_or_else(|| SnapshotError::Store {
                detail: format!("chunk {chunk} is before the archive's, {}", self.first),
            })?;
        if let Some(Some(bytes)) = self.kept.lock().map_err(poisoned)?.get(slot) {
            return Ok(Arc::clone(bytes));
        }
        // Fetched without the lock, so a kept chunk is read meanwhile.
        let bytes = Arc::new(self.pinned.fetch(chunk)?);
        let mut kept = self.kept.lock().map_err(poisoned)?;
        let Some(place) = kept.get_mut(slot) else {
            unreachable!("a fetched chunk is one of the snapshot's")
        };
        if place.is_none() {
            *place = Some(Arc::clone(&bytes));
            if self.missing.fetch_sub(1, Ordering::SeqCst) == 1 {
                drop(kept);
                info!(
                    seq = self.pinned.seq,
                    "every chunk of the archive kept: the snapshot is unpinned"
                );
                self.pinned.unpin()?;
            }
        }
        Ok(bytes)
    }
}

impl SnapshotFile for KeptArchive {
    fn byte_len(&self) -> u64 {
        self.pinned.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let shape = (offset, len, self.pinned.len, self.pinned.chunk_len);
        read_chunks(shape, into, |chunk| self.chunk(chunk))
    }

    fn checked_in_background(&self) -> bool {
        true
    }

    fn refuse(&self, error: &SnapshotError) {
        self.pinned.refuse(error);
    }
}
