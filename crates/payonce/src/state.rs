//! The projections the log is replayed into, and `apply`, the only code
//! that changes them.
//!
//! The three projections the ledger answers from (records: key to what it
//! claimed and what came of it; claims: withdrawal to holder key; holds:
//! withdrawal to funds reserved) are kept in two maps so that each piece of
//! text is stored once: a withdrawal's fingerprint, holder and hold live in
//! one entry per withdrawal; a key's record names its withdrawal and keeps
//! only the outcome's [`Progress`]. Queries put the values back together.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

use payonce_model::{
    Amount, Currency, Destination, Fingerprint, Progress, Reason, RequestKey, WithdrawalId,
    WithdrawalRequest, WithdrawalState,
};
use rust_decimal::Decimal;

use crate::event::{Event, EventKind};
use crate::time::Timestamp;

/// What the ledger believes after some prefix of the log.
///
/// Built only by [`apply`]; read through its query methods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    last_seq: u64,
    accept_foreign_ids: bool,
    /// Request key to what it claimed and what came of it.
    records: HashMap<RequestKey, KeyEntry>,
    /// Withdrawal id to its fingerprint, holder and hold. Holds every
    /// withdrawal minted here and every one a key holds.
    withdrawals: HashMap<WithdrawalId, WithdrawalEntry>,
    held_totals: BTreeMap<Currency, Decimal>,
    /// Keys whose send is running in this process: claimed since the last
    /// open and not completed.
    sending: HashSet<RequestKey>,
    /// One shared copy of each currency code.
    currencies: HashSet<Currency>,
    refusals: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyEntry {
    withdrawal: WithdrawalId,
    outcome: Option<Box<Progress>>,
    claimed_seq: u64,
    claimed_at: Timestamp,
    last_error: Option<Reason>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct WithdrawalEntry {
    amount: Amount,
    currency: Currency,
    destination: Destination,
    holder: Option<RequestKey>,
    /// Minted by this ledger.
    created: bool,
    /// Funds reserved for the current claim.
    held: bool,
}

impl WithdrawalEntry {
    fn matches(&self, id: &WithdrawalId, request: &WithdrawalRequest) -> bool {
        request.id() == id
            && request.amount() == self.amount
            && *request.currency() == self.currency
            && *request.destination() == self.destination
    }

    fn fingerprint(&self, id: &WithdrawalId) -> Fingerprint {
        Fingerprint::new(
            id.clone(),
            self.amount,
            self.currency.clone(),
            self.destination.clone(),
        )
    }
}

/// What a request key claimed, and what came of it: a view into a [`State`].
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    entry: &'a KeyEntry,
    withdrawal: &'a WithdrawalEntry,
}

impl<'a> Record<'a> {
    /// The withdrawal the key claimed.
    pub fn withdrawal(&self) -> &'a WithdrawalId {
        &self.entry.withdrawal
    }
    /// The withdrawal's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.withdrawal.fingerprint(&self.entry.withdrawal)
    }
    /// Whether `request` is the withdrawal the key claimed. Builds nothing.
    pub fn matches(&self, request: &WithdrawalRequest) -> bool {
        self.withdrawal.matches(&self.entry.withdrawal, request)
    }
    /// Its outcome; `None` while in flight.
    pub fn outcome(&self) -> Option<WithdrawalRequest> {
        let progress = self.entry.outcome.as_deref()?;
        Some(WithdrawalRequest::from_parts(
            self.fingerprint(),
            progress.clone(),
        ))
    }
    /// The outcome's progress (state, reference, ...); `None` while in flight.
    pub fn progress(&self) -> Option<&'a Progress> {
        self.entry.outcome.as_deref()
    }
    /// Whether the key's outcome is `outcome`. Builds nothing.
    pub fn has_outcome(&self, outcome: &WithdrawalRequest) -> bool {
        self.progress()
            .is_some_and(|progress| self.matches(outcome) && outcome.has_progress(progress))
    }
    /// Sequence number of the claim.
    pub fn claimed_seq(&self) -> u64 {
        self.entry.claimed_seq
    }
    /// Time of the claim.
    pub fn claimed_at(&self) -> Timestamp {
        self.entry.claimed_at
    }
    /// The last send error or rail refusal, while the outcome is unknown.
    pub fn last_error(&self) -> Option<&'a Reason> {
        self.entry.last_error.as_ref()
    }
}

impl PartialEq for Record<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.entry == other.entry && self.withdrawal == other.withdrawal
    }
}

/// Funds reserved for a claimed withdrawal until its outcome is known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hold {
    /// How much.
    pub amount: Amount,
    /// In what.
    pub currency: Currency,
}

/// A key with an unknown outcome: the operator's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// The key.
    pub key: RequestKey,
    /// The withdrawal it holds.
    pub withdrawal: WithdrawalId,
    /// How much.
    pub amount: Amount,
    /// In what.
    pub currency: Currency,
    /// When it was claimed.
    pub claimed_at: Timestamp,
    /// Sequence number of the claim.
    pub claimed_seq: u64,
    /// The last send error or rail refusal, if any.
    pub last_error: Option<Reason>,
    /// Whether its send is running in this process right now.
    pub send_running: bool,
    /// Whether funds are still held for it (a rail refusal gave them back).
    pub held: bool,
}

