//! Replay: rebuilding the projections from the log, re-deriving every
//! recorded decision on the way (`rederive`), so a log the code would not
//! have written is caught rather than believed.
//!
//! Every replay decodes records into [`Batch`]es and hands each batch to
//! one function, [`apply_batch`], which re-derives and applies its events
//! in two phases per event: prefetch, then judge and apply. It takes the
//! events eight at a time and looks up all their names in the state's
//! tables together (`State::read_ahead`) before judging and applying the
//! first, so that their cache misses overlap.
//!
//! Each event goes to a [`ReplayHook`], told of the state before it, the
//! event and its divergence, then of the state after: an opening's stops
//! at a divergence, a verification's notes each, and an auditor's brings
//! its own (`walk`).
//!
//! The drivers that feed it: opening on one thread, opening on two (one
//! thread scans, checks and decodes, the other applies; chosen for a log
//! of at least `Config::replay_thread_min_len` bytes, 4 MiB by default,
//! and if the second thread cannot start, the first does it all), a shared
//! log's scan on one thread or two (`scan`), and an auditor's replay of a
//! whole log (`walk`), on two.

mod batch;
mod hook;
mod rederive;
mod scan;
mod walk;

use std::ops::ControlFlow;
use std::panic::resume_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread;

use payonce_log::{
    HeadSource, LOCK_FILE, Log, LogConfig, Opening, Storage, Witness, is_segment_tmp_name,
    parse_segment_name,
};
use payonce_runs::BlockCache;
use tracing::{Dispatch, Span, warn};

pub(crate) use self::batch::Batch;
pub use self::batch::decode_event;
pub use self::hook::{ReplayHook, Replaying, StopAtDivergence};
pub use self::rederive::rederive;
use self::rederive::rederive_prefetched;
pub use self::scan::{HeadVisit, Visit};
pub(crate) use self::scan::{replay_scan, replay_scan_here};
pub(crate) use self::walk::replay_records;
pub use self::walk::{Walked, replay_scan_with};
use crate::error::LedgerError;
use crate::recovery::Recovery;
use crate::snapshot::{Loaded, SnapshotStore, load_newest};
use crate::state::{Names, State};

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

/// Events whose names are looked up together, ahead of judging and
/// applying any of them ([`State::read_ahead`]): with millions of names the
/// tables are far larger than the caches, and the lookups of a group miss
/// them at once rather than one after another.
const READ_AHEAD_GROUP: usize = 8;

/// Re-derives and applies every event of `batch` in order, telling `hook`
/// of each: the one path every replay takes. `Break` when the hook ended
/// the replay, with the event it ended at not applied.
pub(crate) fn apply_batch<H: ReplayHook + ?Sized>(
    state: &mut State,
    batch: &Batch,
    hook: &mut H,
) -> Result<ControlFlow<()>, LedgerError> {
    let rederives = hook.rederives();
    let mut views = Vec::with_capacity(READ_AHEAD_GROUP);
    for (number, group) in batch.events.chunks(READ_AHEAD_GROUP).enumerate() {
        views.clear();
        views.extend(group.iter().map(|event| event.view(&batch.text)));
        let mut names = [Names::default(); READ_AHEAD_GROUP];
        for (names, view) in names.iter_mut().zip(&views) {
            *names = state.names(&view.kind);
        }
        // Nothing else between the reads, so that they all wait at once.
        for names in &names[..views.len()] {
            state.read_ahead(names);
        }
        for (at, (view, names)) in views.iter().zip(&names).enumerate() {
            state.fault_in_names(names).map_err(LedgerError::Archive)?;
            let found = state.prefetch(names);
            let divergence = match rederives {
                true => rederive_prefetched(state, view, &found),
                false => None,
            };
            let head = batch.heads.get(number * READ_AHEAD_GROUP + at);
            let event = Replaying {
                view,
                head: head.copied().flatten(),
            };
            if hook.before(state, &event, divergence)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
            state.apply_prefetched(view, &found);
            hook.after(state, &event);
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Whether opening starts a new ledger or continues one: creating a
/// ledger is explicit, so a directory whose log is gone is never taken for
/// a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// The directory holds a ledger: open it, or refuse.
    Existing,
    /// The directory is empty or missing: create a ledger in it, or refuse.
    New,
}

/// Most names a refusal to open lists of what the directory holds.
pub const FOUND_LISTED_MAX: usize = 16;

impl Start {
    /// Checks what the directory holds before anything is written: opening
    /// refuses one holding no segment, and creating one holding anything
    /// but what an interrupted creation leaves (the lock file, a temporary
    /// first segment), which is simply made again.
    fn check_before(self, storage: &dyn Storage) -> Result<(), LedgerError> {
        let mut names = match storage.list() {
            Ok(names) => names,
            // A missing directory holds nothing; the log creates it.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(LedgerError::Log(payonce_log::LogError::Io {
                    op: "list",
                    file: storage.describe(""),
                    source,
                }));
            }
        };
        names.sort_unstable();
        let held = names.len();
        let has_log = names.iter().any(|name| parse_segment_name(name).is_some());
        let interrupted_creation = names
            .iter()
            .all(|name| name == LOCK_FILE || is_segment_tmp_name(name));
        names.truncate(FOUND_LISTED_MAX);
        let dir = storage.describe("");
        match self {
            Start::Existing if !has_log => Err(LedgerError::NoLog { dir, found: names }),
            Start::New if !interrupted_creation => Err(LedgerError::NotEmpty {
                dir,
                found: names,
                count: held,
            }),
            _ => Ok(()),
        }
    }
}

