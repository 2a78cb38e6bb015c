//! The index of a [`Slots`](super::layout::Slots): which slot a name
//! leads to, found by the name's 32-bit hash.
//!
//! Open addressing over groups of eight buckets, a cache line each. A
//! bucket holds a name's hash and its slot number side by side, so looking
//! a name up reads one line to find its candidates, and the insert that
//! follows the lookup of a new name writes the line the lookup read. A
//! table that keeps its control bytes apart from its values (as hashbrown
//! does) has that insert write a second line, one the lookup never read:
//! with millions of names that is a cache miss for every new key and
//! withdrawal, and replay's loads after it waited for the store to land.
//!
//! A lookup visits groups in a triangular sequence from the one the hash
//! picks, and stops at the first group with a bucket never used. Taking an
//! entry out leaves a tombstone, which lookups pass over and inserts reuse;
//! growing drops them. At most 7 buckets in 8 are in use, tombstones
//! included, so every lookup ends. Growing puts each entry back from the
//! hash its bucket keeps, so no name is hashed again.

/// Buckets per group: 8 of 8 bytes, one cache line.
const GROUP_LEN: usize = 8;

/// A bucket never used: a lookup that reaches a group holding one stops.
const EMPTY: u64 = u64::MAX;

/// A bucket whose entry was taken out: lookups go on past it.
const GONE: u64 = u32::MAX as u64;

/// No slot: slots are numbered below [`super::SLOTS_MAX`], which is
/// `u32::MAX`, so no bucket in use holds this number.
const NO_SLOT: u32 = u32::MAX;

/// Multiplies a hash to spread its bits over a group number (Fibonacci
/// hashing: 2^64 divided by the golden ratio).
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// Eight buckets, aligned so that a group is one cache line.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Group([u64; GROUP_LEN]);

const NEVER_USED: Group = Group([EMPTY; GROUP_LEN]);

/// A bucket in use: `hash` in the high half, `slot` in the low.
fn bucket(hash: u32, slot: u32) -> u64 {
    debug_assert_ne!(slot, NO_SLOT);
    u64::from(hash) << 32 | u64::from(slot)
}

/// The slot a bucket holds, if it holds one.
fn slot_of(bucket: u64) -> Option<u32> {
    let slot = bucket as u32;
    (slot != NO_SLOT).then_some(slot)
}

/// The slots in use, found by hash.
#[derive(Clone, Default)]
pub(super) struct NameIndex {
    /// A power of two of them, or none before the first insert.
    groups: Vec<Group>,
    /// Buckets holding a slot.
    len: usize,
    /// Buckets holding a slot or a tombstone: those no lookup stops at.
    used: usize,
}

impl NameIndex {
    /// The slot whose bucket holds `hash` and for which `eq` is true.
    #[inline]
    pub(super) fn find(&self, hash: u32, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.probe(hash, |bucket| {
            let slot = slot_of(bucket)?;
            ((bucket >> 32) as u32 == hash && eq(slot)).then_some(slot)
        })
        .map(|(_, slot)| slot)
    }

    /// Reads the cache line a lookup or insert of `hash` reads first, and
    /// changes nothing: a hint, so that the cache misses of several names
    /// overlap.
    #[inline]
    pub(super) fn read_ahead(&self, hash: u32) {
        if let Some(group) = self.groups.get(self.first_group(hash)) {
            std::hint::black_box(group.0[0]);
        }
    }

    /// Puts `slot` under `hash`. The caller makes sure no bucket holds
    /// `slot` already.
    pub(super) fn insert(&mut self, hash: u32, slot: u32) {
        assert_ne!(slot, NO_SLOT, "slot {slot} is no slot");
        if self.used + 1 > self.used_max() {
            self.rebuild();
        }
        let (at, found) = self
            .probe_free(hash)
            .unwrap_or_else(|| unreachable_full(self.len, self.groups.len()));
        if found == EMPTY {
            self.used += 1;
        }
        self.groups[at / GROUP_LEN].0[at % GROUP_LEN] = bucket(hash, slot);
        self.len += 1;
    }

