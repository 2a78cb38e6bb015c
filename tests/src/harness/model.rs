//! The reference model: the seed article's `Submissions` (two dictionaries
//! and a lock), plus holds, minted ids and the sends running in this process,
//! in plain ordered maps. It predicts every answer the ledger gives while
//! nothing fails; after a crash or a storage fault the world re-reads it from
//! the reopened ledger, once the ledger has passed the checks that bound
//! what a crash may change.

use std::collections::{BTreeMap, BTreeSet};

use payonce::{RefusalKind, State};
use payonce_model::{Fingerprint, WithdrawalRequest, WithdrawalState};

/// What a call answered, reduced to what the model can predict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// An outcome, recorded now or replayed.
    Outcome(Box<WithdrawalRequest>),
    /// A claim was granted: the send may run.
    Granted,
    /// A resolve or release succeeded.
    Done,
    /// The ledger refused: another key holds the withdrawal, and the
    /// refusal names it.
    Held {
        /// The key holding the withdrawal.
        holder: String,
    },
    /// The ledger refused: the key is claimed and its outcome unknown.
    InFlight {
        /// Whether the refusal says the key's send is running.
        send_running: bool,
    },
    /// The ledger refused for another reason.
    Refused(RefusalKind),
    /// The rail refused cleanly; the key stays claimed.
    Rejected,
    /// The send failed with its outcome unknown; the key stays claimed.
    SendFailed,
    /// The send panicked; the key stays claimed.
    Panicked,
    /// The storage failed (an injected fault): nothing is acknowledged.
    StorageFailed,
    /// The send succeeded but its outcome could not be recorded.
    Unrecorded,
}

/// What the send of a granted claim did, as the ledger is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// The rail answered with this withdrawal.
    Sent(Box<WithdrawalRequest>),
    /// The rail refused cleanly.
    Rejected,
    /// The outcome is unknown (an error, a timeout, a panic, an abandoned
    /// ticket).
    Failed,
}

/// One request key's record: the withdrawal it claimed and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRecord {
    /// The withdrawal claimed.
    pub fingerprint: Fingerprint,
    /// Its outcome; `None` while in flight.
    pub outcome: Option<WithdrawalRequest>,
}

/// The reference model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    /// Request key to its record (the seed's `_records`).
    pub records: BTreeMap<String, ModelRecord>,
    /// Withdrawal id to the key holding it (the seed's `_claims`).
    pub claims: BTreeMap<String, String>,
    /// Withdrawals whose funds are reserved.
    pub holds: BTreeSet<String>,
    /// Keys whose send is running in this process.
    pub sending: BTreeSet<String>,
    /// Withdrawals this ledger minted, by id.
    pub created: BTreeMap<String, Fingerprint>,
    /// Whether ids minted elsewhere are accepted.
    pub accept_foreign_ids: bool,
}

fn is_terminal_for_hold(state: WithdrawalState) -> bool {
    matches!(
        state,
        WithdrawalState::Sent
            | WithdrawalState::Confirmed
            | WithdrawalState::Failed
            | WithdrawalState::Rejected
    )
}

impl Model {
    /// An empty model.
    pub fn new(accept_foreign_ids: bool) -> Model {
        Model {
            accept_foreign_ids,
            ..Model::default()
        }
    }

    /// The model of what `state` holds, with no send running: what a freshly
    /// opened ledger looks like.
    pub fn from_state(state: &State, accept_foreign_ids: bool) -> Model {
        let mut model = Model::new(accept_foreign_ids);
        for (key, record) in state.records() {
            model.records.insert(
                key.to_string(),
                ModelRecord {
                    fingerprint: record.fingerprint(),
                    outcome: record.outcome(),
                },
            );
        }
        for (id, key) in state.claims() {
            model.claims.insert(id.to_string(), key.to_string());
        }
        for (id, _) in state.holds() {
            model.holds.insert(id.to_string());
        }
        model
    }

