//! A witness: somewhere outside the log's disk that keeps the newest head
//! the log published, so a log rolled back with its disk (a restored VM or
//! disk snapshot, a copy of an old backup) is refused rather than trusted.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use crate::chain::Head;

/// Keeps the newest head of one log somewhere the log's disk cannot roll
/// back: the embedder's own database, another disk, another machine.
///
/// The log publishes a head each time it writes a checkpoint (at least
/// every `checkpoint_interval`, at every `checkpoint_records`, at a clean
/// close), in increasing order of `seq`, from whichever thread wrote the
/// checkpoint. Opening for writing reads the last head and refuses a log
/// that does not contain it.
pub trait Witness: Send + Sync + fmt::Debug {
    /// Records `head` as the log's newest. An error is logged and counted
    /// ([`crate::LogStats::witness_failures`]); the log goes on, and the
    /// witness keeps an older head, which still bounds a rollback.
    fn publish(&self, head: Head) -> io::Result<()>;

    /// The last head published, `None` if none ever was. An error refuses
    /// the open: a log whose witness cannot be read is not checked.
    fn last(&self) -> io::Result<Option<Head>>;
}

/// A witness in memory, for tests and simulations, as [`crate::MemStorage`]
/// is a disk in memory: clones share it. It keeps every head published, in
/// the order they came.
#[derive(Debug, Clone, Default)]
pub struct MemWitness {
    heads: Arc<Mutex<Vec<Head>>>,
}

impl MemWitness {
    /// A witness that was never published to.
    pub fn new() -> MemWitness {
        MemWitness::default()
    }

    /// A witness whose last head is `head`, as one kept from earlier.
    pub fn holding(head: Head) -> MemWitness {
        MemWitness {
            heads: Arc::new(Mutex::new(vec![head])),
        }
    }

    /// The last head published, if any.
    pub fn head(&self) -> Option<Head> {
        self.lock().last().copied()
    }

    /// Every head published, oldest first.
    pub fn published(&self) -> Vec<Head> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Head>> {
        self.heads.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Witness for MemWitness {
    fn publish(&self, head: Head) -> io::Result<()> {
        self.lock().push(head);
        Ok(())
    }

    fn last(&self) -> io::Result<Option<Head>> {
        Ok(self.head())
    }
}
