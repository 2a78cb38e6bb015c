//! A witness: somewhere outside the log's disk that keeps the newest head
//! the log published, so a log rolled back with its disk (a restored VM or
//! disk snapshot, a copy of an old backup) is refused rather than trusted.

use std::fmt;
use std::io;

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
