//! A ledger several processes share, through a [`SharedLog`] (a database;
//! `payonce-postgres` is one): the same `decide` and `apply`, with appends
//! serialised by the store's ledger-wide lock and committed in batches.
//!
//! A batch is one transaction. A thread's decision is queued (the `queue`
//! module); the first thread to find no batch running runs one: the store
//! takes its lock and hands over the events other workers appended since,
//! which are re-derived and applied. Then that thread makes every decision
//! queued, its own and those that came while it waited, each on the state
//! the one before it left, and commits once none is left, and every
//! thread's answer is given only once the batch is committed. A claim is
//! therefore committed before its send runs, and a batch that fails gives
//! nobody an answer from it: its claims are not granted, and the state,
//! which applied them, is rebuilt from the store before anything more is
//! decided (`catch_up_from`, on two threads). A claim of a failed batch
//! that was committed all the same (its commit's answer was lost) is then
//! recorded as a send that never ran: no ticket was handed out for it.
//!
//! Between its own batches a worker's reads are as of its last batch;
//! `Ledger::refresh` catches them up on what other workers committed.

use std::fmt;
use std::sync::{Arc, Condvar, MutexGuard};

use payonce_log::Head;
use payonce_model::{Reason, RequestKey, WithdrawalId, WorkerName};
use payonce_runs::{BlockCache, Prefetched};
use tracing::{Span, warn};

use super::queue::{Queue, Slot, Turn, take};
use super::step::Sink;
use super::{Executed, Ledger};
use crate::command::FailureCause;
use crate::decide::{Answer, Proposal, proposal};
use crate::error::{LedgerError, StoreError};
use crate::event::{Event, command_names};
use crate::recovery::Recovery;
use crate::replay::{Batch, StopAtDivergence, Visit, apply_batch, replay_scan, replay_scan_here};
use crate::snapshot::{Loaded, SnapshotStore, load_newest_of};
use crate::state::{ClaimChange, State};

/// Events a batch takes before it commits without waiting for more.
pub const BATCH_EVENTS_MAX: usize = 256;

/// One event of a shared log: its sequence number and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRecord {
    /// Its sequence number.
    pub seq: u64,
    /// The encoded event.
    pub payload: Vec<u8>,
}

/// One event of a batch, as a shared log writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Its sequence number: the one after the event before it.
    pub seq: u64,
    /// The encoded event.
    pub payload: Vec<u8>,
    /// What it does to the claims, for the store's own constraint rows.
    pub claim: Option<ClaimChange>,
    /// The request keys it touches ([`crate::EventKind::keys_touched`]), for the
    /// store's index of the events about each key.
    pub keys: Vec<RequestKey>,
    /// The withdrawal it is about ([`crate::EventKind::withdrawal`]: an event of
    /// this build's schema names it), for the store's index of the events
    /// about each withdrawal.
    pub withdrawal: Option<WithdrawalId>,
}

