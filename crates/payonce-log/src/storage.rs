//! Where the bytes go: one [`Storage`] is one log directory. The log only
//! appends, syncs, renames and reads whole files or ranges, so the trait is
//! small enough to implement in memory with faults ([`crate::MemStorage`]).
//! `sync_rate` measures a storage's own limit, synced appends per second:
//! the disk's limit, which the benchmarks print beside their figures.

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The name of the file whose lock marks the one writer of a directory.
pub const LOCK_FILE: &str = "LOCK";

/// The name of the file [`sync_rate`] and [`overwrite_sync_rate`] write,
/// then remove.
pub const SYNC_PROBE_FILE: &str = "sync-rate.probe";

/// The largest block [`sync_rate`] and [`overwrite_sync_rate`] write: a
/// record's default limit.
pub const SYNC_PROBE_BLOCK_MAX: usize = 1 << 20;

/// Bytes [`overwrite_sync_rate`] writes and syncs before it measures, then
/// writes inside, wrapping: room for over 80,000 blocks of 200 bytes.
pub const SYNC_PROBE_OVERWRITE_LEN: u64 = 16 << 20;

/// Appends `block_len`-byte blocks to a new file in `storage`, each followed
/// by `sync_data`, for `duration`, and returns the blocks per second: the
/// most durable appends one thread can get from that storage, the limit the
/// log's group commit is measured against. The file ([`SYNC_PROBE_FILE`])
/// is removed afterwards; one already there is an error, never overwritten.
pub fn sync_rate(storage: &dyn Storage, block_len: usize, duration: Duration) -> io::Result<f64> {
    probe_syncs(
        storage,
        block_len,
        duration,
        |_| Ok(()),
        |file, block, _| file.append(block),
    )
}

/// The same as [`sync_rate`], but each block is written over bytes already
/// written and synced ([`SYNC_PROBE_OVERWRITE_LEN`] of them, one block
/// after another, wrapping), so `sync_data` has no new file length to make
/// durable: the limit of a log writing over zeros written ahead
/// ([`crate::LogConfig::preallocate_len`], the default).
pub fn overwrite_sync_rate(
    storage: &dyn Storage,
    block_len: usize,
    duration: Duration,
) -> io::Result<f64> {
    probe_syncs(
        storage,
        block_len,
        duration,
        |file| {
            let zeros = vec![0u8; 1 << 20];
            let mut offset = 0;
            while offset < SYNC_PROBE_OVERWRITE_LEN {
                file.write_at(offset, &zeros)?;
                offset += zeros.len() as u64;
            }
            file.sync_data()
        },
        |file, block, count| {
            let blocks = SYNC_PROBE_OVERWRITE_LEN / block.len() as u64;
            file.write_at(count % blocks * block.len() as u64, block)
        },
    )
}

/// Runs `prepare` on a new probe file, then `write` (given the block and
/// the blocks written so far) and `sync_data` in a loop for `duration`;
/// the blocks per second. The probe file goes even when a write failed.
fn probe_syncs(
    storage: &dyn Storage,
    block_len: usize,
    duration: Duration,
    prepare: impl FnOnce(&mut dyn StorageFile) -> io::Result<()>,
    mut write: impl FnMut(&mut dyn StorageFile, &[u8], u64) -> io::Result<()>,
) -> io::Result<f64> {
    if block_len == 0 || block_len > SYNC_PROBE_BLOCK_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("sync probe block is {block_len} bytes; from 1 to {SYNC_PROBE_BLOCK_MAX}"),
        ));
    }
    let mut file = storage.create_new(SYNC_PROBE_FILE)?;
    let block = vec![0x5A; block_len];
    let mut count = 0u64;
    let mut started = Instant::now();
    let written = prepare(file.as_mut()).and_then(|()| {
        started = Instant::now();
        while started.elapsed() < duration {
            write(file.as_mut(), &block, count).and_then(|()| file.sync_data())?;
            count += 1;
        }
        Ok(())
    });
    let rate = count as f64 / started.elapsed().as_secs_f64();
    drop(file);
    let removed = storage.remove(SYNC_PROBE_FILE);
    written.and(removed).map(|()| rate)
}

