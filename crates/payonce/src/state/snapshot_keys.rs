//! A snapshot body's keys section, read on a thread of its own from where
//! the body says it starts, while the withdrawals before it are read on
//! the opening's: every record checked as replay would check it, its text
//! kept in a buffer of its own that the state then takes over
//! ([`State::adopt_keys`]). What needs the withdrawals' text (naming a
//! withdrawal two keys hold) waits for them.

use std::collections::HashMap;

use payonce_model::{
    Actor, Progress, REPLACED_MAX, Reason, Reference, RequestKey, WithdrawalState, WorkerName,
};

use super::State;
use super::chunks::Chunks;
use super::layout::{KeySlot, NO_HOLDER, NameHasher, SLOTS_MAX, Slots, TextRef, Texts, stored};
use crate::snapshot::SNAPSHOT_HEADER_LEN;
use crate::snapshot::error::SnapshotError;
use crate::snapshot::format::In;
use crate::snapshot::reader::{BodyBytes, Reader};
use crate::time::Timestamp;

/// The fewest bytes a key takes: a one-letter key, its fixed fields, four
/// empty texts and no replaced reference.
const KEY_LEN_MIN: usize = 3 + 4 + 8 + 8 + 1 + 1 + 4 * 2 + 1;

/// A key's flags byte: bit 0, its send may be running; bit 1, a worker's
/// name follows.
pub(super) const SEND_RUNNING: u8 = 1;
pub(super) const SEND_WORKER: u8 = 2;
const KEY_FLAGS: u8 = SEND_RUNNING | SEND_WORKER;

/// Where a snapshot's fields are read from: the body, what the state it
/// holds comes after, and how its names are hashed.
#[derive(Clone, Copy)]
pub(super) struct Body<'a> {
    pub(super) bytes: BodyBytes<'a>,
    pub(super) seq: u64,
    pub(super) hasher: &'a NameHasher,
}

/// The keys section, read.
#[derive(Default)]
pub(super) struct KeysSection {
    texts: Texts,
    keys: Slots<KeySlot>,
    /// By withdrawal number, the slot of the key naming it, or
    /// [`NO_HOLDER`].
    holders: Vec<u32>,
    last_errors: HashMap<u32, TextRef>,
    replaced: HashMap<u32, Box<[Reference]>>,
    senders: HashMap<u32, WorkerName>,
    running: Vec<u32>,
    /// Where in the body the section starts.
    pub(super) start: usize,
}

/// Why the keys section was refused.
pub(super) enum KeysRefused {
    /// A field, named.
    Field(SnapshotError),
    /// A second key names withdrawal `withdrawal`; the error names its id
    /// once the withdrawals are read.
    HeldTwice { withdrawal: u32, offset: u64 },
}

impl From<SnapshotError> for KeysRefused {
    fn from(error: SnapshotError) -> Self {
        KeysRefused::Field(error)
    }
}

impl KeysRefused {
    /// The error, the withdrawal a second key names given by its id.
    pub(super) fn named(self, state: &State) -> SnapshotError {
        match self {
            KeysRefused::Field(error) => error,
            KeysRefused::HeldTwice { withdrawal, offset } => SnapshotError::Invalid {
                field: "key withdrawal",
                offset,
                expected: "a withdrawal no other key holds".to_owned(),
                found: state.texts.get(state.withdrawals[withdrawal].id).to_owned(),
            },
        }
    }
}

