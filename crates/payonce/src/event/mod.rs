//! Events: the schema of what the log stores. Each event is one decision,
//! stamped with its sequence number and time, encoded through the model's
//! codec. This module is the schema and its decoding, nothing else: it
//! knows nothing of how decisions are judged or what they change.
//!
//! - [`Event`] and [`EventKind`]: the owned event, what the ledger appends
//!   and what auditors read.
//! - [`EventView`] and [`KindView`] (in `view`): the same event with its
//!   text borrowed from the bytes it was decoded from, what replay reads.
//! - `legacy`: events of schemas 1 to 3, read and written in their own
//!   layouts.
//!
//! docs/event-format.md gives every kind's bytes, field by field.

pub(crate) mod common;
mod legacy;
mod view;

use payonce_model::codec::{self, CodecError};
use payonce_model::{Actor, Note, Reason, RequestKey, WithdrawalId, WithdrawalRequest, WorkerName};
use serde::{Deserialize, Serialize};

pub(crate) use self::view::{EventView, KindView};
use crate::command::{Command, FailureCause};
use crate::refusal::Refusal;
use crate::time::Timestamp;

/// Version of the event schema. Stored as the first two bytes (little-endian)
/// of every event, so a reader can refuse a schema it does not know before
/// trying to decode it.
///
/// - 1: the first schema.
/// - 2: events that carried only a request key (`send_rejected`,
///   `send_failed`, `released`) also name the withdrawal the key held, and
///   a refusal names the withdrawal the refused command's key held.
/// - 3: an opening records the epoch its minted ids carry; outcomes move
///   forward (`advanced`) and are corrected (`corrected`); only a settled
///   withdrawal is an outcome, and a send that answers with another is an
///   unknown outcome (`send_failed`, cause `unsettled`).
/// - 4: workers of a ledger several processes share: a worker's start
///   (`started`) ends only the sends of its own earlier sessions, a claim
///   names the worker whose send follows, and an operator ends a dead
///   worker's session (`session_ended`).
pub const SCHEMA_VERSION: u16 = 4;

/// The first schema with worker sessions: claims name their worker, and
/// `started` and `session_ended` exist.
pub(crate) const SCHEMA_SESSIONS: u16 = 4;

/// The first schema whose key-only events and refusals name the
/// withdrawal the key held.
pub(crate) const SCHEMA_NAMING_HELD: u16 = 2;

/// The first schema decided under the rule that only a settled withdrawal
/// (sent, confirmed, failed, rejected) is an outcome. Events of earlier
/// schemas are re-derived under the rules they were decided by.
pub(crate) const SCHEMA_SETTLED_OUTCOMES: u16 = 3;

/// The oldest schema this build reads: logs written by earlier builds
/// replay unchanged.
pub const SCHEMA_VERSION_MIN: u16 = 1;

/// Byte offset of the kind's variant number in an encoded event: after the
/// schema (2 bytes), the sequence number (8) and the time (8).
pub(crate) const KIND_OFFSET: usize = 18;

/// One decision as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The schema it was written in: [`SCHEMA_VERSION`] for every event
    /// this build appends.
    pub schema: u16,
    /// The event's sequence number in the log.
    pub seq: u64,
    /// When it was decided, from the ledger's clock. Decisions never depend
    /// on it.
    pub at: Timestamp,
    /// What was decided.
    pub kind: EventKind,
}

