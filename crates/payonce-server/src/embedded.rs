//! The ledger the HTTP service runs on: the payonce library in the
//! service's process, through [`AsyncLedger`], on a file ledger or as one
//! worker of a PostgreSQL one. Every answer is the library's own type
//! (`WithdrawalRequest`, `Refusal` inside `LedgerError` and
//! `SubmitError`), which the service maps to HTTP.
//!
//! A worker's reads first catch up on what the other workers decided
//! (`Ledger::refresh`), on the blocking pool: its projection stays locked
//! while a batch waits for the ledger-wide lock, and no executor thread may
//! wait that long.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use payonce::{
    AsyncLedger, InFlight, Ledger, LedgerError, MemoryUse, NewWithdrawal, State, Submission,
    SubmitError, Timestamp,
};
use payonce_model::{Fingerprint, Reason, WithdrawalId, WithdrawalRequest};

use crate::metrics::Metrics;
use crate::rail::{Rail, RailSend};

/// What the ledger holds for one request key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFacts {
    /// The ledger's request key.
    pub key: String,
    /// The withdrawal it holds.
    pub withdrawal: WithdrawalId,
    /// When it was claimed.
    pub claimed_at: Timestamp,
    /// Its outcome; `None` while in flight.
    pub outcome: Option<WithdrawalRequest>,
    /// The last send error or rail refusal, if any.
    pub last_error: Option<Reason>,
    /// Whether its send is running in this process.
    pub send_running: bool,
    /// Whether funds are held for it.
    pub held: bool,
}

/// What the ledger holds for one withdrawal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithdrawalFacts {
    /// Its id, amount, currency and destination, as created.
    pub fingerprint: Fingerprint,
    /// The key that holds its claim, if any.
    pub holder: Option<KeyFacts>,
}

/// The payonce library in the service's process, through [`AsyncLedger`]:
/// on a file log, or as one worker of a shared (PostgreSQL) ledger, whose
/// reads first catch up on what the other workers decided.
#[derive(Debug, Clone)]
pub struct Embedded {
    ledger: AsyncLedger,
    metrics: Arc<Metrics>,
}

impl Embedded {
    /// The service's ledger on `ledger`; durable commits are timed into
    /// `metrics`.
    pub fn new(ledger: Ledger, metrics: Arc<Metrics>) -> Embedded {
        Embedded {
            ledger: AsyncLedger::new(ledger),
            metrics,
        }
    }

    /// The library's async ledger, for what the service asks of it as it
    /// is: an operator's resolve, correct and release, and the sync at
    /// shutdown.
    pub fn library(&self) -> &AsyncLedger {
        &self.ledger
    }

