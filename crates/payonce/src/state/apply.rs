//! `apply`: the only code that changes a [`State`], one event at a time.

use payonce_model::{Currency, Reason, TextView, WithdrawalState, WithdrawalView, WorkerName};
use rust_decimal::Decimal;

use super::layout::{Funds, KeySlot, NO_HOLDER, Persisted, WithdrawalSlot};
use super::sessions::Sessions;
use super::{Found, Prefetched, State};
use crate::event::{Event, EventView, KindView};

/// Applies one event: the only way a [`State`] changes. Replay applies
/// every event in the log; the ledger applies every event it appends.
///
/// # Panics
/// If `event.seq` does not follow the last applied event: the log hands
/// events over in order, so anything else is a bug. On a broken invariant
/// of the state's own layout (text kept that no slot names, or a slot
/// naming text that is gone), also a bug. On a ledger's own state with
/// settled pairs set apart, which never leaves the ledger.
pub fn apply(state: &mut State, event: &Event) {
    state.assert_whole("apply");
    apply_judged(state, event);
}

/// [`apply`] of an event the ledger judged a moment ago: what it names was
/// brought back then, if a run held it, so applying it reads nothing from
/// the runs and cannot fail after the event is written.
pub(crate) fn apply_judged(state: &mut State, event: &Event) {
    let event = event.view();
    let names = state.names(&event.kind);
    let prefetched = state.prefetch(&names);
    state.apply_prefetched(&event, &prefetched);
}

impl State {
    /// Phase two of applying an event: changes the state as `event` says,
    /// reading the slots [`State::prefetch`] found for it.
    pub(crate) fn apply_prefetched(&mut self, event: &EventView<'_>, found: &Prefetched<'_>) {
        assert!(
            event.seq > self.last_seq,
            "event {} applied after event {}: events apply in log order",
            event.seq,
            self.last_seq
        );
        self.last_seq = event.seq;
        match &event.kind {
            KindView::Opened {
                accept_foreign_ids,
                epoch,
            } => self.open(*accept_foreign_ids, *epoch),
            KindView::Created { withdrawal } => {
                let slot = self.withdrawal_slot(*withdrawal, found.id);
                self.withdrawals[slot].created = true;
            }
            KindView::Claimed {
                key,
                request,
                worker,
            } => self.claimed(key, *request, *worker, event, found),
            KindView::Recorded { key, request } => {
                let slot = self.claim(key, *request, event, found);
                self.set_outcome(slot, *request);
            }
            KindView::Completed { key, outcome } => {
                if let Some(slot) = self.key_slot(key, found) {
                    self.set_send_running(slot, false);
                    self.set_outcome(slot, *outcome);
                }
            }
            KindView::SendRejected { key, reason, .. } => self.send_rejected(key, *reason, found),
            KindView::SendFailed { key, error, .. } => {
                if let Some(slot) = self.key_slot(key, found) {
                    self.set_send_running(slot, false);
                    self.set_last_error(slot, error);
                }
            }
            KindView::Resolved { key, outcome, .. } => {
                let slot = match self.key_slot(key, found) {
                    Some(slot) => slot,
                    None => self.claim(key, *outcome, event, found),
                };
                self.set_outcome(slot, *outcome);
            }
            KindView::Released { key, .. } => self.release(key, found),
            KindView::Started { worker, epoch } => self.start_session(*worker, *epoch),
            KindView::SessionEnded { worker, .. } => self.end_session(*worker),
            KindView::Refused { .. } => self.refusals += 1,
            KindView::Advanced {
                key,
                outcome: later,
                ..
            }
            | KindView::Corrected {
                key, new: later, ..
            } => {
                if let Some(slot) = self.key_slot(key, found) {
                    self.set_outcome(slot, *later);
                }
            }
        }
        if self.texts.wants_compacting() {
            self.compact();
        }
    }

    /// The ledger was opened, in `epoch`: no send of an earlier process is
    /// running in this one.
    fn open(&mut self, accept_foreign_ids: bool, epoch: Option<u64>) {
        self.accept_foreign_ids = accept_foreign_ids;
        self.epoch = epoch;
        for slot in std::mem::take(&mut self.running) {
            self.keys[slot].send_running = false;
        }
        self.sending = 0;
        self.sessions = Sessions::default();
    }

