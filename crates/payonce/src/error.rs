//! What can go wrong, by area: the ledger's own errors, and what `submit`
//! adds when a send is involved.

use std::fmt;

use payonce_log::LogError;
use payonce_model::codec::CodecError;
use payonce_model::{
    FieldError, InvalidTransition, OutcomeError, Reason, RequestKey, WithdrawalId,
    WithdrawalRequest, WorkerName,
};

use crate::decide::Decision;
use crate::event::{EventDecodeError, EventKind};
use crate::refusal::{Refusal, RefusalKind};
use crate::snapshot_format::error::SnapshotError;

/// An error from the ledger.
#[derive(Debug)]
#[non_exhaustive]
pub enum LedgerError {
    /// The ledger refused the command: a conflict, a key in flight, or an
    /// unknown withdrawal. Nothing was sent.
    Refused(Refusal),
    /// An input failed validation. Nothing was written.
    Invalid(FieldError),
    /// The log failed: storage, corruption, lock, or a poisoned writer.
    Log(LogError),
    /// An event could not be encoded. Our inputs are bounded, so this is a
    /// bug; nothing was written.
    Encode(CodecError),
    /// A checksum-valid record in the log is not an event this build reads.
    BadEvent {
        /// The record's sequence number.
        seq: u64,
        /// Why it does not decode.
        error: EventDecodeError,
    },
    /// An event's own sequence number disagrees with its place in the log.
    MisplacedEvent {
        /// The record's sequence number in the log.
        seq: u64,
        /// The sequence number written inside the event.
        found: u64,
    },
    /// Replay met a recorded decision the code would not make again.
    Divergence(Box<Divergence>),
    /// A panic inside the ledger's own code left its state unusable: reopen.
    Poisoned,
    /// Opening found no log in the directory: nothing to open. A ledger is
    /// created only by `Ledger::init`, so a directory whose log was lost
    /// is never taken for a new ledger, which would mint ids again.
    NoLog {
        /// The directory.
        dir: String,
        /// What it holds instead, sorted, at most `FOUND_LISTED_MAX` names:
        /// traces of a ledger (a lock file, an audit index, torn tails
        /// saved aside) or nothing.
        found: Vec<String>,
    },
    /// A shared log (a database) failed, or refused a batch: see
    /// [`StoreError`].
    Store(StoreError),
    /// A snapshot of the projections could not be taken (encoded, written,
    /// pruned). Opening never fails for a snapshot: it sets a bad one
    /// aside and falls back ([`crate::Recovery::snapshots_set_aside`]).
    Snapshot(SnapshotError),
    /// A settled pair set apart ([`crate::Config::set_apart_settled`])
    /// could not be read back from the archive holding it, so the call
    /// that named it was not judged: nothing was decided or appended.
    Archive(SnapshotError),
    /// A worker of a shared ledger was configured with another policy than
    /// the one the ledger recorded when it was created: it refuses to
    /// start, so every worker decides under one policy.
    PolicyMismatch {
        /// Whether the ledger accepts ids minted elsewhere.
        ledger: bool,
        /// Whether the worker was configured to.
        worker: bool,
    },
    /// This worker's session on a shared ledger is over (an operator ended
    /// it, or another process started under its name): it decides nothing
    /// more; start it again.
    SessionOver {
        /// The worker.
        worker: WorkerName,
    },
    /// `Ledger::init` found the directory holding something: a new ledger
    /// starts only in an empty or missing directory.
    NotEmpty {
        /// The directory.
        dir: String,
        /// What it holds, sorted, at most `FOUND_LISTED_MAX` names.
        found: Vec<String>,
        /// How many names it holds.
        count: usize,
    },
    /// An async call's blocking task was dropped by its runtime (shutting
    /// down) before it ran: nothing was written. See `AsyncLedger`.
    Cancelled,
}

