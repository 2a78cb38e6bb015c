//! Settled pairs set apart: a key whose outcome says what the rail did,
//! and the withdrawal it holds, kept out of the live slots and brought
//! back when an event names either of them.
//!
//! A pair is settled here when nothing but a later decision about its own
//! outcome can change it: its outcome is settled, no send runs, no send
//! error waits, no funds are held, and its key is the only record that
//! names its withdrawal. So every running send, hold, key in flight and
//! session stays live, and [`State::in_flight`], [`State::held`] and the
//! totals never need the archive. The totals count archived funds all the
//! same: setting a pair apart and bringing it back move no funds.
//!
//! Bringing a pair back ([`State::fault_in`]) copies it into live slots
//! and marks its archived copy shadowed; it stays live from then on. What
//! reads a state without naming the names first (the iterations, a
//! comparison, an encoding) sees the whole state only through
//! [`State::materialise`].

use std::collections::HashSet;
use std::sync::Arc;

use payonce_model::{Amount, WithdrawalState};
use rust_decimal::Decimal;

use super::archive_blocks::{Blocks, PairView, SettledPair, drawn_keys};
use super::archive_writer::{Encoded, merged};
use super::layout::{Funds, KeySlot, NO_HOLDER, WithdrawalSlot};
use super::{Names, State};
use crate::snapshot_format::error::SnapshotError;

/// A state's archive and which of its pairs were brought back: shared by
/// the state's copies until one of them brings a pair back.
#[derive(Debug, Clone)]
pub(super) struct Archived {
    blocks: Arc<Blocks>,
    shadowed: HashSet<u64>,
    /// Whether this process encoded it ([`State::set_apart_settled`]),
    /// rather than read it from a snapshot.
    in_memory: bool,
}

impl Archived {
    /// Pairs still only in the archive.
    pub(super) fn len(&self) -> usize {
        self.blocks.len().saturating_sub(self.shadowed.len())
    }

    /// Every pair still only in the archive, with its number.
    fn unshadowed(&self) -> Result<Vec<(u64, SettledPair)>, SnapshotError> {
        let pairs = self.blocks.pairs()?;
        Ok(pairs
            .into_iter()
            .filter(|(number, _)| !self.shadowed.contains(number))
            .collect())
    }
}

/// Adds `amount` to `totals[currency]` if its `funds` were captured: the
/// funds an archive's pairs captured, by currency number.
fn add_captured(totals: &mut [Decimal], currency: u32, funds: Funds, amount: Amount) {
    if funds == Funds::Captured {
        let total = &mut totals[currency as usize];
        *total = total.saturating_add(amount.value());
    }
}

/// What reading an archive this process encoded, in memory, gave: it reads
/// back unless the code that wrote or reads it is wrong.
fn read_back<T>(read: Result<T, SnapshotError>) -> T {
    read.unwrap_or_else(|error| panic!("an archive encoded in memory does not read back: {error}"))
}

impl State {
    /// Sets every settled pair apart from the live slots, into an archive
    /// in memory (a copy of the state keeps sharing it); pairs set apart
    /// before in memory stay there. Answers nothing differently. A state
    /// holding a snapshot's archive keeps it as it is, and its live pairs
    /// live: merging would read that whole archive into memory.
    pub(crate) fn set_apart_settled(&mut self) {
        if self
            .archived
            .as_ref()
            .is_some_and(|archived| !archived.in_memory)
        {
            return;
        }
        let settled = self.settled_slots();
        if self.archived.is_none() && !settled.contains(&true) {
            return;
        }
        let (bytes, _) = read_back(self.archive_bytes(&settled));
        for (slot, _) in (0..).zip(&settled).filter(|(_, settled)| **settled) {
            self.remove_settled(slot);
        }
        self.archived = Some(Archived {
            blocks: Arc::new(read_back(Blocks::open(Box::new(bytes), 0, self.last_seq))),
            shadowed: HashSet::new(),
            in_memory: true,
        });
        if self.texts.wants_compacting() {
            self.compact();
        }
    }

    /// By key slot, whether it and the withdrawal it names form a settled
    /// pair: what a snapshot of this state sets apart. Reads the slots,
    /// not their indexes, which a copy for a snapshot lacks.
    pub(super) fn settled_slots(&self) -> Vec<bool> {
        let mut settled = vec![true; self.keys.entries.len()];
        for &slot in &self.keys.free {
            settled[slot as usize] = false;
        }
        for (slot, settled) in (0..).zip(settled.iter_mut()) {
            *settled = *settled && self.is_settled_pair(slot);
        }
        settled
    }

