//! Keeping a ledger's state under its memory budget
//! ([`Config::memory_budget`]), whatever its history.
//!
//! The budget is split three ways: the cache of blocks read from the runs
//! of settled pairs (a quarter), those runs' filters (what they take), and
//! the live slots (half the rest, the other half kept for the copies a
//! snapshot or a new run makes of the slots decisions change while it is
//! written). After a decision (`Settle::keep_under`), settled pairs a run
//! holds as they are leave memory, oldest first, while the live slots pass
//! their share. Settled pairs no run holds yet cannot leave: once they take
//! half the live share, the settling thread is asked to write them into a
//! new run ([`Ledger::flush_settled`]), which frees them in turn. Keys in
//! flight, holds and running sends never leave memory. `MemoryUse` says
//! what each share holds, for monitoring and the benchmarks.

use std::sync::Arc;

use payonce_runs::{BlockCache, RunSet};
use tracing::info;

use super::settler::Settler;
use super::{Config, Ledger};
use crate::error::LedgerError;
use crate::ledger::config::MEMORY_BUDGET_MIN;
use crate::snapshot::runs::write_new_run;
use crate::snapshot::{MemRuns, RunStore};
use crate::state::{Settled, State};

/// Bytes a live key takes in memory, about: its two slots, its text, its
/// place in the two indexes, and the room the slots' and indexes'
/// capacities keep beside it (`MemoryUse::live_bytes` over
/// `MemoryUse::live_keys` measured 376 to 518 at 10M withdrawals).
pub(super) const PAIR_BYTES: u64 = 512;

/// How a ledger's memory budget is split, in bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// The whole budget.
    pub(crate) total: u64,
    /// The block cache's share.
    pub(crate) cache: u64,
}

impl Budget {
    /// The split of `total` (raised to [`MEMORY_BUDGET_MIN`]).
    pub(crate) fn of(total: u64) -> Budget {
        let total = total.max(MEMORY_BUDGET_MIN);
        Budget {
            total,
            cache: total / 4,
        }
    }

    /// The live slots' share, once the cache and `filters` bytes of
    /// filters are counted: half of what is left, the other half kept for
    /// the copies a snapshot or a new run makes of the slots decisions
    /// change while it is written (the state is copied on write).
    pub(crate) fn live(&self, filters: u64) -> u64 {
        (self
            .total
            .saturating_sub(self.cache)
            .saturating_sub(filters)
            / 2)
        .max(MEMORY_BUDGET_MIN / 4)
    }
}

/// A ledger's means of keeping its state under budget: where its runs are
/// written, the cache they are read through, and the budget.
#[derive(Debug)]
pub(crate) struct Settle {
    pub(crate) runs: Arc<dyn RunStore>,
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) budget: Budget,
    /// Settled pairs leave memory as soon as a run holds them.
    pub(crate) eager: bool,
    /// Held while a run is written and taken (by a snapshot, a flush or a
    /// merge), so runs are taken in the order of the states they were
    /// written from: a newer run is always before an older one.
    pub(crate) taking: std::sync::Mutex<()>,
    /// Held while runs are merged, one merge at a time. A merge holds
    /// [`Settle::taking`] only to take its run, so flushes and snapshots
    /// go on meanwhile; a prune waits for no merge, and removes nothing
    /// while one runs, whose new run no snapshot names yet.
    pub(crate) merging: std::sync::Mutex<()>,
    /// The runs the state holds, for prefetches to read without the
    /// ledger's lock (`super::prefetch`).
    pub(crate) published: std::sync::Mutex<Arc<RunSet>>,
    /// Lookups in the runs made under the ledger's lock.
    pub(crate) reads_under_lock: std::sync::atomic::AtomicU64,
    /// The thread that writes and merges runs.
    pub(crate) settler: Settler,
}