    /// `worker`'s earlier session is over: none of its sends is running.
    fn end_sends_of(&mut self, worker: TextView<'_, WorkerName>) {
        for slot in self.sessions.sends_of(worker) {
            self.set_send_running(slot, false);
        }
    }

    /// `key` claims `request`'s withdrawal and its send starts, in
    /// `worker`'s session when a worker claimed it.
    fn claimed(
        &mut self,
        key: &str,
        request: WithdrawalView<'_>,
        worker: Option<TextView<'_, WorkerName>>,
        event: &EventView<'_>,
        found: &Prefetched<'_>,
    ) {
        let slot = self.claim(key, request, event, found);
        self.set_send_running(slot, true);
        if let Some(worker) = worker {
            self.sessions.senders.insert(slot, worker.to_value());
        }
    }

    /// `worker` starts a session in `epoch`, which ends its earlier one.
    fn start_session(&mut self, worker: TextView<'_, WorkerName>, epoch: u64) {
        self.end_sends_of(worker);
        self.sessions.live.insert(worker.to_value(), epoch);
        self.epoch = Some(epoch);
    }

    /// `worker`'s session ends.
    fn end_session(&mut self, worker: TextView<'_, WorkerName>) {
        self.end_sends_of(worker);
        self.sessions.live.remove(worker.as_str());
    }

    /// The slot of `key`, as prefetched.
    fn key_slot(&self, key: &str, found: &Prefetched<'_>) -> Option<u32> {
        match found.key {
            Some(found) => {
                debug_assert_eq!(found.name.text, key, "prefetched another key");
                found.slot
            }
            None => self.find_key(key),
        }
    }

    /// The number of `currency`, numbering it if new.
    fn currency_number(&mut self, code: TextView<'_, Currency>) -> u32 {
        if let Some(&number) = self.currency_numbers.get(code.as_str()) {
            return number;
        }
        let currency = code.to_value();
        let number = u32::try_from(self.currencies.len())
            .unwrap_or_else(|_| panic!("the state holds {} currencies", self.currencies.len()));
        self.currencies.push(currency.clone());
        self.held.push(Decimal::ZERO);
        self.captured.push(Decimal::ZERO);
        self.currency_numbers.insert(currency, number);
        number
    }

    /// The slot of `request`'s withdrawal, made if new. `found` is what
    /// prefetching its id found.
    fn withdrawal_slot(&mut self, request: WithdrawalView<'_>, found: Option<Found<'_>>) -> u32 {
        let id = request.id();
        let (hash, slot) = match found {
            Some(found) => {
                debug_assert_eq!(found.name.text, id.as_str(), "prefetched another id");
                (found.name.hash, found.slot)
            }
            None => {
                let hash = self.hasher.hash(&id);
                (hash, self.withdrawals.find(&self.texts, hash, &id))
            }
        };
        if let Some(slot) = slot {
            return slot;
        }
        let entry = WithdrawalSlot {
            id: self.texts.push(&id),
            destination: self.texts.push(&request.destination()),
            amount: request.amount(),
            currency: self.currency_number(request.currency()),
            holder: NO_HOLDER,
            named_by: 0,
            created: false,
            funds: Funds::Free,
            listed: true,
        };
        self.withdrawals.insert(hash, entry)
    }

    /// `key` claims `request`'s withdrawal and holds its funds; returns the
    /// key's slot.
    fn claim(
        &mut self,
        key: &str,
        request: WithdrawalView<'_>,
        event: &EventView<'_>,
        found: &Prefetched<'_>,
    ) -> u32 {
        let withdrawal = self.withdrawal_slot(request, found.id);
        self.withdrawals[withdrawal].named_by += 1;
        let entry = KeySlot {
            key: self.texts.push(key),
            withdrawal,
            claimed_seq: event.seq,
            claimed_at: event.at,
            state: None,
            send_running: false,
            reference: None,
            reason: None,
            requested_by: None,
            persisted: Persisted::No,
            changed_seq: event.seq,
        };
        let slot = match self.key_slot(key, found) {
            // A key claims once. Only a diverging log, applied anyway by
            // `verify` to report on it, claims again: the new record
            // replaces the old (a send running stays running).
            Some(slot) => self.claim_again(slot, entry),
            None => {
                let hash = found
                    .key
                    .map_or_else(|| self.hasher.hash(key), |found| found.name.hash);
                self.keys.insert(hash, entry)
            }
        };
        self.withdrawals[withdrawal].holder = slot;
        // A claim places a hold unless one is placed already.
        self.move_funds(withdrawal, Funds::Held);
        slot
    }