    /// The archive of the pairs still set apart and of the `settled` key
    /// slots ([`State::settled_slots`]), merged under the archive's own
    /// hash key (no bytes when there are no pairs); and by currency
    /// number, the funds those pairs captured. An archive read back from
    /// storage can fail.
    pub(super) fn archive_bytes(
        &self,
        settled: &[bool],
    ) -> Result<(Vec<u8>, Vec<Decimal>), SnapshotError> {
        let keys = self
            .archived
            .as_ref()
            .map_or_else(drawn_keys, |archived| archived.blocks.hash_key());
        let mut captured = vec![Decimal::ZERO; self.currencies.len()];
        let mut count = |pair: &PairView<'_>| {
            let Some(&number) = self.currency_numbers.get(pair.currency) else {
                let found = format!("currency {}", pair.currency);
                return Err(SnapshotError::Invalid {
                    field: "archived currency",
                    offset: 0,
                    expected: "a currency the state holds".to_owned(),
                    found,
                });
            };
            add_captured(&mut captured, number, pair.funds, pair.amount);
            Ok(())
        };
        let mut added = Encoded::new(keys);
        for (slot, _) in (0..).zip(settled).filter(|(_, settled)| **settled) {
            let pair = self.settled_view(slot);
            count(&pair)?;
            added.push(&pair);
        }
        added.sort();
        let bytes = match &self.archived {
            Some(archived) => merged(&archived.blocks, &archived.shadowed, &added, &mut count)?,
            None if added.is_empty() => Vec::new(),
            None => added.into_archive(),
        };
        Ok((bytes, captured))
    }

    /// Reads `blocks`, an archive read from a snapshot, whole, and checks
    /// it against the body: no pair's key or id is in the body too, each
    /// pair's currency is the body's, and the funds its pairs captured are
    /// `archived`, by currency.
    pub(super) fn check_archive(
        &self,
        blocks: &Blocks,
        archived: &[Decimal],
    ) -> Result<(), SnapshotError> {
        let mut captured = vec![Decimal::ZERO; self.currencies.len()];
        for (number, pair) in blocks.pairs()? {
            if self.find_key(&pair.key).is_some() || self.find_withdrawal(&pair.id).is_some() {
                let found = format!("key {} or withdrawal {} in the body too", pair.key, pair.id);
                return Err(blocks.refused(number, "a pair the body does not hold", found));
            }
            let Some(&currency) = self.currency_numbers.get(&pair.currency) else {
                let found = format!("currency {}", pair.currency);
                return Err(blocks.refused(number, "a currency the body lists", found));
            };
            add_captured(&mut captured, currency, pair.funds, pair.amount);
        }
        match (0..captured.len())
            .find(|&n| captured[n] != archived[n] && captured[n] != Decimal::MAX)
        {
            None => Ok(()),
            Some(number) => Err(SnapshotError::Invalid {
                field: "archived total",
                offset: 0,
                expected: format!(
                    "{} {}, what the archive's pairs captured",
                    captured[number], self.currencies[number]
                ),
                found: archived[number].to_string(),
            }),
        }
    }

    /// The blocks of the archive it holds, if any.
    pub(super) fn archive_blocks(&self) -> Option<&Arc<Blocks>> {
        self.archived.as_ref().map(|archived| &archived.blocks)
    }

    /// Takes `blocks`, an archive read from a snapshot, as this state's
    /// pairs set apart.
    pub(super) fn adopt_archive(&mut self, blocks: Blocks) {
        assert!(self.archived.is_none(), "a state adopts one archive");
        self.archived = Some(Archived {
            blocks: Arc::new(blocks),
            shadowed: HashSet::new(),
            in_memory: false,
        });
    }

    /// Whether key slot `slot` and the withdrawal it names form a settled
    /// pair (see the module's comment).
    fn is_settled_pair(&self, slot: u32) -> bool {
        let entry = &self.keys[slot];
        let withdrawal = &self.withdrawals[entry.withdrawal];
        entry.state.is_some_and(WithdrawalState::is_settled)
            && !entry.send_running
            && !self.last_errors.contains_key(&slot)
            && withdrawal.listed
            && withdrawal.holder == slot
            && withdrawal.named_by == 1
            && withdrawal.funds != Funds::Held
    }

    /// The settled pair of key slot `slot`, borrowed from the slots.
    fn settled_view(&self, slot: u32) -> PairView<'_> {
        let entry = &self.keys[slot];
        let withdrawal = &self.withdrawals[entry.withdrawal];
        let text = |at| self.texts.get(at);
        PairView {
            key: text(entry.key),
            claimed_seq: entry.claimed_seq,
            claimed_at: entry.claimed_at,
            state: entry
                .state
                .unwrap_or_else(|| panic!("key slot {slot} set apart in flight")),
            reference: entry.reference.map(text),
            reason: entry.reason.map(text),
            requested_by: text(
                entry.requested_by.unwrap_or_else(|| {
                    panic!("key slot {slot} has an outcome without a requester")
                }),
            ),
            replaced: self.replaced.get(&slot).map_or(&[], |replaced| replaced),
            id: text(withdrawal.id),
            destination: text(withdrawal.destination),
            amount: withdrawal.amount,
            currency: self.currencies[withdrawal.currency as usize].as_str(),
            created: withdrawal.created,
            funds: withdrawal.funds,
        }
    }

    /// Takes the settled pair of key slot `slot` out of the live slots,
    /// moving no funds.
    fn remove_settled(&mut self, slot: u32) {
        let entry = self.keys[slot].clone();
        let withdrawal = self.withdrawals[entry.withdrawal].clone();
        let key_hash = self.hasher.hash(self.texts.get(entry.key));
        let id_hash = self.hasher.hash(self.texts.get(withdrawal.id));
        for at in [entry.key, withdrawal.id, withdrawal.destination] {
            self.texts.free(at);
        }
        for at in [entry.reference, entry.reason, entry.requested_by] {
            self.texts.free_option(at);
        }
        self.replaced.remove(&slot);
        self.keys.unlist(slot, key_hash);
        self.keys.free.push(slot);
        self.withdrawals.unlist(entry.withdrawal, id_hash);
        let freed = &mut self.withdrawals[entry.withdrawal];
        (freed.listed, freed.named_by, freed.holder) = (false, 0, NO_HOLDER);
        self.withdrawals.free.push(entry.withdrawal);
    }

    /// Brings back, into live slots, the archived pair of `key` and of
    /// withdrawal `id`: what judging or applying an event naming them
    /// reads. Does nothing for a name that is live or archived nowhere. A
    /// pair that cannot be read back is the error, and the state is as
    /// before but for pairs already brought back, which answer alike.
    pub(crate) fn fault_in(
        &mut self,
        key: Option<&str>,
        id: Option<&str>,
    ) -> Result<(), SnapshotError> {
        let Some(archived) = &self.archived else {
            return Ok(());
        };
        let blocks = Arc::clone(&archived.blocks);
        if let Some(key) = key.filter(|key| self.find_key(key).is_none())
            && let Some((number, pair)) = blocks.find_key(key)?
        {
            self.bring_back_once(&blocks, number, &pair)?;
        }
        if let Some(id) = id.filter(|id| self.find_withdrawal(id).is_none())
            && let Some((number, pair)) = blocks.find_id(id)?
        {
            self.bring_back_once(&blocks, number, &pair)?;
        }
        Ok(())
    }

    /// [`State::fault_in`] of the names an event looks up.
    pub(crate) fn fault_in_names(&mut self, names: &Names<'_>) -> Result<(), SnapshotError> {
        if self.archived.is_none() {
            return Ok(());
        }
        self.fault_in(
            names.key.map(|name| name.text),
            names.id.map(|name| name.text),
        )
    }

    /// Brings archived pair `number` of `blocks` back unless it was
    /// already.
    fn bring_back_once(
        &mut self,
        blocks: &Blocks,
        number: u64,
        pair: &SettledPair,
    ) -> Result<(), SnapshotError> {
        let shadowed = self
            .archived
            .as_ref()
            .is_some_and(|archived| archived.shadowed.contains(&number));
        if shadowed {
            return Ok(());
        }
        self.bring_back(pair)
            .map_err(|(expected, found)| blocks.refused(number, expected, found))?;
        if let Some(archived) = self.archived.as_mut() {
            archived.shadowed.insert(number);
        }
        Ok(())
    }

    /// Brings every archived pair back: the whole state, for what reads
    /// it without naming names. On an archive that cannot be read back
    /// whole, the error, with the pairs brought back before it live.
    pub(crate) fn materialise(&mut self) -> Result<(), SnapshotError> {
        let Some(archived) = self.archived.take() else {
            return Ok(());
        };
        let unshadowed = match archived.unshadowed() {
            Ok(unshadowed) => unshadowed,
            Err(error) => {
                self.archived = Some(archived);
                return Err(error);
            }
        };
        for (number, pair) in unshadowed {
            let brought = self.bring_back(&pair);
            brought
                .map_err(|(expected, found)| archived.blocks.refused(number, expected, found))?;
        }
        Ok(())
    }

    /// A copy of this state with every archived pair brought back.
    pub(crate) fn whole(&self) -> Result<State, SnapshotError> {
        let mut whole = self.clone();
        whole.materialise()?;
        Ok(whole)
    }

    /// Panics if settled pairs are set apart: `what` reads the whole state.
    pub(super) fn assert_whole(&self, what: &str) {
        assert!(
            self.archived.is_none(),
            "{what} read from a state with settled pairs set apart: bring them back first"
        );
    }

    /// Puts `pair` into live slots as it was before it was set apart;
    /// refuses (what was expected, what was found) a pair whose key or id
    /// is live already, or whose currency the state does not hold, before
    /// changing anything.
    fn bring_back(&mut self, pair: &SettledPair) -> Result<(), (&'static str, String)> {
        let live = if self.find_key(&pair.key).is_some() {
            Some(format!("key {}, which is live", pair.key))
        } else if self.find_withdrawal(&pair.id).is_some() {
            Some(format!("withdrawal {}, which is live", pair.id))
        } else {
            None
        };
        if let Some(found) = live {
            return Err(("a pair whose key and id are set apart", found));
        }
        let Some(&currency) = self.currency_numbers.get(&pair.currency) else {
            let found = format!("currency {}", pair.currency);
            return Err(("a currency the state holds", found));
        };
        let withdrawal = WithdrawalSlot {
            id: self.texts.push(&pair.id),
            destination: self.texts.push(&pair.destination),
            amount: pair.amount,
            currency,
            holder: NO_HOLDER,
            named_by: 1,
            created: pair.created,
            funds: pair.funds,
            listed: true,
        };
        let withdrawal = self
            .withdrawals
            .insert(self.hasher.hash(&pair.id), withdrawal);
        let entry = KeySlot {
            key: self.texts.push(&pair.key),
            withdrawal,
            claimed_seq: pair.claimed_seq,
            claimed_at: pair.claimed_at,
            state: Some(pair.state),
            send_running: false,
            reference: pair.reference.as_deref().map(|text| self.texts.push(text)),
            reason: pair.reason.as_deref().map(|text| self.texts.push(text)),
            requested_by: Some(self.texts.push(&pair.requested_by)),
        };
        let slot = self.keys.insert(self.hasher.hash(&pair.key), entry);
        self.withdrawals[withdrawal].holder = slot;
        if !pair.replaced.is_empty() {
            self.replaced.insert(slot, pair.replaced.clone());
        }
        Ok(())
    }
}

