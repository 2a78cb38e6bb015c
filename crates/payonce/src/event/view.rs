//! The event with its text borrowed: what replay reads, so that decoding
//! millions of events allocates nothing for their keys, ids and
//! references. Field for field and variant for variant the same encoding
//! as [`Event`]; what a view cannot borrow (a bumped withdrawal, a
//! currency code in lower case, a schema-1 kind whose layout changed) is
//! decoded as [`Event`] instead.

use std::borrow::Cow;

use payonce_model::codec;
use payonce_model::{
    Actor, Note, Reason, RequestKey, TextView, ValidText, WithdrawalId, WithdrawalRequest,
    WithdrawalView, WorkerName,
};
use serde::Deserialize;

use super::{EventDecodeError, EventKind, KIND_OFFSET, SCHEMA_SESSIONS, common, legacy, schema_of};
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
        #[serde(borrow)]
        worker: Option<TextView<'a, WorkerName>>,
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
    Started {
        #[serde(borrow)]
        worker: TextView<'a, WorkerName>,
        epoch: u64,
    },
    SessionEnded {
        #[serde(borrow)]
        worker: TextView<'a, WorkerName>,
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
        if let Some(event) = decode_common(bytes) {
            return Ok(event);
        }
        let schema = schema_of(bytes)?;
        let variant = bytes
            .get(KIND_OFFSET..KIND_OFFSET + 4)
            .map(|variant| u32::from_le_bytes([variant[0], variant[1], variant[2], variant[3]]));
        if schema < SCHEMA_SESSIONS && variant == Some(legacy::CLAIMED) {
            return decode_legacy_claim(bytes);
        }
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

/// Makes views of the kinds `common` reads without serde.
struct Views;

impl<'a> common::Build<'a> for Views {
    type Kind = KindView<'a>;
    fn opened(&mut self, accept_foreign_ids: bool, epoch: Option<u64>) -> KindView<'a> {
        KindView::Opened {
            accept_foreign_ids,
            epoch,
        }
    }
    fn created(&mut self, withdrawal: WithdrawalView<'a>) -> KindView<'a> {
        KindView::Created { withdrawal }
    }
    fn claimed(
        &mut self,
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
        worker: Option<TextView<'a, WorkerName>>,
    ) -> KindView<'a> {
        KindView::Claimed {
            key,
            request,
            worker,
        }
    }
    fn recorded(
        &mut self,
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
    ) -> KindView<'a> {
        KindView::Recorded { key, request }
    }
    fn completed(
        &mut self,
        key: TextView<'a, RequestKey>,
        outcome: WithdrawalView<'a>,
    ) -> KindView<'a> {
        KindView::Completed { key, outcome }
    }
}

/// The event `bytes` encode, as a view, if it is one of the kinds
/// `common` reads and serde would read it alike.
pub(super) fn decode_common(bytes: &[u8]) -> Option<EventView<'_>> {
    let common::Common {
        schema,
        seq,
        at,
        kind,
    } = common::read(bytes, &mut Views)?;
    Some(EventView {
        schema,
        seq,
        at,
        kind,
    })
}

/// A claim of a schema before worker sessions, borrowed: it names no
/// worker.
fn decode_legacy_claim(bytes: &[u8]) -> Result<EventView<'_>, EventDecodeError> {
    let claimed: legacy::LegacyClaimed<TextView<'_, RequestKey>, WithdrawalView<'_>> =
        codec::decode_borrowed(bytes).map_err(EventDecodeError::Codec)?;
    Ok(EventView {
        schema: claimed.schema,
        seq: claimed.seq,
        at: claimed.at,
        kind: KindView::Claimed {
            key: claimed.key,
            request: claimed.request,
            worker: None,
        },
    })
}

/// A borrowed field's owned value: what [`KindView::to_value`] makes of
/// each field.
trait Owned {
    type Value;
    fn owned(&self) -> Self::Value;
}

/// An owned field, borrowed: what [`EventKind::view`] makes of each field.
trait Borrowed {
    type View<'a>
    where
        Self: 'a;
    fn borrowed(&self) -> Self::View<'_>;
}

/// Text fields: borrowed as a [`TextView`], owned again by validating it.
macro_rules! text_fields {
    ($($text:ty),*) => {$(
        impl Borrowed for $text {
            type View<'a> = TextView<'a, $text>;
            fn borrowed(&self) -> TextView<'_, $text> {
                self.view()
            }
        }
    )*};
}
text_fields!(RequestKey, WithdrawalId, Reason, Note, Actor, WorkerName);

