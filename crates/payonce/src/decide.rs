//! `decide`: the ledger's judgement, as a pure function of the state and a
//! command. No I/O, no clock; the same state and command always give the
//! same answer, which is what lets replay re-derive every recorded decision.
//!
//! The judgement itself ([`judge`]) reads a borrowed view of the command
//! ([`Ask`]) and answers with a [`Verdict`] that copies nothing, so replay
//! can re-derive millions of recorded decisions without rebuilding them.

use payonce_model::{
    Actor, Amount, Currency, Destination, Difference, Note, Reason, RequestKey, WithdrawalId,
    WithdrawalRequest,
};

use crate::command::{Command, FailureCause, SendResult};
use crate::event::EventKind;
use crate::refusal::{HolderState, Refusal};
use crate::state::{Record, State};

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

/// Judges `command` against `state`.
pub fn decide(state: &State, command: &Command) -> Result<Decision, Refusal> {
    let ask = command.ask();
    Ok(match judge(state, &ask)? {
        Verdict::Append => Decision::Append(event_for(state, ask)),
        Verdict::Mismatch(differences) => Decision::Append(mismatch_event(ask, differences)),
        Verdict::Replay(outcome) => Decision::Replay(outcome),
        Verdict::Unchanged => Decision::Unchanged,
    })
}

/// A command, borrowed: what [`judge`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ask<'a> {
    Open {
        accept_foreign_ids: bool,
    },
    Create {
        amount: Amount,
        currency: &'a Currency,
        destination: &'a Destination,
        requested_by: &'a Actor,
    },
    Claim {
        key: &'a RequestKey,
        request: &'a WithdrawalRequest,
    },
    Record {
        key: &'a RequestKey,
        request: &'a WithdrawalRequest,
    },
    Complete {
        key: &'a RequestKey,
        result: Sent<'a>,
    },
    Resolve {
        key: &'a RequestKey,
        outcome: &'a WithdrawalRequest,
        note: &'a Note,
        by: &'a Actor,
    },
    Release {
        key: &'a RequestKey,
        note: &'a Note,
        by: &'a Actor,
    },
}

/// What a send did, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sent<'a> {
    Outcome(&'a WithdrawalRequest),
    Rejected(&'a Reason),
    Failed {
        error: &'a Reason,
        cause: &'a FailureCause,
    },
}

/// The judgement, before any event is built.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Append the event this command describes.
    Append,
    /// A completion whose outcome is another withdrawal: append a send
    /// failure listing these differences.
    Mismatch(Vec<Difference>),
    /// Return this recorded outcome.
    Replay(WithdrawalRequest),
    /// Nothing to write.
    Unchanged,
}

impl Ask<'_> {
    /// The owned command this view reads.
    pub(crate) fn to_command(self) -> Command {
        match self {
            Ask::Open { accept_foreign_ids } => Command::Open { accept_foreign_ids },
            Ask::Create {
                amount,
                currency,
                destination,
                requested_by,
            } => Command::Create {
                amount,
                currency: currency.clone(),
                destination: destination.clone(),
                requested_by: requested_by.clone(),
            },
            Ask::Claim { key, request } => Command::Claim {
                key: key.clone(),
                request: request.clone(),
            },
            Ask::Record { key, request } => Command::Record {
                key: key.clone(),
                request: request.clone(),
            },
            Ask::Complete { key, result } => Command::Complete {
                key: key.clone(),
                result: match result {
                    Sent::Outcome(outcome) => SendResult::Sent(outcome.clone()),
                    Sent::Rejected(reason) => SendResult::Rejected(reason.clone()),
                    Sent::Failed { error, cause } => SendResult::Failed {
                        error: error.clone(),
                        cause: cause.clone(),
                    },
                },
            },
            Ask::Resolve {
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
            Ask::Release { key, note, by } => Command::Release {
                key: key.clone(),
                note: note.clone(),
                by: by.clone(),
            },
        }
    }
}

impl Command {
    pub(crate) fn ask(&self) -> Ask<'_> {
        match self {
            Command::Open { accept_foreign_ids } => Ask::Open {
                accept_foreign_ids: *accept_foreign_ids,
            },
            Command::Create {
                amount,
                currency,
                destination,
                requested_by,
            } => Ask::Create {
                amount: *amount,
                currency,
                destination,
                requested_by,
            },
            Command::Claim { key, request } => Ask::Claim { key, request },
            Command::Record { key, request } => Ask::Record { key, request },
            Command::Complete { key, result } => Ask::Complete {
                key,
                result: match result {
                    SendResult::Sent(outcome) => Sent::Outcome(outcome),
                    SendResult::Rejected(reason) => Sent::Rejected(reason),
                    SendResult::Failed { error, cause } => Sent::Failed { error, cause },
                },
            },
            Command::Resolve {
                key,
                outcome,
                note,
                by,
            } => Ask::Resolve {
                key,
                outcome,
                note,
                by,
            },
            Command::Release { key, note, by } => Ask::Release { key, note, by },
        }
    }
}