impl State {
    /// The state before any event.
    pub fn new() -> Self {
        State::default()
    }

    /// Sequence number of the last event applied; 0 before any.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Whether ids minted elsewhere are accepted (as of the last open).
    pub fn accepts_foreign_ids(&self) -> bool {
        self.accept_foreign_ids
    }

    /// The record for `key`.
    pub fn record(&self, key: &str) -> Option<Record<'_>> {
        let entry = self.records.get(key)?;
        let withdrawal = self.withdrawals.get(&entry.withdrawal)?;
        Some(Record { entry, withdrawal })
    }

    /// The outcome recorded for `key`; `None` if unknown or in flight.
    pub fn outcome(&self, key: &str) -> Option<WithdrawalRequest> {
        self.record(key)?.outcome()
    }

    /// The key holding withdrawal `id`.
    pub fn claimed_by(&self, id: &str) -> Option<&RequestKey> {
        self.withdrawals.get(id)?.holder.as_ref()
    }

    /// The funds held for withdrawal `id`.
    pub fn held(&self, id: &str) -> Option<Hold> {
        let entry = self.withdrawals.get(id).filter(|entry| entry.held)?;
        Some(Hold {
            amount: entry.amount,
            currency: entry.currency.clone(),
        })
    }

    /// Held funds per currency. Currencies with nothing held are absent.
    pub fn held_totals(&self) -> &BTreeMap<Currency, Decimal> {
        &self.held_totals
    }

    /// Whether `key` has a send running in this process.
    pub fn is_sending(&self, key: &str) -> bool {
        self.sending.contains(key)
    }

    /// Whether this ledger minted withdrawal `id`.
    pub fn was_created(&self, id: &str) -> bool {
        self.withdrawals.get(id).is_some_and(|entry| entry.created)
    }

    /// The fingerprint of withdrawal `id`, if this ledger minted it or a key
    /// holds it.
    pub fn fingerprint(&self, id: &str) -> Option<Fingerprint> {
        let (id, entry) = self.withdrawals.get_key_value(id)?;
        Some(entry.fingerprint(id))
    }

    /// Every key with an unknown outcome, oldest claim first.
    pub fn in_flight(&self) -> Vec<InFlight> {
        let mut keys: Vec<InFlight> = self
            .records()
            .filter(|(_, record)| record.progress().is_none())
            .map(|(key, record)| InFlight {
                key: key.clone(),
                withdrawal: record.withdrawal().clone(),
                amount: record.withdrawal.amount,
                currency: record.withdrawal.currency.clone(),
                claimed_at: record.claimed_at(),
                claimed_seq: record.claimed_seq(),
                last_error: record.last_error().cloned(),
                send_running: self.sending.contains(key),
                held: record.withdrawal.held,
            })
            .collect();
        keys.sort_by_key(|entry| entry.claimed_seq);
        keys
    }

    /// Every record, in no particular order.
    pub fn records(&self) -> impl Iterator<Item = (&RequestKey, Record<'_>)> {
        self.records.iter().filter_map(|(key, entry)| {
            let withdrawal = self.withdrawals.get(&entry.withdrawal)?;
            Some((key, Record { entry, withdrawal }))
        })
    }

    /// Every claim (withdrawal id, holder key), in no particular order.
    pub fn claims(&self) -> impl Iterator<Item = (&WithdrawalId, &RequestKey)> {
        self.withdrawals
            .iter()
            .filter_map(|(id, entry)| Some((id, entry.holder.as_ref()?)))
    }

    /// Every hold, in no particular order.
    pub fn holds(&self) -> impl Iterator<Item = (&WithdrawalId, Hold)> {
        self.withdrawals
            .iter()
            .filter(|(_, entry)| entry.held)
            .map(|(id, entry)| {
                (
                    id,
                    Hold {
                        amount: entry.amount,
                        currency: entry.currency.clone(),
                    },
                )
            })
    }

    /// Number of request keys with a record.
    pub fn key_count(&self) -> usize {
        self.records.len()
    }

    /// Number of refusals recorded in the log so far.
    pub fn refusal_count(&self) -> u64 {
        self.refusals
    }

    /// The shared copy of `currency`.
    fn intern(&mut self, currency: &Currency) -> Currency {
        match self.currencies.get(currency) {
            Some(shared) => shared.clone(),
            None => {
                self.currencies.insert(currency.clone());
                currency.clone()
            }
        }
    }

    /// The entry for `request`'s withdrawal, made if new, with the map's own
    /// copy of the id, so records share it rather than keep another.
    fn withdrawal_entry(
        &mut self,
        request: &WithdrawalRequest,
    ) -> (WithdrawalId, &mut WithdrawalEntry) {
        let currency = self.intern(request.currency());
        match self.withdrawals.entry(request.id().clone()) {
            Entry::Occupied(occupied) => (occupied.key().clone(), occupied.into_mut()),
            Entry::Vacant(vacant) => {
                let id = vacant.key().clone();
                let entry = vacant.insert(WithdrawalEntry {
                    amount: request.amount(),
                    currency,
                    destination: request.destination().clone(),
                    holder: None,
                    created: false,
                    held: false,
                });
                (id, entry)
            }
        }
    }

    fn claim(&mut self, key: &RequestKey, request: &WithdrawalRequest, event: &Event) {
        let (id, entry) = self.withdrawal_entry(request);
        entry.holder = Some(key.clone());
        let (amount, currency) = (entry.amount, entry.currency.clone());
        if !std::mem::replace(&mut entry.held, true) {
            let total = self.held_totals.entry(currency).or_default();
            // Normalised, so a total prints the same however it was reached.
            *total = (*total + amount.value()).normalize();
        }
        let record = KeyEntry {
            withdrawal: id,
            outcome: None,
            claimed_seq: event.seq,
            claimed_at: event.at,
            last_error: None,
        };
        self.records.insert(key.clone(), record);
    }

    /// Ends the hold on `id`, captured or released: either way the funds are
    /// no longer reserved.
    fn end_hold(&mut self, id: &WithdrawalId) {
        let Some(entry) = self.withdrawals.get_mut(id) else {
            return;
        };
        if !std::mem::replace(&mut entry.held, false) {
            return;
        }
        if let Some(total) = self.held_totals.get_mut(&entry.currency) {
            *total = (*total - entry.amount.value()).normalize();
            if total.is_zero() {
                self.held_totals.remove(&entry.currency);
            }
        }
    }

    fn set_outcome(&mut self, key: &RequestKey, outcome: &WithdrawalRequest) {
        let Some(record) = self.records.get_mut(key) else {
            return;
        };
        let (_, progress) = outcome.clone().into_parts();
        record.outcome = Some(Box::new(progress));
        record.last_error = None;
        match outcome.state() {
            // The money moved: the hold is captured.
            WithdrawalState::Sent | WithdrawalState::Confirmed => self.end_hold(outcome.id()),
            // It did not and will not: the hold is released.
            WithdrawalState::Failed | WithdrawalState::Rejected => self.end_hold(outcome.id()),
            // Not sent yet: the funds stay reserved.
            WithdrawalState::Requested | WithdrawalState::Approved | WithdrawalState::Sending => {}
        }
    }

    /// Drops `key`'s record, and its withdrawal's claim and hold if the key
    /// still holds it.
    fn release(&mut self, key: &RequestKey) {
        self.sending.remove(key);
        let Some(record) = self.records.remove(key) else {
            return;
        };
        let id = record.withdrawal;
        // A late release never evicts a claim that moved to another key.
        if self
            .withdrawals
            .get(&id)
            .and_then(|entry| entry.holder.as_ref())
            != Some(key)
        {
            return;
        }
        self.end_hold(&id);
        if let Some(entry) = self.withdrawals.get_mut(&id) {
            entry.holder = None;
            if !entry.created {
                // Nothing else refers to a foreign withdrawal nobody holds.
                self.withdrawals.remove(&id);
            }
        }
    }
}

