//! The event with its text borrowed: what replay reads, so that decoding
//! millions of events allocates nothing for their keys, ids and
//! references. Field for field and variant for variant the same encoding
//! as [`Event`]; what a view cannot borrow (a bumped withdrawal, a
//! currency code in lower case, a schema-1 kind whose layout changed) is
//! decoded as [`Event`] instead.

use std::borrow::Cow;

use payonce_model::codec;
use payonce_model::{Actor, Note, Reason, RequestKey, TextView, WithdrawalId, WithdrawalView};
use serde::Deserialize;

use super::{EventDecodeError, EventKind, KIND_OFFSET, legacy, schema_of};
use crate::command::{Command, FailureCause};
use crate::refusal::Refusal;
use crate::time::Timestamp;

/// An [`Event`] whose text is borrowed from the bytes it was decoded from,
/// or from an [`Event`].
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EventView<'a> {
    pub(crate) schema: u16,
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
        epoch: Option<u64>,
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
        withdrawal: Option<TextView<'a, WithdrawalId>>,
        #[serde(borrow)]
        reason: TextView<'a, Reason>,
    },
    SendFailed {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        withdrawal: Option<TextView<'a, WithdrawalId>>,
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
        withdrawal: Option<TextView<'a, WithdrawalId>>,
        #[serde(borrow)]
        note: TextView<'a, Note>,
        #[serde(borrow)]
        by: TextView<'a, Actor>,
    },
    Refused {
        command: Cow<'a, Command>,
        refusal: Cow<'a, Refusal>,
        #[serde(borrow)]
        held: Option<TextView<'a, WithdrawalId>>,
    },
    Advanced {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        outcome: WithdrawalView<'a>,
    },
    Corrected {
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        old: WithdrawalView<'a>,
        #[serde(borrow)]
        new: WithdrawalView<'a>,
        #[serde(borrow)]
        note: TextView<'a, Note>,
        #[serde(borrow)]
        by: TextView<'a, Actor>,
    },
}

impl<'a> EventView<'a> {
    /// Decodes an event written by [`Event::encode`], borrowing its text
    /// from `bytes`. Refuses what [`Event::decode`] refuses, and also what
    /// a view cannot borrow: the caller decodes those with
    /// [`Event::decode`], which says why it refuses, if it does.
    pub(crate) fn decode(bytes: &'a [u8]) -> Result<EventView<'a>, EventDecodeError> {
        let schema = schema_of(bytes)?;
        let variant = bytes
            .get(KIND_OFFSET..KIND_OFFSET + 4)
            .map(|variant| u32::from_le_bytes([variant[0], variant[1], variant[2], variant[3]]));
        if !variant.is_some_and(|variant| legacy::borrowable(schema, variant)) {
            return Err(EventDecodeError::Codec(codec::CodecError::Decode {
                detail: format!(
                    "a kind of schema {schema} a view does not read; read it as an event"
                ),
            }));
        }
        let event: EventView<'a> =
            codec::decode_borrowed(bytes).map_err(EventDecodeError::Codec)?;
        assert_eq!(
            event.schema, schema,
            "the schema version leads the encoding"
        );
        Ok(event)
    }
}

impl KindView<'_> {
    /// The owned event.
    pub(crate) fn to_value(&self) -> EventKind {
        match self {
            &KindView::Opened {
                accept_foreign_ids,
                epoch,
            } => EventKind::Opened {
                accept_foreign_ids,
                epoch,
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
            KindView::SendRejected {
                key,
                withdrawal,
                reason,
            } => EventKind::SendRejected {
                key: key.to_value(),
                withdrawal: id_value(withdrawal),
                reason: reason.to_value(),
            },
            KindView::SendFailed {
                key,
                withdrawal,
                error,
                cause,
            } => EventKind::SendFailed {
                key: key.to_value(),
                withdrawal: id_value(withdrawal),
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
            KindView::Released {
                key,
                withdrawal,
                note,
                by,
            } => EventKind::Released {
                key: key.to_value(),
                withdrawal: id_value(withdrawal),
                note: note.to_value(),
                by: by.to_value(),
            },
            KindView::Refused {
                command,
                refusal,
                held,
            } => EventKind::Refused {
                command: command.clone().into_owned(),
                refusal: refusal.clone().into_owned(),
                held: id_value(held),
            },
            KindView::Advanced { key, outcome } => EventKind::Advanced {
                key: key.to_value(),
                outcome: outcome.to_value(),
            },
            KindView::Corrected {
                key,
                old,
                new,
                note,
                by,
            } => EventKind::Corrected {
                key: key.to_value(),
                old: old.to_value(),
                new: new.to_value(),
                note: note.to_value(),
                by: by.to_value(),
            },
        }
    }
}

impl EventKind {
    /// The event, borrowed.
    pub(crate) fn view(&self) -> KindView<'_> {
        match self {
            &EventKind::Opened {
                accept_foreign_ids,
                epoch,
            } => KindView::Opened {
                accept_foreign_ids,
                epoch,
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
            EventKind::SendRejected {
                key,
                withdrawal,
                reason,
            } => KindView::SendRejected {
                key: key.view(),
                withdrawal: id_view(withdrawal),
                reason: reason.view(),
            },
            EventKind::SendFailed {
                key,
                withdrawal,
                error,
                cause,
            } => KindView::SendFailed {
                key: key.view(),
                withdrawal: id_view(withdrawal),
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
            EventKind::Released {
                key,
                withdrawal,
                note,
                by,
            } => KindView::Released {
                key: key.view(),
                withdrawal: id_view(withdrawal),
                note: note.view(),
                by: by.view(),
            },
            EventKind::Refused {
                command,
                refusal,
                held,
            } => KindView::Refused {
                command: Cow::Borrowed(command),
                refusal: Cow::Borrowed(refusal),
                held: id_view(held),
            },
            EventKind::Advanced { key, outcome } => KindView::Advanced {
                key: key.view(),
                outcome: outcome.view(),
            },
            EventKind::Corrected {
                key,
                old,
                new,
                note,
                by,
            } => KindView::Corrected {
                key: key.view(),
                old: old.view(),
                new: new.view(),
                note: note.view(),
                by: by.view(),
            },
        }
    }
}

/// An optional withdrawal id, borrowed.
fn id_view(id: &Option<WithdrawalId>) -> Option<TextView<'_, WithdrawalId>> {
    id.as_ref().map(WithdrawalId::view)
}

/// An optional withdrawal id, owned.
fn id_value(id: &Option<TextView<'_, WithdrawalId>>) -> Option<WithdrawalId> {
    id.map(|id| id.to_value())
}
