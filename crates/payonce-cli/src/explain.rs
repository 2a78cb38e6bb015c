//! Each decision in words, for a person reading a history: what an event
//! meant, what a command asked, and what an outcome did to the funds held.

use payonce::{Command, Event, EventKind, FailureCause, Refusal, SendResult};
use payonce_model::{
    Actor, Note, Reason, RequestKey, WithdrawalId, WithdrawalRequest, WithdrawalState,
};

/// A withdrawal's state in words: `sent, reference 0xabc`, `failed: timeout`.
pub(crate) fn outcome_words(outcome: &WithdrawalRequest) -> String {
    let mut words = outcome.state().to_string();
    if let Some(reference) = outcome.reference() {
        words.push_str(&format!(", reference {reference}"));
    }
    if let Some(reason) = outcome.reason() {
        words.push_str(&format!(" ({reason})"));
    }
    words
}

/// What recording an outcome in `state` does to the withdrawal's hold.
fn hold_effect(outcome: &WithdrawalRequest) -> String {
    let held = format!("{} {}", outcome.amount(), outcome.currency());
    match outcome.state() {
        WithdrawalState::Sent | WithdrawalState::Confirmed => {
            format!("the held {held} is captured: the money left")
        }
        WithdrawalState::Failed | WithdrawalState::Rejected => {
            format!("the hold of {held} is released: the money did not leave")
        }
        WithdrawalState::Requested | WithdrawalState::Approved | WithdrawalState::Sending => {
            format!("{held} stays held")
        }
    }
}

fn of(withdrawal: Option<&WithdrawalId>) -> String {
    withdrawal.map_or_else(String::new, |id| format!(" (withdrawal {id})"))
}

fn command_words(command: &Command) -> String {
    match command {
        Command::Claim { key, request } => {
            format!(
                "request key {key} asked to send withdrawal {}",
                request.id()
            )
        }
        Command::Record { key, request } => format!(
            "request key {key} asked to record withdrawal {} ({}) without a send",
            request.id(),
            request.state()
        ),
        Command::Complete { key, result } => {
            let what = match result {
                SendResult::Sent(outcome) => format!("returned {}", outcome_words(outcome)),
                SendResult::Rejected(reason) => format!("was refused by the rail ({reason})"),
                _ => "failed".to_owned(),
            };
            format!("the send for request key {key} {what}")
        }
        Command::Resolve {
            key, outcome, by, ..
        } => format!(
            "{by} asked to resolve request key {key} as withdrawal {} {}",
            outcome.id(),
            outcome_words(outcome)
        ),
        Command::Release { key, by, .. } => format!("{by} asked to release request key {key}"),
        Command::Advance { key, outcome } => format!(
            "a later report for request key {key} said withdrawal {} is {}",
            outcome.id(),
            outcome_words(outcome)
        ),
        Command::Correct {
            key, outcome, by, ..
        } => format!(
            "{by} asked to correct the outcome of request key {key} to withdrawal {} {}",
            outcome.id(),
            outcome_words(outcome)
        ),
        _ => "a command".to_owned(),
    }
}

/// The event's decision in words, for a person reading the history.
/// `withdrawal` is the withdrawal the event is attributed to.
pub(crate) fn explain(event: &Event, withdrawal: Option<&WithdrawalId>) -> String {
    match &event.kind {
        EventKind::Opened {
            accept_foreign_ids,
            epoch,
        } => opened_words(*accept_foreign_ids, *epoch),
        EventKind::Created { withdrawal } => created_words(withdrawal),
        EventKind::Claimed {
            key,
            request,
            worker,
        } => claimed_words(key, request, worker.as_ref()),
        EventKind::Recorded { key, request } => recorded_words(key, request),
        EventKind::Completed { key, outcome } => completed_words(key, outcome),
        EventKind::SendRejected { key, reason, .. } => send_rejected_words(key, reason, withdrawal),
        EventKind::SendFailed {
            key, error, cause, ..
        } => send_failed_words(key, error, cause, withdrawal),
        EventKind::Resolved {
            key,
            outcome,
            note,
            by,
        } => resolved_words(key, outcome, note, by),
        EventKind::Released { key, note, by, .. } => released_words(key, note, by, withdrawal),
        EventKind::Refused {
            command, refusal, ..
        } => refused_words(command, refusal),
        EventKind::Advanced { key, outcome } => advanced_words(key, outcome),
        EventKind::Corrected {
            key,
            old,
            new,
            note,
            by,
        } => corrected_words(key, old, new, note, by),
        EventKind::Started { worker, epoch } => format!(
            "worker {worker} started a session (minting ids w-{epoch:x}-<seq>); no send of its \
             earlier sessions can still be running, so keys they left in flight may now be \
             resolved or released"
        ),
        EventKind::SessionEnded { worker, note, by } => format!(
            "{by} ended the session of worker {worker}, which is gone: its sends are over, so the \
             keys it left in flight may now be resolved or released; note: {note}"
        ),
        _ => format!("{} event", event.kind.name()),
    }
}

