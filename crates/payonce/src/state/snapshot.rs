//! A [`State`] as a snapshot's body, and back: every projection, in the
//! order docs/snapshot-format.md gives. Writing walks the slots in slot
//! order; reading checks every field under the rules replay checks (the
//! model's text and amount rules, the state machine's outcome rules) and
//! the state's own invariants (one record per key, at most one key per
//! withdrawal, funds held or captured only under a claim, totals that are
//! the sums of the funds), so no snapshot can make a query panic later.
//! Slot numbers are not kept: a withdrawal is named by its place in the
//! body, and the indexes are built again under this process's hash key.

use payonce_model::{Currency, Destination, WithdrawalId, WithdrawalState, WorkerName};
use rust_decimal::Decimal;

use std::num::NonZeroU32;
use std::sync::atomic::AtomicU32;

use super::State;
use super::chunks::Chunks;
use super::jobs::{self, run_jobs};
use super::layout::{
    Funds, NO_HOLDER, NameHasher, SLOTS_MAX, Slots, TextRef, Texts, WithdrawalSlot, stored,
};
use super::pair::state_number;
use super::snapshot_keys::{Body, KeysHead, PartRead, SEND_WORKER, keys_job_min, read_job};
use crate::snapshot_format::SNAPSHOT_HEADER_LEN;
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::fields::{In, Out, ended};
use crate::snapshot_format::reader::{BodyBytes, Reader};

/// The fewest bytes a currency takes in a body: a one-letter code, three
/// totals.
const CURRENCY_LEN_MIN: usize = 2 + 1 + 3 * 17;
/// The fewest bytes a session takes: a one-letter worker, its epoch.
const SESSION_LEN_MIN: usize = 2 + 1 + 8;
/// The most currencies a body lists: a withdrawal names its currency by a
/// `u32` number.
const CURRENCIES_MAX: usize = u32::MAX as usize;
/// The most sessions a body lists: no rule of the state bounds them (one
/// per worker name), so only the bytes left do.
const SESSIONS_MAX: usize = usize::MAX;
/// The fewest bytes a withdrawal takes: one-letter id and destination,
/// amount, currency, flags.
const WITHDRAWAL_LEN_MIN: usize = 2 * 3 + 17 + 4 + 1;

/// A withdrawal's flags byte: bit 0, minted here; bits 1 and 2, where its
/// funds are.
const CREATED: u8 = 1;
const FUNDS_SHIFT: u8 = 1;
const WITHDRAWAL_FLAGS: u8 = CREATED | 0b11 << FUNDS_SHIFT;

impl State {
    /// A copy of this state for a snapshot to encode: its entries and text
    /// shared copy-on-write with this one, its small maps cloned, its runs
    /// shared, and no index (the copy answers no lookup). What the
    /// ledger's lock is held for while a snapshot is taken.
    pub(crate) fn copy_for_snapshot(&self) -> State {
        State {
            last_seq: self.last_seq,
            accept_foreign_ids: self.accept_foreign_ids,
            texts: self.texts.clone(),
            keys: self.keys.copy_without_index(),
            withdrawals: self.withdrawals.copy_without_index(),
            hasher: self.hasher.clone(),
            currencies: self.currencies.clone(),
            currency_numbers: self.currency_numbers.clone(),
            replaced: self.replaced.clone(),
            last_errors: self.last_errors.clone(),
            held: self.held.clone(),
            captured: self.captured.clone(),
            epoch: self.epoch,
            sending: self.sending,
            running: self.running.clone(),
            sessions: self.sessions.clone(),
            refusals: self.refusals,
            settled: self.settled.clone(),
            clean: std::collections::VecDeque::new(),
        }
    }

    /// The body of a snapshot of this state, its keys in parts of
    /// `part_len`: everything but the settled pairs, which are in runs (or
    /// go into the snapshot's new run), and by currency the funds those
    /// captured. Refuses a state only a diverged log leaves, which the
    /// ledger never holds.
    pub(crate) fn snapshot_body(&self, part_len: NonZeroU32) -> Result<Vec<u8>, SnapshotError> {
        let settled = self.settled_slots();
        let archived = self.archived_totals(&settled);
        self.snapshot_body_but(part_len, &settled, &archived)
    }

