//! A snapshot body's keys section: a head saying where each part of the
//! keys starts, so that the parts are read at once, each on whichever
//! thread is free, beside the withdrawals before them. Every record is
//! checked as replay would check it, its text kept in a buffer of its
//! part's own that the state then takes over ([`State::adopt_keys`]). Two
//! keys naming one withdrawal are found across parts, and the refusal is
//! the one a reading from the first byte would meet first.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use payonce_model::{
    Actor, Progress, REPLACED_MAX, Reason, Reference, RequestKey, WithdrawalState, WorkerName,
};

use super::State;
use super::chunks::Chunks;
use super::layout::{
    KeySlot, NO_HOLDER, NameHasher, Persisted, SLOTS_MAX, TextRef, Texts, WithdrawalSlot, stored,
};
use crate::snapshot_format::SNAPSHOT_HEADER_LEN;
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::fields::In;
use crate::snapshot_format::reader::{BodyBytes, Reader};
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

/// The keys section's head: how many keys, how many a part holds, and
/// where each part starts.
pub(super) struct KeysHead {
    count: usize,
    part_len: usize,
    /// Where each part starts in the body, and the offset of the field
    /// that says so (of the first part, which starts where the head ends:
    /// the offset of the part length).
    starts: Vec<(usize, u64)>,
    /// Where the head ends.
    end: usize,
    /// The checksum of the head's bytes, if asked for.
    crc: Option<crc32fast::Hasher>,
}

/// The fewest keys a job of a load reads, but for the last job: a few MB
/// of body, so what a job costs beside its bytes (a reading of a piece
/// past its end, a chunk of text) stays a fraction of them whatever parts
/// a body has.
pub(super) const KEYS_JOB_MIN: usize = 1 << 16;

/// [`KEYS_JOB_MIN`], but 2 in this crate's tests, so that their small
/// bodies are read as several jobs.
pub(super) fn keys_job_min() -> usize {
    if cfg!(test) { 2 } else { KEYS_JOB_MIN }
}

/// Keys `first..first + count`, from body byte `start` on.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyPart {
    first: u32,
    count: usize,
    start: usize,
}

impl KeysHead {
    /// Reads the head of the keys section, which starts at body byte
    /// `keys_at`: each part's start is refused unless it leaves room for
    /// the keys of the part before it and of the parts from it on.
    pub(super) fn read(body: Body<'_>, keys_at: usize, hash: bool) -> Result<Self, SnapshotError> {
        let mut input = Reader::new(body.bytes);
        input.jump_to(keys_at);
        if hash {
            input.hash_from_here();
        }
        let count = input.record(|input| input.count("keys", KEY_LEN_MIN, SLOTS_MAX - 1))?;
        let (part_len, len_at) = input.record(|input| {
            let part_len = input.u32("key part_len")?;
            if part_len == 0 {
                return Err(input.invalid("key part_len", "at least 1".to_owned(), "0".to_owned()));
            }
            Ok((part_len as usize, input.field_offset()))
        })?;
        let parts = count.div_ceil(part_len);
        // `count` keys fit in the bytes left, so this does too.
        let mut starts = Vec::with_capacity(parts);
        if parts > 0 {
            starts.push((0, len_at));
        }
        for _ in 1..parts {
            starts.push(input.record(|input| {
                let at = input.u64("key part")?;
                Ok((
                    usize::try_from(at).unwrap_or(usize::MAX),
                    input.field_offset(),
                ))
            })?);
        }
        let end = input.at();
        if let Some(first) = starts.first_mut() {
            first.0 = end;
        }
        let head = KeysHead {
            count,
            part_len,
            starts,
            end,
            crc: None,
        };
        head.check_starts(body.bytes.len())?;
        Ok(KeysHead {
            crc: hash.then(|| input.hashed()),
            ..head
        })
    }

    /// Refuses a part's start that leaves too little room for the keys
    /// before or after it.
    fn check_starts(&self, body_len: usize) -> Result<(), SnapshotError> {
        for (part, pair) in self.starts.windows(2).enumerate() {
            let (before, (at, field)) = (pair[0].0, pair[1]);
            let after = self.count - (part + 1) * self.part_len;
            // Both sums are bounded by the body's length, as the count is.
            let first = before + self.part_len * KEY_LEN_MIN;
            let last = body_len.saturating_sub(after * KEY_LEN_MIN);
            if !(first..=last).contains(&at) {
                return Err(SnapshotError::Invalid {
                    field: "key part",
                    offset: field,
                    expected: format!("a place from {first} to {last} in the body"),
                    found: at.to_string(),
                });
            }
        }
        Ok(())
    }

