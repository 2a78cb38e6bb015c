//! Re-derivation: whether `decide`, asked again from the state before an
//! event, records exactly that event. A log the code would not have
//! written is caught rather than believed.
//!
//! The recorded event is judged itself, by the judge functions that judge
//! a caller's proposal, so every field the judgement reads is checked
//! against the state, and what an event derives from the state (a minted
//! id, the withdrawal a key holds, a correction's old outcome) is compared
//! with what the judgement derives now. Only refusals, and send failures
//! whose send returned another withdrawal or an unsettled one, have their
//! proposal rebuilt, since their event is not the proposal itself. Each
//! event is judged under the rules of the schema it was written in.

use payonce_model::{RequestKey, TextView, WithdrawalId, WithdrawalView};

use crate::command::FailureCause;
use crate::decide::judge::{self, ClaimVerdict, CloseVerdict, MoveVerdict};
use crate::decide::{Decision, decide_in};
use crate::error::Divergence;
use crate::event::{Event, EventView, KindView, SCHEMA_NAMING_HELD};
use crate::state::{KeyRecord, Prefetched, State};

/// Asks `decide` again, from `state`, for the command behind `event`.
/// `None` when it agrees with what was recorded.
pub fn rederive(state: &State, event: &Event) -> Option<Divergence> {
    let view = event.view();
    let found = state.prefetch(&state.names(&view.kind));
    rederive_prefetched(state, &view, &found)
}

/// [`rederive`], with what the event touches found already.
pub(crate) fn rederive_prefetched(
    state: &State,
    event: &EventView<'_>,
    found: &Prefetched<'_>,
) -> Option<Divergence> {
    if decides_again(state, event, found) {
        return None;
    }
    let recorded = event.kind.to_value();
    Some(Divergence {
        seq: event.seq,
        recomputed: decide_in(state, &recorded.command(), event.schema),
        recorded,
    })
}

fn decides_again(state: &State, event: &EventView<'_>, found: &Prefetched<'_>) -> bool {
    let schema = event.schema;
    match &event.kind {
        KindView::Opened { .. } | KindView::Started { .. } => true,
        KindView::SessionEnded { worker, .. } => judge::end_session(state, *worker).is_ok(),
        KindView::Claimed {
            key,
            request,
            worker,
        } => judge::claimant(state, *worker) && grants(state, found, *key, *request),
        KindView::Created { withdrawal } => judge::created(state, *withdrawal),
        KindView::Recorded { key, request } => grants(state, found, *key, *request),
        KindView::Completed { key, outcome } => {
            judge::completion(state, found, *key, Some(*outcome), schema)
                .is_ok_and(|verdict| verdict.differences.is_empty() && verdict.unsettled.is_none())
        }
        KindView::SendFailed { cause, .. }
            if matches!(
                **cause,
                FailureCause::OutcomeMismatch { .. } | FailureCause::Unsettled { .. }
            ) =>
        {
            rebuilds_the_same(state, event)
        }
        KindView::SendRejected {
            key, withdrawal, ..
        }
        | KindView::SendFailed {
            key, withdrawal, ..
        } => judge::completion(state, found, *key, None, schema)
            .is_ok_and(|verdict| derived(schema, *withdrawal, Some(verdict.record))),
        KindView::Resolved { key, outcome, .. } => matches!(
            judge::resolution(state, found, *key, *outcome, schema),
            Ok(CloseVerdict::Close(_))
        ),
        KindView::Advanced { key, outcome } => matches!(
            judge::advance(state, found, *key, *outcome),
            Ok(MoveVerdict::Record(_))
        ),
        KindView::Corrected { key, old, new, .. } => {
            match judge::correction(state, found, *key, *new) {
                Ok(MoveVerdict::Record(recorded)) => recorded.view() == *old,
                _ => false,
            }
        }
        KindView::Released {
            key, withdrawal, ..
        } => match judge::release(state, found, *key) {
            Ok(CloseVerdict::Close(record)) => derived(schema, *withdrawal, record),
            _ => false,
        },
        KindView::Refused {
            command,
            refusal,
            held,
        } => {
            decide_in(state, command, schema).as_ref() == Err(&**refusal)
                && derived(schema, *held, judge::held(state, found))
        }
    }
}

/// Whether `key` claiming `request` is granted in `state`.
fn grants(
    state: &State,
    found: &Prefetched<'_>,
    key: TextView<'_, RequestKey>,
    request: WithdrawalView<'_>,
) -> bool {
    matches!(
        judge::claim(state, found, key, request),
        Ok(ClaimVerdict::Grant)
    )
}

/// Whether `decide`, asked again the command `event` records, proposes
/// exactly `event`: for the events that carry what the state derived.
fn rebuilds_the_same(state: &State, event: &EventView<'_>) -> bool {
    let recorded = event.kind.to_value();
    match decide_in(state, &recorded.command(), event.schema) {
        Ok(Decision::Append(rebuilt)) => rebuilt.in_schema(event.schema) == recorded,
        _ => false,
    }
}

/// Whether `recorded`, a withdrawal an event of `schema` names because a
/// key holds it, is the one `record`'s key holds now. Schemas before
/// [`SCHEMA_NAMING_HELD`] recorded none.
fn derived(
    schema: u16,
    recorded: Option<TextView<'_, WithdrawalId>>,
    record: Option<KeyRecord<'_>>,
) -> bool {
    if schema < SCHEMA_NAMING_HELD {
        return recorded.is_none();
    }
    recorded.map(|id| id.as_str()) == record.map(|record| record.withdrawal_str())
}
