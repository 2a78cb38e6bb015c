//! Settled pairs set apart: a key whose outcome says what the rail did,
//! and the withdrawal it holds, kept out of the live slots and brought
//! back when an event names either of them.
//!
//! A pair is settled here when nothing but a later decision about its own
//! outcome can change it: its outcome is settled, no send runs, no send
//! error waits, no funds are held, and its key is the only record that
//! names its withdrawal. So every running send, hold, key in flight and
//! session stays live, and [`State::in_flight`], [`State::held`] and the
//! totals never need the archive. The totals count archived funds all the
//! same: setting a pair apart and bringing it back move no funds.
//!
//! Bringing a pair back ([`State::fault_in`]) copies it into live slots
//! and marks its archived copy shadowed; it stays live from then on. What
//! reads a state without naming the names first (the iterations, a
//! comparison, an encoding) sees the whole state only through
//! [`State::materialise`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use payonce_model::{Amount, Currency, Reference, WithdrawalState};

use super::layout::{Funds, KeySlot, NO_HOLDER, WithdrawalSlot};
use super::{Names, State};
use crate::time::Timestamp;

/// A settled key and the withdrawal it holds, owning its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SettledPair {
    pub(super) key: Box<str>,
    pub(super) claimed_seq: u64,
    pub(super) claimed_at: Timestamp,
    pub(super) state: WithdrawalState,
    pub(super) reference: Option<Box<str>>,
    pub(super) reason: Option<Box<str>>,
    pub(super) requested_by: Box<str>,
    pub(super) replaced: Box<[Reference]>,
    pub(super) id: Box<str>,
    pub(super) destination: Box<str>,
    pub(super) amount: Amount,
    pub(super) currency: Currency,
    pub(super) created: bool,
    /// Free or captured: never held.
    pub(super) funds: Funds,
}

/// Settled pairs, numbered, found by key and by withdrawal id.
#[derive(Debug, Default)]
pub(super) struct Archive {
    pairs: Vec<SettledPair>,
    by_key: HashMap<Box<str>, u32>,
    by_id: HashMap<Box<str>, u32>,
}

impl Archive {
    fn push(&mut self, pair: SettledPair) {
        let number = u32::try_from(self.pairs.len())
            .unwrap_or_else(|_| panic!("an archive of {} pairs", self.pairs.len()));
        let new_key = self.by_key.insert(pair.key.clone(), number).is_none();
        let new_id = self.by_id.insert(pair.id.clone(), number).is_none();
        assert!(
            new_key && new_id,
            "key {} or withdrawal {} archived twice",
            pair.key,
            pair.id
        );
        self.pairs.push(pair);
    }

    /// The pair of `key`, with its number.
    fn find_key(&self, key: &str) -> Option<(u32, &SettledPair)> {
        let number = *self.by_key.get(key)?;
        Some((number, &self.pairs[number as usize]))
    }

    /// The pair of withdrawal `id`, with its number.
    fn find_id(&self, id: &str) -> Option<(u32, &SettledPair)> {
        let number = *self.by_id.get(id)?;
        Some((number, &self.pairs[number as usize]))
    }

    pub(super) fn len(&self) -> usize {
        self.pairs.len()
    }
}

/// A state's archive and which of its pairs were brought back: shared by
/// the state's copies until one of them brings a pair back.
#[derive(Debug, Clone, Default)]
pub(super) struct Archived {
    archive: Arc<Archive>,
    shadowed: HashSet<u32>,
}

impl Archived {
    /// Pairs still only in the archive.
    pub(super) fn len(&self) -> usize {
        self.archive.len() - self.shadowed.len()
    }
}

impl State {
    /// Sets every settled pair apart from the live slots, into an archive
    /// (a copy of the state keeps sharing it); pairs set apart before stay
    /// there. Answers nothing differently.
    pub(crate) fn set_apart_settled(&mut self) {
        let mut archive = Archive::default();
        if let Some(archived) = self.archived.take() {
            for (number, pair) in archived.archive.pairs.iter().enumerate() {
                if !archived.shadowed.contains(&(number as u32)) {
                    archive.push(pair.clone());
                }
            }
        }
        let settled: Vec<u32> = self
            .keys
            .in_use()
            .filter(|&slot| self.is_settled_pair(slot))
            .collect();
        for slot in settled {
            archive.push(self.take_settled(slot));
        }
        if archive.len() > 0 {
            self.archived = Some(Archived {
                archive: Arc::new(archive),
                shadowed: HashSet::new(),
            });
        }
        if self.texts.wants_compacting() {
            self.compact();
        }
    }

    /// Whether key slot `slot` and the withdrawal it names form a settled
    /// pair (see the module's comment).
    fn is_settled_pair(&self, slot: u32) -> bool {
        let entry = &self.keys[slot];
        let withdrawal = &self.withdrawals[entry.withdrawal];
        entry.state.is_some_and(WithdrawalState::is_settled)
            && !entry.send_running
            && !self.last_errors.contains_key(&slot)
            && withdrawal.listed
            && withdrawal.holder == slot
            && withdrawal.named_by == 1
            && withdrawal.funds != Funds::Held
    }

