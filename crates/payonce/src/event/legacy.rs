//! Events of schemas 1 to 3, as earlier builds wrote them. They decode
//! into [`Event`], with what their schema lacks `None`, and encode back to
//! the bytes they were read from.
//!
//! - Schema 3 is schema 4 but for `claimed`, which names no worker, and
//!   holds none of the kinds, commands and refusals schema 4 added.
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
pub(super) const SCHEMAS: std::ops::RangeInclusive<u16> = 1..=3;

/// The number of `claimed` among the kinds.
pub(super) const CLAIMED: u32 = 2;

/// Whether a borrowed reading of an event of `schema` may take the kind
/// numbered `variant` as the current schema lays it out: any in the
/// current schema; in schema 3, every kind whose layout schema 4 kept and
/// which can hold nothing schema 4 added (not a claim, a refusal or a kind
/// schema 4 added); in earlier ones, only the outcomes (created, recorded,
/// completed). A claim of an earlier schema is read through
/// [`LegacyClaimed`]'s layout instead.
pub(crate) fn borrowable(schema: u16, variant: u32) -> bool {
    match schema {
        3 => matches!(variant, 0 | 1 | 3..=8 | 10 | 11),
        1 | 2 => matches!(variant, 1 | 3 | 4),
        _ => true,
    }
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

/// `claimed` as schemas 1 to 3 lay it out: no worker.
#[derive(Serialize, Deserialize)]
pub(super) struct LegacyClaimed<K, R> {
    pub(super) schema: u16,
    pub(super) seq: u64,
    pub(super) at: Timestamp,
    /// [`CLAIMED`].
    pub(super) variant: u32,
    pub(super) key: K,
    pub(super) request: R,
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

/// Decodes an event of schema 1, 2 or 3. Refuses one holding what its
/// schema cannot.
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
        (_, Some(CLAIMED)) => {
            let claimed: LegacyClaimed<RequestKey, WithdrawalRequest> = codec::decode(bytes)?;
            Event {
                schema: claimed.schema,
                seq: claimed.seq,
                at: claimed.at,
                kind: EventKind::Claimed {
                    key: claimed.key,
                    request: claimed.request,
                    worker: None,
                },
            }
        }
        (2, Some(0)) => {
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
    match fits(schema, &event.kind) {
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

/// Encodes an event of schema 1, 2 or 3; refuses one holding what its
/// schema cannot.
pub(super) fn encode(event: &Event) -> Result<Vec<u8>, CodecError> {
    let schema = event.schema;
    let refuse = |name: &str| CodecError::Encode {
        detail: format!(
            "a {name} event of schema {schema} holds what schema {schema} has no place for"
        ),
    };
    if !fits(schema, &event.kind) {
        return Err(refuse(event.kind.name()));
    }
    match (schema, &event.kind) {
        (1, kind) => codec::encode(&LegacyEvent {
            schema,
            seq: event.seq,
            at: event.at,
            kind: LegacyKind::try_from(kind.clone()).map_err(refuse)?,
        }),
        (_, EventKind::Claimed { key, request, .. }) => codec::encode(&LegacyClaimed {
            schema,
            seq: event.seq,
            at: event.at,
            variant: CLAIMED,
            key,
            request,
        }),
        (
            2,
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

/// Whether `kind` holds only what `schema` could: nothing schema 4 added
/// (sessions, a claim naming its worker) and, before schema 3, none of the
/// kinds, causes, commands and refusals schema 3 added, and no epoch.
fn fits(schema: u16, kind: &EventKind) -> bool {
    if !sessionless(kind) {
        return false;
    }
    if schema >= 3 {
        return true;
    }
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

/// Whether `kind` holds nothing of the worker sessions schema 4 added.
fn sessionless(kind: &EventKind) -> bool {
    match kind {
        EventKind::Started { .. } | EventKind::SessionEnded { .. } => false,
        EventKind::Claimed { worker, .. } => worker.is_none(),
        EventKind::Refused {
            command, refusal, ..
        } => {
            !matches!(command, Command::EndSession { .. } | Command::Start { .. })
                && !matches!(refusal, Refusal::NoSession { .. })
        }
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
            LegacyKind::Claimed { key, request } => EventKind::Claimed {
                key,
                request,
                worker: None,
            },
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
            EventKind::Claimed {
                key,
                request,
                worker: None,
            } => LegacyKind::Claimed { key, request },
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
