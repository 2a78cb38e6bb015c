//! What can go wrong, by area: the ledger's own errors, and what `submit`
//! adds when a send is involved.

use std::fmt;

use payonce_log::LogError;
use payonce_model::codec::CodecError;
use payonce_model::{FieldError, Reason, RequestKey, WithdrawalId, WithdrawalRequest};

use crate::decide::Decision;
use crate::event::{EventDecodeError, EventKind};
use crate::refusal::{Refusal, RefusalKind};

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
}

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

impl From<CodecError> for LedgerError {
    fn from(error: CodecError) -> Self {
        LedgerError::Encode(error)
    }
}

/// How a send reports that it did not produce an outcome.
#[derive(Debug)]
pub enum SendFailure<E> {
    /// The rail refused cleanly: nothing left the account. The hold is
    /// released; the key stays claimed.
    Rejected(Reason),
    /// Anything else. The money may have moved: the key stays claimed with an
    /// unknown outcome and the hold stays.
    Failed(E),
}

/// An error from [`Ledger::submit`](crate::Ledger::submit) or
/// [`Ledger::complete`](crate::Ledger::complete).
#[derive(Debug)]
#[non_exhaustive]
pub enum SubmitError<E> {
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
    Send(E),
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

impl<E> SubmitError<E> {
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

impl<E> From<LedgerError> for SubmitError<E> {
    fn from(error: LedgerError) -> Self {
        SubmitError::Ledger(error)
    }
}

impl<E: fmt::Display> fmt::Display for SubmitError<E> {
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

impl<E: fmt::Debug + fmt::Display> std::error::Error for SubmitError<E> {}
