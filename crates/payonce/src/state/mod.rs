//! The projections the log is replayed into, what they mean, and how they
//! are read. [`apply`] (in `apply`) is the only code that changes them;
//! how they are laid out in memory is `layout`'s business.
//!
//! The ledger answers from three projections: records (a key to what it
//! claimed and what came of it), claims (a withdrawal to the key that
//! holds it) and holds (a withdrawal to the funds reserved for it). They
//! are kept as one slot per key and one slot per withdrawal: a
//! withdrawal's fingerprint, holder and hold live in its slot; a key's
//! slot names its withdrawal's slot and keeps the outcome's progress.
//! Queries put the values back together.
//!
//! Applying an event has two phases, as a state machine's commit does:
//! [`State::prefetch`] looks up what the event touches (the record of its
//! key, the slot of its withdrawal) once, then judging the event
//! (`crate::decide::judge`) and applying it ([`State::apply_prefetched`])
//! read what was found.
//!
//! A log that diverged, which only `verify` applies, asks for what the
//! code never decides: a key claiming twice, two keys on one withdrawal, a
//! send error after an outcome. Slot numbers stay valid through all of it
//! (a withdrawal slot is not reused while a record names it), and the
//! answers are those of a state keeping owned text, but for one: the first
//! withdrawal of a key that claims again is left unclaimed, rather than
//! claimed by a key whose record names another withdrawal.

mod apply;
mod chunks;
mod compare;
mod evict;
mod index;
mod jobs;
mod layout;
mod pair;
mod reading;
mod run_damage;
mod runs_written;
mod sessions;
mod settled;
mod snapshot;
mod snapshot_keys;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use payonce_model::{
    Actor, Amount, Currency, Destination, Fingerprint, Progress, Reason, Reference, RequestKey,
    WithdrawalId, WithdrawalRequest, WithdrawalState, WithdrawalView, WorkerName,
};
use rust_decimal::Decimal;

pub use self::apply::apply;
pub(crate) use self::apply::apply_judged;
pub use self::compare::StateDifference;
pub use self::layout::SLOTS_MAX;
use self::layout::{Funds, KeySlot, NO_HOLDER, NameHasher, Slots, Texts, WithdrawalSlot, stored};
pub(crate) use self::reading::{Reading, is_not_prefetched};
pub(crate) use self::run_damage::{AsideHooks, RunsCheck};
use self::sessions::Sessions;
pub(crate) use self::settled::Settled;
use crate::event::{EventKind, KindView, command_names};
use crate::time::Timestamp;

/// The most funds held in one currency at once: the largest decimal the
/// state can total, about 7.9 × 10^28. A claim that would pass it is
/// refused ([`crate::Refusal::HeldTotalTooLarge`]).
pub const HELD_TOTAL_MAX: Decimal = Decimal::MAX;

/// What the ledger believes after some prefix of the log.
///
/// Built only by [`apply`]; read through its query methods.
#[derive(Clone, Default)]
pub struct State {
    last_seq: u64,
    accept_foreign_ids: bool,
    texts: Texts,
    /// Every key with a record, found by the key.
    keys: Slots<KeySlot>,
    /// Every withdrawal minted here and every one a key holds, found by id.
    withdrawals: Slots<WithdrawalSlot>,
    hasher: NameHasher,
    /// One copy of each currency code, numbered.
    currencies: Vec<Currency>,
    currency_numbers: HashMap<Currency, u32>,
    /// References replaced by bumps, by key slot: rare, so kept aside.
    replaced: HashMap<u32, Box<[Reference]>>,
    /// The last send error or rail refusal, by key slot, until an outcome
    /// is recorded: only keys whose send failed have one.
    last_errors: HashMap<u32, layout::TextRef>,
    /// Funds held, by currency number: a sum per claim and per outcome,
    /// where a map by currency cost a lookup, a clone of the code and a
    /// normalisation each.
    held: Vec<Decimal>,
    /// Funds captured (moved out of custody), by currency number.
    captured: Vec<Decimal>,
    /// The epoch of the last opening, which minted ids carry; `None` for a
    /// log last opened before openings had epochs.
    epoch: Option<u64>,
    /// Keys with `send_running` set.
    sending: usize,
    /// Every key slot whose `send_running` was set since the last open
    /// (some since cleared), so an open clears them without visiting every
    /// key. Pruned when it holds more than twice the running sends.
    running: Vec<u32>,
    /// The workers of a shared ledger with a live session, and whose send
    /// each running send is.
    sessions: Sessions,
    refusals: u64,
    /// The runs holding settled pairs out of memory (`settled`), if any.
    settled: Option<Settled>,
    /// Key slots whose record a run holds as it is, oldest first: what may
    /// leave memory (`evict`). A slot changed or freed since is skipped.
    clean: VecDeque<u32>,
}

