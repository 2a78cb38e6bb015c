//! A log directory in memory that remembers what was synced, so a simulated
//! power loss can drop, keep or garble everything that was not.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::faults::Faults;
use crate::rng::SplitMix64;
use crate::storage::{Storage, StorageFile, StorageLock, StorageRead};

/// What a simulated power loss does to each file's bytes written since its
/// last `fdatasync`. Synced bytes always survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashMode {
    /// Every unsynced byte is lost.
    DropUnsynced,
    /// A random prefix of the unsynced bytes survives, the rest is lost.
    KeepPrefix,
    /// A random prefix of the unsynced bytes survives intact, followed by a
    /// random run of garbage where the rest was being written: a write torn
    /// inside a sector. Writes land in order; nothing after the garbage
    /// survives.
    Garble,
    /// Each page (4 KiB, aligned) of the unsynced bytes survives or is lost
    /// on its own, in no order: a later page can survive without an earlier
    /// one, as when a write over blocks a file already has reaches the disk
    /// out of order. A lost page keeps its old bytes (zeros past the old end
    /// of the file, which reaches the last page that survived).
    Pages,
}

/// The unit [`CrashMode::Pages`] keeps or loses.
pub const CRASH_PAGE_LEN: usize = 4096;

#[derive(Debug, Clone, Default)]
struct Inode {
    /// The file as the running system sees it.
    data: Vec<u8>,
    /// The file as of its last sync: what a power loss surely leaves.
    durable: Vec<u8>,
    /// `data` and `durable` agree before this offset: every write,
    /// overwrite or truncation since the last sync is at or after it.
    clean: usize,
    /// ... and from this offset on (0 when nothing changed since the last
    /// sync): bytes no write touched are not at risk in a power loss.
    dirty_end: usize,
}

impl Inode {
    fn sync(&mut self) {
        self.durable.truncate(self.clean);
        self.durable.extend_from_slice(&self.data[self.clean..]);
        self.clean = self.data.len();
        self.dirty_end = 0;
        debug_assert_eq!(self.durable, self.data);
    }

    /// Writes `bytes` at `offset`, zero-filling any gap past the end.
    fn write_at(&mut self, offset: usize, bytes: &[u8]) {
        let end = offset + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[offset..end].copy_from_slice(bytes);
        self.clean = self.clean.min(offset);
        self.dirty_end = self.dirty_end.max(end);
    }

    fn set_len(&mut self, len: usize) {
        self.dirty_end = self.dirty_end.max(len);
        self.data.resize(len, 0);
        self.clean = self.clean.min(len);
    }

    /// The bytes a power loss leaves. Except under [`CrashMode::Pages`],
    /// changes since the last sync reach the disk in the order they were
    /// made: a prefix of the changed range
    /// carries the new bytes, the rest the old ones; bytes no write touched
    /// keep their old value.
    fn after_crash(&self, mode: CrashMode, rng: &mut SplitMix64) -> Vec<u8> {
        if self.data.len() < self.durable.len() {
            // An unsynced truncation: either it reached the disk or it did not.
            return match mode {
                CrashMode::DropUnsynced => self.durable.clone(),
                CrashMode::KeepPrefix | CrashMode::Garble | CrashMode::Pages => {
                    if rng.coin() {
                        self.data.clone()
                    } else {
                        self.durable.clone()
                    }
                }
            };
        }
        let dirty_end = self.dirty_end.min(self.data.len());
        let unsynced = dirty_end.saturating_sub(self.clean);
        let (kept, garbage) = match mode {
            CrashMode::DropUnsynced => return self.durable.clone(),
            CrashMode::Pages => return self.pages_after_crash(dirty_end, rng),
            CrashMode::KeepPrefix => (rng.up_to(unsynced), 0),
            CrashMode::Garble => {
                let kept = rng.up_to(unsynced);
                (kept, rng.up_to(unsynced - kept))
            }
        };
        let mut bytes = self.data[..self.clean + kept].to_vec();
        for _ in 0..garbage {
            bytes.push(rng.next_u64() as u8);
        }
        // Past what reached the disk, the old bytes, where there were any.
        if let Some(old) = self.durable.get(bytes.len()..) {
            bytes.extend_from_slice(old);
        }
        bytes
    }

