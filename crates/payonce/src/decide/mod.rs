//! `decide`: the ledger's judgement, as a pure function of the state and a
//! command. No I/O, no clock; the same state and command always give the
//! same answer, which is what lets replay re-derive every recorded decision.
//!
//! A command is a proposed event. Each function here builds the event its
//! command proposes, has [`judge`] judge it against the state, and answers
//! with an [`Answer`] whose types say what the command can come to (a
//! claim: an event to append, or a recorded outcome to replay; a
//! completion: always an event, and whether the send returned the
//! claimed withdrawal), so the
//! shell that writes the answer never has to find out again what was
//! decided. Replay judges the events it reads with the same [`judge`]
//! functions (`crate::replay`).

pub(crate) mod judge;
pub(crate) mod proposal;

use std::borrow::Cow;
use std::convert::Infallible;

use payonce_model::{
    Actor, Amount, Currency, Destination, Difference, Note, Reason, RequestKey, WithdrawalId,
    WithdrawalRequest, WithdrawalState, WorkerName,
};

use self::judge::{ClaimVerdict, CloseVerdict, MoveVerdict};
use crate::command::{Command, FailureCause, SendResult};
use crate::event::{EventKind, KindView, SCHEMA_VERSION};
use crate::refusal::Refusal;
use crate::state::{Prefetched, State};

pub(crate) use self::proposal::Proposal;

/// What `decide` concluded, when it did not refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Append this event; applying it changes the state.
    Append(EventKind),
    /// The key already has this outcome: return it; write nothing, send
    /// nothing.
    Replay(WithdrawalRequest),
    /// What was asked already holds: write nothing.
    Unchanged,
}

/// What one command comes to: an event to append and what it means to
/// the caller (`M`), or nothing to write and why (`N`).
#[derive(Debug)]
// An answer is made once per decision and moved once, to the shell: boxing
// the event would cost an allocation per decision to save a copy.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Answer<M, N> {
    /// Append `event`.
    Append {
        /// The event.
        event: EventKind,
        /// What it tells the caller.
        meaning: M,
    },
    /// Write nothing.
    Nothing(N),
}

impl<M> Answer<M, Infallible> {
    /// This answer, which always writes, as one of a kind that may also
    /// write nothing.
    pub(crate) fn map_nothing<N>(self) -> Answer<M, N> {
        match self {
            Answer::Append { event, meaning } => Answer::Append { event, meaning },
            Answer::Nothing(never) => match never {},
        }
    }
}

/// A claim's reason to write nothing: the key already has this outcome.
pub(crate) type Replayed = WithdrawalRequest;

/// An operator's close that writes nothing: what was asked already holds.
#[derive(Debug)]
pub(crate) struct AlreadyClosed;

/// Judges `command` against `state`, as a ledger one process writes
/// decides it: a claim names no worker.
pub fn decide(state: &State, command: &Command) -> Result<Decision, Refusal> {
    decide_in(state, command, SCHEMA_VERSION)
}

/// Judges `command` against `state` as `worker`, a worker of a shared
/// ledger, decides it: a claim names the worker whose send follows.
pub fn decide_as(
    state: &State,
    worker: &WorkerName,
    command: &Command,
) -> Result<Decision, Refusal> {
    match command {
        Command::Claim { key, request } => Ok(claim(state, key, request, Some(worker))?.into()),
        _ => decide(state, command),
    }
}

/// Judges `command` against `state` under the rules of `schema`: replay
/// re-derives each event under the rules it was decided by.
pub(crate) fn decide_in(
    state: &State,
    command: &Command,
    schema: u16,
) -> Result<Decision, Refusal> {
    Ok(match command {
        Command::Open {
            accept_foreign_ids,
            epoch,
        } => open(*accept_foreign_ids, *epoch).into(),
        Command::Create {
            amount,
            currency,
            destination,
            requested_by,
        } => create(state, *amount, currency, destination, requested_by).into(),
        Command::Claim { key, request } => claim(state, key, request, None)?.into(),
        Command::Record { key, request } => record(state, key, request)?.into(),
        Command::Complete { key, result } => complete(state, key, result, schema)?.into(),
        Command::Resolve {
            key,
            outcome,
            note,
            by,
        } => resolve(state, key, outcome, note, by, schema)?.into(),
        Command::Release { key, note, by } => release(state, key, note, by)?.into(),
        Command::Advance { key, outcome } => advance(state, key, outcome)?.into(),
        Command::Correct {
            key,
            outcome,
            note,
            by,
        } => correct(state, key, outcome, note, by)?.into(),
        Command::EndSession { worker, note, by } => end_session(state, worker, note, by)?.into(),
        Command::Start { worker, epoch } => start(worker, *epoch).into(),
    })
}

