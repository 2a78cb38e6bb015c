//! `decide`: the ledger's judgement, as a pure function of the state and a
//! command. No I/O, no clock; the same state and command always give the
//! same answer, which is what lets replay re-derive every recorded decision.
//!
//! The judgement itself ([`judge`]) reads a borrowed view of the command
//! ([`Ask`]) and answers with a [`Verdict`] that copies nothing, so replay
//! can re-derive millions of recorded decisions without rebuilding them.

use payonce_model::{
    Actor, Amount, Currency, Destination, Difference, Note, Reason, RequestKey, TextView,
    WithdrawalId, WithdrawalRequest, WithdrawalState, WithdrawalView,
};

use crate::command::{Command, FailureCause, SendResult};
use crate::event::{EventKind, KindView};
use crate::refusal::{HolderState, Refusal};
use crate::state::{NameHashes, Record, State};

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
    Ok(match judge(state, &command.ask(), NameHashes::default())? {
        Verdict::Append => Decision::Append(event_for(state, command)),
        Verdict::Mismatch(differences) => {
            let Command::Complete {
                key,
                result: SendResult::Sent(outcome),
            } = command
            else {
                unreachable!("only a completion with an outcome can mismatch")
            };
            Decision::Append(mismatch_event(key, outcome, differences))
        }
        Verdict::Replay(outcome) => Decision::Replay(outcome),
        Verdict::Unchanged => Decision::Unchanged,
    })
}

/// A command, borrowed: what [`judge`] reads. Built from a [`Command`] or
/// from an event read from the log, whose text it borrows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ask<'a> {
    Open {
        accept_foreign_ids: bool,
    },
    Create {
        amount: Amount,
        currency: TextView<'a, Currency>,
        destination: TextView<'a, Destination>,
        requested_by: TextView<'a, Actor>,
    },
    Claim {
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
    },
    Record {
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
    },
    Complete {
        key: TextView<'a, RequestKey>,
        result: Sent<'a>,
    },
    Resolve {
        key: TextView<'a, RequestKey>,
        outcome: WithdrawalView<'a>,
        note: TextView<'a, Note>,
        by: TextView<'a, Actor>,
    },
    Release {
        key: TextView<'a, RequestKey>,
        note: TextView<'a, Note>,
        by: TextView<'a, Actor>,
    },
}

/// What a send did, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sent<'a> {
    Outcome(WithdrawalView<'a>),
    Rejected(TextView<'a, Reason>),
    Failed {
        error: TextView<'a, Reason>,
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
                currency: currency.to_value(),
                destination: destination.to_value(),
                requested_by: requested_by.to_value(),
            },
            Ask::Claim { key, request } => Command::Claim {
                key: key.to_value(),
                request: request.to_value(),
            },
            Ask::Record { key, request } => Command::Record {
                key: key.to_value(),
                request: request.to_value(),
            },
            Ask::Complete { key, result } => Command::Complete {
                key: key.to_value(),
                result: match result {
                    Sent::Outcome(outcome) => SendResult::Sent(outcome.to_value()),
                    Sent::Rejected(reason) => SendResult::Rejected(reason.to_value()),
                    Sent::Failed { error, cause } => SendResult::Failed {
                        error: error.to_value(),
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
                key: key.to_value(),
                outcome: outcome.to_value(),
                note: note.to_value(),
                by: by.to_value(),
            },
            Ask::Release { key, note, by } => Command::Release {
                key: key.to_value(),
                note: note.to_value(),
                by: by.to_value(),
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
                currency: currency.view(),
                destination: destination.view(),
                requested_by: requested_by.view(),
            },
            Command::Claim { key, request } => Ask::Claim {
                key: key.view(),
                request: request.view(),
            },
            Command::Record { key, request } => Ask::Record {
                key: key.view(),
                request: request.view(),
            },
            Command::Complete { key, result } => Ask::Complete {
                key: key.view(),
                result: match result {
                    SendResult::Sent(outcome) => Sent::Outcome(outcome.view()),
                    SendResult::Rejected(reason) => Sent::Rejected(reason.view()),
                    SendResult::Failed { error, cause } => Sent::Failed {
                        error: error.view(),
                        cause,
                    },
                },
            },
            Command::Resolve {
                key,
                outcome,
                note,
                by,
            } => Ask::Resolve {
                key: key.view(),
                outcome: outcome.view(),
                note: note.view(),
                by: by.view(),
            },
            Command::Release { key, note, by } => Ask::Release {
                key: key.view(),
                note: note.view(),
                by: by.view(),
            },
        }
    }
}

/// The event an `Append` verdict on `command` stands for.
fn event_for(state: &State, command: &Command) -> EventKind {
    match command {
        Command::Open { accept_foreign_ids } => EventKind::Opened {
            accept_foreign_ids: *accept_foreign_ids,
        },
        Command::Create {
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
                *amount,
                currency.clone(),
                destination.clone(),
                requested_by.clone(),
            );
            EventKind::Created { withdrawal }
        }
        Command::Claim { key, request } => EventKind::Claimed {
            key: key.clone(),
            request: request.clone(),
        },
        Command::Record { key, request } => EventKind::Recorded {
            key: key.clone(),
            request: request.clone(),
        },
        Command::Complete { key, result } => match result {
            SendResult::Sent(outcome) => EventKind::Completed {
                key: key.clone(),
                outcome: outcome.clone(),
            },
            SendResult::Rejected(reason) => EventKind::SendRejected {
                key: key.clone(),
                reason: reason.clone(),
            },
            SendResult::Failed { error, cause } => EventKind::SendFailed {
                key: key.clone(),
                error: error.clone(),
                cause: cause.clone(),
            },
        },
        Command::Resolve {
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
        Command::Release { key, note, by } => EventKind::Released {
            key: key.clone(),
            note: note.clone(),
            by: by.clone(),
        },
    }
}

/// The send failure recorded when a send returned another withdrawal.
fn mismatch_event(
    key: &RequestKey,
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
        key: key.clone(),
        error,
        cause,
    }
}

