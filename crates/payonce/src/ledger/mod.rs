//! The thin shell around `decide` and `apply`: one mutex orders decisions
//! and appends, durability waits and sends happen outside it.

mod config;
mod merge;
mod prefetch;
mod queue;
pub(crate) mod settle;
mod settler;
mod shared;
mod snapshots;
mod step;
mod ticket;

use std::any::Any;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use payonce_log::{FsStorage, Head, Log, Storage, segments_len};
use payonce_model::{
    Actor, Currency, Fingerprint, Note, Reason, RequestKey, WithdrawalId, WithdrawalRequest,
    WorkerName,
};
use payonce_runs::BlockCache;
use rust_decimal::Decimal;
use tracing::{info, info_span, warn};

pub use self::config::{
    Config, MEMORY_BUDGET, MEMORY_BUDGET_MIN, NewWithdrawal, REPLAY_THREAD_MIN_LEN,
};
pub use self::settle::MemoryUse;
pub use self::shared::{Appended, BATCH_EVENTS_MAX, SharedLog, SharedRecord};
use self::shared::{Round, Shared};
use self::snapshots::Snapshots;
pub use self::snapshots::{SnapshotStats, SnapshotTaken};
use self::step::LogSink;
pub use self::ticket::{Claim, Ticket};
use crate::command::{FailureCause, SendResult};
use crate::decide::{Proposal, Returned, proposal};
use crate::error::{LedgerError, SendFailure, StoreError, SubmitError};
use crate::event::command_names;
use crate::recovery::Recovery;
use crate::refusal::Refusal;
use crate::replay::{Replayed, Start, replay_log};
use crate::snapshot::DirSnapshots;
use crate::state::{Hold, InFlight, State};

/// The submission ledger. Cheap to clone; every clone is the same ledger.
///
/// After a storage error the log refuses every later write until the
/// ledger is reopened. Queries still answer from memory, which may then
/// hold a decision that never reached the disk (the claim whose sync
/// failed, say): reopen before trusting them.
pub struct Ledger {
    inner: Arc<Inner>,
    /// Whether a caller holds it (counted in `Inner::handles`), rather
    /// than one of the ledger's own threads for the length of its work.
    held: bool,
}

impl Clone for Ledger {
    fn clone(&self) -> Ledger {
        if self.held {
            self.inner.handles.fetch_add(1, Ordering::Relaxed);
        }
        Ledger {
            inner: Arc::clone(&self.inner),
            held: self.held,
        }
    }
}

impl Drop for Ledger {
    /// The last handle a caller held is gone: the ledger's threads finish
    /// what they are doing and stop, so that their handles go too and the
    /// ledger closes now, on this thread (its log's lock let go before
    /// this returns), rather than whenever a thread's work ends.
    fn drop(&mut self) {
        if self.held && self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.settle.settler.stop();
            if let Some(snapshots) = &self.inner.snapshots {
                snapshots.stop();
            }
        }
    }
}

impl Ledger {
    /// A handle for one of the ledger's own threads, for the length of its
    /// work: it does not keep the ledger open once callers let go.
    fn internal(inner: Arc<Inner>) -> Ledger {
        Ledger { inner, held: false }
    }
}

struct Inner {
    store: Store,
    /// What opening found and repaired.
    recovery: Recovery,
    /// Ordering decisions and appends under one lock makes log order
    /// decision order.
    state: Mutex<Round>,
    config: Config,
    /// Where and when snapshots of the state are taken; `None` for a
    /// ledger that keeps none.
    snapshots: Option<Arc<Snapshots>>,
    /// Keeping the state under its memory budget: its runs and cache.
    settle: settle::Settle,
    /// The handles callers hold ([`Ledger::held`]).
    handles: AtomicUsize,
}

impl Drop for Inner {
    /// The last handle is gone: a clean close, which takes a snapshot if
    /// the policy says so, and stops the snapshot thread.
    fn drop(&mut self) {
        self.settle.settler.stop();
        let Some(snapshots) = self.snapshots.take() else {
            return;
        };
        let state = self.state.get_mut().ok().map(|round| &round.state);
        // A file log that failed a write refuses to sync: nothing is
        // snapshotted from a state it may not hold.
        let healthy = match &self.store {
            Store::File(log) => log.check().is_ok(),
            Store::Shared(_) => true,
        };
        snapshots.close(&self.store, state.filter(|_| healthy));
    }
}

