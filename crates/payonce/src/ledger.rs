//! The thin shell around `decide` and `apply`: one mutex orders decisions and
//! appends, durability waits and sends happen outside it.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use payonce_log::{FsStorage, Log, LogConfig, Storage, segments_len};
use payonce_model::{
    Actor, Amount, Currency, Destination, Note, Reason, RequestKey, WithdrawalId, WithdrawalRequest,
};
use rust_decimal::Decimal;
use tracing::{info, info_span, warn};

use crate::command::{Command, FailureCause, SendResult};
use crate::decide::{Decision, decide};
use crate::error::{LedgerError, SendFailure, SubmitError};
use crate::event::{Event, EventKind, SCHEMA_VERSION};
use crate::refusal::Refusal;
use crate::replay::{Replayed, replay_log};
use crate::state::{Hold, InFlight, State, apply};
use crate::time::{Clock, SystemClock};

/// How a ledger is opened.
#[derive(Debug, Clone)]
pub struct Config {
    /// The log's settings, durability among them. The default is durable
    /// and appends; `LogConfig::preallocate_len` trades availability after
    /// a power loss for throughput (see docs/log-format.md).
    pub log: LogConfig,
    /// Accept withdrawal ids this ledger did not mint. Off by default: this
    /// weakens exclusivity, since a client that mints ids can mint a second
    /// one for the same money.
    pub accept_foreign_ids: bool,
    /// Append refusals to the log as audit events (on by default). They
    /// change no projection and are not synced before returning.
    pub log_refusals: bool,
    /// Where events get their time.
    pub clock: Arc<dyn Clock>,
    /// Opening replays a log whose segment files hold at least this many
    /// bytes on two threads, a shorter one on the opening thread, where
    /// starting a thread costs more than it saves. Default
    /// [`REPLAY_THREAD_MIN_LEN`]; 0 always uses two threads, `u64::MAX`
    /// never. Either way replay decides, and refuses, alike.
    pub replay_thread_min_len: u64,
}

/// Default for [`Config::replay_thread_min_len`]: 4 MiB, about 20,000
/// events.
pub const REPLAY_THREAD_MIN_LEN: u64 = 4 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            log: LogConfig::default(),
            accept_foreign_ids: false,
            log_refusals: true,
            clock: Arc::new(SystemClock),
            replay_thread_min_len: REPLAY_THREAD_MIN_LEN,
        }
    }
}

/// A new withdrawal for [`Ledger::create`]: everything but the id, which
/// the ledger mints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWithdrawal {
    /// How much.
    pub amount: Amount,
    /// In what.
    pub currency: Currency,
    /// To where.
    pub destination: Destination,
    /// Who asked.
    pub requested_by: Actor,
}

/// The answer to [`Ledger::claim`].
#[derive(Debug)]
#[must_use = "a granted claim must be completed, or its key stays in flight"]
pub enum Claim {
    /// The claim is on stable storage: send now, then
    /// [`complete`](Ledger::complete) the ticket.
    Granted(Ticket),
    /// The key already has this outcome: do not send.
    Replayed(WithdrawalRequest),
}

/// A claim on stable storage, waiting for its send's result.
///
/// Dropped without [`Ledger::complete`], it leaves the key in flight, records
/// that it was abandoned, and logs a warning.
#[must_use = "complete the ticket with what the send did"]
pub struct Ticket {
    ledger: Ledger,
    key: RequestKey,
    request: WithdrawalRequest,
    claimed_seq: u64,
    completed: bool,
}

impl Ticket {
    /// The claimed key.
    pub fn key(&self) -> &RequestKey {
        &self.key
    }
    /// The request to send.
    pub fn request(&self) -> &WithdrawalRequest {
        &self.request
    }
    /// Sequence number of the claim in the log.
    pub fn claimed_seq(&self) -> u64 {
        self.claimed_seq
    }

    /// Records that the send's outcome is unknown, for reasons other than an
    /// error the caller holds.
    fn fail(&mut self, error: &str, cause: FailureCause) {
        self.completed = true;
        warn!(
            key = %self.key, withdrawal = %self.request.id(), error,
            "the send's outcome is unknown; the key stays claimed until it is resolved or released"
        );
        let command = Command::Complete {
            key: self.key.clone(),
            result: SendResult::Failed {
                error: Reason::lossy(error),
                cause,
            },
        };
        if let Err(failure) = self.ledger.execute(&command) {
            warn!(key = %self.key, %failure, "could not record the unknown outcome; the claim stands");
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key)
            .field("withdrawal", self.request.id())
            .field("claimed_seq", &self.claimed_seq)
            .finish_non_exhaustive()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.completed {
            self.fail(
                "the claim's ticket was dropped without being completed",
                FailureCause::Abandoned,
            );
        }
    }
}

