//! Keeping the live slots under a budget: settled pairs a run holds as
//! they are leave memory, oldest first, and are read back from their run
//! when an event names them. Nothing else ever leaves: a key in flight, a
//! hold, a running send, a send error, a session, or a settled pair no run
//! holds yet (the next snapshot's run takes it; `crate::ledger` asks for
//! one when such pairs crowd the budget).

use super::State;
use super::layout::Persisted;

/// Bytes an entry of the state's small maps takes, about: the key, the
/// value, and the map's own overhead.
const MAP_ENTRY_BYTES: usize = 48;

impl State {
    /// Bytes the live state takes, about: its slots and their indexes, its
    /// text, and its maps. Counted from capacities, so it is what the
    /// process holds for them, not what is in use.
    pub(crate) fn live_bytes(&self) -> u64 {
        let maps = self.replaced.capacity() + self.last_errors.capacity();
        let bytes = self.keys.bytes()
            + self.withdrawals.bytes()
            + self.texts.bytes()
            + maps * MAP_ENTRY_BYTES
            + self.clean.capacity() * size_of::<u32>()
            + self.running.capacity() * size_of::<u32>();
        bytes as u64
    }

    /// Live keys no run holds as they are, about (the clean queue may hold
    /// a few slots changed since): what the next run would take, and free,
    /// but for the keys in flight.
    pub(crate) fn unpersisted_pairs(&self) -> u64 {
        let live = self.keys.len();
        (live - self.clean.len().min(live)) as u64
    }

    /// Keys in live slots.
    pub(crate) fn live_keys(&self) -> usize {
        self.keys.len()
    }

    /// Takes settled pairs a run holds out of memory, oldest first, until
    /// at most `keep` of them are left live; returns how many left.
    pub(crate) fn evict_to(&mut self, keep: usize) -> usize {
        let mut evicted = 0;
        while self.clean.len() > keep {
            let Some(slot) = self.clean.pop_front() else {
                break;
            };
            if self.is_evictable(slot) {
                self.remove_settled(slot);
                evicted += 1;
            }
        }
        if evicted > 0 && self.texts.wants_compacting() {
            self.compact();
        }
        evicted
    }

    /// Whether key slot `slot` may leave memory now: settled, and held by a
    /// run as it is. A slot freed since it was queued is `No` (see
    /// `State::remove_settled`), and one reused since is `No` until a run
    /// holds its new pair, when it is queued again.
    fn is_evictable(&self, slot: u32) -> bool {
        self.settled.is_some()
            && (slot as usize) < self.keys.entries.len()
            && self.keys[slot].persisted == Persisted::Yes
            && self.is_settled_pair(slot)
    }
}