/// The event an `Append` verdict on `ask` stands for.
fn event_for(state: &State, ask: Ask<'_>) -> EventKind {
    match ask {
        Ask::Open { accept_foreign_ids } => EventKind::Opened { accept_foreign_ids },
        Ask::Create {
            amount,
            currency,
            destination,
            requested_by,
        } => {
            // The id is the sequence number the event is about to get: unique
            // by construction, and recorded in the log with the withdrawal.
            let id = WithdrawalId::minted(state.last_seq() + 1);
            let withdrawal = WithdrawalRequest::new(
                id,
                amount,
                currency.clone(),
                destination.clone(),
                requested_by.clone(),
            );
            EventKind::Created { withdrawal }
        }
        Ask::Claim { key, request } => EventKind::Claimed {
            key: key.clone(),
            request: request.clone(),
        },
        Ask::Record { key, request } => EventKind::Recorded {
            key: key.clone(),
            request: request.clone(),
        },
        Ask::Complete { key, result } => match result {
            Sent::Outcome(outcome) => EventKind::Completed {
                key: key.clone(),
                outcome: outcome.clone(),
            },
            Sent::Rejected(reason) => EventKind::SendRejected {
                key: key.clone(),
                reason: reason.clone(),
            },
            Sent::Failed { error, cause } => EventKind::SendFailed {
                key: key.clone(),
                error: error.clone(),
                cause: cause.clone(),
            },
        },
        Ask::Resolve {
            key,
            outcome,
            note,
            by,
        } => EventKind::Resolved {
            key: key.clone(),
            outcome: outcome.clone(),
            note: note.clone(),
            by: by.clone(),
        },
        Ask::Release { key, note, by } => EventKind::Released {
            key: key.clone(),
            note: note.clone(),
            by: by.clone(),
        },
    }
}

/// The send failure recorded when a send returned another withdrawal.
fn mismatch_event(ask: Ask<'_>, differences: Vec<Difference>) -> EventKind {
    let Ask::Complete {
        key,
        result: Sent::Outcome(outcome),
    } = ask
    else {
        unreachable!("only a completion with an outcome can mismatch")
    };
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
        key: key.clone(),
        error,
        cause,
    }
}

/// Judges a borrowed command against `state`.
pub(crate) fn judge(state: &State, ask: &Ask<'_>) -> Result<Verdict, Refusal> {
    match *ask {
        Ask::Open { .. } | Ask::Create { .. } => Ok(Verdict::Append),
        Ask::Claim { key, request } | Ask::Record { key, request } => {
            judge_claim(state, key, request)
        }
        Ask::Complete { key, result } => judge_complete(state, key, result),
        Ask::Resolve { key, outcome, .. } => {
            let Some(record) = state.record(key) else {
                // A fresh key passes the same withdrawal check as a claim, so
                // a callback under a new key cannot declare what happened to a
                // withdrawal another key holds.
                check_withdrawal_free(state, key, outcome)?;
                return Ok(Verdict::Append);
            };
            if record.send_running() {
                return Err(in_flight(key, &record));
            }
            if !record.matches(outcome) {
                let differences = record.fingerprint().differences(&outcome.fingerprint());
                return Err(Refusal::OutcomeMismatch {
                    key: key.clone(),
                    differences,
                });
            }
            match record.progress() {
                None => Ok(Verdict::Append),
                Some(recorded) if outcome.has_progress(&recorded) => Ok(Verdict::Unchanged),
                Some(recorded) => Err(Refusal::OutcomeDiffers {
                    key: key.clone(),
                    recorded_state: recorded.state(),
                    recorded_reference: recorded.reference().cloned(),
                }),
            }
        }
        Ask::Release { key, .. } => {
            let Some(record) = state.record(key) else {
                return Ok(Verdict::Unchanged);
            };
            if record.send_running() {
                return Err(in_flight(key, &record));
            }
            if let Some(state) = record.outcome_state() {
                return Err(Refusal::HasOutcome {
                    key: key.clone(),
                    state,
                });
            }
            Ok(Verdict::Append)
        }
    }
}

