//! Events: what the log stores. Each is one decision, stamped with its
//! sequence number and time, encoded through the model's codec.

use std::borrow::Cow;
use std::hash::RandomState;

use payonce_model::codec::{self, CodecError, Reader};
use payonce_model::{
    Actor, ArenaRequest, ArenaText, Note, Reason, RequestKey, TextArena, TextView, WithdrawalId,
    WithdrawalRequest, WithdrawalView,
};
use serde::{Deserialize, Serialize};

use crate::command::{Command, FailureCause};
use crate::decide::{Ask, Sent};
use crate::refusal::Refusal;
use crate::state::{NameHashes, name_hash};
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

/// An [`Event`] whose text is borrowed from the bytes it was decoded
/// from, or from an [`Event`]: what replay reads, so that decoding a
/// million events allocates nothing for their keys, ids and references.
/// Field for field and variant for variant the same encoding as [`Event`];
/// what a view cannot borrow (a bumped withdrawal, a currency code in lower
/// case, a refusal) is decoded as [`Event`] instead, or held owned.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EventView<'a> {
    schema: u16,
    pub(crate) seq: u64,
    pub(crate) at: Timestamp,
    #[serde(borrow)]
    pub(crate) kind: KindView<'a>,
}

/// [`EventKind`], borrowed. Variants and fields in [`EventKind`]'s order:
/// the encoding numbers them.
#[derive(Debug, Clone, Deserialize)]
pub(crate) enum KindView<'a> {
    Opened {
        accept_foreign_ids: bool,
    },
    Created {
        #[serde(borrow)]
        withdrawal: WithdrawalView<'a>,
    },
    Claimed {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        request: WithdrawalView<'a>,
    },
    Recorded {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        request: WithdrawalView<'a>,
    },
    Completed {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        outcome: WithdrawalView<'a>,
    },
    SendRejected {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        reason: TextView<'a, Reason>,
    },
    SendFailed {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        error: TextView<'a, Reason>,
        cause: Cow<'a, FailureCause>,
    },
    Resolved {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        outcome: WithdrawalView<'a>,
        #[serde(borrow)]
        note: TextView<'a, Note>,
        #[serde(borrow)]
        by: TextView<'a, Actor>,
    },
    Released {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        note: TextView<'a, Note>,
        #[serde(borrow)]
        by: TextView<'a, Actor>,
    },
    Refused {
        command: Cow<'a, Command>,
        refusal: Cow<'a, Refusal>,
    },
}

impl Event {
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

/// An event made ready to cross to another thread: its text copied into a
/// [`TextArena`] shared by a batch of events, or, for the kinds replay
/// rarely meets and what an arena cannot hold, the whole event.
#[derive(Debug)]
pub(crate) struct PackedEvent {
    seq: u64,
    at: Timestamp,
    kind: PackedKind,
    /// The hashes of its key and withdrawal id, computed while packing.
    names: NameHashes,
}

#[derive(Debug)]
enum PackedKind {
    Opened {
        accept_foreign_ids: bool,
    },
    Created {
        withdrawal: ArenaRequest,
    },
    Claimed {
        key: ArenaText<RequestKey>,
        request: ArenaRequest,
    },
    Recorded {
        key: ArenaText<RequestKey>,
        request: ArenaRequest,
    },
    Completed {
        key: ArenaText<RequestKey>,
        outcome: ArenaRequest,
    },
    Whole(Box<Event>),
}

impl PackedEvent {
    /// Copies `view`'s text into `arena`. `None` if the arena cannot hold
    /// some of it: the caller keeps the whole event.
    #[inline]
    pub(crate) fn pack(
        view: &EventView<'_>,
        arena: &mut TextArena,
        hasher: &RandomState,
    ) -> Option<PackedEvent> {
        let hash = |name: &str| Some(name_hash(hasher, name));
        let names = match &view.kind {
            KindView::Created { withdrawal } => NameHashes {
                key: None,
                id: hash(&withdrawal.id()),
            },
            KindView::Claimed { key, request } | KindView::Recorded { key, request } => {
                NameHashes {
                    key: hash(key),
                    id: hash(&request.id()),
                }
            }
            KindView::Completed { key, .. } => NameHashes {
                key: hash(key),
                id: None,
            },
            _ => NameHashes::default(),
        };
        let kind = match &view.kind {
            KindView::Opened { accept_foreign_ids } => PackedKind::Opened {
                accept_foreign_ids: *accept_foreign_ids,
            },
            KindView::Created { withdrawal } => PackedKind::Created {
                withdrawal: arena.push_request(withdrawal)?,
            },
            KindView::Claimed { key, request } => PackedKind::Claimed {
                key: arena.push(*key),
                request: arena.push_request(request)?,
            },
            KindView::Recorded { key, request } => PackedKind::Recorded {
                key: arena.push(*key),
                request: arena.push_request(request)?,
            },
            KindView::Completed { key, outcome } => PackedKind::Completed {
                key: arena.push(*key),
                outcome: arena.push_request(outcome)?,
            },
            _ => return None,
        };
        Some(PackedEvent {
            seq: view.seq,
            at: view.at,
            kind,
            names,
        })
    }