    /// By currency, the funds captured but for those of the withdrawals a
    /// body keeps, which are all but those the `settled` key slots hold:
    /// what the runs' pairs captured. A body writes these as they come
    /// out, so a body read back holds them in exactly this form.
    fn archived_totals(&self, settled: &[bool]) -> Vec<Decimal> {
        let mut archived = self.captured.clone();
        for (slot, entry) in self.withdrawals.entries.iter().enumerate() {
            let in_body = entry.listed
                && !(entry.holder != NO_HOLDER
                    && self.keys[entry.holder].withdrawal as usize == slot
                    && settled.get(entry.holder as usize) == Some(&true));
            if in_body && entry.funds == Funds::Captured {
                let total = &mut archived[entry.currency as usize];
                *total = total.saturating_sub(entry.amount.value());
            }
        }
        archived
    }

    /// The body of a snapshot of this state that keeps no pair out: all a
    /// snapshot with no run holds.
    #[cfg(test)]
    pub(crate) fn snapshot_body_in_parts(
        &self,
        part_len: NonZeroU32,
    ) -> Result<Vec<u8>, SnapshotError> {
        let none = vec![false; self.keys.entries.len()];
        self.snapshot_body_but(part_len, &none, &self.archived_totals(&none))
    }

    /// The body of a snapshot of this state but for the `settled` key
    /// slots and their withdrawals, whose funds captured, `archived`, the
    /// runs hold.
    fn snapshot_body_but(
        &self,
        part_len: NonZeroU32,
        settled: &[bool],
        archived: &[Decimal],
    ) -> Result<Vec<u8>, SnapshotError> {
        let part_len = part_len.get() as usize;
        let mut out = Out::default();
        out.bytes
            .reserve(self.texts.used + 64 * self.keys.entries.len());
        out.u8(u8::from(self.accept_foreign_ids));
        out.u8(u8::from(self.epoch.is_some()));
        out.u64(self.epoch.unwrap_or(0));
        out.u64(self.refusals);
        self.write_currencies(&mut out, archived)?;
        out.count(self.sessions.live.len());
        for (worker, &epoch) in &self.sessions.live {
            out.text(worker.as_str());
            out.u64(epoch);
        }
        let numbers = self.write_withdrawals(&mut out, settled)?;
        self.write_keys(&mut out, &numbers, (part_len, settled));
        Ok(out.bytes)
    }

    fn write_currencies(&self, out: &mut Out, archived: &[Decimal]) -> Result<(), SnapshotError> {
        out.count(self.currencies.len());
        let totals = self.held.iter().zip(&self.captured).zip(archived);
        for (currency, ((held, captured), archived)) in self.currencies.iter().zip(totals) {
            out.text(currency.as_str());
            for total in [held, captured, archived] {
                if total.is_sign_negative() {
                    return Err(SnapshotError::Diverged {
                        withdrawal: format!("(a negative total of {currency})"),
                    });
                }
                out.u128(total.mantissa().unsigned_abs());
                out.u8(total.scale() as u8);
            }
        }
        Ok(())
    }

    /// Writes the withdrawals in slot order, but those the `settled` key
    /// slots hold, after their count and where the keys after them start;
    /// the number each slot has in the body (`u32::MAX` for one not
    /// written).
    fn write_withdrawals(
        &self,
        out: &mut Out,
        settled: &[bool],
    ) -> Result<Vec<u32>, SnapshotError> {
        let entries = &self.withdrawals.entries;
        let mut numbers = vec![u32::MAX; entries.len()];
        let apart = (0..).zip(settled).filter(|(_, settled)| **settled);
        let apart = apart.map(|(slot, _)| self.keys[slot].withdrawal);
        for slot in self.withdrawals.free.iter().copied().chain(apart) {
            numbers[slot as usize] = u32::MAX - 1;
        }
        let skipped = numbers
            .iter()
            .filter(|&&number| number == u32::MAX - 1)
            .count();
        out.count(entries.len() - skipped);
        let keys_at = out.bytes.len();
        out.u64(0);
        let mut next = 0u32;
        for (slot, entry) in entries.iter().enumerate() {
            if numbers[slot] == u32::MAX - 1 {
                numbers[slot] = u32::MAX;
                continue;
            }
            let holds =
                entry.holder != NO_HOLDER && self.keys[entry.holder].withdrawal as usize == slot;
            if !entry.listed || entry.named_by != u32::from(holds) {
                return Err(SnapshotError::Diverged {
                    withdrawal: self.texts.get(entry.id).to_owned(),
                });
            }
            out.text(self.texts.get(entry.id));
            out.text(self.texts.get(entry.destination));
            out.amount(entry.amount);
            out.u32(entry.currency);
            let funds = match entry.funds {
                Funds::Free => 0,
                Funds::Held => 1,
                Funds::Captured => 2,
            };
            out.u8(u8::from(entry.created) | funds << FUNDS_SHIFT);
            numbers[slot] = next;
            next += 1;
        }
        assert_eq!(
            next as usize,
            entries.len() - skipped,
            "every listed withdrawal but those set apart is written"
        );
        let end = out.bytes.len() as u64;
        out.bytes[keys_at..keys_at + 8].copy_from_slice(&end.to_le_bytes());
        Ok(numbers)
    }

