//! Settled pairs out of memory: a key whose outcome says what the rail
//! did, and the withdrawal it holds, kept in immutable runs of records
//! (`payonce_runs`) read through a byte-budgeted block cache, and brought
//! back into live slots when an event names either of them.
//!
//! A pair is settled here when nothing but a later decision about its own
//! outcome can change it: its outcome is settled, no send runs, no send
//! error waits, no funds are held, and its key is the only record that
//! names its withdrawal. A settled pair stays settled for good (a release
//! is refused once a key has an outcome, and a correction moves between
//! settled outcomes), and its key names the same withdrawal in every run
//! that holds it: so the runs need no tombstones, and the newest run
//! holding a name answers for it. So every running send, hold, key in
//! flight and session stays live, and [`State::in_flight`],
//! [`State::held`] and the totals never need the runs. The totals count
//! the runs' funds all the same: a pair leaving memory or coming back
//! moves no funds.
//!
//! Live slots shadow the runs: a pair brought back and changed is newer in
//! memory than in any run, until a snapshot writes it into a new run.
//! [`Persisted`] says, slot by slot, whether a run holds the record as
//! the slot has it. What reads a state without naming the names first
//! (the iterations, a comparison, an encoding for an audit) sees the
//! whole state only through [`State::materialise`].
//!
//! What brings a pair back: the ledger, for the names a command looks up,
//! before judging it (`command_names`, prefetched in `execute_then` and
//! before a shared ledger's decision is queued; `ledger/prefetch.rs`);
//! replay's `apply_batch`, for the names an event looks up (a logged
//! refusal's are its command's, which replay judges again); and the
//! ledger's queries, for the key or id they ask about
//! (`Ledger::read_named`). A pair that cannot be read back fails the call
//! that named it with `LedgerError::Archive` before anything is judged or
//! appended, and applying an event the ledger has just judged reads
//! nothing from the runs (`apply_judged`), so nothing can fail once an
//! event is written. Iterating, comparing and printing a ledger's state
//! bring every pair back in a copy first (`State::whole`): a state with
//! pairs set apart never leaves the ledger.

use std::sync::Arc;

use payonce_model::WithdrawalState;
use payonce_runs::{BlockCache, RunSet};

use super::layout::{Funds, KeySlot, NO_HOLDER, Persisted, WithdrawalSlot};
use super::pair::{PairView, SettledPair, read_pair};
use super::reading::{Reading, run_error};
use super::run_damage::{AsideHooks, RunsCheck};
use super::{Names, State};
use crate::snapshot_format::error::SnapshotError;

/// The runs holding a state's settled pairs, and the cache they are read
/// through: shared by the state's copies.
#[derive(Debug, Clone)]
pub(crate) struct Settled {
    pub(crate) runs: Arc<RunSet>,
    pub(crate) cache: Arc<BlockCache>,
    /// Distinct pairs the runs hold that are not in live slots.
    pub(crate) pairs: u64,
    /// The pass that checks the runs' blocks after an opening believed
    /// them, where their store leaves that to the background.
    pub(crate) check: Option<Arc<RunsCheck>>,
    /// How each run is set aside once found damaged.
    pub(crate) aside_hooks: AsideHooks,
}

impl State {
    /// The runs and cache holding this state's settled pairs, if any.
    pub(crate) fn settled(&self) -> Option<&Settled> {
        self.settled.as_ref()
    }

    /// The runs and cache holding this state's settled pairs, to change.
    pub(crate) fn settled_mut(&mut self) -> Option<&mut Settled> {
        self.settled.as_mut()
    }

    /// Takes `settled` as the runs holding the pairs this state does not
    /// hold live.
    pub(crate) fn adopt_settled(&mut self, settled: Settled) {
        self.settled = Some(settled);
    }

    /// By key slot, whether it and the withdrawal it names form a settled
    /// pair: what a snapshot keeps out of its body. Reads the slots, not
    /// their indexes, which a copy for a snapshot lacks.
    pub(super) fn settled_slots(&self) -> Vec<bool> {
        let mut settled = vec![true; self.keys.entries.len()];
        for &slot in &self.keys.free {
            settled[slot as usize] = false;
        }
        for (slot, settled) in (0..).zip(settled.iter_mut()) {
            *settled = *settled && self.is_settled_pair(slot);
        }
        settled
    }