/// Applies one event: the only way a [`State`] changes. Replay calls it for
/// every event in the log; the ledger calls it for every event it appends.
///
/// # Panics
/// If `event.seq` does not follow the last applied event: the log hands
/// events over in order, so anything else is a bug.
pub fn apply(state: &mut State, event: &Event) {
    assert!(
        event.seq > state.last_seq,
        "event {} applied after event {}: events apply in log order",
        event.seq,
        state.last_seq
    );
    state.last_seq = event.seq;
    match &event.kind {
        EventKind::Opened { accept_foreign_ids } => {
            state.accept_foreign_ids = *accept_foreign_ids;
            state.sending.clear();
        }
        EventKind::Created { withdrawal } => {
            state.withdrawal_entry(withdrawal).1.created = true;
        }
        EventKind::Claimed { key, request } => {
            state.claim(key, request, event);
            state.sending.insert(key.clone());
        }
        EventKind::Recorded { key, request } => {
            state.claim(key, request, event);
            state.set_outcome(key, request);
        }
        EventKind::Completed { key, outcome } => {
            state.sending.remove(key);
            state.set_outcome(key, outcome);
        }
        EventKind::SendRejected { key, reason } => {
            state.sending.remove(key);
            if let Some(record) = state.records.get_mut(key) {
                record.last_error = Some(Reason::lossy(&format!("rejected by the rail: {reason}")));
                let id = record.withdrawal.clone();
                state.end_hold(&id);
            }
        }
        EventKind::SendFailed { key, error, .. } => {
            state.sending.remove(key);
            if let Some(record) = state.records.get_mut(key) {
                record.last_error = Some(error.clone());
            }
        }
        EventKind::Resolved { key, outcome, .. } => {
            if !state.records.contains_key(key) {
                state.claim(key, outcome, event);
            }
            state.set_outcome(key, outcome);
        }
        EventKind::Released { key, .. } => state.release(key),
        EventKind::Refused { .. } => state.refusals += 1,
    }
}