    /// Writes the records in slot order but the `settled` ones, in parts
    /// of `part_len`, after their count, the part length and where each
    /// part after the first starts.
    fn write_keys(&self, out: &mut Out, numbers: &[u32], (part_len, settled): (usize, &[bool])) {
        let mut free = settled.to_vec();
        for &slot in &self.keys.free {
            free[slot as usize] = true;
        }
        let count = free.iter().filter(|&&free| !free).count();
        out.count(count);
        out.u32(part_len as u32);
        let starts_at = out.bytes.len();
        let parts = count.div_ceil(part_len);
        out.bytes.resize(starts_at + 8 * parts.saturating_sub(1), 0);
        let text = |at: Option<TextRef>| at.map(|at| self.texts.get(at));
        let mut written = 0;
        for (slot, entry) in self.keys.entries.iter().enumerate() {
            if free[slot] {
                continue;
            }
            if written > 0 && written % part_len == 0 {
                let field = starts_at + 8 * (written / part_len - 1);
                let start = out.bytes.len() as u64;
                out.bytes[field..field + 8].copy_from_slice(&start.to_le_bytes());
            }
            written += 1;
            let slot = slot as u32;
            out.text(self.texts.get(entry.key));
            let number = numbers[entry.withdrawal as usize];
            assert_ne!(number, u32::MAX, "a record names a listed withdrawal");
            out.u32(number);
            out.u64(entry.claimed_seq);
            out.u64(entry.claimed_at.unix_nanos());
            out.u8(entry.state.map_or(0, |state| state_number(state) + 1));
            let worker = self
                .sessions
                .senders
                .get(&slot)
                .filter(|_| entry.send_running);
            out.u8(u8::from(entry.send_running) | if worker.is_some() { SEND_WORKER } else { 0 });
            out.optional(text(entry.reference));
            out.optional(text(entry.reason));
            out.optional(text(entry.requested_by));
            out.optional(text(self.last_errors.get(&slot).copied()));
            if let Some(worker) = worker {
                out.text(worker.as_str());
            }
            let replaced = match entry.state {
                Some(_) => self
                    .replaced
                    .get(&slot)
                    .map_or(&[][..], |replaced| replaced),
                None => &[],
            };
            out.u8(replaced.len() as u8);
            for reference in replaced {
                out.text(reference.as_str());
            }
        }
        assert_eq!(
            written, count,
            "every key in use but those set apart is written"
        );
    }

    /// The state a snapshot's `body` holds, after event `seq`: every field
    /// checked, the first one refused, in body order, named with its
    /// offset; and by currency, the funds the settled pairs out of the body
    /// captured (the runs the manifest names hold them). With `hash`, also
    /// the checksum of the body's bytes, taken as they are read.
    pub(crate) fn from_snapshot_body(
        seq: u64,
        body: BodyBytes<'_>,
        hash: bool,
    ) -> Result<(State, Option<u32>, Vec<Decimal>), SnapshotError> {
        let mut input = Reader::new(body);
        if hash {
            input.hash_from_here();
        }
        let mut state = State {
            last_seq: seq,
            ..State::default()
        };
        input.record(|input| state.read_counters(input))?;
        let archived = state.read_currencies(&mut input)?;
        state.read_sessions(&mut input)?;
        let (count, keys_at) = input.record(read_withdrawals_head)?;
        let at = input.at();
        let head_crc = hash.then(|| input.hashed());
        let read = (at, count, keys_at);
        let crc = state.read_withdrawals_and_keys(body, read, head_crc, &archived)?;
        Ok((state, crc, archived))
    }

