//! The checkpoint: a durable head kept outside the records, in two
//! fixed-size checksummed slots written in turn, so a log that ends before
//! it (a cut newest segment, a lost batch that was acknowledged) is refused
//! rather than trusted. docs/log-format.md, "The checkpoint", has the bytes.

use std::io;

use crate::chain::Head;
use crate::config::Durability;
use crate::error::{Damage, LogError, io_error};
use crate::format::{CHECKPOINT_FILE, CHECKPOINT_LEN, CHECKPOINT_SLOT_STRIDE, Slot};
use crate::storage::{Storage, StorageFile};

/// The temporary name of a checkpoint file being created.
pub(crate) const CHECKPOINT_TMP: &str = "CHECKPOINT.tmp";

/// What the checkpoint file of a log holds: the newest whole slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) slot: Slot,
    /// Which slot it is in (0 or 1).
    pub(crate) index: u32,
}

/// Reads the checkpoint in `storage`: `Ok(None)` if the file does not
/// exist; refused if neither slot is whole (a torn write reaches one slot
/// only). Which log it belongs to is [`check_log`]'s to check.
pub(crate) fn read(storage: &dyn Storage) -> Result<Option<Found>, LogError> {
    let describe = storage.describe(CHECKPOINT_FILE);
    let bytes = match storage.read_range(CHECKPOINT_FILE, 0, CHECKPOINT_LEN) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("read", &describe, error)),
    };
    let slots = [0u32, 1].map(|index| {
        let start = index as usize * CHECKPOINT_SLOT_STRIDE;
        bytes
            .get(start..)
            .and_then(|slot| Slot::decode(slot, index))
            .map(|slot| Found { slot, index })
    });
    let newest = slots
        .into_iter()
        .flatten()
        .max_by_key(|found| found.slot.generation);
    match newest {
        Some(found) => Ok(Some(found)),
        None => Err(LogError::Corrupt {
            file: describe,
            offset: 0,
            seq: 0,
            damage: Damage::Checkpoint,
            expected: "a whole checkpoint slot at byte 0 or 4096".to_owned(),
            found: format!("{} bytes, neither slot whole", bytes.len()),
        }),
    }
}

/// Refuses a checkpoint `found` of a log other than `log_id`.
pub(crate) fn check_log(storage: &dyn Storage, found: &Found, log_id: u64) -> Result<(), LogError> {
    if found.slot.log_id != log_id {
        return Err(LogError::Corrupt {
            file: storage.describe(CHECKPOINT_FILE),
            offset: u64::from(found.index) * CHECKPOINT_SLOT_STRIDE as u64,
            seq: found.slot.head.seq,
            damage: Damage::LogId,
            expected: format!("log id {log_id:#018x}"),
            found: format!("log id {:#018x}", found.slot.log_id),
        });
    }
    Ok(())
}

/// The writer's side of the checkpoint file: which slot is next and the
/// head the file holds.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    file: Box<dyn StorageFile>,
    log_id: u64,
    durability: Durability,
    /// The newest slot written.
    last: Found,
    /// Checkpoints written since the log was opened.
    pub(crate) written: u64,
}

impl Checkpointer {
    /// The checkpoint file of `storage`, whose newest slot is `last`.
    pub(crate) fn open(
        storage: &dyn Storage,
        log_id: u64,
        durability: Durability,
        last: Found,
    ) -> Result<Checkpointer, LogError> {
        let file = storage
            .open_append(CHECKPOINT_FILE)
            .map_err(|error| io_error("open", &storage.describe(CHECKPOINT_FILE), error))?;
        Ok(Checkpointer {
            file,
            log_id,
            durability,
            last,
            written: 0,
        })
    }

    /// Creates the checkpoint file holding `head` in both slots: under a
    /// temporary name, synced, renamed into place, the directory synced.
    pub(crate) fn create(
        storage: &dyn Storage,
        log_id: u64,
        durability: Durability,
        head: Head,
    ) -> Result<Checkpointer, LogError> {
        let tmp = storage.describe(CHECKPOINT_TMP);
        let always = durability == Durability::Always;
        if storage
            .list()
            .is_ok_and(|names| names.iter().any(|name| name == CHECKPOINT_TMP))
        {
            storage
                .remove(CHECKPOINT_TMP)
                .map_err(|error| io_error("remove", &tmp, error))?;
        }
        let mut file = storage
            .create_new(CHECKPOINT_TMP)
            .map_err(|error| io_error("create", &tmp, error))?;
        let mut bytes = vec![0u8; CHECKPOINT_LEN];
        let first = Slot {
            log_id,
            generation: 0,
            head,
        };
        bytes[..first.encode(0).len()].copy_from_slice(&first.encode(0));
        let second = Slot {
            generation: 1,
            ..first
        };
        bytes[CHECKPOINT_SLOT_STRIDE..].copy_from_slice(&second.encode(1));
        file.append(&bytes)
            .map_err(|error| io_error("write", &tmp, error))?;
        if always {
            file.sync_data()
                .map_err(|error| io_error("fdatasync", &tmp, error))?;
        }
        storage
            .rename(CHECKPOINT_TMP, CHECKPOINT_FILE)
            .map_err(|error| io_error("rename", &tmp, error))?;
        if always {
            storage
                .sync_dir()
                .map_err(|error| io_error("sync directory", &storage.describe(""), error))?;
        }
        tracing::info!(file = %storage.describe(CHECKPOINT_FILE), %head, "created the checkpoint");
        Ok(Checkpointer {
            file,
            log_id,
            durability,
            last: Found {
                slot: second,
                index: 1,
            },
            written: 0,
        })
    }

    /// The head the checkpoint holds.
    pub(crate) fn head(&self) -> Head {
        self.last.slot.head
    }

    /// Writes `head`, which must be durable, into the older slot and syncs
    /// it. Does nothing for a head the checkpoint already holds or passed.
    pub(crate) fn write(&mut self, storage: &dyn Storage, head: Head) -> Result<bool, LogError> {
        if head.seq <= self.last.slot.head.seq {
            return Ok(false);
        }
        let newest = self.last.index;
        match self.last.slot.generation.checked_add(1) {
            Some(generation) => self.put(storage, 1 - newest, generation, head)?,
            None => {
                // Only an edit reaches the last generation. Generations
                // start again: the older slot at 0, which loses to the
                // newest until that one holds 1, so a crash in between
                // leaves a whole slot of one head or the other.
                self.put(storage, 1 - newest, 0, head)?;
                self.put(storage, newest, 1, head)?;
            }
        }
        self.written += 1;
        Ok(true)
    }

    /// Writes slot `index` at `generation` holding `head`, and syncs it.
    fn put(
        &mut self,
        storage: &dyn Storage,
        index: u32,
        generation: u64,
        head: Head,
    ) -> Result<(), LogError> {
        let describe = || storage.describe(CHECKPOINT_FILE);
        let slot = Slot {
            log_id: self.log_id,
            generation,
            head,
        };
        let offset = u64::from(index) * CHECKPOINT_SLOT_STRIDE as u64;
        self.file
            .write_at(offset, &slot.encode(index))
            .map_err(|error| io_error("write", &describe(), error))?;
        if self.durability == Durability::Always {
            self.file
                .sync_data()
                .map_err(|error| io_error("fdatasync", &describe(), error))?;
        }
        self.last = Found { slot, index };
        Ok(())
    }
}
