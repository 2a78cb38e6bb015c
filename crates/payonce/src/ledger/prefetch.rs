//! Reading settled pairs back before the lock (TigerBeetle's prefetch): the
//! blocks of the runs that the names a decision judges need are read, each
//! checked, before the ledger's lock (or a shared ledger's batch) is taken;
//! under it, the pairs are brought back from those blocks alone, and
//! nothing is read. A name in no run costs no read at all: its runs'
//! filters say so.
//!
//! The runs a prefetch reads are the ones the ledger last published
//! ([`Settle::publish`]). Should they change before the lock is taken (a
//! new run, a merge), a lookup under the lock that needs a block not
//! prefetched is refused, reading nothing, and the decision prefetches
//! again. Only a decision that keeps losing that race, or one queued in a
//! shared ledger's batch, reads under the lock; each such read is counted
//! ([`super::MemoryUse::reads_under_lock`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use payonce_runs::{Name, Prefetched, RunSet};
use tracing::debug;

use super::Ledger;
use super::settle::Settle;
use super::shared::Round;
use crate::error::LedgerError;
use crate::snapshot_format::SnapshotError;
use crate::state::{Reading, State, is_not_prefetched};

/// Prefetches a decision makes before it reads under the lock.
const PREFETCH_ATTEMPTS: usize = 3;

impl Settle {
    /// Makes the runs `state` holds the ones prefetches read: called
    /// whenever they change, under the ledger's lock.
    pub(crate) fn publish(&self, state: &State) {
        let runs = state.settled().map_or_else(
            || Arc::new(RunSet::default()),
            |settled| Arc::clone(&settled.runs),
        );
        if let Ok(mut published) = self.published.lock() {
            *published = runs;
        }
    }

    /// Reads, through the cache, every block looking up `key` and
    /// withdrawal `id` in the published runs needs, holding no lock of the
    /// ledger's.
    pub(crate) fn prefetch(
        &self,
        key: Option<&str>,
        id: Option<&str>,
    ) -> Result<Prefetched, SnapshotError> {
        let runs = match self.published.lock() {
            Ok(published) => Arc::clone(&published),
            Err(_) => return Ok(Prefetched::default()),
        };
        if runs.runs().is_empty() {
            return Ok(Prefetched::default());
        }
        let names = (key.map(|key| Name::Primary(key.as_bytes())).into_iter())
            .chain(id.map(|id| Name::Secondary(id.as_bytes())));
        runs.prefetch(&self.cache, names)
            .map_err(|error| SnapshotError::Run { run: 0, error })
    }

    /// Brings back what `key` and `id` name into `state`, from `prefetched`
    /// if it was made, or else by reading under the caller's lock: what a
    /// queued decision does, whose turn cannot wait for another prefetch.
    pub(crate) fn fault_in(
        &self,
        state: &mut State,
        [key, id]: [Option<&str>; 2],
        prefetched: Option<&Prefetched>,
    ) -> Result<(), LedgerError> {
        if let Some(prefetched) = prefetched {
            match state.fault_in_with(key, id, Reading::Prefetched(prefetched)) {
                Err(error) if is_not_prefetched(&error) => {}
                done => return done.map_err(LedgerError::Archive),
            }
        }
        self.read_under_lock(state, [key, id])
    }

    /// Brings back what `key` and `id` name, reading under the caller's
    /// lock, and counts it where the state holds runs.
    fn read_under_lock(
        &self,
        state: &mut State,
        [key, id]: [Option<&str>; 2],
    ) -> Result<(), LedgerError> {
        if state.settled().is_some() {
            self.reads_under_lock.fetch_add(1, Ordering::Relaxed);
            debug!(
                key,
                withdrawal = id,
                "looking names up in the runs under the lock"
            );
        }
        state.fault_in(key, id).map_err(LedgerError::Archive)
    }
}

impl Ledger {
    /// The state's lock, taken once what `names` (a key, a withdrawal)
    /// name is back in live slots: read before the lock, and prefetched
    /// again while the runs changed meanwhile. `lock` takes the lock.
    pub(super) fn lock_named<'l>(
        &'l self,
        names: [Option<&str>; 2],
        lock: impl Fn() -> Result<MutexGuard<'l, Round>, LedgerError>,
    ) -> Result<MutexGuard<'l, Round>, LedgerError> {
        let settle = &self.inner.settle;
        for _ in 0..PREFETCH_ATTEMPTS {
            let Ok(prefetched) = settle.prefetch(names[0], names[1]) else {
                // Damage is found, and told, by the reading under the lock.
                break;
            };
            let mut round = lock()?;
            let [key, id] = names;
            match round
                .state
                .fault_in_with(key, id, Reading::Prefetched(&prefetched))
            {
                Err(error) if is_not_prefetched(&error) => continue,
                done => return done.map(|()| round).map_err(LedgerError::Archive),
            }
        }
        let mut round = lock()?;
        settle.read_under_lock(&mut round.state, names)?;
        Ok(round)
    }
}