    /// The fields before the currencies.
    fn read_counters(&mut self, input: &mut In<'_>) -> Result<(), SnapshotError> {
        let accept_foreign_ids = input.bool("accept_foreign_ids")?;
        let has_epoch = input.bool("epoch present")?;
        let epoch = input.u64("epoch")?;
        if !has_epoch && epoch != 0 {
            return Err(input.invalid("epoch", "0 with no epoch".to_owned(), epoch.to_string()));
        }
        self.refusals = input.u64("refusals")?;
        self.accept_foreign_ids = accept_foreign_ids;
        self.epoch = has_epoch.then_some(epoch);
        Ok(())
    }

    /// Reads the `count` withdrawals from body byte `at` and the keys from
    /// `keys_at` on, the withdrawals and each part of the keys a job of
    /// its own ([`run_jobs`]), then takes them over. With `crc`, the
    /// checksum of the bytes before `at`, the checksum of the whole body.
    fn read_withdrawals_and_keys(
        &mut self,
        body: BodyBytes<'_>,
        (at, count, keys_at): (usize, usize, KeysAt),
        crc: Option<crc32fast::Hasher>,
        archived: &[Decimal],
    ) -> Result<Option<u32>, SnapshotError> {
        let hash = crc.is_some();
        let hasher = self.hasher.clone();
        let body = Body {
            bytes: body,
            seq: self.last_seq,
            hasher: &hasher,
        };
        let keys_head = KeysHead::read(body, keys_at.at, hash);
        let jobs = (keys_head.as_ref()).map_or(Vec::new(), |head| head.jobs(keys_job_min()));
        let holders: Vec<AtomicU32> = (0..count).map(|_| AtomicU32::new(NO_HOLDER)).collect();
        let currencies = self.currencies.len();
        let mut read = run_jobs(1 + jobs.len(), |job| match (job, &keys_head) {
            (0, _) => Job::Withdrawals(read_withdrawals(body, (at, count), currencies, hash)),
            (job, Ok(head)) => {
                let parts = jobs[job - 1].clone();
                Job::Keys(Box::new(read_job(body, head, parts, &holders, hash)))
            }
            (_, Err(_)) => unreachable!("no part is read of a head refused"),
        })
        .into_iter();
        let Some(Job::Withdrawals(withdrawals)) = read.next() else {
            unreachable!("the first job reads the withdrawals")
        };
        let withdrawals = withdrawals?;
        let mut parts: Vec<PartRead> = read.map(Job::into_part).collect();
        let keys_head = match checked_keys(body, &withdrawals, (keys_at, keys_head), &mut parts) {
            Ok(head) => head,
            // A withdrawal listed twice comes before the keys in the body.
            Err(refused) => return Err(withdrawals.listed_twice().err().unwrap_or(refused)),
        };
        let crc = crc.map(|mut crc| {
            let keys = [withdrawals.crc.as_ref(), keys_head.crc()]
                .into_iter()
                .flatten();
            for part in keys.chain(parts.iter().filter_map(|part| part.crc.as_ref())) {
                crc.combine(part);
            }
            crc.finalize()
        });
        let ends = parts.last().map_or(keys_head.end(), PartRead::end);
        let sums = self.adopt(withdrawals, (parts, holders), &keys_head)?;
        ended(ends, body.bytes.len())?;
        self.check_funds()?;
        self.check_sums(sums, archived)?;
        self.check_archived_form(archived)?;
        Ok(crc)
    }

    /// Takes over the withdrawals and keys read, and builds their
    /// indexes at once, a withdrawal listed twice refused before a key.
    /// Answers the sums of the withdrawals' funds, by currency.
    fn adopt(
        &mut self,
        withdrawals: WithdrawalsRead,
        (parts, holders): (Vec<PartRead>, Vec<AtomicU32>),
        keys_head: &KeysHead,
    ) -> Result<Vec<(Decimal, Decimal)>, SnapshotError> {
        let WithdrawalsRead {
            texts,
            mut entries,
            hashes,
            sums,
            first_at,
            ..
        } = withdrawals;
        self.texts = texts;
        let (keys, key_hashes) = self.adopt_keys(parts, holders, &mut entries);
        let texts = &self.texts;
        let (built, keys_built) = jobs::both(
            || withdrawals_index(entries, &hashes, texts, first_at),
            || Slots::built(keys, &key_hashes, texts),
        );
        self.withdrawals = built?;
        let first_key = keys_head.first_key_offset();
        self.keys = keys_built.map_err(|key| SnapshotError::listed_twice("key", first_key, key))?;
        Ok(sums)
    }