    /// The hashes of its names, where computed.
    pub(crate) fn names(&self) -> NameHashes {
        self.names
    }

    /// Keeps `event` whole.
    pub(crate) fn whole(event: Event) -> PackedEvent {
        PackedEvent {
            seq: event.seq,
            at: event.at,
            kind: PackedKind::Whole(Box::new(event)),
            names: NameHashes::default(),
        }
    }

    /// The event, borrowed from itself and from the arena it was packed
    /// into.
    #[inline]
    pub(crate) fn view<'a>(&'a self, arena: &'a TextArena) -> EventView<'a> {
        let kind = match &self.kind {
            PackedKind::Opened { accept_foreign_ids } => KindView::Opened {
                accept_foreign_ids: *accept_foreign_ids,
            },
            PackedKind::Created { withdrawal } => KindView::Created {
                withdrawal: arena.request(withdrawal),
            },
            PackedKind::Claimed { key, request } => KindView::Claimed {
                key: arena.get(*key),
                request: arena.request(request),
            },
            PackedKind::Recorded { key, request } => KindView::Recorded {
                key: arena.get(*key),
                request: arena.request(request),
            },
            PackedKind::Completed { key, outcome } => KindView::Completed {
                key: arena.get(*key),
                outcome: arena.request(outcome),
            },
            PackedKind::Whole(event) => return event.view(),
        };
        EventView {
            schema: SCHEMA_VERSION,
            seq: self.seq,
            at: self.at,
            kind,
        }
    }
}

impl<'a> KindView<'a> {
    /// The command behind the event, borrowed: for a refusal, the refused
    /// command.
    pub(crate) fn ask(&self) -> Ask<'_> {
        match self {
            KindView::Opened { accept_foreign_ids } => Ask::Open {
                accept_foreign_ids: *accept_foreign_ids,
            },
            KindView::Created { withdrawal } => Ask::Create {
                amount: withdrawal.amount(),
                currency: withdrawal.currency(),
                destination: withdrawal.destination(),
                requested_by: withdrawal.requested_by(),
            },
            KindView::Claimed { key, request } => Ask::Claim {
                key: *key,
                request: *request,
            },
            KindView::Recorded { key, request } => Ask::Record {
                key: *key,
                request: *request,
            },
            KindView::Completed { key, outcome } => Ask::Complete {
                key: *key,
                result: Sent::Outcome(*outcome),
            },
            KindView::SendRejected { key, reason } => Ask::Complete {
                key: *key,
                result: Sent::Rejected(*reason),
            },
            KindView::SendFailed { key, error, cause } => match &**cause {
                // The send returned another withdrawal: replay re-derives the
                // refusal from the outcome it returned.
                FailureCause::OutcomeMismatch { outcome, .. } => Ask::Complete {
                    key: *key,
                    result: Sent::Outcome(outcome.view()),
                },
                cause => Ask::Complete {
                    key: *key,
                    result: Sent::Failed {
                        error: *error,
                        cause,
                    },
                },
            },
            KindView::Resolved {
                key,
                outcome,
                note,
                by,
            } => Ask::Resolve {
                key: *key,
                outcome: *outcome,
                note: *note,
                by: *by,
            },
            KindView::Released { key, note, by } => Ask::Release {
                key: *key,
                note: *note,
                by: *by,
            },
            KindView::Refused { command, .. } => command.ask(),
        }
    }