    /// How many parts the keys are in.
    pub(super) fn parts(&self) -> usize {
        self.starts.len()
    }

    /// The parts in runs of consecutive ones, each run a job holding at
    /// least `keys_min` keys but for the last: a body of tiny parts costs
    /// a reading, a window and a text chunk per run, not per part.
    pub(super) fn jobs(&self, keys_min: usize) -> Vec<Range<usize>> {
        let per_job = keys_min.div_ceil(self.part_len).max(1);
        let parts = self.parts();
        (0..parts)
            .step_by(per_job)
            .map(|first| first..first.saturating_add(per_job).min(parts))
            .collect()
    }

    /// Part `part`.
    pub(super) fn part(&self, part: usize) -> KeyPart {
        let first = part * self.part_len;
        KeyPart {
            first: first as u32,
            count: self.part_len.min(self.count - first),
            start: self.starts[part].0,
        }
    }

    /// Where the head ends: the first part's start, or the body's end.
    pub(super) fn end(&self) -> usize {
        self.end
    }

    /// The checksum of the head's bytes, if it was asked for.
    pub(super) fn crc(&self) -> Option<&crc32fast::Hasher> {
        self.crc.as_ref()
    }

    /// The snapshot offset of the first key, where a key listed twice is
    /// refused.
    pub(super) fn first_key_offset(&self) -> u64 {
        (SNAPSHOT_HEADER_LEN + self.end) as u64
    }

    /// The refusal of part `part`'s start, where the part before it ended
    /// at `end` instead.
    fn misplaced(&self, part: usize, end: usize) -> (u32, u8, KeysRefused) {
        let (start, field) = self.starts[part];
        let refused = SnapshotError::Invalid {
            field: "key part",
            offset: field,
            expected: format!("{end}, where part {} ends", part - 1),
            found: start.to_string(),
        };
        (self.part(part).first, 0, KeysRefused::Field(refused))
    }

    /// The first refusal among `parts`, the jobs read, in body order: a
    /// job's refused key or misplaced part, then whether the next job
    /// starts where it ended. The later of two keys naming one withdrawal
    /// is found by whichever of them was read second, maybe by a job
    /// before its own.
    pub(super) fn first_refusal(
        &self,
        body: Body<'_>,
        parts: &mut [PartRead],
    ) -> Result<(), KeysRefused> {
        let mut first: Option<(u32, u8, KeysRefused)> = None;
        let mut consider = |slot: u32, rank: u8, refused: KeysRefused| {
            if first
                .as_ref()
                .is_none_or(|(at, r, _)| (slot, rank) < (*at, *r))
            {
                first = Some((slot, rank, refused));
            }
        };
        let withdrawals = parts.first().map_or(0, |read| read.keys.withdrawals);
        for read in parts.iter_mut() {
            let whole = match read.refused.take() {
                Some((slot, rank, refused)) => {
                    let whole = matches!(refused, KeysRefused::HeldTwice { offset: None, .. });
                    consider(slot, rank, refused);
                    whole
                }
                None => true,
            };
            let next = read.parts.end;
            if next < self.parts() && whole && read.end != self.starts[next].0 {
                let (slot, rank, refused) = self.misplaced(next, read.end);
                consider(slot, rank, refused);
            }
        }
        let Some((slot, _, refused)) = first else {
            return Ok(());
        };
        match refused {
            KeysRefused::HeldTwice {
                withdrawal,
                offset: None,
                ..
            } => {
                let part = self.part(slot as usize / self.part_len);
                let offset = withdrawal_offset(body, part, slot, withdrawals)?;
                Err(KeysRefused::HeldTwice {
                    withdrawal,
                    offset: Some(offset),
                })
            }
            refused => Err(refused),
        }
    }
}

/// Why the keys section was refused.
pub(super) enum KeysRefused {
    /// A field, named.
    Field(SnapshotError),
    /// A key names withdrawal `withdrawal`, which a lower key names too;
    /// its field is at `offset`, where the reading that found it had read
    /// that key. The error names the withdrawal's id once the withdrawals
    /// are read.
    HeldTwice {
        withdrawal: u32,
        offset: Option<u64>,
    },
}

impl From<SnapshotError> for KeysRefused {
    fn from(error: SnapshotError) -> Self {
        KeysRefused::Field(error)
    }
}

impl KeysRefused {
    /// The error, the withdrawal a second key names given by its id.
    pub(super) fn named(
        self,
        texts: &Texts,
        withdrawals: &Chunks<WithdrawalSlot>,
    ) -> SnapshotError {
        match self {
            KeysRefused::Field(error) => error,
            KeysRefused::HeldTwice {
                withdrawal, offset, ..
            } => SnapshotError::Invalid {
                field: "key withdrawal",
                offset: offset.unwrap_or(0),
                expected: "a withdrawal no other key holds".to_owned(),
                found: texts.get(withdrawals[withdrawal as usize].id).to_owned(),
            },
        }
    }
}

