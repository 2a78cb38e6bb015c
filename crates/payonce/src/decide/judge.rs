//! The judgement: whether a proposed event may be appended, given the
//! state. Each function judges one kind of proposal from its borrowed
//! fields, so the same code judges a caller's proposal and an event read
//! back from the log, and answers with a verdict shaped for that kind. A
//! verdict also carries what the event derives from the state rather than
//! from the caller (the withdrawal a key holds), so building an event and
//! re-deriving one read the same value.

use payonce_model::{
    Difference, RequestKey, TextView, WithdrawalId, WithdrawalRequest, WithdrawalState,
    WithdrawalView, WorkerName,
};

use crate::event::SCHEMA_SETTLED_OUTCOMES;
use crate::refusal::{HolderState, Refusal};
use crate::state::{KeyRecord, Prefetched, State};

/// What a claim (or a record) comes to.
#[derive(Debug)]
pub(crate) enum ClaimVerdict {
    /// A new claim: append it.
    Grant,
    /// The key already has this outcome: return it, send nothing.
    Replay(WithdrawalRequest),
}

/// What a send's result comes to. Always an event.
#[derive(Debug)]
pub(crate) struct CompletionVerdict<'s> {
    /// The key's record: the withdrawal it holds is what the event names.
    pub(crate) record: KeyRecord<'s>,
    /// Every field in which a returned outcome differs from the claimed
    /// withdrawal; empty when it is the claimed one or there is none.
    pub(crate) differences: Vec<Difference>,
    /// The state of a returned outcome that does not say what the rail
    /// did: the send's outcome is then unknown.
    pub(crate) unsettled: Option<WithdrawalState>,
}

/// What a later report of a key's outcome comes to.
#[derive(Debug)]
pub(crate) enum MoveVerdict {
    /// Record it: the outcome recorded before, which it moves on from or
    /// corrects.
    Record(WithdrawalRequest),
    /// It is the outcome recorded already: write nothing.
    AlreadyRecorded,
}

/// What an operator's close (resolve or release) comes to.
#[derive(Debug)]
pub(crate) enum CloseVerdict<'s> {
    /// Append it. For a release, the key's record: the withdrawal it holds
    /// is what the event names.
    Close(Option<KeyRecord<'s>>),
    /// What was asked already holds: write nothing.
    AlreadyClosed,
}

/// A claim of `key` for `request`, with a send to follow or with the
/// request as its own outcome. The key is looked up first.
pub(crate) fn claim(
    state: &State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    request: WithdrawalView<'_>,
) -> Result<ClaimVerdict, Refusal> {
    if let Some(record) = state.record_of(found) {
        if !record.matches_view(request) {
            let differences = record.fingerprint().differences(&request.fingerprint());
            return Err(Refusal::KeyReused {
                key: key.to_value(),
                differences,
            });
        }
        return match record.outcome() {
            Some(outcome) => Ok(ClaimVerdict::Replay(outcome)),
            None => Err(in_flight(key, &record)),
        };
    }
    withdrawal_free(state, found, key, request)?;
    Ok(ClaimVerdict::Grant)
}

/// A send's result for `key`: `outcome` when the send returned one,
/// judged under the rules of `schema`.
pub(crate) fn completion<'s>(
    state: &'s State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    outcome: Option<WithdrawalView<'_>>,
    schema: u16,
) -> Result<CompletionVerdict<'s>, Refusal> {
    let record = match state.record_of(found) {
        Some(record) if record.send_running() && record.outcome_state().is_none() => record,
        _ => {
            return Err(Refusal::NoSendRunning {
                key: key.to_value(),
            });
        }
    };
    let differences = match outcome {
        Some(outcome) if !record.matches_view(outcome) => {
            record.fingerprint().differences(&outcome.fingerprint())
        }
        _ => Vec::new(),
    };
    let unsettled = outcome
        .map(|outcome| outcome.state())
        .filter(|&state| settled_rule(schema) && !state.is_settled());
    Ok(CompletionVerdict {
        record,
        differences,
        unsettled,
    })
}

/// Whether events of `schema` were decided under the rule that only a
/// settled withdrawal is an outcome: every event this build decides is.
fn settled_rule(schema: u16) -> bool {
    schema >= SCHEMA_SETTLED_OUTCOMES
}

/// Refuses `outcome` for `key` unless it says what the rail did.
fn settled(
    key: TextView<'_, RequestKey>,
    outcome: WithdrawalView<'_>,
    schema: u16,
) -> Result<(), Refusal> {
    let state = outcome.state();
    if settled_rule(schema) && !state.is_settled() {
        return Err(Refusal::Unsettled {
            key: key.to_value(),
            state,
        });
    }
    Ok(())
}

/// An operator's "here is what happened" for `key`, judged under the rules
/// of `schema`.
pub(crate) fn resolution<'s>(
    state: &'s State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    outcome: WithdrawalView<'_>,
    schema: u16,
) -> Result<CloseVerdict<'s>, Refusal> {
    settled(key, outcome, schema)?;
    let Some(record) = state.record_of(found) else {
        // A fresh key passes the same withdrawal check as a claim, so a
        // callback under a new key cannot declare what happened to a
        // withdrawal another key holds.
        withdrawal_free(state, found, key, outcome)?;
        return Ok(CloseVerdict::Close(None));
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
        None => Ok(CloseVerdict::Close(None)),
        Some(_) if record.has_outcome_view(outcome) => Ok(CloseVerdict::AlreadyClosed),
        Some(recorded) => Err(Refusal::OutcomeDiffers {
            key: key.to_value(),
            recorded_state: recorded.state(),
            recorded_reference: recorded.reference().cloned(),
        }),
    }
}