    /// [`CrashMode::Pages`]: the changed range `clean..dirty_end`, page by
    /// page, each page new or old by a coin.
    fn pages_after_crash(&self, dirty_end: usize, rng: &mut SplitMix64) -> Vec<u8> {
        let mut bytes = self.durable.clone();
        let mut page = self.clean / CRASH_PAGE_LEN * CRASH_PAGE_LEN;
        while page < dirty_end {
            let end = (page + CRASH_PAGE_LEN).min(dirty_end);
            let start = page.max(self.clean);
            if rng.coin() {
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[start..end].copy_from_slice(&self.data[start..end]);
            }
            page += CRASH_PAGE_LEN;
        }
        bytes
    }
}

#[derive(Debug, Clone)]
enum DirOp {
    Create { name: String, ino: u64 },
    Rename { from: String, to: String, ino: u64 },
    Remove { name: String },
}

#[derive(Debug, Default)]
struct State {
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    /// The directory as the running system sees it.
    names: BTreeMap<String, u64>,
    /// The directory as of the last directory sync.
    durable_names: BTreeMap<String, u64>,
    /// Entry changes since the last directory sync, in order.
    dir_ops: Vec<DirOp>,
    locked: bool,
    stats: MemStats,
}

/// Counts of operations on a [`MemStorage`], for tests of batching.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    /// File writes (appends).
    pub writes: u64,
    /// File `fdatasync`s.
    pub syncs: u64,
    /// Directory syncs.
    pub dir_syncs: u64,
    /// Renames.
    pub renames: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

/// A log directory held in memory, with injected faults and simulated power
/// loss. Clones share the same directory.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    shared: Arc<Shared>,
    faults: Faults,
}

impl MemStorage {
    /// An empty directory.
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The fault plan; arm faults on it.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Counts of operations so far.
    pub fn stats(&self) -> MemStats {
        self.state().stats
    }

    /// The current bytes of `name`, synced or not.
    pub fn file(&self, name: &str) -> Option<Vec<u8>> {
        let state = self.state();
        let ino = state.names.get(name)?;
        state.inodes.get(ino).map(|inode| inode.data.clone())
    }

    /// Replaces or creates `name` with `bytes`, durably (as a test's tamper).
    pub fn put_file(&self, name: &str, bytes: &[u8]) {
        let mut state = self.state();
        let ino = state.next_ino;
        state.next_ino += 1;
        let mut inode = Inode {
            data: bytes.to_vec(),
            ..Inode::default()
        };
        inode.sync();
        state.inodes.insert(ino, inode);
        state.names.insert(name.to_owned(), ino);
        state.durable_names.insert(name.to_owned(), ino);
    }

    /// A new, independent directory holding what a power loss at this moment
    /// would leave: per file, synced bytes plus what `mode` keeps of the rest;
    /// per directory entry changed since the last directory sync, a coin
    /// decides whether the change survived. No writer lock is held in it.
    /// The same state, mode and seed always give the same result.
    pub fn crash(&self, mode: CrashMode, seed: u64) -> MemStorage {
        let state = self.state();
        let mut rng = SplitMix64::new(seed);
        let mut names = state.durable_names.clone();
        for op in &state.dir_ops {
            if !rng.coin() {
                continue;
            }
            match op {
                DirOp::Create { name, ino } => {
                    names.entry(name.clone()).or_insert(*ino);
                }
                DirOp::Rename { from, to, ino } => {
                    if names.get(from) == Some(ino) {
                        names.remove(from);
                        names.insert(to.clone(), *ino);
                    }
                }
                DirOp::Remove { name } => {
                    names.remove(name);
                }
            }
        }
        let mut inodes = BTreeMap::new();
        for ino in names.values() {
            if let Some(inode) = state.inodes.get(ino) {
                let mut survivor = Inode {
                    data: inode.after_crash(mode, &mut rng),
                    ..Inode::default()
                };
                survivor.sync();
                inodes.insert(*ino, survivor);
            }
        }
        let crashed = State {
            inodes,
            next_ino: state.next_ino,
            durable_names: names.clone(),
            names,
            ..State::default()
        };
        MemStorage {
            shared: Arc::new(Shared {
                state: Mutex::new(crashed),
            }),
            faults: Faults::new(),
        }
    }

    fn not_found(name: &str) -> io::Error {
        io::Error::new(io::ErrorKind::NotFound, format!("no file {name}"))
    }
}

