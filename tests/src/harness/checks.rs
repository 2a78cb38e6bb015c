//! Checks over a ledger's state and log that hold whatever was done to it:
//! the projections' invariants, an independent account of every hold, an
//! incremental replay of the log beside the live ledger, and the prefix
//! rule for what a crash may leave.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use payonce::{Event, EventKind, EventLog, Hold, KeyRecord, State, apply, rederive};
use payonce_log::{LogConfig, LogError, LogReader, MemStorage};
use payonce_model::{Amount, Currency, WithdrawalRequest, WithdrawalState};
use rust_decimal::Decimal;

/// A key's record with its values put together, so it can be kept and
/// compared after the state it came from has moved on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordValue {
    /// The withdrawal the key claimed.
    pub fingerprint: payonce_model::Fingerprint,
    /// Its outcome, if known.
    pub outcome: Option<WithdrawalRequest>,
    /// Sequence number of the claim.
    pub claimed_seq: u64,
    /// Time of the claim.
    pub claimed_at: payonce::Timestamp,
    /// The last send error or rail refusal.
    pub last_error: Option<payonce_model::Reason>,
}

impl RecordValue {
    /// The values of `record`.
    pub fn of(record: &KeyRecord<'_>) -> RecordValue {
        RecordValue {
            fingerprint: record.fingerprint(),
            outcome: record.outcome(),
            claimed_seq: record.claimed_seq(),
            claimed_at: record.claimed_at(),
            last_error: record.last_error(),
        }
    }
}

/// The projections of a state, ordered, so two states compare and print
/// readably.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    /// Request key to its record.
    pub records: BTreeMap<String, RecordValue>,
    /// Withdrawal id to the key holding it.
    pub claims: BTreeMap<String, String>,
    /// Withdrawal id to its hold.
    pub holds: BTreeMap<String, Hold>,
    /// Held funds per currency.
    pub totals: BTreeMap<String, Decimal>,
    /// Keys whose send is running in this process.
    pub sending: BTreeSet<String>,
}

impl Projection {
    /// The projections of `state`.
    pub fn of(state: &State) -> Projection {
        Projection {
            records: state
                .records()
                .map(|(key, record)| (key.to_string(), RecordValue::of(&record)))
                .collect(),
            claims: state
                .claims()
                .map(|(id, key)| (id.to_string(), key.to_string()))
                .collect(),
            holds: state
                .holds()
                .map(|(id, hold)| (id.to_string(), hold))
                .collect(),
            totals: state
                .held_totals()
                .iter()
                .map(|(currency, total)| (currency.to_string(), *total))
                .collect(),
            sending: state
                .in_flight()
                .into_iter()
                .filter(|entry| entry.send_running)
                .map(|entry| entry.key.to_string())
                .collect(),
        }
    }

    /// The same, forgetting which sends run: what survives a reopen.
    pub fn at_rest(mut self) -> Projection {
        self.sending.clear();
        self
    }
}

fn holds_funds(state: WithdrawalState) -> bool {
    matches!(
        state,
        WithdrawalState::Requested | WithdrawalState::Approved | WithdrawalState::Sending
    )
}

/// The invariants every state the ledger reaches must satisfy.
///
/// # Panics
/// When one does not hold, naming it.
pub fn assert_invariants(state: &State, context: &str) {
    for (id, key) in state.claims() {
        let record = state.record(&key);
        assert!(
            record.is_some_and(|r| r.withdrawal() == id),
            "{context}: withdrawal {id} is claimed by key {key}, which has no record of it"
        );
    }
    for (key, record) in state.records() {
        let fingerprint = record.fingerprint();
        let id = fingerprint.id();
        assert_eq!(
            state.claimed_by(id),
            Some(key.clone()),
            "{context}: key {key} has a record for {id} without holding its claim"
        );
        if let Some(outcome) = record.outcome() {
            assert!(
                holds_funds(outcome.state()) || state.held(id).is_none(),
                "{context}: {id} is {} yet its funds are still held",
                outcome.state()
            );
            assert!(
                !state.is_sending(&key),
                "{context}: key {key} is sending after its outcome"
            );
        }
    }
    let mut totals: BTreeMap<Currency, Decimal> = BTreeMap::new();
    for (id, hold) in state.holds() {
        let record = state.claimed_by(&id).and_then(|key| state.record(&key));
        let Some(record) = record else {
            panic!("{context}: funds are held for {id}, which no key claims");
        };
        assert!(
            record.outcome().is_none_or(|o| holds_funds(o.state())),
            "{context}: funds are held for {id} after its outcome"
        );
        let fingerprint = record.fingerprint();
        assert_eq!(
            (hold.amount, &hold.currency),
            (fingerprint.amount(), fingerprint.currency()),
            "{context}: the hold on {id} is not the claimed amount"
        );
        *totals.entry(hold.currency.clone()).or_default() += hold.amount.value();
    }
    let held: BTreeMap<Currency, Decimal> = state
        .held_totals()
        .iter()
        .map(|(currency, total)| (currency.clone(), *total))
        .collect();
    assert_eq!(
        totals, held,
        "{context}: held totals are not the sum of the holds"
    );
}