    /// An index of slots `0..hashes.len()`, slot `n` under `hashes[n]`,
    /// built at once, with room for a quarter as many names again before
    /// it grows: as many groups as inserting the names one by one leaves,
    /// unless they come within a quarter of filling them. The slots are
    /// put in the order of the group each starts at, so filling the
    /// groups writes them in order rather than missing the cache once per
    /// slot. Names alike hash alike and start at one group: `same` is asked
    /// of slots whose hashes are equal, and the error is the lowest slot
    /// named like a lower one, with that one.
    pub(super) fn build(
        hashes: &[u32],
        mut same: impl FnMut(u32, u32) -> bool,
    ) -> Result<NameIndex, (u32, u32)> {
        let len = hashes.len();
        assert!(len < NO_SLOT as usize, "{len} slots numbered with 32 bits");
        let groups = (len + len / 4).div_ceil(GROUP_LEN - 1).next_power_of_two();
        let mut index = NameIndex {
            groups: vec![NEVER_USED; groups],
            len: 0,
            used: 0,
        };
        let order = index.by_first_group(hashes);
        // Of the slots named like an earlier one, the lowest: the same
        // whatever the hash key, so a refusal names the same name each time.
        let mut repeated: Option<(u32, u32)> = None;
        let group_of = |bucket: u64| index.first_group((bucket >> 32) as u32);
        for run in order.chunk_by(|&a, &b| group_of(a) == group_of(b)) {
            for (at, &first) in run.iter().enumerate() {
                for &second in &run[at + 1..] {
                    let slots = (first as u32, second as u32);
                    let lower = repeated.is_none_or(|(_, known)| slots.1 < known);
                    if lower && first >> 32 == second >> 32 && same(slots.0, slots.1) {
                        repeated = Some(slots);
                    }
                }
            }
        }
        if let Some(pair) = repeated {
            return Err(pair);
        }
        for entry in order {
            index.insert((entry >> 32) as u32, entry as u32);
        }
        assert!(index.groups.len() == groups, "a built index does not grow");
        Ok(index)
    }

    /// Every slot of `hashes` as the bucket that holds it (its hash in the
    /// high 32 bits, the slot in the low), sorted by the group its hash
    /// starts at: a radix sort, 11 bits of the group a pass. A bucket
    /// carries its hash, so neither the sort nor the inserts after it read
    /// `hashes` out of order: at 10M names, a cache miss per name.
    fn by_first_group(&self, hashes: &[u32]) -> Vec<u64> {
        const DIGIT_BITS: u32 = 11;
        let mut order: Vec<u64> = hashes
            .iter()
            .zip(0u32..)
            .map(|(&hash, slot)| bucket(hash, slot))
            .collect();
        let mut sorted = vec![0u64; order.len()];
        let bits = self.groups.len().trailing_zeros();
        let mut shift = 0;
        while shift < bits {
            let digit = |entry: u64| {
                let group = self.first_group((entry >> 32) as u32);
                (group >> shift) & ((1 << DIGIT_BITS) - 1)
            };
            let mut starts = vec![0usize; (1 << DIGIT_BITS) + 1];
            for &entry in &order {
                starts[digit(entry) + 1] += 1;
            }
            for at in 1..starts.len() {
                starts[at] += starts[at - 1];
            }
            for &entry in &order {
                let place = &mut starts[digit(entry)];
                sorted[*place] = entry;
                *place += 1;
            }
            std::mem::swap(&mut order, &mut sorted);
            shift += DIGIT_BITS;
        }
        order
    }

    /// Takes `slot`, held under `hash`, out; nothing if no bucket holds it.
    pub(super) fn remove(&mut self, hash: u32, slot: u32) {
        let found = self.probe(hash, |bucket| {
            (bucket == self::bucket(hash, slot)).then_some(())
        });
        if let Some((at, ())) = found {
            self.groups[at / GROUP_LEN].0[at % GROUP_LEN] = GONE;
            self.len -= 1;
        }
    }