/// One log directory. Names are plain file names inside it, never paths.
///
/// Nine methods are required: naming, listing, opening a file to read or
/// to write, renaming, removing, syncing the directory and its lock. The
/// whole-file and ranged reads have defaults through [`Storage::open_read`],
/// which a storage overrides where it has a faster way; a wrapper that
/// changes reads overrides [`Storage::read_range`], which the others go
/// through, or [`Storage::read`] for whole files alone.
///
/// Implementations must make [`Storage::rename`] atomic and let it replace
/// an existing target, like POSIX `rename`.
pub trait Storage: Send + Sync + fmt::Debug {
    /// A name for `name` in messages: a path for files on disk. The empty
    /// name stands for the directory itself.
    fn describe(&self, name: &str) -> String;
    /// The names of the files in the directory, in no particular order.
    /// A missing directory is an error of kind `NotFound`.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Opens `name` for positioned reads that go on reaching the same
    /// bytes after the name is renamed or removed, as an open file
    /// descriptor does: what keeps a file read lazily readable while
    /// newer files replace it.
    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>>;
    /// Creates a new, empty file for appending; fails if it exists.
    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file for appending.
    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Renames `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Takes the directory's exclusive writer lock, creating the directory if
    /// it does not exist. `Ok(None)` means another writer holds it. The lock
    /// is held until the returned guard is dropped.
    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>>;

    /// The current length of a file.
    fn len(&self, name: &str) -> io::Result<u64> {
        Ok(self.open_read(name)?.byte_len())
    }
    /// The whole file, or its first `len_max` bytes if it is longer.
    fn read(&self, name: &str, len_max: u64) -> io::Result<Vec<u8>> {
        self.read_range(name, 0, usize::try_from(len_max).unwrap_or(usize::MAX))
    }
    /// The same as [`Storage::read`], into `into`, replacing what it held.
    /// A scan reads segment after segment into one buffer: a fresh 64 MiB
    /// buffer per segment costs a page fault per 4 KiB, which on a virtual
    /// machine took a fifth of an open's time. On error `into` holds
    /// anything.
    fn read_into(&self, name: &str, len_max: u64, into: &mut Vec<u8>) -> io::Result<()> {
        *into = self.read(name, len_max)?;
        Ok(())
    }
    /// Up to `len` bytes from `offset`; fewer at the end of the file.
    fn read_range(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let handle = self.open_read(name)?;
        let left = handle.byte_len().saturating_sub(offset);
        let len = len.min(usize::try_from(left).unwrap_or(usize::MAX));
        let mut bytes = Vec::new();
        handle.read_at(offset, len, &mut bytes)?;
        Ok(bytes)
    }
    /// The same as [`Storage::read_range`], appended to `into`: a file
    /// read a piece at a time reuses one buffer. On error `into` holds
    /// anything.
    fn read_range_into(
        &self,
        name: &str,
        offset: u64,
        len: usize,
        into: &mut Vec<u8>,
    ) -> io::Result<()> {
        into.extend_from_slice(&self.read_range(name, offset, len)?);
        Ok(())
    }
}

/// A file open for writing.
pub trait StorageFile: Send + fmt::Debug {
    /// Appends all of `bytes` at the end of the file.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Writes all of `bytes` at `offset`, over what is there, extending the
    /// file if they reach past its end.
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Makes the file's contents and length durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// A file open for positioned reads ([`Storage::open_read`]).
pub trait StorageRead: Send + Sync + fmt::Debug {
    /// Its length when it was opened; its bytes do not change after.
    fn byte_len(&self) -> u64;
    /// Appends to `into` up to `len` bytes from `offset`; fewer only at
    /// the end of the file. On error `into` holds anything.
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> io::Result<()>;
}

/// The writer lock of a directory, released on drop.
pub trait StorageLock: Send + Sync + fmt::Debug {}

/// A log directory on the local file system.
#[derive(Debug, Clone)]
pub struct FsStorage {
    dir: PathBuf,
}

impl FsStorage {
    /// The log in directory `dir`. Nothing is touched until the log is opened.
    pub fn new(dir: impl Into<PathBuf>) -> FsStorage {
        FsStorage { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> PathBuf {
        assert!(
            !name.is_empty() && !name.contains(std::path::is_separator),
            "storage names are plain file names"
        );
        self.dir.join(name)
    }
}

impl Storage for FsStorage {
    fn describe(&self, name: &str) -> String {
        if name.is_empty() {
            self.dir.display().to_string()
        } else {
            self.dir.join(name).display().to_string()
        }
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            // A name that is not UTF-8 is not one of ours.
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn len(&self, name: &str) -> io::Result<u64> {
        Ok(fs::metadata(self.path(name))?.len())
    }

    fn read(&self, name: &str, len_max: u64) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.read_into(name, len_max, &mut bytes)?;
        Ok(bytes)
    }

    fn read_into(&self, name: &str, len_max: u64, into: &mut Vec<u8>) -> io::Result<()> {
        let file = File::open(self.path(name))?;
        let len = file.metadata()?.len().min(len_max);
        into.clear();
        into.reserve(usize::try_from(len).unwrap_or(0));
        file.take(len_max).read_to_end(into)?;
        Ok(())
    }

    fn read_range(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(len);
        self.read_range_into(name, offset, len, &mut bytes)?;
        Ok(bytes)
    }

    fn read_range_into(
        &self,
        name: &str,
        offset: u64,
        len: usize,
        into: &mut Vec<u8>,
    ) -> io::Result<()> {
        let mut file = File::open(self.path(name))?;
        file.seek(SeekFrom::Start(offset))?;
        into.reserve(len);
        file.take(len as u64).read_to_end(into)?;
        Ok(())
    }

    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>> {
        let file = File::open(self.path(name))?;
        let len = file.metadata()?.len();
        Ok(Box::new(FsRead { file, len }))
    }

    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        // Not O_APPEND: positioned writes must land where they are aimed.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path(name))?;
        Ok(Box::new(FsFile { file }))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new().write(true).open(self.path(name))?;
        Ok(Box::new(FsFile { file }))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from), self.path(to))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path(name))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
        if !self.dir.is_dir() {
            fs::create_dir_all(&self.dir)?;
            // The new directory's own entry must survive a power loss too.
            if let Some(parent) = self.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                File::open(parent)?.sync_all()?;
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.path(LOCK_FILE))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Box::new(FsLock { file }))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(error)) => Err(error),
        }
    }
}

#[derive(Debug)]
struct FsFile {
    file: File,
}

impl StorageFile for FsFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.seek(SeekFrom::End(0))?;
        self.file.write_all(bytes)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

/// Holding the open file holds the lock; dropping it releases the lock.
#[derive(Debug)]
struct FsLock {
    file: File,
}

impl StorageLock for FsLock {}

/// A file on disk open for positioned reads (`pread`): no shared cursor,
/// so readers on several threads share it.
#[derive(Debug)]
struct FsRead {
    file: File,
    len: u64,
}

impl StorageRead for FsRead {
    fn byte_len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> io::Result<()> {
        let start = into.len();
        let wanted = u64::try_from(len)
            .unwrap_or(u64::MAX)
            .min(self.len.saturating_sub(offset)) as usize;
        into.resize(start + wanted, 0);
        let read = self.file.read_exact_at(&mut into[start..], offset);
        if read.is_err() {
            into.truncate(start);
        }
        read
    }
}

impl Drop for FsLock {
    fn drop(&mut self) {
        // Closing the file alone is not enough: a child process that another
        // thread is spawning holds a copy of every open file until it
        // executes its program, and an flock lasts while any copy is open.
        // Unlocking releases it for all copies at once. If unlocking fails,
        // the close below still releases it once the copies are gone.
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_dropped_lock_is_free_while_a_copy_of_its_file_is_still_open() {
        // Guards against a reopen in this process failing as "locked" because
        // a child being spawned by another thread holds a copy of the file.
        let dir = tempfile::tempdir().unwrap();
        let storage = FsStorage::new(dir.path());
        drop(storage.try_lock().unwrap().unwrap());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join(LOCK_FILE))
            .unwrap();
        file.try_lock().unwrap();
        // What a forked child holds until it executes: the same open file.
        let copy = file.try_clone().unwrap();
        drop(FsLock { file });
        assert!(storage.try_lock().unwrap().is_some(), "the lock is free");
        drop(copy);
    }

    /// Reads through `storage`'s handle on a file after it was replaced by
    /// another of the same name, then removed.
    fn a_file_open_for_reading_outlives_its_name(storage: &dyn Storage) {
        let mut file = storage.create_new("a").unwrap();
        file.append(b"0123456789").unwrap();
        drop(file);
        let handle = storage.open_read("a").unwrap();
        let mut other = storage.create_new("b").unwrap();
        other.append(b"other").unwrap();
        drop(other);
        storage.rename("b", "a").unwrap();
        let mut read = Vec::new();
        handle.read_at(2, 3, &mut read).unwrap();
        storage.remove("a").unwrap();
        handle.read_at(8, 10, &mut read).unwrap();
        assert_eq!(read, b"23489");
        assert_eq!(handle.byte_len(), 10);
        assert!(storage.open_read("a").is_err(), "the name is gone");
    }

    #[test]
    fn a_file_on_disk_open_for_reading_outlives_its_name() {
        let dir = tempfile::tempdir().unwrap();
        a_file_open_for_reading_outlives_its_name(&FsStorage::new(dir.path()));
    }

    #[test]
    fn a_file_in_memory_open_for_reading_outlives_its_name() {
        a_file_open_for_reading_outlives_its_name(&crate::MemStorage::new());
    }
}
