//! The projections the log is replayed into, and `apply`, the only code
//! that changes them.
//!
//! The three projections the ledger answers from (records: key to what it
//! claimed and what came of it; claims: withdrawal to holder key; holds:
//! withdrawal to funds reserved) are kept as one slot per key and one slot
//! per withdrawal: a withdrawal's fingerprint, holder and hold live in its
//! slot; a key's slot names its withdrawal's slot and keeps the outcome's
//! progress. Queries put the values back together.
//!
//! The state holds every claimed withdrawal of the ledger's life in memory,
//! so its layout is about bytes: every piece of text (keys, ids,
//! destinations, references, reasons, requesters) is packed end to end in
//! one buffer ([`Texts`]), slots refer to it by offset and length, and two
//! hash tables of slot numbers find a slot by key or by id. An owned string
//! per field would cost an allocation header and a pointer each, and a map
//! of owned keys a wide entry per slot of spare capacity.
//!
//! A log that diverged, which only `Ledger::verify` applies, asks for what
//! the code never decides: a key claiming twice, two keys on one
//! withdrawal, a send error after an outcome. Slot numbers stay valid
//! through all of it (a withdrawal slot is not reused while a record names
//! it), and the answers are those of a state keeping owned text, but for
//! one: the first withdrawal of a key that claims again is left unclaimed,
//! rather than claimed by a key whose record names another withdrawal.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::num::NonZeroU16;

use hashbrown::HashTable;
use payonce_model::{
    Actor, Amount, Currency, Destination, FieldError, Fingerprint, Progress, Reason, Reference,
    RequestKey, TextView, WithdrawalId, WithdrawalRequest, WithdrawalState, WithdrawalView,
};
use rust_decimal::Decimal;

use crate::event::{Event, EventView, KindView};
use crate::time::Timestamp;

/// Most keys, and most withdrawals, the state can hold at once: slots are
/// numbered with 32 bits. Each costs memory long before this.
pub const SLOTS_MAX: usize = u32::MAX as usize;

/// The most funds held in one currency at once: the largest decimal the
/// state can total, about 7.9 × 10^28. A claim that would pass it is
/// refused ([`crate::Refusal::HeldTotalTooLarge`]).
pub const HELD_TOTAL_MAX: Decimal = Decimal::MAX;

/// Text freed by releases that the buffer may hold before it is compacted:
/// at least this many bytes, and at least as many as are still in use.
const GARBAGE_MIN: usize = 1 << 20;

/// Where a piece of text sits in [`Texts`]: a 48-bit offset and a length.
/// Validated text is never empty, which leaves `Option<TextRef>` its niche.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TextRef {
    offset_low: u32,
    offset_high: u16,
    len: NonZeroU16,
}

/// Every piece of text the state holds, end to end. Text is appended and
/// never moved, except by `State::compact`; freed text is only counted.
#[derive(Debug, Clone, Default)]
struct Texts {
    buffer: String,
    garbage: usize,
}

impl Texts {
    fn push(&mut self, text: &str) -> TextRef {
        let offset = self.buffer.len();
        // Validated text is at most a few KiB and never empty; a buffer of
        // 2^48 bytes would not fit in memory.
        let len = u16::try_from(text.len())
            .ok()
            .and_then(NonZeroU16::new)
            .unwrap_or_else(|| panic!("text of {} bytes kept in the state", text.len()));
        assert!(
            offset >> 48 == 0,
            "the state's text buffer outgrew 48-bit offsets"
        );
        self.buffer.push_str(text);
        TextRef {
            offset_low: offset as u32,
            offset_high: (offset >> 32) as u16,
            len,
        }
    }

    fn get(&self, at: TextRef) -> &str {
        let start = (usize::from(at.offset_high) << 32) | at.offset_low as usize;
        &self.buffer[start..start + usize::from(at.len.get())]
    }

    fn free(&mut self, at: TextRef) {
        self.garbage += usize::from(at.len.get());
    }

    fn free_option(&mut self, at: Option<TextRef>) {
        if let Some(at) = at {
            self.free(at);
        }
    }

    /// Whether enough text has been freed that copying out what is still
    /// in use pays for itself.
    fn wants_compacting(&self) -> bool {
        self.garbage >= GARBAGE_MIN && self.garbage * 2 >= self.buffer.len()
    }

    /// Copies `at` into `into`, for compaction.
    fn move_to(&self, into: &mut Texts, at: &mut TextRef) {
        *at = into.push(self.get(*at));
    }

    fn move_option_to(&self, into: &mut Texts, at: &mut Option<TextRef>) {
        if let Some(at) = at {
            self.move_to(into, at);
        }
    }
}

/// Builds a model value back from text the state stored. The text passed
/// the same rules when it was stored, and a slot's text stays where its
/// slot says until the slot is freed, so it passes again.
fn stored<'t, T>(text: &'t str, parse: impl FnOnce(&'t str) -> Result<T, FieldError>) -> T {
    match parse(text) {
        Ok(value) => value,
        Err(error) => panic!("text {text:?} was valid when stored and now is not: {error}"),
    }
}

/// Slots of one kind, numbered, reused once freed, and a hash table of the
/// numbers in use that finds a slot by the text it is named by.
#[derive(Clone)]
struct Slots<T> {
    entries: Vec<T>,
    /// The hash of each slot's name, beside it: growing the table moves
    /// every entry by its hash, and hashing every name again (text spread
    /// over the whole buffer) cost a sixth of a replay. 32 bits of it, 4
    /// bytes a slot.
    hashes: Vec<u32>,
    free: Vec<u32>,
    table: HashTable<u32>,
}

/// A slot named by a piece of text: a key by the key, a withdrawal by its id.
trait Named {
    fn name(&self) -> TextRef;
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Vec::new(),
            hashes: Vec::new(),
            free: Vec::new(),
            table: HashTable::new(),
        }
    }
}

