//! Batches: the events a replay decodes together and applies together, in
//! a form that crosses threads: up to 2,048 events (`BATCH_LEN`), fewer
//! once their records pass 1 MiB. A batch keeps its events' text in one
//! [`TextArena`] and each event packed beside it; kinds the arena does not
//! hold (refusals, send results, operator actions, a bumped
//! withdrawal) are kept whole. Replay alone reads this format.

use payonce_log::Head;
use payonce_model::handover::{ArenaRequest, ArenaText, TextArena};
use payonce_model::{RequestKey, TextView, WithdrawalView, WorkerName};

use crate::error::LedgerError;
use crate::event::common::{self, Build};
use crate::event::{Event, EventView, KindView};
use crate::time::Timestamp;

/// Records in one batch: large enough that handing a batch to another
/// thread costs little per record.
pub(crate) const BATCH_LEN: usize = 2048;

/// Bytes of records after which a batch is full even if it holds fewer
/// than [`BATCH_LEN`], so large records do not make large batches.
pub(crate) const BATCH_BYTES_MAX: usize = 1 << 20;

/// Events decoded together: their text in one arena, so a batch costs a
/// few allocations however many events and strings it holds.
pub(crate) struct Batch {
    pub(super) text: TextArena,
    pub(super) events: Vec<PackedEvent>,
    /// For a replay that follows the log's heads, the head of the last
    /// whole batch of the log read through each event; empty otherwise.
    pub(super) heads: Vec<Option<Head>>,
    /// Encoded bytes of the events.
    bytes: usize,
}

/// An event of a batch.
#[derive(Debug)]
pub(super) struct PackedEvent {
    schema: u16,
    seq: u64,
    at: Timestamp,
    kind: PackedKind,
}

#[derive(Debug)]
enum PackedKind {
    Opened {
        accept_foreign_ids: bool,
        epoch: Option<u64>,
    },
    Created {
        withdrawal: ArenaRequest,
    },
    Claimed {
        key: ArenaText<RequestKey>,
        request: ArenaRequest,
        worker: Option<ArenaText<WorkerName>>,
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

impl Batch {
    /// An empty batch with room for [`BATCH_LEN`] events of the usual size;
    /// a batch of larger ones grows.
    pub(crate) fn new() -> Self {
        Batch {
            text: TextArena::with_capacity(BATCH_LEN * 256),
            events: Vec::with_capacity(BATCH_LEN),
            heads: Vec::new(),
            bytes: 0,
        }
    }

    /// Empties the batch, keeping its memory.
    pub(crate) fn clear(&mut self) {
        self.text.clear();
        self.events.clear();
        self.heads.clear();
        self.bytes = 0;
    }

    /// Notes `head` as the head of the log read through the event pushed
    /// last, for a replay that follows the heads: the events before it
    /// that none was noted for have none.
    pub(crate) fn push_head(&mut self, head: Head) {
        assert!(
            self.heads.len() < self.events.len(),
            "a head is noted once per event, after it"
        );
        self.heads.resize(self.events.len() - 1, None);
        self.heads.push(Some(head));
    }

    /// Whether the batch should be applied before another event is added.
    pub(crate) fn is_full(&self) -> bool {
        self.events.len() >= BATCH_LEN || self.bytes >= BATCH_BYTES_MAX
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Decodes log record `seq` into the batch: borrowed and packed when it
    /// can be, else whole (which also reports why a record does not
    /// decode).
    pub(crate) fn push(&mut self, seq: u64, payload: &[u8]) -> Result<(), LedgerError> {
        // The common kinds straight into the arena, the rest through a view.
        let common = common::read(payload, &mut Packer(&mut self.text)).and_then(|event| {
            Some(PackedEvent {
                schema: event.schema,
                seq: event.seq,
                at: event.at,
                kind: event.kind?,
            })
        });
        let packed = match common {
            Some(event) => Some(event),
            None => EventView::decode(payload)
                .ok()
                .and_then(|event| pack(&event, &mut self.text)),
        };
        let event = match packed {
            Some(event) => {
                check_seq(seq, event.seq)?;
                event
            }
            None => PackedEvent::whole(decode_event(seq, payload)?),
        };
        self.events.push(event);
        self.bytes += payload.len();
        Ok(())
    }
}

/// Packs the kinds `common` reads straight into a batch's arena; `None`
/// for a request the arena does not hold (`common` reads none).
struct Packer<'t>(&'t mut TextArena);

impl<'a> Build<'a> for Packer<'_> {
    type Kind = Option<PackedKind>;
    fn opened(&mut self, accept_foreign_ids: bool, epoch: Option<u64>) -> Self::Kind {
        Some(PackedKind::Opened {
            accept_foreign_ids,
            epoch,
        })
    }
    fn created(&mut self, withdrawal: WithdrawalView<'a>) -> Self::Kind {
        Some(PackedKind::Created {
            withdrawal: self.0.push_request(&withdrawal)?,
        })
    }
    fn claimed(
        &mut self,
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
        worker: Option<TextView<'a, WorkerName>>,
    ) -> Self::Kind {
        Some(PackedKind::Claimed {
            key: self.0.push(key),
            request: self.0.push_request(&request)?,
            worker: worker.map(|worker| self.0.push(worker)),
        })
    }
    fn recorded(
        &mut self,
        key: TextView<'a, RequestKey>,
        request: WithdrawalView<'a>,
    ) -> Self::Kind {
        Some(PackedKind::Recorded {
            key: self.0.push(key),
            request: self.0.push_request(&request)?,
        })
    }
    fn completed(
        &mut self,
        key: TextView<'a, RequestKey>,
        outcome: WithdrawalView<'a>,
    ) -> Self::Kind {
        Some(PackedKind::Completed {
            key: self.0.push(key),
            outcome: self.0.push_request(&outcome)?,
        })
    }
}

/// Decodes the event stored as log record `seq`.
pub fn decode_event(seq: u64, payload: &[u8]) -> Result<Event, LedgerError> {
    let event = Event::decode(payload).map_err(|error| LedgerError::BadEvent { seq, error })?;
    check_seq(seq, event.seq)?;
    Ok(event)
}

fn check_seq(seq: u64, found: u64) -> Result<(), LedgerError> {
    if found != seq {
        return Err(LedgerError::MisplacedEvent { seq, found });
    }
    Ok(())
}

/// Copies `view`'s text into `arena`, as [`Packer`] packs what `common`
/// reads. `None` for the kinds an arena does not hold: the caller keeps
/// the whole event.
fn pack(view: &EventView<'_>, arena: &mut TextArena) -> Option<PackedEvent> {
    let packer = &mut Packer(arena);
    let kind = match view.kind {
        KindView::Opened {
            accept_foreign_ids,
            epoch,
        } => packer.opened(accept_foreign_ids, epoch),
        KindView::Created { withdrawal } => packer.created(withdrawal),
        KindView::Claimed {
            key,
            request,
            worker,
        } => packer.claimed(key, request, worker),
        KindView::Recorded { key, request } => packer.recorded(key, request),
        KindView::Completed { key, outcome } => packer.completed(key, outcome),
        _ => None,
    }?;
    Some(PackedEvent {
        schema: view.schema,
        seq: view.seq,
        at: view.at,
        kind,
    })
}

impl PackedEvent {
    fn whole(event: Event) -> PackedEvent {
        PackedEvent {
            schema: event.schema,
            seq: event.seq,
            at: event.at,
            kind: PackedKind::Whole(Box::new(event)),
        }
    }