/// An archive in memory whose reads fail while its switch is on: what a
/// test puts under a state to see what a failed read does.
#[cfg(test)]
#[derive(Debug)]
struct Switchable {
    bytes: Vec<u8>,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(test)]
impl super::archive_blocks::ArchiveSource for Switchable {
    fn read_at(&self, offset: u64, len: usize, into: &mut Vec<u8>) -> Result<(), SnapshotError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(SnapshotError::Store {
                detail: format!("reading {len} bytes at {offset} failed, as the test asked"),
            });
        }
        self.bytes.read_at(offset, len, into)
    }

    fn byte_len(&self) -> u64 {
        self.bytes.len() as u64
    }
}

#[cfg(test)]
impl State {
    /// Puts this state's archive behind a switch that fails every read of
    /// it while on (off at first); `None` if no pair is set apart.
    pub(crate) fn archive_switch(&mut self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        let archived = self.archived.as_mut()?;
        let source = &archived.blocks;
        let mut bytes = Vec::new();
        read_back(
            source
                .source()
                .read_at(0, source.source().byte_len() as usize, &mut bytes),
        );
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let switchable = Switchable {
            bytes,
            failing: Arc::clone(&failing),
        };
        archived.blocks = Arc::new(read_back(Blocks::open(
            Box::new(switchable),
            0,
            self.last_seq,
        )));
        Some(failing)
    }
}