/// What went wrong with a shared log (a database). Whatever it is, the
/// batch it stopped was not committed, or it is not known whether it was:
/// either way no claim of it was granted, so no send ran on it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached, or failed a statement; the batch
    /// was not committed.
    Failed {
        /// What failed, as the store said it.
        detail: String,
    },
    /// The store's own constraints refused the batch: a row of one of its
    /// claims or keys is there already. Nothing of the batch was committed.
    Conflict {
        /// The constraint and the row, as the store said it.
        detail: String,
    },
    /// The connection was lost while committing and the store could not be
    /// asked whether the batch landed. Its claims were not granted; a later
    /// start finds out, and records that their sends never ran.
    Unknown {
        /// What failed.
        detail: String,
    },
    /// The store's log is not a payonce log this build reads, or not the
    /// one this process read before: a schema of another version, a gap, a
    /// broken chain, an event rewritten or taken away (a restore or a
    /// failover that lost commits).
    Damaged {
        /// The sequence number where it was found; 0 for the log as a whole.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// The store refuses to be written with this configuration (a setting
    /// that weakens durability, a role without the rights the ledger
    /// needs, another process running as this worker).
    Unsafe {
        /// What is wrong and how to fix it.
        detail: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Failed { detail } => write!(f, "the shared log failed: {detail}"),
            StoreError::Conflict { detail } => write!(
                f,
                "the shared log's constraints refused a batch, and nothing of it was committed:                  {detail}"
            ),
            StoreError::Unknown { detail } => write!(
                f,
                "whether a batch was committed is unknown ({detail}); none of its claims was                  granted"
            ),
            StoreError::Damaged { seq: 0, detail } => write!(f, "the shared log: {detail}"),
            StoreError::Damaged { seq, detail } => {
                write!(f, "the shared log at event {seq}: {detail}")
            }
            StoreError::Unsafe { detail } => {
                write!(f, "the shared log is not safe to write: {detail}")
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// A recorded decision that replay re-derived differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The event's sequence number.
    pub seq: u64,
    /// What the log says was decided.
    pub recorded: EventKind,
    /// What `decide` says now, from the state at that point.
    pub recomputed: Result<Decision, Refusal>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "event {} records {:?}, but replay decides ",
            self.seq, self.recorded
        )?;
        match &self.recomputed {
            Ok(decision) => write!(f, "{decision:?}"),
            Err(refusal) => write!(f, "to refuse: {refusal}"),
        }
    }
}

impl LedgerError {
    /// The refusal, when the ledger refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            LedgerError::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }

    /// The refusal's class, when the ledger refused.
    pub fn refusal_kind(&self) -> Option<RefusalKind> {
        self.refusal().map(Refusal::kind)
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::Refused(refusal) => write!(f, "refused: {refusal}"),
            LedgerError::Invalid(error) => write!(f, "invalid input: {error}"),
            LedgerError::Log(error) => write!(f, "{error}"),
            LedgerError::Encode(error) => write!(f, "{error}"),
            LedgerError::BadEvent { seq, error } => write!(f, "log record {seq}: {error}"),
            LedgerError::MisplacedEvent { seq, found } => {
                write!(f, "log record {seq} holds an event numbered {found}")
            }
            LedgerError::Divergence(divergence) => write!(f, "divergence: {divergence}"),
            LedgerError::Poisoned => {
                f.write_str("a panic inside the ledger left its state unusable; reopen the ledger")
            }
            LedgerError::NoLog { dir, found } if found.is_empty() => write!(
                f,
                "{dir} holds no ledger; create one with init if that is what is meant"
            ),
            LedgerError::NoLog { dir, found } => write!(
                f,
                "{dir} holds no log but traces of a ledger ({}): its log may have been lost; \
                 nothing was opened or written",
                found.join(", ")
            ),
            LedgerError::Cancelled => {
                f.write_str("the runtime shut down before the ledger call ran; nothing was written")
            }
            LedgerError::Store(error) => write!(f, "{error}"),
            LedgerError::Snapshot(error) => write!(f, "snapshot: {error}"),
            LedgerError::Archive(error) => write!(
                f,
                "a settled withdrawal could not be read back from its archive ({error}); \
                 nothing was decided"
            ),
            LedgerError::PolicyMismatch { ledger, worker } => write!(
                f,
                "this worker is configured to {} ids minted elsewhere, but the ledger {} them:                  every worker of a shared ledger decides under the policy recorded at its creation",
                if *worker { "accept" } else { "refuse" },
                if *ledger { "accepts" } else { "refuses" }
            ),
            LedgerError::SessionOver { worker } => write!(
                f,
                "the session of worker {worker} is over (ended by an operator, or another process                  started as {worker}); it decides nothing more until it is started again"
            ),
            LedgerError::NotEmpty { dir, found, count } => write!(
                f,
                "{dir} is not empty ({count} names: {}{}); a new ledger starts only in an empty \
                 directory, and nothing was written",
                found.join(", "),
                if *count > found.len() { ", ..." } else { "" }
            ),
        }
    }
}

impl std::error::Error for LedgerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LedgerError::Refused(error) => Some(error),
            LedgerError::Invalid(error) => Some(error),
            LedgerError::Log(error) => Some(error),
            LedgerError::Encode(error) => Some(error),
            LedgerError::BadEvent { error, .. } => Some(error),
            LedgerError::Store(error) => Some(error),
            LedgerError::Snapshot(error) | LedgerError::Archive(error) => Some(error),
            _ => None,
        }
    }
}

impl From<Refusal> for LedgerError {
    fn from(refusal: Refusal) -> Self {
        LedgerError::Refused(refusal)
    }
}