    /// The owned event.
    pub(crate) fn to_value(&self) -> EventKind {
        match self {
            KindView::Opened { accept_foreign_ids } => EventKind::Opened {
                accept_foreign_ids: *accept_foreign_ids,
            },
            KindView::Created { withdrawal } => EventKind::Created {
                withdrawal: withdrawal.to_value(),
            },
            KindView::Claimed { key, request } => EventKind::Claimed {
                key: key.to_value(),
                request: request.to_value(),
            },
            KindView::Recorded { key, request } => EventKind::Recorded {
                key: key.to_value(),
                request: request.to_value(),
            },
            KindView::Completed { key, outcome } => EventKind::Completed {
                key: key.to_value(),
                outcome: outcome.to_value(),
            },
            KindView::SendRejected { key, reason } => EventKind::SendRejected {
                key: key.to_value(),
                reason: reason.to_value(),
            },
            KindView::SendFailed { key, error, cause } => EventKind::SendFailed {
                key: key.to_value(),
                error: error.to_value(),
                cause: cause.clone().into_owned(),
            },
            KindView::Resolved {
                key,
                outcome,
                note,
                by,
            } => EventKind::Resolved {
                key: key.to_value(),
                outcome: outcome.to_value(),
                note: note.to_value(),
                by: by.to_value(),
            },
            KindView::Released { key, note, by } => EventKind::Released {
                key: key.to_value(),
                note: note.to_value(),
                by: by.to_value(),
            },
            KindView::Refused { command, refusal } => EventKind::Refused {
                command: command.clone().into_owned(),
                refusal: refusal.clone().into_owned(),
            },
        }
    }
}

impl EventKind {
    /// The command that produces this event, so replay can ask `decide` again
    /// and compare. For a refusal, the refused command.
    pub fn command(&self) -> Command {
        self.view().ask().to_command()
    }

    /// The event, borrowed.
    pub(crate) fn view(&self) -> KindView<'_> {
        match self {
            EventKind::Opened { accept_foreign_ids } => KindView::Opened {
                accept_foreign_ids: *accept_foreign_ids,
            },
            EventKind::Created { withdrawal } => KindView::Created {
                withdrawal: withdrawal.view(),
            },
            EventKind::Claimed { key, request } => KindView::Claimed {
                key: key.view(),
                request: request.view(),
            },
            EventKind::Recorded { key, request } => KindView::Recorded {
                key: key.view(),
                request: request.view(),
            },
            EventKind::Completed { key, outcome } => KindView::Completed {
                key: key.view(),
                outcome: outcome.view(),
            },
            EventKind::SendRejected { key, reason } => KindView::SendRejected {
                key: key.view(),
                reason: reason.view(),
            },
            EventKind::SendFailed { key, error, cause } => KindView::SendFailed {
                key: key.view(),
                error: error.view(),
                cause: Cow::Borrowed(cause),
            },
            EventKind::Resolved {
                key,
                outcome,
                note,
                by,
            } => KindView::Resolved {
                key: key.view(),
                outcome: outcome.view(),
                note: note.view(),
                by: by.view(),
            },
            EventKind::Released { key, note, by } => KindView::Released {
                key: key.view(),
                note: note.view(),
                by: by.view(),
            },
            EventKind::Refused { command, refusal } => KindView::Refused {
                command: Cow::Borrowed(command),
                refusal: Cow::Borrowed(refusal),
            },
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
        check_schema(bytes)?;
        codec::decode(bytes).map_err(EventDecodeError::Codec)
    }
}