    /// Key slot `slot` claims again, in a log that diverged: `entry`
    /// replaces its record, and its first withdrawal is no longer held by it.
    fn claim_again(&mut self, slot: u32, entry: KeySlot) -> u32 {
        let running = self.keys[slot].send_running;
        let previous = self.keys[slot].withdrawal;
        self.free_key_texts(slot);
        if self.withdrawals[previous].holder == slot {
            // The slot now names another withdrawal.
            self.withdrawals[previous].holder = NO_HOLDER;
        }
        self.unname(previous);
        self.keys[slot] = KeySlot {
            send_running: running,
            ..entry
        };
        slot
    }

    /// The rail refused the send for `key` cleanly: the hold is released,
    /// the key stays claimed.
    fn send_rejected(&mut self, key: &str, reason: TextView<'_, Reason>, found: &Prefetched<'_>) {
        let Some(slot) = self.key_slot(key, found) else {
            return;
        };
        self.set_send_running(slot, false);
        let error = Reason::lossy(&format!("rejected by the rail: {reason}"));
        self.set_last_error(slot, &error);
        if let Some(withdrawal) = self.listed_withdrawal(self.keys[slot].withdrawal) {
            self.move_funds(withdrawal, Funds::Free);
        }
    }

    /// Counts the text of key slot `slot` (its key, outcome and last error)
    /// as freed, and drops its replaced references.
    fn free_key_texts(&mut self, slot: u32) {
        self.texts.free(self.keys[slot].key);
        self.free_outcome(slot);
    }

    /// Counts the text of key slot `slot`'s outcome and last error as
    /// freed, and drops its replaced references: what a new outcome, or
    /// the end of the record, replaces.
    fn free_outcome(&mut self, slot: u32) {
        let entry = &self.keys[slot];
        for at in [entry.reference, entry.reason, entry.requested_by] {
            self.texts.free_option(at);
        }
        self.clear_last_error(slot);
        if !self.replaced.is_empty() {
            self.replaced.remove(&slot);
        }
    }

    /// One record fewer names withdrawal slot `slot`; frees the slot if it
    /// was forgotten and that was the last.
    fn unname(&mut self, slot: u32) {
        let entry = &mut self.withdrawals[slot];
        entry.named_by -= 1;
        if entry.is_free() {
            let (id, destination) = (entry.id, entry.destination);
            self.texts.free(id);
            self.texts.free(destination);
            self.withdrawals.free.push(slot);
        }
    }

    /// Key slot `slot`'s record changes in the event being applied: no run
    /// the state holds has it as it now is.
    fn changed(&mut self, slot: u32) {
        let entry = &mut self.keys[slot];
        entry.persisted = Persisted::No;
        entry.changed_seq = self.last_seq;
    }

    fn set_send_running(&mut self, slot: u32, running: bool) {
        self.changed(slot);
        let entry = &mut self.keys[slot];
        if entry.send_running == running {
            return;
        }
        entry.send_running = running;
        if !running {
            self.sending -= 1;
            if !self.sessions.senders.is_empty() {
                self.sessions.senders.remove(&slot);
            }
            return;
        }
        self.sending += 1;
        self.running.push(slot);
        if self.running.len() > 2 * self.sending + 64 {
            let keys = &self.keys;
            self.running.retain(|&slot| keys[slot].send_running);
            self.running.sort_unstable();
            self.running.dedup();
        }
    }

    /// Moves the funds of withdrawal slot `slot` to `to`, keeping the
    /// per-currency totals: held funds are reserved, captured ones left
    /// custody.
    fn move_funds(&mut self, slot: u32, to: Funds) {
        let entry = &mut self.withdrawals[slot];
        let from = std::mem::replace(&mut entry.funds, to);
        if from == to {
            return;
        }
        let (currency, amount) = (entry.currency as usize, entry.amount.value());
        // `decide` refuses a claim that would pass HELD_TOTAL_MAX; only a log
        // that diverged, which `verify` applies to report on it, gets here
        // with one, and its total stops at the most.
        match from {
            Funds::Held => self.held[currency] = self.held[currency].saturating_sub(amount),
            Funds::Captured => {
                self.captured[currency] = self.captured[currency].saturating_sub(amount)
            }
            Funds::Free => {}
        }
        match to {
            Funds::Held => self.held[currency] = self.held[currency].saturating_add(amount),
            Funds::Captured => {
                self.captured[currency] = self.captured[currency].saturating_add(amount)
            }
            Funds::Free => {}
        }
    }

