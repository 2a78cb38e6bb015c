//! Replay: rebuilding the projections from the log, re-deriving every
//! recorded decision on the way (`rederive`), so a log the code would not
//! have written is caught rather than believed.
//!
//! Every replay decodes records into [`Batch`]es and hands each batch to
//! one function, [`apply_batch`], which re-derives and applies its events
//! in two phases per event (prefetch, then judge and apply), reading the
//! table memory of the events a group ahead. Three drivers feed it:
//! opening on one thread, opening on two (one thread scans and decodes,
//! the other applies), and `verify`, which notes divergences instead of
//! stopping at the first.

mod batch;
mod rederive;

use std::panic::resume_unwind;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{self, ScopedJoinHandle};

use payonce_log::{Log, LogConfig, OpenError, Recovery, Storage};
use tracing::{Dispatch, Span, warn};

pub(crate) use self::batch::Batch;
pub use self::batch::decode_event;
pub use self::rederive::rederive;
use self::rederive::rederive_prefetched;
use crate::error::{Divergence, LedgerError};
use crate::state::{NameHasher, Names, State};

/// Batches read ahead of the applying thread. The scanning thread reads a
/// whole segment (64 MiB) before it decodes the first record in it, about
/// 25 ms in which it hands nothing over: 32 batches of events like the
/// benchmark's keep the applying thread busy that long. With the limits
/// of [`Batch`], bounds the memory of records decoded and not yet applied
/// to about 40 MiB for any log.
const BATCHES_AHEAD_MAX: usize = 32;

/// Batches alive during a two-thread replay: those queued, the one being
/// applied and the one being filled. All are made before the replay starts
/// and reused: made later, while the state's tables grow and free their old
/// allocations, the allocator served them from its heap, and kept their
/// memory resident after the replay.
const BATCHES: usize = BATCHES_AHEAD_MAX + 2;

/// Events whose names are read ahead (see [`State::read_ahead`]) a group
/// at a time, one group ahead: the table misses of a group overlap, and
/// are served while the group before it is applied.
const READ_AHEAD_GROUP: usize = 8;

/// What a replay does with a recorded decision the code would not make
/// again.
pub(crate) trait OnDivergence {
    /// `Err` stops the replay; `Ok` applies the event as recorded.
    fn diverged(&mut self, divergence: Divergence) -> Result<(), LedgerError>;
}

/// Opening: a divergence refuses the open.
pub(crate) struct Refuse;

impl OnDivergence for Refuse {
    fn diverged(&mut self, divergence: Divergence) -> Result<(), LedgerError> {
        Err(LedgerError::Divergence(Box::new(divergence)))
    }
}

/// Verifying: every divergence is noted, and the log replayed as written.
impl OnDivergence for Vec<Divergence> {
    fn diverged(&mut self, divergence: Divergence) -> Result<(), LedgerError> {
        self.push(divergence);
        Ok(())
    }
}

/// Re-derives and applies every event of `batch` in order: the one path
/// every replay takes.
pub(crate) fn apply_batch(
    state: &mut State,
    batch: &Batch,
    on_divergence: &mut impl OnDivergence,
) -> Result<(), LedgerError> {
    let events = &batch.events;
    for (index, event) in events.iter().enumerate() {
        if index % READ_AHEAD_GROUP == 0 {
            // A batch's first group is read ahead as it starts.
            let (from, len) = match index {
                0 => (0, 2 * READ_AHEAD_GROUP),
                _ => (index + READ_AHEAD_GROUP, READ_AHEAD_GROUP),
            };
            for ahead in events.iter().skip(from).take(len) {
                state.read_ahead(ahead.hashes());
            }
        }
        let view = event.view(&batch.text);
        let found = state.prefetch(&Names::hashed(&view.kind, event.hashes()));
        if let Some(divergence) = rederive_prefetched(state, &view, &found) {
            on_divergence.diverged(divergence)?;
        }
        state.apply_prefetched(&view, &found);
    }
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

fn log_error(error: OpenError<LedgerError>) -> LedgerError {
    match error {
        OpenError::Log(error) => LedgerError::Log(error),
        OpenError::Visit(error) => error,
    }
}

/// Opens the log in `storage` for writing and replays every event into a
/// fresh [`State`]: what opening a ledger does. On this thread alone unless
/// `two_threads` (and a thread can be started). Either way every event is
/// applied before the log repairs anything (a torn tail cut), so a
/// divergence refuses the open before a repair.
pub(crate) fn replay_log(
    storage: Arc<dyn Storage>,
    config: LogConfig,
    two_threads: bool,
) -> Result<Replayed, LedgerError> {
    if two_threads {
        return replay_on_two_threads(storage, config);
    }
    replay_on_this_thread(storage, config)
}

/// The one-thread driver: decodes a batch, applies it, and so on.
fn replay_on_this_thread(
    storage: Arc<dyn Storage>,
    config: LogConfig,
) -> Result<Replayed, LedgerError> {
    let mut state = State::new();
    let hasher = state.hasher().clone();
    let batch = std::cell::RefCell::new(Batch::new());
    let apply = |state: &mut State, batch: &mut Batch| {
        apply_batch(state, batch, &mut Refuse)?;
        batch.clear();
        Ok(())
    };
    let state_cell = std::cell::RefCell::new(&mut state);
    let (log, recovery) = Log::open_visiting_then(
        storage,
        config,
        |record| {
            let mut batch = batch.borrow_mut();
            if let Err(error) = batch.push(record.seq, record.payload, &hasher) {
                // The events before the bad record may hold an earlier error.
                apply(&mut state_cell.borrow_mut(), &mut batch)?;
                return Err(error);
            }
            if batch.is_full() {
                apply(&mut state_cell.borrow_mut(), &mut batch)?;
            }
            Ok(())
        },
        || apply(&mut state_cell.borrow_mut(), &mut batch.borrow_mut()),
    )
    .map_err(log_error)?;
    Ok(Replayed {
        log,
        recovery,
        state,
        threads: 1,
    })
}

/// Why the scanning side of a two-thread replay stopped.
enum Stop {
    /// The applying thread stopped first; its answer is the one to report.
    Applier,
    /// Decoding a record failed.
    Ledger(LedgerError),
}

/// What the applying thread returns.
type Applied = Result<State, LedgerError>;

/// The scanning side of a two-thread replay: decodes records into
/// batches, hands them over, and in the end waits for the applying side's
/// answer.
struct Scanner<'scope> {
    batch: Batch,
    /// The applying state's hasher.
    hasher: NameHasher,
    batches: Option<SyncSender<Batch>>,
    /// Batches not handed over yet, until each has been once.
    spare: Vec<Batch>,
    /// Batches the applier is done with, to fill again.
    applied: Receiver<Batch>,
    applier: Option<ScopedJoinHandle<'scope, Applied>>,
    answer: Option<Applied>,
}