impl Storage for MemStorage {
    fn describe(&self, name: &str) -> String {
        format!("mem:/{name}")
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.state().names.keys().cloned().collect())
    }

    fn len(&self, name: &str) -> io::Result<u64> {
        let state = self.state();
        let ino = state.names.get(name).ok_or_else(|| Self::not_found(name))?;
        Ok(state
            .inodes
            .get(ino)
            .map_or(0, |inode| inode.data.len() as u64))
    }

    fn read(&self, name: &str, len_max: u64) -> io::Result<Vec<u8>> {
        self.read_range(name, 0, usize::try_from(len_max).unwrap_or(usize::MAX))
    }

    fn read_range(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let state = self.state();
        let ino = state.names.get(name).ok_or_else(|| Self::not_found(name))?;
        Ok(range_of(&state, *ino, offset, len).to_vec())
    }

    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>> {
        let state = self.state();
        let ino = *state.names.get(name).ok_or_else(|| Self::not_found(name))?;
        let len = state
            .inodes
            .get(&ino)
            .map_or(0, |inode| inode.data.len() as u64);
        Ok(Box::new(MemRead {
            storage: self.clone(),
            ino,
            len,
        }))
    }

    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        self.faults.on_create()?;
        let mut state = self.state();
        if state.names.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name} exists"),
            ));
        }
        let ino = state.next_ino;
        state.next_ino += 1;
        state.inodes.insert(ino, Inode::default());
        state.names.insert(name.to_owned(), ino);
        state.dir_ops.push(DirOp::Create {
            name: name.to_owned(),
            ino,
        });
        Ok(Box::new(MemFile {
            storage: self.clone(),
            ino,
        }))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let state = self.state();
        let ino = *state.names.get(name).ok_or_else(|| Self::not_found(name))?;
        Ok(Box::new(MemFile {
            storage: self.clone(),
            ino,
        }))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.faults.on_rename()?;
        let mut state = self.state();
        let ino = state
            .names
            .remove(from)
            .ok_or_else(|| Self::not_found(from))?;
        state.names.insert(to.to_owned(), ino);
        state.stats.renames += 1;
        state.dir_ops.push(DirOp::Rename {
            from: from.to_owned(),
            to: to.to_owned(),
            ino,
        });
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = self.state();
        state
            .names
            .remove(name)
            .ok_or_else(|| Self::not_found(name))?;
        state.dir_ops.push(DirOp::Remove {
            name: name.to_owned(),
        });
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.faults.on_dir_sync()?;
        let mut state = self.state();
        state.durable_names = state.names.clone();
        state.dir_ops.clear();
        state.stats.dir_syncs += 1;
        Ok(())
    }

    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
        let mut state = self.state();
        if state.locked {
            return Ok(None);
        }
        state.locked = true;
        Ok(Some(Box::new(MemLock {
            storage: self.clone(),
        })))
    }
}

/// A file in memory open for reads: its inode, which a rename or a
/// removal leaves in place, as a file descriptor keeps a file.
#[derive(Debug)]
struct MemRead {
    storage: MemStorage,
    ino: u64,
    len: u64,
}

impl StorageRead for MemRead {
    fn byte_len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> io::Result<()> {
        let state = self.storage.state();
        into.extend_from_slice(range_of(&state, self.ino, offset, len));
        Ok(())
    }
}

/// Up to `len` bytes of inode `ino` from `offset`: fewer at its end, none
/// past it.
fn range_of(state: &State, ino: u64, offset: u64, len: usize) -> &[u8] {
    let data = state
        .inodes
        .get(&ino)
        .map_or(&[][..], |inode| inode.data.as_slice());
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(len).min(data.len());
    &data[start..end]
}

#[derive(Debug)]
struct MemFile {
    storage: MemStorage,
    ino: u64,
}

impl MemFile {
    fn inode(state: &mut State, ino: u64) -> &mut Inode {
        state.inodes.entry(ino).or_default()
    }

    /// Writes `bytes` at `offset` (the end if `None`), as far as the faults
    /// let them land.
    fn write(&mut self, offset: Option<usize>, bytes: &[u8]) -> io::Result<()> {
        let (landed, error) = self.storage.faults.on_write(bytes.len());
        let mut state = self.storage.state();
        state.stats.writes += 1;
        let inode = Self::inode(&mut state, self.ino);
        let offset = offset.unwrap_or(inode.data.len());
        inode.write_at(offset, &bytes[..landed]);
        match error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

impl StorageFile for MemFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(None, bytes)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let offset = usize::try_from(offset).map_err(io::Error::other)?;
        self.write(Some(offset), bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.storage.faults.on_sync()?;
        let mut state = self.storage.state();
        state.stats.syncs += 1;
        Self::inode(&mut state, self.ino).sync();
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let mut state = self.storage.state();
        Self::inode(&mut state, self.ino).set_len(len);
        Ok(())
    }
}

#[derive(Debug)]
struct MemLock {
    storage: MemStorage,
}

impl StorageLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        self.storage.state().locked = false;
    }
}
