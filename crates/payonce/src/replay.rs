//! Replay: rebuilding the projections from the log, re-deriving every
//! recorded decision on the way, so a log the code would not have written is
//! caught rather than believed.

use std::cell::RefCell;
use std::hash::RandomState;
use std::panic::resume_unwind;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{self, ScopedJoinHandle};

use payonce_log::{Log, LogConfig, OpenError, Recovery, Storage};
use payonce_model::TextArena;
use tracing::{Dispatch, Span, warn};

use crate::decide::{decide, decides_again};
use crate::error::{Divergence, LedgerError};
use crate::event::{Event, EventView, PackedEvent};
use crate::state::{NameHashes, State, apply_view};

/// Records handed from the scanning thread to the applying one at a time:
/// large enough that the hand-over costs little per record.
pub(crate) const REPLAY_BATCH_LEN: usize = 2048;

/// Bytes of records after which a batch is handed over even if it holds
/// fewer than [`REPLAY_BATCH_LEN`], so large records do not make large
/// batches.
pub(crate) const REPLAY_BATCH_BYTES_MAX: usize = 1 << 20;

/// Batches read ahead of the applying thread. The scanning thread reads a
/// whole segment (64 MiB) before it decodes the first record in it, about
/// 25 ms in which it hands nothing over: 32 batches of events like the
/// benchmark's keep the applying thread busy that long (with 8, 10M events
/// took 3.5 s, with 32 3.2 s). With the two limits above, bounds the memory
/// of records decoded and not yet applied to about 40 MiB for any log,
/// about 17 MiB for the benchmark's.
pub(crate) const REPLAY_BATCHES_AHEAD_MAX: usize = 32;

/// Events whose names the applying thread looks up in its tables ahead of
/// applying them (see [`State::read_ahead`]), a group at a time, one group
/// ahead: the table misses of a group overlap, and are served while the
/// group before it is applied. At 10M events, 10% faster than reading
/// ahead for no event, and as fast as reading 2 events ahead one at a time.
/// Reading each packed event's hashes also loads the event, which the
/// scanning thread wrote on the other core, before it is applied.
const READ_AHEAD_GROUP: usize = 8;

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

/// Asks `decide` again, from `state`, for the command behind `event`.
/// `None` when it agrees with what was recorded.
pub fn rederive(state: &State, event: &Event) -> Option<Divergence> {
    rederive_view(state, &event.view(), NameHashes::default())
}

/// [`rederive`], for an event read without copying its text.
fn rederive_view(state: &State, event: &EventView<'_>, names: NameHashes) -> Option<Divergence> {
    if decides_again(state, &event.kind, names) {
        return None;
    }
    let recomputed = decide(state, &event.kind.ask().to_command());
    Some(Divergence {
        seq: event.seq,
        recorded: event.kind.to_value(),
        recomputed,
    })
}

/// Decodes log record `seq`, re-derives the decision it records from
/// `state` (a divergence is an error) and applies it: replay, one record.
/// The event's text is borrowed from `payload`, unless the event holds
/// what a view cannot borrow; then it is decoded whole, which also
/// reports why a record does not decode.
pub(crate) fn replay_record(
    state: &mut State,
    seq: u64,
    payload: &[u8],
) -> Result<(), LedgerError> {
    match EventView::decode(payload) {
        Ok(event) => {
            check_seq(seq, event.seq)?;
            replay_event(state, &event, NameHashes::default())
        }
        Err(_) => replay_event(
            state,
            &decode_event(seq, payload)?.view(),
            NameHashes::default(),
        ),
    }
}

/// Batches alive during a two-thread replay: those queued, the one being
/// applied and the one being filled. All are made before the replay starts
/// and reused: made later, while the state's tables grow and free their old
/// allocations, the allocator served them from its heap, and kept their
/// memory resident after the replay (up to 11 MiB at 1M withdrawals).
const REPLAY_BATCHES: usize = REPLAY_BATCHES_AHEAD_MAX + 2;

/// Events decoded by the scanning thread for the applying one: their text
/// in one arena, so a batch costs a few allocations however many events
/// and strings it holds.
struct Batch {
    text: TextArena,
    events: Vec<PackedEvent>,
    /// Encoded bytes of the events.
    bytes: usize,
}

impl Batch {
    /// A batch with room for [`REPLAY_BATCH_LEN`] events of the usual
    /// size; a batch of larger ones grows.
    fn new() -> Self {
        Batch {
            text: TextArena::with_capacity(REPLAY_BATCH_LEN * 256),
            events: Vec::with_capacity(REPLAY_BATCH_LEN),
            bytes: 0,
        }
    }

