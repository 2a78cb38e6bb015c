//! The witness of a simulated ledger, and the rollback it exists to catch.
//!
//! A [`MemWitness`] keeps the heads the log published off the simulated
//! disk, as an embedder keeps them in its own database: no power loss
//! rolls it back; [`SimWitness`] is a ledger's way to it. [`assert_rollback_refused`] restores a disk from an
//! older snapshot, as a VM or disk snapshot restore does, and checks that
//! opening it against the witness is refused.

use std::io;
use std::sync::Arc;

use payonce::{Config, Ledger, LedgerError};
use payonce_log::chain::Head;
use payonce_log::{HeadSource, LogError, MemStorage, MemWitness, Witness};

use super::checks::records;
use super::disk::Disk;

/// A ledger's way to the witness, a [`MemWitness`] kept off the simulated
/// disk. Once its disk has lost power, the process is gone: what it
/// publishes then never arrives (the simulated process runs on until the
/// harness drops it).
#[derive(Debug)]
pub struct SimWitness {
    store: MemWitness,
    disk: Disk,
}

impl SimWitness {
    /// The witness a ledger writing to `disk` publishes to `store` through.
    pub fn on(store: &MemWitness, disk: &Disk) -> SimWitness {
        SimWitness {
            store: store.clone(),
            disk: disk.clone(),
        }
    }
}

impl Witness for SimWitness {
    /// Keeps `head`, checking that the log publishes heads in order: a
    /// head behind the last would let a rollback to it pass.
    fn publish(&self, head: Head) -> io::Result<()> {
        if self.disk.dead() {
            return Ok(());
        }
        if let Some(before) = self.store.head() {
            assert!(
                head.seq > before.seq || head == before,
                "the log published head {head} after {before}"
            );
        }
        self.store.publish(head)
    }

    fn last(&self) -> io::Result<Option<Head>> {
        self.store.last()
    }
}

/// Restores the disk from `snapshot`, taken when the log ended earlier,
/// and opens it with a witness holding `witness`, the newest head the
/// ledger published since: when the snapshot ends before that head, the
/// open must be refused, naming the witness and its head. `config` is the
/// ledger's own. Returns whether the snapshot was behind (and refused).
///
/// # Panics
/// When a snapshot behind the witness opens, or is refused for another
/// reason.
pub fn assert_rollback_refused(
    snapshot: &MemStorage,
    witness: Option<Head>,
    config: Config,
    context: &str,
) -> bool {
    let Some(head) = witness else {
        return false;
    };
    // Records are numbered from 1: the snapshot ends at the count it holds.
    if records(snapshot, &config.log, context).len() as u64 >= head.seq {
        return false;
    }
    // A copy: a restore wrongly accepted must not write to the snapshot
    // kept, nor publish to the world's witness.
    let restored = Arc::new(snapshot.crash(payonce_log::CrashMode::DropUnsynced, 0));
    let config = Config {
        witness: Some(Arc::new(MemWitness::holding(head))),
        ..config
    };
    match Ledger::open_on(restored, config) {
        Ok(_) => panic!("{context}: a disk restored from before head {head} opens"),
        Err(LedgerError::Log(LogError::MissingHead { from, expected, .. }))
            if from == HeadSource::Witness && expected == head => {}
        Err(other) => panic!(
            "{context}: a disk restored from before head {head} is refused for another reason: {other}"
        ),
    }
    true
}