/// The submission ledger. Cheap to clone; every clone is the same ledger.
///
/// After a storage error the log refuses every later write until the
/// ledger is reopened. Queries still answer from memory, which may then
/// hold a decision that never reached the disk (the claim whose sync
/// failed, say): reopen before trusting them.
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

struct Inner {
    log: Log,
    /// Ordering decisions and appends under one lock makes log order
    /// decision order.
    state: Mutex<State>,
    config: Config,
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// What executing a command did.
enum Executed {
    Appended(Event),
    Replayed(WithdrawalRequest),
    Unchanged,
}

impl Ledger {
    /// Opens (or creates) the ledger in `dir` with the durable defaults.
    pub fn open(dir: impl AsRef<Path>) -> Result<Ledger, LedgerError> {
        Ledger::open_with(dir, Config::default())
    }

    /// Opens (or creates) the ledger in `dir`.
    pub fn open_with(dir: impl AsRef<Path>, config: Config) -> Result<Ledger, LedgerError> {
        Ledger::open_on(Arc::new(FsStorage::new(dir.as_ref())), config)
    }

    /// Opens (or creates) the ledger on any storage the log supports,
    /// including the fault-injecting in-memory one.
    ///
    /// Replays every event, re-deriving every recorded decision; a decision
    /// the code would not make again is a [`LedgerError::Divergence`].
    pub fn open_on(storage: Arc<dyn Storage>, config: Config) -> Result<Ledger, LedgerError> {
        let span = info_span!("open");
        let _entered = span.enter();
        // Only a choice of threads: a log that cannot be sized replays on
        // one, and the open reports what is wrong with it.
        let two_threads =
            segments_len(&*storage).is_ok_and(|len| len >= config.replay_thread_min_len);
        let Replayed {
            log,
            recovery,
            state,
            threads,
        } = replay_log(storage, config.log.clone(), two_threads)?;
        info!(
            events = state.last_seq(),
            keys = state.key_count(),
            threads,
            torn_tail = ?recovery.torn_tail,
            "replayed"
        );
        let accept_foreign_ids = config.accept_foreign_ids;
        let ledger = Ledger {
            inner: Arc::new(Inner {
                log,
                state: Mutex::new(state),
                config,
            }),
        };
        ledger.execute(&Command::Open { accept_foreign_ids })?;
        Ok(ledger)
    }

    fn lock_state(&self) -> Result<MutexGuard<'_, State>, LedgerError> {
        // Fail closed: a panic while the state was locked may have left it
        // half-applied.
        self.inner.state.lock().map_err(|_| LedgerError::Poisoned)
    }

    /// Decides `command`; appends and applies the event if there is one;
    /// waits until everything the decision saw is on stable storage.
    fn execute(&self, command: &Command) -> Result<Executed, LedgerError> {
        let mut state = self.lock_state()?;
        // Fail closed: after a failed write the state may hold events that
        // never reached the disk, so nothing is decided from it.
        self.inner.log.check()?;
        let decision = match decide(&state, command) {
            Ok(decision) => decision,
            Err(refusal) => {
                info!(%refusal, "refused");
                if self.inner.config.log_refusals {
                    let kind = EventKind::Refused {
                        command: command.clone(),
                        refusal: refusal.clone(),
                    };
                    // The refusal stands whether or not its audit record lands.
                    if let Err(error) = self.append(&mut state, kind) {
                        warn!(%error, %refusal, "could not record a refusal in the log");
                    }
                }
                return Err(LedgerError::Refused(refusal));
            }
        };
        let (executed, wait_for) = match decision {
            Decision::Append(kind) => {
                let event = self.append(&mut state, kind)?;
                let seq = event.seq;
                (Executed::Appended(event), seq)
            }
            // A replayed outcome may have been appended a moment ago by
            // another thread that is still waiting for it to be synced:
            // nothing is acknowledged before it is durable.
            Decision::Replay(outcome) => (Executed::Replayed(outcome), state.last_seq()),
            Decision::Unchanged => (Executed::Unchanged, state.last_seq()),
        };
        drop(state);
        if wait_for > 0 {
            self.inner.log.wait_durable(wait_for)?;
        }
        Ok(executed)
    }

