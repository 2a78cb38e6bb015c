//! How a ledger is opened, and what a new withdrawal needs.

use std::sync::Arc;

use payonce_log::{LogConfig, Witness};
use payonce_model::{Actor, Amount, Currency, Destination};

use crate::epoch::{Epochs, RandomEpochs};
use crate::snapshot::{SnapshotPolicy, SnapshotStore};
use crate::time::{Clock, SystemClock};

/// How a ledger is opened.
#[derive(Debug, Clone)]
pub struct Config {
    /// The log's settings, durability among them. The default is durable,
    /// writes over zeros written ahead of the records, and checkpoints its
    /// durable head at least every second (docs/log-format.md).
    pub log: LogConfig,
    /// Keeps the log's newest head somewhere its disk cannot roll back
    /// (the embedder's database, another disk): opening refuses a log
    /// behind it, as a restored disk snapshot is. None by default
    /// (docs/operations.md, "Heads").
    pub witness: Option<Arc<dyn Witness>>,
    /// Accept withdrawal ids this ledger did not mint. Off by default: this
    /// weakens exclusivity, since a client that mints ids can mint a second
    /// one for the same money.
    pub accept_foreign_ids: bool,
    /// Append refusals to the log as audit events (on by default). They
    /// change no projection and are not synced before returning.
    pub log_refusals: bool,
    /// Where events get their time.
    pub clock: Arc<dyn Clock>,
    /// Where each opening draws the epoch its minted ids carry. Random by
    /// default; `CountingEpochs` makes ids predictable, for tests.
    pub epochs: Arc<dyn Epochs>,
    /// Opening replays a log whose segment files hold at least this many
    /// bytes on two threads, a shorter one on the opening thread, where
    /// starting a thread costs more than it saves. Default
    /// [`REPLAY_THREAD_MIN_LEN`]; 0 always uses two threads, `u64::MAX`
    /// never. Either way replay decides, and refuses, alike.
    pub replay_thread_min_len: u64,
    /// When the ledger takes snapshots of its projections, so that opening
    /// replays only the events after the newest (docs/snapshot-format.md):
    /// by default every [`crate::SNAPSHOT_EVENTS`] events or
    /// [`crate::SNAPSHOT_INTERVAL`], and at a clean close.
    pub snapshots: SnapshotPolicy,
    /// Where its snapshots are kept. `None`, the default, keeps a file
    /// ledger's in the `snapshots/` directory beside its log when it is
    /// opened by path ([`crate::Ledger::open`], [`crate::Ledger::open_with`]),
    /// and none for a ledger opened on other storage
    /// ([`crate::Ledger::open_on`]). Opening uses the newest one the log
    /// vouches for whatever [`Config::snapshots`] says.
    pub snapshot_store: Option<Arc<dyn SnapshotStore>>,
    /// Bytes of memory the state may take, whatever the history: its live
    /// slots (keys in flight, holds, running sends, and settled pairs no
    /// run holds yet or brought back lately), the cache of blocks read from
    /// the runs of settled pairs, and those runs' filters. Settled pairs
    /// beyond it stay in their runs (docs/snapshot-format.md) and are read
    /// back when a decision or a query names them. Default
    /// [`MEMORY_BUDGET`]; at least [`MEMORY_BUDGET_MIN`].
    pub memory_budget: u64,
    /// Sets settled pairs apart once opened, and keeps them apart: every
    /// key whose outcome says what the rail did, with no send running and
    /// no funds held, and the withdrawal it holds, are written into a run
    /// at opening, and leave memory as soon as a run holds them, coming
    /// back only while a decision or a query names them. Off by default,
    /// when only [`Config::memory_budget`] makes them leave. Every answer
    /// is the same either way.
    pub set_apart_settled: bool,
    /// Whether a thread of the ledger's own writes the settled pairs the
    /// budget asks out of memory into runs, and merges runs (the
    /// default). Off, those pairs are written on the thread of the
    /// decision that found them crowding the budget, and runs are merged
    /// only by [`Ledger::merge_runs`](crate::Ledger::merge_runs): what a
    /// deterministic simulation needs.
    pub settle_in_background: bool,
}

/// Default for [`Config::memory_budget`]: 256 MiB.
pub const MEMORY_BUDGET: u64 = 256 << 20;

/// The smallest [`Config::memory_budget`] taken: a smaller one is raised
/// to it. Keys in flight, holds and running sends stay in memory whatever
/// the budget.
pub const MEMORY_BUDGET_MIN: u64 = 4 << 20;

/// Default for [`Config::replay_thread_min_len`]: 4 MiB, about 20,000
/// events.
pub const REPLAY_THREAD_MIN_LEN: u64 = 4 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            log: LogConfig::default(),
            witness: None,
            accept_foreign_ids: false,
            log_refusals: true,
            clock: Arc::new(SystemClock),
            epochs: Arc::new(RandomEpochs),
            replay_thread_min_len: REPLAY_THREAD_MIN_LEN,
            snapshots: SnapshotPolicy::default(),
            snapshot_store: None,
            memory_budget: MEMORY_BUDGET,
            set_apart_settled: false,
            settle_in_background: true,
        }
    }
}

/// A new withdrawal for [`Ledger::create`](crate::Ledger::create):
/// everything but the id, which the ledger mints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWithdrawal {
    /// How much.
    pub amount: Amount,
    /// In what.
    pub currency: Currency,
    /// To where.
    pub destination: Destination,
    /// Who asked.
    pub requested_by: Actor,
}