/// What [`replay_log`] built, and how many threads built it.
pub(crate) struct Replayed {
    pub(crate) log: Log,
    pub(crate) recovery: Recovery,
    pub(crate) state: State,
    /// 2 when a second thread applied the events, else 1.
    pub(crate) threads: u8,
}

/// Opens the log in `storage` for writing and replays its events into a
/// [`State`]: what opening a ledger does. The state starts from the newest
/// snapshot in `snapshots` that the log vouches for (only the events after
/// it are read and replayed), else from nothing. On this thread alone
/// unless `two_threads` (and a thread can be started). Either way every
/// event is applied before the log repairs anything (a torn tail cut), so
/// a divergence refuses the open before a repair, and an error at an
/// earlier event is the one reported.
pub(crate) fn replay_log(
    storage: Arc<dyn Storage>,
    config: LogConfig,
    witness: Option<Arc<dyn Witness>>,
    snapshots: Option<(&dyn SnapshotStore, &Arc<BlockCache>)>,
    two_threads: bool,
    start: Start,
) -> Result<Replayed, LedgerError> {
    start.check_before(&*storage)?;
    let mut opening = Log::scan_to_open(storage, config)?;
    if let Some(witness) = witness {
        opening.witness(witness)?;
    }
    let Loaded { state, set_aside } = match snapshots {
        Some((store, cache)) => load_newest(store, &opening, cache)?,
        None => Loaded::default(),
    };
    let (initial, snapshot) = match state {
        Some((state, snapshot)) => {
            opening.require(HeadSource::Snapshot, snapshot.head)?;
            opening.start_after(snapshot.seq);
            (state, Some(snapshot))
        }
        None => (State::new(), None),
    };
    let first = initial.last_seq();
    let feed = |batch: &mut Batch, full: Full<'_>| read_records(&mut opening, batch, full);
    let (state, StopAtDivergence, threads) = match two_threads {
        true => replay_on_two_threads(initial, StopAtDivergence, feed)?,
        false => {
            let mut state = initial;
            replay_on_this_thread(&mut state, &mut StopAtDivergence, feed)?;
            (state, StopAtDivergence, 1)
        }
    };
    let (log, log_recovery) = opening.plan()?.execute()?;
    let recovery = Recovery {
        log: log_recovery,
        snapshot,
        snapshots_set_aside: set_aside,
        replayed: state.last_seq() - first,
    };
    Ok(Replayed {
        log,
        recovery,
        state,
        threads,
    })
}

