//! The projections the log is replayed into, and `apply`, the only code
//! that changes them.

use std::collections::{BTreeMap, HashMap, HashSet};

use payonce_model::{
    Amount, Currency, Fingerprint, Reason, RequestKey, WithdrawalId, WithdrawalRequest,
    WithdrawalState,
};
use rust_decimal::Decimal;

use crate::event::{Event, EventKind};
use crate::time::Timestamp;

/// What the ledger believes after some prefix of the log: three projections
/// (records, claims, holds) plus what decisions need besides.
///
/// Built only by [`apply`]; read through its query methods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    last_seq: u64,
    accept_foreign_ids: bool,
    /// Request key to what it claimed and what came of it.
    records: HashMap<RequestKey, Record>,
    /// Withdrawal id to the key that holds it.
    claims: HashMap<WithdrawalId, RequestKey>,
    /// Withdrawal id to the funds reserved for it.
    holds: HashMap<WithdrawalId, Hold>,
    held_totals: BTreeMap<Currency, Decimal>,
    /// Ids this ledger minted, with the withdrawal each was minted for.
    created: HashMap<WithdrawalId, Fingerprint>,
    /// Keys whose send is running in this process: claimed since the last
    /// open and not completed.
    sending: HashSet<RequestKey>,
    refusals: u64,
}

/// What a request key claimed, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    fingerprint: Fingerprint,
    outcome: Option<WithdrawalRequest>,
    claimed_seq: u64,
    claimed_at: Timestamp,
    last_error: Option<Reason>,
}

impl Record {
    /// The withdrawal the key claimed.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }
    /// Its outcome; `None` while in flight.
    pub fn outcome(&self) -> Option<&WithdrawalRequest> {
        self.outcome.as_ref()
    }
    /// Sequence number of the claim.
    pub fn claimed_seq(&self) -> u64 {
        self.claimed_seq
    }
    /// Time of the claim.
    pub fn claimed_at(&self) -> Timestamp {
        self.claimed_at
    }
    /// The last send error or rail refusal, while the outcome is unknown.
    pub fn last_error(&self) -> Option<&Reason> {
        self.last_error.as_ref()
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
    pub fn record(&self, key: &str) -> Option<&Record> {
        self.records.get(key)
    }

    /// The outcome recorded for `key`; `None` if unknown or in flight.
    pub fn outcome(&self, key: &str) -> Option<&WithdrawalRequest> {
        self.records
            .get(key)
            .and_then(|record| record.outcome.as_ref())
    }

    /// The key holding withdrawal `id`.
    pub fn claimed_by(&self, id: &str) -> Option<&RequestKey> {
        self.claims.get(id)
    }

    /// The funds held for withdrawal `id`.
    pub fn held(&self, id: &str) -> Option<&Hold> {
        self.holds.get(id)
    }

    /// Held funds per currency. Currencies with nothing held are absent.
    pub fn held_totals(&self) -> &BTreeMap<Currency, Decimal> {
        &self.held_totals
    }

    /// Whether `key` has a send running in this process.
    pub fn is_sending(&self, key: &str) -> bool {
        self.sending.contains(key)
    }

    /// The withdrawal minted under `id`, if this ledger minted it.
    pub fn created(&self, id: &str) -> Option<&Fingerprint> {
        self.created.get(id)
    }

    /// Every key with an unknown outcome, oldest claim first.
    pub fn in_flight(&self) -> Vec<InFlight> {
        let mut keys: Vec<InFlight> = self
            .records
            .iter()
            .filter(|(_, record)| record.outcome.is_none())
            .map(|(key, record)| InFlight {
                key: key.clone(),
                withdrawal: record.fingerprint.id().clone(),
                amount: record.fingerprint.amount(),
                currency: record.fingerprint.currency().clone(),
                claimed_at: record.claimed_at,
                claimed_seq: record.claimed_seq,
                last_error: record.last_error.clone(),
                send_running: self.sending.contains(key),
                held: self.holds.contains_key(record.fingerprint.id()),
            })
            .collect();
        keys.sort_by_key(|entry| entry.claimed_seq);
        keys
    }

    /// Every record, in no particular order.
    pub fn records(&self) -> impl Iterator<Item = (&RequestKey, &Record)> {
        self.records.iter()
    }

    /// Every claim (withdrawal id, holder key), in no particular order.
    pub fn claims(&self) -> impl Iterator<Item = (&WithdrawalId, &RequestKey)> {
        self.claims.iter()
    }

    /// Every hold, in no particular order.
    pub fn holds(&self) -> impl Iterator<Item = (&WithdrawalId, &Hold)> {
        self.holds.iter()
    }

    /// Number of request keys with a record.
    pub fn key_count(&self) -> usize {
        self.records.len()
    }

    /// Number of refusals recorded in the log so far.
    pub fn refusal_count(&self) -> u64 {
        self.refusals
    }

    fn claim(&mut self, key: &RequestKey, request: &WithdrawalRequest, event: &Event) {
        let fingerprint = request.fingerprint();
        self.claims.insert(fingerprint.id().clone(), key.clone());
        self.place_hold(
            fingerprint.id(),
            fingerprint.amount(),
            fingerprint.currency(),
        );
        let record = Record {
            fingerprint,
            outcome: None,
            claimed_seq: event.seq,
            claimed_at: event.at,
            last_error: None,
        };
        self.records.insert(key.clone(), record);
    }

    fn place_hold(&mut self, id: &WithdrawalId, amount: Amount, currency: &Currency) {
        let hold = Hold {
            amount,
            currency: currency.clone(),
        };
        if let Some(previous) = self.holds.insert(id.clone(), hold) {
            // Our invariant: a withdrawal is held at most once at a time.
            self.subtract_total(&previous);
        }
        *self.held_totals.entry(currency.clone()).or_default() += amount.value();
    }

    /// Ends the hold on `id`, captured or released: either way the funds are
    /// no longer reserved.
    fn end_hold(&mut self, id: &WithdrawalId) {
        if let Some(hold) = self.holds.remove(id) {
            self.subtract_total(&hold);
        }
    }

    fn subtract_total(&mut self, hold: &Hold) {
        if let Some(total) = self.held_totals.get_mut(&hold.currency) {
            *total -= hold.amount.value();
            if total.is_zero() {
                self.held_totals.remove(&hold.currency);
            }
        }
    }

    fn set_outcome(&mut self, key: &RequestKey, outcome: &WithdrawalRequest) {
        let Some(record) = self.records.get_mut(key) else {
            return;
        };
        record.outcome = Some(outcome.clone());
        record.last_error = None;
        let id = outcome.id().clone();
        match outcome.state() {
            // The money moved: the hold is captured.
            WithdrawalState::Sent | WithdrawalState::Confirmed => self.end_hold(&id),
            // It did not and will not: the hold is released.
            WithdrawalState::Failed | WithdrawalState::Rejected => self.end_hold(&id),
            // Not sent yet: the funds stay reserved.
            WithdrawalState::Requested | WithdrawalState::Approved | WithdrawalState::Sending => {}
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
            state
                .created
                .insert(withdrawal.id().clone(), withdrawal.fingerprint());
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
                let id = record.fingerprint.id().clone();
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
        EventKind::Released { key, .. } => {
            state.sending.remove(key);
            if let Some(record) = state.records.remove(key) {
                let id = record.fingerprint.id();
                // A late release never evicts a claim that moved to another key.
                if state.claims.get(id) == Some(key) {
                    state.claims.remove(id);
                    state.end_hold(id);
                }
            }
        }
        EventKind::Refused { .. } => state.refusals += 1,
    }
}
