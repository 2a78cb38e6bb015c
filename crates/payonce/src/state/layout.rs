//! How the state is laid out in memory, apart from what it means: the
//! live part of the state (keys in flight, holds, running sends, and the
//! settled pairs a memory budget leaves in memory) is what the budget's
//! live share holds, so the layout is about bytes.
//!
//! - [`Texts`]: every piece of text (keys, ids, destinations, references,
//!   reasons, requesters) end to end in chunks of 1 MiB, a text never
//!   straddling two; slots refer to it by offset and length ([`TextRef`]).
//!   An owned string per field would cost an allocation header and a
//!   pointer each. Text freed by releases is compacted away once it is at
//!   least 1 MiB (`GARBAGE_MIN`) and at least as much as is still in use.
//! - [`Slots`]: fixed-size entries of one kind, numbered and reused once
//!   freed, and an index of the numbers in use (`super::index`) that finds
//!   an entry by the text it is named by. A map of owned keys would cost a
//!   wide entry per slot of spare capacity.
//! - Texts and entries are kept in chunks shared copy-on-write
//!   (`super::chunks`), so a snapshot copies the state by its pointers
//!   under the ledger's lock, and encodes it after.
//! - [`KeySlot`] and [`WithdrawalSlot`]: the two kinds of entries.
//! - [`NameHasher`]: how names are hashed: SipHash under a key drawn by
//!   each process, so nobody can choose names that collide.

use std::hash::{BuildHasher, RandomState};
use std::num::NonZeroU16;

use payonce_model::{Amount, FieldError, WithdrawalState};

use std::sync::Arc;

use super::chunks::Chunks;
use super::index::NameIndex;
use crate::time::Timestamp;

/// Most keys, and most withdrawals, the state can hold at once: slots are
/// numbered with 32 bits. Each costs memory long before this.
pub const SLOTS_MAX: usize = u32::MAX as usize;

/// Text freed by releases that the buffer may hold before it is compacted:
/// at least this many bytes, and at least as many as are still in use.
pub(super) const GARBAGE_MIN: usize = 1 << 20;

/// Where a piece of text sits in [`Texts`]: a 48-bit offset and a length.
/// Validated text is never empty, which leaves `Option<TextRef>` its niche.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TextRef {
    offset_low: u32,
    offset_high: u16,
    len: NonZeroU16,
}

impl TextRef {
    /// This reference after the buffer it points into was appended to
    /// another, `shift` bytes on ([`Texts::append`]).
    pub(super) fn shifted(self, shift: usize) -> TextRef {
        let offset = ((usize::from(self.offset_high) << 32) | self.offset_low as usize) + shift;
        assert!(
            offset >> 48 == 0,
            "the state's text buffer outgrew 48-bit offsets"
        );
        TextRef {
            offset_low: offset as u32,
            offset_high: (offset >> 32) as u16,
            len: self.len,
        }
    }
}

/// Every piece of text the state holds, end to end in chunks of
/// [`TEXT_CHUNK_LEN`] bytes, shared copy-on-write like [`Chunks`]: a text
/// never straddles two chunks, and only the newest chunk is appended to.
/// Text is appended and never moved, except by [`Texts::compacted`]; freed
/// text is only counted.
#[derive(Debug, Clone, Default)]
pub(super) struct Texts {
    chunks: Vec<Arc<String>>,
    /// Bytes of text pushed, freed or not.
    pub(super) used: usize,
    pub(super) garbage: usize,
}

/// Bytes per chunk of [`Texts`]: 1 MiB, far above the longest text, so a
/// chunk ends with at most one text's worth of bytes unused.
const TEXT_CHUNK_BITS: u32 = 20;
const TEXT_CHUNK_LEN: usize = 1 << TEXT_CHUNK_BITS;
const TEXT_CHUNK_MASK: usize = TEXT_CHUNK_LEN - 1;

