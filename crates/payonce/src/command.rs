//! What callers ask the ledger to do, as values `decide` can judge.

use payonce_model::{
    Actor, Amount, Currency, Destination, Difference, Note, Reason, RequestKey, WithdrawalRequest,
    WorkerName,
};
use serde::{Deserialize, Serialize};

/// A request to the ledger. Every input is already a validated value: an
/// invalid key or field was refused before a command could be built.
/// Variants are numbered in declaration order in the encoding (a refusal
/// records its command): new ones go at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Command {
    /// The ledger was opened for writing; no send from before can still be
    /// running in this process.
    Open {
        /// Whether to accept withdrawal ids minted elsewhere. Weakens
        /// exclusivity: a client that mints ids can mint a second one.
        accept_foreign_ids: bool,
        /// A number drawn at random for this opening, which every id it
        /// mints carries: two ledgers, or a ledger and a copy restored from
        /// an old backup, never mint the same id. `None` only in the
        /// commands of events of schemas before 3.
        epoch: Option<u64>,
    },
    /// Mint a withdrawal id for a new withdrawal.
    Create {
        /// How much.
        amount: Amount,
        /// In what.
        currency: Currency,
        /// To where.
        destination: Destination,
        /// Who asked.
        requested_by: Actor,
    },
    /// Claim `key` and the request's withdrawal before a send.
    Claim {
        /// The caller's request key.
        key: RequestKey,
        /// The withdrawal to send.
        request: WithdrawalRequest,
    },
    /// Claim `key` and the withdrawal with the request itself as the outcome:
    /// a submission without a send.
    Record {
        /// The caller's request key.
        key: RequestKey,
        /// The withdrawal, recorded as it stands.
        request: WithdrawalRequest,
    },
    /// Record what the send for a claimed key did.
    Complete {
        /// The key whose send finished.
        key: RequestKey,
        /// What it did.
        result: SendResult,
    },
    /// An operator's "I looked; here is what happened".
    Resolve {
        /// The key to close.
        key: RequestKey,
        /// What happened to the withdrawal.
        outcome: WithdrawalRequest,
        /// Why the operator believes it.
        note: Note,
        /// The operator.
        by: Actor,
    },
    /// An operator's "I looked; nothing was sent".
    Release {
        /// The key to release.
        key: RequestKey,
        /// Why the operator believes it.
        note: Note,
        /// The operator.
        by: Actor,
    },
    /// A later report of what the rail did with a sent withdrawal: it was
    /// confirmed, failed, or bumped to another reference.
    Advance {
        /// The key whose outcome moves on.
        key: RequestKey,
        /// The withdrawal as the rail now reports it.
        outcome: WithdrawalRequest,
    },
    /// An operator's "the outcome recorded for this key is wrong; here is
    /// the right one".
    Correct {
        /// The key whose outcome is corrected.
        key: RequestKey,
        /// The right outcome.
        outcome: WithdrawalRequest,
        /// Why the operator believes it.
        note: Note,
        /// The operator.
        by: Actor,
    },
    /// An operator's "I looked; this worker is gone": ends the session of
    /// a worker of a shared ledger, so the sends it claimed no longer count
    /// as running and their keys can be resolved or released.
    EndSession {
        /// The worker.
        worker: WorkerName,
        /// Why the operator believes it is gone.
        note: Note,
        /// The operator.
        by: Actor,
    },
    /// A worker of a shared ledger started a session: the sends of its
    /// earlier sessions cannot be running any more.
    Start {
        /// The worker.
        worker: WorkerName,
        /// The number drawn for this session, which the ids minted after it
        /// carry.
        epoch: u64,
    },
}

/// What a send did, as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SendResult {
    /// The rail answered; this is the withdrawal's new state.
    Sent(WithdrawalRequest),
    /// The rail refused cleanly: nothing left the account.
    Rejected(Reason),
    /// The outcome is unknown: the money may or may not have moved.
    Failed {
        /// What went wrong, as text.
        error: Reason,
        /// How it went wrong.
        cause: FailureCause,
    },
}

/// Why a send's outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FailureCause {
    /// The send returned an error.
    Error,
    /// The send panicked.
    Panic,
    /// The claim's ticket was dropped without being completed.
    Abandoned,
    /// The send returned a withdrawal that is not the one it was given.
    OutcomeMismatch {
        /// What the send returned.
        outcome: Box<WithdrawalRequest>,
        /// Every field that differs: the claimed value, then the outcome's.
        #[serde(deserialize_with = "payonce_model::bounded::differences")]
        differences: Vec<Difference>,
    },
    /// The send returned the withdrawal in a state that does not say what
    /// the rail did (requested, approved or sending).
    Unsettled {
        /// What the send returned.
        outcome: Box<WithdrawalRequest>,
    },
}
