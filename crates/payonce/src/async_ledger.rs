//! The ledger from tokio: every call that waits for the disk runs on the
//! runtime's blocking pool, so no executor thread blocks on a sync.
//!
//! Many callers grow that pool toward its limit (tokio's
//! `Builder::max_blocking_threads`, 512 by default): a caller's next call
//! often comes before the thread of its last is idle again. 64 callers
//! submitting in a loop keep about 500 threads (docs/runs/performance.md,
//! "A runtime per round"); a service sharing its runtime with other work can
//! bound the pool there.
//!
//! Cancellation keeps the ledger's promises. A future dropped while its
//! claim is being made does not cancel the claim: the blocking task goes
//! on, and the ticket it hands back, dropped with nobody to take it,
//! records that the send was abandoned. A future dropped while its send is
//! awaited drops its ticket the same way. Either way the key stays in
//! flight and its hold stays: nothing but an operator's `resolve` or
//! `release` closes it. A future dropped while its completion is recorded
//! does not stop the recording either.

use std::future::Future;
use std::panic::resume_unwind;

use payonce_model::WithdrawalRequest;
use tokio::task::{JoinError, spawn_blocking};

use crate::error::{LedgerError, SendFailure, SubmitError};
use crate::ledger::{Claim, Ledger, NewWithdrawal, Ticket};

/// A [`Ledger`] for async code: the same ledger (cloning either is cheap),
/// with the calls that wait for stable storage moved to tokio's blocking
/// pool. Needs a tokio runtime with a blocking pool (any runtime does).
#[derive(Debug, Clone)]
pub struct AsyncLedger {
    ledger: Ledger,
}

/// What an async submission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The outcome, on stable storage.
    pub outcome: WithdrawalRequest,
    /// Whether it was recorded before, under this key, and replayed
    /// without a send.
    pub replayed: bool,
}

/// The result of a blocking call, or what its task's end means: a panic
/// goes on unwinding in the caller, as it would have in a synchronous
/// call; a task the runtime dropped before it ran wrote nothing.
fn joined<T>(joined: Result<T, JoinError>) -> Result<T, LedgerError> {
    match joined {
        Ok(value) => Ok(value),
        Err(error) if error.is_panic() => resume_unwind(error.into_panic()),
        Err(_) => Err(LedgerError::Cancelled),
    }
}

impl AsyncLedger {
    /// The async surface of `ledger`.
    pub fn new(ledger: Ledger) -> AsyncLedger {
        AsyncLedger { ledger }
    }

    /// The ledger itself, for its queries: they answer from memory and
    /// never wait for the disk.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Runs `call` on the blocking pool.
    async fn blocking<T, E>(
        &self,
        call: impl FnOnce(&Ledger) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<LedgerError> + Send + 'static,
    {
        let ledger = self.ledger.clone();
        joined(spawn_blocking(move || call(&ledger)).await)?
    }

    /// [`Ledger::create`].
    pub async fn create(&self, new: NewWithdrawal) -> Result<WithdrawalRequest, LedgerError> {
        self.blocking(move |ledger| ledger.create(new)).await
    }

    /// [`Ledger::claim`]: the claim is on stable storage before this
    /// returns [`Claim::Granted`].
    pub async fn claim(&self, key: &str, request: WithdrawalRequest) -> Result<Claim, LedgerError> {
        let key = key.to_owned();
        self.blocking(move |ledger| ledger.claim(&key, request))
            .await
    }

    /// [`Ledger::complete`]: the outcome is on stable storage before this
    /// returns it.
    pub async fn complete(
        &self,
        ticket: Ticket,
        result: Result<WithdrawalRequest, SendFailure>,
    ) -> Result<WithdrawalRequest, SubmitError> {
        self.blocking(move |ledger| ledger.complete(ticket, result))
            .await
    }

    /// [`Ledger::submit`] with an async send: claims, awaits `send`,
    /// records what it answered. `send` is not called for a replay.
    pub async fn submit<F, S>(
        &self,
        key: &str,
        request: WithdrawalRequest,
        send: S,
    ) -> Result<Submission, SubmitError>
    where
        S: FnOnce(WithdrawalRequest) -> F,
        F: Future<Output = Result<WithdrawalRequest, SendFailure>>,
    {
        let ticket = match self.claim(key, request).await? {
            Claim::Replayed(outcome) => {
                return Ok(Submission {
                    outcome,
                    replayed: true,
                });
            }
            Claim::Granted(ticket) => ticket,
        };
        let sent = send(ticket.request().clone()).await;
        let outcome = self.complete(ticket, sent).await?;
        Ok(Submission {
            outcome,
            replayed: false,
        })
    }

    /// [`Ledger::resolve`].
    pub async fn resolve(
        &self,
        key: &str,
        outcome: WithdrawalRequest,
        note: &str,
        by: &str,
    ) -> Result<(), LedgerError> {
        let (key, note, by) = (key.to_owned(), note.to_owned(), by.to_owned());
        self.blocking(move |ledger| ledger.resolve(&key, outcome, &note, &by))
            .await
    }

    /// [`Ledger::release`].
    pub async fn release(&self, key: &str, note: &str, by: &str) -> Result<(), LedgerError> {
        let (key, note, by) = (key.to_owned(), note.to_owned(), by.to_owned());
        self.blocking(move |ledger| ledger.release(&key, &note, &by))
            .await
    }

    /// [`Ledger::correct`].
    pub async fn correct(
        &self,
        key: &str,
        outcome: WithdrawalRequest,
        note: &str,
        by: &str,
    ) -> Result<(), LedgerError> {
        let (key, note, by) = (key.to_owned(), note.to_owned(), by.to_owned());
        self.blocking(move |ledger| ledger.correct(&key, &outcome, &note, &by))
            .await
    }

    /// [`Ledger::advance`].
    pub async fn advance(&self, key: &str, outcome: WithdrawalRequest) -> Result<(), LedgerError> {
        let key = key.to_owned();
        self.blocking(move |ledger| ledger.advance(&key, &outcome))
            .await
    }

    /// [`Ledger::refresh`]: on a shared ledger, catches up on the events
    /// other workers committed.
    pub async fn refresh(&self) -> Result<(), LedgerError> {
        self.blocking(Ledger::refresh).await
    }

    /// [`Ledger::sync`].
    pub async fn sync(&self) -> Result<(), LedgerError> {
        self.blocking(Ledger::sync).await
    }
}
