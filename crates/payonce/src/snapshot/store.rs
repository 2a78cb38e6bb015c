//! Where snapshots are kept: [`SnapshotStore`], and [`DirSnapshots`], a
//! directory of files (`snapshots/` beside a file ledger's segments, or
//! any `payonce_log::Storage`, the fault-injecting one included).
//!
//! A file is written under a temporary name, synced, renamed, and the
//! directory synced, so a crash at any step leaves either the old set of
//! snapshots or the new one, and at worst a temporary file, which is
//! never read and is removed by the next prune.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use payonce_log::{FsStorage, Storage, StorageRead};

use crate::run_store::RunStore;
use crate::snapshot_format::SnapshotError;
use crate::snapshot_format::SnapshotFile;

/// The directory beside a file ledger's segments that holds its snapshots.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// How many snapshots a store keeps: the newest two, so the one before the
/// newest is there if the newest is refused.
pub const SNAPSHOTS_KEPT: usize = 2;

/// A snapshot a store holds, by the seq of its state's last event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    /// The last event its state applied.
    pub seq: u64,
    /// Where it is, for a person: a file name, a table's row.
    pub name: String,
}

/// Where a ledger keeps its snapshots, and the runs of settled pairs their
/// manifests name ([`RunStore`]). Every method may block on storage.
pub trait SnapshotStore: RunStore + Send + Sync + fmt::Debug {
    /// Every snapshot held (not those set aside), newest (highest seq) first.
    fn list(&self) -> Result<Vec<StoredSnapshot>, SnapshotError>;
    /// The bytes of `snapshot`, whole.
    fn read(&self, snapshot: &StoredSnapshot) -> Result<Vec<u8>, SnapshotError>;
    /// `snapshot`, to be read a piece at a time, where this store can: an
    /// opening then loads it without holding all of its bytes in memory.
    /// `None` (the default): an opening reads it whole
    /// ([`SnapshotStore::read`]).
    fn open(
        &self,
        snapshot: &StoredSnapshot,
    ) -> Result<Option<Box<dyn SnapshotFile + '_>>, SnapshotError> {
        let _ = snapshot;
        Ok(None)
    }
    /// Stores `bytes`, the snapshot of the state after event `seq`, durably
    /// and whole or not at all.
    fn write(&self, seq: u64, bytes: &[u8]) -> Result<StoredSnapshot, SnapshotError>;
    /// Sets `snapshot` aside: it is no longer listed, and kept for a
    /// person to look at. Returns where it is now.
    fn set_aside(&self, snapshot: &StoredSnapshot) -> Result<String, SnapshotError>;
    /// Removes every snapshot but the newest `kept` (never one set aside),
    /// and what a write a crash cut short left; returns those removed. The
    /// runs no kept snapshot names are removed after
    /// (`crate::snapshot::prune_runs`).
    fn prune(&self, kept: usize) -> Result<Vec<StoredSnapshot>, SnapshotError>;
}

/// Snapshots as files in one directory: `{seq:020}.snapshot`, written as
/// `.snapshot.tmp` first; set aside as `.snapshot.refused` (then
/// `.refused.1`, ...).
#[derive(Debug, Clone)]
pub struct DirSnapshots {
    pub(super) storage: Arc<dyn Storage>,
    /// The directory, for a store on the file system: made (and its parent
    /// synced) before the first write.
    path: Option<PathBuf>,
}

const SUFFIX: &str = ".snapshot";
const TMP_SUFFIX: &str = ".snapshot.tmp";
const REFUSED_SUFFIX: &str = ".snapshot.refused";
/// How every temporary name in the directory ends, a snapshot's
/// (`.snapshot.tmp`) and a run's (`.run.tmp`) alike: what a crash
/// leaves behind and a prune removes.
const DEBRIS_SUFFIX: &str = ".tmp";

impl DirSnapshots {
    /// The snapshots of the file ledger in `ledger_dir`: its `snapshots/`
    /// directory, made when the first snapshot is written.
    pub fn beside(ledger_dir: &Path) -> Self {
        let path = ledger_dir.join(SNAPSHOTS_DIR);
        DirSnapshots {
            storage: Arc::new(FsStorage::new(&path)),
            path: Some(path),
        }
    }

    /// Snapshots in `storage`, a directory that exists (or a store in
    /// memory).
    pub fn on(storage: Arc<dyn Storage>) -> Self {
        DirSnapshots {
            storage,
            path: None,
        }
    }

    pub(super) fn io(&self, op: &'static str, name: &str, source: io::Error) -> SnapshotError {
        SnapshotError::Io {
            op,
            file: self.storage.describe(name),
            source,
        }
    }

    /// Every file name in the directory; none for a directory not made yet.
    pub(super) fn names(&self) -> Result<Vec<String>, SnapshotError> {
        match self.storage.list() {
            Ok(names) => Ok(names),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(error) => Err(self.io("list", "", error)),
        }
    }