/// An account of holds kept from the events alone, independently of the
/// ledger's `apply`: every claim places one hold, and the hold is captured
/// or released at most once.
#[derive(Debug, Clone, Default)]
pub struct HoldAudit {
    holds: BTreeMap<String, (Amount, Currency)>,
    /// Key to the withdrawal it claimed.
    keys: BTreeMap<String, String>,
    claims: BTreeMap<String, String>,
    /// Keys whose hold a rail refusal released while the key stays claimed.
    rejected: BTreeSet<String>,
    /// Holds placed.
    pub placed: u64,
    /// Holds captured: the money moved.
    pub captured: u64,
    /// Holds released: it did not and will not.
    pub released: u64,
}

impl HoldAudit {
    fn place(&mut self, key: &str, request: &WithdrawalRequest, seq: u64) -> Result<(), String> {
        let id = request.id().to_string();
        if self.holds.contains_key(&id) {
            return Err(format!(
                "event {seq}: key {key} claims {id}, whose funds are already held"
            ));
        }
        if let Some(holder) = self.claims.get(&id)
            && holder != key
        {
            return Err(format!(
                "event {seq}: key {key} claims {id}, which key {holder} holds"
            ));
        }
        self.holds
            .insert(id.clone(), (request.amount(), request.currency().clone()));
        self.keys.insert(key.to_owned(), id.clone());
        self.claims.insert(id, key.to_owned());
        self.rejected.remove(key);
        self.placed += 1;
        Ok(())
    }

    /// Ends the hold on `id`: `strict` when it must still be there.
    fn end(&mut self, id: &str, captured: bool, strict: bool, seq: u64) -> Result<(), String> {
        match self.holds.remove(id) {
            Some(_) if captured => self.captured += 1,
            Some(_) => self.released += 1,
            None if strict => {
                return Err(format!("event {seq}: the hold on {id} ends a second time"));
            }
            None => {}
        }
        Ok(())
    }

    fn settle(
        &mut self,
        outcome: &WithdrawalRequest,
        strict: bool,
        seq: u64,
    ) -> Result<(), String> {
        let state = outcome.state();
        if holds_funds(state) {
            return Ok(());
        }
        let captured = matches!(state, WithdrawalState::Sent | WithdrawalState::Confirmed);
        self.end(outcome.id().as_str(), captured, strict, seq)
    }