/// An `opened` event ends every send of the process before it, whatever
/// the id policy it records; since schema 3 it also names the epoch the ids
/// it mints carry.
fn opened_words(accept_foreign_ids: bool, epoch: Option<u64>) -> String {
    let minting = epoch.map_or_else(String::new, |epoch| {
        format!(", minting ids w-{epoch:x}-<seq>")
    });
    format!(
        "the ledger was opened for writing ({}{minting}); no send of an earlier process can \
         still be running, so keys it left in flight may now be resolved or released",
        if accept_foreign_ids {
            "accepting withdrawal ids minted elsewhere"
        } else {
            "refusing withdrawal ids it did not mint"
        }
    )
}

fn created_words(withdrawal: &WithdrawalRequest) -> String {
    format!(
        "withdrawal {} was created and its id minted: {} {} to {}, requested by {}",
        withdrawal.id(),
        withdrawal.amount(),
        withdrawal.currency(),
        withdrawal.destination(),
        withdrawal.requested_by()
    )
}

/// A claim is what makes a send safe: it was durable before the send began.
fn claimed_words(
    key: &RequestKey,
    request: &WithdrawalRequest,
    worker: Option<&payonce_model::WorkerName>,
) -> String {
    let by = worker.map_or_else(String::new, |worker| format!(" in worker {worker}"));
    format!(
        "request key {key} claimed withdrawal {} ({} {} to {}) and {} {} is held; the claim was \
         on stable storage before the send{by} began",
        request.id(),
        request.amount(),
        request.currency(),
        request.destination(),
        request.amount(),
        request.currency()
    )
}

fn recorded_words(key: &RequestKey, request: &WithdrawalRequest) -> String {
    format!(
        "request key {key} claimed withdrawal {} and recorded it as it stood ({}), without a \
         send; {}",
        request.id(),
        outcome_words(request),
        hold_effect(request)
    )
}

fn completed_words(key: &RequestKey, outcome: &WithdrawalRequest) -> String {
    format!(
        "the send for request key {key} returned: withdrawal {} is {}; {}. A retry under {key} \
         replays this outcome without sending",
        outcome.id(),
        outcome_words(outcome),
        hold_effect(outcome)
    )
}

/// A clean refusal by the rail: nothing left, but the key stays claimed.
fn send_rejected_words(
    key: &RequestKey,
    reason: &Reason,
    withdrawal: Option<&WithdrawalId>,
) -> String {
    format!(
        "the rail refused the send for request key {key}{} cleanly: {reason}. Nothing left the \
         account, so the hold is released; the key stays claimed with an unknown outcome until \
         an operator releases or resolves it",
        of(withdrawal)
    )
}

