//! Merging the runs a ledger's state holds, as an LSM tree does: the
//! newest few, as `payonce_runs::merge_prefix` picks them, become one run
//! holding the newest record of each pair, which takes their place. The
//! inputs are read through the cache a block at a time, each checked, so
//! the merged run's filters are built from verified blocks alone. The
//! lock is held only to take the merged run; the inputs stay in the store
//! until no kept snapshot names them (`crate::snapshot::prune_runs`).

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
    /// the state's runs changed while it was written (a shared ledger's
    /// state rebuilt), when it is left for a prune to remove.
    pub fn merge_runs(&self) -> Result<Option<u64>, LedgerError> {
        let settle = &self.inner.settle;
        let _one_at_a_time = settle.taking.lock().map_err(|_| LedgerError::Poisoned)?;
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
        let mut round = self.lock_state()?;
        let Some(settled) = round.state.settled_mut() else {
            return Ok(None);
        };
        if !Arc::ptr_eq(&settled.runs, &runs) {
            return Ok(None);
        }
        let mut set = vec![run];
        set.extend(runs.runs()[merged..].iter().cloned());
        settled.runs =
            Arc::new(RunSet::new(set).map_err(|error| {
                LedgerError::Snapshot(SnapshotError::Run { run: number, error })
            })?);
        settled.refusers.add(&*settle.runs, number);
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
