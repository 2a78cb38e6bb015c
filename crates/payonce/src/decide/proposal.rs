//! A proposal: the one description of what a caller asks the ledger. It
//! is a [`Command`] (what a refusal records, and the names the ledger reads
//! back before judging) with the types of what it can come to; deciding it
//! judges that same command, so what is decided and what is recorded as
//! refused cannot drift apart. Only the constructors here make one, each
//! pairing a command with the judgement of its own variant.

use std::convert::Infallible;

use payonce_model::{
    Actor, Amount, Currency, Destination, Note, Reason, RequestKey, WithdrawalRequest, WorkerName,
};

use super::{AlreadyClosed, Answer, Replayed, Returned};
use crate::command::{Command, FailureCause, SendResult};
use crate::event::SCHEMA_VERSION;
use crate::refusal::Refusal;
use crate::state::State;

/// How a proposal's command is judged: against the state, as the worker
/// that decides it (a claim names it).
type Judge<M, N> = fn(&State, &Command, Option<&WorkerName>) -> Result<Answer<M, N>, Refusal>;

/// A command, and what it can come to: an event meaning `M` to the caller,
/// or nothing written, because of `N`.
pub(crate) struct Proposal<M, N> {
    command: Command,
    judge: Judge<M, N>,
}

impl<M, N> Proposal<M, N> {
    /// What is asked, as a refusal records it.
    pub(crate) fn command(&self) -> &Command {
        &self.command
    }

    /// Judges the command against `state`, decided by `worker` (a worker
    /// of a shared ledger) or by the one process that writes the ledger.
    pub(crate) fn decide(
        &self,
        state: &State,
        worker: Option<&WorkerName>,
    ) -> Result<Answer<M, N>, Refusal> {
        (self.judge)(state, &self.command, worker)
    }
}

/// Every proposal is built here with the judgement of its own variant, so
/// another variant never reaches a judgement.
fn built_as(variant: &str) -> ! {
    unreachable!("a proposal built as {variant} holds another command")
}

/// The ledger was opened for writing, in `epoch`.
pub(crate) fn open(accept_foreign_ids: bool, epoch: Option<u64>) -> Proposal<(), Infallible> {
    Proposal {
        command: Command::Open {
            accept_foreign_ids,
            epoch,
        },
        judge: |_, command, _| match command {
            Command::Open {
                accept_foreign_ids,
                epoch,
            } => Ok(super::open(*accept_foreign_ids, *epoch)),
            _ => built_as("an opening"),
        },
    }
}

/// A shared ledger is created, in `epoch`, on a log that holds no event;
/// on one that does, nothing is written, and the count it holds says why.
pub(crate) fn create_ledger(accept_foreign_ids: bool, epoch: Option<u64>) -> Proposal<(), u64> {
    Proposal {
        command: Command::Open {
            accept_foreign_ids,
            epoch,
        },
        judge: |state, command, _| match (command, state.last_seq()) {
            (
                Command::Open {
                    accept_foreign_ids,
                    epoch,
                },
                0,
            ) => Ok(super::open(*accept_foreign_ids, *epoch).map_nothing()),
            (Command::Open { .. }, events) => Ok(Answer::Nothing(events)),
            _ => built_as("an opening"),
        },
    }
}

/// A worker of a shared ledger started a session, in `epoch`.
pub(crate) fn start(worker: WorkerName, epoch: u64) -> Proposal<(), Infallible> {
    Proposal {
        command: Command::Start { worker, epoch },
        judge: |_, command, _| match command {
            Command::Start { worker, epoch } => Ok(super::start(worker, *epoch)),
            _ => built_as("a start"),
        },
    }
}

/// An operator's "this worker is gone".
pub(crate) fn end_session(worker: WorkerName, note: Note, by: Actor) -> Proposal<(), Infallible> {
    Proposal {
        command: Command::EndSession { worker, note, by },
        judge: |state, command, _| match command {
            Command::EndSession { worker, note, by } => super::end_session(state, worker, note, by),
            _ => built_as("an end of session"),
        },
    }
}