    /// Accounts for one event of a log that replays without divergence.
    pub fn apply(&mut self, event: &Event) -> Result<(), String> {
        let seq = event.seq;
        match &event.kind {
            EventKind::Claimed { key, request, .. } => self.place(key, request, seq),
            EventKind::Recorded { key, request } => {
                self.place(key, request, seq)?;
                self.settle(request, true, seq)
            }
            EventKind::Completed { outcome, .. } => self.settle(outcome, true, seq),
            EventKind::SendRejected { key, .. } => {
                let id = self.keys.get(key.as_str()).cloned().unwrap_or_default();
                self.rejected.insert(key.to_string());
                self.end(&id, false, true, seq)
            }
            EventKind::Resolved { key, outcome, .. } => {
                if !self.keys.contains_key(key.as_str()) {
                    self.place(key, outcome, seq)?;
                    return self.settle(outcome, true, seq);
                }
                // After a rail refusal the hold is gone already.
                let strict = !self.rejected.contains(key.as_str());
                self.settle(outcome, strict, seq)
            }
            EventKind::Released { key, .. } => {
                let strict = !self.rejected.remove(key.as_str());
                if let Some(id) = self.keys.remove(key.as_str())
                    && self.claims.get(&id).map(String::as_str) == Some(key.as_str())
                {
                    self.claims.remove(&id);
                    self.end(&id, false, strict, seq)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Checks the account against the ledger's holds.
    ///
    /// # Panics
    /// When they differ.
    pub fn assert_matches(&self, state: &State, context: &str) {
        let audited: BTreeMap<String, (Amount, Currency)> = self.holds.clone();
        let ledger: BTreeMap<String, (Amount, Currency)> = state
            .holds()
            .map(|(id, hold)| (id.to_string(), (hold.amount, hold.currency.clone())))
            .collect();
        assert_eq!(
            ledger, audited,
            "{context}: the ledger's holds differ from the account kept from its events"
        );
    }
}

/// Replays a ledger's log incrementally beside the live ledger: re-derives
/// every decision and keeps the hold account.
#[derive(Debug, Clone, Default)]
pub struct Shadow {
    /// The state the replay reached.
    pub state: State,
    /// The hold account.
    pub audit: HoldAudit,
}

impl Shadow {
    /// Reads and applies the events appended to `storage` since the last
    /// call.
    ///
    /// # Panics
    /// On a divergence, an unreadable log, or a hold account violation.
    pub fn catch_up(&mut self, storage: &MemStorage, config: &LogConfig, context: &str) {
        let log = match EventLog::open_on(Arc::new(storage.clone()), config.clone()) {
            Ok(log) => log,
            Err(payonce::LedgerError::Log(LogError::NotALog { .. })) => return,
            Err(error) => panic!("{context}: the log does not open read-only: {error}"),
        };
        let from = self.state.last_seq() + 1;
        let mut events = log
            .events_from(from)
            .unwrap_or_else(|error| panic!("{context}: reading events from {from}: {error}"));
        loop {
            let next = events
                .next_event()
                .unwrap_or_else(|error| panic!("{context}: reading the log: {error}"));
            let Some((event, _)) = next else { break };
            assert_eq!(
                event.seq,
                self.state.last_seq() + 1,
                "{context}: events out of order"
            );
            if let Some(divergence) = rederive(&self.state, &event) {
                panic!("{context}: replay diverges: {divergence}");
            }
            if let Err(violation) = self.audit.apply(&event) {
                panic!("{context}: {violation}");
            }
            apply(&mut self.state, &event);
        }
    }
}

/// The payloads of every complete record in `storage`, in order; none if
/// it holds no log.
///
/// # Panics
/// If the log refuses to be read: damage a crash cannot explain.
pub fn records(storage: &MemStorage, config: &LogConfig, context: &str) -> Vec<Vec<u8>> {
    let reader = match LogReader::open(Arc::new(storage.clone()), config.clone()) {
        Ok(reader) => reader,
        Err(LogError::NotALog { .. }) => return Vec::new(),
        Err(error) => panic!("{context}: the log does not open read-only: {error}"),
    };
    let mut payloads = Vec::new();
    let scanned = reader.scan(|record| {
        payloads.push(record.payload.to_vec());
        Ok::<(), std::convert::Infallible>(())
    });
    if let Err(error) = scanned {
        panic!("{context}: the log does not verify: {error}");
    }
    payloads
}

/// What a crash may leave: a prefix of what was written, holding at least
/// every record acknowledged durable.
///
/// # Panics
/// When the image holds a record that was not written there, or lost one
/// that was acknowledged.
pub fn assert_crash_prefix(
    live: &MemStorage,
    image: &MemStorage,
    config: &LogConfig,
    durable: u64,
    context: &str,
) -> usize {
    let written = records(live, config, &format!("{context} (before the crash)"));
    let survived = records(image, config, &format!("{context} (after the crash)"));
    assert!(
        survived.len() as u64 >= durable,
        "{context}: {} records survived, but {durable} were acknowledged durable",
        survived.len()
    );
    assert!(
        survived.len() <= written.len(),
        "{context}: {} records survived, more than the {} written",
        survived.len(),
        written.len()
    );
    for (index, (a, b)) in survived.iter().zip(&written).enumerate() {
        assert!(
            a == b,
            "{context}: record {} after the crash is not the record written",
            index + 1
        );
    }
    survived.len()
}