impl<T: ValidText> Owned for TextView<'_, T> {
    type Value = T;
    fn owned(&self) -> T {
        self.to_value()
    }
}

impl Borrowed for WithdrawalRequest {
    type View<'a> = WithdrawalView<'a>;
    fn borrowed(&self) -> WithdrawalView<'_> {
        self.view()
    }
}

impl Owned for WithdrawalView<'_> {
    type Value = WithdrawalRequest;
    fn owned(&self) -> WithdrawalRequest {
        self.to_value()
    }
}

/// Fields a view holds as a [`Cow`], borrowed from an event or owned when
/// decoded.
macro_rules! cow_fields {
    ($($field:ty),*) => {$(
        impl Borrowed for $field {
            type View<'a> = Cow<'a, $field>;
            fn borrowed(&self) -> Cow<'_, $field> {
                Cow::Borrowed(self)
            }
        }
    )*};
}
cow_fields!(Command, Refusal, FailureCause);

impl<T: Clone> Owned for Cow<'_, T> {
    type Value = T;
    fn owned(&self) -> T {
        self.clone().into_owned()
    }
}

/// Fields a view holds as they are.
macro_rules! copied_fields {
    ($($field:ty),*) => {$(
        impl Owned for $field {
            type Value = $field;
            fn owned(&self) -> $field {
                *self
            }
        }

        impl Borrowed for $field {
            type View<'a> = $field;
            fn borrowed(&self) -> $field {
                *self
            }
        }
    )*};
}
copied_fields!(bool, u64);

impl<V: Owned> Owned for Option<V> {
    type Value = Option<V::Value>;
    fn owned(&self) -> Option<V::Value> {
        self.as_ref().map(Owned::owned)
    }
}

impl<V: Borrowed> Borrowed for Option<V> {
    type View<'a>
        = Option<V::View<'a>>
    where
        V: 'a;
    fn borrowed(&self) -> Option<V::View<'_>> {
        self.as_ref().map(Borrowed::borrowed)
    }
}

/// Calls `$then!` with every kind and its fields, in the encoding's order:
/// the one list [`KindView::to_value`] and [`EventKind::view`] convert by.
macro_rules! with_every_kind {
    ($then:ident!($($args:tt)*)) => {
        $then!($($args)*;
            Opened { accept_foreign_ids, epoch },
            Created { withdrawal },
            Claimed { key, request, worker },
            Recorded { key, request },
            Completed { key, outcome },
            SendRejected { key, withdrawal, reason },
            SendFailed { key, withdrawal, error, cause },
            Resolved { key, outcome, note, by },
            Released { key, withdrawal, note, by },
            Refused { command, refusal, held },
            Advanced { key, outcome },
            Corrected { key, old, new, note, by },
            Started { worker, epoch },
            SessionEnded { worker, note, by },
        )
    };
}

/// `$value`, a `$from`, as the same variant of `$to`, each field converted
/// by `$convert`.
macro_rules! convert_kind {
    ($value:expr, $from:ident => $to:ident, $convert:path;
     $($kind:ident { $($field:ident),* }),* $(,)?) => {
        match $value {
            $($from::$kind { $($field),* } => $to::$kind {
                $($field: $convert($field)),*
            },)*
        }
    };
}

impl KindView<'_> {
    /// A short name for the kind ([`EventKind::name`]).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            KindView::Opened { .. } => "opened",
            KindView::Created { .. } => "created",
            KindView::Claimed { .. } => "claimed",
            KindView::Recorded { .. } => "recorded",
            KindView::Completed { .. } => "completed",
            KindView::SendRejected { .. } => "send_rejected",
            KindView::SendFailed { .. } => "send_failed",
            KindView::Resolved { .. } => "resolved",
            KindView::Released { .. } => "released",
            KindView::Refused { .. } => "refused",
            KindView::Advanced { .. } => "advanced",
            KindView::Corrected { .. } => "corrected",
            KindView::Started { .. } => "started",
            KindView::SessionEnded { .. } => "session_ended",
        }
    }

    /// The owned event.
    pub(crate) fn to_value(&self) -> EventKind {
        with_every_kind!(convert_kind!(self, KindView => EventKind, Owned::owned))
    }
}

impl EventKind {
    /// The event, borrowed.
    pub(crate) fn view(&self) -> KindView<'_> {
        with_every_kind!(convert_kind!(self, EventKind => KindView, Borrowed::borrowed))
    }
}