    /// Remembers a withdrawal the ledger minted.
    pub fn created(&mut self, withdrawal: &WithdrawalRequest) {
        self.created
            .insert(withdrawal.id().to_string(), withdrawal.fingerprint());
    }

    /// The seed's `_claim`: looks the key up first. `None` when the key is
    /// unknown.
    fn lookup(&self, key: &str, fingerprint: &Fingerprint) -> Option<Answer> {
        let record = self.records.get(key)?;
        Some(if &record.fingerprint != fingerprint {
            Answer::Refused(RefusalKind::Conflict)
        } else {
            match &record.outcome {
                Some(outcome) => Answer::Outcome(Box::new(outcome.clone())),
                None => Answer::InFlight {
                    send_running: self.sending.contains(key),
                },
            }
        })
    }

    /// The seed's `_claim_id`, after the ledger's check that the id was
    /// minted here as given. Takes the claim, the record and the hold.
    fn take(&mut self, key: &str, fingerprint: &Fingerprint) -> Result<(), Answer> {
        let id = fingerprint.id().to_string();
        match self.created.get(&id) {
            Some(created) if created != fingerprint => {
                return Err(Answer::Refused(RefusalKind::Conflict));
            }
            None if !self.accept_foreign_ids => {
                return Err(Answer::Refused(RefusalKind::UnknownWithdrawal));
            }
            _ => {}
        }
        if let Some(holder) = self.claims.get(&id)
            && holder != key
        {
            return Err(Answer::Held {
                holder: holder.clone(),
            });
        }
        self.claims.insert(id.clone(), key.to_owned());
        self.records.insert(
            key.to_owned(),
            ModelRecord {
                fingerprint: fingerprint.clone(),
                outcome: None,
            },
        );
        self.holds.insert(id);
        Ok(())
    }

    /// Records `outcome` for `key`; a terminal outcome ends the hold.
    fn settle(&mut self, key: &str, outcome: &WithdrawalRequest) {
        if let Some(record) = self.records.get_mut(key) {
            record.outcome = Some(outcome.clone());
        }
        if is_terminal_for_hold(outcome.state()) {
            self.holds.remove(outcome.id().as_str());
        }
    }

    /// A claim before a send: `Granted` (the key is now sending), a replayed
    /// outcome, or a refusal.
    pub fn claim(&mut self, key: &str, request: &WithdrawalRequest) -> Answer {
        let fingerprint = request.fingerprint();
        if let Some(answer) = self.lookup(key, &fingerprint) {
            return answer;
        }
        match self.take(key, &fingerprint) {
            Err(answer) => answer,
            Ok(()) => {
                self.sending.insert(key.to_owned());
                Answer::Granted
            }
        }
    }

    /// What the send of `key`'s granted claim did.
    pub fn complete(&mut self, key: &str, completion: &Completion) -> Answer {
        let was_sending = self.sending.remove(key);
        assert!(was_sending, "the model completes only keys it granted");
        let Some(record) = self.records.get(key) else {
            unreachable!("a sending key has a record");
        };
        match completion {
            Completion::Sent(outcome) => {
                if outcome.fingerprint() == record.fingerprint && outcome.state().is_settled() {
                    self.settle(key, outcome);
                    Answer::Outcome(outcome.clone())
                } else {
                    // The send answered about another withdrawal, or with
                    // one that says nothing of what the rail did: unknown.
                    Answer::Refused(RefusalKind::Conflict)
                }
            }
            Completion::Rejected => {
                let id = record.fingerprint.id().to_string();
                self.holds.remove(&id);
                Answer::Rejected
            }
            Completion::Failed => Answer::SendFailed,
        }
    }