    /// Records `outcome` as the outcome of key slot `slot`.
    fn set_outcome(&mut self, slot: u32, outcome: WithdrawalView<'_>) {
        self.changed(slot);
        self.free_outcome(slot);
        let reference = outcome.reference().map(|text| self.texts.push(&text));
        let reason = outcome.reason().map(|text| self.texts.push(&text));
        let requested_by = Some(self.texts.push(&outcome.requested_by()));
        let entry = &mut self.keys[slot];
        entry.state = Some(outcome.state());
        entry.reference = reference;
        entry.reason = reason;
        entry.requested_by = requested_by;
        let named = entry.withdrawal;
        if !outcome.replaced().is_empty() {
            self.replaced.insert(slot, outcome.replaced().into());
        }
        // The outcome's own withdrawal: the record's, but in a log that
        // diverged.
        let record_names_it = self.withdrawals[named].listed
            && self.texts.get(self.withdrawals[named].id) == outcome.id().as_str();
        let withdrawal = if record_names_it {
            Some(named)
        } else {
            self.find_withdrawal(&outcome.id())
        };
        let Some(withdrawal) = withdrawal else {
            return;
        };
        match outcome.state() {
            // The money moved: the hold is captured.
            WithdrawalState::Sent | WithdrawalState::Confirmed => {
                self.move_funds(withdrawal, Funds::Captured)
            }
            // It did not, will not, or came back: the funds are released.
            WithdrawalState::Failed | WithdrawalState::Rejected => {
                self.move_funds(withdrawal, Funds::Free)
            }
            // Not sent yet: the funds stay as they are.
            WithdrawalState::Requested | WithdrawalState::Approved | WithdrawalState::Sending => {}
        }
    }

    /// Records `error` as the last send error of key slot `slot`.
    fn set_last_error(&mut self, slot: u32, error: &str) {
        self.changed(slot);
        let at = self.texts.push(error);
        if let Some(old) = self.last_errors.insert(slot, at) {
            self.texts.free(old);
        }
    }

    fn clear_last_error(&mut self, slot: u32) {
        if self.last_errors.is_empty() {
            return;
        }
        if let Some(old) = self.last_errors.remove(&slot) {
            self.texts.free(old);
        }
    }

    /// Drops `key`'s record, and its withdrawal's claim and hold if the key
    /// still holds it.
    fn release(&mut self, key: &str, found: &Prefetched<'_>) {
        let Some(slot) = self.key_slot(key, found) else {
            return;
        };
        let named = self.keys[slot].withdrawal;
        self.set_send_running(slot, false);
        self.free_key_texts(slot);
        self.keys.unlist(slot, self.hasher.hash(key));
        self.keys.free.push(slot);
        // A late release never evicts a claim that moved to another key.
        // Only the slot the key names can be held by it.
        if self.withdrawals[named].holder == slot {
            self.move_funds(named, Funds::Free);
            self.withdrawals[named].holder = NO_HOLDER;
            if !self.withdrawals[named].created {
                // Nothing else refers to a foreign withdrawal nobody holds.
                let id = self.texts.get(self.withdrawals[named].id);
                self.withdrawals.unlist(named, self.hasher.hash(id));
                self.withdrawals[named].listed = false;
            }
        }
        self.unname(named);
    }

    /// Copies the text still in use into a new buffer (see
    /// `Texts::compacted`). Copies every live text at once, under the
    /// ledger's lock.
    pub(super) fn compact(&mut self) {
        let (keys, withdrawals, last_errors) =
            (&mut self.keys, &mut self.withdrawals, &mut self.last_errors);
        self.texts = self.texts.compacted(|keep| {
            keys.change_in_use(|entry| {
                keep(&mut entry.key);
                for at in [
                    &mut entry.reference,
                    &mut entry.reason,
                    &mut entry.requested_by,
                ]
                .into_iter()
                .flatten()
                {
                    keep(at);
                }
            });
            for at in last_errors.values_mut() {
                keep(at);
            }
            // Forgotten withdrawals a record still names keep their text too.
            for entry in withdrawals.entries.iter_mut() {
                if !entry.is_free() {
                    keep(&mut entry.id);
                    keep(&mut entry.destination);
                }
            }
        });
    }
}