impl<'a> EventView<'a> {
    /// Decodes an event written by [`Event::encode`], borrowing its text
    /// from `bytes`. Refuses what [`Event::decode`] refuses, and also what
    /// a view cannot borrow: the caller decodes those with
    /// [`Event::decode`], which says why it refuses, if it does.
    #[inline]
    pub(crate) fn decode(bytes: &'a [u8]) -> Result<EventView<'a>, EventDecodeError> {
        check_schema(bytes)?;
        if let Some(event) = EventView::read_common(bytes) {
            return Ok(event);
        }
        let event: EventView<'a> =
            codec::decode_borrowed(bytes).map_err(EventDecodeError::Codec)?;
        assert_eq!(
            event.schema, SCHEMA_VERSION,
            "the schema version leads the encoding"
        );
        Ok(event)
    }

    /// The kinds a replay meets most (opened, created, claimed, recorded,
    /// completed), read field by field in [`Event`]'s serde order without
    /// serde, which costs more than the reading. `None` for any other kind,
    /// and for bytes this reading refuses: serde then decides.
    #[inline]
    fn read_common(bytes: &'a [u8]) -> Option<EventView<'a>> {
        let mut reader = Reader::new(bytes);
        let schema = reader
            .u16()
            .ok()
            .filter(|&schema| schema == SCHEMA_VERSION)?;
        let seq = reader.u64().ok()?;
        let at = Timestamp::from_unix_nanos(reader.u64().ok()?);
        // `EventKind`'s variants, numbered in declaration order.
        let kind = match reader.u32().ok()? {
            0 => KindView::Opened {
                accept_foreign_ids: reader.bool().ok()?,
            },
            1 => KindView::Created {
                withdrawal: WithdrawalView::read(&mut reader).ok()?,
            },
            2 => KindView::Claimed {
                key: reader.text().ok()?,
                request: WithdrawalView::read(&mut reader).ok()?,
            },
            3 => KindView::Recorded {
                key: reader.text().ok()?,
                request: WithdrawalView::read(&mut reader).ok()?,
            },
            4 => KindView::Completed {
                key: reader.text().ok()?,
                outcome: WithdrawalView::read(&mut reader).ok()?,
            },
            _ => return None,
        };
        reader.finish().ok()?;
        Some(EventView {
            schema,
            seq,
            at,
            kind,
        })
    }
}

/// Refuses bytes that do not start with [`SCHEMA_VERSION`].
fn check_schema(bytes: &[u8]) -> Result<(), EventDecodeError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use payonce_model::{Amount, Currency, Destination, Reference};
    use proptest::prelude::*;

    use super::*;

    fn request(id: &str) -> WithdrawalRequest {
        WithdrawalRequest::new(
            WithdrawalId::new(id).unwrap(),
            Amount::parse("25.5").unwrap(),
            Currency::new("USDC").unwrap(),
            Destination::new("0xabc").unwrap(),
            Actor::new("alice").unwrap(),
        )
    }

    fn sent(id: &str, reference: &str) -> WithdrawalRequest {
        let reference = Reference::new(reference).unwrap();
        request(id)
            .approve()
            .unwrap()
            .start_sending()
            .unwrap()
            .mark_sent(reference)
            .unwrap()
    }

    /// One event of every kind, and a bumped outcome, which a view cannot
    /// borrow.
    fn every_kind() -> Vec<EventKind> {
        let key = || RequestKey::new("k-1").unwrap();
        let note = Note::new("checked the rail").unwrap();
        let by = Actor::new("ops").unwrap();
        let reason = Reason::new("node down").unwrap();
        let bumped = sent("w-1", "0xa")
            .bump(Reference::new("0xb").unwrap())
            .unwrap();
        let failed = request("w-1")
            .approve()
            .unwrap()
            .fail(reason.clone())
            .unwrap();
        vec![
            EventKind::Opened {
                accept_foreign_ids: true,
            },
            EventKind::Created {
                withdrawal: request("w-1"),
            },
            EventKind::Claimed {
                key: key(),
                request: request("w-1"),
            },
            EventKind::Recorded {
                key: key(),
                request: failed.clone(),
            },
            EventKind::Completed {
                key: key(),
                outcome: sent("w-1", "0xa"),
            },
            EventKind::Completed {
                key: key(),
                outcome: bumped.clone(),
            },
            EventKind::SendRejected {
                key: key(),
                reason: reason.clone(),
            },
            EventKind::SendFailed {
                key: key(),
                error: reason.clone(),
                cause: FailureCause::OutcomeMismatch {
                    outcome: Box::new(sent("w-2", "0xc")),
                    differences: request("w-1")
                        .fingerprint()
                        .differences(&request("w-2").fingerprint()),
                },
            },
            EventKind::Resolved {
                key: key(),
                outcome: failed,
                note: note.clone(),
                by: by.clone(),
            },
            EventKind::Released {
                key: key(),
                note: note.clone(),
                by: by.clone(),
            },
            EventKind::Refused {
                command: Command::Release {
                    key: key(),
                    note,
                    by,
                },
                refusal: Refusal::UnknownWithdrawal {
                    withdrawal: WithdrawalId::new("w-9").unwrap(),
                },
            },
        ]
    }

    /// Whether `kind` completes with a bumped withdrawal, which a view
    /// cannot borrow.
    fn bumped(kind: &EventKind) -> bool {
        matches!(kind, EventKind::Completed { outcome, .. } if !outcome.replaced().is_empty())
    }

    fn event(seq: u64, kind: EventKind) -> Event {
        Event {
            schema: SCHEMA_VERSION,
            seq,
            at: Timestamp::from_unix_nanos(seq * 1_000),
            kind,
        }
    }

    #[test]
    fn a_view_decodes_every_kind_it_can_borrow_to_the_event_written() {
        // Guards against the view types drifting from `Event`'s encoding, kind by kind.
        let mut borrowed = 0;
        for (index, kind) in every_kind().into_iter().enumerate() {
            let event = event(index as u64 + 1, kind);
            let bytes = event.encode().unwrap();
            // The kinds replay meets most are read without serde.
            let common = matches!(
                event.kind,
                EventKind::Opened { .. }
                    | EventKind::Created { .. }
                    | EventKind::Claimed { .. }
                    | EventKind::Recorded { .. }
                    | EventKind::Completed { .. }
            );
            let read = EventView::read_common(&bytes);
            assert_eq!(
                read.is_some(),
                common && !bumped(&event.kind),
                "{}",
                event.kind.name()
            );
            if let Some(read) = read {
                assert_eq!((read.seq, read.at), (event.seq, event.at));
                assert_eq!(read.kind.to_value(), event.kind);
            }
            match EventView::decode(&bytes) {
                Ok(view) => {
                    borrowed += 1;
                    assert_eq!((view.seq, view.at), (event.seq, event.at));
                    assert_eq!(view.kind.to_value(), event.kind);
                    assert_eq!(
                        event.view().kind.to_value(),
                        event.kind,
                        "{}",
                        event.kind.name()
                    );
                }
                Err(_) => {
                    // Only the bumped outcome is refused; `Event` reads it.
                    let EventKind::Completed { outcome, .. } = &event.kind else {
                        panic!("a view refused {:?}", event.kind)
                    };
                    assert!(!outcome.replaced().is_empty());
                    assert_eq!(Event::decode(&bytes).unwrap(), event);
                }
            }
        }
        assert_eq!(borrowed, every_kind().len() - 1);
    }

    #[test]
    fn a_packed_event_reads_back_as_the_event_written() {
        // Guards against packing losing fields or computing hashes of other names.
        let mut arena = TextArena::new();
        let hasher = RandomState::new();
        let events: Vec<Event> = every_kind()
            .into_iter()
            .enumerate()
            .map(|(index, kind)| event(index as u64 + 1, kind))
            .collect();
        // Packed one after the other into one arena, as a batch is.
        let packed: Vec<PackedEvent> = events
            .iter()
            .map(|event| {
                PackedEvent::pack(&event.view(), &mut arena, &hasher)
                    .unwrap_or_else(|| PackedEvent::whole(event.clone()))
            })
            .collect();
        let whole = packed
            .iter()
            .filter(|packed| matches!(packed.kind, PackedKind::Whole(_)))
            .count();
        // Refusals, send results, operator actions and the bumped outcome.
        assert_eq!(whole, 6);
        for (event, packed) in events.iter().zip(&packed) {
            let view = packed.view(&arena);
            assert_eq!((view.seq, view.at), (event.seq, event.at));
            assert_eq!(view.kind.to_value(), event.kind);
            // The hashes the applying thread will use instead of its own.
            let hash = |name: &str| Some(name_hash(&hasher, name));
            let (key, id) = match &event.kind {
                EventKind::Created { withdrawal } => (None, hash(withdrawal.id())),
                EventKind::Claimed { key, request } | EventKind::Recorded { key, request } => {
                    (hash(key), hash(request.id()))
                }
                EventKind::Completed { key, outcome } if outcome.replaced().is_empty() => {
                    (hash(key), None)
                }
                _ => (None, None),
            };
            assert_eq!((packed.names.key, packed.names.id), (key, id));
        }
    }

    #[test]
    fn a_view_refuses_a_key_padded_past_the_codecs_length_limit() {
        // Guards against the fast reader accepting bytes the owned decoding refuses for length.
        let event = event(
            2,
            EventKind::Claimed {
                key: RequestKey::new("k-1").unwrap(),
                request: request("w-1"),
            },
        );
        let bytes = event.encode().unwrap();
        // Schema (2), seq (8), at (8), variant (4), then the key's length and text.
        assert_eq!(&bytes[22..33], b"\x03\0\0\0\0\0\0\0k-1");
        // A key is trimmed after it is read: padded with spaces, it passes
        // its own limit and only the codec's refuses it.
        let key = format!("{}k-1", " ".repeat(codec::ENCODED_LEN_MAX));
        let mut padded = bytes[..22].to_vec();
        padded.extend_from_slice(&(key.len() as u64).to_le_bytes());
        padded.extend_from_slice(key.as_bytes());
        padded.extend_from_slice(&bytes[33..]);
        assert!(Event::decode(&padded).is_err());
        assert!(EventView::read_common(&padded).is_none());
        assert!(EventView::decode(&padded).is_err());
    }

    proptest! {
        #[test]
        fn a_view_decodes_only_what_the_owned_decoding_reads_alike(
            which in any::<prop::sample::Index>(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            // Guards against a fast path accepting corrupt bytes the owned decoding refuses.
            let kinds = every_kind();
            let event = event(7, kinds[which.index(kinds.len())].clone());
            let mut bytes = event.encode().unwrap();
            for (index, value) in flips {
                let at = index.index(bytes.len());
                bytes[at] = value;
            }
            if let Some(read) = EventView::read_common(&bytes) {
                let owned = Event::decode(&bytes);
                prop_assert!(owned.is_ok(), "the reading read what the event refuses: {:?}", owned);
                let owned = owned.unwrap();
                prop_assert_eq!((read.seq, read.at), (owned.seq, owned.at));
                prop_assert_eq!(read.kind.to_value(), owned.kind);
            }
            if let Ok(view) = EventView::decode(&bytes) {
                let owned = Event::decode(&bytes);
                prop_assert!(owned.is_ok(), "the view read what the event refuses: {:?}", owned);
                let owned = owned.unwrap();
                prop_assert_eq!((view.seq, view.at), (owned.seq, owned.at));
                prop_assert_eq!(view.kind.to_value(), owned.kind);
            }
        }
    }
}