    /// Appends `kind` as the next event and applies it. Called with the state
    /// locked, so the event's number is the log's next.
    fn append(&self, state: &mut State, kind: EventKind) -> Result<Event, LedgerError> {
        let event = Event {
            schema: SCHEMA_VERSION,
            seq: state.last_seq() + 1,
            at: self.inner.config.clock.now(),
            kind,
        };
        let bytes = event.encode()?;
        let seq = self.inner.log.append(&bytes)?;
        assert_eq!(
            seq, event.seq,
            "the log numbered an event differently from the ledger"
        );
        apply(state, &event);
        Ok(event)
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
        let command = Command::Create {
            amount,
            currency,
            destination,
            requested_by,
        };
        match self.execute(&command)? {
            Executed::Appended(Event {
                kind: EventKind::Created { withdrawal },
                ..
            }) => {
                info!(withdrawal = %withdrawal.id(), "created");
                Ok(withdrawal)
            }
            other => unexpected(other),
        }
    }

    /// Claims `key` and the request's withdrawal, durably, before a send.
    ///
    /// [`Claim::Granted`] means the claim is on stable storage: send, then
    /// [`complete`](Ledger::complete). [`Claim::Replayed`] means the key has
    /// an outcome already: return it, do not send.
    pub fn claim(&self, key: &str, request: WithdrawalRequest) -> Result<Claim, LedgerError> {
        let key = RequestKey::new(key)?;
        let span = info_span!("claim", key = %key, withdrawal = %request.id());
        let _entered = span.enter();
        let command = Command::Claim {
            key: key.clone(),
            request: request.clone(),
        };
        match self.execute(&command)? {
            Executed::Appended(event) => {
                info!(seq = event.seq, "claimed");
                Ok(Claim::Granted(Ticket {
                    ledger: self.clone(),
                    key,
                    request,
                    claimed_seq: event.seq,
                    completed: false,
                }))
            }
            Executed::Replayed(outcome) => {
                info!(state = %outcome.state(), "replayed");
                Ok(Claim::Replayed(outcome))
            }
            other @ Executed::Unchanged => unexpected(other),
        }
    }