/// Where the ledger keeps its events. One per ledger, made once: the
/// size of the file log beside a shared one costs nothing.
#[allow(clippy::large_enum_variant)]
enum Store {
    /// A log in a directory, which this process alone writes.
    File(Log),
    /// A log several processes share (a database).
    Shared(Shared),
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Whether executing a decision waits until it is on stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Return once everything the decision saw is on stable storage: every
    /// decision a caller acts on.
    Durable,
    /// Return once it is appended; the next sync, by anyone, makes it
    /// durable. For what no one acts on and no outcome depends on: a
    /// dropped ticket's note that its send was abandoned.
    Appended,
}

/// What executing a decision did: appended its event as `seq`, or wrote
/// nothing.
enum Executed<M, N> {
    Appended { seq: u64, meaning: M },
    Nothing(N),
}

impl Ledger {
    /// Opens the ledger in `dir` with the durable defaults. See
    /// [`Ledger::open_on`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Ledger, LedgerError> {
        Ledger::open_with(dir, Config::default())
    }

    /// Opens the ledger in `dir`. See [`Ledger::open_on`].
    pub fn open_with(dir: impl AsRef<Path>, config: Config) -> Result<Ledger, LedgerError> {
        let config = with_dir_snapshots(config, dir.as_ref());
        Ledger::open_on(Arc::new(FsStorage::new(dir.as_ref())), config)
    }

    /// Opens the ledger on any storage the log supports, including the
    /// fault-injecting in-memory one.
    ///
    /// Replays every event, re-deriving every recorded decision; a decision
    /// the code would not make again is a [`LedgerError::Divergence`]. A
    /// directory holding no log is refused ([`LedgerError::NoLog`], naming
    /// what it holds) with nothing written: a ledger is created only by
    /// [`Ledger::init`]. What opening repaired (a torn tail cut and saved
    /// aside) is in [`Ledger::recovery`].
    pub fn open_on(storage: Arc<dyn Storage>, config: Config) -> Result<Ledger, LedgerError> {
        Ledger::start(storage, config, Start::Existing)
    }

    /// Creates a new ledger in `dir`, which must be empty or missing, with
    /// the durable defaults. See [`Ledger::init_on`].
    pub fn init(dir: impl AsRef<Path>) -> Result<Ledger, LedgerError> {
        Ledger::init_with(dir, Config::default())
    }

    /// Creates a new ledger in `dir`. See [`Ledger::init_on`].
    pub fn init_with(dir: impl AsRef<Path>, config: Config) -> Result<Ledger, LedgerError> {
        let config = with_dir_snapshots(config, dir.as_ref());
        Ledger::init_on(Arc::new(FsStorage::new(dir.as_ref())), config)
    }

    /// Creates a new ledger on `storage`, which must hold nothing but what
    /// a creation a crash cut short leaves (the lock file, a temporary
    /// first segment): a directory holding anything else, a log above all,
    /// is refused ([`LedgerError::NotEmpty`]) with nothing written.
    pub fn init_on(storage: Arc<dyn Storage>, config: Config) -> Result<Ledger, LedgerError> {
        Ledger::start(storage, config, Start::New)
    }

    fn start(
        storage: Arc<dyn Storage>,
        config: Config,
        start: Start,
    ) -> Result<Ledger, LedgerError> {
        let span = info_span!("open");
        let _entered = span.enter();
        // Only a choice of threads: a log that cannot be sized replays on
        // one, and the open reports what is wrong with it.
        let two_threads =
            segments_len(&*storage).is_ok_and(|len| len >= config.replay_thread_min_len);
        let cache = settle::cache_for(&config);
        let Replayed {
            log,
            recovery,
            state,
            threads,
        } = replay_log(
            storage,
            config.log.clone(),
            config.witness.clone(),
            snapshot_source(&config).map(|store| (store, &cache)),
            two_threads,
            start,
        )?;
        info!(
            events = state.last_seq(),
            replayed = recovery.replayed,
            snapshot = recovery.snapshot.as_ref().map(|snapshot| snapshot.name.as_str()),
            snapshots_set_aside = recovery.snapshots_set_aside.len(),
            keys = state.key_count(),
            threads,
            torn_tail = ?recovery.log.torn_tail,
            "replayed"
        );
        let (accept_foreign_ids, epoch) = (config.accept_foreign_ids, Some(config.epochs.draw()));
        let ledger = Ledger::assemble(Store::File(log), state, config, recovery, cache)?;
        ledger.execute(proposal::open(accept_foreign_ids, epoch))?;
        Ok(ledger)
    }

    /// What opening found and repaired: the log's report (records and
    /// segments read, a torn tail cut off, a segment roll a crash
    /// interrupted), the snapshot the projections were loaded from and
    /// the events replayed after it, and every snapshot refused on the way
    /// and where it was set aside. Opening reports the same through
    /// `tracing`; this is for callers without a subscriber.
    pub fn recovery(&self) -> &Recovery {
        &self.inner.recovery
    }

    /// Opens a ledger several processes share, as `worker`: replays the
    /// shared log, re-deriving every decision, and records the worker's
    /// start, which ends the sends of its earlier sessions (and no other
    /// worker's). A log with no ledger in it is refused
    /// ([`LedgerError::NoLog`]), and so is a `config` whose policy on ids
    /// minted elsewhere is not the one the ledger recorded when it was
    /// created ([`LedgerError::PolicyMismatch`]).
    pub fn open_shared(
        log: Arc<dyn SharedLog>,
        worker: WorkerName,
        config: Config,
    ) -> Result<Ledger, LedgerError> {
        let span = info_span!("open", worker = %worker);
        let _entered = span.enter();
        let cache = settle::cache_for(&config);
        let source = snapshot_source(&config).map(|store| (store, &cache));
        let (state, recovery) = shared::rebuild_from_snapshot(&*log, source)?;
        if state.last_seq() == 0 {
            return Err(LedgerError::NoLog {
                dir: format!("{log:?}"),
                found: Vec::new(),
            });
        }
        if state.accepts_foreign_ids() != config.accept_foreign_ids {
            return Err(LedgerError::PolicyMismatch {
                ledger: state.accepts_foreign_ids(),
                worker: config.accept_foreign_ids,
            });
        }
        info!(
            events = state.last_seq(),
            replayed = recovery.replayed,
            snapshot = recovery
                .snapshot
                .as_ref()
                .map(|snapshot| snapshot.name.as_str()),
            snapshots_set_aside = recovery.snapshots_set_aside.len(),
            keys = state.key_count(),
            "replayed"
        );
        let epoch = config.epochs.draw();
        let shared = (log, Some(worker.clone()));
        let ledger = Ledger::on_shared(shared, state, config, recovery, cache)?;
        ledger.execute(proposal::start(worker.clone(), epoch))?;
        ledger.lock_state()?.session = Some(epoch);
        info!(epoch, "started");
        Ok(ledger)
    }

    /// Creates a ledger on a shared log that holds no event yet: its first
    /// event, `opened`, records the policy every worker decides under. A
    /// log holding events is refused ([`LedgerError::NotEmpty`]) with
    /// nothing written, even if another process created the ledger a
    /// moment before. The ledger returned writes as no worker: workers
    /// open it with [`Ledger::open_shared`].
    pub fn init_shared(log: Arc<dyn SharedLog>, config: Config) -> Result<Ledger, LedgerError> {
        let state = shared::rebuild(&*log)?;
        let (accept_foreign_ids, epoch) = (config.accept_foreign_ids, Some(config.epochs.draw()));
        let cache = settle::cache_for(&config);
        let ledger = Ledger::on_shared((log, None), state, config, Recovery::default(), cache)?;
        let created = ledger.execute(proposal::create_ledger(accept_foreign_ids, epoch))?;
        match created {
            Executed::Appended { .. } => Ok(ledger),
            Executed::Nothing(events) => Err(LedgerError::NotEmpty {
                dir: format!("{:?}", ledger.shared().map(|shared| &shared.log)),
                found: Vec::new(),
                count: usize::try_from(events).unwrap_or(usize::MAX),
            }),
        }
    }

    /// Opens a ledger on a shared log for an operator: replays it,
    /// re-deriving every decision, and writes as no worker, so it resolves,
    /// corrects, releases and ends sessions, but claims nothing (a claim
    /// needs a worker whose next start ends its send). A log with no
    /// ledger in it is refused ([`LedgerError::NoLog`]).
    pub fn attach_shared(log: Arc<dyn SharedLog>, config: Config) -> Result<Ledger, LedgerError> {
        let cache = settle::cache_for(&config);
        let source = snapshot_source(&config).map(|store| (store, &cache));
        let (state, recovery) = shared::rebuild_from_snapshot(&*log, source)?;
        if state.last_seq() == 0 {
            return Err(LedgerError::NoLog {
                dir: format!("{log:?}"),
                found: Vec::new(),
            });
        }
        Ledger::on_shared((log, None), state, config, recovery, cache)
    }

    fn on_shared(
        (log, worker): (Arc<dyn SharedLog>, Option<WorkerName>),
        state: State,
        config: Config,
        recovery: Recovery,
        cache: Arc<BlockCache>,
    ) -> Result<Ledger, LedgerError> {
        let store = Store::Shared(Shared::new(log, worker));
        Ledger::assemble(store, state, config, recovery, cache)
    }

    /// A ledger over `store` from `state`, whose runs are read through
    /// `cache`: its snapshots, if `config` keeps any, continue from the one
    /// `recovery` says it opened from, and the thread that takes them is
    /// started. With [`Config::set_apart_settled`], every settled pair goes
    /// into a run now, and leaves memory.
    fn assemble(
        store: Store,
        state: State,
        config: Config,
        recovery: Recovery,
        cache: Arc<BlockCache>,
    ) -> Result<Ledger, LedgerError> {
        let settle = settle::Settle::new(&config, cache);
        settle.publish(&state);
        let set_apart = config.set_apart_settled;
        let snapshots = config.snapshot_store.clone().map(|snapshots| {
            let from = recovery
                .snapshot
                .as_ref()
                .map_or(0, |snapshot| snapshot.seq);
            Arc::new(Snapshots::new(snapshots, config.snapshots, from))
        });
        let inner = Arc::new(Inner {
            store,
            state: Mutex::new(Round::new(state)),
            config,
            recovery,
            snapshots,
            settle,
            handles: AtomicUsize::new(1),
        });
        Snapshots::start(&inner);
        if inner.config.settle_in_background {
            settler::Settler::start(&inner);
        }
        let ledger = Ledger { inner, held: true };
        if set_apart {
            ledger.flush_settled()?;
        }
        Ok(ledger)
    }

    fn lock_state(&self) -> Result<MutexGuard<'_, Round>, LedgerError> {
        // Fail closed: a panic while the state was locked may have left it
        // half-applied.
        self.inner.state.lock().map_err(|_| LedgerError::Poisoned)
    }

    /// Decides with `decide` under the lock; appends and applies the event
    /// its answer holds, if any; waits until everything the decision saw is
    /// on stable storage. A refusal of `command` is recorded for audit.
    fn execute<M, N>(&self, proposal: Proposal<M, N>) -> Result<Executed<M, N>, LedgerError>
    where
        M: Send + 'static,
        N: Send + 'static,
    {
        self.execute_then(proposal, Wait::Durable)
    }

    /// [`Ledger::execute`], waiting for stable storage or not.
    fn execute_then<M, N>(
        &self,
        proposal: Proposal<M, N>,
        wait: Wait,
    ) -> Result<Executed<M, N>, LedgerError>
    where
        M: Send + 'static,
        N: Send + 'static,
    {
        let log = match &self.inner.store {
            Store::File(log) => log,
            // Every answer of a shared ledger waits for its batch's commit.
            Store::Shared(shared) => return self.execute_shared(shared, proposal),
        };
        // Nothing is judged before what the command names is read back.
        let names = command_names(proposal.command());
        let mut round = self.lock_named(names, || self.lock_state())?;
        let state = &mut round.state;
        // Fail closed: after a failed write the state may hold events that
        // never reached the disk, so nothing is decided from it.
        log.check()?;
        let snapshots = self.inner.snapshots.as_deref();
        let executed = self.step(state, &mut LogSink { log, snapshots }, &proposal)?;
        let flush = self.inner.settle.keep_under(state);
        // A replayed outcome may have been appended a moment ago by another
        // thread that is still waiting for it to be synced: nothing is
        // acknowledged before it is durable.
        let wait_for = state.last_seq();
        drop(round);
        if wait == Wait::Durable && wait_for > 0 {
            log.wait_durable(wait_for)?;
        }
        if flush {
            self.flush_wanted();
        }
        Ok(executed)
    }

    /// Mints an id for a new withdrawal and records it. The returned request
    /// (state requested) is the one to submit.
    pub fn create(&self, new: NewWithdrawal) -> Result<WithdrawalRequest, LedgerError> {
        let NewWithdrawal {
            amount,
            currency,
            destination,
            requested_by,
        } = new;
        let proposal = proposal::create(amount, currency, destination, requested_by);
        match self.execute(proposal)? {
            Executed::Appended {
                meaning: withdrawal,
                ..
            } => {
                info!(withdrawal = %withdrawal.id(), "created");
                Ok(withdrawal)
            }
            Executed::Nothing(never) => match never {},
        }
    }

    /// Claims `key` and the request's withdrawal, durably, before a send.
    ///
    /// [`Claim::Granted`] means the claim is on stable storage: send, then
    /// [`complete`](Ledger::complete). [`Claim::Replayed`] means the key has
    /// an outcome already: return it, do not send.
    pub fn claim(
        &self,
        key: &str,
        request: impl Borrow<WithdrawalRequest>,
    ) -> Result<Claim, LedgerError> {
        let key = RequestKey::new(key)?;
        let request = request.borrow();
        let span = info_span!("claim", key = %key, withdrawal = %request.id());
        let _entered = span.enter();
        if self.shared().is_some() && self.worker().is_none() {
            return Err(LedgerError::Store(StoreError::Unsafe {
                detail: "a ledger opened for an operator claims nothing: open it as a worker"
                    .to_owned(),
            }));
        }
        match self.execute(proposal::claim(key.clone(), request.clone()))? {
            Executed::Appended { seq, .. } => {
                info!(seq, "claimed");
                Ok(Claim::Granted(Ticket {
                    ledger: self.clone(),
                    key,
                    request: request.clone(),
                    claimed_seq: seq,
                    completed: false,
                }))
            }
            Executed::Nothing(outcome) => {
                info!(state = %outcome.state(), "replayed");
                Ok(Claim::Replayed(outcome))
            }
        }
    }

    /// Records what the send for a granted claim did.
    ///
    /// An outcome is on stable storage before this returns it. A clean rail
    /// refusal releases the hold and returns [`SubmitError::Rejected`]; any
    /// other failure keeps the key claimed with an unknown outcome and
    /// returns [`SubmitError::Send`].
    pub fn complete(
        &self,
        mut ticket: Ticket,
        result: Result<WithdrawalRequest, SendFailure>,
    ) -> Result<WithdrawalRequest, SubmitError> {
        ticket.completed = true;
        let key = ticket.key.clone();
        let withdrawal = ticket.request.id().clone();
        let span = info_span!("complete", key = %key, withdrawal = %withdrawal);
        let _entered = span.enter();
        match result {
            Ok(outcome) => self.complete_sent(key, outcome),
            Err(SendFailure::Rejected(reason)) => self.complete_rejected(key, withdrawal, reason),
            Err(SendFailure::Failed(error)) => {
                let text = Reason::lossy(&error.to_string());
                let result = SendResult::Failed {
                    error: text.clone(),
                    cause: FailureCause::Error,
                };
                match self.execute(proposal::complete(key.clone(), result)) {
                    Ok(_) => warn!(
                        key = %key, withdrawal = %withdrawal, error = %text,
                        "the send's outcome is unknown; the key stays claimed until it is resolved"
                    ),
                    Err(cause) => warn!(
                        key = %key, withdrawal = %withdrawal, %cause,
                        "the send failed and recording it failed too; the claim stands"
                    ),
                }
                Err(SubmitError::Send(error))
            }
        }
    }

    /// The send for `key` returned `outcome`: recorded before it is
    /// returned, unless it is another withdrawal than the claimed one.
    fn complete_sent(
        &self,
        key: RequestKey,
        outcome: WithdrawalRequest,
    ) -> Result<WithdrawalRequest, SubmitError> {
        let proposal = proposal::complete_sent(key.clone(), outcome.clone());
        let refusal = match self.execute(proposal) {
            Ok(Executed::Appended {
                meaning: Returned::Outcome,
                ..
            }) => {
                info!(state = %outcome.state(), "outcome recorded");
                return Ok(outcome);
            }
            Ok(Executed::Appended {
                meaning: Returned::Mismatch(differences),
                ..
            }) => Refusal::OutcomeMismatch {
                key: key.clone(),
                differences,
            },
            Ok(Executed::Appended {
                meaning: Returned::Unsettled(state),
                ..
            }) => Refusal::Unsettled {
                key: key.clone(),
                state,
            },
            Ok(Executed::Nothing(never)) => match never {},
            Err(cause) => {
                warn!(
                    key = %key, withdrawal = %outcome.id(), %cause,
                    "the send succeeded but its outcome could not be recorded; the key stays in flight"
                );
                return Err(SubmitError::Unrecorded {
                    key,
                    outcome: Box::new(outcome),
                    cause: Box::new(cause),
                });
            }
        };
        warn!(
            key = %key, withdrawal = %outcome.id(), %refusal,
            "the send's answer is not an outcome of the claim; the key stays claimed until it is resolved"
        );
        Err(SubmitError::Ledger(LedgerError::Refused(refusal)))
    }

    /// The rail refused the send for `key` cleanly: recorded, which
    /// releases the hold.
    fn complete_rejected(
        &self,
        key: RequestKey,
        withdrawal: WithdrawalId,
        reason: Reason,
    ) -> Result<WithdrawalRequest, SubmitError> {
        let result = SendResult::Rejected(reason.clone());
        if let Err(cause) = self.execute(proposal::complete(key.clone(), result)) {
            // `Rejected` promises a released hold; the release never
            // reached the disk, so the caller hears of the failure.
            warn!(
                key = %key, withdrawal = %withdrawal, %cause, %reason,
                "the rail refused, but recording it failed: the hold stays until the key is released"
            );
            return Err(SubmitError::Ledger(cause));
        }
        warn!(
            key = %key, withdrawal = %withdrawal, %reason,
            "the rail refused; hold released, the key stays claimed until released or resolved"
        );
        Err(SubmitError::Rejected {
            key,
            withdrawal,
            reason,
        })
    }

    /// Submits `request` under `key`: claims, sends, records the outcome.
    ///
    /// - A new key for an unclaimed withdrawal: the claim goes to stable
    ///   storage, then `send` runs, then its outcome goes to stable storage
    ///   and is returned.
    /// - The same key and withdrawal again: the recorded outcome is returned
    ///   and `send` is not called; if the outcome is unknown, `InFlight`.
    /// - The same key for another withdrawal, or another key for a claimed
    ///   withdrawal: a conflict naming the fields or the holder.
    ///
    /// A panic inside `send` leaves the key claimed with an unknown outcome,
    /// is recorded, and then continues unwinding.
    pub fn submit(
        &self,
        key: &str,
        request: impl Borrow<WithdrawalRequest>,
        send: impl FnOnce(&WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure>,
    ) -> Result<WithdrawalRequest, SubmitError> {
        let mut ticket = match self.claim(key, request)? {
            Claim::Replayed(outcome) => return Ok(outcome),
            Claim::Granted(ticket) => ticket,
        };
        let span = info_span!("send", key = %ticket.key, withdrawal = %ticket.request.id());
        let sent = span.in_scope(|| catch_unwind(AssertUnwindSafe(|| send(&ticket.request))));
        match sent {
            Ok(result) => self.complete(ticket, result),
            Err(panic) => {
                ticket.fail(
                    &format!("the send panicked: {}", panic_message(&panic)),
                    FailureCause::Panic,
                    Wait::Durable,
                );
                resume_unwind(panic)
            }
        }
    }

    /// Records `request` under `key` as it stands, without a send: the same
    /// checks as [`submit`](Ledger::submit), with the request as the outcome.
    pub fn record(
        &self,
        key: &str,
        request: WithdrawalRequest,
    ) -> Result<WithdrawalRequest, LedgerError> {
        let key = RequestKey::new(key)?;
        let span = info_span!("record", key = %key, withdrawal = %request.id());
        let _entered = span.enter();
        let outcome = match self.execute(proposal::record(key, request.clone()))? {
            Executed::Appended { .. } => request,
            Executed::Nothing(outcome) => outcome,
        };
        info!(state = %outcome.state(), "recorded");
        Ok(outcome)
    }

    /// An operator's "I looked; here is what happened": closes `key` with
    /// `outcome`. An unknown key takes the withdrawal's claim, if no other key
    /// holds it. The same outcome again succeeds and writes nothing.
    pub fn resolve(
        &self,
        key: &str,
        outcome: WithdrawalRequest,
        note: &str,
        by: &str,
    ) -> Result<(), LedgerError> {
        let key = RequestKey::new(key)?;
        let (note, by) = (Note::new(note)?, Actor::operator(by)?);
        let span = info_span!("resolve", key = %key, withdrawal = %outcome.id());
        let _entered = span.enter();
        match self.execute(proposal::resolve(key, outcome, note, by))? {
            Executed::Appended { .. } => info!("resolved"),
            Executed::Nothing(_) => info!("already resolved with this outcome"),
        }
        Ok(())
    }

    /// An operator's "I looked; nothing was sent": drops `key`, its claim and
    /// its hold, so the withdrawal can be claimed again. Refused if the key
    /// produced an outcome. An unknown key is a no-op.
    pub fn release(&self, key: &str, note: &str, by: &str) -> Result<(), LedgerError> {
        let key = RequestKey::new(key)?;
        let (note, by) = (Note::new(note)?, Actor::operator(by)?);
        let span = info_span!("release", key = %key);
        let _entered = span.enter();
        match self.execute(proposal::release(key, note, by))? {
            Executed::Appended { .. } => info!("released"),
            Executed::Nothing(_) => info!("unknown key; nothing to release"),
        }
        Ok(())
    }

    /// A later report of what the rail did with the withdrawal `key` sent:
    /// confirmed, failed on the rail, or bumped to another reference. The
    /// outcome moves forward by one transition of the state machine, and
    /// the funds follow (captured while sent or confirmed, given back when
    /// failed); the same report again changes nothing; any other move is
    /// refused ([`Refusal::ForbiddenMove`]).
    pub fn advance(&self, key: &str, outcome: &WithdrawalRequest) -> Result<(), LedgerError> {
        let key = RequestKey::new(key)?;
        let span = info_span!("advance", key = %key, withdrawal = %outcome.id());
        let _entered = span.enter();
        match self.execute(proposal::advance(key, outcome.clone()))? {
            Executed::Appended { .. } => info!(state = %outcome.state(), "outcome moved on"),
            Executed::Nothing(_) => info!("the outcome is this already"),
        }
        Ok(())
    }

    /// An operator's "the outcome recorded for `key` is wrong; this is the
    /// right one": recorded with both outcomes and `note`. Only a settled
    /// outcome of the same withdrawal corrects one, and only a key with an
    /// outcome is corrected. The same outcome again changes nothing.
    pub fn correct(
        &self,
        key: &str,
        outcome: &WithdrawalRequest,
        note: &str,
        by: &str,
    ) -> Result<(), LedgerError> {
        let key = RequestKey::new(key)?;
        let (note, by) = (Note::new(note)?, Actor::operator(by)?);
        let span = info_span!("correct", key = %key, withdrawal = %outcome.id());
        let _entered = span.enter();
        match self.execute(proposal::correct(key, outcome.clone(), note, by))? {
            Executed::Appended { .. } => info!(state = %outcome.state(), "outcome corrected"),
            Executed::Nothing(_) => info!("the outcome is this already"),
        }
        Ok(())
    }

    /// Answers `query` from the state under the lock. Every decision waits
    /// while it runs, so keep it short.
    fn read<T>(&self, query: impl FnOnce(&State) -> T) -> T {
        let round = self.lock_for_reading();
        query(&round.state)
    }

    /// The state's lock for a query. A query must answer even if a panic
    /// poisoned the lock: reading (and bringing a settled pair back)
    /// cannot make a half-applied state worse, and writes are refused.
    fn lock_for_reading(&self) -> MutexGuard<'_, Round> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Answers `query` about `key` or withdrawal `id` (or both) from the
    /// state under the lock: for the questions the ledger has no method
    /// for. A settled key and the withdrawal it holds are found together,
    /// so naming either answers for both; what the query reads about other
    /// names may be missing. Every decision waits while it runs, so keep
    /// it short. Fails only when a settled pair set apart cannot be read
    /// back ([`LedgerError::Archive`]).
    ///
    /// # Panics
    /// If `query` iterates the whole state ([`State::records`],
    /// [`State::claims`]) while settled pairs are set apart
    /// ([`Config::set_apart_settled`]): ask [`Ledger::state`] for that.
    pub fn read_named<T>(
        &self,
        key: Option<&str>,
        id: Option<&str>,
        query: impl FnOnce(&State) -> T,
    ) -> Result<T, LedgerError> {
        let round = self.lock_named([key, id], || Ok(self.lock_for_reading()))?;
        Ok(query(&round.state))
    }

    /// The outcome recorded for `key`; `None` if unknown or in flight.
    pub fn outcome(&self, key: &str) -> Result<Option<WithdrawalRequest>, LedgerError> {
        let key = key.trim();
        self.read_named(Some(key), None, |state| state.outcome(key))
    }

    /// The key that holds withdrawal `id`.
    pub fn claimed_by(&self, id: &str) -> Result<Option<RequestKey>, LedgerError> {
        self.read_named(None, Some(id), |state| state.claimed_by(id))
    }

    /// The fingerprint of withdrawal `id`, if this ledger minted it or a
    /// key holds it.
    pub fn fingerprint(&self, id: &str) -> Result<Option<Fingerprint>, LedgerError> {
        self.read_named(None, Some(id), |state| state.fingerprint(id))
    }

    /// Every key with an unknown outcome, oldest claim first.
    pub fn in_flight(&self) -> Vec<InFlight> {
        self.read(State::in_flight)
    }

    /// The funds held for withdrawal `id`.
    pub fn held(&self, id: &str) -> Result<Option<Hold>, LedgerError> {
        self.read_named(None, Some(id), |state| state.held(id))
    }

    /// The funds of withdrawal `id` that left custody.
    pub fn captured(&self, id: &str) -> Result<Option<Hold>, LedgerError> {
        self.read_named(None, Some(id), |state| state.captured(id))
    }

    /// Held funds per currency.
    pub fn held_totals(&self) -> BTreeMap<Currency, Decimal> {
        self.read(|state| state.held_totals())
    }

    /// Sequence number of the last event decided, durable or not.
    pub fn last_seq(&self) -> u64 {
        self.read(State::last_seq)
    }

    /// The log's durable head: the seq of the last event on stable storage
    /// and the chain digest of its batch, `SEQ:DIGEST` when printed. An
    /// auditor who keeps it can later check that the log still holds it,
    /// unchanged (`payonce verify --expect-head`, or `payonce head URL
    /// --expect-head`). On a shared log, the head of the last batch this
    /// process read or committed.
    pub fn head(&self) -> Result<Head, LedgerError> {
        match &self.inner.store {
            Store::File(log) => Ok(log.head()),
            Store::Shared(shared) => Ok(shared.log.head()?),
        }
    }

    /// Whether this process can write its log now, for a health check: on
    /// a shared log, whether the store is reachable
    /// ([`SharedLog::reachable`]); a file ledger answers `Ok`.
    pub fn reachable(&self) -> Result<(), LedgerError> {
        match &self.inner.store {
            Store::File(_) => Ok(()),
            Store::Shared(shared) => Ok(shared.log.reachable()?),
        }
    }

    /// A copy of the whole state: for audits and tests. Fails only when
    /// settled pairs set apart cannot be read back
    /// ([`LedgerError::Archive`]).
    pub fn state(&self) -> Result<State, LedgerError> {
        self.read(State::whole).map_err(LedgerError::Archive)
    }

    /// Waits until every event appended so far is on stable storage.
    pub fn sync(&self) -> Result<(), LedgerError> {
        // A shared ledger answers only once a batch is committed.
        if let Store::File(log) = &self.inner.store {
            log.sync()?;
        }
        Ok(())
    }

    /// An operator's "I looked; this worker is gone": ends the session of
    /// `worker` on a shared ledger, so the sends it claimed no longer count
    /// as running and their keys can be resolved or released. Refused
    /// ([`Refusal::NoSession`]) if it has no live session. Whether the
    /// worker's process is really gone is for the caller to make sure of
    /// first (`payonce-postgres` refuses while it holds its lock).
    pub fn end_session(&self, worker: &str, note: &str, by: &str) -> Result<(), LedgerError> {
        let worker = WorkerName::new(worker)?;
        let (note, by) = (Note::new(note)?, Actor::operator(by)?);
        let span = info_span!("end_session", worker = %worker);
        let _entered = span.enter();
        match self.execute(proposal::end_session(worker, note, by))? {
            Executed::Appended { .. } => info!("session ended"),
            Executed::Nothing(never) => match never {},
        }
        Ok(())
    }

    /// Verifies the ledger in `dir` read-only: see [`crate::verify`].
    pub fn verify(dir: impl AsRef<Path>) -> Result<crate::Verification, LedgerError> {
        crate::audit::verify(dir)
    }

    /// Whether `id` names a withdrawal this ledger created.
    pub fn was_created(&self, id: &WithdrawalId) -> Result<bool, LedgerError> {
        self.read_named(None, Some(id), |state| state.was_created(id))
    }
}

/// The store `config` opens from, if it opens from snapshots.
fn snapshot_source(config: &Config) -> Option<&dyn crate::snapshot::SnapshotStore> {
    config
        .snapshot_store
        .as_deref()
        .filter(|_| config.snapshots.load)
}

/// `config`, keeping its snapshots in the `snapshots/` directory beside the
/// log in `dir` unless it names a store of its own.
fn with_dir_snapshots(mut config: Config, dir: &Path) -> Config {
    if config.snapshot_store.is_none() {
        config.snapshot_store = Some(Arc::new(DirSnapshots::beside(dir)));
    }
    config
}

fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests_budget;
#[cfg(test)]
mod tests_merge;
#[cfg(test)]
mod tests_runs;
#[cfg(test)]
mod tests_step;
#[cfg(test)]
mod tests_store;