/// How a reason to write nothing reads as a [`Decision`].
pub(crate) trait Unwritten {
    fn decision(self) -> Decision;
}

impl Unwritten for Replayed {
    fn decision(self) -> Decision {
        Decision::Replay(self)
    }
}

impl Unwritten for AlreadyClosed {
    fn decision(self) -> Decision {
        Decision::Unchanged
    }
}

impl Unwritten for Infallible {
    fn decision(self) -> Decision {
        match self {}
    }
}

impl<M, N: Unwritten> From<Answer<M, N>> for Decision {
    fn from(answer: Answer<M, N>) -> Self {
        match answer {
            Answer::Append { event, .. } => Decision::Append(event),
            Answer::Nothing(reason) => reason.decision(),
        }
    }
}

/// What `proposal` touches in `state`: phase one of judging it.
fn prefetch<'a>(state: &State, proposal: &'a KindView<'_>) -> Prefetched<'a> {
    state.prefetch(&state.names(proposal))
}

/// The ledger was opened for writing, in `epoch`: never refused.
pub(crate) fn open(accept_foreign_ids: bool, epoch: Option<u64>) -> Answer<(), Infallible> {
    Answer::Append {
        event: EventKind::Opened {
            accept_foreign_ids,
            epoch,
        },
        meaning: (),
    }
}

/// A worker of a shared ledger started a session, in `epoch`: never
/// refused.
pub(crate) fn start(worker: &WorkerName, epoch: u64) -> Answer<(), Infallible> {
    Answer::Append {
        event: EventKind::Started {
            worker: worker.clone(),
            epoch,
        },
        meaning: (),
    }
}

/// An operator's "this worker is gone": ends its session.
pub(crate) fn end_session(
    state: &State,
    worker: &WorkerName,
    note: &Note,
    by: &Actor,
) -> Result<Answer<(), Infallible>, Refusal> {
    judge::end_session(state, worker.view())?;
    Ok(Answer::Append {
        event: EventKind::SessionEnded {
            worker: worker.clone(),
            note: note.clone(),
            by: by.clone(),
        },
        meaning: (),
    })
}

/// A new withdrawal, with the id [`judge::minted_id`] gives it: never
/// refused. Means the withdrawal made.
pub(crate) fn create(
    state: &State,
    amount: Amount,
    currency: &Currency,
    destination: &Destination,
    requested_by: &Actor,
) -> Answer<WithdrawalRequest, Infallible> {
    let withdrawal = WithdrawalRequest::new(
        judge::minted_id(state),
        amount,
        currency.clone(),
        destination.clone(),
        requested_by.clone(),
    );
    Answer::Append {
        event: EventKind::Created {
            withdrawal: withdrawal.clone(),
        },
        meaning: withdrawal,
    }
}

/// A claim of `key` for `request` before a send: by `worker`, on a shared
/// ledger.
pub(crate) fn claim(
    state: &State,
    key: &RequestKey,
    request: &WithdrawalRequest,
    worker: Option<&WorkerName>,
) -> Result<Answer<(), Replayed>, Refusal> {
    claiming(state, key, request, |key, request| EventKind::Claimed {
        key,
        request,
        worker: worker.cloned(),
    })
}

/// A claim of `key` with `request`, as it stands, as its outcome.
pub(crate) fn record(
    state: &State,
    key: &RequestKey,
    request: &WithdrawalRequest,
) -> Result<Answer<(), Replayed>, Refusal> {
    claiming(state, key, request, |key, request| EventKind::Recorded {
        key,
        request,
    })
}

/// A claim or a record: judged alike, recorded as `event` makes it.
fn claiming(
    state: &State,
    key: &RequestKey,
    request: &WithdrawalRequest,
    event: impl FnOnce(RequestKey, WithdrawalRequest) -> EventKind,
) -> Result<Answer<(), Replayed>, Refusal> {
    let (key_view, request_view) = (key.view(), request.view());
    let proposal = KindView::Claimed {
        key: key_view,
        request: request_view,
        worker: None,
    };
    let found = prefetch(state, &proposal);
    Ok(match judge::claim(state, &found, key_view, request_view)? {
        ClaimVerdict::Grant => Answer::Append {
            event: event(key.clone(), request.clone()),
            meaning: (),
        },
        ClaimVerdict::Replay(outcome) => Answer::Nothing(outcome),
    })
}