    /// A submission without a send: the request is its own outcome.
    pub fn record(&mut self, key: &str, request: &WithdrawalRequest) -> Answer {
        let fingerprint = request.fingerprint();
        if let Some(answer) = self.lookup(key, &fingerprint) {
            return answer;
        }
        match self.take(key, &fingerprint) {
            Err(answer) => answer,
            Ok(()) => {
                self.settle(key, request);
                Answer::Outcome(Box::new(request.clone()))
            }
        }
    }

    /// "I looked; here is what happened."
    pub fn resolve(&mut self, key: &str, outcome: &WithdrawalRequest) -> Answer {
        if !outcome.state().is_settled() {
            return Answer::Refused(RefusalKind::Conflict);
        }
        let fingerprint = outcome.fingerprint();
        let Some(record) = self.records.get(key).cloned() else {
            return match self.take(key, &fingerprint) {
                Err(answer) => answer,
                Ok(()) => {
                    self.settle(key, outcome);
                    Answer::Done
                }
            };
        };
        if self.sending.contains(key) {
            return Answer::InFlight { send_running: true };
        }
        if record.fingerprint != fingerprint {
            return Answer::Refused(RefusalKind::Conflict);
        }
        match record.outcome {
            None => {
                self.settle(key, outcome);
                Answer::Done
            }
            Some(existing) if &existing == outcome => Answer::Done,
            Some(_) => Answer::Refused(RefusalKind::Conflict),
        }
    }

    /// The outcome of `key` that a later report or a correction replaces:
    /// refused unless `later` is settled, of the same withdrawal, and the
    /// key has an outcome.
    fn replaced_outcome(
        &self,
        key: &str,
        later: &WithdrawalRequest,
    ) -> Result<WithdrawalRequest, Answer> {
        let refused = Answer::Refused(RefusalKind::Conflict);
        if !later.state().is_settled() {
            return Err(refused);
        }
        match self.records.get(key) {
            Some(record) if record.fingerprint != later.fingerprint() => Err(refused),
            Some(ModelRecord {
                outcome: Some(outcome),
                ..
            }) => Ok(outcome.clone()),
            _ => Err(refused),
        }
    }

    /// A later report of what the rail did: one forward transition of the
    /// recorded outcome, or that outcome again.
    pub fn advance(&mut self, key: &str, later: &WithdrawalRequest) -> Answer {
        let recorded = match self.replaced_outcome(key, later) {
            Ok(recorded) => recorded,
            Err(answer) => return answer,
        };
        if &recorded == later {
            return Answer::Done;
        }
        if recorded.advance_to(later).is_none() {
            return Answer::Refused(RefusalKind::Conflict);
        }
        self.settle(key, later);
        Answer::Done
    }

    /// An operator's correction of `key`'s outcome.
    pub fn correct(&mut self, key: &str, right: &WithdrawalRequest) -> Answer {
        match self.replaced_outcome(key, right) {
            Ok(_) => {
                self.settle(key, right);
                Answer::Done
            }
            Err(answer) => answer,
        }
    }

    /// "I looked; nothing was sent."
    pub fn release(&mut self, key: &str) -> Answer {
        let Some(record) = self.records.get(key).cloned() else {
            return Answer::Done;
        };
        if self.sending.contains(key) {
            return Answer::InFlight { send_running: true };
        }
        if record.outcome.is_some() {
            return Answer::Refused(RefusalKind::Conflict);
        }
        self.records.remove(key);
        let id = record.fingerprint.id().to_string();
        if self.claims.get(&id).map(String::as_str) == Some(key) {
            self.claims.remove(&id);
            self.holds.remove(&id);
        }
        Answer::Done
    }

    /// The outcome of `key`, if it has one.
    pub fn outcome(&self, key: &str) -> Option<&WithdrawalRequest> {
        self.records.get(key).and_then(|r| r.outcome.as_ref())
    }

    /// Whether `key` has a record whose outcome is unknown.
    pub fn in_flight(&self, key: &str) -> bool {
        self.records.get(key).is_some_and(|r| r.outcome.is_none())
    }
}