    fn clear(&mut self) {
        self.text.clear();
        self.events.clear();
        self.bytes = 0;
    }
}

/// Decodes log record `seq` for the applying thread: borrowed and packed
/// into `text` when it can be, else whole.
#[inline]
fn pack_record(
    seq: u64,
    payload: &[u8],
    text: &mut TextArena,
    hasher: &RandomState,
) -> Result<PackedEvent, LedgerError> {
    if let Ok(event) = EventView::decode(payload) {
        check_seq(seq, event.seq)?;
        if let Some(packed) = PackedEvent::pack(&event, text, hasher) {
            return Ok(packed);
        }
    }
    Ok(PackedEvent::whole(decode_event(seq, payload)?))
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

/// The scanning side: reads, checks and decodes records, hands them over
/// in batches, and in the end waits for the applying side's answer.
struct Reader<'scope> {
    batch: Batch,
    /// The applying state's hasher.
    hasher: RandomState,
    batches: Option<SyncSender<Batch>>,
    /// Batches not handed over yet, until each has been once.
    spare: Vec<Batch>,
    /// Batches the applier is done with, to fill again.
    applied: Receiver<Batch>,
    applier: Option<ScopedJoinHandle<'scope, Applied>>,
    answer: Option<Applied>,
}

impl Reader<'_> {
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
        let event =
            pack_record(seq, payload, &mut self.batch.text, &self.hasher).map_err(Stop::Ledger)?;
        self.batch.events.push(event);
        self.batch.bytes += payload.len();
        if self.batch.events.len() == REPLAY_BATCH_LEN || self.batch.bytes >= REPLAY_BATCH_BYTES_MAX
        {
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
fn replay_event(
    state: &mut State,
    event: &EventView<'_>,
    names: NameHashes,
) -> Result<(), LedgerError> {
    if let Some(divergence) = rederive_view(state, event, names) {
        return Err(LedgerError::Divergence(Box::new(divergence)));
    }
    apply_view(state, event, names);
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
        replay_record(&mut state, record.seq, record.payload)
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
/// With `two_threads`, two threads share the work. This one reads the log,
/// verifies its checksums and decodes each event, copying its text into a
/// batch's arena; a second re-derives each decision (a divergence is an
/// error) and applies the events, in log order.
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
        // Both threads hash names alike: this one hashes each event's key
        // and id as it decodes them, so the applying thread need not.
        let hasher = RandomState::new();
        let applier_hasher = hasher.clone();
        let (batches, received) = sync_channel::<Batch>(REPLAY_BATCHES_AHEAD_MAX);
        // Room for every batch alive at once (those queued, the one being
        // applied, the one being filled), so applied batches are returned to
        // be filled again.
        let (returned, applied) = sync_channel::<Batch>(REPLAY_BATCHES);
        let apply_all = move || {
            // Events logged while applying reach the caller's subscriber.
            let _dispatch = tracing::dispatcher::set_default(&dispatch);
            let _entered = span.enter();
            let mut state = State::with_hasher(applier_hasher);
            for batch in received {
                for (index, event) in batch.events.iter().enumerate() {
                    if index % READ_AHEAD_GROUP == 0 {
                        // A batch's first group is read ahead as it starts.
                        let (from, len) = match index {
                            0 => (0, 2 * READ_AHEAD_GROUP),
                            _ => (index + READ_AHEAD_GROUP, READ_AHEAD_GROUP),
                        };
                        for ahead in batch.events.iter().skip(from).take(len) {
                            state.read_ahead(ahead.names());
                        }
                    }
                    replay_event(&mut state, &event.view(&batch.text), event.names())?;
                }
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
        let reader = RefCell::new(Reader {
            batch: Batch::new(),
            spare: (1..REPLAY_BATCHES).map(|_| Batch::new()).collect(),
            hasher,
            batches: Some(batches),
            applied,
            applier: Some(applier),
            answer: None,
        });
        let opened = Log::open_visiting_then(
            storage,
            config,
            |record| reader.borrow_mut().visit(record.seq, record.payload),
            || reader.borrow_mut().finish(),
        );
        let mut reader = reader.into_inner();
        // Done already unless the scan stopped early.
        let _ = reader.finish();
        let Some(answer) = reader.answer.take() else {
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
