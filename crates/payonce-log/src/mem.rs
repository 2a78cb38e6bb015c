//! A log directory in memory that remembers what was synced, so a simulated
//! power loss can drop, keep or garble everything that was not.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::faults::Faults;
use crate::rng::SplitMix64;
use crate::storage::{Storage, StorageFile, StorageLock};

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
}

#[derive(Debug, Clone, Default)]
struct Inode {
    data: Vec<u8>,
    /// `data[..synced_len]` is on stable storage, unless `synced_backup`
    /// holds what is (after a truncation that was not synced yet).
    synced_len: usize,
    synced_backup: Option<Vec<u8>>,
}

impl Inode {
    fn synced(&self) -> &[u8] {
        match &self.synced_backup {
            Some(backup) => backup,
            None => &self.data[..self.synced_len],
        }
    }

    fn sync(&mut self) {
        self.synced_len = self.data.len();
        self.synced_backup = None;
    }

    /// The bytes a power loss leaves.
    fn after_crash(&self, mode: CrashMode, rng: &mut SplitMix64) -> Vec<u8> {
        let synced = self.synced();
        let extends = self.synced_backup.is_none() && self.data.len() >= self.synced_len;
        if !extends {
            // An unsynced truncation: either it reached the disk or it did not.
            return match mode {
                CrashMode::DropUnsynced => synced.to_vec(),
                CrashMode::KeepPrefix | CrashMode::Garble => {
                    if rng.coin() {
                        self.data.clone()
                    } else {
                        synced.to_vec()
                    }
                }
            };
        }
        let unsynced = self.data.len() - self.synced_len;
        match mode {
            CrashMode::DropUnsynced => synced.to_vec(),
            CrashMode::KeepPrefix => {
                let kept = rng.up_to(unsynced);
                self.data[..self.synced_len + kept].to_vec()
            }
            CrashMode::Garble => {
                let kept = rng.up_to(unsynced);
                let garbage = rng.up_to(unsynced - kept);
                let mut bytes = self.data[..self.synced_len + kept].to_vec();
                for _ in 0..garbage {
                    bytes.push(rng.next_u64() as u8);
                }
                bytes
            }
        }
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
        let data = state
            .inodes
            .get(ino)
            .map_or(&[][..], |inode| inode.data.as_slice());
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(len).min(data.len());
        Ok(data[start..end].to_vec())
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

#[derive(Debug)]
struct MemFile {
    storage: MemStorage,
    ino: u64,
}

impl MemFile {
    fn inode(state: &mut State, ino: u64) -> &mut Inode {
        state.inodes.entry(ino).or_default()
    }
}

impl StorageFile for MemFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let (landed, error) = self.storage.faults.on_write(bytes.len());
        let mut state = self.storage.state();
        state.stats.writes += 1;
        Self::inode(&mut state, self.ino)
            .data
            .extend_from_slice(&bytes[..landed]);
        match error {
            Some(error) => Err(error),
            None => Ok(()),
        }
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
        let inode = Self::inode(&mut state, self.ino);
        if len < inode.synced_len && inode.synced_backup.is_none() {
            inode.synced_backup = Some(inode.data[..inode.synced_len].to_vec());
        }
        inode.data.resize(len, 0);
        inode.synced_len = inode.synced_len.min(len);
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