/// A name an event looks up (its request key, or its withdrawal's id),
/// with its hash under the state's [`NameHasher`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Name<'a> {
    text: &'a str,
    hash: u32,
}

/// The names an event looks up, hashed once for every lookup judging and
/// applying it makes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Names<'a> {
    key: Option<Name<'a>>,
    id: Option<Name<'a>>,
}

impl<'a> Names<'a> {
    /// The texts of the names `kind` looks up: its request key, and the
    /// withdrawal id it names.
    pub(crate) fn texts(kind: &'a KindView<'_>) -> [Option<&'a str>; 2] {
        match kind {
            KindView::Created { withdrawal } => [None, Some(withdrawal.id().as_str())],
            KindView::Claimed { key, request, .. } | KindView::Recorded { key, request } => {
                [Some(key.as_str()), Some(request.id().as_str())]
            }
            KindView::Resolved { key, outcome, .. } | KindView::Advanced { key, outcome } => {
                [Some(key.as_str()), Some(outcome.id().as_str())]
            }
            KindView::Corrected { key, new, .. } => [Some(key.as_str()), Some(new.id().as_str())],
            KindView::Completed { key, .. }
            | KindView::SendRejected { key, .. }
            | KindView::SendFailed { key, .. }
            | KindView::Released { key, .. } => [Some(key.as_str()), None],
            // Replay judges the refused command again, which reads what it
            // names.
            KindView::Refused { command, .. } => command_names(command),
            KindView::Opened { .. } | KindView::Started { .. } | KindView::SessionEnded { .. } => {
                [None, None]
            }
        }
    }
}

/// What an event touches, looked up by [`State::prefetch`]: the slot of
/// its key and of its withdrawal, where the state has them, and their
/// names, to insert them where it does not.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Prefetched<'a> {
    key: Option<Found<'a>>,
    id: Option<Found<'a>>,
}

#[derive(Debug, Clone, Copy)]
struct Found<'a> {
    name: Name<'a>,
    slot: Option<u32>,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.settled.is_some() {
            return match self.whole() {
                Ok(whole) => whole.fmt(f),
                Err(error) => write!(f, "State {{ settled pairs unreadable: {error} }}"),
            };
        }
        // Sorted, so two states with the same answers print the same.
        let records: BTreeMap<&str, KeyRecord<'_>> = self
            .keys
            .in_use()
            .filter_map(|slot| self.record_at(slot))
            .map(|record| (record.key_str(), record))
            .collect();
        let withdrawals: BTreeMap<&str, (Option<&str>, bool, Funds)> = self
            .withdrawals
            .in_use()
            .map(|slot| {
                let withdrawal = self.withdrawal_at(slot);
                let holder = withdrawal.holder().map(|record| record.key_str());
                let entry = withdrawal.entry;
                (withdrawal.id_str(), (holder, entry.created, entry.funds))
            })
            .collect();
        f.debug_struct("State")
            .field("last_seq", &self.last_seq)
            .field("accept_foreign_ids", &self.accept_foreign_ids)
            .field("epoch", &self.epoch)
            .field("sessions", &self.sessions.live)
            .field("records", &records)
            .field("withdrawals (holder, created, funds)", &withdrawals)
            .field("held_totals", &self.held_totals())
            .field("captured_totals", &self.captured_totals())
            .field("refusals", &self.refusals)
            .finish()
    }
}