impl Texts {
    pub(super) fn push(&mut self, text: &str) -> TextRef {
        // Validated text is at most a few KiB and never empty; a buffer of
        // 2^48 bytes would not fit in memory.
        let len = u16::try_from(text.len())
            .ok()
            .and_then(NonZeroU16::new)
            .unwrap_or_else(|| panic!("text of {} bytes kept in the state", text.len()));
        let fits = self
            .chunks
            .last()
            .is_some_and(|last| last.len() + text.len() <= TEXT_CHUNK_LEN);
        if !fits {
            self.chunks
                .push(Arc::new(String::with_capacity(TEXT_CHUNK_LEN)));
        }
        let chunk = self.chunks.len() - 1;
        let last = Arc::make_mut(&mut self.chunks[chunk]);
        let offset = chunk << TEXT_CHUNK_BITS | last.len();
        assert!(
            offset >> 48 == 0,
            "the state's text buffer outgrew 48-bit offsets"
        );
        last.push_str(text);
        self.used += text.len();
        TextRef {
            offset_low: offset as u32,
            offset_high: (offset >> 32) as u16,
            len,
        }
    }

    #[inline]
    /// Bytes its chunks take, each at its full length.
    pub(super) fn bytes(&self) -> usize {
        self.chunks.len() * TEXT_CHUNK_LEN
    }

    /// Puts every chunk of `other` after this buffer's: a reference into
    /// `other`, [`TextRef::shifted`] by the returned count, names the same
    /// text here.
    pub(super) fn append(&mut self, other: Texts) -> usize {
        // This last chunk is appended to no more: what it does not hold
        // goes back to the allocator.
        if let Some(last) = self.chunks.last_mut() {
            Arc::make_mut(last).shrink_to_fit();
        }
        let shift = self.chunks.len() << TEXT_CHUNK_BITS;
        self.chunks.extend(other.chunks);
        self.used += other.used;
        self.garbage += other.garbage;
        shift
    }

    pub(super) fn get(&self, at: TextRef) -> &str {
        let offset = (usize::from(at.offset_high) << 32) | at.offset_low as usize;
        let start = offset & TEXT_CHUNK_MASK;
        &self.chunks[offset >> TEXT_CHUNK_BITS][start..start + usize::from(at.len.get())]
    }

    pub(super) fn free(&mut self, at: TextRef) {
        self.garbage += usize::from(at.len.get());
    }

    pub(super) fn free_option(&mut self, at: Option<TextRef>) {
        if let Some(at) = at {
            self.free(at);
        }
    }

    /// Whether enough text has been freed that copying out what is still
    /// in use pays for itself.
    pub(super) fn wants_compacting(&self) -> bool {
        self.garbage >= GARBAGE_MIN && self.garbage * 2 >= self.used
    }

    /// A buffer holding only the text still in use: `live` calls its
    /// argument with every reference in use, which it moves into the new
    /// buffer. The text of a ledger whose keys are released or retried for
    /// years so stops growing; amortised over the frees that earned it,
    /// a few bytes each.
    pub(super) fn compacted(&self, live: impl FnOnce(&mut dyn FnMut(&mut TextRef))) -> Texts {
        let used = self.used - self.garbage;
        let mut texts = Texts::default();
        live(&mut |at: &mut TextRef| *at = texts.push(self.get(*at)));
        assert_eq!(
            texts.used, used,
            "compaction kept other text than was in use"
        );
        texts
    }
}

/// Builds a model value back from text the state stored. The text passed
/// the same rules when it was stored, and a slot's text stays where its
/// slot says until the slot is freed, so it passes again.
pub(super) fn stored<'t, T>(
    text: &'t str,
    parse: impl FnOnce(&'t str) -> Result<T, FieldError>,
) -> T {
    match parse(text) {
        Ok(value) => value,
        Err(error) => panic!("text {text:?} was valid when stored and now is not: {error}"),
    }
}

/// Hashes names (request keys and withdrawal ids, which come from clients)
/// with a keyed hash, so nobody can choose colliding ones.
#[derive(Debug, Clone, Default)]
pub(super) struct NameHasher(RandomState);

