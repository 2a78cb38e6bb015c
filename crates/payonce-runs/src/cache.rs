//! The block cache: checked blocks of any run, shared by every run of a
//! process, held under a byte budget.
//!
//! Sixteen shards, each a map and a CLOCK ring under its own lock, so
//! lookups on different blocks rarely wait for each other. Adding a block
//! takes one more lock, the admission lock, under which room is made
//! (evicting from the shards in turn, one block from each, a CLOCK sweep
//! in each) before the block goes in: the bytes held never pass the
//! budget, and a block larger than the whole budget is handed back
//! without being kept. A hit takes its shard's lock only.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::checked::CheckedBlock;
use crate::error::Section;

/// Shards of a cache.
const SHARDS: usize = 16;
/// Bytes a held block is charged beyond its own and its index's (12
/// bytes a record): its map entry, its slot and its allocations' headers,
/// about.
pub const BLOCK_CHARGE_EXTRA: u64 = 64;

/// A block of a run: the run's number and trailer checksum (so two runs
/// a caller happened to number alike do not share blocks), its section
/// and its number in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BlockKey {
    pub(crate) run: u64,
    pub(crate) trailer_crc: u32,
    pub(crate) section: Section,
    pub(crate) block: u64,
}

/// What a cache did since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Blocks a lookup found held.
    pub hits: u64,
    /// Blocks a lookup had to read.
    pub misses: u64,
    /// Bytes read from sources for those misses.
    pub bytes_read: u64,
    /// Blocks let go to make room.
    pub evictions: u64,
    /// Bytes held now, each block charged [`BLOCK_CHARGE_EXTRA`] more.
    pub used_bytes: u64,
    /// Blocks held now.
    pub blocks: u64,
}

/// Checked blocks of runs, under a byte budget. Share it (`Arc`) among
/// every run and thread of a process.
pub struct BlockCache {
    budget: u64,
    shards: Box<[Mutex<Shard>]>,
    /// The shard the next eviction starts from: held by every insertion,
    /// so making room and adding happen one insertion at a time.
    admission: Mutex<usize>,
    used: AtomicU64,
    blocks: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    bytes_read: AtomicU64,
    evictions: AtomicU64,
}

impl fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockCache")
            .field("budget", &self.budget)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A lock whose holder panicked is still usable: every change under these
/// locks is whole before anything that can panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What holding `block` costs.
fn charge(block: &CheckedBlock) -> u64 {
    block.held_len() + BLOCK_CHARGE_EXTRA
}

impl BlockCache {
    /// A cache holding at most `budget_bytes` of blocks.
    pub fn new(budget_bytes: u64) -> BlockCache {
        BlockCache {
            budget: budget_bytes,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            admission: Mutex::new(0),
            used: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The budget it was made with.
    pub fn budget_bytes(&self) -> u64 {
        self.budget
    }

    /// Bytes held now: never more than the budget.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Its counters.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            used_bytes: self.used_bytes(),
            blocks: self.blocks.load(Ordering::Relaxed),
        }
    }

    /// Lets go of every block of run `run` (a run merged away), rather
    /// than waiting for them to be evicted.
    pub fn forget_run(&self, run: u64) {
        let _admission = lock(&self.admission);
        for shard in &*self.shards {
            let freed = lock(shard).remove_where(|key| key.run == run);
            self.let_go(freed);
        }
    }

    fn shard(&self, key: &BlockKey) -> &Mutex<Shard> {
        let mixed = (key.run ^ key.block.rotate_left(32) ^ u64::from(key.trailer_crc))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.shards[(mixed >> 60) as usize % SHARDS]
    }

    /// The block `key` if held, counting a hit.
    pub(crate) fn get(&self, key: &BlockKey) -> Option<Arc<CheckedBlock>> {
        let found = lock(self.shard(key)).get(key);
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Counts a block read from its source because it was not held.
    pub(crate) fn count_miss(&self, bytes: u64) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Holds `block`, checked, as `key`, making room first; returns the
    /// copy held (another thread's, if it added the same block first), or
    /// `block` itself if it is larger than the budget.
    pub(crate) fn insert(&self, key: BlockKey, block: Arc<CheckedBlock>) -> Arc<CheckedBlock> {
        let cost = charge(&block);
        if cost > self.budget {
            return block;
        }
        let mut next = lock(&self.admission);
        if let Some(held) = lock(self.shard(&key)).get(&key) {
            return held;
        }
        self.make_room(cost, &mut next);
        lock(self.shard(&key)).insert(key, block.clone());
        self.used.fetch_add(cost, Ordering::Relaxed);
        self.blocks.fetch_add(1, Ordering::Relaxed);
        assert!(self.used_bytes() <= self.budget);
        block
    }

    /// Evicts, a block from each shard in turn from `next`, until `cost`
    /// more bytes fit the budget or nothing is held: the shards' hands
    /// taken together sweep as one CLOCK. After two rounds of shards that
    /// evict nothing (the first clears every reference, but hits may set
    /// them again meanwhile), references are passed over.
    fn make_room(&self, cost: u64, next: &mut usize) {
        let mut empty_in_a_row = 0;
        while self.used_bytes() + cost > self.budget && empty_in_a_row < 3 * SHARDS {
            let force = empty_in_a_row >= 2 * SHARDS;
            let freed = lock(&self.shards[*next]).evict_one(force);
            *next = (*next + 1) % SHARDS;
            match freed {
                Some(freed) => {
                    self.let_go(freed);
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                    empty_in_a_row = if force { 2 * SHARDS } else { 0 };
                }
                None => empty_in_a_row += 1,
            }
        }
    }

    /// Counts `(bytes, blocks)` let go.
    fn let_go(&self, (bytes, blocks): (u64, u64)) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        self.blocks.fetch_sub(blocks, Ordering::Relaxed);
    }
}

