//! Events of schemas 1 and 2, as earlier builds wrote them. They decode
//! into [`Event`], with what their schema lacks `None`, and encode back to
//! the bytes they were read from.
//!
//! - Schema 2 is schema 3 but for `opened`, which had no epoch, and holds
//!   none of the kinds, causes, commands and refusals schema 3 added.
//! - Schema 1 is schema 2 without the withdrawal that key-only events and
//!   refusals name from schema 2 on.

use payonce_model::codec::{self, CodecError};
use payonce_model::{Actor, Note, Reason, RequestKey, WithdrawalRequest};
use serde::{Deserialize, Serialize};

use super::{Event, EventKind};
use crate::command::{Command, FailureCause, SendResult};
use crate::refusal::Refusal;
use crate::time::Timestamp;

/// The schemas this module reads and writes.
pub(super) const SCHEMAS: std::ops::RangeInclusive<u16> = 1..=2;

/// Whether a borrowed reading of an event of `schema` may take the kind
/// numbered `variant`: any in the current schema; in an earlier one, only
/// the claims and outcomes (created, claimed, recorded, completed), whose
/// layout no schema changed and which can hold nothing a later schema
/// added.
pub(crate) fn borrowable(schema: u16, variant: u32) -> bool {
    !SCHEMAS.contains(&schema) || (1..=4).contains(&variant)
}

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

/// `opened` as schemas 1 and 2 lay it out: no epoch.
#[derive(Serialize, Deserialize)]
struct LegacyOpened {
    schema: u16,
    seq: u64,
    at: Timestamp,
    /// 0, `opened`'s number.
    variant: u32,
    accept_foreign_ids: bool,
}

/// Decodes an event of schema 1 or 2. Refuses one holding what its schema
/// cannot.
pub(super) fn decode(schema: u16, bytes: &[u8]) -> Result<Event, CodecError> {
    let event = match (schema, variant(bytes)) {
        (1, _) => {
            let LegacyEvent {
                schema,
                seq,
                at,
                kind,
            } = codec::decode(bytes)?;
            Event {
                schema,
                seq,
                at,
                kind: kind.into(),
            }
        }
        (_, Some(0)) => {
            let opened: LegacyOpened = codec::decode(bytes)?;
            Event {
                schema: opened.schema,
                seq: opened.seq,
                at: opened.at,
                kind: EventKind::Opened {
                    accept_foreign_ids: opened.accept_foreign_ids,
                    epoch: None,
                },
            }
        }
        _ => codec::decode(bytes)?,
    };
    match fits(&event.kind) {
        true => Ok(event),
        false => Err(no_place(schema, event.kind.name())),
    }
}

fn no_place(schema: u16, name: &str) -> CodecError {
    CodecError::Decode {
        detail: format!(
            "a {name} event of schema {schema} holds what schema {schema} has no place for"
        ),
    }
}

/// The kind's variant number in `bytes`, if they are long enough to hold
/// one.
fn variant(bytes: &[u8]) -> Option<u32> {
    let variant = bytes.get(super::KIND_OFFSET..super::KIND_OFFSET + 4)?;
    Some(u32::from_le_bytes([
        variant[0], variant[1], variant[2], variant[3],
    ]))
}

/// Encodes an event of schema 1 or 2; refuses one holding what its schema
/// cannot.
pub(super) fn encode(event: &Event) -> Result<Vec<u8>, CodecError> {
    let schema = event.schema;
    let refuse = |name: &str| CodecError::Encode {
        detail: format!(
            "a {name} event of schema {schema} holds what schema {schema} has no place for"
        ),
    };
    if !fits(&event.kind) {
        return Err(refuse(event.kind.name()));
    }
    match (schema, &event.kind) {
        (1, kind) => codec::encode(&LegacyEvent {
            schema,
            seq: event.seq,
            at: event.at,
            kind: LegacyKind::try_from(kind.clone()).map_err(refuse)?,
        }),
        (
            _,
            EventKind::Opened {
                accept_foreign_ids, ..
            },
        ) => codec::encode(&LegacyOpened {
            schema,
            seq: event.seq,
            at: event.at,
            variant: 0,
            accept_foreign_ids: *accept_foreign_ids,
        }),
        _ => codec::encode(event),
    }
}

/// Whether `kind` holds only what schemas 1 and 2 could: none of the
/// kinds, causes, commands and refusals schema 3 added, and no epoch.
fn fits(kind: &EventKind) -> bool {
    match kind {
        EventKind::Advanced { .. } | EventKind::Corrected { .. } => false,
        EventKind::Opened { epoch, .. } => epoch.is_none(),
        EventKind::SendFailed { cause, .. } => !matches!(cause, FailureCause::Unsettled { .. }),
        EventKind::Refused {
            command, refusal, ..
        } => command_fits(command) && refusal_fits(refusal),
        _ => true,
    }
}

fn command_fits(command: &Command) -> bool {
    match command {
        Command::Advance { .. } | Command::Correct { .. } => false,
        Command::Open { epoch, .. } => epoch.is_none(),
        Command::Complete {
            result: SendResult::Failed { cause, .. },
            ..
        } => !matches!(cause, FailureCause::Unsettled { .. }),
        _ => true,
    }
}

fn refusal_fits(refusal: &Refusal) -> bool {
    !matches!(
        refusal,
        Refusal::Unsettled { .. } | Refusal::ForbiddenMove { .. } | Refusal::NoOutcome { .. }
    )
}

impl From<LegacyKind> for EventKind {
    fn from(kind: LegacyKind) -> Self {
        match kind {
            LegacyKind::Opened { accept_foreign_ids } => EventKind::Opened {
                accept_foreign_ids,
                epoch: None,
            },
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
            EventKind::Opened {
                accept_foreign_ids,
                epoch: None,
            } => LegacyKind::Opened { accept_foreign_ids },
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