/// The records of some keys, read: their text in a buffer of their own,
/// and what each holds beside its slot, by slot.
pub(super) struct KeysRead {
    /// How many withdrawals the body lists: what a record may name.
    withdrawals: usize,
    pub(super) texts: Texts,
    pub(super) entries: Chunks<KeySlot>,
    pub(super) hashes: Vec<u32>,
    pub(super) last_errors: HashMap<u32, TextRef>,
    pub(super) replaced: HashMap<u32, Box<[Reference]>>,
    pub(super) senders: HashMap<u32, WorkerName>,
    pub(super) running: Vec<u32>,
}

/// A job's consecutive parts of the keys, read as far as their first
/// refused key or misplaced part.
pub(super) struct PartRead {
    /// The parts read.
    parts: Range<usize>,
    pub(super) keys: KeysRead,
    /// Where the last part ended, if the job was read whole.
    end: usize,
    /// The checksum of its bytes, if asked for.
    pub(super) crc: Option<crc32fast::Hasher>,
    /// Its lowest key refused, or found the later of two naming one
    /// withdrawal, or the first part's place a misplaced one starts at,
    /// with its rank among refusals at that key (0 for a misplaced part,
    /// which comes before its first key), and why.
    refused: Option<(u32, u8, KeysRefused)>,
}

impl PartRead {
    /// Where the last part ended, if the job was read whole.
    pub(super) fn end(&self) -> usize {
        self.end
    }
}

/// Reads the keys of `parts`, one after another, each key claiming its
/// withdrawal in `holders` (by withdrawal number, the lowest key naming
/// it), until one is refused or a part does not start where the one
/// before it ended. A key naming a withdrawal a higher key claimed first
/// is not refused: the higher key is, once its job is read.
pub(super) fn read_job(
    body: Body<'_>,
    head: &KeysHead,
    parts: Range<usize>,
    holders: &[AtomicU32],
    hash: bool,
) -> PartRead {
    let start = head.part(parts.start).start;
    let mut input = Reader::new(body.bytes);
    input.jump_to(start);
    if hash {
        input.hash_from_here();
    }
    let mut read = PartRead {
        parts: parts.clone(),
        keys: KeysRead::new(holders.len(), 0),
        end: start,
        crc: None,
        refused: None,
    };
    for part in parts.clone() {
        if part > parts.start && input.at() != head.part(part).start {
            read.refused = Some(head.misplaced(part, input.at()));
            return read;
        }
        if !read_keys(body, head.part(part), (&mut input, &mut read), holders) {
            return read;
        }
    }
    read.end = input.at();
    read.crc = hash.then(|| input.hashed());
    read
}