impl From<FieldError> for LedgerError {
    fn from(error: FieldError) -> Self {
        LedgerError::Invalid(error)
    }
}

impl From<LogError> for LedgerError {
    fn from(error: LogError) -> Self {
        LedgerError::Log(error)
    }
}

impl From<SnapshotError> for LedgerError {
    fn from(error: SnapshotError) -> Self {
        LedgerError::Snapshot(error)
    }
}

impl From<StoreError> for LedgerError {
    fn from(error: StoreError) -> Self {
        LedgerError::Store(error)
    }
}

impl From<CodecError> for LedgerError {
    fn from(error: CodecError) -> Self {
        LedgerError::Encode(error)
    }
}

/// An error from a rail client, boxed: what [`SendFailure::Failed`] holds.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a send reports that it did not produce an outcome.
#[derive(Debug)]
pub enum SendFailure {
    /// The rail refused cleanly: nothing left the account. The hold is
    /// released; the key stays claimed.
    Rejected(Reason),
    /// Anything else. The money may have moved: the key stays claimed with an
    /// unknown outcome and the hold stays.
    Failed(BoxError),
}

impl SendFailure {
    /// The rail refused cleanly, for `reason` (cut and cleaned to a valid
    /// reason if it is not one).
    pub fn rejected(reason: impl AsRef<str>) -> Self {
        SendFailure::Rejected(Reason::lossy(reason.as_ref()))
    }

    /// The send failed, and the money may have moved.
    pub fn failed(error: impl Into<BoxError>) -> Self {
        SendFailure::Failed(error.into())
    }
}

/// So a rail client can use `?` on building its outcome
/// ([`WithdrawalRequest::sent`]): a withdrawal the client cannot describe
/// is an unknown outcome.
impl From<OutcomeError> for SendFailure {
    fn from(error: OutcomeError) -> Self {
        SendFailure::failed(error)
    }
}

impl From<InvalidTransition> for SendFailure {
    fn from(error: InvalidTransition) -> Self {
        SendFailure::failed(error)
    }
}

impl From<FieldError> for SendFailure {
    fn from(error: FieldError) -> Self {
        SendFailure::failed(error)
    }
}

impl From<std::io::Error> for SendFailure {
    fn from(error: std::io::Error) -> Self {
        SendFailure::failed(error)
    }
}

/// An error from [`Ledger::submit`](crate::Ledger::submit) or
/// [`Ledger::complete`](crate::Ledger::complete).
#[derive(Debug)]
#[non_exhaustive]
pub enum SubmitError {
    /// The ledger refused or failed. If it refused the claim, `send` was not
    /// called.
    Ledger(LedgerError),
    /// The rail refused cleanly. The hold is released; the key stays claimed
    /// with an unknown outcome until an operator releases or resolves it.
    Rejected {
        /// The key.
        key: RequestKey,
        /// The withdrawal.
        withdrawal: WithdrawalId,
        /// The rail's reason.
        reason: Reason,
    },
    /// The send failed and the outcome is unknown: the key stays claimed.
    Send(BoxError),
    /// The send succeeded but its outcome could not be recorded. The key is
    /// in flight on disk: after reopening, resolve it with this outcome.
    Unrecorded {
        /// The key.
        key: RequestKey,
        /// What the send returned.
        outcome: Box<WithdrawalRequest>,
        /// Why recording failed.
        cause: Box<LedgerError>,
    },
}

impl SubmitError {
    /// The ledger's refusal, if that is what this is.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            SubmitError::Ledger(error) => error.refusal(),
            _ => None,
        }
    }

    /// The refusal's class, if the ledger refused.
    pub fn refusal_kind(&self) -> Option<RefusalKind> {
        self.refusal().map(Refusal::kind)
    }
}

impl From<LedgerError> for SubmitError {
    fn from(error: LedgerError) -> Self {
        SubmitError::Ledger(error)
    }
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::Ledger(error) => write!(f, "{error}"),
            SubmitError::Rejected {
                key,
                withdrawal,
                reason,
            } => write!(
                f,
                "the rail refused withdrawal {withdrawal} under request key {key}: {reason}; \
                 the hold is released and the key stays claimed"
            ),
            SubmitError::Send(error) => write!(f, "the send failed, outcome unknown: {error}"),
            SubmitError::Unrecorded {
                key,
                outcome,
                cause,
            } => write!(
                f,
                "withdrawal {} was sent under request key {key} but its outcome could not be recorded \
                 ({cause}); resolve the key with it after reopening",
                outcome.id()
            ),
        }
    }
}

impl std::error::Error for SubmitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SubmitError::Ledger(error) => Some(error),
            SubmitError::Send(error) => Some(&**error),
            SubmitError::Unrecorded { cause, .. } => Some(&**cause),
            SubmitError::Rejected { .. } => None,
        }
    }
}
