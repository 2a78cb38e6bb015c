//! Replay: rebuilding the projections from the log, re-deriving every
//! recorded decision on the way, so a log the code would not have written is
//! caught rather than believed.

use std::cell::RefCell;
use std::panic::resume_unwind;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{self, ScopedJoinHandle};

use payonce_log::{Log, LogConfig, OpenError, Recovery, Storage};
use tracing::{Dispatch, Span, warn};

use crate::decide::{decide, decides_again};
use crate::error::{Divergence, LedgerError};
use crate::event::Event;
use crate::state::{State, apply};

/// Decoded events handed from the scanning thread to the applying one at a
/// time: large enough that the hand-over costs little per event.
pub(crate) const REPLAY_BATCH_LEN: usize = 1024;

/// Encoded bytes after which a batch is handed over even if it holds fewer
/// than [`REPLAY_BATCH_LEN`] events, so large events do not make large
/// batches.
pub(crate) const REPLAY_BATCH_BYTES_MAX: usize = 1 << 20;

/// Batches decoded ahead of the applying thread. With the two limits above,
/// bounds the memory of decoded events alive at once (those not yet
/// applied, and as many applied ones waiting to be freed) to about a dozen
/// MiB of encoded events for any log.
pub(crate) const REPLAY_BATCHES_AHEAD_MAX: usize = 4;

/// Decodes the event stored as log record `seq`.
pub fn decode_event(seq: u64, payload: &[u8]) -> Result<Event, LedgerError> {
    let event = Event::decode(payload).map_err(|error| LedgerError::BadEvent { seq, error })?;
    if event.seq != seq {
        return Err(LedgerError::MisplacedEvent {
            seq,
            found: event.seq,
        });
    }
    Ok(event)
}

/// Asks `decide` again, from `state`, for the command behind `event`.
/// `None` when it agrees with what was recorded.
pub fn rederive(state: &State, event: &Event) -> Option<Divergence> {
    if decides_again(state, &event.kind) {
        return None;
    }
    let recomputed = decide(state, &event.kind.command());
    Some(Divergence {
        seq: event.seq,
        recorded: event.kind.clone(),
        recomputed,
    })
}

/// Why the scanning side of a replay stopped.
enum Stop {
    /// The applying thread stopped first; its answer is the one to report.
    Applier,
    /// Decoding a record failed.
    Ledger(LedgerError),
}

/// What the applying thread returns.
type Applied = Result<State, LedgerError>;

/// The scanning side: decodes records, hands them over in batches, and in
/// the end waits for the applying side's answer.
struct Decoder<'scope> {
    batch: Vec<Event>,
    /// Encoded bytes of the events in `batch`.
    batch_bytes: usize,
    batches: Option<SyncSender<Vec<Event>>>,
    /// Batches the applier is done with, dropped here: the allocator
    /// frees memory fastest on the thread that allocated it, and the
    /// emptied vectors are reused.
    applied: Receiver<Vec<Event>>,
    applier: Option<ScopedJoinHandle<'scope, Applied>>,
    answer: Option<Applied>,
}