/// Two states are equal when every query answers the same: slot numbers,
/// buffer offsets and hash order are how a state got there, not what it
/// believes ([`State::difference`] names the first answer that differs).
impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.difference(other).is_none()
    }
}

impl Eq for State {}

/// What a request key claimed, and what came of it, read from a [`State`]:
/// a key's record.
#[derive(Clone, Copy)]
pub struct KeyRecord<'a> {
    state: &'a State,
    slot: u32,
    entry: &'a KeySlot,
    withdrawal: Withdrawal<'a>,
}

impl fmt::Debug for KeyRecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRecord")
            .field("key", &self.key_str())
            .field("withdrawal", &self.withdrawal.id_str())
            .field("outcome", &self.progress())
            .field("claimed_seq", &self.entry.claimed_seq)
            .field("claimed_at", &self.entry.claimed_at)
            .field("last_error", &self.last_error())
            .field("send_running", &self.entry.send_running)
            .field("send_worker", &self.send_worker())
            .finish()
    }
}

impl<'a> KeyRecord<'a> {
    /// The request key.
    pub fn key(&self) -> RequestKey {
        stored(self.key_str(), RequestKey::new)
    }
    pub(crate) fn key_str(&self) -> &'a str {
        self.state.texts.get(self.entry.key)
    }
    fn text(&self, at: Option<layout::TextRef>) -> Option<&'a str> {
        Some(self.state.texts.get(at?))
    }
    /// The withdrawal the key claimed.
    pub fn withdrawal(&self) -> WithdrawalId {
        self.withdrawal.id()
    }
    /// [`KeyRecord::withdrawal`]'s text, borrowed.
    pub(crate) fn withdrawal_str(&self) -> &'a str {
        self.withdrawal.id_str()
    }
    /// The withdrawal's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.withdrawal.fingerprint()
    }
    /// Whether `request` is the withdrawal the key claimed. Builds nothing.
    pub fn matches(&self, request: &WithdrawalRequest) -> bool {
        self.matches_view(request.view())
    }
    /// [`KeyRecord::matches`], for a borrowed request.
    pub(crate) fn matches_view(&self, request: WithdrawalView<'_>) -> bool {
        self.withdrawal.matches(request)
    }
    /// Its outcome; `None` while in flight.
    pub fn outcome(&self) -> Option<WithdrawalRequest> {
        let progress = self.progress()?;
        Some(WithdrawalRequest::from_parts(self.fingerprint(), progress))
    }
    /// The outcome's state; `None` while in flight. Builds nothing.
    pub fn outcome_state(&self) -> Option<WithdrawalState> {
        self.entry.state
    }
    /// The outcome's progress (state, reference, ...); `None` while in flight.
    pub fn progress(&self) -> Option<Progress> {
        let state = self.entry.state?;
        let text = |at| self.text(at);
        let requested_by = text(self.entry.requested_by)
            .unwrap_or_else(|| panic!("key {} has an outcome without a requester", self.key_str()));
        let progress = Progress::new(
            state,
            text(self.entry.reference).map(|at| stored(at, Reference::new)),
            text(self.entry.reason).map(|at| stored(at, Reason::new)),
            stored(requested_by, Actor::new),
            self.replaced().to_vec(),
        );
        match progress {
            Ok(progress) => Some(progress),
            Err(error) => panic!(
                "the outcome of key {} was valid when stored and now is not: {error}",
                self.key_str()
            ),
        }
    }
    /// Whether the key's outcome is `outcome`. Builds nothing.
    pub fn has_outcome(&self, outcome: &WithdrawalRequest) -> bool {
        self.has_outcome_view(outcome.view())
    }
    /// [`KeyRecord::has_outcome`], for a borrowed outcome.
    pub(crate) fn has_outcome_view(&self, outcome: WithdrawalView<'_>) -> bool {
        let same = |at, text: Option<&str>| self.text(at) == text;
        self.entry.state == Some(outcome.state())
            && self.matches_view(outcome)
            && same(self.entry.reference, outcome.reference().as_deref())
            && same(self.entry.reason, outcome.reason().as_deref())
            && same(self.entry.requested_by, Some(&outcome.requested_by()))
            && self.replaced() == outcome.replaced()
    }
    fn replaced(&self) -> &'a [Reference] {
        if self.entry.state.is_none() {
            return &[];
        }
        self.state
            .replaced
            .get(&self.slot)
            .map_or(&[], |replaced| replaced)
    }
    /// Sequence number of the claim.
    pub fn claimed_seq(&self) -> u64 {
        self.entry.claimed_seq
    }
    /// Time of the claim.
    pub fn claimed_at(&self) -> Timestamp {
        self.entry.claimed_at
    }
    /// The last send error or rail refusal since the claim, until an
    /// outcome is recorded.
    pub fn last_error(&self) -> Option<Reason> {
        let at = *self.state.last_errors.get(&self.slot)?;
        Some(stored(self.state.texts.get(at), Reason::new))
    }
    /// Whether the key's send may be running: claimed by a process whose
    /// session has not ended (on a ledger one process writes, since its
    /// last opening), with no result recorded.
    pub fn send_running(&self) -> bool {
        self.entry.send_running
    }
    /// The worker of a shared ledger whose send [`KeyRecord::send_running`]
    /// is; `None` when no send runs, or the ledger is written by one
    /// process.
    pub fn send_worker(&self) -> Option<WorkerName> {
        if !self.entry.send_running {
            return None;
        }
        self.state.sessions.senders.get(&self.slot).cloned()
    }
}