    /// Records what the send for a granted claim did.
    ///
    /// An outcome is on stable storage before this returns it. A clean rail
    /// refusal releases the hold and returns [`SubmitError::Rejected`]; any
    /// other failure keeps the key claimed with an unknown outcome and
    /// returns [`SubmitError::Send`].
    pub fn complete<E: fmt::Display>(
        &self,
        mut ticket: Ticket,
        result: Result<WithdrawalRequest, SendFailure<E>>,
    ) -> Result<WithdrawalRequest, SubmitError<E>> {
        ticket.completed = true;
        let key = ticket.key.clone();
        let withdrawal = ticket.request.id().clone();
        let span = info_span!("complete", key = %key, withdrawal = %withdrawal);
        let _entered = span.enter();
        let (result, send_error) = match result {
            Ok(outcome) => (SendResult::Sent(outcome), None),
            Err(SendFailure::Rejected(reason)) => (SendResult::Rejected(reason), None),
            Err(SendFailure::Failed(error)) => {
                let text = Reason::lossy(&error.to_string());
                (
                    SendResult::Failed {
                        error: text,
                        cause: FailureCause::Error,
                    },
                    Some(error),
                )
            }
        };
        let command = Command::Complete {
            key: key.clone(),
            result: result.clone(),
        };
        let executed = self.execute(&command);
        match (executed, &result, send_error) {
            (Ok(Executed::Appended(event)), _, send_error) => match event.kind {
                EventKind::Completed { outcome, .. } => {
                    info!(state = %outcome.state(), "outcome recorded");
                    Ok(outcome)
                }
                EventKind::SendRejected { reason, .. } => {
                    warn!(
                        key = %key,
                        withdrawal = %withdrawal,%reason, "the rail refused; hold released, the key stays claimed until released or resolved");
                    Err(SubmitError::Rejected {
                        key,
                        withdrawal,
                        reason,
                    })
                }
                EventKind::SendFailed {
                    cause: FailureCause::OutcomeMismatch { differences, .. },
                    error,
                    ..
                } => {
                    warn!(
                        key = %key,
                        withdrawal = %withdrawal,%error, "the send's outcome is unknown; the key stays claimed until it is resolved");
                    Err(SubmitError::Ledger(LedgerError::Refused(
                        Refusal::OutcomeMismatch { key, differences },
                    )))
                }
                EventKind::SendFailed { error, .. } => {
                    warn!(
                        key = %key,
                        withdrawal = %withdrawal,%error, "the send's outcome is unknown; the key stays claimed until it is resolved");
                    match send_error {
                        Some(send_error) => Err(SubmitError::Send(send_error)),
                        None => unexpected_event(),
                    }
                }
                _ => unexpected_event(),
            },
            (Ok(other), ..) => unexpected(other),
            (Err(cause), SendResult::Sent(outcome), _) => {
                warn!(key = %key, withdrawal = %withdrawal, %cause, "the send succeeded but its outcome could not be recorded; the key stays in flight");
                Err(SubmitError::Unrecorded {
                    key,
                    outcome: Box::new(outcome.clone()),
                    cause: Box::new(cause),
                })
            }
            (Err(cause), SendResult::Rejected(reason), _) => {
                // `Rejected` promises a released hold; the release never
                // reached the disk, so the caller hears of the failure.
                warn!(
                    key = %key, withdrawal = %withdrawal, %cause, %reason,
                    "the rail refused, but recording it failed: the hold stays until the key is released"
                );
                Err(SubmitError::Ledger(cause))
            }
            (Err(cause), _, Some(send_error)) => {
                warn!(key = %key, withdrawal = %withdrawal, %cause, "the send failed and recording it failed too; the claim stands");
                Err(SubmitError::Send(send_error))
            }
            (Err(cause), ..) => Err(SubmitError::Ledger(cause)),
        }
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
    pub fn submit<E, F>(
        &self,
        key: &str,
        request: WithdrawalRequest,
        send: F,
    ) -> Result<WithdrawalRequest, SubmitError<E>>
    where
        E: fmt::Display,
        F: FnOnce(&WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure<E>>,
    {
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
        match self.execute(&Command::Record { key, request })? {
            Executed::Appended(Event {
                kind: EventKind::Recorded { request, .. },
                ..
            }) => {
                info!(state = %request.state(), "recorded");
                Ok(request)
            }
            Executed::Replayed(outcome) => {
                info!(state = %outcome.state(), "replayed");
                Ok(outcome)
            }
            other => unexpected(other),
        }
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
        match self.execute(&Command::Resolve {
            key,
            outcome,
            note,
            by,
        })? {
            Executed::Appended(_) => info!("resolved"),
            Executed::Unchanged => info!("already resolved with this outcome"),
            other @ Executed::Replayed(_) => return unexpected(other),
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
        match self.execute(&Command::Release { key, note, by })? {
            Executed::Appended(_) => info!("released"),
            Executed::Unchanged => info!("unknown key; nothing to release"),
            other @ Executed::Replayed(_) => return unexpected(other),
        }
        Ok(())
    }

    /// Reads the state under the lock.
    fn read<T>(&self, query: impl FnOnce(&State) -> T) -> T {
        // A query must answer even if a panic poisoned the lock: reading
        // cannot make a half-applied state worse, and writes are refused.
        let state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        query(&state)
    }

    /// The outcome recorded for `key`; `None` if unknown or in flight.
    pub fn outcome(&self, key: &str) -> Option<WithdrawalRequest> {
        let key = key.trim();
        self.read(|state| state.outcome(key))
    }

    /// The key that holds withdrawal `id`.
    pub fn claimed_by(&self, id: &str) -> Option<RequestKey> {
        self.read(|state| state.claimed_by(id))
    }

    /// Every key with an unknown outcome, oldest claim first.
    pub fn in_flight(&self) -> Vec<InFlight> {
        self.read(State::in_flight)
    }

    /// The funds held for withdrawal `id`.
    pub fn held(&self, id: &str) -> Option<Hold> {
        self.read(|state| state.held(id))
    }

    /// Held funds per currency.
    pub fn held_totals(&self) -> BTreeMap<Currency, Decimal> {
        self.read(|state| state.held_totals())
    }

    /// Sequence number of the last event decided, durable or not.
    pub fn last_seq(&self) -> u64 {
        self.read(State::last_seq)
    }

    /// A copy of the whole state: for audits and tests.
    pub fn state(&self) -> State {
        self.read(State::clone)
    }

    /// Waits until every event appended so far is on stable storage.
    pub fn sync(&self) -> Result<(), LedgerError> {
        self.inner.log.sync()?;
        Ok(())
    }

    /// Verifies the ledger in `dir` read-only: see [`crate::verify`].
    pub fn verify(dir: impl AsRef<Path>) -> Result<crate::VerifyReport, LedgerError> {
        crate::audit::verify(dir)
    }

    /// Whether `id` names a withdrawal this ledger created.
    pub fn was_created(&self, id: &WithdrawalId) -> bool {
        self.read(|state| state.was_created(id))
    }
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

#[track_caller]
fn unexpected<T>(executed: Executed) -> T {
    let what = match executed {
        Executed::Appended(event) => format!("appended {:?}", event.kind),
        Executed::Replayed(_) => "a replay".to_owned(),
        Executed::Unchanged => "no change".to_owned(),
    };
    unreachable!("decide answered this command with {what}")
}

#[track_caller]
fn unexpected_event<T>() -> T {
    unreachable!("decide answered a completion with an event of another kind")
}