    /// Whether key slot `slot` and the withdrawal it names form a settled
    /// pair (see the module's comment).
    pub(super) fn is_settled_pair(&self, slot: u32) -> bool {
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

    /// The settled pair of key slot `slot`, borrowed from the slots.
    pub(super) fn settled_view(&self, slot: u32) -> PairView<'_> {
        let entry = &self.keys[slot];
        let withdrawal = &self.withdrawals[entry.withdrawal];
        let text = |at| self.texts.get(at);
        PairView {
            key: text(entry.key),
            claimed_seq: entry.claimed_seq,
            claimed_at: entry.claimed_at,
            state: entry
                .state
                .unwrap_or_else(|| panic!("key slot {slot} settled in flight")),
            reference: entry.reference.map(text),
            reason: entry.reason.map(text),
            requested_by: text(
                entry.requested_by.unwrap_or_else(|| {
                    panic!("key slot {slot} has an outcome without a requester")
                }),
            ),
            replaced: self.replaced.get(&slot).map_or(&[], |replaced| replaced),
            id: text(withdrawal.id),
            destination: text(withdrawal.destination),
            amount: withdrawal.amount,
            currency: self.currencies[withdrawal.currency as usize].as_str(),
            created: withdrawal.created,
            funds: withdrawal.funds,
        }
    }

    /// Takes the settled pair of key slot `slot`, which a run holds as it
    /// is, out of the live slots, moving no funds.
    pub(super) fn remove_settled(&mut self, slot: u32) {
        assert!(
            self.keys[slot].persisted == Persisted::Yes && self.is_settled_pair(slot),
            "only a settled pair a run holds leaves memory"
        );
        let entry = self.keys[slot].clone();
        let withdrawal = self.withdrawals[entry.withdrawal].clone();
        let key_hash = self.hasher.hash(self.texts.get(entry.key));
        let id_hash = self.hasher.hash(self.texts.get(withdrawal.id));
        for at in [entry.key, withdrawal.id, withdrawal.destination] {
            self.texts.free(at);
        }
        for at in [entry.reference, entry.reason, entry.requested_by] {
            self.texts.free_option(at);
        }
        self.replaced.remove(&slot);
        self.keys.unlist(slot, key_hash);
        // A stale entry of the clean queue names it no more.
        self.keys[slot].persisted = Persisted::No;
        self.keys.free.push(slot);
        self.withdrawals.unlist(entry.withdrawal, id_hash);
        let freed = &mut self.withdrawals[entry.withdrawal];
        (freed.listed, freed.named_by, freed.holder) = (false, 0, NO_HOLDER);
        self.withdrawals.free.push(entry.withdrawal);
        if let Some(settled) = self.settled.as_mut() {
            settled.pairs += 1;
        }
    }

    /// Brings back, into live slots, the settled pair of `key` and of
    /// withdrawal `id` from the runs, read through the cache: what judging
    /// or applying an event naming them reads. Does nothing for a name
    /// that is live or in no run. A pair that cannot be read back is the
    /// error, and the state is as before but for pairs already brought
    /// back, which answer alike.
    pub(crate) fn fault_in(
        &mut self,
        key: Option<&str>,
        id: Option<&str>,
    ) -> Result<(), SnapshotError> {
        self.fault_in_with(key, id, Reading::Cache)
    }

    /// [`State::fault_in`], its blocks read as `reading` says: from blocks
    /// prefetched before the caller took its lock, a lookup that needs
    /// another (the runs changed since) is refused with
    /// [`payonce_runs::RunError::NotPrefetched`] ([`is_not_prefetched`]),
    /// having read nothing.
    pub(crate) fn fault_in_with(
        &mut self,
        key: Option<&str>,
        id: Option<&str>,
        reading: Reading<'_>,
    ) -> Result<(), SnapshotError> {
        let Some(settled) = &self.settled else {
            return Ok(());
        };
        let aside_hooks = settled.aside_hooks.clone();
        self.fault_in_from(key, id, reading)
            .inspect_err(|error| aside_hooks.set_aside(error))
    }