/// What an event records. Variants are numbered in declaration order in
/// the encoding: new kinds go at the end.
///
/// A `withdrawal` of `None` in a `send_rejected`, `send_failed` or
/// `released` event, or a `held` of `None` in a refusal, is found only in
/// events of schema 1, which did not record it; an auditor attributes those
/// through the state before the event ([`crate::State::record`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EventKind {
    /// The ledger was opened for writing. No send from before is running.
    Opened {
        /// Whether ids minted elsewhere are accepted from now on.
        accept_foreign_ids: bool,
        /// The number every id minted from now on carries (schema 3 on).
        epoch: Option<u64>,
    },
    /// A withdrawal was created and its id minted.
    Created {
        /// The new withdrawal, in state requested.
        withdrawal: WithdrawalRequest,
    },
    /// A key and a withdrawal were claimed and the amount held, before a send.
    Claimed {
        /// The key.
        key: RequestKey,
        /// The request as submitted.
        request: WithdrawalRequest,
        /// The worker of a shared ledger whose send follows (schema 4 on);
        /// `None` on a ledger one process writes, whose next opening ends
        /// the send.
        worker: Option<WorkerName>,
    },
    /// A key and a withdrawal were claimed with the request as the outcome.
    Recorded {
        /// The key.
        key: RequestKey,
        /// The request, recorded as it stood.
        request: WithdrawalRequest,
    },
    /// A send returned this outcome.
    Completed {
        /// The key.
        key: RequestKey,
        /// The outcome.
        outcome: WithdrawalRequest,
    },
    /// The rail refused the send cleanly: the hold is released; the key
    /// stays claimed with an unknown outcome.
    SendRejected {
        /// The key.
        key: RequestKey,
        /// The withdrawal the key holds (schema 2 on).
        withdrawal: Option<WithdrawalId>,
        /// The rail's reason.
        reason: Reason,
    },
    /// The send's outcome is unknown: the key stays claimed, the hold stays.
    SendFailed {
        /// The key.
        key: RequestKey,
        /// The withdrawal the key holds (schema 2 on).
        withdrawal: Option<WithdrawalId>,
        /// What went wrong, as text.
        error: Reason,
        /// How it went wrong.
        cause: FailureCause,
    },
    /// An operator recorded what happened.
    Resolved {
        /// The key.
        key: RequestKey,
        /// What happened.
        outcome: WithdrawalRequest,
        /// The operator's note.
        note: Note,
        /// The operator.
        by: Actor,
    },
    /// An operator recorded that nothing was sent: the key, its claim and
    /// its hold are gone.
    Released {
        /// The key.
        key: RequestKey,
        /// The withdrawal the key held (schema 2 on).
        withdrawal: Option<WithdrawalId>,
        /// The operator's note.
        note: Note,
        /// The operator.
        by: Actor,
    },
    /// A command was refused. Changes nothing; kept for audit.
    Refused {
        /// The command.
        command: Command,
        /// Why.
        refusal: Refusal,
        /// The withdrawal the command's key held when it was refused, if it
        /// held one (schema 2 on).
        held: Option<WithdrawalId>,
    },
    /// A later report moved the key's outcome on: confirmed, failed, or
    /// bumped to another reference (schema 3 on).
    Advanced {
        /// The key.
        key: RequestKey,
        /// The outcome as reported now.
        outcome: WithdrawalRequest,
    },
    /// An operator corrected the key's outcome (schema 3 on).
    Corrected {
        /// The key.
        key: RequestKey,
        /// The outcome recorded before.
        old: WithdrawalRequest,
        /// The outcome recorded now.
        new: WithdrawalRequest,
        /// The operator's note.
        note: Note,
        /// The operator.
        by: Actor,
    },
    /// A worker of a shared ledger started a session (schema 4 on): the
    /// sends of its earlier sessions are over; ids minted from now on carry
    /// `epoch`.
    Started {
        /// The worker.
        worker: WorkerName,
        /// The number drawn for this session.
        epoch: u64,
    },
    /// An operator ended the session of a worker that is gone (schema 4
    /// on): the sends it claimed are over, and their keys can be closed.
    SessionEnded {
        /// The worker.
        worker: WorkerName,
        /// The operator's note.
        note: Note,
        /// The operator.
        by: Actor,
    },
}

impl EventKind {
    /// The request key the event is about, if any.
    pub fn key(&self) -> Option<&RequestKey> {
        match self {
            EventKind::Claimed { key, .. }
            | EventKind::Recorded { key, .. }
            | EventKind::Completed { key, .. }
            | EventKind::SendRejected { key, .. }
            | EventKind::SendFailed { key, .. }
            | EventKind::Resolved { key, .. }
            | EventKind::Released { key, .. }
            | EventKind::Advanced { key, .. }
            | EventKind::Corrected { key, .. } => Some(key),
            EventKind::Refused {
                command, refusal, ..
            } => command_key(command).or(refusal.key()),
            EventKind::Opened { .. }
            | EventKind::Created { .. }
            | EventKind::Started { .. }
            | EventKind::SessionEnded { .. } => None,
        }
    }