/// A later report of what the rail did with `key`'s outcome: it moves the
/// outcome on by one transition of the state machine (confirmed, failed,
/// bumped), or is the outcome recorded already.
pub(crate) fn advance(
    state: &State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    outcome: WithdrawalView<'_>,
) -> Result<MoveVerdict, Refusal> {
    let recorded = recorded_outcome(state, found, key, outcome)?;
    let later = outcome.to_value();
    if recorded == later {
        return Ok(MoveVerdict::AlreadyRecorded);
    }
    match recorded.advance_to(&later) {
        Some(_) => Ok(MoveVerdict::Record(recorded)),
        None => Err(Refusal::ForbiddenMove {
            key: key.to_value(),
            from: recorded.state(),
            to: later.state(),
        }),
    }
}

/// An operator's correction of `key`'s outcome to `outcome`: any settled
/// outcome of the same withdrawal.
pub(crate) fn correction(
    state: &State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    outcome: WithdrawalView<'_>,
) -> Result<MoveVerdict, Refusal> {
    let recorded = recorded_outcome(state, found, key, outcome)?;
    match recorded == outcome.to_value() {
        true => Ok(MoveVerdict::AlreadyRecorded),
        false => Ok(MoveVerdict::Record(recorded)),
    }
}

/// The outcome recorded for `key`, which `outcome`, a later report of the
/// same withdrawal, settled, would replace.
fn recorded_outcome(
    state: &State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    outcome: WithdrawalView<'_>,
) -> Result<WithdrawalRequest, Refusal> {
    settled(key, outcome, SCHEMA_SETTLED_OUTCOMES)?;
    let no_outcome = || Refusal::NoOutcome {
        key: key.to_value(),
    };
    let record = state.record_of(found).ok_or_else(no_outcome)?;
    if !record.matches_view(outcome) {
        let differences = record.fingerprint().differences(&outcome.fingerprint());
        return Err(Refusal::OutcomeMismatch {
            key: key.to_value(),
            differences,
        });
    }
    record.outcome().ok_or_else(no_outcome)
}

/// An operator's "nothing was sent" for `key`.
pub(crate) fn release<'s>(
    state: &'s State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
) -> Result<CloseVerdict<'s>, Refusal> {
    let Some(record) = state.record_of(found) else {
        return Ok(CloseVerdict::AlreadyClosed);
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
    Ok(CloseVerdict::Close(Some(record)))
}

/// An operator's "this worker is gone": refused unless the worker has a
/// live session to end.
pub(crate) fn end_session(state: &State, worker: TextView<'_, WorkerName>) -> Result<(), Refusal> {
    match state.session(worker.as_str()) {
        Some(_) => Ok(()),
        None => Err(Refusal::NoSession {
            worker: worker.to_value(),
        }),
    }
}

/// Whether a claim naming `worker` as the one whose send follows is one
/// the ledger makes: by a worker with a live session, or, on a ledger one
/// process writes, by none.
pub(crate) fn claimant(state: &State, worker: Option<TextView<'_, WorkerName>>) -> bool {
    worker.is_none_or(|worker| state.session(worker.as_str()).is_some())
}

/// The id the next created withdrawal gets: the sequence number its event
/// is about to get, in the epoch of the last opening. A log opened before
/// openings had epochs minted `w-<seq>`.
pub(crate) fn minted_id(state: &State) -> WithdrawalId {
    let seq = state.last_seq() + 1;
    match state.epoch() {
        Some(epoch) => WithdrawalId::minted_in(epoch, seq),
        None => WithdrawalId::minted(seq),
    }
}

/// Whether `withdrawal` is what a create decided now would record: the
/// minted id, in state requested, never bumped.
pub(crate) fn created(state: &State, withdrawal: WithdrawalView<'_>) -> bool {
    let (id, seq) = (withdrawal.id(), state.last_seq() + 1);
    let minted = match state.epoch() {
        Some(epoch) => WithdrawalId::is_minted_in(&id, epoch, seq),
        None => WithdrawalId::is_minted(&id, seq),
    };
    minted && withdrawal.state() == WithdrawalState::Requested && withdrawal.replaced().is_empty()
}

/// The record of the key a refused command names, if it has one: the
/// withdrawal it holds is what the refusal records.
pub(crate) fn held<'s>(state: &'s State, found: &Prefetched<'_>) -> Option<KeyRecord<'s>> {
    state.record_of(found)
}

/// Whether `key` may take the request's withdrawal: minted here (unless
/// foreign ids are accepted), as created, and not held by another key.
fn withdrawal_free(
    state: &State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    request: WithdrawalView<'_>,
) -> Result<(), Refusal> {
    let id = request.id();
    let withdrawal = state.withdrawal_of(found);
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

fn holder_state(record: &KeyRecord<'_>) -> HolderState {
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

fn in_flight(key: TextView<'_, RequestKey>, record: &KeyRecord<'_>) -> Refusal {
    Refusal::InFlight {
        key: key.to_value(),
        withdrawal: record.withdrawal(),
        since: record.claimed_at(),
        seq: record.claimed_seq(),
        send_running: record.send_running(),
    }
}