    /// What `query` about a key or a withdrawal (`[key, id]`) answers with
    /// every decision any worker acknowledged before the call began: on a
    /// shared ledger, once this worker has caught up on the others'
    /// batches.
    async fn read_newest<T: Send + 'static>(
        &self,
        [key, id]: [Option<String>; 2],
        query: impl FnOnce(&State) -> T + Send + 'static,
    ) -> Result<T, LedgerError> {
        self.read_off_executor(move |ledger| {
            ledger.refresh()?;
            ledger.read_named(key.as_deref(), id.as_deref(), query)
        })
        .await
    }

    /// Runs `read` on the blocking pool on a shared ledger, in place on a
    /// file one. A shared ledger's projection stays locked while a batch
    /// waits for the ledger-wide lock and its round trips, and no executor
    /// thread may wait that long; a file ledger's is locked only while a
    /// decision is made.
    async fn read_off_executor<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Ledger) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, LedgerError> {
        let ledger = self.ledger.ledger().clone();
        if ledger.worker().is_none() {
            return read(&ledger);
        }
        match tokio::task::spawn_blocking(move || read(&ledger)).await {
            Ok(answer) => answer,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => Err(LedgerError::Cancelled),
        }
    }

    /// Times `elapsed` since `start` as one durable commit.
    fn timed(&self, start: Instant) {
        self.metrics.committed(start.elapsed());
    }

    /// Creates a withdrawal.
    pub async fn create(&self, new: NewWithdrawal) -> Result<WithdrawalRequest, LedgerError> {
        let start = Instant::now();
        let created = self.ledger.create(new).await;
        self.timed(start);
        created
    }

    /// Claims `key` for `request`, sends through `rail`, records the
    /// outcome; replays a recorded one without sending
    /// ([`AsyncLedger::submit`]). The claim and the outcome are each timed
    /// as one durable commit.
    pub async fn submit(
        &self,
        key: &str,
        request: WithdrawalRequest,
        rail: &dyn Rail,
    ) -> Result<Submission, SubmitError> {
        let start = Instant::now();
        let sent_at = OnceLock::new();
        let submitted = self
            .ledger
            .submit(key, request, |withdrawal| async {
                self.timed(start);
                let send = RailSend {
                    withdrawal,
                    key: key.to_owned(),
                };
                let result = rail.send(&send).await.into_result(&send.withdrawal);
                let _first = sent_at.set(Instant::now());
                result
            })
            .await;
        // The outcome's commit, or the claim's when no send ran.
        self.timed(sent_at.get().copied().unwrap_or(start));
        submitted
    }

    /// What withdrawal `id` was created as, if the ledger created it: for
    /// a submission, whose claim is decided on the ledger as it stands when
    /// its batch runs. A fingerprint never changes once created, so it need
    /// not be the newest read.
    pub async fn fingerprint(&self, id: &str) -> Result<Option<Fingerprint>, LedgerError> {
        // From memory; only an id this worker has not seen yet waits for a
        // catch-up, since another worker may have just created it. The
        // claim's own batch catches up under the ledger-wide lock.
        let id = id.to_owned();
        self.read_off_executor(move |ledger| {
            if let Some(known) = ledger.fingerprint(&id)? {
                return Ok(Some(known));
            }
            ledger.refresh()?;
            ledger.fingerprint(&id)
        })
        .await
    }

    /// The withdrawal `id`, if the ledger created it, with every decision
    /// acknowledged before the call began.
    pub async fn withdrawal(&self, id: &str) -> Result<Option<WithdrawalFacts>, LedgerError> {
        let id = id.to_owned();
        let about = [None, Some(id.clone())];
        self.read_newest(about, move |state| withdrawal_facts(state, &id))
            .await
    }

    /// The ledger key `key`, if it has a record, with every decision
    /// acknowledged before the call began.
    pub async fn key(&self, key: &str) -> Result<Option<KeyFacts>, LedgerError> {
        let key = key.to_owned();
        let about = [Some(key.clone()), None];
        self.read_newest(about, move |state| key_facts(state, &key))
            .await
    }

    /// Every key in flight, oldest first, with every decision acknowledged
    /// before the call began.
    pub async fn in_flight(&self) -> Result<Vec<InFlight>, LedgerError> {
        self.read_newest([None, None], State::in_flight).await
    }

    /// Whether the ledger can record a decision now (a worker of a shared
    /// ledger: whether it reaches a database that accepts writes), for the
    /// health check; never waits longer than one attempt to connect.
    pub async fn reachable(&self) -> Result<(), LedgerError> {
        self.read_off_executor(Ledger::reachable).await
    }

    /// What the ledger's state takes of its memory budget, from memory.
    pub fn memory(&self) -> Result<MemoryUse, LedgerError> {
        self.ledger.ledger().memory()
    }
}

fn key_facts(state: &State, key: &str) -> Option<KeyFacts> {
    let record = state.record(key)?;
    let withdrawal = record.withdrawal();
    Some(KeyFacts {
        key: record.key().to_string(),
        claimed_at: record.claimed_at(),
        outcome: record.outcome(),
        last_error: record.last_error(),
        send_running: record.send_running(),
        held: state.held(&withdrawal).is_some(),
        withdrawal,
    })
}

fn withdrawal_facts(state: &State, id: &str) -> Option<WithdrawalFacts> {
    let fingerprint = state.fingerprint(id)?;
    let holder = state
        .claimed_by(id)
        .and_then(|holder| key_facts(state, &holder));
    Some(WithdrawalFacts {
        fingerprint,
        holder,
    })
}