    /// Makes the directory, and makes its entry in the ledger's directory
    /// durable, if it is on the file system and missing.
    pub(super) fn make_dir(&self) -> Result<(), SnapshotError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        if path.is_dir() {
            return Ok(());
        }
        let made = std::fs::create_dir_all(path).and_then(|()| {
            let parent = path.parent().unwrap_or(Path::new("."));
            std::fs::File::open(parent)?.sync_all()
        });
        made.map_err(|error| self.io("make directory", "", error))
    }
}

fn file_name(seq: u64) -> String {
    format!("{seq:020}{SUFFIX}")
}

/// The seq a snapshot's file name holds.
fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl SnapshotStore for DirSnapshots {
    fn list(&self) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        let mut found: Vec<StoredSnapshot> = self
            .names()?
            .into_iter()
            .filter_map(|name| {
                Some(StoredSnapshot {
                    seq: parse_name(&name)?,
                    name,
                })
            })
            .collect();
        found.sort_by_key(|snapshot| std::cmp::Reverse(snapshot.seq));
        Ok(found)
    }

    fn read(&self, snapshot: &StoredSnapshot) -> Result<Vec<u8>, SnapshotError> {
        let len = self
            .storage
            .len(&snapshot.name)
            .map_err(|error| self.io("stat", &snapshot.name, error))?;
        if len > super::SNAPSHOT_LEN_MAX {
            return Err(SnapshotError::TooLong {
                len,
                max: super::SNAPSHOT_LEN_MAX,
            });
        }
        self.storage
            .read(&snapshot.name, super::SNAPSHOT_LEN_MAX)
            .map_err(|error| self.io("read", &snapshot.name, error))
    }

    fn open(
        &self,
        snapshot: &StoredSnapshot,
    ) -> Result<Option<Box<dyn SnapshotFile + '_>>, SnapshotError> {
        let handle = (self.storage)
            .open_read(&snapshot.name)
            .map_err(|error| self.io("open", &snapshot.name, error))?;
        Ok(Some(Box::new(HeldFile {
            handle: Arc::from(handle),
            file: self.storage.describe(&snapshot.name),
        })))
    }

    fn write(&self, seq: u64, bytes: &[u8]) -> Result<StoredSnapshot, SnapshotError> {
        self.make_dir()?;
        let name = file_name(seq);
        let tmp = format!("{seq:020}{TMP_SUFFIX}");
        // What a write a crash cut short left under this name goes first.
        if self.names()?.contains(&tmp) {
            self.storage
                .remove(&tmp)
                .map_err(|error| self.io("remove", &tmp, error))?;
        }
        let mut file = self
            .storage
            .create_new(&tmp)
            .map_err(|error| self.io("create", &tmp, error))?;
        file.append(bytes)
            .and_then(|()| file.sync_data())
            .map_err(|error| self.io("write", &tmp, error))?;
        drop(file);
        self.storage
            .rename(&tmp, &name)
            .map_err(|error| self.io("rename", &tmp, error))?;
        self.storage
            .sync_dir()
            .map_err(|error| self.io("sync directory", "", error))?;
        Ok(StoredSnapshot { seq, name })
    }

    fn set_aside(&self, snapshot: &StoredSnapshot) -> Result<String, SnapshotError> {
        let names = self.names()?;
        let base = format!("{:020}{REFUSED_SUFFIX}", snapshot.seq);
        let mut aside = base.clone();
        let mut n = 0u32;
        while names.contains(&aside) {
            n += 1;
            aside = format!("{base}.{n}");
        }
        self.storage
            .rename(&snapshot.name, &aside)
            .and_then(|()| self.storage.sync_dir())
            .map_err(|error| self.io("rename", &snapshot.name, error))?;
        Ok(self.storage.describe(&aside))
    }

    fn prune(&self, kept: usize) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        let old: Vec<StoredSnapshot> = self.list()?.into_iter().skip(kept).collect();
        let debris = self
            .names()?
            .into_iter()
            .filter(|name| name.ends_with(DEBRIS_SUFFIX));
        for name in old.iter().map(|old| old.name.clone()).chain(debris) {
            self.storage
                .remove(&name)
                .map_err(|error| self.io("remove", &name, error))?;
        }
        if !old.is_empty() {
            self.storage
                .sync_dir()
                .map_err(|error| self.io("sync directory", "", error))?;
        }
        Ok(old)
    }
}

/// A snapshot file of a [`DirSnapshots`] held open, read a piece at a
/// time: it stays readable after a newer snapshot prunes its name.
#[derive(Clone)]
struct HeldFile {
    handle: Arc<dyn StorageRead>,
    /// Its path, for a person.
    file: String,
}

impl SnapshotFile for HeldFile {
    fn byte_len(&self) -> u64 {
        self.handle.byte_len()
    }

    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        self.handle
            .read_at(offset, len, into)
            .map_err(|source| SnapshotError::Io {
                op: "read",
                file: self.file.clone(),
                source,
            })
    }

    fn lasting(&self, _from: u64) -> Option<Arc<dyn SnapshotFile>> {
        Some(Arc::new(self.clone()))
    }
}
