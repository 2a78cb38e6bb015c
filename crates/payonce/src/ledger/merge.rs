//! Merging the runs a ledger's state holds, as an LSM tree does: the
//! newest few, as `payonce_runs::merge_prefix` picks them, become one run
//! holding the newest record of each pair, which takes their place. The
//! inputs are read through the cache a block at a time, each checked, so
//! the merged run's filters are built from verified blocks alone. The
//! ledger's lock, and the one runs are taken under, are held only to take
//! the merged run, so flushes and snapshots go on while it is written; the
//! inputs stay in the store until no kept snapshot names them
//! (`crate::snapshot::prune_runs`).

use std::sync::Arc;

use payonce_runs::{Run, RunSet, merge_prefix};
use tracing::info;

use super::Ledger;
use crate::error::LedgerError;
use crate::snapshot::runs::write_merged_run;
use crate::snapshot_format::SnapshotError;

impl Ledger {
    /// Merges the newest runs the state holds into one, if the set wants
    /// a merge: the merged run's number, `None` if it wants none, or if
    /// the state's runs changed other than by newer runs while it was
    /// written (a shared ledger's state rebuilt), when it is left for a
    /// prune to remove. Runs written meanwhile (a flush, a snapshot) stay
    /// before it: they hold newer pairs.
    pub fn merge_runs(&self) -> Result<Option<u64>, LedgerError> {
        let settle = &self.inner.settle;
        let _one_merge = settle.merging.lock().map_err(|_| LedgerError::Poisoned)?;
        let runs = {
            let round = self.lock_state()?;
            round
                .state
                .settled()
                .map(|settled| Arc::clone(&settled.runs))
        };
        let Some(runs) = runs else {
            return Ok(None);
        };
        let records: Vec<u64> = runs.runs().iter().map(|run| run.records_len()).collect();
        let merged = merge_prefix(&records);
        if merged == 0 {
            return Ok(None);
        }
        let inputs: Vec<&Run> = runs.runs()[..merged].iter().map(|run| &**run).collect();
        let run = write_merged_run(&inputs, &settle.cache, &*settle.runs)?;
        let number = run.number();
        let _taking = settle.taking.lock().map_err(|_| LedgerError::Poisoned)?;
        let mut round = self.lock_state()?;
        let Some(settled) = round.state.settled_mut() else {
            return Ok(None);
        };
        let Some(set) = spliced(&settled.runs, &runs, merged, run) else {
            return Ok(None);
        };
        settled.runs =
            Arc::new(RunSet::new(set).map_err(|error| {
                LedgerError::Snapshot(SnapshotError::Run { run: number, error })
            })?);
        settled.aside_hooks.add(&*settle.runs, number);
        settle.publish(&round.state);
        drop(round);
        for input in &inputs {
            settle.cache.forget_run(input.number());
        }
        info!(
            run = number,
            inputs = merged,
            records = records[..merged].iter().sum::<u64>(),
            "merged runs of settled pairs"
        );
        Ok(Some(number))
    }
}

/// The runs of `now` with the `merged` newest of `then` (the set a merge
/// began from) replaced by `run`: `None` unless `now` is `then` after
/// runs taken since, which stay first.
fn spliced(now: &RunSet, then: &RunSet, merged: usize, run: Arc<Run>) -> Option<Vec<Arc<Run>>> {
    let (now, then) = (now.runs(), then.runs());
    let newer = now.len().checked_sub(then.len())?;
    let same = now[newer..]
        .iter()
        .zip(then)
        .all(|(a, b)| Arc::ptr_eq(a, b));
    if !same {
        return None;
    }
    let mut set = now[..newer].to_vec();
    set.push(run);
    set.extend(then[merged..].iter().cloned());
    Some(set)
}