/// One shard: where each held block's slot is, and the CLOCK ring.
#[derive(Default)]
struct Shard {
    map: HashMap<BlockKey, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    hand: usize,
}

struct Slot {
    key: BlockKey,
    block: Option<Arc<CheckedBlock>>,
    /// Set by a hit, cleared by the hand passing: a block is evicted when
    /// the hand finds it unreferenced.
    referenced: bool,
}

impl Shard {
    fn get(&mut self, key: &BlockKey) -> Option<Arc<CheckedBlock>> {
        let slot = self.slots.get_mut(*self.map.get(key)?)?;
        slot.referenced = true;
        slot.block.clone()
    }

    fn insert(&mut self, key: BlockKey, block: Arc<CheckedBlock>) {
        let slot = Slot {
            key,
            block: Some(block),
            referenced: false,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index] = slot;
                index
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.map.insert(key, index);
    }

    /// Evicts the first unreferenced block the hand finds in one turn,
    /// clearing the references it passes: its charge and 1, or `None` if
    /// the shard holds none unreferenced (it then holds none referenced
    /// either, until a hit).
    /// With `force`, references are passed over.
    fn evict_one(&mut self, force: bool) -> Option<(u64, u64)> {
        let len = self.slots.len();
        for _ in 0..len {
            let index = self.hand;
            self.hand = (self.hand + 1) % len;
            let slot = &mut self.slots[index];
            if slot.block.is_none() {
                continue;
            }
            if std::mem::take(&mut slot.referenced) && !force {
                continue;
            }
            return Some(self.remove(index));
        }
        None
    }

    fn remove(&mut self, index: usize) -> (u64, u64) {
        let slot = &mut self.slots[index];
        let freed = slot.block.take().map_or(0, |block| charge(&block));
        self.map.remove(&slot.key);
        self.free.push(index);
        (freed, 1)
    }

    fn remove_where(&mut self, doomed: impl Fn(&BlockKey) -> bool) -> (u64, u64) {
        let indexes: Vec<usize> = (self.map.iter())
            .filter(|(key, _)| doomed(key))
            .map(|(_, &index)| index)
            .collect();
        indexes.into_iter().fold((0, 0), |(bytes, blocks), index| {
            let (freed, count) = self.remove(index);
            (bytes + freed, blocks + count)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;

    fn key(block: u64) -> BlockKey {
        BlockKey {
            run: block % 3,
            trailer_crc: 7,
            section: Section::Records,
            block,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn the_bytes_held_never_pass_the_budget(
            budget in 0u64..20_000,
            steps in proptest::collection::vec((0u64..64, 0usize..3000, any::<bool>()), 1..300),
        ) {
            // Guards against eviction letting a cache hold more than its
            // budget, under any mix of sizes, hits and repeats.
            let cache = BlockCache::new(budget);
            for (block, len, read) in steps {
                if read {
                    let _ = cache.get(&key(block));
                } else {
                    cache.insert(key(block), Arc::new(CheckedBlock::of_entries(vec![block as u8; len])));
                }
                prop_assert!(cache.used_bytes() <= budget);
                let counted: u64 = cache.shards.iter()
                    .flat_map(|shard| lock(shard).slots.iter().filter_map(|slot| slot.block.as_ref().map(|b| charge(b))).collect::<Vec<_>>())
                    .sum();
                prop_assert_eq!(counted, cache.used_bytes());
            }
        }
    }

    #[test]
    fn a_block_used_again_outlives_one_read_once() {
        // Guards against the CLOCK hand evicting a block that hits keep
        // using before blocks read once and never again.
        let block_len = 1000;
        let cache = BlockCache::new(4 * (block_len + BLOCK_CHARGE_EXTRA));
        let hot = BlockKey { run: 9, ..key(0) };
        cache.insert(
            hot,
            Arc::new(CheckedBlock::of_entries(vec![0; block_len as usize])),
        );
        for block in 1..100 {
            assert!(cache.get(&hot).is_some(), "evicted before block {block}");
            cache.insert(
                key(block),
                Arc::new(CheckedBlock::of_entries(vec![0; block_len as usize])),
            );
        }
        assert!(cache.stats().evictions > 90);
    }
}