/// The 32 bits of a name's hash that a slot keeps.
pub(crate) fn name_hash(hasher: &RandomState, name: &str) -> u32 {
    // Any 32 bits of SipHash's output are as good as any other.
    hasher.hash_one(name) as u32
}

/// The table's hash of a kept 32-bit hash. The table places an entry by the
/// low bits of its hash and tells entries of one group apart by the top 7;
/// with the 32 bits in both halves, the two are independent up to 2^25
/// buckets, and beyond that only tell apart less well.
fn table_hash(hash: u32) -> u64 {
    u64::from(hash) << 32 | u64::from(hash)
}

impl<T: Named> Slots<T> {
    /// The slot named `name`, whose [`name_hash`] is `hash`.
    fn find_hashed(&self, texts: &Texts, hash: u32, name: &str) -> Option<u32> {
        let (entries, hashes) = (&self.entries, &self.hashes);
        self.table
            .find(table_hash(hash), |&slot| {
                hashes[slot as usize] == hash && texts.get(entries[slot as usize].name()) == name
            })
            .copied()
    }

    /// Reads the control bytes that finding a name whose [`name_hash`] is
    /// `hash` probes, as a lookup of a name not in the table does, and
    /// finds nothing: see [`State::read_ahead`].
    fn read_ahead(&self, hash: u32) {
        std::hint::black_box(self.table.find(table_hash(hash), |_| false));
    }

    /// Puts `entry`, whose name's [`name_hash`] is `hash`, in a free slot,
    /// or a new one, and returns its number. Its name must not be in use.
    fn insert(&mut self, hash: u32, entry: T) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.entries[slot as usize] = entry;
                self.hashes[slot as usize] = hash;
                slot
            }
            None => {
                assert!(
                    self.entries.len() < SLOTS_MAX,
                    "the state holds {SLOTS_MAX} slots already"
                );
                self.entries.push(entry);
                self.hashes.push(hash);
                (self.entries.len() - 1) as u32
            }
        };
        let hashes = &self.hashes;
        self.table.insert_unique(table_hash(hash), slot, |&slot| {
            table_hash(hashes[slot as usize])
        });
        slot
    }

    /// Takes slot `slot` out of the table: its name no longer finds it.
    /// The caller frees it (pushes it on `free`) once nothing names it.
    fn unlist(&mut self, slot: u32) {
        let hash = table_hash(self.hashes[slot as usize]);
        if let Ok(found) = self.table.find_entry(hash, |&found| found == slot) {
            found.remove();
        }
    }

    /// The numbers of the slots in use, in no particular order.
    fn in_use(&self) -> impl Iterator<Item = u32> + '_ {
        self.table.iter().copied()
    }

    /// Calls `change` on every slot in use.
    fn change_in_use(&mut self, mut change: impl FnMut(&mut T)) {
        for &slot in self.table.iter() {
            change(&mut self.entries[slot as usize]);
        }
    }

    fn len(&self) -> usize {
        self.table.len()
    }
}

impl<T> std::ops::Index<u32> for Slots<T> {
    type Output = T;
    fn index(&self, slot: u32) -> &T {
        &self.entries[slot as usize]
    }
}

impl<T> std::ops::IndexMut<u32> for Slots<T> {
    fn index_mut(&mut self, slot: u32) -> &mut T {
        &mut self.entries[slot as usize]
    }
}

/// What a request key claimed and what came of it.
#[derive(Debug, Clone)]
struct KeySlot {
    key: TextRef,
    /// The slot of the withdrawal it claimed.
    withdrawal: u32,
    claimed_seq: u64,
    claimed_at: Timestamp,
    /// The outcome's state; `None` while in flight.
    state: Option<WithdrawalState>,
    /// Its send is running in this process: claimed since the last open
    /// and not completed.
    send_running: bool,
    /// The outcome's reference.
    reference: Option<TextRef>,
    /// The outcome's reason.
    reason: Option<TextRef>,
    /// The outcome's requester; `None` while in flight.
    requested_by: Option<TextRef>,
}

/// A withdrawal: its fingerprint, holder and hold.
#[derive(Debug, Clone)]
struct WithdrawalSlot {
    id: TextRef,
    destination: TextRef,
    amount: Amount,
    /// Its place in [`State::currencies`].
    currency: u32,
    /// The slot of the key holding it, or [`NO_HOLDER`].
    holder: u32,
    /// How many keys' records name this slot. One at most, but in a log
    /// that diverged (which only `Ledger::verify` applies): the slot is not
    /// reused while a record names it.
    named_by: u32,
    /// Minted by this ledger.
    created: bool,
    /// Funds reserved for the current claim.
    held: bool,
    /// Found by its id. A foreign withdrawal released by its holder is
    /// forgotten; its slot stays, unlisted, while another record names it.
    listed: bool,
}

impl WithdrawalSlot {
    /// Neither found by id nor named by a record: free for reuse.
    fn is_free(&self) -> bool {
        !self.listed && self.named_by == 0
    }
}

const NO_HOLDER: u32 = u32::MAX;

impl Named for KeySlot {
    fn name(&self) -> TextRef {
        self.key
    }
}