/// A send without an outcome: the money may have moved, so nothing is let go.
fn send_failed_words(
    key: &RequestKey,
    error: &Reason,
    cause: &FailureCause,
    withdrawal: Option<&WithdrawalId>,
) -> String {
    let what = match cause {
        FailureCause::Panic => "panicked".to_owned(),
        FailureCause::Abandoned => "was abandoned without a result".to_owned(),
        FailureCause::OutcomeMismatch { outcome, .. } => {
            format!("returned another withdrawal ({})", outcome.id())
        }
        FailureCause::Unsettled { outcome } => format!(
            "returned the withdrawal still {}, which does not say what the rail did",
            outcome.state()
        ),
        _ => "failed".to_owned(),
    };
    format!(
        "the send for request key {key}{} {what}: {error}. Its outcome is unknown: the money \
         may have moved, so the key stays claimed and the funds stay held until an operator \
         resolves or releases it",
        of(withdrawal)
    )
}

fn resolved_words(
    key: &RequestKey,
    outcome: &WithdrawalRequest,
    note: &Note,
    by: &Actor,
) -> String {
    format!(
        "operator {by} resolved request key {key}: withdrawal {} is {}, noting \"{note}\"; {}. A \
         retry under {key} replays this outcome without sending",
        outcome.id(),
        outcome_words(outcome),
        hold_effect(outcome)
    )
}

fn released_words(
    key: &RequestKey,
    note: &Note,
    by: &Actor,
    withdrawal: Option<&WithdrawalId>,
) -> String {
    format!(
        "operator {by} released request key {key}{}, noting \"{note}\": nothing was sent, so the \
         key, its claim and its hold are gone and the withdrawal may be submitted again",
        of(withdrawal)
    )
}

/// Whether an outcome in this state means the money left custody: the
/// ledger captures the funds of a sent or confirmed withdrawal and gives
/// them back for any other.
fn left_custody(outcome: &WithdrawalRequest) -> bool {
    matches!(
        outcome.state(),
        WithdrawalState::Sent | WithdrawalState::Confirmed
    )
}

/// A later report moves a sent outcome on; the funds follow it.
fn advanced_words(key: &RequestKey, outcome: &WithdrawalRequest) -> String {
    let money = format!("{} {}", outcome.amount(), outcome.currency());
    let what = match outcome.state() {
        WithdrawalState::Confirmed => format!("the rail confirmed it; the {money} stays captured"),
        WithdrawalState::Failed => format!(
            "it failed on the rail after it was sent, so the {money} captured for it is given back"
        ),
        WithdrawalState::Sent if !outcome.replaced().is_empty() => format!(
            "it was bumped to a new transaction (replacing {}); the {money} stays captured",
            outcome
                .replaced()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => hold_effect(outcome),
    };
    format!(
        "a later report moved the outcome of request key {key} on: withdrawal {} is {}; {what}. \
         A retry under {key} replays this outcome without sending",
        outcome.id(),
        outcome_words(outcome)
    )
}

/// A correction replaces a recorded outcome; what it does to the funds
/// depends on both.
fn corrected_words(
    key: &RequestKey,
    old: &WithdrawalRequest,
    new: &WithdrawalRequest,
    note: &Note,
    by: &Actor,
) -> String {
    let money = format!("{} {}", new.amount(), new.currency());
    let effect = match (left_custody(old), left_custody(new)) {
        (true, true) => format!("the {money} stays captured"),
        (true, false) => {
            format!("the {money} captured for it is given back: the money did not leave")
        }
        (false, true) => format!("the {money} is captured: the money left"),
        (false, false) => "no funds are held or captured for it".to_owned(),
    };
    format!(
        "operator {by} corrected the outcome of request key {key}, noting \"{note}\": withdrawal \
         {} was recorded as {} and is now {}; {effect}. A retry under {key} replays the \
         corrected outcome without sending",
        new.id(),
        outcome_words(old),
        outcome_words(new)
    )
}

/// A refusal changes nothing; what it means depends on what was asked.
fn refused_words(command: &Command, refusal: &Refusal) -> String {
    let consequence = match (command, refusal) {
        (Command::Claim { .. }, _) => "The send did not run and nothing changed",
        (_, Refusal::InFlight { .. }) => "Nothing changed; the key is still in flight",
        (Command::Advance { .. } | Command::Correct { .. }, _) => {
            "Nothing changed; the recorded outcome stands"
        }
        _ => "Nothing changed",
    };
    format!(
        "refused: {}: {refusal}. {consequence}",
        command_words(command)
    )
}