    /// Reads the currencies and their totals; answers, by currency, the
    /// funds the archive's pairs captured.
    fn read_currencies(&mut self, input: &mut Reader<'_>) -> Result<Vec<Decimal>, SnapshotError> {
        let count =
            input.record(|input| input.count("currencies", CURRENCY_LEN_MIN, CURRENCIES_MAX))?;
        let mut archived = Vec::with_capacity(count);
        for number in 0..count as u32 {
            archived.push(input.record(|input| self.read_currency(input, number))?);
        }
        Ok(archived)
    }

    fn read_currency(&mut self, input: &mut In<'_>, number: u32) -> Result<Decimal, SnapshotError> {
        let code_at = input.offset();
        let code = input.text::<Currency>("currency code")?;
        let held = read_total(input, "held total")?;
        let captured = read_total(input, "captured total")?;
        let archived = read_total(input, "archived total")?;
        let refuse = |expected: String| {
            input.invalid_at(code_at, "currency code", expected, code.to_owned())
        };
        let currency = Currency::new(code).map_err(|error| refuse(error.to_string()))?;
        if self
            .currency_numbers
            .insert(currency.clone(), number)
            .is_some()
        {
            return Err(refuse("a code listed once".to_owned()));
        }
        self.currencies.push(currency);
        self.held.push(held);
        self.captured.push(captured);
        Ok(archived)
    }

    fn read_sessions(&mut self, input: &mut Reader<'_>) -> Result<(), SnapshotError> {
        let count = input.record(|input| input.count("sessions", SESSION_LEN_MIN, SESSIONS_MAX))?;
        for _ in 0..count {
            input.record(|input| self.read_session(input))?;
        }
        Ok(())
    }

    fn read_session(&mut self, input: &mut In<'_>) -> Result<(), SnapshotError> {
        let name_at = input.offset();
        let name = input.text::<WorkerName>("session worker")?;
        let epoch = input.u64("session epoch")?;
        if self
            .sessions
            .live
            .last_key_value()
            .is_some_and(|(last, _)| last.as_str() >= name)
        {
            return Err(input.invalid_at(
                name_at,
                "session worker",
                "workers in ascending order, each once".to_owned(),
                name.to_owned(),
            ));
        }
        self.sessions
            .live
            .insert(stored(name, WorkerName::new), epoch);
        Ok(())
    }

    /// Checks what only the whole body shows: a foreign withdrawal is kept
    /// only while a key holds it, and funds are held or captured only
    /// under a claim.
    fn check_funds(&self) -> Result<(), SnapshotError> {
        for entry in self.withdrawals.entries.iter() {
            if entry.named_by == 0 && (!entry.created || entry.funds != Funds::Free) {
                return Err(SnapshotError::Invalid {
                    field: "withdrawal flags",
                    offset: 0,
                    expected: "a foreign withdrawal, or held or captured funds, only under a claim"
                        .to_owned(),
                    found: format!("withdrawal {} unclaimed", self.texts.get(entry.id)),
                });
            }
        }
        Ok(())
    }

    /// Checks that each currency's totals are `sums`, the sums of its
    /// withdrawals' funds held and captured, with the funds its archived
    /// pairs captured, `archived`, counted as captured.
    fn check_sums(
        &self,
        sums: Vec<(Decimal, Decimal)>,
        archived: &[Decimal],
    ) -> Result<(), SnapshotError> {
        for (number, (held, captured)) in sums.into_iter().enumerate() {
            let captured = captured.saturating_add(archived[number]);
            let stored = (self.held[number], self.captured[number]);
            // A total saturates at the most a decimal holds; below it, it is the exact sum.
            let same = |sum: Decimal, total: Decimal| sum == total || sum == Decimal::MAX;
            if !same(held, stored.0) || !same(captured, stored.1) {
                return Err(SnapshotError::Invalid {
                    field: "currency totals",
                    offset: 0,
                    expected: format!("held {held} and captured {captured}, the sums of the funds"),
                    found: format!(
                        "held {} and captured {} {}",
                        stored.0, stored.1, self.currencies[number]
                    ),
                });
            }
        }
        Ok(())
    }