impl Named for WithdrawalSlot {
    fn name(&self) -> TextRef {
        self.id
    }
}

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
    /// Request keys and withdrawal ids come from clients: the tables hash
    /// them with a keyed hash so nobody can choose colliding ones.
    hasher: RandomState,
    /// One copy of each currency code, numbered.
    currencies: Vec<Currency>,
    currency_numbers: HashMap<Currency, u32>,
    /// References replaced by bumps, by key slot: rare, so kept aside.
    replaced: HashMap<u32, Box<[Reference]>>,
    /// The last send error or rail refusal, by key slot, until an outcome
    /// is recorded: only keys whose send failed have one.
    last_errors: HashMap<u32, TextRef>,
    /// Funds held, by currency number: a sum per claim and per outcome,
    /// where a map by currency cost a lookup, a clone of the code and a
    /// normalisation each.
    held: Vec<Decimal>,
    /// Keys with `send_running` set.
    sending: usize,
    /// Every key slot whose `send_running` was set since the last open
    /// (some since cleared), so an open clears them without visiting every
    /// key. Pruned when it holds more than twice the running sends.
    running: Vec<u32>,
    refusals: u64,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Sorted, so two states with the same answers print the same.
        let records: BTreeMap<&str, Record<'_>> = self
            .keys
            .in_use()
            .filter_map(|slot| self.record_at(slot))
            .map(|record| (record.key_str(), record))
            .collect();
        let withdrawals: BTreeMap<&str, (Option<&str>, bool, bool)> = self
            .withdrawals
            .in_use()
            .map(|slot| {
                let withdrawal = self.withdrawal_at(slot);
                let holder = withdrawal.holder().map(|record| record.key_str());
                let entry = withdrawal.entry;
                (withdrawal.id_str(), (holder, entry.created, entry.held))
            })
            .collect();
        f.debug_struct("State")
            .field("last_seq", &self.last_seq)
            .field("accept_foreign_ids", &self.accept_foreign_ids)
            .field("records", &records)
            .field("withdrawals (holder, created, held)", &withdrawals)
            .field("held_totals", &self.held_totals())
            .field("refusals", &self.refusals)
            .finish()
    }
}

/// Two states are equal when every query answers the same: slot numbers,
/// buffer offsets and hash order are how a state got there, not what it
/// believes.
impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        let same_record = |mine: Record<'_>| {
            other.record(mine.key_str()).is_some_and(|theirs| {
                mine.withdrawal.id_str() == theirs.withdrawal.id_str()
                    && mine.entry.claimed_seq == theirs.entry.claimed_seq
                    && mine.entry.claimed_at == theirs.entry.claimed_at
                    && mine.entry.send_running == theirs.entry.send_running
                    && mine.progress() == theirs.progress()
                    && mine.last_error() == theirs.last_error()
            })
        };
        let same_withdrawal = |mine: Withdrawal<'_>| {
            other.withdrawal(mine.id_str()).is_some_and(|theirs| {
                mine.fingerprint() == theirs.fingerprint()
                    && mine.entry.created == theirs.entry.created
                    && mine.entry.held == theirs.entry.held
                    && mine.holder().map(|record| record.key_str())
                        == theirs.holder().map(|record| record.key_str())
            })
        };
        self.last_seq == other.last_seq
            && self.accept_foreign_ids == other.accept_foreign_ids
            && self.refusals == other.refusals
            && self.held_totals() == other.held_totals()
            && self.keys.len() == other.keys.len()
            && self.withdrawals.len() == other.withdrawals.len()
            && self.records().count() == other.records().count()
            && self
                .keys
                .in_use()
                .filter_map(|slot| self.record_at(slot))
                .all(same_record)
            && self
                .withdrawals
                .in_use()
                .all(|slot| same_withdrawal(self.withdrawal_at(slot)))
    }
}

impl Eq for State {}

/// What a request key claimed, and what came of it: a view into a [`State`].
#[derive(Clone, Copy)]
pub struct Record<'a> {
    state: &'a State,
    slot: u32,
    entry: &'a KeySlot,
    withdrawal: Withdrawal<'a>,
}

impl fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("key", &self.key_str())
            .field("withdrawal", &self.withdrawal.id_str())
            .field("outcome", &self.progress())
            .field("claimed_seq", &self.entry.claimed_seq)
            .field("claimed_at", &self.entry.claimed_at)
            .field("last_error", &self.last_error())
            .field("send_running", &self.entry.send_running)
            .finish()
    }
}

impl<'a> Record<'a> {
    /// The request key.
    pub fn key(&self) -> RequestKey {
        stored(self.key_str(), RequestKey::new)
    }
    pub(crate) fn key_str(&self) -> &'a str {
        self.state.texts.get(self.entry.key)
    }
    fn text(&self, at: Option<TextRef>) -> Option<&'a str> {
        Some(self.state.texts.get(at?))
    }
    /// The withdrawal the key claimed.
    pub fn withdrawal(&self) -> WithdrawalId {
        self.withdrawal.id()
    }
    /// The withdrawal's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.withdrawal.fingerprint()
    }
    /// Whether `request` is the withdrawal the key claimed. Builds nothing.
    pub fn matches(&self, request: &WithdrawalRequest) -> bool {
        self.matches_view(request.view())
    }
    /// [`Record::matches`], for a borrowed request.
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
    /// [`Record::has_outcome`], for a borrowed outcome.
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
    /// Whether the key's send is running in this process right now.
    pub fn send_running(&self) -> bool {
        self.entry.send_running
    }
}

/// A withdrawal the state knows: a view into a [`State`].
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
        self.entry.held
    }
    /// The record of the key holding it.
    pub(crate) fn holder(&self) -> Option<Record<'a>> {
        if self.entry.holder == NO_HOLDER {
            return None;
        }
        Some(Record {
            state: self.state,
            slot: self.entry.holder,
            entry: &self.state.keys[self.entry.holder],
            withdrawal: *self,
        })
    }
    fn hold(&self) -> Option<Hold> {
        self.entry.held.then(|| Hold {
            amount: self.entry.amount,
            currency: self.currency().clone(),
        })
    }
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
    /// Whether its send is running in this process right now.
    pub send_running: bool,
    /// Whether funds are still held for it (a rail refusal gave them back).
    pub held: bool,
}

impl State {
    /// The state before any event.
    pub fn new() -> Self {
        State::default()
    }

    /// The state before any event, hashing names under `hasher`: replay
    /// hashes an event's names on the thread that decodes it.
    pub(crate) fn with_hasher(hasher: RandomState) -> Self {
        State {
            hasher,
            ..State::default()
        }
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
    pub fn record(&self, key: &str) -> Option<Record<'_>> {
        self.record_hashed(key, None)
    }

