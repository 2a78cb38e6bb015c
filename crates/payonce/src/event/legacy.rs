//! Events of schema 1, as builds before schema 2 wrote them: the same
//! kinds in the same order, without the withdrawal that key-only events
//! and refusals name from schema 2 on. They decode into [`Event`] with
//! those fields `None`, and encode back to the bytes they were read from.

use payonce_model::codec::{self, CodecError};
use payonce_model::{Actor, Note, Reason, RequestKey, WithdrawalRequest};
use serde::{Deserialize, Serialize};

use super::{Event, EventKind};
use crate::command::{Command, FailureCause};
use crate::refusal::Refusal;
use crate::time::Timestamp;

/// The schema this module reads and writes.
pub(super) const SCHEMA: u16 = 1;

/// The kinds whose layout schema 2 changed, by variant number: a borrowed
/// reading of schema 1 takes only the others.
pub(crate) const CHANGED_KINDS: [u32; 4] = [5, 6, 8, 9];

#[derive(Serialize, Deserialize)]
struct LegacyEvent {
    schema: u16,
    seq: u64,
    at: Timestamp,
    kind: LegacyKind,
}

/// [`EventKind`] as schema 1 lays it out, variant for variant.
#[derive(Serialize, Deserialize)]
enum LegacyKind {
    Opened {
        accept_foreign_ids: bool,
    },
    Created {
        withdrawal: WithdrawalRequest,
    },
    Claimed {
        key: RequestKey,
        request: WithdrawalRequest,
    },
    Recorded {
        key: RequestKey,
        request: WithdrawalRequest,
    },
    Completed {
        key: RequestKey,
        outcome: WithdrawalRequest,
    },
    SendRejected {
        key: RequestKey,
        reason: Reason,
    },
    SendFailed {
        key: RequestKey,
        error: Reason,
        cause: FailureCause,
    },
    Resolved {
        key: RequestKey,
        outcome: WithdrawalRequest,
        note: Note,
        by: Actor,
    },
    Released {
        key: RequestKey,
        note: Note,
        by: Actor,
    },
    Refused {
        command: Command,
        refusal: Refusal,
    },
}

/// Decodes an event of schema 1.
pub(super) fn decode(bytes: &[u8]) -> Result<Event, CodecError> {
    let LegacyEvent {
        schema,
        seq,
        at,
        kind,
    } = codec::decode(bytes)?;
    Ok(Event {
        schema,
        seq,
        at,
        kind: kind.into(),
    })
}

/// Encodes an event of schema 1; refuses one naming what schema 1 cannot
/// hold.
pub(super) fn encode(event: &Event) -> Result<Vec<u8>, CodecError> {
    let kind = LegacyKind::try_from(event.kind.clone()).map_err(|name| CodecError::Encode {
        detail: format!(
            "a {name} event of schema 1 names a withdrawal; schema 1 has no place for it"
        ),
    })?;
    codec::encode(&LegacyEvent {
        schema: event.schema,
        seq: event.seq,
        at: event.at,
        kind,
    })
}

impl From<LegacyKind> for EventKind {
    fn from(kind: LegacyKind) -> Self {
        match kind {
            LegacyKind::Opened { accept_foreign_ids } => EventKind::Opened { accept_foreign_ids },
            LegacyKind::Created { withdrawal } => EventKind::Created { withdrawal },
            LegacyKind::Claimed { key, request } => EventKind::Claimed { key, request },
            LegacyKind::Recorded { key, request } => EventKind::Recorded { key, request },
            LegacyKind::Completed { key, outcome } => EventKind::Completed { key, outcome },
            LegacyKind::SendRejected { key, reason } => EventKind::SendRejected {
                key,
                withdrawal: None,
                reason,
            },
            LegacyKind::SendFailed { key, error, cause } => EventKind::SendFailed {
                key,
                withdrawal: None,
                error,
                cause,
            },
            LegacyKind::Resolved {
                key,
                outcome,
                note,
                by,
            } => EventKind::Resolved {
                key,
                outcome,
                note,
                by,
            },
            LegacyKind::Released { key, note, by } => EventKind::Released {
                key,
                withdrawal: None,
                note,
                by,
            },
            LegacyKind::Refused { command, refusal } => EventKind::Refused {
                command,
                refusal,
                held: None,
            },
        }
    }
}

impl TryFrom<EventKind> for LegacyKind {
    /// The name of a kind that names a withdrawal schema 1 cannot hold.
    type Error = &'static str;

    fn try_from(kind: EventKind) -> Result<Self, Self::Error> {
        let name = kind.name();
        Ok(match kind {
            EventKind::Opened { accept_foreign_ids } => LegacyKind::Opened { accept_foreign_ids },
            EventKind::Created { withdrawal } => LegacyKind::Created { withdrawal },
            EventKind::Claimed { key, request } => LegacyKind::Claimed { key, request },
            EventKind::Recorded { key, request } => LegacyKind::Recorded { key, request },
            EventKind::Completed { key, outcome } => LegacyKind::Completed { key, outcome },
            EventKind::SendRejected {
                key,
                withdrawal: None,
                reason,
            } => LegacyKind::SendRejected { key, reason },
            EventKind::SendFailed {
                key,
                withdrawal: None,
                error,
                cause,
            } => LegacyKind::SendFailed { key, error, cause },
            EventKind::Resolved {
                key,
                outcome,
                note,
                by,
            } => LegacyKind::Resolved {
                key,
                outcome,
                note,
                by,
            },
            EventKind::Released {
                key,
                withdrawal: None,
                note,
                by,
            } => LegacyKind::Released { key, note, by },
            EventKind::Refused {
                command,
                refusal,
                held: None,
            } => LegacyKind::Refused { command, refusal },
            _ => return Err(name),
        })
    }
}