/// A new withdrawal; means the withdrawal made.
pub(crate) fn create(
    amount: Amount,
    currency: Currency,
    destination: Destination,
    requested_by: Actor,
) -> Proposal<WithdrawalRequest, Infallible> {
    Proposal {
        command: Command::Create {
            amount,
            currency,
            destination,
            requested_by,
        },
        judge: |state, command, _| match command {
            Command::Create {
                amount,
                currency,
                destination,
                requested_by,
            } => Ok(super::create(
                state,
                *amount,
                currency,
                destination,
                requested_by,
            )),
            _ => built_as("a creation"),
        },
    }
}

/// A claim of `key` for `request` before a send.
pub(crate) fn claim(key: RequestKey, request: WithdrawalRequest) -> Proposal<(), Replayed> {
    Proposal {
        command: Command::Claim { key, request },
        judge: |state, command, worker| match command {
            Command::Claim { key, request } => super::claim(state, key, request, worker),
            _ => built_as("a claim"),
        },
    }
}

/// A claim of `key` with `request`, as it stands, as its outcome.
pub(crate) fn record(key: RequestKey, request: WithdrawalRequest) -> Proposal<(), Replayed> {
    Proposal {
        command: Command::Record { key, request },
        judge: |state, command, _| match command {
            Command::Record { key, request } => super::record(state, key, request),
            _ => built_as("a record"),
        },
    }
}

/// What the send for `key` did.
pub(crate) fn complete(key: RequestKey, result: SendResult) -> Proposal<(), Infallible> {
    Proposal {
        command: Command::Complete { key, result },
        judge: |state, command, _| match command {
            Command::Complete { key, result } => {
                super::complete(state, key, result, SCHEMA_VERSION)
            }
            _ => built_as("a completion"),
        },
    }
}

/// The send for `key` returned `outcome`; means whether it is the claimed
/// withdrawal's outcome.
pub(crate) fn complete_sent(
    key: RequestKey,
    outcome: WithdrawalRequest,
) -> Proposal<Returned, Infallible> {
    Proposal {
        command: Command::Complete {
            key,
            result: SendResult::Sent(outcome),
        },
        judge: |state, command, _| match command {
            Command::Complete {
                key,
                result: SendResult::Sent(outcome),
            } => super::complete_sent(state, key, outcome, SCHEMA_VERSION),
            _ => built_as("a completion with an outcome"),
        },
    }
}

/// The send for `key` ended without an outcome, because of `error`.
pub(crate) fn complete_failed(
    key: RequestKey,
    error: Reason,
    cause: FailureCause,
) -> Proposal<(), Infallible> {
    complete(key, SendResult::Failed { error, cause })
}

/// An operator's "here is what happened" for `key`.
pub(crate) fn resolve(
    key: RequestKey,
    outcome: WithdrawalRequest,
    note: Note,
    by: Actor,
) -> Proposal<(), AlreadyClosed> {
    Proposal {
        command: Command::Resolve {
            key,
            outcome,
            note,
            by,
        },
        judge: |state, command, _| match command {
            Command::Resolve {
                key,
                outcome,
                note,
                by,
            } => super::resolve(state, key, outcome, note, by, SCHEMA_VERSION),
            _ => built_as("a resolution"),
        },
    }
}

/// An operator's "nothing was sent" for `key`.
pub(crate) fn release(key: RequestKey, note: Note, by: Actor) -> Proposal<(), AlreadyClosed> {
    Proposal {
        command: Command::Release { key, note, by },
        judge: |state, command, _| match command {
            Command::Release { key, note, by } => super::release(state, key, note, by),
            _ => built_as("a release"),
        },
    }
}

/// A later report of what the rail did with `key`'s outcome.
pub(crate) fn advance(key: RequestKey, outcome: WithdrawalRequest) -> Proposal<(), AlreadyClosed> {
    Proposal {
        command: Command::Advance { key, outcome },
        judge: |state, command, _| match command {
            Command::Advance { key, outcome } => super::advance(state, key, outcome),
            _ => built_as("an advance"),
        },
    }
}

/// An operator's correction of `key`'s outcome to `outcome`.
pub(crate) fn correct(
    key: RequestKey,
    outcome: WithdrawalRequest,
    note: Note,
    by: Actor,
) -> Proposal<(), AlreadyClosed> {
    Proposal {
        command: Command::Correct {
            key,
            outcome,
            note,
            by,
        },
        judge: |state, command, _| match command {
            Command::Correct {
                key,
                outcome,
                note,
                by,
            } => super::correct(state, key, outcome, note, by),
            _ => built_as("a correction"),
        },
    }
}
