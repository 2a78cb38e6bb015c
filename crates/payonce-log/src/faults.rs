//! Injected storage faults, for tests: the same plan drives
//! [`crate::MemStorage`] and [`FaultyStorage`], which wraps any storage (a
//! real directory included), so fault tests run on both.

use std::fmt;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::storage::{Storage, StorageFile, StorageLock, StorageRead};

/// One fault to inject. Counts start when the fault is armed: `nth: 1` is the
/// next such operation. Each fault fires once, except [`Fault::NoSpace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The `nth` file write fails; nothing of it lands.
    WriteFails {
        /// Which write, counting from 1.
        nth: u64,
    },
    /// The `nth` file write lands only its first `landed` bytes, then fails.
    WriteShort {
        /// Which write, counting from 1.
        nth: u64,
        /// Bytes that land before the error.
        landed: usize,
    },
    /// The `nth` file `fdatasync` fails, syncing nothing.
    SyncFails {
        /// Which sync, counting from 1.
        nth: u64,
    },
    /// The `nth` directory sync fails, syncing nothing.
    DirSyncFails {
        /// Which directory sync, counting from 1.
        nth: u64,
    },
    /// The `nth` rename fails, renaming nothing.
    RenameFails {
        /// Which rename, counting from 1.
        nth: u64,
    },
    /// The `nth` file creation fails, creating nothing.
    CreateFails {
        /// Which creation, counting from 1.
        nth: u64,
    },
    /// The device fills after `budget` more bytes: the write that crosses
    /// the budget lands the bytes that fit, then fails with
    /// [`io::ErrorKind::StorageFull`], as does every later write.
    NoSpace {
        /// Bytes that may still be written.
        budget: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Sync,
    DirSync,
    Rename,
    Create,
}

#[derive(Debug)]
struct Armed {
    fault: Fault,
    seen: u64,
}

#[derive(Debug, Default)]
struct Plan {
    armed: Vec<Armed>,
    syncs_held: bool,
    syncs_blocked: usize,
}

#[derive(Debug, Default)]
struct Shared {
    plan: Mutex<Plan>,
    changed: Condvar,
}

/// The faults armed on a storage. Clones share the plan.
#[derive(Clone, Default)]
pub struct Faults {
    shared: Arc<Shared>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

/// While held, every `fdatasync` blocks before doing anything, so a test can
/// line up callers behind a sync in progress. Dropping it releases them.
#[derive(Debug)]
pub struct SyncHold {
    faults: Faults,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected fault: {what}"))
}

impl Faults {
    /// A plan with nothing armed.
    pub fn new() -> Faults {
        Faults::default()
    }

    fn plan(&self) -> MutexGuard<'_, Plan> {
        self.shared
            .plan
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Arms `fault`, counting from now.
    pub fn arm(&self, fault: Fault) {
        self.plan().armed.push(Armed { fault, seen: 0 });
    }

    /// Disarms every fault that has not fired (and the device is no longer full).
    pub fn disarm_all(&self) {
        self.plan().armed.clear();
    }

    /// Holds every `fdatasync` until the returned guard is dropped.
    pub fn hold_syncs(&self) -> SyncHold {
        self.plan().syncs_held = true;
        SyncHold {
            faults: self.clone(),
        }
    }

    /// Counts `op`, returning the fault that fires on it, if any.
    fn fire(plan: &mut Plan, op: Op) -> Option<Fault> {
        let mut fired = None;
        plan.armed.retain_mut(|armed| {
            let counts = matches!(
                (op, armed.fault),
                (
                    Op::Write,
                    Fault::WriteFails { .. } | Fault::WriteShort { .. }
                ) | (Op::Sync, Fault::SyncFails { .. })
                    | (Op::DirSync, Fault::DirSyncFails { .. })
                    | (Op::Rename, Fault::RenameFails { .. })
                    | (Op::Create, Fault::CreateFails { .. })
            );
            if !counts {
                return true;
            }
            armed.seen += 1;
            let nth = match armed.fault {
                Fault::WriteFails { nth }
                | Fault::WriteShort { nth, .. }
                | Fault::SyncFails { nth }
                | Fault::DirSyncFails { nth }
                | Fault::RenameFails { nth }
                | Fault::CreateFails { nth } => nth,
                Fault::NoSpace { .. } => return true,
            };
            if armed.seen == nth && fired.is_none() {
                fired = Some(armed.fault);
                return false;
            }
            true
        });
        fired
    }