/// A withdrawal the state knows, read from a [`State`].
#[derive(Clone, Copy)]
pub(crate) struct Withdrawal<'a> {
    state: &'a State,
    entry: &'a WithdrawalSlot,
}

impl<'a> Withdrawal<'a> {
    fn id_str(&self) -> &'a str {
        self.state.texts.get(self.entry.id)
    }
    pub(crate) fn id(&self) -> WithdrawalId {
        stored(self.id_str(), WithdrawalId::new)
    }
    fn currency(&self) -> &'a Currency {
        &self.state.currencies[self.entry.currency as usize]
    }
    pub(crate) fn fingerprint(&self) -> Fingerprint {
        let texts = &self.state.texts;
        Fingerprint::new(
            self.id(),
            self.entry.amount,
            self.currency().clone(),
            stored(texts.get(self.entry.destination), Destination::new),
        )
    }
    /// Whether `request` is this withdrawal. Builds nothing.
    pub(crate) fn matches(&self, request: WithdrawalView<'_>) -> bool {
        let texts = &self.state.texts;
        request.id().as_str() == self.id_str()
            && request.amount() == self.entry.amount
            && request.currency().as_str() == self.currency().as_str()
            && request.destination().as_str() == texts.get(self.entry.destination)
    }
    /// Minted by this ledger.
    pub(crate) fn created(&self) -> bool {
        self.entry.created
    }
    /// Funds are held for its current claim.
    pub(crate) fn held(&self) -> bool {
        self.entry.funds == Funds::Held
    }
    /// The record of the key holding it.
    pub(crate) fn holder(&self) -> Option<KeyRecord<'a>> {
        if self.entry.holder == NO_HOLDER {
            return None;
        }
        Some(KeyRecord {
            state: self.state,
            slot: self.entry.holder,
            entry: &self.state.keys[self.entry.holder],
            withdrawal: *self,
        })
    }
    /// Its funds, if they are where `funds` says.
    fn funds_if(&self, funds: Funds) -> Option<Hold> {
        (self.entry.funds == funds).then(|| Hold {
            amount: self.entry.amount,
            currency: self.currency().clone(),
        })
    }
}

/// What an event does to the claims, for a store that keeps constraint
/// rows of its own beside the log (a database's unique keys): the key and
/// the withdrawal it claims, or the ones it frees.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimChange {
    /// `key` takes the claim of `withdrawal`.
    Claims {
        /// The key.
        key: RequestKey,
        /// The withdrawal.
        withdrawal: WithdrawalId,
    },
    /// `key` and `withdrawal` are free to be claimed again.
    Frees {
        /// The key.
        key: RequestKey,
        /// The withdrawal it held.
        withdrawal: WithdrawalId,
    },
}