    /// The request keys the event touches: the key it is about, and the
    /// key a refusal names as the holder of the withdrawal (that key's
    /// claim is what stopped the other caller). What an audit that
    /// follows a key (`payonce history --key`) lists the event under.
    pub fn keys_touched(&self) -> Vec<&RequestKey> {
        let mut keys: Vec<&RequestKey> = self.key().into_iter().collect();
        if let EventKind::Refused { refusal, .. } = self
            && let Some(holder) = refusal.holder()
            && !keys.contains(&holder)
        {
            keys.push(holder);
        }
        keys
    }

    /// The withdrawal the event is about: the one it names, or, for an
    /// event about a key, the one the key held. `None` for an event about
    /// no withdrawal, and for key-only events of schema 1.
    pub fn withdrawal(&self) -> Option<&WithdrawalId> {
        match self {
            EventKind::Created { withdrawal } => Some(withdrawal.id()),
            EventKind::Claimed { request, .. } | EventKind::Recorded { request, .. } => {
                Some(request.id())
            }
            EventKind::Completed { outcome, .. }
            | EventKind::Resolved { outcome, .. }
            | EventKind::Advanced { outcome, .. } => Some(outcome.id()),
            EventKind::Corrected { new, .. } => Some(new.id()),
            EventKind::SendRejected { withdrawal, .. }
            | EventKind::SendFailed { withdrawal, .. }
            | EventKind::Released { withdrawal, .. } => withdrawal.as_ref(),
            EventKind::Refused {
                command,
                refusal,
                held,
            } => command_withdrawal(command)
                .or(refusal.withdrawal())
                .or(held.as_ref()),
            EventKind::Opened { .. }
            | EventKind::Started { .. }
            | EventKind::SessionEnded { .. } => None,
        }
    }

    /// The worker the event names: the one whose session it starts or
    /// ends, or whose send follows a claim.
    pub fn worker(&self) -> Option<&WorkerName> {
        match self {
            EventKind::Started { worker, .. } | EventKind::SessionEnded { worker, .. } => {
                Some(worker)
            }
            EventKind::Claimed { worker, .. } => worker.as_ref(),
            _ => None,
        }
    }

    /// This event as an event of `schema` records it: schemas before
    /// [`SCHEMA_NAMING_HELD`] record no withdrawal for a key-only event.
    pub(crate) fn in_schema(mut self, schema: u16) -> EventKind {
        if schema < SCHEMA_NAMING_HELD {
            match &mut self {
                EventKind::SendRejected { withdrawal, .. }
                | EventKind::SendFailed { withdrawal, .. }
                | EventKind::Released { withdrawal, .. }
                | EventKind::Refused {
                    held: withdrawal, ..
                } => *withdrawal = None,
                _ => {}
            }
        }
        self
    }

    /// A short name for the kind, as used in exports and history.
    pub fn name(&self) -> &'static str {
        self.view().name()
    }
}

/// The names judging `command` looks up: the request key it names, and
/// the withdrawal id its request or outcome carries.
pub(crate) fn command_names(command: &Command) -> [Option<&str>; 2] {
    let id = match command {
        Command::Claim { request, .. } | Command::Record { request, .. } => Some(request.id()),
        Command::Resolve { outcome, .. }
        | Command::Advance { outcome, .. }
        | Command::Correct { outcome, .. } => Some(outcome.id()),
        _ => None,
    };
    [
        command_key(command).map(|key| key.as_str()),
        id.map(|id| id.as_str()),
    ]
}

/// The request key a command names, if any.
pub fn command_key(command: &Command) -> Option<&RequestKey> {
    match command {
        Command::Claim { key, .. }
        | Command::Record { key, .. }
        | Command::Complete { key, .. }
        | Command::Resolve { key, .. }
        | Command::Release { key, .. }
        | Command::Advance { key, .. }
        | Command::Correct { key, .. } => Some(key),
        Command::Open { .. }
        | Command::Create { .. }
        | Command::EndSession { .. }
        | Command::Start { .. } => None,
    }
}