    /// [`State::record`], with the key's [`name_hash`] if known.
    pub(crate) fn record_hashed(&self, key: &str, hash: Option<u32>) -> Option<Record<'_>> {
        self.record_at(self.find_key_hashed(key, hash)?)
    }

    /// The outcome recorded for `key`; `None` if unknown or in flight.
    pub fn outcome(&self, key: &str) -> Option<WithdrawalRequest> {
        self.record(key)?.outcome()
    }

    /// The key holding withdrawal `id`.
    pub fn claimed_by(&self, id: &str) -> Option<RequestKey> {
        Some(self.withdrawal(id)?.holder()?.key())
    }

    /// The funds held for withdrawal `id`.
    pub fn held(&self, id: &str) -> Option<Hold> {
        self.withdrawal(id)?.hold()
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
        self.currencies
            .iter()
            .zip(&self.held)
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

    /// Every key with an unknown outcome, oldest claim first.
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
                held: record.withdrawal.entry.held,
            })
            .collect();
        keys.sort_by_key(|entry| entry.claimed_seq);
        keys
    }

    /// Every record with its key, in no particular order.
    pub fn records(&self) -> impl Iterator<Item = (RequestKey, Record<'_>)> {
        self.keys.in_use().filter_map(|slot| {
            let record = self.record_at(slot)?;
            Some((record.key(), record))
        })
    }

    /// Every claim (withdrawal id, holder key), in no particular order.
    pub fn claims(&self) -> impl Iterator<Item = (WithdrawalId, RequestKey)> {
        self.withdrawals.in_use().filter_map(|slot| {
            let withdrawal = self.withdrawal_at(slot);
            Some((withdrawal.id(), withdrawal.holder()?.key()))
        })
    }

    /// Every hold, in no particular order.
    pub fn holds(&self) -> impl Iterator<Item = (WithdrawalId, Hold)> {
        self.withdrawals.in_use().filter_map(|slot| {
            let withdrawal = self.withdrawal_at(slot);
            Some((withdrawal.id(), withdrawal.hold()?))
        })
    }

    /// Number of request keys with a record.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Number of refusals recorded in the log so far.
    pub fn refusal_count(&self) -> u64 {
        self.refusals
    }

    /// Withdrawal `id`, if this ledger minted it or a key holds it.
    pub(crate) fn withdrawal(&self, id: &str) -> Option<Withdrawal<'_>> {
        self.withdrawal_hashed(id, None)
    }

    /// [`State::withdrawal`], with the id's [`name_hash`] if known.
    pub(crate) fn withdrawal_hashed(&self, id: &str, hash: Option<u32>) -> Option<Withdrawal<'_>> {
        Some(self.withdrawal_at(self.find_withdrawal_hashed(id, hash)?))
    }

    /// The record in key slot `slot`; `None` if its withdrawal is
    /// forgotten, which only a diverging log brings about.
    fn record_at(&self, slot: u32) -> Option<Record<'_>> {
        let entry = &self.keys[slot];
        Some(Record {
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
        self.find_key_hashed(key, None)
    }

    /// Reads the tables' control bytes that finding the names hashed in
    /// `names` will probe (not the slots or text a match leads to), and
    /// changes nothing. With millions of names the tables are far larger
    /// than the processor's caches, and each lookup of a name not seen
    /// lately misses them; replay reads ahead for several events at once,
    /// so their misses overlap one another instead of each stalling the
    /// event that needs it.
    pub(crate) fn read_ahead(&self, names: NameHashes) {
        if let Some(hash) = names.key {
            self.keys.read_ahead(hash);
        }
        if let Some(hash) = names.id {
            self.withdrawals.read_ahead(hash);
        }
    }

    fn find_key_hashed(&self, key: &str, hash: Option<u32>) -> Option<u32> {
        self.keys
            .find_hashed(&self.texts, self.hash_of(key, hash), key)
    }

    /// The [`name_hash`] of `name`: `known` if given, which must be it.
    fn hash_of(&self, name: &str, known: Option<u32>) -> u32 {
        match known {
            Some(hash) => {
                debug_assert_eq!(
                    hash,
                    name_hash(&self.hasher, name),
                    "a hash computed ahead is not {name:?}'s"
                );
                hash
            }
            None => name_hash(&self.hasher, name),
        }
    }

    fn find_withdrawal(&self, id: &str) -> Option<u32> {
        self.find_withdrawal_hashed(id, None)
    }

    fn find_withdrawal_hashed(&self, id: &str, hash: Option<u32>) -> Option<u32> {
        self.withdrawals
            .find_hashed(&self.texts, self.hash_of(id, hash), id)
    }

    /// The number of `currency`, numbering it if new.
    fn currency_number(&mut self, code: TextView<'_, Currency>) -> u32 {
        if let Some(&number) = self.currency_numbers.get(code.as_str()) {
            return number;
        }
        let currency = code.to_value();
        let number = u32::try_from(self.currencies.len())
            .unwrap_or_else(|_| panic!("the state holds {} currencies", self.currencies.len()));
        self.currencies.push(currency.clone());
        self.held.push(Decimal::ZERO);
        self.currency_numbers.insert(currency, number);
        number
    }

    /// The slot of `request`'s withdrawal, made if new.
    fn withdrawal_slot(&mut self, request: WithdrawalView<'_>, hash: Option<u32>) -> u32 {
        let id = request.id();
        let hash = self.hash_of(&id, hash);
        if let Some(slot) = self.withdrawals.find_hashed(&self.texts, hash, &id) {
            return slot;
        }
        let entry = WithdrawalSlot {
            id: self.texts.push(&request.id()),
            destination: self.texts.push(&request.destination()),
            amount: request.amount(),
            currency: self.currency_number(request.currency()),
            holder: NO_HOLDER,
            named_by: 0,
            created: false,
            held: false,
            listed: true,
        };
        self.withdrawals.insert(hash, entry)
    }

    fn claim(
        &mut self,
        key: &str,
        request: WithdrawalView<'_>,
        event: &EventView<'_>,
        names: NameHashes,
    ) -> u32 {
        let withdrawal = self.withdrawal_slot(request, names.id);
        self.withdrawals[withdrawal].named_by += 1;
        let entry = KeySlot {
            key: self.texts.push(key),
            withdrawal,
            claimed_seq: event.seq,
            claimed_at: event.at,
            state: None,
            send_running: false,
            reference: None,
            reason: None,
            requested_by: None,
        };
        let hash = self.hash_of(key, names.key);
        let slot = match self.keys.find_hashed(&self.texts, hash, key) {
            // A key claims once. Only a diverging log, applied anyway by
            // `Ledger::verify` to report on it, claims again: the new record
            // replaces the old (a send running stays running).
            Some(slot) => {
                let running = self.keys[slot].send_running;
                let previous = self.keys[slot].withdrawal;
                self.free_key_texts(slot);
                if self.withdrawals[previous].holder == slot {
                    // The slot now names another withdrawal.
                    self.withdrawals[previous].holder = NO_HOLDER;
                }
                self.unname(previous);
                self.keys[slot] = KeySlot {
                    send_running: running,
                    ..entry
                };
                slot
            }
            None => self.keys.insert(hash, entry),
        };
        let held = &mut self.withdrawals[withdrawal];
        held.holder = slot;
        if !std::mem::replace(&mut held.held, true) {
            // `decide` refuses a claim that would pass HELD_TOTAL_MAX; only
            // a log that diverged, which `Ledger::verify` applies to report
            // on it, gets here with one, and its total stops at the most.
            let total = &mut self.held[held.currency as usize];
            *total = total.saturating_add(held.amount.value());
        }
        slot
    }

    /// Counts the text of key slot `slot` (its key, outcome and last error)
    /// as freed, and drops its replaced references.
    fn free_key_texts(&mut self, slot: u32) {
        self.texts.free(self.keys[slot].key);
        self.free_outcome(slot);
    }

    /// Counts the text of key slot `slot`'s outcome and last error as
    /// freed, and drops its replaced references: what a new outcome, or
    /// the end of the record, replaces.
    fn free_outcome(&mut self, slot: u32) {
        let entry = &self.keys[slot];
        for at in [entry.reference, entry.reason, entry.requested_by] {
            self.texts.free_option(at);
        }
        self.clear_last_error(slot);
        if !self.replaced.is_empty() {
            self.replaced.remove(&slot);
        }
    }

    /// One record fewer names withdrawal slot `slot`; frees the slot if it
    /// was forgotten and that was the last.
    fn unname(&mut self, slot: u32) {
        let entry = &mut self.withdrawals[slot];
        entry.named_by -= 1;
        if entry.is_free() {
            let (id, destination) = (entry.id, entry.destination);
            self.texts.free(id);
            self.texts.free(destination);
            self.withdrawals.free.push(slot);
        }
    }

    fn set_send_running(&mut self, slot: u32, running: bool) {
        let entry = &mut self.keys[slot];
        if entry.send_running == running {
            return;
        }
        entry.send_running = running;
        if !running {
            self.sending -= 1;
            return;
        }
        self.sending += 1;
        self.running.push(slot);
        if self.running.len() > 2 * self.sending + 64 {
            let keys = &self.keys;
            self.running.retain(|&slot| keys[slot].send_running);
            self.running.sort_unstable();
            self.running.dedup();
        }
    }

    /// Ends the hold on withdrawal slot `slot`, captured or released: either
    /// way the funds are no longer reserved.
    fn end_hold(&mut self, slot: u32) {
        let entry = &mut self.withdrawals[slot];
        if !std::mem::replace(&mut entry.held, false) {
            return;
        }
        let total = &mut self.held[entry.currency as usize];
        *total = total.saturating_sub(entry.amount.value());
    }

    /// Records `outcome` as the outcome of key slot `slot`.
    fn set_outcome(&mut self, slot: u32, outcome: WithdrawalView<'_>) {
        self.free_outcome(slot);
        let reference = outcome.reference().map(|text| self.texts.push(&text));
        let reason = outcome.reason().map(|text| self.texts.push(&text));
        let requested_by = Some(self.texts.push(&outcome.requested_by()));
        let entry = &mut self.keys[slot];
        entry.state = Some(outcome.state());
        entry.reference = reference;
        entry.reason = reason;
        entry.requested_by = requested_by;
        let named = entry.withdrawal;
        if !outcome.replaced().is_empty() {
            self.replaced.insert(slot, outcome.replaced().into());
        }
        // The outcome's own withdrawal: the record's, but in a log that
        // diverged.
        let record_names_it = self.withdrawals[named].listed
            && self.texts.get(self.withdrawals[named].id) == outcome.id().as_str();
        let withdrawal = if record_names_it {
            Some(named)
        } else {
            self.find_withdrawal(&outcome.id())
        };
        let Some(withdrawal) = withdrawal else {
            return;
        };
        match outcome.state() {
            // The money moved: the hold is captured.
            WithdrawalState::Sent | WithdrawalState::Confirmed => self.end_hold(withdrawal),
            // It did not and will not: the hold is released.
            WithdrawalState::Failed | WithdrawalState::Rejected => self.end_hold(withdrawal),
            // Not sent yet: the funds stay reserved.
            WithdrawalState::Requested | WithdrawalState::Approved | WithdrawalState::Sending => {}
        }
    }

    /// Records `error` as the last send error of key slot `slot`.
    fn set_last_error(&mut self, slot: u32, error: &str) {
        let at = self.texts.push(error);
        if let Some(old) = self.last_errors.insert(slot, at) {
            self.texts.free(old);
        }
    }

    fn clear_last_error(&mut self, slot: u32) {
        if self.last_errors.is_empty() {
            return;
        }
        if let Some(old) = self.last_errors.remove(&slot) {
            self.texts.free(old);
        }
    }

    /// Drops `key`'s record, and its withdrawal's claim and hold if the key
    /// still holds it.
    fn release(&mut self, key: &str) {
        let Some(slot) = self.find_key(key) else {
            return;
        };
        let named = self.keys[slot].withdrawal;
        self.set_send_running(slot, false);
        self.free_key_texts(slot);
        self.keys.unlist(slot);
        self.keys.free.push(slot);
        // A late release never evicts a claim that moved to another key.
        // Only the slot the key names can be held by it.
        if self.withdrawals[named].holder == slot {
            self.end_hold(named);
            self.withdrawals[named].holder = NO_HOLDER;
            if !self.withdrawals[named].created {
                // Nothing else refers to a foreign withdrawal nobody holds.
                self.withdrawals.unlist(named);
                self.withdrawals[named].listed = false;
            }
        }
        self.unname(named);
    }

    /// Copies the text still in use into a new buffer once enough has been
    /// freed, so a ledger whose keys are released or retried for years
    /// does not grow. Copies every live text at once, under the ledger's
    /// lock; amortised over the frees that earned it, a few bytes each.
    fn compact_if_worthwhile(&mut self) {
        if self.texts.wants_compacting() {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let live = self.texts.buffer.len() - self.texts.garbage;
        let mut texts = Texts {
            buffer: String::with_capacity(live),
            garbage: 0,
        };
        let old = &self.texts;
        self.keys.change_in_use(|entry| {
            old.move_to(&mut texts, &mut entry.key);
            old.move_option_to(&mut texts, &mut entry.reference);
            old.move_option_to(&mut texts, &mut entry.reason);
            old.move_option_to(&mut texts, &mut entry.requested_by);
        });
        for at in self.last_errors.values_mut() {
            old.move_to(&mut texts, at);
        }
        // Forgotten withdrawals a record still names keep their text too.
        for entry in self.withdrawals.entries.iter_mut() {
            if !entry.is_free() {
                old.move_to(&mut texts, &mut entry.id);
                old.move_to(&mut texts, &mut entry.destination);
            }
        }
        assert_eq!(
            texts.buffer.len(),
            live,
            "compaction kept other text than was in use"
        );
        self.texts = texts;
    }
}

/// Applies one event: the only way a [`State`] changes. Replay calls it for
/// every event in the log; the ledger calls it for every event it appends.
///
/// # Panics
/// If `event.seq` does not follow the last applied event: the log hands
/// events over in order, so anything else is a bug. On a broken invariant
/// of the state's own layout (text kept that no slot names, or a slot
/// naming text that is gone), also a bug.
pub fn apply(state: &mut State, event: &Event) {
    apply_view(state, &event.view(), NameHashes::default());
}

/// The hashes of the request key and the withdrawal id an event names,
/// when the thread that decoded it computed them under the state's hasher
/// ([`State::with_hasher`]): the applying thread of a replay then hashes
/// nothing. Each must be the [`name_hash`] of its name; debug builds check.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NameHashes {
    pub(crate) key: Option<u32>,
    pub(crate) id: Option<u32>,
}

