//! A [`DirSnapshots`]' runs: files `{number:020}.run` beside its
//! snapshots, written as `.run.tmp`, synced, renamed and the directory
//! synced, so a crash leaves a run whole or only a temporary file, which
//! no reader reads and the next prune removes. Numbers rise: one past the
//! highest held, temporary files included.

use std::sync::Arc;

use payonce_log::{StorageFile, StorageRead};
use payonce_runs::{RunError, RunSource};

use super::store::DirSnapshots;
use crate::run_store::{RunOut, RunStore, missing};
use crate::snapshot_format::SnapshotError;

const SUFFIX: &str = ".run";
/// A run being written.
const TMP_SUFFIX: &str = ".run.tmp";
/// A run set aside: found damaged after an opening believed it. Kept for a
/// person to look at, never read again.
const REFUSED_SUFFIX: &str = ".run.refused";

fn file_name(number: u64) -> String {
    format!("{number:020}{SUFFIX}")
}

/// The number a run's file name (or its temporary name) holds.
fn parse_name(name: &str) -> Option<u64> {
    let digits = name
        .strip_suffix(TMP_SUFFIX)
        .or_else(|| name.strip_suffix(SUFFIX))?;
    (digits.len() == 20 && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A run being written into a [`DirSnapshots`].
struct DirOut<'a> {
    store: &'a DirSnapshots,
    number: u64,
    file: Box<dyn StorageFile>,
}

impl RunOut for DirOut<'_> {
    fn append(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        let tmp = format!("{:020}{TMP_SUFFIX}", self.number);
        self.file
            .append(bytes)
            .map_err(|error| self.store.io("write", &tmp, error))
    }

    fn finish(mut self: Box<Self>) -> Result<u64, SnapshotError> {
        let tmp = format!("{:020}{TMP_SUFFIX}", self.number);
        let storage = &self.store.storage;
        self.file
            .sync_data()
            .map_err(|error| self.store.io("sync", &tmp, error))?;
        storage
            .rename(&tmp, &file_name(self.number))
            .map_err(|error| self.store.io("rename", &tmp, error))?;
        storage
            .sync_dir()
            .map_err(|error| self.store.io("sync directory", "", error))?;
        Ok(self.number)
    }
}

/// A run file held open: it stays readable after a prune removes its name.
#[derive(Debug)]
struct HeldRun {
    handle: Box<dyn StorageRead>,
}

impl RunSource for HeldRun {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), RunError> {
        into.clear();
        self.handle
            .read_at(offset, len, into)
            .map_err(|error| RunError::read_failed(offset, len as u64, error))
    }

    fn byte_len(&self) -> u64 {
        self.handle.byte_len()
    }
}

impl RunStore for DirSnapshots {
    fn create_run(&self) -> Result<Box<dyn RunOut + '_>, SnapshotError> {
        self.make_dir()?;
        let number = self
            .names()?
            .iter()
            .filter_map(|name| parse_name(name))
            .max()
            .map_or(1, |highest| highest + 1);
        let tmp = format!("{number:020}{TMP_SUFFIX}");
        let file = self
            .storage
            .create_new(&tmp)
            .map_err(|error| self.io("create", &tmp, error))?;
        Ok(Box::new(DirOut {
            store: self,
            number,
            file,
        }))
    }

    fn open_run(&self, number: u64) -> Result<Arc<dyn RunSource>, SnapshotError> {
        let name = file_name(number);
        match self.storage.open_read(&name) {
            Ok(handle) => Ok(Arc::new(HeldRun { handle })),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(missing(number)),
            Err(error) => Err(self.io("open", &name, error)),
        }
    }

    /// Checking every block before the first decision would make an
    /// opening read every settled pair ever written: its time would grow
    /// with the history. Each block is checked whenever a name reads it,
    /// and a run the pass finds damaged is set aside ([`Self::aside_hook`]).
    fn checked_in_background(&self) -> bool {
        true
    }

    fn list_runs(&self) -> Result<Vec<u64>, SnapshotError> {
        let mut numbers: Vec<u64> = self
            .names()?
            .iter()
            .filter(|name| name.ends_with(SUFFIX))
            .filter_map(|name| parse_name(name))
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    fn aside_hook(&self, number: u64) -> Option<super::SetRunAside> {
        let storage = Arc::clone(&self.storage);
        Some(Arc::new(move |error: &SnapshotError| {
            let name = file_name(number);
            let aside = format!("{number:020}{REFUSED_SUFFIX}");
            let renamed = storage
                .rename(&name, &aside)
                .and_then(|()| storage.sync_dir());
            match renamed {
                Ok(()) => tracing::error!(run = number, %error, aside, "set a damaged run aside"),
                Err(rename) => {
                    tracing::error!(run = number, %error, %rename, "could not set a damaged run aside")
                }
            }
        }))
    }

    fn remove_run(&self, number: u64) -> Result<(), SnapshotError> {
        let name = file_name(number);
        self.storage
            .remove(&name)
            .and_then(|()| self.storage.sync_dir())
            .map_err(|error| self.io("remove", &name, error))
    }
}