/// The withdrawal a command names, if any.
fn command_withdrawal(command: &Command) -> Option<&WithdrawalId> {
    match command {
        Command::Claim { request, .. } | Command::Record { request, .. } => Some(request.id()),
        Command::Resolve { outcome, .. }
        | Command::Advance { outcome, .. }
        | Command::Correct { outcome, .. } => Some(outcome.id()),
        _ => None,
    }
}

/// Why bytes from the log are not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventDecodeError {
    /// Fewer than two bytes: no schema version.
    Truncated {
        /// Bytes present.
        len: usize,
    },
    /// A schema version this code does not know.
    UnknownSchema {
        /// The version found.
        found: u16,
        /// The newest version this code reads (and the one it writes).
        expected: u16,
    },
    /// The codec refused the bytes.
    Codec(CodecError),
}

impl std::fmt::Display for EventDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventDecodeError::Truncated { len } => {
                write!(f, "event is {len} bytes; too short for a schema version")
            }
            EventDecodeError::UnknownSchema { found, expected } => {
                write!(
                    f,
                    "event schema version {found} is unknown; this build reads versions \
                     {SCHEMA_VERSION_MIN} to {expected}"
                )
            }
            EventDecodeError::Codec(error) => write!(f, "event does not decode: {error}"),
        }
    }
}

impl std::error::Error for EventDecodeError {}

impl Event {
    /// The event's bytes for the log, in the schema it names: the ledger
    /// writes only [`SCHEMA_VERSION`]; an event of an earlier schema read
    /// from an old log encodes back to the bytes it was read from.
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let bytes = match self.schema {
            SCHEMA_VERSION => codec::encode(self)?,
            schema if legacy::SCHEMAS.contains(&schema) => legacy::encode(self)?,
            other => {
                return Err(CodecError::Encode {
                    detail: format!("event schema {other} is not one this build writes"),
                });
            }
        };
        assert_eq!(
            bytes[..2],
            self.schema.to_le_bytes(),
            "the schema version leads the encoding"
        );
        Ok(bytes)
    }

    /// Decodes an event written by [`Event::encode`], of any schema this
    /// build reads.
    pub fn decode(bytes: &[u8]) -> Result<Event, EventDecodeError> {
        let event = match schema_of(bytes)? {
            SCHEMA_VERSION => codec::decode::<Event>(bytes),
            schema => legacy::decode(schema, bytes),
        }
        .map_err(EventDecodeError::Codec)?;
        assert_eq!(
            event.schema.to_le_bytes(),
            bytes[..2],
            "the schema version leads the encoding"
        );
        Ok(event)
    }

    /// The event as replay reads `bytes`: borrowed, the most common kinds
    /// without serde, then owned again; `None` where a borrowed reading
    /// refuses. For the fuzz property that holds it to [`Event::decode`].
    #[doc(hidden)]
    pub fn decode_as_replay(bytes: &[u8]) -> Option<Event> {
        let view = EventView::decode(bytes).ok()?;
        Some(Event {
            schema: view.schema,
            seq: view.seq,
            at: view.at,
            kind: view.kind.to_value(),
        })
    }

    /// The event, borrowed.
    pub(crate) fn view(&self) -> EventView<'_> {
        EventView {
            schema: self.schema,
            seq: self.seq,
            at: self.at,
            kind: self.kind.view(),
        }
    }
}

/// The schema version `bytes` start with, if this build reads it.
pub(crate) fn schema_of(bytes: &[u8]) -> Result<u16, EventDecodeError> {
    let Some(version) = bytes.get(..2) else {
        return Err(EventDecodeError::Truncated { len: bytes.len() });
    };
    let found = u16::from_le_bytes([version[0], version[1]]);
    if !(SCHEMA_VERSION_MIN..=SCHEMA_VERSION).contains(&found) {
        return Err(EventDecodeError::UnknownSchema {
            found,
            expected: SCHEMA_VERSION,
        });
    }
    Ok(found)
}

#[cfg(test)]
pub(crate) mod tests;
