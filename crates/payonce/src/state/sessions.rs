//! Worker sessions on a ledger several processes share: which workers are
//! running, and which worker's send each running send is. A worker's start
//! ends the sends of its own earlier sessions only; an `opened` event, which
//! only a ledger one process writes records after its creation, ends every
//! send.

use std::collections::{BTreeMap, HashMap};

use payonce_model::{TextView, WorkerName};

/// The live sessions and the workers of running sends.
#[derive(Debug, Clone, Default)]
pub(super) struct Sessions {
    /// Every worker with a live session (started, not ended), with the
    /// epoch its start drew.
    pub(super) live: BTreeMap<WorkerName, u64>,
    /// The worker whose send it is, by key slot, for every running send a
    /// worker of a shared ledger claimed.
    pub(super) senders: HashMap<u32, WorkerName>,
}

impl Sessions {
    /// The key slots of the running sends of `worker`.
    pub(super) fn sends_of(&self, worker: TextView<'_, WorkerName>) -> Vec<u32> {
        let mut slots: Vec<u32> = self
            .senders
            .iter()
            .filter(|(_, sender)| sender.as_str() == worker.as_str())
            .map(|(&slot, _)| slot)
            .collect();
        // In slot order, so ending them does the same work in every replay.
        slots.sort_unstable();
        slots
    }

    /// The epoch of `worker`'s live session.
    pub(super) fn epoch_of(&self, worker: &str) -> Option<u64> {
        self.live.get(worker).copied()
    }
}