impl KeysSection {
    /// Reads the keys section of `body`, which starts at byte `keys_at`
    /// (the bytes before it are not read), after `withdrawals` withdrawals,
    /// and checks that the body ends with it. With `hash`, also the
    /// checksum of the body from the section's start on.
    pub(super) fn read(
        body: Body<'_>,
        keys_at: usize,
        (withdrawals, hash): (usize, bool),
    ) -> Result<(KeysSection, Option<crc32fast::Hasher>), KeysRefused> {
        let mut input = Reader::new(body.bytes);
        input.jump_to(keys_at);
        if hash {
            input.hash_from_here();
        }
        let start = input.at();
        let count = input.record(|input| input.count("keys", KEY_LEN_MIN, SLOTS_MAX - 1))?;
        let section_at = (SNAPSHOT_HEADER_LEN + input.at()) as u64;
        let mut section = KeysSection {
            holders: vec![NO_HOLDER; withdrawals],
            start,
            ..KeysSection::default()
        };
        let mut entries = Chunks::default();
        let mut hashes = Vec::with_capacity(count);
        for slot in 0..count as u32 {
            let record_at = input.at();
            let (entry, record) = input.record(|input| section.read_key(input, body.seq))?;
            let holder = &mut section.holders[entry.withdrawal as usize];
            if *holder != NO_HOLDER {
                // The record's withdrawal follows its key's length and text.
                let key_len = section.texts.get(entry.key).len();
                let offset = (SNAPSHOT_HEADER_LEN + record_at + 2 + key_len) as u64;
                let withdrawal = entry.withdrawal;
                return Err(KeysRefused::HeldTwice { withdrawal, offset });
            }
            *holder = slot;
            if entry.send_running {
                section.running.push(slot);
            }
            if let Some(worker) = record.worker {
                section.senders.insert(slot, worker);
            }
            if let Some(error) = record.last_error {
                section.last_errors.insert(slot, error);
            }
            if !record.replaced.is_empty() {
                section.replaced.insert(slot, record.replaced.into());
            }
            hashes.push(body.hasher.hash(section.texts.get(entry.key)));
            entries.push(entry);
        }
        section.keys = Slots::built(entries, &hashes, &section.texts)
            .map_err(|key| SnapshotError::listed_twice("key", section_at, key))?;
        input.record(|input| input.ended())?;
        Ok((section, hash.then(|| input.hashed())))
    }

    /// Reads one record; its text pushed into the section's buffer.
    fn read_key(
        &mut self,
        input: &mut In<'_>,
        seq: u64,
    ) -> Result<(KeySlot, KeyExtras), SnapshotError> {
        let key = input.text::<RequestKey>("key")?;
        let withdrawal = input.u32("key withdrawal")?;
        if withdrawal as usize >= self.holders.len() {
            let expected = format!("a withdrawal below {}", self.holders.len());
            return Err(input.invalid("key withdrawal", expected, withdrawal.to_string()));
        }
        let claimed_seq = input.u64("key claimed_seq")?;
        if claimed_seq == 0 || claimed_seq > seq {
            let expected = format!("a seq from 1 to {seq}");
            return Err(input.invalid("key claimed_seq", expected, claimed_seq.to_string()));
        }
        let claimed_at = Timestamp::from_unix_nanos(input.u64("key claimed_at")?);
        let state = read_state(input)?;
        let flags = input.u8("key flags")?;
        if flags & !KEY_FLAGS != 0 || flags & SEND_WORKER != 0 && flags & SEND_RUNNING == 0 {
            let expected = "bit 0, and bit 1 only with bit 0".to_owned();
            return Err(input.invalid("key flags", expected, flags.to_string()));
        }
        let outcome = read_outcome(input, state)?;
        let last_error = input.optional::<Reason>("key last_error")?;
        let worker = match flags & SEND_WORKER {
            0 => None,
            _ => Some(stored(
                input.text::<WorkerName>("key send_worker")?,
                WorkerName::new,
            )),
        };
        let replaced = read_replaced(input, state, outcome)?;
        let entry = KeySlot {
            key: self.texts.push(key),
            withdrawal,
            claimed_seq,
            claimed_at,
            state,
            send_running: flags & SEND_RUNNING != 0,
            reference: outcome.reference.map(|text| self.texts.push(text)),
            reason: outcome.reason.map(|text| self.texts.push(text)),
            requested_by: outcome.requested_by.map(|text| self.texts.push(text)),
        };
        let extras = KeyExtras {
            last_error: last_error.map(|text| self.texts.push(text)),
            worker,
            replaced,
        };
        Ok((entry, extras))
    }
}

impl State {
    /// Takes over the keys `section` read beside this state's withdrawals:
    /// its text after this state's, its records, and which withdrawal each
    /// holds.
    pub(super) fn adopt_keys(&mut self, section: KeysSection) {
        assert_eq!(
            section.holders.len(),
            self.withdrawals.entries.len(),
            "the keys were read against the withdrawals listed"
        );
        let shift = self.texts.append(section.texts);
        let moved = |at: Option<TextRef>| at.map(|at| at.shifted(shift));
        self.keys = section.keys;
        for entry in self.keys.entries.iter_mut() {
            entry.key = entry.key.shifted(shift);
            entry.reference = moved(entry.reference);
            entry.reason = moved(entry.reason);
            entry.requested_by = moved(entry.requested_by);
        }
        let holders = self.withdrawals.entries.iter_mut().zip(&section.holders);
        for (withdrawal, &holder) in holders {
            if holder != NO_HOLDER {
                withdrawal.holder = holder;
                withdrawal.named_by = 1;
            }
        }
        self.last_errors = (section.last_errors.into_iter())
            .map(|(slot, at)| (slot, at.shifted(shift)))
            .collect();
        self.replaced = section.replaced;
        self.sessions.senders = section.senders;
        self.sending = section.running.len();
        self.running = section.running;
    }
}