impl Scanner<'_> {
    fn hand_over(&mut self) -> Result<(), Stop> {
        // A batch the applier gave back first: its memory is in use and
        // likely in cache, a spare's untouched. With neither, every batch
        // is queued or in use: wait for one back.
        let next = match self.applied.try_recv() {
            Ok(applied) => Some(applied),
            Err(_) => self.spare.pop().or_else(|| self.applied.recv().ok()),
        };
        let Some(mut next) = next else {
            return Err(Stop::Applier);
        };
        next.clear();
        let batch = std::mem::replace(&mut self.batch, next);
        match &self.batches {
            Some(batches) => batches.send(batch).map_err(|_| Stop::Applier),
            None => Err(Stop::Applier),
        }
    }

    fn visit(&mut self, seq: u64, payload: &[u8]) -> Result<(), Stop> {
        self.batch
            .push(seq, payload, &self.hasher)
            .map_err(Stop::Ledger)?;
        if self.batch.is_full() {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Hands over what was read, says there is no more, and waits for
    /// the applier to apply it all: when the scan has visited every record,
    /// and when it stopped early (what was visited before the fault may
    /// hold an earlier one). `Err` if the applier refused.
    fn finish(&mut self) -> Result<(), Stop> {
        if let Some(applier) = self.applier.take() {
            // A refused hand-over means the applier stopped: its answer
            // says why.
            if !self.batch.is_empty() {
                let _ = self.hand_over();
            }
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

/// The two-thread driver. This thread reads the log, verifies its
/// checksums and decodes each event into a batch; a second re-derives and
/// applies the batches, in log order. An error of the applying side,
/// always at an earlier event than the scanning side's, is the one
/// reported.
fn replay_on_two_threads(
    storage: Arc<dyn Storage>,
    config: LogConfig,
) -> Result<Replayed, LedgerError> {
    let span = Span::current();
    let dispatch = tracing::dispatcher::get_default(Dispatch::clone);
    thread::scope(|scope| {
        let state = State::new();
        let hasher = state.hasher().clone();
        let (batches, received) = sync_channel::<Batch>(BATCHES_AHEAD_MAX);
        // Room for every batch alive at once, so applied batches are
        // returned to be filled again.
        let (returned, applied) = sync_channel::<Batch>(BATCHES);
        let apply_all = move || {
            // Events logged while applying reach the caller's subscriber.
            let _dispatch = tracing::dispatcher::set_default(&dispatch);
            let _entered = span.enter();
            let mut state = state;
            for batch in received {
                apply_batch(&mut state, &batch, &mut Refuse)?;
                // The channel has room for every batch: this fails only once
                // the scanning side has stopped, and the batch is dropped.
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
        let scanner = std::cell::RefCell::new(Scanner {
            batch: Batch::new(),
            spare: (1..BATCHES).map(|_| Batch::new()).collect(),
            hasher,
            batches: Some(batches),
            applied,
            applier: Some(applier),
            answer: None,
        });
        let opened = Log::open_visiting_then(
            storage,
            config,
            |record| scanner.borrow_mut().visit(record.seq, record.payload),
            || scanner.borrow_mut().finish(),
        );
        let mut scanner = scanner.into_inner();
        // Done already unless the scan stopped early.
        let _ = scanner.finish();
        let answer = scanner.answer.take();
        match (opened, answer) {
            (Ok((log, recovery)), Some(Ok(state))) => Ok(Replayed {
                log,
                recovery,
                state,
                threads: 2,
            }),
            (_, Some(Err(error))) => Err(error),
            (Err(OpenError::Log(error)), _) => Err(LedgerError::Log(error)),
            (Err(OpenError::Visit(Stop::Ledger(error))), _) => Err(error),
            (Err(OpenError::Visit(Stop::Applier)), _) | (Ok(_), None) => Err(LedgerError::Poisoned),
        }
    })
}