/// What the send for `key` did: the completion its result proposes.
pub(crate) fn complete(
    state: &State,
    key: &RequestKey,
    result: &SendResult,
    schema: u16,
) -> Result<Answer<(), Infallible>, Refusal> {
    let appended = |answer: Answer<_, Infallible>| match answer {
        Answer::Append { event, .. } => Answer::Append { event, meaning: () },
        Answer::Nothing(never) => match never {},
    };
    Ok(match result {
        SendResult::Sent(outcome) => appended(complete_sent(state, key, outcome, schema)?),
        SendResult::Rejected(reason) => complete_rejected(state, key, reason)?,
        SendResult::Failed { error, cause } => complete_failed(state, key, error, cause)?,
    })
}

/// What a send's returned withdrawal means to the one who sent.
#[derive(Debug)]
pub(crate) enum Returned {
    /// The outcome is recorded.
    Outcome,
    /// Another withdrawal than the one claimed: the outcome is unknown.
    /// Every field that differs: the claimed value, then the outcome's.
    Mismatch(Vec<Difference>),
    /// The withdrawal in a state that does not say what the rail did: the
    /// outcome is unknown.
    Unsettled(WithdrawalState),
}

/// The send for `key` returned `outcome`: recorded as the outcome if it is
/// the claimed withdrawal and settled (under the rules of `schema`);
/// otherwise the outcome is unknown.
pub(crate) fn complete_sent(
    state: &State,
    key: &RequestKey,
    outcome: &WithdrawalRequest,
    schema: u16,
) -> Result<Answer<Returned, Infallible>, Refusal> {
    let proposal = KindView::Completed {
        key: key.view(),
        outcome: outcome.view(),
    };
    let found = prefetch(state, &proposal);
    let verdict = judge::completion(state, &found, key.view(), Some(outcome.view()), schema)?;
    let withdrawal = Some(verdict.record.withdrawal());
    let (key, differences) = (key.clone(), verdict.differences);
    let (event, meaning) = match verdict.unsettled {
        _ if !differences.is_empty() => (
            mismatch_event(key, withdrawal, outcome, differences.clone()),
            Returned::Mismatch(differences),
        ),
        Some(unsettled) => (
            unsettled_event(key, withdrawal, outcome),
            Returned::Unsettled(unsettled),
        ),
        None => (
            EventKind::Completed {
                key,
                outcome: outcome.clone(),
            },
            Returned::Outcome,
        ),
    };
    Ok(Answer::Append { event, meaning })
}

/// The rail refused the send for `key` cleanly.
pub(crate) fn complete_rejected(
    state: &State,
    key: &RequestKey,
    reason: &Reason,
) -> Result<Answer<(), Infallible>, Refusal> {
    let proposal = KindView::SendRejected {
        key: key.view(),
        withdrawal: None,
        reason: reason.view(),
    };
    let found = prefetch(state, &proposal);
    let verdict = judge::completion(state, &found, key.view(), None, SCHEMA_VERSION)?;
    Ok(Answer::Append {
        event: EventKind::SendRejected {
            key: key.clone(),
            withdrawal: Some(verdict.record.withdrawal()),
            reason: reason.clone(),
        },
        meaning: (),
    })
}

/// The send for `key` ended without an outcome.
pub(crate) fn complete_failed(
    state: &State,
    key: &RequestKey,
    error: &Reason,
    cause: &FailureCause,
) -> Result<Answer<(), Infallible>, Refusal> {
    let proposal = KindView::SendFailed {
        key: key.view(),
        withdrawal: None,
        error: error.view(),
        cause: Cow::Borrowed(cause),
    };
    let found = prefetch(state, &proposal);
    let verdict = judge::completion(state, &found, key.view(), None, SCHEMA_VERSION)?;
    Ok(Answer::Append {
        event: EventKind::SendFailed {
            key: key.clone(),
            withdrawal: Some(verdict.record.withdrawal()),
            error: error.clone(),
            cause: cause.clone(),
        },
        meaning: (),
    })
}