/// [`apply`], for an event read from the log without copying its text.
pub(crate) fn apply_view(state: &mut State, event: &EventView<'_>, names: NameHashes) {
    assert!(
        event.seq > state.last_seq,
        "event {} applied after event {}: events apply in log order",
        event.seq,
        state.last_seq
    );
    state.last_seq = event.seq;
    match &event.kind {
        KindView::Opened { accept_foreign_ids } => {
            state.accept_foreign_ids = *accept_foreign_ids;
            // No send of an earlier process is running in this one.
            for slot in std::mem::take(&mut state.running) {
                state.keys[slot].send_running = false;
            }
            state.sending = 0;
        }
        KindView::Created { withdrawal } => {
            let slot = state.withdrawal_slot(*withdrawal, names.id);
            state.withdrawals[slot].created = true;
        }
        KindView::Claimed { key, request } => {
            let slot = state.claim(key, *request, event, names);
            state.set_send_running(slot, true);
        }
        KindView::Recorded { key, request } => {
            let slot = state.claim(key, *request, event, names);
            state.set_outcome(slot, *request);
        }
        KindView::Completed { key, outcome } => {
            if let Some(slot) = state.find_key_hashed(key, names.key) {
                state.set_send_running(slot, false);
                state.set_outcome(slot, *outcome);
            }
        }
        KindView::SendRejected { key, reason } => {
            if let Some(slot) = state.find_key(key) {
                state.set_send_running(slot, false);
                let error = Reason::lossy(&format!("rejected by the rail: {reason}"));
                state.set_last_error(slot, &error);
                if let Some(withdrawal) = state.listed_withdrawal(state.keys[slot].withdrawal) {
                    state.end_hold(withdrawal);
                }
            }
        }
        KindView::SendFailed { key, error, .. } => {
            if let Some(slot) = state.find_key(key) {
                state.set_send_running(slot, false);
                state.set_last_error(slot, error);
            }
        }
        KindView::Resolved { key, outcome, .. } => {
            let slot = match state.find_key(key) {
                Some(slot) => slot,
                None => state.claim(key, *outcome, event, names),
            };
            state.set_outcome(slot, *outcome);
        }
        KindView::Released { key, .. } => state.release(key),
        KindView::Refused { .. } => state.refusals += 1,
    }
    state.compact_if_worthwhile();
}

