//! The kinds replay meets most, in the current schema, read field by field
//! with [`codec::Fields`] instead of serde: opened, created, claimed,
//! recorded and completed, which are every event but a few of a ledger's
//! log. Their layout is docs/event-format.md's, the variant numbers those
//! of [`EventKind`](super::EventKind); anything else, and any bytes serde
//! would refuse, is left to serde, which says why it refuses, if it does.
//!
//! What a reading makes of the kind is its caller's ([`Build`]): a view
//! for `EventView::decode` (`Views`, in `view.rs`), or, for replay's
//! batches, the kind packed straight into a batch (`Packer`, in
//! `replay/batch.rs`), so that no whole view is made and moved only to be
//! copied again.
//!
//! [`codec::Fields`]: payonce_model::codec::Fields

use payonce_model::codec::Fields;
use payonce_model::{RequestKey, TextView, WithdrawalView, WorkerName};

use super::SCHEMA_VERSION;
use crate::time::Timestamp;

/// The variant numbers of the kinds read here.
const OPENED: u32 = 0;
const CREATED: u32 = 1;
const CLAIMED: u32 = 2;
const RECORDED: u32 = 3;
const COMPLETED: u32 = 4;

/// What a reading makes of each kind it reads, once every field of the
/// event has been read and checked.
pub(crate) trait Build<'a> {
    /// What a kind becomes.
    type Kind;
    fn opened(&mut self, accept_foreign_ids: bool, epoch: Option<u64>) -> Self::Kind;
    fn created(&mut self, withdrawal: WithdrawalView<'a>) -> Self::Kind;
    fn claimed(
        &mut self,
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
        worker: Option<TextView<'a, WorkerName>>,
    ) -> Self::Kind;
    fn recorded(
        &mut self,
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
    ) -> Self::Kind;
    fn completed(
        &mut self,
        key: TextView<'a, RequestKey>,
        outcome: WithdrawalView<'a>,
    ) -> Self::Kind;
}

/// An event read here: its schema, sequence number and time, and what
/// [`Build`] made of its kind.
pub(crate) struct Common<K> {
    pub(crate) schema: u16,
    pub(crate) seq: u64,
    pub(crate) at: Timestamp,
    pub(crate) kind: K,
}

/// The event `bytes` encode, if it is one of the kinds read here, in the
/// current schema, and serde would read it alike; its kind made by
/// `build`, which is called only then.
pub(crate) fn read<'a, B: Build<'a>>(bytes: &'a [u8], build: &mut B) -> Option<Common<B::Kind>> {
    let mut fields = Fields::new(bytes)?;
    let schema = fields.u16()?;
    if schema != SCHEMA_VERSION {
        return None;
    }
    let seq = fields.u64()?;
    let at = Timestamp::from_unix_nanos(fields.u64()?);
    let kind = match fields.u32()? {
        OPENED => {
            let (accept_foreign_ids, epoch) = (fields.bool()?, fields.option(Fields::u64)?);
            fields.finish()?;
            build.opened(accept_foreign_ids, epoch)
        }
        CREATED => {
            let withdrawal = fields.withdrawal()?;
            fields.finish()?;
            build.created(withdrawal)
        }
        CLAIMED => {
            let (key, request) = (fields.text()?, fields.withdrawal()?);
            let worker = fields.option(Fields::text)?;
            fields.finish()?;
            build.claimed(key, request, worker)
        }
        RECORDED => {
            let (key, request) = (fields.text()?, fields.withdrawal()?);
            fields.finish()?;
            build.recorded(key, request)
        }
        COMPLETED => {
            let (key, outcome) = (fields.text()?, fields.withdrawal()?);
            fields.finish()?;
            build.completed(key, outcome)
        }
        _ => return None,
    };
    Some(Common {
        schema,
        seq,
        at,
        kind,
    })
}
