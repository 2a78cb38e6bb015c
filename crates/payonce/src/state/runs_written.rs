//! A snapshot's new run: the settled pairs no run the state holds has as
//! they are, written as records in the order of their keys' hashes, and
//! once the run is stored, adopted by the live state, whose copies of those
//! pairs may then leave memory.

use std::sync::Arc;

use payonce_runs::{HashKey, Record, RunSet, RunSink, RunSummary, RunWriter};

use super::State;
use super::layout::Persisted;
use crate::snapshot_format::error::SnapshotError;

/// The pairs a snapshot's new run holds: the key slots they are read
/// from, in the order the run holds them. Each pair is encoded only as it
/// is written, so a run costs its slots' order in memory, not its bytes.
#[derive(Debug, Default)]
pub(crate) struct NewRun {
    /// The key slot of each pair written, in the state it was copied from.
    pub(crate) slots: Vec<u32>,
}

impl NewRun {
    /// Whether it holds no pair: no run is written.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Writes its pairs, read from `state` (the state it was placed in),
    /// as a run under `hash_key` into `sink`.
    pub(crate) fn write<S: RunSink>(
        &self,
        state: &State,
        hash_key: HashKey,
        sink: S,
    ) -> Result<RunSummary, SnapshotError> {
        let failed = |error| SnapshotError::Run { run: 0, error };
        let mut writer = RunWriter::new(sink, hash_key, self.slots.len() as u64).map_err(failed)?;
        for &slot in &self.slots {
            let pair = state.settled_view(slot);
            writer
                .push_record(Record {
                    primary: pair.key.as_bytes(),
                    secondary: pair.id.as_bytes(),
                    payload: &pair.payload(),
                })
                .map_err(failed)?;
        }
        // The entries name records by their hashes alone: no payload.
        let names: Vec<Record<'_>> = (self.slots.iter())
            .map(|&slot| {
                let pair = state.settled_view(slot);
                Record {
                    primary: pair.key.as_bytes(),
                    secondary: pair.id.as_bytes(),
                    payload: &[],
                }
            })
            .collect();
        for entry in payonce_runs::secondary_entries(hash_key, &names).map_err(failed)? {
            writer.push_entry(entry).map_err(failed)?;
        }
        writer.finish().map_err(failed)
    }
}

impl State {
    /// The settled pairs of this state (a copy for a snapshot) that no run
    /// it holds has as they are, sorted as a run under `hash_key` holds
    /// them.
    pub(crate) fn new_run(&self, hash_key: HashKey) -> NewRun {
        let settled = self.settled_slots();
        let mut placed: Vec<(u64, u32)> = (0..)
            .zip(&settled)
            .filter(|(slot, settled)| **settled && self.keys[*slot].persisted == Persisted::No)
            .map(|(slot, _)| {
                let key = self.texts.get(self.keys[slot].key);
                (hash_key.primary_hash(key.as_bytes()), slot)
            })
            .collect();
        placed.sort_unstable_by(|a, b| {
            let key = |slot: u32| self.texts.get(self.keys[slot].key);
            a.0.cmp(&b.0).then_with(|| key(a.1).cmp(key(b.1)))
        });
        NewRun {
            slots: placed.into_iter().map(|(_, slot)| slot).collect(),
        }
    }

    /// Takes `runs` (the runs before, a new one first) as the runs holding
    /// its settled pairs, the new one written from a copy of this state at
    /// event `seq` with the pairs of key `slots`: each of those still as it
    /// was then is held by a run as it is, and may leave memory.
    pub(crate) fn adopt_run(&mut self, runs: Arc<RunSet>, slots: &[u32], seq: u64) {
        match self.settled.as_mut() {
            Some(settled) => settled.runs = runs,
            None => unreachable!("a run is adopted by a state holding runs"),
        }
        for &slot in slots {
            // A settled pair's slot is never freed while no run has it (a
            // release is refused once a key has an outcome), so the slot
            // still holds the pair the copy had, changed or not.
            let unchanged = (slot as usize) < self.keys.entries.len()
                && self.keys[slot].changed_seq <= seq
                && self.is_settled_pair(slot);
            if unchanged && self.keys[slot].persisted == Persisted::No {
                self.keys[slot].persisted = Persisted::Yes;
                self.clean.push_back(slot);
            }
        }
    }
}