/// A claim, with a send to follow or with the request as its own outcome.
/// The key is looked up first.
fn judge_claim(
    state: &State,
    key: &RequestKey,
    request: &WithdrawalRequest,
) -> Result<Verdict, Refusal> {
    if let Some(record) = state.record(key) {
        if !record.matches(request) {
            let differences = record.fingerprint().differences(&request.fingerprint());
            return Err(Refusal::KeyReused {
                key: key.clone(),
                differences,
            });
        }
        return match record.outcome() {
            Some(outcome) => Ok(Verdict::Replay(outcome)),
            None => Err(in_flight(key, &record)),
        };
    }
    check_withdrawal_free(state, key, request)?;
    Ok(Verdict::Append)
}

/// Whether `key` may take the request's withdrawal: minted here (unless
/// foreign ids are accepted), as created, and not held by another key.
fn check_withdrawal_free(
    state: &State,
    key: &RequestKey,
    request: &WithdrawalRequest,
) -> Result<(), Refusal> {
    let id = request.id();
    let withdrawal = state.withdrawal(id);
    match withdrawal {
        Some(created) if created.created() && !created.matches(request) => {
            let differences = created.fingerprint().differences(&request.fingerprint());
            return Err(Refusal::NotAsCreated {
                withdrawal: id.clone(),
                differences,
            });
        }
        Some(created) if created.created() => {}
        _ if !state.accepts_foreign_ids() => {
            return Err(Refusal::UnknownWithdrawal {
                withdrawal: id.clone(),
            });
        }
        _ => {}
    }
    match withdrawal.and_then(|withdrawal| withdrawal.holder()) {
        Some(holder) if holder.key_str() != key.as_str() => Err(Refusal::Claimed {
            key: key.clone(),
            withdrawal: id.clone(),
            holder: holder.key(),
            holder_state: holder_state(&holder),
        }),
        _ => Ok(()),
    }
}

fn holder_state(record: &Record<'_>) -> HolderState {
    match record.progress() {
        Some(outcome) => HolderState::Decided {
            state: outcome.state(),
            reference: outcome.reference().cloned(),
        },
        None => HolderState::InFlight {
            since: record.claimed_at(),
            seq: record.claimed_seq(),
            send_running: record.send_running(),
        },
    }
}

fn in_flight(key: &RequestKey, record: &Record<'_>) -> Refusal {
    Refusal::InFlight {
        key: key.clone(),
        withdrawal: record.withdrawal(),
        since: record.claimed_at(),
        seq: record.claimed_seq(),
        send_running: record.send_running(),
    }
}

fn judge_complete(state: &State, key: &RequestKey, result: Sent<'_>) -> Result<Verdict, Refusal> {
    let record = match state.record(key) {
        Some(record) if record.send_running() && record.outcome_state().is_none() => record,
        _ => return Err(Refusal::NoSendRunning { key: key.clone() }),
    };
    match result {
        Sent::Outcome(outcome) if !record.matches(outcome) => Ok(Verdict::Mismatch(
            record.fingerprint().differences(&outcome.fingerprint()),
        )),
        _ => Ok(Verdict::Append),
    }
}

/// Whether `decide`, asked again from `state` for the command behind
/// `kind`, would record exactly `kind`. Compares verdicts rather than
/// rebuilt events where the event is a copy of its command's fields, so
/// replaying a log copies nothing.
pub(crate) fn decides_again(state: &State, kind: &EventKind) -> bool {
    let ask = kind.ask();
    match (kind, judge(state, &ask)) {
        (EventKind::Refused { refusal, .. }, Err(again)) => *refusal == again,
        (EventKind::Refused { .. }, Ok(_)) | (_, Err(_)) => false,
        // The minted id is the one part of the event not in the command.
        (EventKind::Created { withdrawal }, Ok(Verdict::Append)) => {
            matches!(event_for(state, ask), EventKind::Created { withdrawal: fresh } if fresh == *withdrawal)
        }
        (_, Ok(Verdict::Append)) => !matches!(
            kind,
            EventKind::SendFailed {
                cause: FailureCause::OutcomeMismatch { .. },
                ..
            }
        ),
        (_, Ok(Verdict::Mismatch(differences))) => *kind == mismatch_event(ask, differences),
        (_, Ok(Verdict::Replay(_) | Verdict::Unchanged)) => false,
    }
}
