//! The kinds replay meets most, in the current schema, read field by field
//! with [`codec::Fields`] instead of serde: opened, created, claimed,
//! recorded and completed, which are every event but a few of a ledger's
//! log. Their layout is docs/event-format.md's, the variant numbers those
//! of [`EventKind`](super::EventKind); anything else, and any bytes serde
//! would refuse, is left to [`EventView::decode`]'s serde path, which says
//! why it refuses, if it does.

use payonce_model::codec::Fields;

use super::{EventView, KindView, SCHEMA_VERSION};
use crate::time::Timestamp;

/// The variant numbers of the kinds read here.
const OPENED: u32 = 0;
const CREATED: u32 = 1;
const CLAIMED: u32 = 2;
const RECORDED: u32 = 3;
const COMPLETED: u32 = 4;

/// The event `bytes` encode, if it is one of the kinds read here, in the
/// current schema, and serde would read it alike.
pub(super) fn decode(bytes: &[u8]) -> Option<EventView<'_>> {
    let mut fields = Fields::new(bytes)?;
    let schema = fields.u16()?;
    if schema != SCHEMA_VERSION {
        return None;
    }
    let seq = fields.u64()?;
    let at = Timestamp::from_unix_nanos(fields.u64()?);
    let kind = match fields.u32()? {
        OPENED => KindView::Opened {
            accept_foreign_ids: fields.bool()?,
            epoch: fields.option(Fields::u64)?,
        },
        CREATED => KindView::Created {
            withdrawal: fields.withdrawal()?,
        },
        CLAIMED => KindView::Claimed {
            key: fields.text()?,
            request: fields.withdrawal()?,
            worker: fields.option(Fields::text)?,
        },
        RECORDED => KindView::Recorded {
            key: fields.text()?,
            request: fields.withdrawal()?,
        },
        COMPLETED => KindView::Completed {
            key: fields.text()?,
            outcome: fields.withdrawal()?,
        },
        _ => return None,
    };
    fields.finish()?;
    Some(EventView {
        schema,
        seq,
        at,
        kind,
    })
}