/// An operator's "here is what happened" for `key`, under the rules of
/// `schema`.
pub(crate) fn resolve(
    state: &State,
    key: &RequestKey,
    outcome: &WithdrawalRequest,
    note: &Note,
    by: &Actor,
    schema: u16,
) -> Result<Answer<(), AlreadyClosed>, Refusal> {
    let proposal = KindView::Resolved {
        key: key.view(),
        outcome: outcome.view(),
        note: note.view(),
        by: by.view(),
    };
    let found = prefetch(state, &proposal);
    Ok(
        match judge::resolution(state, &found, key.view(), outcome.view(), schema)? {
            CloseVerdict::Close(_) => Answer::Append {
                event: EventKind::Resolved {
                    key: key.clone(),
                    outcome: outcome.clone(),
                    note: note.clone(),
                    by: by.clone(),
                },
                meaning: (),
            },
            CloseVerdict::AlreadyClosed => Answer::Nothing(AlreadyClosed),
        },
    )
}

/// An operator's "nothing was sent" for `key`.
pub(crate) fn release(
    state: &State,
    key: &RequestKey,
    note: &Note,
    by: &Actor,
) -> Result<Answer<(), AlreadyClosed>, Refusal> {
    let proposal = KindView::Released {
        key: key.view(),
        withdrawal: None,
        note: note.view(),
        by: by.view(),
    };
    let found = prefetch(state, &proposal);
    Ok(match judge::release(state, &found, key.view())? {
        CloseVerdict::Close(record) => Answer::Append {
            event: EventKind::Released {
                key: key.clone(),
                withdrawal: record.map(|record| record.withdrawal()),
                note: note.clone(),
                by: by.clone(),
            },
            meaning: (),
        },
        CloseVerdict::AlreadyClosed => Answer::Nothing(AlreadyClosed),
    })
}

/// A later report of what the rail did with `key`'s outcome.
pub(crate) fn advance(
    state: &State,
    key: &RequestKey,
    outcome: &WithdrawalRequest,
) -> Result<Answer<(), AlreadyClosed>, Refusal> {
    let proposal = KindView::Advanced {
        key: key.view(),
        outcome: outcome.view(),
    };
    let found = prefetch(state, &proposal);
    Ok(
        match judge::advance(state, &found, key.view(), outcome.view())? {
            MoveVerdict::Record(_) => Answer::Append {
                event: EventKind::Advanced {
                    key: key.clone(),
                    outcome: outcome.clone(),
                },
                meaning: (),
            },
            MoveVerdict::AlreadyRecorded => Answer::Nothing(AlreadyClosed),
        },
    )
}

/// An operator's correction of `key`'s outcome to `outcome`.
pub(crate) fn correct(
    state: &State,
    key: &RequestKey,
    outcome: &WithdrawalRequest,
    note: &Note,
    by: &Actor,
) -> Result<Answer<(), AlreadyClosed>, Refusal> {
    // A correction looks up what an advance does: its key and its
    // withdrawal; the outcome it replaces is the judgement's to find.
    let proposal = KindView::Advanced {
        key: key.view(),
        outcome: outcome.view(),
    };
    let found = prefetch(state, &proposal);
    Ok(
        match judge::correction(state, &found, key.view(), outcome.view())? {
            MoveVerdict::Record(old) => Answer::Append {
                event: EventKind::Corrected {
                    key: key.clone(),
                    old,
                    new: outcome.clone(),
                    note: note.clone(),
                    by: by.clone(),
                },
                meaning: (),
            },
            MoveVerdict::AlreadyRecorded => Answer::Nothing(AlreadyClosed),
        },
    )
}

/// The audit event of `command`'s refusal.
pub(crate) fn refused(state: &State, command: &Command, refusal: &Refusal) -> EventKind {
    let proposal = KindView::Refused {
        command: Cow::Borrowed(command),
        refusal: Cow::Borrowed(refusal),
        held: None,
    };
    let held = judge::held(state, &prefetch(state, &proposal));
    EventKind::Refused {
        command: command.clone(),
        refusal: refusal.clone(),
        held: held.map(|record| record.withdrawal()),
    }
}

/// The send failure recorded when the send for `key` returned its
/// withdrawal in a state that does not say what the rail did.
fn unsettled_event(
    key: RequestKey,
    withdrawal: Option<WithdrawalId>,
    outcome: &WithdrawalRequest,
) -> EventKind {
    let error = Reason::lossy(&format!(
        "the send returned withdrawal {} in state {}, which does not say what the rail did",
        outcome.id(),
        outcome.state()
    ));
    EventKind::SendFailed {
        key,
        withdrawal,
        error,
        cause: FailureCause::Unsettled {
            outcome: Box::new(outcome.clone()),
        },
    }
}

