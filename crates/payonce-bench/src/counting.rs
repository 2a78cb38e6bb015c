//! A directory that counts the bytes written into it: what the budget
//! benchmark puts under a ledger's snapshots and runs, to say what each
//! snapshot and merge costs in writes.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use payonce_log::{FsStorage, Storage, StorageFile, StorageLock, StorageRead};

/// A directory on disk, counting every byte appended or written to it.
#[derive(Debug, Clone)]
pub struct CountingStorage {
    inner: FsStorage,
    written: Arc<AtomicU64>,
}

impl CountingStorage {
    /// The directory at `dir`, created if missing.
    pub fn new(dir: &Path) -> io::Result<CountingStorage> {
        std::fs::create_dir_all(dir)?;
        Ok(CountingStorage {
            inner: FsStorage::new(dir),
            written: Arc::default(),
        })
    }

    /// Bytes written into it so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn counted(&self, file: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(CountingFile {
            inner: file,
            written: Arc::clone(&self.written),
        })
    }
}

/// A file of a [`CountingStorage`].
struct CountingFile {
    inner: Box<dyn StorageFile>,
    written: Arc<AtomicU64>,
}

impl fmt::Debug for CountingFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl StorageFile for CountingFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.inner.append(bytes)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.inner.write_at(offset, bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.inner.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl Storage for CountingStorage {
    fn describe(&self, name: &str) -> String {
        self.inner.describe(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    /// The inner storage's own: a file system's reuses the scan's buffer.
    fn read_into(&self, name: &str, len_max: u64, into: &mut Vec<u8>) -> io::Result<()> {
        self.inner.read_into(name, len_max, into)
    }
    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        Ok(self.counted(self.inner.create_new(name)?))
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        Ok(self.counted(self.inner.open_append(name)?))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
        self.inner.try_lock()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>> {
        self.inner.open_read(name)
    }
}