/// Reads the keys of `part` into `read`; false once one is refused.
fn read_keys(
    body: Body<'_>,
    part: KeyPart,
    (input, read): (&mut Reader<'_>, &mut PartRead),
    holders: &[AtomicU32],
) -> bool {
    read.keys.hashes.reserve(part.count);
    for slot in part.first..part.first + part.count as u32 {
        let record_at = input.at();
        let entry = match input.record(|input| read.keys.read_key(input, body.seq, slot)) {
            Ok(entry) => entry,
            Err(error) => {
                read.refused = Some((slot, 1, KeysRefused::Field(error)));
                return false;
            }
        };
        let withdrawal = entry.withdrawal;
        let held = holders[withdrawal as usize].fetch_min(slot, Ordering::Relaxed);
        if held != NO_HOLDER && held < slot {
            let key_len = read.keys.texts.get(entry.key).len();
            let offset = Some(withdrawal_field_offset(record_at, key_len));
            read.refused = Some((slot, 1, KeysRefused::HeldTwice { withdrawal, offset }));
            return false;
        }
        if held != NO_HOLDER && read.refused.as_ref().is_none_or(|(at, _, _)| held < *at) {
            let refused = KeysRefused::HeldTwice {
                withdrawal,
                offset: None,
            };
            read.refused = Some((held, 1, refused));
        }
        read.keys
            .hashes
            .push(body.hasher.hash(read.keys.texts.get(entry.key)));
        read.keys.entries.push(entry);
    }
    true
}

/// The offset of key `slot`'s withdrawal field, read again from the start
/// of its `part`: the key was read, so reading it again succeeds.
fn withdrawal_offset(
    body: Body<'_>,
    part: KeyPart,
    slot: u32,
    withdrawals: usize,
) -> Result<u64, SnapshotError> {
    let mut input = Reader::new(body.bytes);
    input.jump_to(part.start);
    let mut scratch = KeysRead::new(withdrawals, 0);
    for at in part.first..=slot {
        let record_at = input.at();
        let entry = input.record(|input| scratch.read_key(input, body.seq, at))?;
        if at == slot {
            let key_len = scratch.texts.get(entry.key).len();
            return Ok(withdrawal_field_offset(record_at, key_len));
        }
    }
    unreachable!("key {slot} is in its part")
}

/// The snapshot offset of the withdrawal field of the record at body byte
/// `record_at`, whose key is `key_len` bytes: it follows the key.
fn withdrawal_field_offset(record_at: usize, key_len: usize) -> u64 {
    (SNAPSHOT_HEADER_LEN + record_at + 2 + key_len) as u64
}

impl KeysRead {
    fn new(withdrawals: usize, count: usize) -> Self {
        KeysRead {
            withdrawals,
            texts: Texts::default(),
            entries: Chunks::default(),
            hashes: Vec::with_capacity(count),
            last_errors: HashMap::new(),
            replaced: HashMap::new(),
            senders: HashMap::new(),
            running: Vec::new(),
        }
    }

    /// Reads the record of key `slot`: its text pushed into this buffer,
    /// what it holds beside its slot kept by `slot`.
    fn read_key(
        &mut self,
        input: &mut In<'_>,
        seq: u64,
        slot: u32,
    ) -> Result<KeySlot, SnapshotError> {
        let key = input.text::<RequestKey>("key")?;
        let withdrawal = input.u32("key withdrawal")?;
        if withdrawal as usize >= self.withdrawals {
            let expected = format!("a withdrawal below {}", self.withdrawals);
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
            // No run holds what a body holds.
            persisted: Persisted::No,
            changed_seq: claimed_seq,
        };
        if let Some(error) = last_error {
            self.last_errors.insert(slot, self.texts.push(error));
        }
        if let Some(worker) = worker {
            self.senders.insert(slot, worker);
        }
        if !replaced.is_empty() {
            self.replaced.insert(slot, replaced.into());
        }
        if entry.send_running {
            self.running.push(slot);
        }
        Ok(entry)
    }

    /// Puts `other`'s keys after these, its text after this text.
    fn append(&mut self, other: KeysRead) {
        let shift = self.texts.append(other.texts);
        let moved = |at: Option<TextRef>| at.map(|at| at.shifted(shift));
        let mut entries = other.entries;
        for entry in entries.iter_mut() {
            entry.key = entry.key.shifted(shift);
            entry.reference = moved(entry.reference);
            entry.reason = moved(entry.reason);
            entry.requested_by = moved(entry.requested_by);
        }
        self.entries.append(entries);
        self.hashes.extend(other.hashes);
        let last_errors = other.last_errors.into_iter();
        self.last_errors
            .extend(last_errors.map(|(slot, at)| (slot, at.shifted(shift))));
        self.replaced.extend(other.replaced);
        self.senders.extend(other.senders);
        self.running.extend(other.running);
    }
}

impl State {
    /// Takes over the keys of `parts`, read beside `withdrawals` and
    /// checked: their text after this state's, what they hold beside their
    /// slots, and which withdrawal each holds (`holders`, by withdrawal
    /// number). Answers their records and their names' hashes, for their
    /// index.
    pub(super) fn adopt_keys(
        &mut self,
        parts: Vec<PartRead>,
        holders: Vec<AtomicU32>,
        withdrawals: &mut Chunks<WithdrawalSlot>,
    ) -> (Chunks<KeySlot>, Vec<u32>) {
        assert_eq!(
            holders.len(),
            withdrawals.len(),
            "the keys were read against the withdrawals listed"
        );
        let mut keys = KeysRead::new(holders.len(), 0);
        keys.texts = std::mem::take(&mut self.texts);
        for part in parts {
            assert!(part.refused.is_none(), "only keys read whole are adopted");
            keys.append(part.keys);
        }
        self.texts = keys.texts;
        for (withdrawal, holder) in withdrawals.iter_mut().zip(holders) {
            let holder = holder.into_inner();
            if holder != NO_HOLDER {
                withdrawal.holder = holder;
                withdrawal.named_by = 1;
            }
        }
        self.last_errors = keys.last_errors;
        self.replaced = keys.replaced;
        self.sessions.senders = keys.senders;
        self.sending = keys.running.len();
        self.running = keys.running;
        (keys.entries, keys.hashes)
    }
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