impl Settle {
    /// For a ledger opened with `config`, whose runs are read through
    /// `cache`: its runs go beside its snapshots, or into memory without a
    /// snapshot store.
    pub(crate) fn new(config: &Config, cache: Arc<BlockCache>) -> Settle {
        let runs: Arc<dyn RunStore> = match &config.snapshot_store {
            Some(store) => store.clone(),
            None => Arc::new(MemRuns::default()),
        };
        Settle {
            runs,
            cache,
            budget: Budget::of(config.memory_budget),
            eager: config.set_apart_settled,
            taking: std::sync::Mutex::new(()),
            merging: std::sync::Mutex::new(()),
            published: std::sync::Mutex::new(Arc::new(RunSet::default())),
            reads_under_lock: std::sync::atomic::AtomicU64::new(0),
            settler: Settler::default(),
        }
    }

    /// After a decision or a catching up applied events to `state`: settled
    /// pairs a run holds leave memory while the live slots pass their
    /// share. Returns whether settled pairs no run holds yet crowd the
    /// share, so that a new run is wanted.
    pub(crate) fn keep_under(&self, state: &mut State) -> bool {
        let filters = state
            .settled()
            .map_or(0, |settled| settled.runs.filter_bytes());
        let live = self.budget.live(filters);
        let keep = match self.eager {
            true => 0,
            false => usize::try_from(live / PAIR_BYTES / 2).unwrap_or(usize::MAX),
        };
        state.evict_to(keep);
        state.unpersisted_pairs() * PAIR_BYTES > live / 2
    }
}

/// What a ledger's state takes of its memory budget: for monitoring, and
/// for the benchmarks that hold it to the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryUse {
    /// The budget ([`Config::memory_budget`], raised to its least).
    pub budget: u64,
    /// Bytes the live slots take, about (their capacities).
    pub live_bytes: u64,
    /// Keys in live slots: in flight, holding funds, running, or settled
    /// and kept in memory.
    pub live_keys: u64,
    /// Bytes of blocks the cache holds.
    pub cache_bytes: u64,
    /// Blocks read from the runs since the ledger opened (the cache's
    /// misses): lookups of names out of memory, merges and checks.
    pub blocks_read: u64,
    /// Bytes the runs' filters take.
    pub filter_bytes: u64,
    /// Runs the state holds.
    pub runs: usize,
    /// Of those, the runs a filter of which failed its checksum and is
    /// ignored, never believed: every name of its kind reads a block of
    /// them, until a merge replaces them.
    pub filters_ignored: usize,
    /// Lookups in the runs made under the ledger's lock since it opened:
    /// a decision's names are read before the lock is taken, unless the
    /// runs keep changing meanwhile, or a shared ledger's batch catches up
    /// on or decides what another prefetch did not read.
    pub reads_under_lock: u64,
}

/// A new cache for a ledger opened with `config`.
pub(crate) fn cache_for(config: &Config) -> Arc<BlockCache> {
    Arc::new(BlockCache::new(Budget::of(config.memory_budget).cache))
}

impl Ledger {
    /// Writes the settled pairs no run holds yet into a new run, and takes
    /// it as the newest of the runs the state holds, so those pairs may
    /// leave memory, as may pairs read back since. The ledger's lock is
    /// held only to copy the state and to take the run; the run is
    /// written meanwhile. `None` with no such pair. What the budget asks
    /// when such pairs crowd memory (on the settling thread), and what
    /// [`Config::set_apart_settled`] does at opening.
    pub fn flush_settled(&self) -> Result<Option<u64>, LedgerError> {
        let settle = &self.inner.settle;
        let _one_at_a_time = settle.taking.lock().map_err(|_| LedgerError::Poisoned)?;
        let copy = self.settled_copy()?;
        let seq = copy.last_seq();
        let hash_key = match copy.settled().and_then(|settled| settled.runs.hash_key()) {
            Some(key) => key,
            None => crate::snapshot::runs::drawn_hash_key().map_err(LedgerError::Snapshot)?,
        };
        let Some((run, slots)) = write_new_run(&copy, hash_key, &*settle.runs)? else {
            // Pairs read back since may leave all the same.
            settle.keep_under(&mut self.lock_state()?.state);
            return Ok(None);
        };
        drop(copy);
        let number = run.number();
        let records = run.records_len();
        let mut round = self.lock_state()?;
        adopt_run(&mut round.state, run, &slots, seq, settle)?;
        settle.keep_under(&mut round.state);
        drop(round);
        info!(run = number, records, seq, "wrote a run of settled pairs");
        Ok(Some(number))
    }
}