    /// Checks that each archived total is in the form a body is written
    /// with: the captured total less the body's captured funds, as
    /// [`State::archived_totals`] gives it. The same value in another form
    /// (`0` for `0.0000`) is refused, so a body accepted is the one its
    /// state writes.
    fn check_archived_form(&self, archived: &[Decimal]) -> Result<(), SnapshotError> {
        let written = self.archived_totals(&[]);
        let form = |total: &Decimal| (total.mantissa(), total.scale());
        match (0..archived.len()).find(|&n| form(&archived[n]) != form(&written[n])) {
            None => Ok(()),
            Some(number) => Err(SnapshotError::Invalid {
                field: "archived total",
                offset: 0,
                expected: format!(
                    "{} {}: the captured total less the body's captured funds, in that form",
                    written[number], self.currencies[number]
                ),
                found: format!(
                    "{}e-{}",
                    archived[number].mantissa(),
                    archived[number].scale()
                ),
            }),
        }
    }
}

/// What one job of a load reads.
enum Job {
    Withdrawals(Result<WithdrawalsRead, SnapshotError>),
    Keys(Box<PartRead>),
}

impl Job {
    fn into_part(self) -> PartRead {
        match self {
            Job::Keys(part) => *part,
            Job::Withdrawals(_) => unreachable!("one job reads the withdrawals"),
        }
    }
}

/// The withdrawals section, read.
struct WithdrawalsRead {
    texts: Texts,
    entries: Chunks<WithdrawalSlot>,
    hashes: Vec<u32>,
    /// By currency number, the funds held and captured.
    sums: Vec<(Decimal, Decimal)>,
    /// The snapshot offset of the first withdrawal.
    first_at: u64,
    /// Where the section ends in the body.
    end: usize,
    crc: Option<crc32fast::Hasher>,
}

impl WithdrawalsRead {
    /// Refuses an id listed twice, as building the index does.
    fn listed_twice(self) -> Result<(), SnapshotError> {
        let WithdrawalsRead {
            texts,
            entries,
            hashes,
            first_at,
            ..
        } = self;
        withdrawals_index(entries, &hashes, &texts, first_at).map(drop)
    }
}

/// The withdrawals as slots found by id, the first at snapshot offset
/// `first_at`; an id listed twice is the error.
fn withdrawals_index(
    entries: Chunks<WithdrawalSlot>,
    hashes: &[u32],
    texts: &Texts,
    first_at: u64,
) -> Result<Slots<WithdrawalSlot>, SnapshotError> {
    Slots::built(entries, hashes, texts)
        .map_err(|id| SnapshotError::listed_twice("withdrawal id", first_at, id))
}

/// Reads the `count` withdrawals from body byte `at` on, each naming one
/// of `currencies`.
fn read_withdrawals(
    body: Body<'_>,
    (at, count): (usize, usize),
    currencies: usize,
    hash: bool,
) -> Result<WithdrawalsRead, SnapshotError> {
    let mut input = Reader::new(body.bytes);
    input.jump_to(at);
    if hash {
        input.hash_from_here();
    }
    let mut read = WithdrawalsRead {
        texts: Texts::default(),
        entries: Chunks::default(),
        hashes: Vec::with_capacity(count),
        sums: vec![(Decimal::ZERO, Decimal::ZERO); currencies],
        first_at: (SNAPSHOT_HEADER_LEN + at) as u64,
        end: at,
        crc: None,
    };
    for _ in 0..count {
        let texts = &mut read.texts;
        let (entry, hash) =
            input.record(|input| read_withdrawal(input, (currencies, body.hasher), texts))?;
        let (held, captured) = &mut read.sums[entry.currency as usize];
        match entry.funds {
            Funds::Held => *held = held.saturating_add(entry.amount.value()),
            Funds::Captured => *captured = captured.saturating_add(entry.amount.value()),
            Funds::Free => {}
        }
        read.hashes.push(hash);
        read.entries.push(entry);
    }
    read.end = input.at();
    read.crc = hash.then(|| input.hashed());
    Ok(read)
}