    /// [`State::fault_in_with`], its damage not told yet.
    fn fault_in_from(
        &mut self,
        key: Option<&str>,
        id: Option<&str>,
        reading: Reading<'_>,
    ) -> Result<(), SnapshotError> {
        let Some(settled) = &self.settled else {
            return Ok(());
        };
        let (runs, cache) = (Arc::clone(&settled.runs), Arc::clone(&settled.cache));
        if let Some(key) = key.filter(|key| self.find_key(key).is_none())
            && let Some(record) = reading.get(&runs, &cache, key)?
        {
            let pair = read_pair(&record, self.last_seq)?;
            self.bring_back_from(record.run_number(), &pair)?;
        }
        if let Some(id) = id.filter(|id| self.find_withdrawal(id).is_none())
            && let Some(record) = reading.get_by_secondary(&runs, &cache, id)?
        {
            let pair = read_pair(&record, self.last_seq)?;
            self.bring_back_from(record.run_number(), &pair)?;
        }
        Ok(())
    }

    /// [`State::fault_in`] of the names an event looks up.
    pub(crate) fn fault_in_names(&mut self, names: &Names<'_>) -> Result<(), SnapshotError> {
        if self.settled.is_none() {
            return Ok(());
        }
        self.fault_in(
            names.key.map(|name| name.text),
            names.id.map(|name| name.text),
        )
    }

    /// Brings `pair`, read from run `run`, back into live slots.
    fn bring_back_from(&mut self, run: u64, pair: &SettledPair) -> Result<(), SnapshotError> {
        self.bring_back(pair)
            .map_err(|(expected, found)| SnapshotError::Pair {
                run,
                key: pair.key.to_string(),
                detail: format!("expected {expected}, found {found}"),
            })?;
        if let Some(settled) = self.settled.as_mut() {
            settled.pairs = settled.pairs.saturating_sub(1);
        }
        Ok(())
    }

    /// Brings every pair of the runs that is not live back: the whole
    /// state, for what reads it without naming names. On a run that cannot
    /// be read back whole, the error, with the pairs brought back before it
    /// live.
    pub(crate) fn materialise(&mut self) -> Result<(), SnapshotError> {
        let Some(settled) = self.settled.take() else {
            return Ok(());
        };
        let brought = self.bring_back_all(&settled);
        if brought.is_err() {
            self.settled = Some(settled);
        }
        brought
    }

    fn bring_back_all(&mut self, settled: &Settled) -> Result<(), SnapshotError> {
        for run in settled.runs.runs() {
            for record in run.records() {
                let record = record.map_err(run_error)?;
                let live = std::str::from_utf8(record.primary())
                    .is_ok_and(|key| self.find_key(key).is_some());
                if live {
                    continue;
                }
                let pair = read_pair(&record, self.last_seq)?;
                self.bring_back(&pair)
                    .map_err(|(expected, found)| SnapshotError::Pair {
                        run: run.number(),
                        key: pair.key.to_string(),
                        detail: format!("expected {expected}, found {found}"),
                    })?;
            }
        }
        Ok(())
    }

    /// A copy of this state with every pair of its runs brought back.
    pub(crate) fn whole(&self) -> Result<State, SnapshotError> {
        let mut whole = self.clone();
        whole.materialise()?;
        Ok(whole)
    }

    /// Panics if settled pairs are out of memory: `what` reads the whole
    /// state.
    pub(super) fn assert_whole(&self, what: &str) {
        assert!(
            self.settled.is_none(),
            "{what} read from a state with settled pairs in runs: bring them back first"
        );
    }