impl Ledger {
    /// What the state takes of its memory budget now.
    pub fn memory(&self) -> Result<MemoryUse, LedgerError> {
        let round = self.lock_state()?;
        let state = &round.state;
        let settled = state.settled();
        Ok(MemoryUse {
            budget: self.inner.settle.budget.total,
            live_bytes: state.live_bytes(),
            live_keys: state.live_keys() as u64,
            cache_bytes: self.inner.settle.cache.used_bytes(),
            blocks_read: self.inner.settle.cache.stats().misses,
            filter_bytes: settled.map_or(0, |settled| settled.runs.filter_bytes()),
            runs: settled.map_or(0, |settled| settled.runs.runs().len()),
            filters_ignored: settled.map_or(0, |settled| {
                let runs = settled.runs.runs().iter();
                runs.filter(|run| run.filter_ignored()).count()
            }),
            reads_under_lock: (self.inner.settle.reads_under_lock)
                .load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Whether the pass that checks the runs' blocks in the background,
    /// after an opening believed them (a PostgreSQL worker's), is over:
    /// `None` while it runs (or for a ledger whose runs were checked before
    /// they were believed, or that holds none), `Some(Ok(()))` once every
    /// block checked, `Some(Err(_))` with the first damage found.
    pub fn runs_checked(&self) -> Option<Result<(), String>> {
        let round = self.lock_state().ok()?;
        let check = round.state.settled()?.check.clone()?;
        drop(round);
        if let Some(damage) = check.damage.lock().ok()?.clone() {
            return Some(Err(damage));
        }
        check
            .done
            .load(std::sync::atomic::Ordering::SeqCst)
            .then_some(Ok(()))
    }

    /// Settled pairs no run holds crowd the budget: the settling thread is
    /// asked to write them into a new run. Without that thread, they are
    /// written now, on this thread, unless a run is being written already
    /// (which takes them, or the next decision asks again). A failure
    /// leaves them in memory, and is told.
    pub(super) fn flush_wanted(&self) {
        let settle = &self.inner.settle;
        if settle.settler.is_running() {
            settle.settler.wake_to_flush();
            return;
        }
        if settle.taking.try_lock().is_err() {
            return;
        }
        if let Err(error) = self.flush_settled() {
            tracing::warn!(%error, "could not write a run of settled pairs; they stay in memory");
        }
    }
}

/// Takes `run`, written from a copy of `state` at event `seq` with the
/// pairs of key `slots`, as the newest of `state`'s runs.
pub(crate) fn adopt_run(
    state: &mut State,
    run: Arc<payonce_runs::Run>,
    slots: &[u32],
    seq: u64,
    settle: &Settle,
) -> Result<(), LedgerError> {
    let number = run.number();
    let mut runs = vec![run];
    if let Some(settled) = state.settled() {
        runs.extend(settled.runs.runs().iter().cloned());
    }
    let set = RunSet::new(runs).map_err(|error| {
        LedgerError::Snapshot(crate::snapshot_format::SnapshotError::Run { run: 0, error })
    })?;
    if state.settled().is_none() {
        state.adopt_settled(Settled {
            runs: Arc::new(RunSet::new(Vec::new()).map_err(|error| {
                LedgerError::Snapshot(crate::snapshot_format::SnapshotError::Run { run: 0, error })
            })?),
            cache: Arc::clone(&settle.cache),
            pairs: 0,
            check: None,
            aside_hooks: crate::state::AsideHooks::default(),
        });
    }
    if let Some(settled) = state.settled() {
        settled.aside_hooks.add(&*settle.runs, number);
    }
    state.adopt_run(Arc::new(set), slots, seq);
    settle.publish(state);
    Ok(())
}