/// Where a ledger several processes share keeps its events: one totally
/// ordered, gapless log, appended to under a ledger-wide lock in
/// transactions. Every method may block on the store.
pub trait SharedLog: Send + Sync + fmt::Debug {
    /// Hands `visit` every event after `after`, in order, from one read
    /// of the log (the events committed when it began), without taking the
    /// lock, until the last or until `visit` breaks: what a worker replays
    /// before it starts, after a batch failed, and when it catches up
    /// between batches. `after` is 0, the last event this process read or
    /// committed, or the end of a batch the log holds (a state loaded from
    /// elsewhere continues there). The store checks what it hands over as
    /// it reads it (a database, each batch's chain digest); `visit` sees
    /// every event before that check of its batch, so a failed check is
    /// an error after the events it covers were visited, and whoever
    /// applied them throws the result away.
    fn scan(&self, after: u64, visit: Visit<'_>) -> Result<(), StoreError>;

    /// Begins a batch: takes the ledger-wide lock for one transaction, then
    /// returns every event after `after` (the last one this process
    /// knows), in order. Every `begin` that returns `Ok` is followed by a
    /// [`SharedLog::commit`], which ends the transaction.
    fn begin(&self, after: u64) -> Result<Vec<SharedRecord>, StoreError>;

    /// Writes `batch` (which follows the last event `begin` returned; it
    /// may be empty) with its constraint rows, and commits. `Ok` only once
    /// the commit is durable. A commit whose outcome is unknown (the
    /// connection lost during it) is looked up before answering; if that
    /// fails too, the answer is [`StoreError::Unknown`].
    fn commit(&self, batch: &[Appended]) -> Result<(), StoreError>;

    /// The head of the last batch this process read or committed: durable,
    /// as every committed batch is.
    fn head(&self) -> Result<Head, StoreError>;

    /// Whether the store can be written now (a database: a host that
    /// accepts writes answers), for a health check; `Ok` (the default)
    /// for a store that cannot tell. Never waits long: a store that is
    /// busy writing answers `Ok`, and its writes say the rest.
    fn reachable(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The log's identity, which a snapshot of the projections names; `None`
    /// (the default) for a log that vouches for no snapshot, whose ledger
    /// then replays every event at every opening.
    fn log_id(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    /// The head of the batch that ends at `seq`, read from the log itself:
    /// what a snapshot naming that head is checked against. `None` if no
    /// batch ends there (the default: a log that vouches for no snapshot).
    fn head_at(&self, seq: u64) -> Result<Option<Head>, StoreError> {
        let _ = seq;
        Ok(None)
    }
}

/// The shared log of a ledger, and who writes it.
pub(super) struct Shared {
    pub(super) log: Arc<dyn SharedLog>,
    /// The worker this process is; `None` for the process that creates
    /// the ledger.
    pub(super) worker: Option<WorkerName>,
    /// Signalled when a batch has been committed or has failed.
    turn: Condvar,
    /// The decisions waiting for a batch.
    queue: Queue<Decide>,
}

/// The state of a shared ledger, and its batches.
#[derive(Default)]
pub(super) struct Round {
    pub(super) state: State,
    /// The batch being decided into.
    open: Option<OpenBatch>,
    /// Whether a batch is being committed: the next opens after it.
    committing: bool,
    /// Whether `state` may hold events the log does not (a failed batch):
    /// it is rebuilt before the next decision.
    stale: bool,
    /// The epoch of this worker's session, once its start is committed.
    pub(super) session: Option<u64>,
    /// Claims of failed batches, which may have been committed all the
    /// same: once the state is rebuilt, those that were are recorded as
    /// sends that never ran.
    unsent: Vec<(RequestKey, u64)>,
}

struct OpenBatch {
    events: Vec<Appended>,
}

impl Sink for OpenBatch {
    fn write(&mut self, state: &State, event: &Event) -> Result<(), LedgerError> {
        self.events.push(Appended {
            seq: event.seq,
            payload: event.encode()?,
            claim: state.claim_change(&event.kind),
            keys: event.kind.keys_touched().into_iter().cloned().collect(),
            withdrawal: event.kind.withdrawal().cloned(),
        });
        Ok(())
    }
}

/// A thread's decision, made into the batch by the thread running it.
type Decide = Box<dyn FnOnce(&Ledger, &mut Round) -> Reply + Send>;

/// What a decision hands its thread once its batch's commit is known.
type Reply = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

impl Round {
    /// A round starting from `state`, with no batch open.
    pub(super) fn new(state: State) -> Self {
        Round {
            state,
            ..Round::default()
        }
    }
}

impl Shared {
    pub(super) fn new(log: Arc<dyn SharedLog>, worker: Option<WorkerName>) -> Self {
        Shared {
            log,
            worker,
            turn: Condvar::new(),
            queue: Queue::default(),
        }
    }

    fn wait<'a>(&self, round: MutexGuard<'a, Round>) -> Result<MutexGuard<'a, Round>, LedgerError> {
        self.turn.wait(round).map_err(|_| LedgerError::Poisoned)
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("log", &self.log)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

/// Replays the whole shared log into a fresh state, re-deriving every
/// decision, without taking its lock.
pub(super) fn rebuild(log: &dyn SharedLog) -> Result<State, LedgerError> {
    catch_up_from(log, State::new())
}

/// Rebuilds a shared log's state from the newest snapshot in `snapshots`
/// the log vouches for (its identity and the head it names read from the
/// log itself), and the events after it; from every event without one.
/// What it did is the [`Recovery`] it returns.
pub(super) fn rebuild_from_snapshot(
    log: &dyn SharedLog,
    snapshots: Option<(&dyn SnapshotStore, &Arc<BlockCache>)>,
) -> Result<(State, Recovery), LedgerError> {
    let loaded = match snapshots {
        Some((store, cache)) => {
            let log_id = || Ok(log.log_id()?);
            let head_at = |seq| Ok(log.head_at(seq)?);
            load_newest_of(store, &log_id, &head_at, cache)?
        }
        None => Loaded::default(),
    };
    let (initial, snapshot) = match loaded.state {
        Some((state, snapshot)) => (state, Some(snapshot)),
        None => (State::new(), None),
    };
    let first = initial.last_seq();
    let state = catch_up_from(log, initial)?;
    let recovery = Recovery {
        log: payonce_log::Recovery::default(),
        replayed: state.last_seq() - first,
        snapshot,
        snapshots_set_aside: loaded.set_aside,
    };
    Ok((state, recovery))
}

/// Replays every event of `log` after `state`'s last into `state`,
/// re-deriving each, without taking the log's lock: one scan, read and
/// decoded on this thread while another thread applies (a whole log, or
/// the tail after a state loaded from elsewhere, is long).
pub(super) fn catch_up_from(log: &dyn SharedLog, state: State) -> Result<State, LedgerError> {
    let after = state.last_seq();
    let (state, StopAtDivergence) =
        replay_scan(state, StopAtDivergence, |visit| log.scan(after, visit))?;
    Ok(state)
}

/// Re-derives and applies `records`, the events after `state`.
fn catch_up(state: &mut State, records: &[SharedRecord]) -> Result<(), LedgerError> {
    let mut batch = Batch::new();
    let first = state.last_seq() + 1;
    for (offset, record) in records.iter().enumerate() {
        let expected = first + offset as u64;
        if record.seq != expected {
            return Err(StoreError::Damaged {
                seq: expected,
                detail: format!("event {} follows where {expected} belongs", record.seq),
            }
            .into());
        }
        batch.push(record.seq, &record.payload)?;
        if batch.is_full() {
            // Refusing ends a replay only with an error.
            let _ = apply_batch(state, &batch, &mut StopAtDivergence)?;
            batch.clear();
        }
    }
    apply_batch(state, &batch, &mut StopAtDivergence).map(drop)
}

impl Ledger {
    pub(super) fn shared(&self) -> Option<&Shared> {
        match &self.inner.store {
            super::Store::Shared(shared) => Some(shared),
            super::Store::File(_) => None,
        }
    }

    /// The worker this process is, on a shared ledger.
    pub fn worker(&self) -> Option<&WorkerName> {
        self.shared().and_then(|shared| shared.worker.as_ref())
    }

    /// A copy of the state for a snapshot, once no batch is being decided
    /// or committed: every event it holds is committed, and the last ends
    /// a batch of the log. A state a failed batch left is caught up first.
    pub(super) fn settled_copy(&self) -> Result<State, LedgerError> {
        self.refresh()?;
        let Some(shared) = self.shared() else {
            return Ok(self.lock_state()?.state.copy_for_snapshot());
        };
        let mut round = self.lock_state()?;
        while round.open.is_some() || round.committing || round.stale {
            if round.stale {
                drop(round);
                self.refresh()?;
                round = self.lock_state()?;
                continue;
            }
            round = shared.wait(round)?;
        }
        Ok(round.state.copy_for_snapshot())
    }

    /// The state rebuilt from the store once a batch failed and may have
    /// left part of itself applied: from the newest snapshot the log
    /// vouches for, and the events after it, as an opening does; then the
    /// runs it holds are the ones prefetches read.
    fn rebuilt(&self, shared: &Shared) -> Result<State, LedgerError> {
        let store = self.inner.config.snapshot_store.as_deref();
        let settle = &self.inner.settle;
        let (state, _) =
            rebuild_from_snapshot(&*shared.log, store.map(|store| (store, &settle.cache)))?;
        settle.publish(&state);
        Ok(state)
    }

    /// Catches this worker's projection up on the events other workers
    /// committed since its last batch, so that what it reads
    /// ([`Ledger::outcome`], [`Ledger::claimed_by`], [`Ledger::state`] and
    /// the rest) includes them; a worker's reads are otherwise as of its
    /// last batch. Every event read is re-derived before it is applied. It
    /// waits for a batch of this worker being decided or committed. On a
    /// file ledger, whose one writer is this process, it does nothing.
    pub fn refresh(&self) -> Result<(), LedgerError> {
        let Some(shared) = self.shared() else {
            return Ok(());
        };
        let mut round = self.lock_state()?;
        while round.open.is_some() || round.committing {
            round = shared.wait(round)?;
        }
        if round.stale {
            round.state = self.rebuilt(shared)?;
            round.stale = false;
            return Ok(());
        }
        // On this thread: what other workers committed since this one's
        // last batch is short, and a thread to apply it would cost more
        // than it saves.
        let after = round.state.last_seq();
        let scanned = replay_scan_here(&mut round.state, &mut StopAtDivergence, |visit| {
            shared.log.scan(after, visit)
        });
        if scanned.is_err() {
            // The state may hold part of what was read: rebuilt before
            // the next decision.
            round.stale = true;
        }
        scanned
    }

    /// Decides with `decide` in a batch of the shared log, and answers once
    /// the batch is committed: [`Ledger::execute_then`] for a shared
    /// ledger. The decision is queued, and made by whichever thread runs
    /// the batch that takes it: this one, if no other runs a batch.
    pub(super) fn execute_shared<M, N>(
        &self,
        shared: &Shared,
        proposal: Proposal<M, N>,
    ) -> Result<Executed<M, N>, LedgerError>
    where
        M: Send + 'static,
        N: Send + 'static,
    {
        let slot: Slot<Executed<M, N>> = Slot::default();
        // Read before the batch: under it, nothing is read but what the
        // runs' changes since make stale.
        let [key, id] = command_names(proposal.command());
        let prefetched = self.inner.settle.prefetch(key, id).ok();
        let decision = decision(proposal, prefetched, Arc::clone(&slot));
        let id = shared.queue.push(decision);
        loop {
            let running = match shared.queue.wait(&slot)? {
                Turn::Answered(answer) => return answer,
                Turn::Run(running) => running,
            };
            if let Err(error) = self.run_batch(shared) {
                // Taken back while no other thread can run a batch, which
                // would make the decision after this thread answered.
                shared.queue.withdraw(id);
                drop(running);
                return take(&slot)?.unwrap_or(Err(error));
            }
        }
    }

    /// Runs one batch: opens it, makes the decisions queued, in the order
    /// they came, until none is left or it is full, commits it, and hands
    /// each decision's thread its answer.
    fn run_batch(&self, shared: &Shared) -> Result<(), LedgerError> {
        let mut round = self.lock_state()?;
        self.open_batch(shared, &mut round)?;
        let mut replies = Vec::new();
        while !round.open.as_ref().is_some_and(is_full) {
            let Some(decide) = shared.queue.next() else {
                break;
            };
            replies.push(decide(self, &mut round));
        }
        let committed = self.commit_batch(shared, round)?;
        for reply in replies {
            reply(committed.clone());
        }
        Ok(())
    }

    /// Begins a batch: rebuilds the state if a batch failed, catches it up
    /// under the store's lock, and checks this worker's session still
    /// stands.
    fn open_batch(&self, shared: &Shared, round: &mut Round) -> Result<(), LedgerError> {
        if round.stale {
            round.state = self.rebuilt(shared)?;
            round.stale = false;
        }
        let records = shared.log.begin(round.state.last_seq())?;
        round.open = Some(OpenBatch { events: Vec::new() });
        let checked = catch_up(&mut round.state, &records).and_then(|()| self.check_session(round));
        if let Err(error) = checked {
            // The transaction holds the lock: end it, writing nothing.
            round.open = None;
            round.stale = true;
            if let Err(ended) = shared.log.commit(&[]) {
                warn!(%ended, "could not end a batch that stopped");
            }
            return Err(error);
        }
        self.record_unsent(round);
        Ok(())
    }

    /// Refuses to decide once this worker's session is over: an operator
    /// ended it, or another process started under its name.
    fn check_session(&self, round: &Round) -> Result<(), LedgerError> {
        let (Some(worker), Some(epoch)) = (self.worker(), round.session) else {
            return Ok(());
        };
        match round.state.session(worker) == Some(epoch) {
            true => Ok(()),
            false => Err(LedgerError::SessionOver {
                worker: worker.clone(),
            }),
        }
    }

    /// Records, for each claim of a failed batch that was committed all
    /// the same, that its send never ran: no ticket was handed out for it.
    fn record_unsent(&self, round: &mut Round) {
        for (key, seq) in std::mem::take(&mut round.unsent) {
            let unsent = round.state.record(&key).is_some_and(|record| {
                record.claimed_seq() == seq
                    && record.send_running()
                    && record.send_worker().as_ref() == self.worker()
            });
            if !unsent {
                continue;
            }
            let error = Reason::lossy(
                "the claim's commit was lost on the way back; it was not granted and no send ran",
            );
            let unsent = proposal::complete_failed(key.clone(), error, FailureCause::Abandoned);
            let Round { state, open, .. } = &mut *round;
            let Some(open) = open.as_mut() else {
                unreachable!("a batch is open while its unsent claims are recorded")
            };
            if let Ok(Answer::Append { event, .. }) = unsent.decide(state, self.worker())
                && let Err(failure) = self.append(state, open, event)
            {
                warn!(key = %key, %failure, "could not record that a claim's send never ran");
            }
        }
    }

    /// [`Ledger::execute_then`]'s decision, into the open batch.
    fn decide_into<M, N>(
        &self,
        round: &mut Round,
        proposal: &Proposal<M, N>,
        prefetched: Option<&Prefetched>,
    ) -> Result<Executed<M, N>, LedgerError> {
        // Nothing is judged before what the command names is read back.
        let names = command_names(proposal.command());
        let Round { state, open, .. } = round;
        (self.inner.settle).fault_in(state, names, prefetched)?;
        let Some(open) = open.as_mut() else {
            unreachable!("decisions are made into an open batch")
        };
        self.step(state, open, proposal)
    }

    /// Commits the open batch, with `round` let go meanwhile, and says
    /// whether it was committed.
    fn commit_batch(
        &self,
        shared: &Shared,
        mut round: MutexGuard<'_, Round>,
    ) -> Result<Result<(), StoreError>, LedgerError> {
        let Some(open) = round.open.take() else {
            unreachable!("the batch run commits the batch it opened")
        };
        round.committing = true;
        drop(round);
        let committed = shared.log.commit(&open.events);
        let mut round = self.lock_state()?;
        round.committing = false;
        if committed.is_ok()
            && let Some(snapshots) = &self.inner.snapshots
        {
            snapshots.appended(round.state.last_seq());
        }
        let flush = self.inner.settle.keep_under(&mut round.state);
        if let Err(error) = &committed {
            warn!(%error, events = open.events.len(), "a batch was not committed");
            round.stale = true;
            round
                .unsent
                .extend(open.events.iter().filter_map(|appended| {
                    match (&appended.claim, self.worker()) {
                        (Some(ClaimChange::Claims { key, .. }), Some(_)) => {
                            Some((key.clone(), appended.seq))
                        }
                        _ => None,
                    }
                }));
        }
        drop(round);
        shared.turn.notify_all();
        if flush {
            self.flush_wanted();
        }
        Ok(committed)
    }
}

/// Whether `open` takes no more events before it commits.
fn is_full(open: &OpenBatch) -> bool {
    open.events.len() >= BATCH_EVENTS_MAX
}

/// `command`'s decision with `decide`, for the queue: it hands its answer
/// over in `slot` once its batch's commit is known, and is made within
/// the span of the thread that asked for it, whichever thread makes it.
fn decision<M, N>(
    proposal: Proposal<M, N>,
    prefetched: Option<Prefetched>,
    slot: Slot<Executed<M, N>>,
) -> Decide
where
    M: Send + 'static,
    N: Send + 'static,
{
    let span = Span::current();
    Box::new(move |ledger: &Ledger, round: &mut Round| -> Reply {
        let decided = span.in_scope(|| ledger.decide_into(round, &proposal, prefetched.as_ref()));
        Box::new(move |committed: Result<(), StoreError>| {
            let answer = committed.map_err(LedgerError::from).and(decided);
            if let Ok(mut slot) = slot.lock() {
                *slot = Some(answer);
            }
        })
    })
}