/// What a feed hands each batch that fills: applied or handed over, it
/// comes back empty.
/// `Break` when the replay was ended, and nothing more is to be read.
pub(crate) type Full<'a> = &'a mut dyn FnMut(&mut Batch) -> Result<ControlFlow<()>, LedgerError>;

/// Reads every record of `opening` into `batch`, handing `full` each batch
/// that fills. Stops at the first record that does not decode, or damage.
fn read_records(
    opening: &mut Opening,
    batch: &mut Batch,
    full: Full<'_>,
) -> Result<(), LedgerError> {
    while let Some(record) = opening.next_record()? {
        batch.push(record.seq, record.payload)?;
        if batch.is_full() && full(batch)?.is_break() {
            break;
        }
    }
    Ok(())
}

/// The one-thread driver: `feed` decodes a batch, which is applied to
/// `state`, and so on. After an error `state` holds the events applied
/// before it.
pub(crate) fn replay_on_this_thread<H: ReplayHook + ?Sized>(
    state: &mut State,
    hook: &mut H,
    feed: impl FnOnce(&mut Batch, Full<'_>) -> Result<(), LedgerError>,
) -> Result<(), LedgerError> {
    let mut batch = Batch::new();
    let mut ended = false;
    let read = feed(&mut batch, &mut |batch| {
        // Emptied whatever it came to: what it applied is not applied
        // again below.
        let applied = apply_batch(state, batch, hook);
        batch.clear();
        ended = applied.as_ref().is_ok_and(|flow| flow.is_break());
        applied
    });
    // The events read before a record that stopped the scan may hold an
    // earlier error.
    if !ended {
        ended = apply_batch(state, &batch, hook)?.is_break();
    }
    // Whatever stopped the reading lies past the end the hook asked for.
    match ended {
        true => Ok(()),
        false => read,
    }
}

/// Hands batches from the scanning thread to the applying one, and takes
/// back the ones it is done with.
struct Handoff {
    batches: SyncSender<Batch>,
    /// Batches not handed over yet, until each has been once.
    spare: Vec<Batch>,
    /// Batches the applier is done with, to fill again.
    applied: Receiver<Batch>,
}

impl Handoff {
    /// Sends `batch` to the applier, and puts an empty one in its place. If
    /// the applier is gone (it panicked), does nothing: joining it says why.
    fn hand_over(&mut self, batch: &mut Batch) {
        // A batch the applier gave back first: its memory is in use and
        // likely in cache, a spare's untouched. With neither, every batch
        // is queued or in use: wait for one back.
        let next = match self.applied.try_recv() {
            Ok(applied) => Some(applied),
            Err(_) => self.spare.pop().or_else(|| self.applied.recv().ok()),
        };
        let Some(mut next) = next else {
            return;
        };
        next.clear();
        let _ = self.batches.send(std::mem::replace(batch, next));
    }
}

/// The applying side of a two-thread replay: re-derives and applies every
/// batch it receives to `state`, and gives each back. After an error it
/// only gives batches back, so the scanning side never waits on it, and
/// answers with the first error.
fn apply_received<H: ReplayHook>(
    mut state: State,
    mut hook: H,
    received: Receiver<Batch>,
    returned: SyncSender<Batch>,
    ended: &AtomicBool,
) -> Applied<H> {
    let mut failed = None;
    for batch in received {
        if failed.is_none() && !ended.load(Ordering::Relaxed) {
            match apply_batch(&mut state, &batch, &mut hook) {
                Ok(applied) => ended.store(applied.is_break(), Ordering::Relaxed),
                Err(error) => failed = Some(error),
            }
        }
        // The channel has room for every batch: this fails only once the
        // scanning side has stopped, and the batch is dropped.
        let _ = returned.try_send(batch);
    }
    (state, hook, failed)
}

/// What the applying thread returns: the state and the hook, and the
/// error that stopped it, if one did.
type Applied<H> = (State, H, Option<LedgerError>);

/// The two-thread driver. On this thread `feed` reads the log, verifies
/// it and decodes each event into a batch; a second re-derives and applies
/// the batches to `state`, in log order. An error of the applying side,
/// always at an earlier event than the scanning side's, is the one
/// reported. Returns the threads that did it: 2, or 1 if the second
/// could not start.
pub(crate) fn replay_on_two_threads<H: ReplayHook + Send>(
    state: State,
    hook: H,
    feed: impl FnOnce(&mut Batch, Full<'_>) -> Result<(), LedgerError>,
) -> Result<(State, H, u8), LedgerError> {
    let (state, hook, replayed) = replay_on_two_threads_keeping(state, hook, feed);
    replayed.map(|threads| (state, hook, threads))
}

/// The scanning side of a two-thread replay: `feed` reads into batches
/// handed over through `handoff`, until the end, an error, or the end the
/// hook asked for (`ended`, which the applier keeps: it applies nothing
/// after it).
fn read_into(
    mut handoff: Handoff,
    ended: &AtomicBool,
    feed: impl FnOnce(&mut Batch, Full<'_>) -> Result<(), LedgerError>,
) -> Result<(), LedgerError> {
    let mut batch = Batch::new();
    let read = feed(&mut batch, &mut |batch| {
        handoff.hand_over(batch);
        Ok(match ended.load(Ordering::Relaxed) {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        })
    });
    // What was read before a record that stopped the scan is applied too:
    // it may hold an earlier error.
    if !batch.is_empty() {
        handoff.hand_over(&mut batch);
    }
    read
}

/// [`replay_on_two_threads`], answering the state and the hook whatever
/// the outcome: after an error the state holds every event applied before
/// it. The hook's end stops the reading soon after.
pub(crate) fn replay_on_two_threads_keeping<H: ReplayHook + Send>(
    state: State,
    hook: H,
    feed: impl FnOnce(&mut Batch, Full<'_>) -> Result<(), LedgerError>,
) -> (State, H, Result<u8, LedgerError>) {
    let span = Span::current();
    let dispatch = tracing::dispatcher::get_default(Dispatch::clone);
    // Taken by the applier, or back by this thread if it cannot start.
    let start = Mutex::new(Some((state, hook)));
    let ended = AtomicBool::new(false);
    thread::scope(|scope| {
        let (batches, received) = sync_channel::<Batch>(BATCHES_AHEAD_MAX);
        // Room for every batch alive at once, so applied batches are
        // returned to be filled again.
        let (returned, applied) = sync_channel::<Batch>(BATCHES);
        let (handed, ended) = (&start, &ended);
        let apply_all = move || {
            // Events logged while applying reach the caller's subscriber.
            let _dispatch = tracing::dispatcher::set_default(&dispatch);
            let _entered = span.enter();
            let Some((state, hook)) = handed.lock().ok().and_then(|mut s| s.take()) else {
                unreachable!("the applier starts once, with the state")
            };
            apply_received(state, hook, received, returned, ended)
        };
        let applier = match thread::Builder::new()
            .name("payonce-replay".to_owned())
            .spawn_scoped(scope, apply_all)
        {
            Ok(applier) => applier,
            Err(error) => {
                // Nothing is read yet: one thread does it all.
                warn!(%error, "could not start a thread to replay the log; replaying on one");
                let Some((mut state, mut hook)) = start.lock().ok().and_then(|mut s| s.take())
                else {
                    unreachable!("a thread that did not start took nothing")
                };
                let replayed = replay_on_this_thread(&mut state, &mut hook, feed);
                return (state, hook, replayed.map(|()| 1));
            }
        };
        let handoff = Handoff {
            batches,
            spare: (1..BATCHES).map(|_| Batch::new()).collect(),
            applied,
        };
        let read = read_into(handoff, ended, feed);
        let (state, hook, failed) = match applier.join() {
            Ok(applied) => applied,
            Err(panic) => resume_unwind(panic),
        };
        let replayed = match failed {
            Some(error) => Err(error),
            // Whatever stopped the reading lies past the end the hook
            // asked for.
            None if ended.load(Ordering::Relaxed) => Ok(2),
            None => read.map(|()| 2),
        };
        (state, hook, replayed)
    })
}