impl Decoder<'_> {
    fn hand_over(&mut self) -> Result<(), Stop> {
        let mut next = None;
        while let Ok(mut applied) = self.applied.try_recv() {
            applied.clear();
            next = Some(applied);
        }
        let next = next.unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, next);
        self.batch_bytes = 0;
        match &self.batches {
            Some(batches) => batches.send(batch).map_err(|_| Stop::Applier),
            None => Err(Stop::Applier),
        }
    }

    fn visit(&mut self, seq: u64, payload: &[u8]) -> Result<(), Stop> {
        self.batch
            .push(decode_event(seq, payload).map_err(Stop::Ledger)?);
        self.batch_bytes += payload.len();
        if self.batch.len() == REPLAY_BATCH_LEN || self.batch_bytes >= REPLAY_BATCH_BYTES_MAX {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Hands over what was decoded, says there is no more, and waits for
    /// the applier to apply it all: when the scan has visited every record,
    /// and when it stopped early (what was visited before the fault may
    /// hold an earlier one). `Err` if the applier refused.
    fn finish(&mut self) -> Result<(), Stop> {
        if let Some(applier) = self.applier.take() {
            // A refused hand-over means the applier stopped: its answer
            // says why.
            let _ = self.hand_over();
            self.batches = None;
            self.answer = Some(match applier.join() {
                Ok(answer) => answer,
                Err(panic) => resume_unwind(panic),
            });
        }
        match &self.answer {
            Some(Ok(_)) => Ok(()),
            _ => Err(Stop::Applier),
        }
    }
}

/// Re-derives the decision `event` records from `state` (a divergence is
/// an error) and applies it.
fn replay_event(state: &mut State, event: &Event) -> Result<(), LedgerError> {
    if let Some(divergence) = rederive(state, event) {
        return Err(LedgerError::Divergence(Box::new(divergence)));
    }
    apply(state, event);
    Ok(())
}

/// What [`replay_log`] built, and how many threads built it.
pub(crate) struct Replayed {
    pub(crate) log: Log,
    pub(crate) recovery: Recovery,
    pub(crate) state: State,
    /// 2 when a second thread applied the events, else 1.
    pub(crate) threads: u8,
}

/// Replays on this thread alone: decodes, re-derives and applies each
/// record as the scan reaches it.
fn replay_on_this_thread(
    storage: Arc<dyn Storage>,
    config: LogConfig,
) -> Result<Replayed, LedgerError> {
    let mut state = State::new();
    let (log, recovery) = Log::open_visiting(storage, config, |record| {
        replay_event(&mut state, &decode_event(record.seq, record.payload)?)
    })
    .map_err(|error| match error {
        OpenError::Log(error) => LedgerError::Log(error),
        OpenError::Visit(error) => error,
    })?;
    Ok(Replayed {
        log,
        recovery,
        state,
        threads: 1,
    })
}

/// Opens the log in `storage` for writing and replays every event into a
/// fresh [`State`]: what opening a ledger does. On this thread alone unless
/// `two_threads` (and a thread can be started).
///
/// With `two_threads`, two threads share the work. This one reads and
/// verifies the log and decodes each event; a second re-derives each
/// decision (a divergence is an error) and applies the events, in log order.
/// Every event is applied before the log repairs any segment (a torn tail
/// cut), so a divergence refuses the open before a repair, as it would on
/// one thread; and an error of the applying side, always at an earlier
/// event than the scanning side's, is the one reported.
pub(crate) fn replay_log(
    storage: Arc<dyn Storage>,
    config: LogConfig,
    two_threads: bool,
) -> Result<Replayed, LedgerError> {
    if !two_threads {
        return replay_on_this_thread(storage, config);
    }
    let span = Span::current();
    let dispatch = tracing::dispatcher::get_default(Dispatch::clone);
    thread::scope(|scope| {
        let (batches, received) = sync_channel::<Vec<Event>>(REPLAY_BATCHES_AHEAD_MAX);
        // Room for every batch alive at once (those queued, the one being
        // applied, the one being filled), so applied batches are returned to
        // be freed on the scanning thread.
        let (returned, applied) = sync_channel::<Vec<Event>>(REPLAY_BATCHES_AHEAD_MAX + 2);
        let apply_all = move || {
            // Events logged while applying reach the caller's subscriber.
            let _dispatch = tracing::dispatcher::set_default(&dispatch);
            let _entered = span.enter();
            let mut state = State::new();
            for batch in received {
                for event in &batch {
                    replay_event(&mut state, event)?;
                }
                // Should the return channel be full, this thread frees the
                // batch itself.
                let _ = returned.try_send(batch);
            }
            Ok(state)
        };
        let applier = match thread::Builder::new()
            .name("payonce-replay".to_owned())
            .spawn_scoped(scope, apply_all)
        {
            Ok(applier) => applier,
            Err(error) => {
                // Nothing is read or changed yet: one thread does it all.
                warn!(%error, "could not start a thread to replay the log; replaying on one");
                return replay_on_this_thread(storage, config);
            }
        };
        let decoder = RefCell::new(Decoder {
            batch: Vec::new(),
            batch_bytes: 0,
            batches: Some(batches),
            applied,
            applier: Some(applier),
            answer: None,
        });
        let opened = Log::open_visiting_then(
            storage,
            config,
            |record| decoder.borrow_mut().visit(record.seq, record.payload),
            || decoder.borrow_mut().finish(),
        );
        let mut decoder = decoder.into_inner();
        // Done already unless the scan stopped early.
        let _ = decoder.finish();
        let Some(answer) = decoder.answer.take() else {
            unreachable!("finishing waits for the applier's answer")
        };
        match (opened, answer) {
            (Ok((log, recovery)), Ok(state)) => Ok(Replayed {
                log,
                recovery,
                state,
                threads: 2,
            }),
            (_, Err(error)) => Err(error),
            (Err(OpenError::Log(error)), Ok(_)) => Err(LedgerError::Log(error)),
            (Err(OpenError::Visit(Stop::Ledger(error))), Ok(_)) => Err(error),
            (Err(OpenError::Visit(Stop::Applier)), Ok(_)) => {
                unreachable!("the applier stops early only with an error")
            }
        }
    })
}
