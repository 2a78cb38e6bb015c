//! Reading a snapshot in the database a run of chunks at a time, pinned
//! against pruning while it is read ([`Pinned`]).
//!
//! An opening reads the body through a [`ChunkedFile`]. The archive after
//! it is read through a [`KeptArchive`]: each chunk is fetched when a name,
//! or the checksum pass `payonce` runs in the background, first reads it,
//! and kept. A new worker thus serves once the body and the archive's
//! fences are read, not after every byte of the archive crossed the
//! network. Once every chunk of the archive is kept, the connections, and
//! with them the pin, are closed.

use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use payonce::{SnapshotError, SnapshotFile};
use tracing::info;

use crate::snapshot_pin::{Chunk, Pinned};

/// A lock a thread panicked holding: a failure to read, which says
/// nothing of the snapshot's bytes.
fn poisoned() -> SnapshotError {
    SnapshotError::Io {
        op: "reading",
        file: "payonce.snapshots".to_owned(),
        source: std::io::Error::other("a thread panicked reading the snapshot"),
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
        let kept = (self.last.lock().map_err(|_| poisoned())?.iter())
            .find(|(by, at, _)| *by == thread && *at == first)
            .map(|(_, _, bytes)| bytes.clone());
        let mut chunks: Vec<Chunk> = kept.into_iter().collect();
        let from = first + chunks.len() as u64;
        if from <= last {
            chunks.extend(self.pinned.fetch(from, last)?);
        }
        let mut kept = self.last.lock().map_err(|_| poisoned())?;
        kept.retain(|(by, _, _)| *by != thread);
        if let Some(bytes) = chunks.last() {
            kept.push((thread, last, bytes.alone()));
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
        self.pinned.row.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let shape = (offset, len, self.pinned.row.len, self.pinned.chunk_len);
        read_chunks(shape, into, |first, last| self.chunks(first, last))
    }

    fn lasting(&self, from: u64) -> Option<Arc<dyn SnapshotFile>> {
        let first = from.min(self.pinned.row.len) / self.pinned.chunk_len;
        let count = self.pinned.row.chunks.unsigned_abs() as u64;
        let chunks = (first..count).map(|_| None).collect::<Vec<_>>();
        if chunks.is_empty() && self.pinned.unpin().is_err() {
            return None;
        }
        Some(Arc::new(KeptArchive {
            pinned: Arc::clone(&self.pinned),
            first,
            kept: Mutex::new(Kept {
                missing: chunks.len(),
                chunks,
            }),
        }))
    }
}

/// A snapshot's archive, from chunk `first` on: each chunk fetched when
/// first read and kept, the pin let go once every one is.
struct KeptArchive {
    pinned: Arc<Pinned>,
    first: u64,
    kept: Mutex<Kept>,
}

/// The chunks of an archive, from its first: each once fetched, and how
/// many are not yet.
struct Kept {
    chunks: Vec<Option<Chunk>>,
    missing: usize,
}

impl KeptArchive {
    /// Chunks `first` to `last`: those kept, and each run of the others
    /// fetched in one query and kept.
    fn chunks(&self, first: u64, last: u64) -> Result<Vec<Chunk>, SnapshotError> {
        if first < self.first {
            return Err(SnapshotError::Store {
                detail: format!("chunk {first} is before the archive's, {}", self.first),
            });
        }
        let start = (first - self.first) as usize;
        let mut found = self.kept_in(start, (last - first) as usize + 1)?;
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
                .fetch(first + at as u64, first + (at + run - 1) as u64);
            let fetched = match fetched {
                Ok(fetched) => fetched.into_iter().map(Some).collect(),
                // Another thread may have kept them, and let the pin go,
                // since they were looked for.
                Err(error) => match self.kept_in(start + at, run) {
                    Ok(now) if now.iter().all(Option::is_some) => now,
                    _ => return Err(error),
                },
            };
            for (place, chunk) in found[at..at + run].iter_mut().zip(fetched) {
                *place = chunk;
            }
            self.keep(start + at, &found[at..at + run])?;
            at += run;
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// The `count` slots from `from` on, as kept now.
    fn kept_in(&self, from: usize, count: usize) -> Result<Vec<Option<Chunk>>, SnapshotError> {
        let kept = self.kept.lock().map_err(|_| poisoned())?;
        let Some(slots) = kept.chunks.get(from..from + count) else {
            unreachable!("a read ends within the snapshot, so within its chunks")
        };
        Ok(slots.to_vec())
    }

    /// Keeps `chunks`, from slot `from` on; lets the pin go once every
    /// chunk of the archive is kept.
    fn keep(&self, from: usize, chunks: &[Option<Chunk>]) -> Result<(), SnapshotError> {
        let mut kept = self.kept.lock().map_err(|_| poisoned())?;
        let mut newly = 0;
        for (place, bytes) in kept.chunks[from..from + chunks.len()]
            .iter_mut()
            .zip(chunks)
        {
            if place.is_none() {
                place.clone_from(bytes);
                newly += 1;
            }
        }
        kept.missing -= newly;
        if newly > 0 && kept.missing == 0 {
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
        self.pinned.row.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        let shape = (offset, len, self.pinned.row.len, self.pinned.chunk_len);
        read_chunks(shape, into, |first, last| self.chunks(first, last))
    }

    fn checked_in_background(&self) -> bool {
        true
    }

    fn refuse(&self, error: &SnapshotError) {
        self.pinned.refuse(error);
    }
}