    /// The event, borrowed from itself and from the arena it was packed
    /// into.
    pub(super) fn view<'a>(&'a self, arena: &'a TextArena) -> EventView<'a> {
        let kind = match &self.kind {
            &PackedKind::Opened {
                accept_foreign_ids,
                epoch,
            } => KindView::Opened {
                accept_foreign_ids,
                epoch,
            },
            PackedKind::Created { withdrawal } => KindView::Created {
                withdrawal: arena.request(withdrawal),
            },
            PackedKind::Claimed {
                key,
                request,
                worker,
            } => KindView::Claimed {
                key: arena.get(*key),
                request: arena.request(request),
                worker: worker.map(|worker| arena.get(worker)),
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
            schema: self.schema,
            seq: self.seq,
            at: self.at,
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tests::{SCHEMAS, every_event};
    use crate::event::{EventKind, SCHEMA_VERSION};

    #[test]
    fn a_batch_gives_back_every_event_packed_into_it() {
        // Guards against packing losing or mixing up fields.
        for schema in SCHEMAS {
            let events = every_event(schema);
            let mut batch = Batch::new();
            for event in &events {
                batch.push(event.seq, &event.encode().unwrap()).unwrap();
            }
            for (event, packed) in events.iter().zip(&batch.events) {
                // Claims and outcomes are packed, and openings of this
                // schema; refusals, send results, operator actions, moves
                // and a bumped outcome are kept whole.
                let packable = match &event.kind {
                    EventKind::Opened { .. } => schema >= 3,
                    EventKind::Completed { outcome, .. } => outcome.replaced().is_empty(),
                    EventKind::Created { .. }
                    | EventKind::Claimed { .. }
                    | EventKind::Recorded { .. } => true,
                    _ => false,
                };
                let whole = matches!(packed.kind, PackedKind::Whole(_));
                assert_eq!(whole, !packable, "{schema}: {}", event.kind.name());
                let view = packed.view(&batch.text);
                assert_eq!(
                    (view.schema, view.seq, view.at),
                    (schema, event.seq, event.at)
                );
                assert_eq!(view.kind.to_value(), event.kind);
            }
        }
    }

    #[test]
    fn a_record_whose_event_names_another_sequence_number_is_refused() {
        // Guards against replay applying an event out of its place in the log.
        let event = &every_event(SCHEMA_VERSION)[1];
        let mut batch = Batch::new();
        let error = batch
            .push(event.seq + 1, &event.encode().unwrap())
            .unwrap_err();
        assert!(
            matches!(error, LedgerError::MisplacedEvent { seq, found } if seq == event.seq + 1 && found == event.seq),
            "{error}"
        );
        assert!(batch.is_empty());
    }
}