/// What a record holds beside its slot.
struct KeyExtras {
    last_error: Option<TextRef>,
    worker: Option<WorkerName>,
    replaced: Vec<Reference>,
}

/// An outcome's texts, checked under its state's rules.
#[derive(Clone, Copy)]
struct OutcomeTexts<'a> {
    reference: Option<&'a str>,
    reason: Option<&'a str>,
    requested_by: Option<&'a str>,
}

fn read_state(input: &mut In<'_>) -> Result<Option<WithdrawalState>, SnapshotError> {
    let number = input.u8("key state")?;
    match number {
        0 => Ok(None),
        _ => match WithdrawalState::ALL.get(usize::from(number) - 1) {
            Some(&state) => Ok(Some(state)),
            None => Err(input.invalid(
                "key state",
                format!("0 to {}", WithdrawalState::ALL.len()),
                number.to_string(),
            )),
        },
    }
}

/// Reads an outcome's texts: all absent while in flight; a requester, and
/// a reference and a reason as the state requires, once settled. A
/// refusal names where the texts start.
fn read_outcome<'a>(
    input: &mut In<'a>,
    state: Option<WithdrawalState>,
) -> Result<OutcomeTexts<'a>, SnapshotError> {
    let at = input.offset();
    let outcome = OutcomeTexts {
        reference: input.optional::<Reference>("key reference")?,
        reason: input.optional::<Reason>("key reason")?,
        requested_by: input.optional::<Actor>("key requested_by")?,
    };
    let (has_reference, has_reason) = (outcome.reference.is_some(), outcome.reason.is_some());
    let checked = match state {
        None if has_reference || has_reason || outcome.requested_by.is_some() => {
            Err("no outcome text while in flight".to_owned())
        }
        None => Ok(()),
        Some(_) if outcome.requested_by.is_none() => {
            Err("a requester beside an outcome".to_owned())
        }
        Some(state) => state
            .check_fields(has_reference, has_reason)
            .map_err(|error| error.to_string()),
    };
    checked
        .map_err(|expected| input.invalid_at(at, "key outcome", expected, format!("{state:?}")))?;
    Ok(outcome)
}

/// Reads the references a bumped outcome replaced, checked under the
/// outcome's rules (distinct, not the current one, at most `REPLACED_MAX`).
fn read_replaced(
    input: &mut In<'_>,
    state: Option<WithdrawalState>,
    outcome: OutcomeTexts<'_>,
) -> Result<Vec<Reference>, SnapshotError> {
    let count_at = input.offset();
    let count = usize::from(input.u8("key replaced")?);
    if count == 0 {
        return Ok(Vec::new());
    }
    let (Some(state), Some(requested_by)) = (state, outcome.requested_by) else {
        return Err(input.invalid(
            "key replaced",
            "none while in flight".to_owned(),
            count.to_string(),
        ));
    };
    if count > REPLACED_MAX {
        return Err(input.invalid(
            "key replaced",
            format!("at most {REPLACED_MAX}"),
            count.to_string(),
        ));
    }
    let mut replaced = Vec::with_capacity(count);
    for _ in 0..count {
        replaced.push(stored(
            input.text::<Reference>("key replaced reference")?,
            Reference::new,
        ));
    }
    let progress = Progress::new(
        state,
        outcome.reference.map(|text| stored(text, Reference::new)),
        outcome.reason.map(|text| stored(text, Reason::new)),
        stored(requested_by, Actor::new),
        replaced.clone(),
    );
    progress.map_err(|error| {
        input.invalid_at(
            count_at,
            "key replaced",
            error.to_string(),
            count.to_string(),
        )
    })?;
    Ok(replaced)
}

const _: () = assert!(REPLACED_MAX <= u8::MAX as usize);
