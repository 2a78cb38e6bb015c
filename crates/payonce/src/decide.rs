//! `decide`: the ledger's judgement, as a pure function of the state and a
//! command. No I/O, no clock; the same state and command always give the
//! same answer, which is what lets replay re-derive every recorded decision.

use payonce_model::{Fingerprint, Reason, RequestKey, WithdrawalId, WithdrawalRequest};

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
    match command {
        Command::Open { accept_foreign_ids } => Ok(Decision::Append(EventKind::Opened {
            accept_foreign_ids: *accept_foreign_ids,
        })),
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
            Ok(Decision::Append(EventKind::Created { withdrawal }))
        }
        Command::Claim { key, request } => decide_claim(state, key, request, false),
        Command::Record { key, request } => decide_claim(state, key, request, true),
        Command::Complete { key, result } => decide_complete(state, key, result),
        Command::Resolve {
            key,
            outcome,
            note,
            by,
        } => {
            let append = || {
                Decision::Append(EventKind::Resolved {
                    key: key.clone(),
                    outcome: outcome.clone(),
                    note: note.clone(),
                    by: by.clone(),
                })
            };
            let Some(record) = state.record(key) else {
                // A fresh key passes the same withdrawal check as a claim, so
                // a callback under a new key cannot declare what happened to a
                // withdrawal another key holds.
                check_withdrawal_free(state, key, &outcome.fingerprint())?;
                return Ok(append());
            };
            if state.is_sending(key) {
                return Err(in_flight(state, key, record));
            }
            let differences = record.fingerprint().differences(&outcome.fingerprint());
            if !differences.is_empty() {
                return Err(Refusal::OutcomeMismatch {
                    key: key.clone(),
                    differences,
                });
            }
            match record.outcome() {
                None => Ok(append()),
                Some(recorded) if recorded == outcome => Ok(Decision::Unchanged),
                Some(recorded) => Err(Refusal::OutcomeDiffers {
                    key: key.clone(),
                    recorded_state: recorded.state(),
                    recorded_reference: recorded.reference().cloned(),
                }),
            }
        }
        Command::Release { key, note, by } => {
            let Some(record) = state.record(key) else {
                return Ok(Decision::Unchanged);
            };
            if state.is_sending(key) {
                return Err(in_flight(state, key, record));
            }
            if let Some(outcome) = record.outcome() {
                return Err(Refusal::HasOutcome {
                    key: key.clone(),
                    state: outcome.state(),
                });
            }
            Ok(Decision::Append(EventKind::Released {
                key: key.clone(),
                note: note.clone(),
                by: by.clone(),
            }))
        }
    }
}

/// A claim, with a send to follow (`Claimed`) or with the request as its
/// own outcome (`Recorded`). The key is looked up first.
fn decide_claim(
    state: &State,
    key: &RequestKey,
    request: &WithdrawalRequest,
    as_outcome: bool,
) -> Result<Decision, Refusal> {
    let fingerprint = request.fingerprint();
    if let Some(record) = state.record(key) {
        let differences = record.fingerprint().differences(&fingerprint);
        if !differences.is_empty() {
            return Err(Refusal::KeyReused {
                key: key.clone(),
                differences,
            });
        }
        return match record.outcome() {
            Some(outcome) => Ok(Decision::Replay(outcome.clone())),
            None => Err(in_flight(state, key, record)),
        };
    }
    check_withdrawal_free(state, key, &fingerprint)?;
    let (key, request) = (key.clone(), request.clone());
    Ok(Decision::Append(if as_outcome {
        EventKind::Recorded { key, request }
    } else {
        EventKind::Claimed { key, request }
    }))
}

/// Whether `key` may take the withdrawal: minted here (unless foreign ids
/// are accepted), as created, and not held by another key.
fn check_withdrawal_free(
    state: &State,
    key: &RequestKey,
    fingerprint: &Fingerprint,
) -> Result<(), Refusal> {
    let id = fingerprint.id();
    match state.created(id) {
        Some(created) => {
            let differences = created.differences(fingerprint);
            if !differences.is_empty() {
                return Err(Refusal::NotAsCreated {
                    withdrawal: id.clone(),
                    differences,
                });
            }
        }
        None if !state.accepts_foreign_ids() => {
            return Err(Refusal::UnknownWithdrawal {
                withdrawal: id.clone(),
            });
        }
        None => {}
    }
    match state.claimed_by(id) {
        Some(holder) if holder != key => {
            let holder_state = match state.record(holder) {
                Some(record) => holder_state(state, holder, record),
                // Unreachable while every claim has a record; say in flight
                // rather than invent an outcome.
                None => HolderState::InFlight {
                    since: Default::default(),
                    seq: 0,
                    send_running: false,
                },
            };
            Err(Refusal::Claimed {
                key: key.clone(),
                withdrawal: id.clone(),
                holder: holder.clone(),
                holder_state,
            })
        }
        _ => Ok(()),
    }
}

fn holder_state(state: &State, holder: &RequestKey, record: &Record) -> HolderState {
    match record.outcome() {
        Some(outcome) => HolderState::Decided {
            state: outcome.state(),
            reference: outcome.reference().cloned(),
        },
        None => HolderState::InFlight {
            since: record.claimed_at(),
            seq: record.claimed_seq(),
            send_running: state.is_sending(holder),
        },
    }
}

fn in_flight(state: &State, key: &RequestKey, record: &Record) -> Refusal {
    Refusal::InFlight {
        key: key.clone(),
        withdrawal: record.fingerprint().id().clone(),
        since: record.claimed_at(),
        seq: record.claimed_seq(),
        send_running: state.is_sending(key),
    }
}

fn decide_complete(
    state: &State,
    key: &RequestKey,
    result: &SendResult,
) -> Result<Decision, Refusal> {
    let record = match state.record(key) {
        Some(record) if state.is_sending(key) && record.outcome().is_none() => record,
        _ => return Err(Refusal::NoSendRunning { key: key.clone() }),
    };
    let key = key.clone();
    let event = match result {
        SendResult::Sent(outcome) => {
            let differences = record.fingerprint().differences(&outcome.fingerprint());
            if differences.is_empty() {
                EventKind::Completed {
                    key,
                    outcome: outcome.clone(),
                }
            } else {
                // The send answered about another withdrawal: what happened to
                // this one is unknown, so the key stays in flight.
                let summary: Vec<String> = differences.iter().map(ToString::to_string).collect();
                let error = Reason::lossy(&format!(
                    "the send returned another withdrawal: {}",
                    summary.join("; ")
                ));
                let cause = FailureCause::OutcomeMismatch {
                    outcome: Box::new(outcome.clone()),
                    differences,
                };
                EventKind::SendFailed { key, error, cause }
            }
        }
        SendResult::Rejected(reason) => EventKind::SendRejected {
            key,
            reason: reason.clone(),
        },
        SendResult::Failed { error, cause } => EventKind::SendFailed {
            key,
            error: error.clone(),
            cause: cause.clone(),
        },
    };
    Ok(Decision::Append(event))
}