    /// Before a write of `len` bytes: how many bytes land, and the error
    /// that follows them if the write fails.
    pub(crate) fn on_write(&self, len: usize) -> (usize, Option<io::Error>) {
        let mut plan = self.plan();
        match Faults::fire(&mut plan, Op::Write) {
            Some(Fault::WriteFails { .. }) => return (0, Some(injected("write failed"))),
            Some(Fault::WriteShort { landed, .. }) => {
                return (landed.min(len), Some(injected("short write")));
            }
            _ => {}
        }
        for armed in &mut plan.armed {
            if let Fault::NoSpace { budget } = &mut armed.fault {
                let fits = usize::try_from(*budget).unwrap_or(usize::MAX).min(len);
                *budget -= fits as u64;
                if fits < len {
                    let error = io::Error::new(
                        io::ErrorKind::StorageFull,
                        "injected fault: no space left on device",
                    );
                    return (fits, Some(error));
                }
            }
        }
        (len, None)
    }

    /// Before an `fdatasync`: blocks while syncs are held, then fails if armed.
    pub(crate) fn on_sync(&self) -> io::Result<()> {
        let mut plan = self.plan();
        if plan.syncs_held {
            plan.syncs_blocked += 1;
            self.shared.changed.notify_all();
            while plan.syncs_held {
                plan = self
                    .shared
                    .changed
                    .wait(plan)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            plan.syncs_blocked -= 1;
        }
        match Faults::fire(&mut plan, Op::Sync) {
            Some(_) => Err(injected("fdatasync failed")),
            None => Ok(()),
        }
    }

    pub(crate) fn on_dir_sync(&self) -> io::Result<()> {
        match Faults::fire(&mut self.plan(), Op::DirSync) {
            Some(_) => Err(injected("directory sync failed")),
            None => Ok(()),
        }
    }

    pub(crate) fn on_rename(&self) -> io::Result<()> {
        match Faults::fire(&mut self.plan(), Op::Rename) {
            Some(_) => Err(injected("rename failed")),
            None => Ok(()),
        }
    }

    pub(crate) fn on_create(&self) -> io::Result<()> {
        match Faults::fire(&mut self.plan(), Op::Create) {
            Some(_) => Err(injected("create failed")),
            None => Ok(()),
        }
    }
}

impl SyncHold {
    /// Blocks until at least `count` syncs are waiting on this hold.
    pub fn wait_for_blocked(&self, count: usize) {
        let mut plan = self.faults.plan();
        while plan.syncs_blocked < count {
            plan = self
                .faults
                .shared
                .changed
                .wait(plan)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Lets the held syncs go on (arm a fault first to make them fail).
    pub fn release(self) {}
}

impl Drop for SyncHold {
    fn drop(&mut self) {
        self.faults.plan().syncs_held = false;
        self.faults.shared.changed.notify_all();
    }
}

/// Any storage, with [`Faults`] injected in front of it.
#[derive(Debug, Clone)]
pub struct FaultyStorage {
    inner: Arc<dyn Storage>,
    faults: Faults,
}

impl FaultyStorage {
    /// `inner` with a fresh, empty fault plan.
    pub fn new(inner: Arc<dyn Storage>) -> FaultyStorage {
        FaultyStorage {
            inner,
            faults: Faults::new(),
        }
    }

    /// The fault plan; arm faults on it.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }
}

impl Storage for FaultyStorage {
    fn describe(&self, name: &str) -> String {
        self.inner.describe(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        self.faults.on_create()?;
        let inner = self.inner.create_new(name)?;
        Ok(Box::new(FaultyFile {
            inner,
            faults: self.faults.clone(),
        }))
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open_append(name)?;
        Ok(Box::new(FaultyFile {
            inner,
            faults: self.faults.clone(),
        }))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.faults.on_rename()?;
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.faults.on_dir_sync()?;
        self.inner.sync_dir()
    }
    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
        self.inner.try_lock()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>> {
        self.inner.open_read(name)
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: Box<dyn StorageFile>,
    faults: Faults,
}

impl StorageFile for FaultyFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let (landed, error) = self.faults.on_write(bytes.len());
        self.inner.append(&bytes[..landed])?;
        match error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let (landed, error) = self.faults.on_write(bytes.len());
        self.inner.write_at(offset, &bytes[..landed])?;
        match error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.faults.on_sync()?;
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}