/// The send failure recorded when the send for `key` returned another
/// withdrawal than `withdrawal`, the one the key claimed.
fn mismatch_event(
    key: RequestKey,
    withdrawal: Option<WithdrawalId>,
    outcome: &WithdrawalRequest,
    differences: Vec<Difference>,
) -> EventKind {
    let summary: Vec<String> = differences.iter().map(ToString::to_string).collect();
    let error = Reason::lossy(&format!(
        "the send returned another withdrawal: {}",
        summary.join("; ")
    ));
    // The send answered about another withdrawal: what happened to this one
    // is unknown, so the key stays in flight.
    let cause = FailureCause::OutcomeMismatch {
        outcome: Box::new(outcome.clone()),
        differences,
    };
    EventKind::SendFailed {
        key,
        withdrawal,
        error,
        cause,
    }
}

impl EventKind {
    /// The command that proposes this event, so replay can ask `decide`
    /// again and report what it says. For a refusal, the refused command;
    /// for a send failure listing another withdrawal, the completion with
    /// the withdrawal the send returned.
    pub fn command(&self) -> Command {
        match self {
            EventKind::Opened {
                accept_foreign_ids,
                epoch,
            } => Command::Open {
                accept_foreign_ids: *accept_foreign_ids,
                epoch: *epoch,
            },
            EventKind::Created { withdrawal } => create_command(withdrawal),
            EventKind::Claimed { key, request, .. } => Command::Claim {
                key: key.clone(),
                request: request.clone(),
            },
            EventKind::Recorded { key, request } => Command::Record {
                key: key.clone(),
                request: request.clone(),
            },
            EventKind::Completed { key, outcome } => {
                complete_command(key, SendResult::Sent(outcome.clone()))
            }
            EventKind::SendRejected { key, reason, .. } => {
                complete_command(key, SendResult::Rejected(reason.clone()))
            }
            EventKind::SendFailed {
                key, error, cause, ..
            } => complete_command(key, failed_result(error, cause)),
            EventKind::Resolved {
                key,
                outcome,
                note,
                by,
            } => Command::Resolve {
                key: key.clone(),
                outcome: outcome.clone(),
                note: note.clone(),
                by: by.clone(),
            },
            EventKind::Released { key, note, by, .. } => Command::Release {
                key: key.clone(),
                note: note.clone(),
                by: by.clone(),
            },
            EventKind::Refused { command, .. } => command.clone(),
            EventKind::Advanced { key, outcome } => Command::Advance {
                key: key.clone(),
                outcome: outcome.clone(),
            },
            EventKind::Corrected {
                key, new, note, by, ..
            } => Command::Correct {
                key: key.clone(),
                outcome: new.clone(),
                note: note.clone(),
                by: by.clone(),
            },
            EventKind::Started { worker, epoch } => Command::Start {
                worker: worker.clone(),
                epoch: *epoch,
            },
            EventKind::SessionEnded { worker, note, by } => Command::EndSession {
                worker: worker.clone(),
                note: note.clone(),
                by: by.clone(),
            },
        }
    }
}

/// The command that completes `key`'s send with `result`.
fn complete_command(key: &RequestKey, result: SendResult) -> Command {
    Command::Complete {
        key: key.clone(),
        result,
    }
}

/// The command that creates `withdrawal`.
fn create_command(withdrawal: &WithdrawalRequest) -> Command {
    Command::Create {
        amount: withdrawal.amount(),
        currency: withdrawal.currency().clone(),
        destination: withdrawal.destination().clone(),
        requested_by: withdrawal.requested_by().clone(),
    }
}

/// What a send returned, as a recorded send failure tells it: the
/// withdrawal it returned, when that was the failure (another withdrawal,
/// or an outcome not yet settled), else the error.
fn failed_result(error: &Reason, cause: &FailureCause) -> SendResult {
    match cause {
        FailureCause::OutcomeMismatch { outcome, .. } | FailureCause::Unsettled { outcome } => {
            SendResult::Sent((**outcome).clone())
        }
        _ => SendResult::Failed {
            error: error.clone(),
            cause: cause.clone(),
        },
    }
}