impl NameHasher {
    /// The 32 bits of `name`'s hash that a slot keeps.
    pub(super) fn hash(&self, name: &str) -> u32 {
        // Any 32 bits of SipHash's output are as good as any other.
        self.0.hash_one(name) as u32
    }
}

/// An entry named by a piece of text: a key by the key, a withdrawal by
/// its id.
pub(super) trait NamedEntry {
    fn name(&self) -> TextRef;
}

/// Entries of one kind, numbered, reused once freed, and an index of the
/// numbers in use that finds an entry by the text it is named by. The
/// index keeps 32 bits of each name's hash beside its number: growing it
/// moves every entry by its hash, and hashing every name again (text
/// spread over the whole buffer) cost a sixth of a replay.
#[derive(Clone)]
pub(super) struct Slots<T> {
    pub(super) entries: Chunks<T>,
    pub(super) free: Vec<u32>,
    index: NameIndex,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Chunks::default(),
            free: Vec::new(),
            index: NameIndex::default(),
        }
    }
}

impl<T: NamedEntry + Clone> Slots<T> {
    /// The entry named `name`, whose [`NameHasher::hash`] is `hash`.
    pub(super) fn find(&self, texts: &Texts, hash: u32, name: &str) -> Option<u32> {
        let entries = &self.entries;
        self.index.find(hash, |slot| {
            texts.get(entries[slot as usize].name()) == name
        })
    }

    /// Reads the part of the index that [`Slots::find`] of a name hashing
    /// to `hash`, or the insert after it, reads first, and finds nothing.
    pub(super) fn read_ahead(&self, hash: u32) {
        self.index.read_ahead(hash);
    }

    /// Puts `entry`, whose name's hash is `hash`, in a free slot, or a new
    /// one, and returns its number. Its name must not be in use.
    pub(super) fn insert(&mut self, hash: u32, entry: T) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.entries[slot as usize] = entry;
                slot
            }
            None => {
                assert!(
                    self.entries.len() < SLOTS_MAX,
                    "the state holds {SLOTS_MAX} slots already"
                );
                self.entries.push(entry);
                (self.entries.len() - 1) as u32
            }
        };
        self.index.insert(hash, slot);
        slot
    }

    /// Takes slot `slot`, whose name hashes to `hash`, out of the index:
    /// its name no longer finds it. The caller frees it (pushes it on
    /// `free`) once nothing names it.
    pub(super) fn unlist(&mut self, slot: u32, hash: u32) {
        self.index.remove(hash, slot);
    }

    /// The numbers of the slots in use, in no particular order.
    pub(super) fn in_use(&self) -> impl Iterator<Item = u32> + '_ {
        self.index.slots()
    }

    /// Calls `change` on every entry in use.
    pub(super) fn change_in_use(&mut self, mut change: impl FnMut(&mut T)) {
        for slot in self.index.slots() {
            change(&mut self.entries[slot as usize]);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// Bytes its entries, free list and index take.
    pub(super) fn bytes(&self) -> usize {
        self.entries.bytes() + self.free.capacity() * size_of::<u32>() + self.index.bytes()
    }
}

impl<T: NamedEntry + Clone> Slots<T> {
    /// Slots `0..entries.len()` holding `entries`, each found by its name,
    /// whose hash is `hashes`' at its place; a name two entries have is the
    /// error.
    pub(super) fn built(
        entries: Chunks<T>,
        hashes: &[u32],
        texts: &Texts,
    ) -> Result<Slots<T>, String> {
        assert_eq!(entries.len(), hashes.len());
        let name = |slot: u32| texts.get(entries[slot as usize].name());
        let index = NameIndex::build(hashes, |a, b| name(a) == name(b))
            .map_err(|(a, _)| name(a).to_owned())?;
        Ok(Slots {
            entries,
            free: Vec::new(),
            index,
        })
    }
}

impl<T: Clone> Slots<T> {
    /// A copy of the entries and free slots, without the index, which only
    /// lookups use: what a snapshot encodes. The entries are shared with
    /// this one until either writes them.
    pub(super) fn copy_without_index(&self) -> Slots<T> {
        Slots {
            entries: self.entries.clone(),
            free: self.free.clone(),
            index: NameIndex::default(),
        }
    }
}

impl<T> std::ops::Index<u32> for Slots<T> {
    type Output = T;
    fn index(&self, slot: u32) -> &T {
        &self.entries[slot as usize]
    }
}

impl<T: Clone> std::ops::IndexMut<u32> for Slots<T> {
    fn index_mut(&mut self, slot: u32) -> &mut T {
        &mut self.entries[slot as usize]
    }
}

/// What a request key claimed and what came of it.
#[derive(Debug, Clone)]
pub(super) struct KeySlot {
    pub(super) key: TextRef,
    /// The slot of the withdrawal it claimed.
    pub(super) withdrawal: u32,
    pub(super) claimed_seq: u64,
    pub(super) claimed_at: Timestamp,
    /// The outcome's state; `None` while in flight.
    pub(super) state: Option<WithdrawalState>,
    /// Its send is running in this process: claimed since the last open
    /// and not completed.
    pub(super) send_running: bool,
    /// The outcome's reference.
    pub(super) reference: Option<TextRef>,
    /// The outcome's reason.
    pub(super) reason: Option<TextRef>,
    /// The outcome's requester; `None` while in flight.
    pub(super) requested_by: Option<TextRef>,
    /// Whether a run holds this record as it is (see [`Persisted`]).
    pub(super) persisted: Persisted,
    /// The last event that changed this record: a run written from the
    /// state after it holds the record as it is.
    pub(super) changed_seq: u64,
}

/// Whether a run of settled pairs the state holds has a key's record as
/// the slot has it: what decides which settled pairs a snapshot writes
/// into its new run, and which may leave memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Persisted {
    /// No run the state holds has it as it is: new, changed since, or
    /// written into a run the state has not adopted yet.
    No,
    /// A run the state holds has it as it is: brought back from a run, or
    /// written into one the state adopted, unchanged since. A settled pair
    /// that is `Yes` may leave memory and be read back from its run.
    Yes,
}

