//! Replaying what a shared log hands over in one scan (`SharedLog::scan`,
//! a read view of `payonce-postgres`): the scan runs on this thread and
//! decodes each event into a batch as it arrives, and the batches are
//! re-derived and applied on another, as a file log's two-thread open
//! does, so reading the database and applying overlap.
//!
//! On two threads: a shared ledger's open, its rebuild after a failed
//! batch (`catch_up_from` in `ledger/shared.rs`) and the auditors'
//! `verify_scan`. On one (`replay_scan_here`): `Ledger::refresh`, whose
//! catching up on other workers' events is short.

use std::ops::ControlFlow;

use payonce_log::Head;

use super::{Batch, Full, ReplayHook, replay_on_this_thread, replay_on_two_threads};
use crate::error::{LedgerError, StoreError};
use crate::state::State;

/// What a scan hands each event to, in order: its sequence number and its
/// bytes. `Break` asks the scan to stop.
pub type Visit<'a> = &'a mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>;

/// What a scan hands each event to, in order: its sequence number, its
/// bytes, and the head of the last whole batch of the log read through
/// it. `Break` asks the scan to stop.
pub type HeadVisit<'a> = &'a mut dyn FnMut(u64, &[u8], Option<Head>) -> ControlFlow<()>;

/// Replays into `state` every event `scan` hands over, which must follow
/// `state`'s last without a gap, re-deriving each, on two threads (or one
/// if a second cannot be started). An event that does not decode, or does
/// not follow, stops the scan, and is the error reported, before any error
/// of the scan's after it.
pub(crate) fn replay_scan<H: ReplayHook + Send>(
    state: State,
    hook: H,
    scan: impl FnOnce(Visit<'_>) -> Result<(), StoreError>,
) -> Result<(State, H), LedgerError> {
    let after = state.last_seq();
    let scan = |visit: HeadVisit<'_>| scan(&mut |seq, payload| visit(seq, payload, None));
    replay_on_two_threads(state, hook, feed(after, scan)).map(|(state, hook, _)| (state, hook))
}

/// [`replay_scan`] on this thread alone, into `state` in place: after an
/// error it holds the events applied before it.
pub(crate) fn replay_scan_here<H: ReplayHook + ?Sized>(
    state: &mut State,
    hook: &mut H,
    scan: impl FnOnce(Visit<'_>) -> Result<(), StoreError>,
) -> Result<(), LedgerError> {
    let after = state.last_seq();
    let scan = |visit: HeadVisit<'_>| scan(&mut |seq, payload| visit(seq, payload, None));
    replay_on_this_thread(state, hook, feed(after, scan))
}

/// The feed of a replay: decodes each event `scan` hands over, the first
/// after `after`, into the batch, with the head read through it if the
/// scan follows the heads, and hands over each batch that fills.
pub(super) fn feed(
    after: u64,
    scan: impl FnOnce(HeadVisit<'_>) -> Result<(), StoreError>,
) -> impl FnOnce(&mut Batch, Full<'_>) -> Result<(), LedgerError> {
    move |batch: &mut Batch, full: Full<'_>| {
        let mut expected = after + 1;
        let mut stopped = None;
        let scanned = scan(&mut |seq, payload, head| {
            let pushed = match seq == expected {
                true => batch.push(seq, payload).and_then(|()| {
                    if let Some(head) = head {
                        batch.push_head(head);
                    }
                    match batch.is_full() {
                        true => full(batch),
                        false => Ok(ControlFlow::Continue(())),
                    }
                }),
                false => Err(LedgerError::Store(StoreError::Damaged {
                    seq: expected,
                    detail: format!("event {seq} follows where {expected} belongs"),
                })),
            };
            expected += 1;
            match pushed {
                Ok(flow) => flow,
                Err(error) => {
                    stopped = Some(error);
                    ControlFlow::Break(())
                }
            }
        });
        match stopped {
            Some(error) => Err(error),
            None => scanned.map_err(LedgerError::Store),
        }
    }
}
