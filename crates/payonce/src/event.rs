//! Events: what the log stores. Each is one decision, stamped with its
//! sequence number and time, encoded through the model's codec.

use payonce_model::codec::{self, CodecError};
use payonce_model::{Actor, Note, Reason, RequestKey, WithdrawalId, WithdrawalRequest};
use serde::{Deserialize, Serialize};

use crate::command::{Command, FailureCause};
use crate::decide::{Ask, Sent};
use crate::refusal::Refusal;
use crate::time::Timestamp;

/// Version of the event schema. Stored as the first two bytes (little-endian)
/// of every event, so a reader can refuse a schema it does not know before
/// trying to decode it.
pub const SCHEMA_VERSION: u16 = 1;

/// One decision as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// [`SCHEMA_VERSION`] when written.
    pub schema: u16,
    /// The event's sequence number in the log.
    pub seq: u64,
    /// When it was decided, from the ledger's clock. Decisions never depend
    /// on it.
    pub at: Timestamp,
    /// What was decided.
    pub kind: EventKind,
}

/// What an event records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EventKind {
    /// The ledger was opened for writing. No send from before is running.
    Opened {
        /// Whether ids minted elsewhere are accepted from now on.
        accept_foreign_ids: bool,
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
        /// The rail's reason.
        reason: Reason,
    },
    /// The send's outcome is unknown: the key stays claimed, the hold stays.
    SendFailed {
        /// The key.
        key: RequestKey,
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
    },
}

impl EventKind {
    /// The command that produces this event, so replay can ask `decide` again
    /// and compare. For a refusal, the refused command.
    pub fn command(&self) -> Command {
        self.ask().to_command()
    }

    /// [`EventKind::command`], borrowed.
    pub(crate) fn ask(&self) -> Ask<'_> {
        match self {
            EventKind::Opened { accept_foreign_ids } => Ask::Open {
                accept_foreign_ids: *accept_foreign_ids,
            },
            EventKind::Created { withdrawal } => Ask::Create {
                amount: withdrawal.amount(),
                currency: withdrawal.currency(),
                destination: withdrawal.destination(),
                requested_by: withdrawal.requested_by(),
            },
            EventKind::Claimed { key, request } => Ask::Claim { key, request },
            EventKind::Recorded { key, request } => Ask::Record { key, request },
            EventKind::Completed { key, outcome } => Ask::Complete {
                key,
                result: Sent::Outcome(outcome),
            },
            EventKind::SendRejected { key, reason } => Ask::Complete {
                key,
                result: Sent::Rejected(reason),
            },
            EventKind::SendFailed { key, error, cause } => match cause {
                // The send returned another withdrawal: replay re-derives the
                // refusal from the outcome it returned.
                FailureCause::OutcomeMismatch { outcome, .. } => Ask::Complete {
                    key,
                    result: Sent::Outcome(outcome),
                },
                _ => Ask::Complete {
                    key,
                    result: Sent::Failed { error, cause },
                },
            },
            EventKind::Resolved {
                key,
                outcome,
                note,
                by,
            } => Ask::Resolve {
                key,
                outcome,
                note,
                by,
            },
            EventKind::Released { key, note, by } => Ask::Release { key, note, by },
            EventKind::Refused { command, .. } => command.ask(),
        }
    }

    /// The request key the event is about, if any.
    pub fn key(&self) -> Option<&RequestKey> {
        match self {
            EventKind::Claimed { key, .. }
            | EventKind::Recorded { key, .. }
            | EventKind::Completed { key, .. }
            | EventKind::SendRejected { key, .. }
            | EventKind::SendFailed { key, .. }
            | EventKind::Resolved { key, .. }
            | EventKind::Released { key, .. } => Some(key),
            EventKind::Refused { command, refusal } => command_key(command).or(refusal.key()),
            EventKind::Opened { .. } | EventKind::Created { .. } => None,
        }
    }

    /// The withdrawal the event names, if it names one. Events that carry
    /// only a key (`send_rejected`, `send_failed`, `released`) are about the
    /// withdrawal that key held at the time: an auditor attributes them by
    /// replaying the claims.
    pub fn withdrawal(&self) -> Option<&WithdrawalId> {
        match self {
            EventKind::Created { withdrawal } => Some(withdrawal.id()),
            EventKind::Claimed { request, .. } | EventKind::Recorded { request, .. } => {
                Some(request.id())
            }
            EventKind::Completed { outcome, .. } | EventKind::Resolved { outcome, .. } => {
                Some(outcome.id())
            }
            EventKind::Refused { command, refusal } => match command {
                Command::Claim { request, .. } | Command::Record { request, .. } => {
                    Some(request.id())
                }
                Command::Resolve { outcome, .. } => Some(outcome.id()),
                _ => refusal.withdrawal(),
            },
            EventKind::Opened { .. }
            | EventKind::SendRejected { .. }
            | EventKind::SendFailed { .. }
            | EventKind::Released { .. } => None,
        }
    }

    /// A short name for the kind, as used in exports and history.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Opened { .. } => "opened",
            EventKind::Created { .. } => "created",
            EventKind::Claimed { .. } => "claimed",
            EventKind::Recorded { .. } => "recorded",
            EventKind::Completed { .. } => "completed",
            EventKind::SendRejected { .. } => "send_rejected",
            EventKind::SendFailed { .. } => "send_failed",
            EventKind::Resolved { .. } => "resolved",
            EventKind::Released { .. } => "released",
            EventKind::Refused { .. } => "refused",
        }
    }
}

/// The request key a command names, if any.
pub fn command_key(command: &Command) -> Option<&RequestKey> {
    match command {
        Command::Claim { key, .. }
        | Command::Record { key, .. }
        | Command::Complete { key, .. }
        | Command::Resolve { key, .. }
        | Command::Release { key, .. } => Some(key),
        Command::Open { .. } | Command::Create { .. } => None,
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
        /// The version this code writes and reads.
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
                    "event schema version {found} is unknown; this build reads version {expected}"
                )
            }
            EventDecodeError::Codec(error) => write!(f, "event does not decode: {error}"),
        }
    }
}

impl std::error::Error for EventDecodeError {}

impl Event {
    /// The event's bytes for the log.
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        // Our invariant: only the current schema is ever written.
        assert_eq!(
            self.schema, SCHEMA_VERSION,
            "writing an event of another schema"
        );
        let bytes = codec::encode(self)?;
        assert_eq!(
            bytes[..2],
            SCHEMA_VERSION.to_le_bytes(),
            "the schema version leads the encoding"
        );
        Ok(bytes)
    }

    /// Decodes an event written by [`Event::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Event, EventDecodeError> {
        let Some(version) = bytes.get(..2) else {
            return Err(EventDecodeError::Truncated { len: bytes.len() });
        };
        let found = u16::from_le_bytes([version[0], version[1]]);
        if found != SCHEMA_VERSION {
            return Err(EventDecodeError::UnknownSchema {
                found,
                expected: SCHEMA_VERSION,
            });
        }
        codec::decode(bytes).map_err(EventDecodeError::Codec)
    }
}
