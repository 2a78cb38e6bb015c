//! A [`State`] as a snapshot's body, and back: every projection, in the
//! order docs/snapshot-format.md gives. Writing walks the slots in slot
//! order; reading checks every field under the rules replay checks (the
//! model's text and amount rules, the state machine's outcome rules) and
//! the state's own invariants (one record per key, at most one key per
//! withdrawal, funds held or captured only under a claim, totals that are
//! the sums of the funds), so no snapshot can make a query panic later.
//! Slot numbers are not kept: a withdrawal is named by its place in the
//! body, and the indexes are built again under this process's hash key.

use payonce_model::{Amount, Currency, Destination, WithdrawalId, WithdrawalState, WorkerName};
use rust_decimal::Decimal;

use super::State;
use super::chunks::Chunks;
use super::layout::{Funds, NO_HOLDER, SLOTS_MAX, Slots, TextRef, WithdrawalSlot, stored};
use super::snapshot_keys::{Body, KeysSection, SEND_WORKER};
use crate::snapshot::SNAPSHOT_HEADER_LEN;
use crate::snapshot::error::SnapshotError;
use crate::snapshot::format::{In, Out};
use crate::snapshot::reader::{BodyBytes, Reader};

/// The fewest bytes a currency takes in a body: a one-letter code, two totals.
const CURRENCY_LEN_MIN: usize = 2 + 1 + 2 * 17;
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
    /// shared copy-on-write with this one, its small maps cloned, and no
    /// index (the copy answers no lookup). What the ledger's lock is held
    /// for while a snapshot is taken.
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
        }
    }

    /// The body of a snapshot of this state. Refuses a state only a
    /// diverged log leaves, which the ledger never holds.
    pub(crate) fn snapshot_body(&self) -> Result<Vec<u8>, SnapshotError> {
        let mut out = Out::default();
        out.bytes
            .reserve(self.texts.used + 64 * self.keys.entries.len());
        out.u8(u8::from(self.accept_foreign_ids));
        out.u8(u8::from(self.epoch.is_some()));
        out.u64(self.epoch.unwrap_or(0));
        out.u64(self.refusals);
        self.write_currencies(&mut out)?;
        out.count(self.sessions.live.len());
        for (worker, &epoch) in &self.sessions.live {
            out.text(worker.as_str());
            out.u64(epoch);
        }
        let numbers = self.write_withdrawals(&mut out)?;
        self.write_keys(&mut out, &numbers);
        Ok(out.bytes)
    }

    fn write_currencies(&self, out: &mut Out) -> Result<(), SnapshotError> {
        out.count(self.currencies.len());
        for ((currency, held), captured) in
            self.currencies.iter().zip(&self.held).zip(&self.captured)
        {
            out.text(currency.as_str());
            for total in [held, captured] {
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

    /// Writes the withdrawals in slot order, after their count and where
    /// the keys after them start; the number each slot has in the body
    /// (`u32::MAX` for a free one).
    fn write_withdrawals(&self, out: &mut Out) -> Result<Vec<u32>, SnapshotError> {
        let entries = &self.withdrawals.entries;
        let mut numbers = vec![u32::MAX; entries.len()];
        for &slot in &self.withdrawals.free {
            numbers[slot as usize] = u32::MAX - 1;
        }
        out.count(entries.len() - self.withdrawals.free.len());
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
            let (mantissa, scale) = entry.amount.parts();
            out.u128(mantissa);
            out.u8(scale);
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
            entries.len() - self.withdrawals.free.len(),
            "every listed withdrawal is written"
        );
        let end = out.bytes.len() as u64;
        out.bytes[keys_at..keys_at + 8].copy_from_slice(&end.to_le_bytes());
        Ok(numbers)
    }

    /// Writes the records in slot order.
    fn write_keys(&self, out: &mut Out, numbers: &[u32]) {
        let mut free = vec![false; self.keys.entries.len()];
        for &slot in &self.keys.free {
            free[slot as usize] = true;
        }
        out.count(self.keys.entries.len() - self.keys.free.len());
        let text = |at: Option<TextRef>| at.map(|at| self.texts.get(at));
        for (slot, entry) in self.keys.entries.iter().enumerate() {
            if free[slot] {
                continue;
            }
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
    }

    /// The state a snapshot's `body` holds, after event `seq`: every field
    /// checked, the first one refused named with its offset. With `hash`,
    /// also the checksum of the body's bytes, taken as they are read.
    pub(crate) fn from_snapshot_body(
        seq: u64,
        body: BodyBytes<'_>,
        hash: bool,
    ) -> Result<(State, Option<u32>), SnapshotError> {
        let mut input = Reader::new(body);
        if hash {
            input.hash_from_here();
        }
        let mut state = State {
            last_seq: seq,
            ..State::default()
        };
        input.record(|input| state.read_counters(input))?;
        state.read_currencies(&mut input)?;
        state.read_sessions(&mut input)?;
        let (count, keys_at) = input.record(read_withdrawals_head)?;
        let (section, keys_crc) = state.read_withdrawals_and_keys(input, body, (count, keys_at))?;
        state.adopt_keys(section);
        state.check_funds()?;
        Ok((state, keys_crc))
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

    /// Reads the `count` withdrawals at `input` on this thread and the keys
    /// on another, from `keys_at` as the body says; a refused withdrawal is
    /// named before a `keys_at` that is not where the withdrawals end, and
    /// that before a refused key, as the body orders them. With the
    /// checksum `input` keeps, the checksum of the whole body: the part
    /// `input` hashed, then the keys'.
    fn read_withdrawals_and_keys(
        &mut self,
        mut input: Reader<'_>,
        body: BodyBytes<'_>,
        (count, keys_at): (usize, KeysAt),
    ) -> Result<(KeysSection, Option<u32>), SnapshotError> {
        let hash = input.hashes();
        let hasher = self.hasher.clone();
        let keys_body = Body {
            bytes: body,
            seq: self.last_seq,
            hasher: &hasher,
        };
        let read_keys = move || KeysSection::read(keys_body, keys_at.at, (count, hash));
        let (withdrawals, keys) = std::thread::scope(|scope| {
            let reading = std::thread::Builder::new()
                .name("snapshot-keys".into())
                .spawn_scoped(scope, read_keys);
            let withdrawals = self.read_withdrawals(&mut input, count);
            let keys = match reading {
                Ok(reading) => reading.join(),
                // No thread to be had: the keys are read here, after.
                Err(_) => Ok(read_keys()),
            };
            (withdrawals, keys)
        });
        withdrawals?;
        keys_at.check(input.at())?;
        let (section, keys_crc) = match keys {
            Ok(Ok(read)) => read,
            Ok(Err(refused)) => return Err(refused.named(self)),
            Err(panic) => std::panic::resume_unwind(panic),
        };
        assert_eq!(
            input.at(),
            section.start,
            "the keys start where the withdrawals end"
        );
        let crc = keys_crc.map(|keys_crc| {
            let mut crc = input.hashed();
            crc.combine(&keys_crc);
            crc.finalize()
        });
        Ok((section, crc))
    }

    fn read_currencies(&mut self, input: &mut Reader<'_>) -> Result<(), SnapshotError> {
        let count =
            input.record(|input| input.count("currencies", CURRENCY_LEN_MIN, CURRENCIES_MAX))?;
        for number in 0..count as u32 {
            input.record(|input| self.read_currency(input, number))?;
        }
        Ok(())
    }

    fn read_currency(&mut self, input: &mut In<'_>, number: u32) -> Result<(), SnapshotError> {
        let code_at = input.offset();
        let code = input.text::<Currency>("currency code")?;
        let held = read_total(input, "held total")?;
        let captured = read_total(input, "captured total")?;
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
        Ok(())
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

    fn read_withdrawals(
        &mut self,
        input: &mut Reader<'_>,
        count: usize,
    ) -> Result<(), SnapshotError> {
        let at = (SNAPSHOT_HEADER_LEN + input.at()) as u64;
        let mut entries = Chunks::default();
        let mut hashes = Vec::with_capacity(count);
        for _ in 0..count {
            let (entry, hash) = input.record(|input| self.read_withdrawal(input))?;
            entries.push(entry);
            hashes.push(hash);
        }
        self.withdrawals = Slots::built(entries, &hashes, &self.texts)
            .map_err(|id| SnapshotError::listed_twice("withdrawal id", at, id))?;
        Ok(())
    }

    /// Reads one withdrawal, its text pushed into the state's buffer, and
    /// its id's hash.
    fn read_withdrawal(
        &mut self,
        input: &mut In<'_>,
    ) -> Result<(WithdrawalSlot, u32), SnapshotError> {
        let id = input.text::<WithdrawalId>("withdrawal id")?;
        let destination = input.text::<Destination>("withdrawal destination")?;
        let amount_at = input.offset();
        let mantissa = input.u128("withdrawal amount")?;
        let scale = input.u8("withdrawal amount scale")?;
        let amount = Amount::from_parts(mantissa, scale).map_err(|error| {
            let found = format!("{mantissa}e-{scale}");
            input.invalid_at(amount_at, "withdrawal amount", error.to_string(), found)
        })?;
        let currency = input.u32("withdrawal currency")?;
        if currency as usize >= self.currencies.len() {
            let expected = format!("a currency below {}", self.currencies.len());
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
            id: self.texts.push(id),
            destination: self.texts.push(destination),
            amount,
            currency,
            holder: NO_HOLDER,
            named_by: 0,
            created: flags & CREATED != 0,
            funds,
            listed: true,
        };
        Ok((entry, self.hasher.hash(id)))
    }

    /// Checks what only the whole body shows: a foreign withdrawal is kept
    /// only while a key holds it, funds are held or captured only under a
    /// claim, and each currency's totals are the sums of its funds.
    fn check_funds(&self) -> Result<(), SnapshotError> {
        let mut sums = vec![(Decimal::ZERO, Decimal::ZERO); self.currencies.len()];
        for entry in self.withdrawals.entries.iter() {
            let id = || self.texts.get(entry.id).to_owned();
            if entry.named_by == 0 && (!entry.created || entry.funds != Funds::Free) {
                return Err(SnapshotError::Invalid {
                    field: "withdrawal flags",
                    offset: 0,
                    expected: "a foreign withdrawal, or held or captured funds, only under a claim"
                        .to_owned(),
                    found: format!("withdrawal {} unclaimed", id()),
                });
            }
            let (held, captured) = &mut sums[entry.currency as usize];
            match entry.funds {
                Funds::Held => *held = held.saturating_add(entry.amount.value()),
                Funds::Captured => *captured = captured.saturating_add(entry.amount.value()),
                Funds::Free => {}
            }
        }
        for (number, (held, captured)) in sums.into_iter().enumerate() {
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

fn state_number(state: WithdrawalState) -> u8 {
    let number = WithdrawalState::ALL
        .iter()
        .position(|&known| known == state);
    number.unwrap_or_else(|| unreachable!("every state is in ALL")) as u8
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
