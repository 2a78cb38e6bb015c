//! Taking snapshots of a ledger's projections, off the hot path: a thread
//! of the ledger's own takes one every so many events or so much time
//! ([`SnapshotPolicy`]), the last handle's drop takes one at a clean
//! close, and [`Ledger::snapshot`] takes one on demand.
//!
//! Taking one holds the ledger's lock only to copy the state (a clone of
//! its arrays); waiting for the events it holds to be durable, encoding
//! and writing happen after, on the taking thread. The snapshot names the
//! log's durable head once its events are durable, a head at or after its
//! last event that the log holds, which is what the next opening checks
//! it against.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use payonce_log::Head;
use tracing::{info, warn};

use super::settle::adopt_run;
use super::{Inner, Ledger, Store};
use crate::error::LedgerError;
use crate::snapshot::{
    self, KEYS_PART_LEN, SNAPSHOTS_KEPT, SnapshotPolicy, SnapshotStore, StoredSnapshot, WrittenRun,
    prune_runs,
};
use crate::state::State;

/// What taking a snapshot does with the run it wrote, once the snapshot is
/// stored: the live state takes it, if it goes on; then the numbers of
/// every run the live state holds, which a prune keeps.
type Adopt<'a> = dyn FnOnce(Option<WrittenRun>, u64) -> Result<Option<Vec<u64>>, LedgerError> + 'a;

/// A ledger's snapshots: where they go, when, and the thread that takes
/// them.
pub(super) struct Snapshots {
    pub(super) store: Arc<dyn SnapshotStore>,
    policy: SnapshotPolicy,
    /// An append of an event at or past this seq wakes the thread;
    /// `u64::MAX` while none is due by count.
    due_seq: AtomicU64,
    signal: Mutex<Signal>,
    wake: Condvar,
    thread: Mutex<Option<(JoinHandle<()>, ThreadId)>>,
    /// The last snapshot taken; held while one is taken, so takers (the
    /// thread, a caller, the close) take one at a time.
    last: Mutex<Last>,
}

#[derive(Default)]
struct Signal {
    woken: bool,
    closing: bool,
}

/// The last snapshot this process took (or loaded).
struct Last {
    seq: u64,
    at: Instant,
    /// How long taking it took, lock and all: the next waits in proportion.
    took: Duration,
    stats: SnapshotStats,
}

/// What a ledger's snapshots cost since it was opened: for monitoring, and
/// for the benchmark that measures what taking them costs the submits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotStats {
    /// Snapshots taken.
    pub taken: u64,
    /// Snapshots that could not be taken (encoded, written, pruned).
    pub failed: u64,
    /// The longest the ledger's lock was held to copy the state.
    pub lock_held_max: Duration,
    /// Time spent taking them, all told.
    pub took_total: Duration,
}

/// What taking a snapshot did, for tracing and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotTaken {
    /// Where it was stored.
    pub stored: StoredSnapshot,
    /// The head of the log it names.
    pub head: Head,
    /// Its length in bytes.
    pub len: u64,
    /// How long the ledger's lock was held to copy the state: how long
    /// decisions waited for it.
    pub lock_held: Duration,
    /// How long taking it took, all told.
    pub took: Duration,
}

impl Snapshots {
    /// Snapshots into `store` under `policy`, the last one (or the one the
    /// ledger opened from) at `seq`.
    pub(super) fn new(store: Arc<dyn SnapshotStore>, policy: SnapshotPolicy, seq: u64) -> Self {
        let snapshots = Snapshots {
            store,
            policy,
            due_seq: AtomicU64::new(u64::MAX),
            signal: Mutex::new(Signal::default()),
            wake: Condvar::new(),
            thread: Mutex::new(None),
            last: Mutex::new(Last {
                seq,
                at: Instant::now(),
                took: Duration::ZERO,
                stats: SnapshotStats::default(),
            }),
        };
        snapshots.set_due(seq);
        snapshots
    }

    fn set_due(&self, seq: u64) {
        let due = match self.policy.events {
            0 => u64::MAX,
            events => seq.saturating_add(events),
        };
        self.due_seq.store(due, Ordering::Relaxed);
    }