// The per-withdrawal memory figure rests on these sizes (docs/performance.md).
const _: () = assert!(size_of::<KeySlot>() <= 56);
const _: () = assert!(size_of::<WithdrawalSlot>() <= 48);
const _: () = assert!(size_of::<Option<TextRef>>() == 8);

#[cfg(test)]
mod tests {
    use payonce_model::{Note, Reference};

    use super::*;
    use crate::event::{EventKind, SCHEMA_VERSION};

    /// Applies events made by `kinds`, numbering them after the last.
    fn run(state: &mut State, kinds: impl IntoIterator<Item = EventKind>) {
        for kind in kinds {
            let seq = state.last_seq() + 1;
            let at = Timestamp::from_unix_nanos(seq * 1_000);
            apply(
                state,
                &Event {
                    schema: SCHEMA_VERSION,
                    seq,
                    at,
                    kind,
                },
            );
        }
    }

    fn withdrawal(id: &str) -> WithdrawalRequest {
        WithdrawalRequest::new(
            WithdrawalId::new(id).unwrap_or_else(|e| panic!("{e}")),
            "12.50".parse().unwrap_or_else(|e| panic!("{e}")),
            Currency::new("USDC").unwrap_or_else(|e| panic!("{e}")),
            Destination::new(format!("dest-of-{id}")).unwrap_or_else(|e| panic!("{e}")),
            Actor::new("alice").unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn key(text: &str) -> RequestKey {
        RequestKey::new(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn sent(request: &WithdrawalRequest, reference: &str) -> WithdrawalRequest {
        let reference = Reference::new(reference).unwrap_or_else(|e| panic!("{e}"));
        request
            .approve()
            .and_then(|r| r.start_sending())
            .and_then(|r| r.mark_sent(reference))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn created(withdrawal: &WithdrawalRequest) -> EventKind {
        EventKind::Created {
            withdrawal: withdrawal.clone(),
        }
    }

    /// A state where withdrawals w-1 and w-2 were created.
    fn two_created() -> (State, WithdrawalRequest, WithdrawalRequest) {
        let (w1, w2) = (withdrawal("w-1"), withdrawal("w-2"));
        let mut state = State::new();
        run(&mut state, [created(&w1), created(&w2)]);
        (state, w1, w2)
    }

    fn claimed(key_text: &str, request: &WithdrawalRequest) -> EventKind {
        EventKind::Claimed {
            key: key(key_text),
            request: request.clone(),
        }
    }

    fn released(key_text: &str) -> EventKind {
        EventKind::Released {
            key: key(key_text),
            note: Note::new("nothing was sent").unwrap_or_else(|e| panic!("{e}")),
            by: Actor::new("ops").unwrap_or_else(|e| panic!("{e}")),
        }
    }

    #[test]
    fn a_released_key_slot_taken_by_another_key_is_not_the_old_withdrawals_holder() {
        let (mut state, w1, w2) = two_created();
        run(
            &mut state,
            [claimed("k-1", &w1), released("k-1"), claimed("k-2", &w2)],
        );
        assert_eq!(state.keys.entries.len(), 1, "k-2 reuses the slot k-1 left");
        assert_eq!(state.claimed_by("w-1"), None);
        assert_eq!(state.held("w-1"), None);
        assert_eq!(state.claimed_by("w-2"), Some(key("k-2")));
        assert!(state.record("k-1").is_none());
        assert!(state.is_sending("k-2"));
    }

    #[test]
    fn a_foreign_withdrawal_released_leaves_no_slot_behind() {
        let foreign = withdrawal("elsewhere-1");
        let mut state = State::new();
        run(
            &mut state,
            [
                EventKind::Opened {
                    accept_foreign_ids: true,
                },
                claimed("k-1", &foreign),
                released("k-1"),
            ],
        );
        assert!(state.withdrawal("elsewhere-1").is_none());
        assert_eq!(state.fingerprint("elsewhere-1"), None);
        assert_eq!(state.withdrawals.free, [0]);
        assert_eq!(state.texts.garbage, state.texts.buffer.len());
    }

    #[test]
    fn released_text_is_compacted_away_and_every_answer_stays() {
        let mut state = State::new();
        run(
            &mut state,
            [EventKind::Opened {
                accept_foreign_ids: true,
            }],
        );
        // Keys that stay, with outcomes, errors and holds of every kind.
        let kept: Vec<WithdrawalRequest> =
            (0..50).map(|n| withdrawal(&format!("kept-{n}"))).collect();
        for (n, request) in kept.iter().enumerate() {
            let key_text = format!("kept-key-{n}");
            run(&mut state, [claimed(&key_text, request)]);
            let next = match n % 3 {
                0 => EventKind::Completed {
                    key: key(&key_text),
                    outcome: sent(request, &format!("ref-{n}")),
                },
                1 => EventKind::SendFailed {
                    key: key(&key_text),
                    error: Reason::new("timed out").unwrap_or_else(|e| panic!("{e}")),
                    cause: crate::command::FailureCause::Error,
                },
                _ => EventKind::SendRejected {
                    key: key(&key_text),
                    reason: Reason::new("no funds").unwrap_or_else(|e| panic!("{e}")),
                },
            };
            run(&mut state, [next]);
        }
        // Each claim released frees about 240 bytes of text: 10,000 free
        // more than twice the compaction threshold.
        let mut largest = 0;
        for n in 0..10_000 {
            let request = withdrawal(&format!("gone-{n}-{}", "x".repeat(100)));
            let key_text = format!("gone-key-{n}");
            run(
                &mut state,
                [claimed(&key_text, &request), released(&key_text)],
            );
            largest = largest.max(state.texts.buffer.len());
        }
        assert!(
            largest < GARBAGE_MIN * 3 / 2,
            "the buffer grew to {largest} bytes while holding about {} bytes of live text",
            state.texts.buffer.len() - state.texts.garbage
        );
        let uncompacted = state.clone();
        state.compact();
        assert_eq!(state.texts.garbage, 0);
        assert_eq!(state, uncompacted);
        for (n, request) in kept.iter().enumerate() {
            let record = state
                .record(&format!("kept-key-{n}"))
                .unwrap_or_else(|| panic!("kept-key-{n} lost"));
            assert!(record.matches(request));
            match n % 3 {
                0 => assert_eq!(record.outcome(), Some(sent(request, &format!("ref-{n}")))),
                1 => assert_eq!(record.last_error().as_deref(), Some("timed out")),
                _ => assert_eq!(
                    record.last_error().as_deref(),
                    Some("rejected by the rail: no funds")
                ),
            }
            assert_eq!(state.held(request.id()).is_some(), n % 3 == 1);
        }
    }

    #[test]
    fn states_are_equal_by_their_answers_not_their_layout() {
        let (w1, w2) = (withdrawal("w-1"), withdrawal("w-2"));
        let events = [
            created(&w1),
            created(&w2),
            claimed("k-1", &w1),
            claimed("k-2", &w2),
        ];
        let (mut one, mut two) = (State::new(), State::new());
        run(&mut one, events.clone());
        run(&mut two, events);
        // Different hash keys, same beliefs.
        assert_eq!(one, two);
        run(
            &mut one,
            [EventKind::Completed {
                key: key("k-1"),
                outcome: sent(&w1, "ref-1"),
            }],
        );
        run(
            &mut two,
            [EventKind::Completed {
                key: key("k-1"),
                outcome: sent(&w1, "ref-other"),
            }],
        );
        assert_ne!(one, two, "the outcomes' references differ");
    }

    fn opened(accept_foreign_ids: bool) -> EventKind {
        EventKind::Opened { accept_foreign_ids }
    }

    /// A state accepting foreign ids, and two foreign withdrawals.
    fn two_foreign() -> (State, WithdrawalRequest, WithdrawalRequest) {
        let mut state = State::new();
        run(&mut state, [opened(true)]);
        (state, withdrawal("f-0"), withdrawal("f-1"))
    }

    #[test]
    fn a_record_whose_foreign_withdrawal_was_forgotten_is_hidden_until_the_id_returns() {
        // Two keys on one foreign withdrawal (a divergence `verify` applies):
        // the holder's release forgets the withdrawal while k-0 names it.
        let (mut state, f0, f1) = two_foreign();
        run(
            &mut state,
            [
                claimed("k-0", &f0),
                claimed("k-1", &f0),
                released("k-1"),
                claimed("k-2", &f1),
            ],
        );
        assert!(state.record("k-0").is_none(), "its withdrawal is forgotten");
        assert_eq!(state.key_count(), 2, "k-0 keeps its place");
        assert_eq!(state.claimed_by("f-1"), Some(key("k-2")));
        assert!(
            state
                .in_flight()
                .iter()
                .all(|entry| entry.key.as_str() == "k-2")
        );
        // The forgotten slot is not reused while k-0 names it, and its text
        // survives compaction.
        state.compact();
        assert!(state.record("k-0").is_none());
        assert_eq!(state.in_flight().len(), 1);
        // The id comes back: k-0's record names it again, by id.
        run(&mut state, [claimed("k-3", &f0)]);
        let record = state.record("k-0").unwrap_or_else(|| panic!("k-0 hidden"));
        assert_eq!(record.withdrawal().as_str(), "f-0");
        assert_eq!(state.claimed_by("f-0"), Some(key("k-3")));
        // Once nothing names the old slot, it is freed.
        run(&mut state, [released("k-0")]);
        assert_eq!(state.withdrawals.free.len(), 1);
    }

    #[test]
    fn a_key_claimed_twice_keeps_its_running_send_and_frees_its_first_withdrawal() {
        let (mut state, w1, w2) = two_created();
        run(
            &mut state,
            [
                claimed("k-1", &w1),
                EventKind::Recorded {
                    key: key("k-1"),
                    request: w2.clone(),
                },
            ],
        );
        assert!(state.is_sending("k-1"), "a recorded request ends no send");
        assert_eq!(state.claimed_by("w-2"), Some(key("k-1")));
        // Its first withdrawal is no longer claimed by a key whose record
        // names another.
        assert_eq!(state.claimed_by("w-1"), None);
        run(&mut state, [released("k-1"), claimed("k-2", &w2)]);
        assert_eq!(state.claimed_by("w-1"), None);
        assert_eq!(state.claimed_by("w-2"), Some(key("k-2")));
    }

    #[test]
    fn an_outcome_for_another_withdrawal_ends_that_withdrawals_hold() {
        let (mut state, f0, f1) = two_foreign();
        run(
            &mut state,
            [
                claimed("k-0", &f0),
                claimed("k-1", &f1),
                EventKind::Completed {
                    key: key("k-0"),
                    outcome: sent(&f1, "ref-1"),
                },
            ],
        );
        assert!(state.held("f-1").is_none(), "the outcome's withdrawal");
        assert!(state.held("f-0").is_some());
    }

    #[test]
    fn an_open_ends_every_running_send_however_many_came_and_went() {
        let requests: Vec<WithdrawalRequest> =
            (0..300).map(|n| withdrawal(&format!("w-{n}"))).collect();
        let mut state = State::new();
        run(&mut state, [opened(true)]);
        for (n, request) in requests.iter().enumerate() {
            run(&mut state, [claimed(&format!("k-{n}"), request)]);
            if n % 4 != 0 {
                run(
                    &mut state,
                    [EventKind::Completed {
                        key: key(&format!("k-{n}")),
                        outcome: sent(request, &format!("ref-{n}")),
                    }],
                );
            }
        }
        assert_eq!(state.sending, 75);
        assert!(state.running.len() <= 2 * 75 + 64, "pruned as it grew");
        assert!(state.is_sending("k-0") && !state.is_sending("k-1"));
        run(&mut state, [opened(true)]);
        assert_eq!(state.sending, 0);
        assert!(state.running.is_empty());
        assert!((0..300).all(|n| !state.is_sending(&format!("k-{n}"))));
        assert!(state.in_flight().iter().all(|entry| !entry.send_running));
    }

    #[test]
    fn a_bumped_outcome_comes_back_whole_after_compaction() {
        let request = withdrawal("w-1");
        let bumped = sent(&request, "ref-a")
            .bump(Reference::new("ref-b").unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut state = State::new();
        run(
            &mut state,
            [
                created(&request),
                claimed("k-1", &request),
                EventKind::Completed {
                    key: key("k-1"),
                    outcome: bumped.clone(),
                },
            ],
        );
        let before = state.clone();
        state.compact();
        assert_eq!(state, before);
        let record = state.record("k-1").unwrap_or_else(|| panic!("k-1 lost"));
        assert_eq!(record.outcome(), Some(bumped.clone()));
        assert!(record.has_outcome(&bumped));
        assert!(!record.has_outcome(&sent(&request, "ref-b")));
    }
}