/// Funds reserved for a claimed withdrawal until its outcome is known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hold {
    /// How much.
    pub amount: Amount,
    /// In what.
    pub currency: Currency,
}

/// A key with an unknown outcome: the operator's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// The key.
    pub key: RequestKey,
    /// The withdrawal it holds.
    pub withdrawal: WithdrawalId,
    /// How much.
    pub amount: Amount,
    /// In what.
    pub currency: Currency,
    /// When it was claimed.
    pub claimed_at: Timestamp,
    /// Sequence number of the claim.
    pub claimed_seq: u64,
    /// The last send error or rail refusal, if any.
    pub last_error: Option<Reason>,
    /// Whether its send may be running: claimed by a process whose session
    /// has not ended, with no result recorded.
    pub send_running: bool,
    /// The worker of a shared ledger whose send it is, while it may run.
    pub send_worker: Option<WorkerName>,
    /// Whether funds are still held for it (a rail refusal gave them back).
    pub held: bool,
}

impl State {
    /// The state before any event.
    pub fn new() -> Self {
        State::default()
    }

    /// The names `kind` looks up, hashed: once per event, however many
    /// lookups judging and applying it make.
    pub(crate) fn names<'a>(&self, kind: &'a KindView<'_>) -> Names<'a> {
        let [key, id] = Names::texts(kind);
        let name = |text: Option<&'a str>| {
            let text = text?;
            Some(Name {
                text,
                hash: self.hasher.hash(text),
            })
        };
        Names {
            key: name(key),
            id: name(id),
        }
    }

    /// Phase one of applying an event: finds the slots of the names it
    /// looks up, so judging and applying it probe no index again.
    pub(crate) fn prefetch<'a>(&self, names: &Names<'a>) -> Prefetched<'a> {
        let found = |name: Option<Name<'a>>, find: &dyn Fn(Name<'a>) -> Option<u32>| {
            let name = name?;
            Some(Found {
                name,
                slot: find(name),
            })
        };
        Prefetched {
            key: found(names.key, &|name| {
                self.keys.find(&self.texts, name.hash, name.text)
            }),
            id: found(names.id, &|name| {
                self.withdrawals.find(&self.texts, name.hash, name.text)
            }),
        }
    }

    /// Reads what looking up `names` will read first (the index's group of
    /// buckets where each name would be), and changes nothing: a hint that
    /// lets the cache misses of several events' lookups overlap.
    pub(crate) fn read_ahead(&self, names: &Names<'_>) {
        if let Some(name) = names.key {
            self.keys.read_ahead(name.hash);
        }
        if let Some(name) = names.id {
            self.withdrawals.read_ahead(name.hash);
        }
    }

    /// The record of the key `prefetched` looked up.
    pub(crate) fn record_of(&self, prefetched: &Prefetched<'_>) -> Option<KeyRecord<'_>> {
        self.record_at(prefetched.key?.slot?)
    }

    /// The withdrawal `prefetched` looked up.
    pub(crate) fn withdrawal_of(&self, prefetched: &Prefetched<'_>) -> Option<Withdrawal<'_>> {
        Some(self.withdrawal_at(prefetched.id?.slot?))
    }

    /// Sequence number of the last event applied; 0 before any.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Whether ids minted elsewhere are accepted (as of the last open).
    pub fn accepts_foreign_ids(&self) -> bool {
        self.accept_foreign_ids
    }

    /// The record for `key`.
    pub fn record(&self, key: &str) -> Option<KeyRecord<'_>> {
        self.record_at(self.find_key(key)?)
    }

    /// The outcome recorded for `key`; `None` if unknown or in flight.
    pub fn outcome(&self, key: &str) -> Option<WithdrawalRequest> {
        self.record(key)?.outcome()
    }

    /// The key holding withdrawal `id`.
    pub fn claimed_by(&self, id: &str) -> Option<RequestKey> {
        Some(self.withdrawal(id)?.holder()?.key())
    }

    /// The funds held for withdrawal `id`: reserved for its claim until the
    /// outcome is known.
    pub fn held(&self, id: &str) -> Option<Hold> {
        self.withdrawal(id)?.funds_if(Funds::Held)
    }

    /// The funds of withdrawal `id` that left custody: its outcome is sent
    /// or confirmed. A later failure on the rail gives them back.
    pub fn captured(&self, id: &str) -> Option<Hold> {
        self.withdrawal(id)?.funds_if(Funds::Captured)
    }

    /// The epoch of the last opening or start of a worker's session, which
    /// the ids minted after it carry.
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// The epoch of `worker`'s live session on a shared ledger: `None` if it
    /// never started, or its session ended (by its next start, an
    /// operator, or an opening).
    pub fn session(&self, worker: &str) -> Option<u64> {
        self.sessions.epoch_of(worker)
    }

    /// Every worker with a live session, with its session's epoch, by name.
    pub fn sessions(&self) -> impl Iterator<Item = (&WorkerName, u64)> {
        self.sessions
            .live
            .iter()
            .map(|(worker, &epoch)| (worker, epoch))
    }

    /// What `kind`, the event after this state, does to the claims, as
    /// [`apply`] applies it: a claim, a record or a resolve under a key
    /// without a record claim; a release frees its key and withdrawal.
    pub fn claim_change(&self, kind: &EventKind) -> Option<ClaimChange> {
        let claims = |key: &RequestKey, request: &WithdrawalRequest| ClaimChange::Claims {
            key: key.clone(),
            withdrawal: request.id().clone(),
        };
        match kind {
            EventKind::Claimed { key, request, .. } | EventKind::Recorded { key, request } => {
                Some(claims(key, request))
            }
            EventKind::Resolved { key, outcome, .. } if self.record(key).is_none() => {
                Some(claims(key, outcome))
            }
            EventKind::Released { key, .. } => self.record(key).map(|record| ClaimChange::Frees {
                key: key.clone(),
                withdrawal: record.withdrawal(),
            }),
            _ => None,
        }
    }

    /// Whether `request`'s amount more can be held without passing
    /// [`HELD_TOTAL_MAX`]: in the currency of `withdrawal`, the slot a
    /// claim would hold, if the state has it, else in the request's.
    pub(crate) fn can_hold(
        &self,
        withdrawal: Option<Withdrawal<'_>>,
        request: &WithdrawalView<'_>,
    ) -> bool {
        let number = match withdrawal {
            Some(withdrawal) => Some(withdrawal.entry.currency),
            None => self
                .currency_numbers
                .get(request.currency().as_str())
                .copied(),
        };
        number.is_none_or(|number| {
            self.held[number as usize]
                .checked_add(request.amount().value())
                .is_some()
        })
    }

    /// Held funds per currency. Currencies with nothing held are absent.
    pub fn held_totals(&self) -> BTreeMap<Currency, Decimal> {
        self.totals(&self.held)
    }

    /// Captured funds per currency: what left custody. Currencies with
    /// nothing captured are absent.
    pub fn captured_totals(&self) -> BTreeMap<Currency, Decimal> {
        self.totals(&self.captured)
    }

    fn totals(&self, sums: &[Decimal]) -> BTreeMap<Currency, Decimal> {
        self.currencies
            .iter()
            .zip(sums)
            .filter(|(_, total)| !total.is_zero())
            // Normalised, so a total prints the same however it was reached.
            .map(|(currency, total)| (currency.clone(), total.normalize()))
            .collect()
    }

    /// Whether `key` has a send running in this process.
    pub fn is_sending(&self, key: &str) -> bool {
        self.find_key(key)
            .is_some_and(|slot| self.keys[slot].send_running)
    }

    /// Whether this ledger minted withdrawal `id`.
    pub fn was_created(&self, id: &str) -> bool {
        self.withdrawal(id).is_some_and(|entry| entry.created())
    }

    /// The fingerprint of withdrawal `id`, if this ledger minted it or a key
    /// holds it.
    pub fn fingerprint(&self, id: &str) -> Option<Fingerprint> {
        Some(self.withdrawal(id)?.fingerprint())
    }

    /// Every key with an unknown outcome, oldest claim first. (Settled
    /// pairs set apart are never in flight.)
    pub fn in_flight(&self) -> Vec<InFlight> {
        let mut keys: Vec<InFlight> = self
            .keys
            .in_use()
            .filter_map(|slot| self.record_at(slot))
            .filter(|record| record.outcome_state().is_none())
            .map(|record| InFlight {
                key: record.key(),
                withdrawal: record.withdrawal(),
                amount: record.withdrawal.entry.amount,
                currency: record.withdrawal.currency().clone(),
                claimed_at: record.claimed_at(),
                claimed_seq: record.claimed_seq(),
                last_error: record.last_error(),
                send_running: record.send_running(),
                send_worker: record.send_worker(),
                held: record.withdrawal.held(),
            })
            .collect();
        keys.sort_by_key(|entry| entry.claimed_seq);
        keys
    }

    /// Every record with its key, in no particular order.
    ///
    /// # Panics
    /// On a ledger's own state with settled pairs set apart, which never
    /// leaves the ledger ([`crate::Ledger::state`] brings them back).
    pub fn records(&self) -> impl Iterator<Item = (RequestKey, KeyRecord<'_>)> {
        self.assert_whole("records");
        self.keys.in_use().filter_map(|slot| {
            let record = self.record_at(slot)?;
            Some((record.key(), record))
        })
    }

    /// Every claim (withdrawal id, holder key), in no particular order.
    ///
    /// # Panics
    /// As [`State::records`].
    pub fn claims(&self) -> impl Iterator<Item = (WithdrawalId, RequestKey)> {
        self.assert_whole("claims");
        self.withdrawals.in_use().filter_map(|slot| {
            let withdrawal = self.withdrawal_at(slot);
            Some((withdrawal.id(), withdrawal.holder()?.key()))
        })
    }

    /// Every hold, in no particular order. (Settled pairs set apart hold
    /// nothing.)
    pub fn holds(&self) -> impl Iterator<Item = (WithdrawalId, Hold)> {
        self.withdrawals.in_use().filter_map(|slot| {
            let withdrawal = self.withdrawal_at(slot);
            Some((withdrawal.id(), withdrawal.funds_if(Funds::Held)?))
        })
    }

    /// Number of request keys with a record.
    pub fn key_count(&self) -> usize {
        let out_of_memory = self.settled.as_ref().map_or(0, |settled| settled.pairs);
        self.keys.len() + usize::try_from(out_of_memory).unwrap_or(usize::MAX)
    }

    /// Number of refusals recorded in the log so far.
    pub fn refusal_count(&self) -> u64 {
        self.refusals
    }

    /// Withdrawal `id`, if this ledger minted it or a key holds it.
    pub(crate) fn withdrawal(&self, id: &str) -> Option<Withdrawal<'_>> {
        Some(self.withdrawal_at(self.find_withdrawal(id)?))
    }

    /// The record in key slot `slot`; `None` if its withdrawal is
    /// forgotten, which only a diverging log brings about.
    fn record_at(&self, slot: u32) -> Option<KeyRecord<'_>> {
        let entry = &self.keys[slot];
        Some(KeyRecord {
            state: self,
            slot,
            entry,
            withdrawal: self.withdrawal_at(self.listed_withdrawal(entry.withdrawal)?),
        })
    }

    /// The slot a record naming withdrawal slot `named` refers to: a record
    /// names its withdrawal by id, and a slot stands for the id while it is
    /// listed. In a log that diverged, a foreign withdrawal can be
    /// forgotten while a record names it, and come back under a new slot.
    fn listed_withdrawal(&self, named: u32) -> Option<u32> {
        let entry = &self.withdrawals[named];
        if entry.listed {
            return Some(named);
        }
        self.find_withdrawal(self.texts.get(entry.id))
    }

    fn withdrawal_at(&self, slot: u32) -> Withdrawal<'_> {
        Withdrawal {
            state: self,
            entry: &self.withdrawals[slot],
        }
    }

    fn find_key(&self, key: &str) -> Option<u32> {
        self.keys.find(&self.texts, self.hasher.hash(key), key)
    }

    fn find_withdrawal(&self, id: &str) -> Option<u32> {
        self.withdrawals.find(&self.texts, self.hasher.hash(id), id)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_key_parts;