    /// Called for every event appended: wakes the thread once one is due.
    #[inline]
    pub(super) fn appended(&self, seq: u64) {
        if seq >= self.due_seq.load(Ordering::Relaxed) {
            self.due_seq.store(u64::MAX, Ordering::Relaxed);
            self.signal(|signal| signal.woken = true);
        }
    }

    fn signal(&self, change: impl FnOnce(&mut Signal)) {
        if let Ok(mut signal) = self.signal.lock() {
            change(&mut signal);
            self.wake.notify_one();
        }
    }

    fn lock_last(&self) -> Option<MutexGuard<'_, Last>> {
        self.last.lock().ok()
    }

    /// Starts the thread that takes snapshots of `inner`'s ledger as the
    /// policy says; none if the policy takes none while running.
    pub(super) fn start(inner: &Arc<Inner>) {
        let Some(snapshots) = &inner.snapshots else {
            return;
        };
        if !snapshots.policy.is_running() {
            return;
        }
        let weak = Arc::downgrade(inner);
        let signalled = snapshots.clone();
        let spawned = thread::Builder::new()
            .name("payonce-snapshots".to_owned())
            .spawn(move || run(&signalled, &weak));
        match spawned {
            Ok(handle) => {
                let id = handle.thread().id();
                if let Ok(mut thread) = snapshots.thread.lock() {
                    *thread = Some((handle, id));
                }
            }
            Err(error) => {
                warn!(%error, "could not start the snapshot thread; no snapshots until reopened")
            }
        }
    }

    /// Stops the thread, after the snapshot at close if the policy takes
    /// one: what dropping the ledger's last handle does.
    pub(super) fn close(&self, store: &Store, state: Option<&State>) {
        self.stop();
        if self.policy.at_close
            && let Some(state) = state
        {
            let adopt = |new_run: Option<WrittenRun>, _| {
                let mut in_use = runs_of(state);
                in_use.extend(new_run.map(|(run, _)| run.number()));
                // The merging thread has stopped: no merge writes a run.
                Ok(Some(in_use))
            };
            let copy = || Ok(state.copy_for_snapshot());
            if let Err(error) = self.take(store, copy, state.last_seq(), Box::new(adopt)) {
                warn!(%error, "could not take the snapshot at close");
            }
        }
    }

    /// Stops the thread, once the snapshot it takes, if any, is taken:
    /// what dropping the last handle a caller holds does first.
    pub(super) fn stop(&self) {
        self.signal(|signal| signal.closing = true);
        let thread = self.thread.lock().ok().and_then(|mut thread| thread.take());
        if let Some((handle, id)) = thread
            && id != thread::current().id()
        {
            let _ = handle.join();
        }
    }

    /// Takes a snapshot of the state `copy` gives (under the ledger's lock,
    /// by the caller), unless none is newer than the last: `last_seq` is
    /// the state's last event, read before copying it.
    fn take(
        &self,
        store: &Store,
        copy: impl FnOnce() -> Result<State, LedgerError>,
        last_seq: u64,
        adopt: Box<Adopt<'_>>,
    ) -> Result<Option<SnapshotTaken>, LedgerError> {
        let Some(mut last) = self.lock_last() else {
            return Err(LedgerError::Poisoned);
        };
        if last_seq <= last.seq {
            return Ok(None);
        }
        let started = Instant::now();
        let state = copy()?;
        let lock_held = started.elapsed();
        let seq = state.last_seq();
        let written = durable_head(store, seq).and_then(|(log_id, head)| {
            let taken = snapshot::take(&state, log_id, head, KEYS_PART_LEN, &*self.store)?;
            drop(state);
            let stored = self.store.write(seq, &taken.bytes)?;
            let in_use = adopt(taken.new_run, seq)?;
            Ok((
                head,
                taken.bytes.len(),
                stored,
                self.prune(in_use.as_deref()),
            ))
        });
        let took = started.elapsed();
        last.stats.lock_held_max = last.stats.lock_held_max.max(lock_held);
        last.stats.took_total += took;
        let (head, len, stored, pruned) = match written {
            Ok(written) => written,
            Err(error) => {
                last.stats.failed += 1;
                return Err(error);
            }
        };
        last.stats.taken += 1;
        info!(
            snapshot = %stored.name,
            seq = stored.seq,
            %head,
            len,
            lock_held_us = lock_held.as_micros() as u64,
            took_ms = took.as_millis() as u64,
            pruned = pruned.len(),
            "took a snapshot"
        );
        last.seq = stored.seq;
        last.at = Instant::now();
        last.took = took;
        self.set_due(stored.seq);
        Ok(Some(SnapshotTaken {
            stored,
            head,
            len: len as u64,
            lock_held,
            took,
        }))
    }
}