    /// Puts `pair` into live slots as it was when written, as a record a
    /// run holds; refuses (what was expected, what was found) a pair whose
    /// key or id is live already, or whose currency the state does not
    /// hold, before changing anything.
    pub(super) fn bring_back(&mut self, pair: &SettledPair) -> Result<(), (&'static str, String)> {
        let live = if self.find_key(&pair.key).is_some() {
            Some(format!("key {}, which is live", pair.key))
        } else if self.find_withdrawal(&pair.id).is_some() {
            Some(format!("withdrawal {}, which is live", pair.id))
        } else {
            None
        };
        if let Some(found) = live {
            return Err(("a pair whose key and id are out of memory", found));
        }
        let Some(&currency) = self.currency_numbers.get(&pair.currency) else {
            let found = format!("currency {}", pair.currency);
            return Err(("a currency the state holds", found));
        };
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
            persisted: Persisted::Yes,
            changed_seq: pair.claimed_seq,
        };
        let slot = self.keys.insert(self.hasher.hash(&pair.key), entry);
        self.withdrawals[withdrawal].holder = slot;
        if !pair.replaced.is_empty() {
            self.replaced.insert(slot, pair.replaced.clone());
        }
        self.clean.push_back(slot);
        Ok(())
    }
}

impl State {
    /// Refuses a pair of `settled`'s runs whose key or withdrawal this
    /// state (a snapshot's body) holds too: a lookup would answer from one
    /// or the other.
    fn check_runs_apart_from_body(&self, settled: &Settled) -> Result<(), SnapshotError> {
        for run in settled.runs.runs() {
            for record in run.records() {
                let record = record.map_err(run_error)?;
                let text = |bytes| String::from_utf8_lossy(bytes).into_owned();
                let (key, id) = (text(record.primary()), text(record.secondary()));
                let live = if self.find_key(&key).is_some() {
                    Some(format!("key {key}, which is live in the body"))
                } else if self.find_withdrawal(&id).is_some() {
                    Some(format!("withdrawal {id}, which is live in the body"))
                } else {
                    None
                };
                if let Some(found) = live {
                    return Err(SnapshotError::Pair {
                        run: run.number(),
                        key,
                        detail: format!("expected a pair the body does not hold, found {found}"),
                    });
                }
            }
        }
        Ok(())
    }

    /// How many distinct settled pairs a snapshot of this state keeps out
    /// of its body: those its runs hold out of memory, and the live ones.
    pub(crate) fn pairs_out_of_body(&self) -> u64 {
        let out_of_memory = self.settled.as_ref().map_or(0, |settled| settled.pairs);
        let live = self
            .settled_slots()
            .iter()
            .filter(|&&settled| settled)
            .count();
        out_of_memory + live as u64
    }

    /// Reads every run whole and checks it against the body this state was
    /// read from: every pair readable under the rules, none whose key or id
    /// the body holds, as many distinct pairs as the manifest says, and the
    /// funds they captured what the body says (`archived`, by currency).
    pub(crate) fn check_runs_whole(
        &self,
        archived: &[rust_decimal::Decimal],
    ) -> Result<(), SnapshotError> {
        let Some(settled) = &self.settled else {
            return Ok(());
        };
        self.check_runs_apart_from_body(settled)?;
        let whole = self.whole()?;
        let brought = (whole.keys.len() - self.keys.len()) as u64;
        if brought != settled.pairs {
            return Err(SnapshotError::Invalid {
                field: "manifest pairs",
                offset: 0,
                expected: format!("{brought}, the distinct pairs its runs hold"),
                found: settled.pairs.to_string(),
            });
        }
        let mut captured = vec![rust_decimal::Decimal::ZERO; self.currencies.len()];
        for slot in whole.withdrawals.in_use() {
            let entry = &whole.withdrawals[slot];
            if entry.funds == Funds::Captured
                && self.find_withdrawal(whole.texts.get(entry.id)).is_none()
            {
                let total = &mut captured[entry.currency as usize];
                *total = total.saturating_add(entry.amount.value());
            }
        }
        let differs = (0..captured.len()).find(|&number| {
            captured[number] != archived[number] && captured[number] != rust_decimal::Decimal::MAX
        });
        match differs {
            None => Ok(()),
            Some(number) => Err(SnapshotError::Invalid {
                field: "archived total",
                offset: 0,
                expected: format!(
                    "{} {}, what the runs' pairs captured",
                    captured[number], self.currencies[number]
                ),
                found: archived[number].to_string(),
            }),
        }
    }
}
