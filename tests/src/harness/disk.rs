//! The simulated disk under a ledger: a [`MemStorage`] (with its injected
//! faults) behind a counting wrapper that can pull the plug after any
//! storage operation, and that notices every fault the storage injects.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use payonce_log::{CrashMode, Fault, MemStorage, Storage, StorageFile, StorageLock, StorageRead};

/// A power loss planned for later: after `after` more state-changing
/// storage operations, the disk is copied as the power loss leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashPlan {
    /// Operations (writes, syncs, creates, renames, removes, truncations,
    /// directory syncs) to let through first; 0 crashes after the next one.
    pub after: u64,
    /// What the power loss does to unsynced bytes.
    pub mode: CrashMode,
    /// Drives which unsynced bytes and directory entries survive.
    pub seed: u64,
}

#[derive(Debug, Default)]
struct Plan {
    ops: u64,
    crash: Option<CrashPlan>,
    /// What the disk held when the plug was pulled: set once, never cleared.
    image: Option<MemStorage>,
    faults_fired: u64,
    /// Errors that were not injected: a bug in whoever asked.
    unexpected: Vec<String>,
}

#[derive(Debug)]
struct Shared {
    mem: MemStorage,
    plan: Mutex<Plan>,
}

/// A disk: clones share it. See the module documentation.
#[derive(Debug, Clone)]
pub struct Disk {
    shared: Arc<Shared>,
}

impl Disk {
    /// A disk holding `mem`.
    pub fn new(mem: MemStorage) -> Disk {
        Disk {
            shared: Arc::new(Shared {
                mem,
                plan: Mutex::new(Plan::default()),
            }),
        }
    }

    fn plan(&self) -> MutexGuard<'_, Plan> {
        self.shared
            .plan
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The storage underneath.
    pub fn mem(&self) -> &MemStorage {
        &self.shared.mem
    }

    /// Arms `fault` on the storage underneath.
    pub fn arm(&self, fault: Fault) {
        self.shared.mem.faults().arm(fault);
    }

    /// Disarms every fault (the operator freed space, replaced the disk...).
    pub fn disarm(&self) {
        self.shared.mem.faults().disarm_all();
    }

    /// Plans a power loss; replaces an earlier plan that has not fired.
    pub fn plan_crash(&self, crash: CrashPlan) {
        let mut plan = self.plan();
        if plan.image.is_none() {
            plan.crash = Some(crash);
        }
    }

    /// Whether the plug was pulled: from then on, nothing the process does
    /// reaches the world.
    pub fn dead(&self) -> bool {
        self.plan().image.is_some()
    }

    /// What the disk held when the plug was pulled.
    pub fn image(&self) -> Option<MemStorage> {
        self.plan().image.clone()
    }

    /// Pulls the plug now.
    pub fn crash_now(&self, mode: CrashMode, seed: u64) {
        let mut plan = self.plan();
        if plan.image.is_none() {
            plan.image = Some(self.shared.mem.crash(mode, seed));
            plan.crash = None;
        }
    }

    /// Faults the storage injected so far.
    pub fn faults_fired(&self) -> u64 {
        self.plan().faults_fired
    }

    /// State-changing storage operations so far.
    pub fn ops(&self) -> u64 {
        self.plan().ops
    }

    /// Errors the storage returned that were not injected faults.
    pub fn unexpected_errors(&self) -> Vec<String> {
        self.plan().unexpected.clone()
    }

    /// Counts one state-changing operation (already done) and pulls the
    /// plug if the plan says so; notes an error it returned.
    fn after_op<T>(&self, result: io::Result<T>) -> io::Result<T> {
        let mut plan = self.plan();
        plan.ops += 1;
        if let Err(error) = &result {
            let injected = error.kind() == io::ErrorKind::StorageFull
                || error.to_string().starts_with("injected fault");
            if injected {
                plan.faults_fired += 1;
            } else {
                plan.unexpected.push(error.to_string());
            }
        }
        if plan.image.is_none()
            && let Some(crash) = plan.crash
        {
            if crash.after == 0 {
                plan.image = Some(self.shared.mem.crash(crash.mode, crash.seed));
                plan.crash = None;
            } else {
                plan.crash = Some(CrashPlan {
                    after: crash.after - 1,
                    ..crash
                });
            }
        }
        result
    }
}

impl Storage for Disk {
    fn describe(&self, name: &str) -> String {
        self.shared.mem.describe(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.shared.mem.list()
    }
    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.after_op(self.shared.mem.create_new(name))?;
        Ok(Box::new(DiskFile {
            disk: self.clone(),
            inner,
        }))
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.shared.mem.open_append(name)?;
        Ok(Box::new(DiskFile {
            disk: self.clone(),
            inner,
        }))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.after_op(self.shared.mem.rename(from, to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.after_op(self.shared.mem.remove(name))
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.after_op(self.shared.mem.sync_dir())
    }
    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
        self.shared.mem.try_lock()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>> {
        self.shared.mem.open_read(name)
    }
}

#[derive(Debug)]
struct DiskFile {
    disk: Disk,
    inner: Box<dyn StorageFile>,
}

impl StorageFile for DiskFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let result = self.inner.append(bytes);
        self.disk.after_op(result)
    }
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let result = self.inner.write_at(offset, bytes);
        self.disk.after_op(result)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let result = self.inner.sync_data();
        self.disk.after_op(result)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let result = self.inner.set_len(len);
        self.disk.after_op(result)
    }
}