/// Reads one withdrawal naming one of `currencies`, its text pushed into
/// `texts`, and its id's hash.
fn read_withdrawal(
    input: &mut In<'_>,
    (currencies, hasher): (usize, &NameHasher),
    texts: &mut Texts,
) -> Result<(WithdrawalSlot, u32), SnapshotError> {
    let id = input.text::<WithdrawalId>("withdrawal id")?;
    let destination = input.text::<Destination>("withdrawal destination")?;
    let amount = input.amount("withdrawal amount", "withdrawal amount scale")?;
    let currency = input.u32("withdrawal currency")?;
    if currency as usize >= currencies {
        let expected = format!("a currency below {currencies}");
        return Err(input.invalid("withdrawal currency", expected, currency.to_string()));
    }
    let flags = input.u8("withdrawal flags")?;
    let funds = match (flags >> FUNDS_SHIFT) & 0b11 {
        0 => Funds::Free,
        1 => Funds::Held,
        2 => Funds::Captured,
        _ => {
            return Err(input.invalid(
                "withdrawal flags",
                "funds 0, 1 or 2".to_owned(),
                flags.to_string(),
            ));
        }
    };
    if flags & !WITHDRAWAL_FLAGS != 0 {
        let expected = format!("only bits {WITHDRAWAL_FLAGS:#04b}");
        return Err(input.invalid("withdrawal flags", expected, flags.to_string()));
    }
    let entry = WithdrawalSlot {
        id: texts.push(id),
        destination: texts.push(destination),
        amount,
        currency,
        holder: NO_HOLDER,
        named_by: 0,
        created: flags & CREATED != 0,
        funds,
        listed: true,
    };
    Ok((entry, hasher.hash(id)))
}

/// The keys' head, once `keys_at` is checked to be where the withdrawals
/// end, and the first refusal among the keys' parts, named.
fn checked_keys(
    body: Body<'_>,
    withdrawals: &WithdrawalsRead,
    (keys_at, head): (KeysAt, Result<KeysHead, SnapshotError>),
    parts: &mut [PartRead],
) -> Result<KeysHead, SnapshotError> {
    keys_at.check(withdrawals.end)?;
    let head = head?;
    head.first_refusal(body, parts)
        .map_err(|refused| refused.named(&withdrawals.texts, &withdrawals.entries))?;
    Ok(head)
}

/// Where a body says its keys start: `at`, in the field at `offset`.
#[derive(Debug, Clone, Copy)]
struct KeysAt {
    at: usize,
    offset: u64,
}

impl KeysAt {
    /// Refuses a `keys_at` that is not `end`, where the withdrawals end.
    fn check(self, end: usize) -> Result<(), SnapshotError> {
        if self.at == end {
            return Ok(());
        }
        Err(SnapshotError::Invalid {
            field: "keys_at",
            offset: self.offset,
            expected: format!("{end}, where the withdrawals end"),
            found: self.at.to_string(),
        })
    }
}

/// The withdrawals' count and where the keys after them start, checked to
/// leave room for the withdrawals before and the keys' count after.
fn read_withdrawals_head(input: &mut In<'_>) -> Result<(usize, KeysAt), SnapshotError> {
    let count = input.count("withdrawals", WITHDRAWAL_LEN_MIN, SLOTS_MAX - 1)?;
    let at = input.u64("keys_at")?;
    let offset = input.field_offset();
    // `count` fitted in the bytes left, so this sum does not overflow.
    let first = input.at() + count * WITHDRAWAL_LEN_MIN;
    let last = input.body_len().saturating_sub(8);
    match usize::try_from(at) {
        Ok(at) if (first..=last).contains(&at) => Ok((count, KeysAt { at, offset })),
        _ => Err(input.invalid(
            "keys_at",
            format!("a place from {first} to {last} in the body"),
            at.to_string(),
        )),
    }
}

/// A total: a non-negative decimal's mantissa and scale.
fn read_total(input: &mut In<'_>, field: &'static str) -> Result<Decimal, SnapshotError> {
    let at = input.offset();
    let mantissa = input.u128(field)?;
    let scale = input.u8(field)?;
    i128::try_from(mantissa)
        .ok()
        .and_then(|mantissa| Decimal::try_from_i128_with_scale(mantissa, u32::from(scale)).ok())
        .ok_or_else(|| {
            input.invalid_at(
                at,
                field,
                "a decimal of at most 96 bits and scale 28".to_owned(),
                format!("{mantissa}e-{scale}"),
            )
        })
}

const _: () = assert!(WithdrawalState::ALL.len() < u8::MAX as usize);