impl Snapshots {
    /// Removes the snapshots older than the newest [`SNAPSHOTS_KEPT`], then
    /// the runs none of those kept names and the live state (`in_use`) does
    /// not hold; no run with `in_use` `None` (a merge is writing one no
    /// snapshot names yet). The snapshot is kept whether or not older ones
    /// can go (a database role without DELETE keeps their bytes).
    fn prune(&self, in_use: Option<&[u64]>) -> Vec<StoredSnapshot> {
        let pruned = self.store.prune(SNAPSHOTS_KEPT).unwrap_or_else(|error| {
            warn!(%error, "could not prune older snapshots");
            Vec::new()
        });
        if let Some(in_use) = in_use
            && let Err(error) = prune_runs(&*self.store, in_use)
        {
            warn!(%error, "could not prune the runs no snapshot names");
        }
        pruned
    }
}

/// The numbers of the runs `state` holds.
pub(super) fn runs_of(state: &State) -> Vec<u64> {
    state.settled().map_or(Vec::new(), |settled| {
        settled.runs.runs().iter().map(|run| run.number()).collect()
    })
}

/// The log's identity and a durable head at or after `seq`, once every
/// event to `seq` is durable.
fn durable_head(store: &Store, seq: u64) -> Result<(u64, Head), LedgerError> {
    match store {
        Store::File(log) => {
            log.wait_durable(seq)?;
            let head = log.head();
            assert!(
                head.seq >= seq,
                "the durable head {head} is past event {seq}, which is durable"
            );
            Ok((log.log_id(), head))
        }
        Store::Shared(shared) => {
            // Copied between batches, the state ends where a batch does.
            let cannot = |detail: String| {
                LedgerError::Snapshot(crate::snapshot_format::SnapshotError::Store { detail })
            };
            let log_id = shared
                .log
                .log_id()?
                .ok_or_else(|| cannot("the shared log vouches for no snapshot".to_owned()))?;
            let head = shared
                .log
                .head_at(seq)?
                .ok_or_else(|| cannot(format!("no batch of the shared log ends at {seq}")))?;
            Ok((log_id, head))
        }
    }
}

/// The snapshot thread: waits to be woken (an event due by count), for
/// the interval, or for the close, holding no handle of the ledger while
/// it waits, and takes a snapshot when one is due and the last one's rest
/// is over.
fn run(snapshots: &Snapshots, weak: &Weak<Inner>) {
    let mut timeout = None;
    // Woken by count, and not taken yet (the last one's rest was not over).
    let mut pending = false;
    loop {
        let Some((closing, woken)) = wait(snapshots, timeout) else {
            return;
        };
        if closing {
            return;
        }
        pending |= woken;
        timeout = due_in(snapshots, pending);
        if timeout.is_some() {
            continue;
        }
        pending = false;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if let Err(error) = Ledger::internal(inner).snapshot_if_due() {
            warn!(%error, "could not take a snapshot");
        }
        timeout = snapshots.policy.interval;
    }
}

/// Waits on the signal for at most `timeout` (the policy's interval when
/// `None`): whether the ledger is closing and whether the thread was
/// woken. `None` if the signal's lock is poisoned.
fn wait(snapshots: &Snapshots, timeout: Option<Duration>) -> Option<(bool, bool)> {
    let timeout = timeout.or(snapshots.policy.interval).unwrap_or(IDLE_WAIT);
    let signal = snapshots.signal.lock().ok()?;
    let (mut signal, _) = snapshots
        .wake
        .wait_timeout_while(signal, timeout, |signal| !signal.woken && !signal.closing)
        .ok()?;
    let woken = std::mem::take(&mut signal.woken);
    Some((signal.closing, woken))
}

