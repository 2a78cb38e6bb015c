//! Replay: rebuilding the projections from the log, re-deriving every
//! recorded decision on the way, so a log the code would not have written is
//! caught rather than believed.

use crate::decide::{decide, decides_again};
use crate::error::{Divergence, LedgerError};
use crate::event::Event;
use crate::state::{State, apply};

/// Decodes the event stored as log record `seq`.
pub fn decode_event(seq: u64, payload: &[u8]) -> Result<Event, LedgerError> {
    let event = Event::decode(payload).map_err(|error| LedgerError::BadEvent { seq, error })?;
    if event.seq != seq {
        return Err(LedgerError::MisplacedEvent {
            seq,
            found: event.seq,
        });
    }
    Ok(event)
}

/// Asks `decide` again, from `state`, for the command behind `event`.
/// `None` when it agrees with what was recorded.
pub fn rederive(state: &State, event: &Event) -> Option<Divergence> {
    if decides_again(state, &event.kind) {
        return None;
    }
    let recomputed = decide(state, &event.kind.command());
    Some(Divergence {
        seq: event.seq,
        recorded: event.kind.clone(),
        recomputed,
    })
}

/// Decodes, re-derives and applies log record `seq`; a divergence is an
/// error. What opening a ledger does for every record.
pub(crate) fn replay_event(
    state: &mut State,
    seq: u64,
    payload: &[u8],
) -> Result<Event, LedgerError> {
    let event = decode_event(seq, payload)?;
    if let Some(divergence) = rederive(state, &event) {
        return Err(LedgerError::Divergence(Box::new(divergence)));
    }
    apply(state, &event);
    Ok(event)
}