    /// Every slot held, in no particular order.
    pub(super) fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.groups
            .iter()
            .flat_map(|group| group.0)
            .filter_map(slot_of)
    }

    /// Slots held.
    /// Bytes its buckets take.
    pub(super) fn bytes(&self) -> usize {
        self.groups.capacity() * size_of::<Group>()
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Most buckets in use, tombstones included: 7 in 8.
    fn used_max(&self) -> usize {
        self.groups.len() * (GROUP_LEN - 1)
    }

    /// The group a lookup of `hash` reads first.
    fn first_group(&self, hash: u32) -> usize {
        let bits = self.groups.len().trailing_zeros();
        match bits {
            0 => 0,
            bits => (u64::from(hash).wrapping_mul(SPREAD) >> (64 - bits)) as usize,
        }
    }

    /// Visits the buckets of `hash`'s groups in probe order until `visit`
    /// answers, or a group holds a bucket never used. Answers the bucket's
    /// place and the answer.
    #[inline]
    fn probe<T>(&self, hash: u32, mut visit: impl FnMut(u64) -> Option<T>) -> Option<(usize, T)> {
        let mask = self.groups.len().checked_sub(1)?;
        let mut group = self.first_group(hash);
        for step in 0..self.groups.len() {
            let mut ends = false;
            for (index, &bucket) in self.groups[group].0.iter().enumerate() {
                if let Some(answer) = visit(bucket) {
                    return Some((group * GROUP_LEN + index, answer));
                }
                ends |= bucket == EMPTY;
            }
            if ends {
                return None;
            }
            group = (group + step + 1) & mask;
        }
        None
    }

    /// The first bucket free for `hash` (never used or a tombstone), and
    /// what it holds.
    fn probe_free(&self, hash: u32) -> Option<(usize, u64)> {
        let mask = self.groups.len().checked_sub(1)?;
        let mut group = self.first_group(hash);
        for step in 0..self.groups.len() {
            let buckets = &self.groups[group].0;
            if let Some(index) = buckets.iter().position(|&b| b == EMPTY || b == GONE) {
                return Some((group * GROUP_LEN + index, buckets[index]));
            }
            group = (group + step + 1) & mask;
        }
        None
    }

    /// Puts every slot in a new array of groups without tombstones: twice
    /// as many groups if the slots held fill half of them, else as many.
    fn rebuild(&mut self) {
        let groups = match self.groups.len() {
            0 => 1,
            groups if 2 * (self.len + 1) > self.used_max() => groups * 2,
            groups => groups,
        };
        let old = std::mem::replace(&mut self.groups, vec![NEVER_USED; groups]);
        let len = self.len;
        (self.len, self.used) = (0, 0);
        for bucket in old.iter().flat_map(|group| group.0) {
            if let Some(slot) = slot_of(bucket) {
                self.insert((bucket >> 32) as u32, slot);
            }
        }
        assert_eq!(self.len, len, "rebuilding the index lost or made slots");
    }
}