/// A withdrawal: its fingerprint, holder and hold.
#[derive(Debug, Clone)]
pub(super) struct WithdrawalSlot {
    pub(super) id: TextRef,
    pub(super) destination: TextRef,
    pub(super) amount: Amount,
    /// Its place in the state's currencies.
    pub(super) currency: u32,
    /// The slot of the key holding it, or [`NO_HOLDER`].
    pub(super) holder: u32,
    /// How many keys' records name this slot. One at most, but in a log
    /// that diverged (which only `verify` applies): the slot is not reused
    /// while a record names it.
    pub(super) named_by: u32,
    /// Minted by this ledger.
    pub(super) created: bool,
    /// Where its funds are.
    pub(super) funds: Funds,
    /// Found by its id. A foreign withdrawal released by its holder is
    /// forgotten; its slot stays, unlisted, while another record names it.
    pub(super) listed: bool,
}

impl WithdrawalSlot {
    /// Neither found by id nor named by a record: free for reuse.
    pub(super) fn is_free(&self) -> bool {
        !self.listed && self.named_by == 0
    }
}

/// Where a withdrawal's funds are, as its claim and outcome leave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Funds {
    /// Neither reserved nor moved: never claimed, released, or its send
    /// refused, rejected or failed.
    Free,
    /// Reserved for its claim until the outcome is known.
    Held,
    /// Moved out of custody: the outcome is sent or confirmed.
    Captured,
}

/// [`WithdrawalSlot::holder`] of a withdrawal no key holds.
pub(super) const NO_HOLDER: u32 = u32::MAX;

impl NamedEntry for KeySlot {
    fn name(&self) -> TextRef {
        self.key
    }
}

impl NamedEntry for WithdrawalSlot {
    fn name(&self) -> TextRef {
        self.id
    }
}

// The per-withdrawal memory figure rests on these sizes (docs/performance.md).
const _: () = assert!(size_of::<KeySlot>() <= 64);
const _: () = assert!(size_of::<WithdrawalSlot>() <= 48);
const _: () = assert!(size_of::<Option<TextRef>>() == 8);