/// Judges a borrowed command against `state`. `names` are the hashes of
/// the names it carries, where known.
pub(crate) fn judge(state: &State, ask: &Ask<'_>, names: NameHashes) -> Result<Verdict, Refusal> {
    match *ask {
        Ask::Open { .. } | Ask::Create { .. } => Ok(Verdict::Append),
        Ask::Claim { key, request } | Ask::Record { key, request } => {
            judge_claim(state, key, request, names)
        }
        Ask::Complete { key, result } => judge_complete(state, key, result, names),
        Ask::Resolve { key, outcome, .. } => {
            let Some(record) = state.record_hashed(&key, names.key) else {
                // A fresh key passes the same withdrawal check as a claim, so
                // a callback under a new key cannot declare what happened to a
                // withdrawal another key holds.
                check_withdrawal_free(state, key, outcome, names)?;
                return Ok(Verdict::Append);
            };
            if record.send_running() {
                return Err(in_flight(key, &record));
            }
            if !record.matches_view(outcome) {
                let differences = record.fingerprint().differences(&outcome.fingerprint());
                return Err(Refusal::OutcomeMismatch {
                    key: key.to_value(),
                    differences,
                });
            }
            match record.progress() {
                None => Ok(Verdict::Append),
                Some(_) if record.has_outcome_view(outcome) => Ok(Verdict::Unchanged),
                Some(recorded) => Err(Refusal::OutcomeDiffers {
                    key: key.to_value(),
                    recorded_state: recorded.state(),
                    recorded_reference: recorded.reference().cloned(),
                }),
            }
        }
        Ask::Release { key, .. } => {
            let Some(record) = state.record(&key) else {
                return Ok(Verdict::Unchanged);
            };
            if record.send_running() {
                return Err(in_flight(key, &record));
            }
            if let Some(state) = record.outcome_state() {
                return Err(Refusal::HasOutcome {
                    key: key.to_value(),
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
    key: TextView<'_, RequestKey>,
    request: WithdrawalView<'_>,
    names: NameHashes,
) -> Result<Verdict, Refusal> {
    if let Some(record) = state.record_hashed(&key, names.key) {
        if !record.matches_view(request) {
            let differences = record.fingerprint().differences(&request.fingerprint());
            return Err(Refusal::KeyReused {
                key: key.to_value(),
                differences,
            });
        }
        return match record.outcome() {
            Some(outcome) => Ok(Verdict::Replay(outcome)),
            None => Err(in_flight(key, &record)),
        };
    }
    check_withdrawal_free(state, key, request, names)?;
    Ok(Verdict::Append)
}

/// Whether `key` may take the request's withdrawal: minted here (unless
/// foreign ids are accepted), as created, and not held by another key.
fn check_withdrawal_free(
    state: &State,
    key: TextView<'_, RequestKey>,
    request: WithdrawalView<'_>,
    names: NameHashes,
) -> Result<(), Refusal> {
    let id = request.id();
    let withdrawal = state.withdrawal_hashed(&id, names.id);
    match withdrawal {
        Some(created) if created.created() && !created.matches(request) => {
            let differences = created.fingerprint().differences(&request.fingerprint());
            return Err(Refusal::NotAsCreated {
                withdrawal: id.to_value(),
                differences,
            });
        }
        Some(created) if created.created() => {}
        _ if !state.accepts_foreign_ids() => {
            return Err(Refusal::UnknownWithdrawal {
                withdrawal: id.to_value(),
            });
        }
        _ => {}
    }
    if let Some(holder) = withdrawal.and_then(|withdrawal| withdrawal.holder())
        && holder.key_str() != key.as_str()
    {
        return Err(Refusal::Claimed {
            key: key.to_value(),
            withdrawal: id.to_value(),
            holder: holder.key(),
            holder_state: holder_state(&holder),
        });
    }
    // A claim places a hold unless one is placed already. A record or a
    // resolve whose outcome ends the hold at once is checked all the same:
    // `apply` adds the hold before the outcome ends it.
    let placed = withdrawal.is_some_and(|withdrawal| withdrawal.held());
    if !placed && !state.can_hold(withdrawal, &request) {
        return Err(Refusal::HeldTotalTooLarge {
            key: key.to_value(),
            withdrawal: id.to_value(),
            currency: request.currency().to_value(),
            amount: request.amount(),
        });
    }
    Ok(())
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

fn in_flight(key: TextView<'_, RequestKey>, record: &Record<'_>) -> Refusal {
    Refusal::InFlight {
        key: key.to_value(),
        withdrawal: record.withdrawal(),
        since: record.claimed_at(),
        seq: record.claimed_seq(),
        send_running: record.send_running(),
    }
}

fn judge_complete(
    state: &State,
    key: TextView<'_, RequestKey>,
    result: Sent<'_>,
    names: NameHashes,
) -> Result<Verdict, Refusal> {
    let record = match state.record_hashed(&key, names.key) {
        Some(record) if record.send_running() && record.outcome_state().is_none() => record,
        _ => {
            return Err(Refusal::NoSendRunning {
                key: key.to_value(),
            });
        }
    };
    match result {
        Sent::Outcome(outcome) if !record.matches_view(outcome) => Ok(Verdict::Mismatch(
            record.fingerprint().differences(&outcome.fingerprint()),
        )),
        _ => Ok(Verdict::Append),
    }
}

/// Whether `decide`, asked again from `state` for the command behind
/// `kind`, would record exactly `kind`. Compares verdicts rather than
/// rebuilt events where the event is a copy of its command's fields, so
/// replaying a log copies nothing.
pub(crate) fn decides_again(state: &State, kind: &KindView<'_>, names: NameHashes) -> bool {
    let ask = kind.ask();
    match (kind, judge(state, &ask, names)) {
        (KindView::Refused { refusal, .. }, Err(again)) => **refusal == again,
        (KindView::Refused { .. }, Ok(_)) | (_, Err(_)) => false,
        // The minted id is the one part of the event not in the command;
        // the rest is the command's, in state requested.
        (KindView::Created { withdrawal }, Ok(Verdict::Append)) => {
            WithdrawalId::is_minted(&withdrawal.id(), state.last_seq() + 1)
                && withdrawal.state() == WithdrawalState::Requested
                && withdrawal.replaced().is_empty()
        }
        (_, Ok(Verdict::Append)) => !matches!(
            kind,
            KindView::SendFailed { cause, .. }
                if matches!(**cause, FailureCause::OutcomeMismatch { .. })
        ),
        (_, Ok(Verdict::Mismatch(differences))) => {
            let Ask::Complete {
                key,
                result: Sent::Outcome(outcome),
            } = ask
            else {
                unreachable!("only a completion with an outcome can mismatch")
            };
            kind.to_value() == mismatch_event(&key.to_value(), &outcome.to_value(), differences)
        }
        (_, Ok(Verdict::Replay(_) | Verdict::Unchanged)) => false,
    }
}