/// An insert found no free bucket: [`NameIndex::insert`] rebuilds before
/// the buckets in use pass 7 in 8.
fn unreachable_full(len: usize, groups: usize) -> ! {
    panic!("the name index holds {len} slots in {groups} groups and no free bucket")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        // Few hashes, so that many names share one and groups fill.
        let hash = 0u32..64;
        prop::collection::vec(
            prop_oneof![
                3 => hash.clone().prop_map(Op::Insert),
                1 => hash.prop_map(Op::Remove),
            ],
            0..600,
        )
    }

    proptest! {
        #[test]
        fn the_index_finds_what_a_map_holds_through_inserts_removals_and_growth(ops in ops()) {
            // Guards against lookups that stop too early (a tombstone taken for a bucket never used) or lose a slot when the index grows.
            let mut index = NameIndex::default();
            let mut model: BTreeMap<u32, u32> = BTreeMap::new();
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Insert(hash) => {
                        index.insert(hash, next);
                        model.insert(next, hash);
                        next += 1;
                    }
                    Op::Remove(hash) => {
                        let victim = model.iter().find(|(_, h)| **h == hash).map(|(s, _)| *s);
                        if let Some(slot) = victim {
                            index.remove(hash, slot);
                            model.remove(&slot);
                        }
                    }
                }
                prop_assert_eq!(index.len(), model.len());
                prop_assert!(index.used <= index.used_max());
            }
            for (&slot, &hash) in &model {
                prop_assert_eq!(index.find(hash, |found| found == slot), Some(slot));
            }
            let mut held: Vec<u32> = index.slots().collect();
            held.sort_unstable();
            let mut expected: Vec<u32> = model.keys().copied().collect();
            expected.sort_unstable();
            prop_assert_eq!(held, expected);
            prop_assert_eq!(index.find(1000, |_| true), None);
        }
    }

    proptest! {
        #[test]
        fn an_index_built_at_once_finds_what_inserts_would_and_names_a_repeat(
            hashes in prop::collection::vec(0u32..512, 0..3000),
            repeat in any::<prop::sample::Index>(),
        ) {
            // Guards against a bulk build that loses a slot, places one where a lookup does not look, or misses two slots named alike.
            let index = NameIndex::build(&hashes, |_, _| false).unwrap();
            prop_assert_eq!(index.len(), hashes.len());
            for (slot, &hash) in hashes.iter().enumerate() {
                let slot = slot as u32;
                prop_assert_eq!(index.find(hash, |found| found == slot), Some(slot));
            }
            if hashes.len() >= 2 {
                // Slot `named` is named like slot 0, under the same hash.
                let named = repeat.index(hashes.len() - 1) + 1;
                let mut alike = hashes.clone();
                alike[named] = alike[0];
                let found = NameIndex::build(&alike, |a, b| {
                    let pair = (a.min(b), a.max(b));
                    pair == (0, named as u32)
                });
                prop_assert_eq!(found.err().map(|(a, b)| (a.min(b), a.max(b))), Some((0, named as u32)));
            }
        }
    }

    #[test]
    fn a_bulk_build_orders_the_names_by_first_group_then_slot_at_every_size() {
        // Guards against the radix sort losing, repeating or misplacing a
        // name, in one pass of 11 bits and in several (past 2,048 groups).
        for len in [0usize, 1, 7, 100, 14_000, 30_000, 120_000] {
            let hashes: Vec<u32> = (0..len as u64)
                .map(|n| (n.wrapping_mul(SPREAD) >> 29) as u32 ^ (n as u32 % 97))
                .collect();
            let index = NameIndex::build(&hashes, |_, _| false).unwrap();
            let order = index.by_first_group(&hashes);
            let mut expected: Vec<u64> = (0u32..)
                .zip(&hashes)
                .map(|(slot, &hash)| bucket(hash, slot))
                .collect();
            expected.sort_by_key(|&entry| (index.first_group((entry >> 32) as u32), entry as u32));
            assert_eq!(order, expected, "{len} names");
        }
    }

    #[test]
    fn a_bulk_build_takes_as_many_groups_as_inserting_one_by_one_and_room_to_grow() {
        // Guards against a load that lays out twice the index memory a
        // replay of the same names does (at 10M names, 256 MiB a fresh
        // process pays for in page faults), or that must grow at once.
        for len in [1000u32, 10_000, 80_000] {
            let hashes: Vec<u32> = (0..len).map(|n| n.wrapping_mul(2_654_435_761)).collect();
            let mut built = NameIndex::build(&hashes, |_, _| false).unwrap();
            let mut inserted = NameIndex::default();
            for (slot, &hash) in (0u32..).zip(&hashes) {
                inserted.insert(hash, slot);
            }
            assert_eq!(built.groups.len(), inserted.groups.len(), "{len} names");
            let groups = built.groups.len();
            for slot in len..len + len / 4 {
                built.insert(slot.wrapping_mul(2_654_435_761), slot);
            }
            assert_eq!(built.groups.len(), groups, "{len} names and a quarter more");
        }
    }

    #[test]
    fn of_several_names_listed_twice_the_one_named_is_the_first_repeated_in_slot_order() {
        // Guards against the name a refusal gives depending on the hash
        // key, which differs in every process: slots 1 and 3 share one
        // name, slots 0 and 2 another (2 < 3), under hashes whose groups
        // come in either order.
        for (low, high) in [(1u32, 2u32), (2, 1), (5, 900), (900, 5)] {
            // Sixty more slots of names of their own spread them over groups.
            let fillers = (0..60).map(|n| 1000 + n);
            let hashes: Vec<u32> = [low, high, low, high].into_iter().chain(fillers).collect();
            let same = |a: u32, b: u32| a < 4 && b < 4 && a % 2 == b % 2;
            assert_eq!(NameIndex::build(&hashes, same).err(), Some((0, 2)));
        }
    }

    #[test]
    fn a_lookup_goes_on_past_a_full_group_and_a_tombstone() {
        // Guards against a lookup that gives up at a full group or at a removed entry before the one it wants.
        let mut index = NameIndex::default();
        for slot in 0..40 {
            index.insert(7, slot);
        }
        assert!(index.groups.len() >= 8);
        index.remove(7, 3);
        for slot in (0..40).filter(|&slot| slot != 3) {
            assert_eq!(index.find(7, |found| found == slot), Some(slot));
        }
        assert_eq!(index.find(7, |found| found == 3), None);
        assert_eq!(index.len(), 39);
    }

    #[test]
    fn tombstones_are_reused_and_dropped_so_the_index_does_not_grow_with_churn() {
        // Guards against an index that grows without bound when names come and go, as released keys do.
        let mut index = NameIndex::default();
        for slot in 0..100 {
            index.insert(slot, slot);
        }
        let groups = index.groups.len();
        for round in 0..100_000u32 {
            let slot = round % 100;
            index.remove(slot, slot);
            index.insert(slot, slot);
        }
        assert_eq!(index.len(), 100);
        assert_eq!(index.groups.len(), groups);
    }
}