    /// Takes the settled pair of key slot `slot` out of the live slots,
    /// moving no funds.
    fn take_settled(&mut self, slot: u32) -> SettledPair {
        let entry = self.keys[slot].clone();
        let withdrawal = self.withdrawals[entry.withdrawal].clone();
        let text = |at| Box::<str>::from(self.texts.get(at));
        let requested_by = entry
            .requested_by
            .unwrap_or_else(|| panic!("key slot {slot} has an outcome without a requester"));
        let pair = SettledPair {
            key: text(entry.key),
            claimed_seq: entry.claimed_seq,
            claimed_at: entry.claimed_at,
            state: entry
                .state
                .unwrap_or_else(|| panic!("key slot {slot} set apart in flight")),
            reference: entry.reference.map(text),
            reason: entry.reason.map(text),
            requested_by: text(requested_by),
            replaced: self.replaced.remove(&slot).unwrap_or_default(),
            id: text(withdrawal.id),
            destination: text(withdrawal.destination),
            amount: withdrawal.amount,
            currency: self.currencies[withdrawal.currency as usize].clone(),
            created: withdrawal.created,
            funds: withdrawal.funds,
        };
        for at in [
            entry.key,
            requested_by,
            withdrawal.id,
            withdrawal.destination,
        ] {
            self.texts.free(at);
        }
        self.texts.free_option(entry.reference);
        self.texts.free_option(entry.reason);
        self.keys.unlist(slot, self.hasher.hash(&pair.key));
        self.keys.free.push(slot);
        self.withdrawals
            .unlist(entry.withdrawal, self.hasher.hash(&pair.id));
        let freed = &mut self.withdrawals[entry.withdrawal];
        (freed.listed, freed.named_by, freed.holder) = (false, 0, NO_HOLDER);
        self.withdrawals.free.push(entry.withdrawal);
        pair
    }

    /// Brings back, into live slots, the archived pair of `key` and of
    /// withdrawal `id`: what judging or applying an event naming them
    /// reads. Does nothing for a name that is live or archived nowhere.
    pub(crate) fn fault_in(&mut self, key: Option<&str>, id: Option<&str>) {
        let Some(archived) = &self.archived else {
            return;
        };
        let archive = Arc::clone(&archived.archive);
        let key = key.filter(|key| self.find_key(key).is_none());
        let id = id.filter(|id| self.find_withdrawal(id).is_none());
        let found = [
            key.and_then(|key| archive.find_key(key)),
            id.and_then(|id| archive.find_id(id)),
        ];
        for (number, pair) in found.into_iter().flatten() {
            if self.shadow(number) {
                self.bring_back(pair);
            }
        }
    }

    /// [`State::fault_in`] of the names an event looks up.
    pub(crate) fn fault_in_names(&mut self, names: &Names<'_>) {
        if self.archived.is_some() {
            self.fault_in(
                names.key.map(|name| name.text),
                names.id.map(|name| name.text),
            );
        }
    }

    /// Marks archived pair `number` shadowed; whether it was not already.
    fn shadow(&mut self, number: u32) -> bool {
        self.archived
            .as_mut()
            .is_some_and(|archived| archived.shadowed.insert(number))
    }

    /// Brings every archived pair back: the whole state, for what reads
    /// it without naming names.
    pub(crate) fn materialise(&mut self) {
        let Some(archived) = self.archived.take() else {
            return;
        };
        for (number, pair) in archived.archive.pairs.iter().enumerate() {
            if !archived.shadowed.contains(&(number as u32)) {
                self.bring_back(pair);
            }
        }
    }

    /// A copy of this state with every archived pair brought back.
    pub(crate) fn whole(&self) -> State {
        let mut whole = self.clone();
        whole.materialise();
        whole
    }

    /// Panics if settled pairs are set apart: `what` reads the whole state.
    pub(super) fn assert_whole(&self, what: &str) {
        assert!(
            self.archived.is_none(),
            "{what} read from a state with settled pairs set apart: bring them back first"
        );
    }

    /// Puts `pair` into live slots as it was before it was set apart.
    fn bring_back(&mut self, pair: &SettledPair) {
        let currency = *self
            .currency_numbers
            .get(&pair.currency)
            .unwrap_or_else(|| panic!("archived currency {} is not numbered", pair.currency));
        let withdrawal = WithdrawalSlot {
            id: self.texts.push(&pair.id),
            destination: self.texts.push(&pair.destination),
            amount: pair.amount,
            currency,
            holder: NO_HOLDER,
            named_by: 1,
            created: pair.created,
            funds: pair.funds,
            listed: true,
        };
        let withdrawal = self
            .withdrawals
            .insert(self.hasher.hash(&pair.id), withdrawal);
        let entry = KeySlot {
            key: self.texts.push(&pair.key),
            withdrawal,
            claimed_seq: pair.claimed_seq,
            claimed_at: pair.claimed_at,
            state: Some(pair.state),
            send_running: false,
            reference: pair.reference.as_deref().map(|text| self.texts.push(text)),
            reason: pair.reason.as_deref().map(|text| self.texts.push(text)),
            requested_by: Some(self.texts.push(&pair.requested_by)),
        };
        let slot = self.keys.insert(self.hasher.hash(&pair.key), entry);
        self.withdrawals[withdrawal].holder = slot;
        if !pair.replaced.is_empty() {
            self.replaced.insert(slot, pair.replaced.clone());
        }
    }
}