/// How long the thread sleeps when no snapshot is due by time: it is woken
/// when one is due by count, or at the close.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// How long until a snapshot is due, `None` if one is due now: by count
/// (`pending`) or by the interval, once the last one's rest is over.
fn due_in(snapshots: &Snapshots, pending: bool) -> Option<Duration> {
    let last = snapshots.lock_last()?;
    let rest = snapshots.policy.rest_after(last.took);
    let since = last.at.elapsed();
    if since < rest {
        return Some(rest - since);
    }
    let by_time = snapshots
        .policy
        .interval
        .is_some_and(|interval| since >= interval);
    if pending || by_time {
        return None;
    }
    let interval = snapshots.policy.interval?;
    Some(interval.saturating_sub(since))
}

impl Snapshots {
    /// Whether the store holds a snapshot fewer than the policy's events
    /// before `last_seq`, which another writer of a shared ledger may have
    /// taken: then none is due, and the count starts again from it.
    fn fresh_in_store(&self, last_seq: u64) -> bool {
        let Ok(stored) = self.store.list() else {
            return false;
        };
        let Some(newest) = stored.first() else {
            return false;
        };
        let Some(mut last) = self.lock_last() else {
            return false;
        };
        if newest.seq > last.seq {
            last.seq = newest.seq;
            last.at = Instant::now();
            self.set_due(newest.seq);
        }
        newest.seq >= last_seq || last_seq - newest.seq < self.policy.events
    }
}

impl Ledger {
    /// Takes a snapshot unless one is fresh: the store holds one fewer than
    /// [`SnapshotPolicy::events`] events old, which another worker of a
    /// shared ledger may have written. What the snapshot thread calls, so
    /// that of several workers only one needs to write a snapshot of a
    /// given stretch of the log.
    pub fn snapshot_if_due(&self) -> Result<Option<SnapshotTaken>, LedgerError> {
        let Some(snapshots) = &self.inner.snapshots else {
            return Ok(None);
        };
        if snapshots.fresh_in_store(self.last_seq()) {
            return Ok(None);
        }
        self.snapshot()
    }

    /// What taking snapshots cost since the ledger was opened; `None` for a
    /// ledger that keeps no snapshots.
    pub fn snapshot_stats(&self) -> Option<SnapshotStats> {
        let snapshots = self.inner.snapshots.as_ref()?;
        Some(snapshots.lock_last()?.stats)
    }

    /// Takes a snapshot of the projections now, into the ledger's snapshot
    /// store, and keeps the newest [`SNAPSHOTS_KEPT`]: `None` if the ledger
    /// keeps no snapshots, or the newest one is of the current state. The
    /// ledger's lock is held only to copy the state; decisions go on while
    /// the snapshot is encoded and written.
    pub fn snapshot(&self) -> Result<Option<SnapshotTaken>, LedgerError> {
        let Some(snapshots) = &self.inner.snapshots else {
            return Ok(None);
        };
        let last_seq = self.last_seq();
        let settle = &self.inner.settle;
        let _one_at_a_time = settle.taking.lock().map_err(|_| LedgerError::Poisoned)?;
        let adopt = |new_run: Option<WrittenRun>, seq| {
            let mut round = self.lock_state()?;
            if let Some((run, slots)) = new_run {
                adopt_run(&mut round.state, run, &slots, seq, settle)?;
                settle.keep_under(&mut round.state);
                // One more run: the set may want a merge.
                settle.settler.wake_to_merge();
            }
            // A merge under way writes a run no snapshot names yet: the
            // runs are pruned by a later snapshot.
            let no_merge = settle.merging.try_lock().is_ok();
            Ok(no_merge.then(|| runs_of(&round.state)))
        };
        snapshots.take(
            &self.inner.store,
            || self.settled_copy(),
            last_seq,
            Box::new(adopt),
        )
    }
}
