//! The block cache under lookups: its budget, shared by runs, and
//! prefetching so that lookups under a caller's lock read nothing.

use std::sync::Arc;

use payonce_runs::{BLOCK_TARGET_LEN, BlockCache, Name, Run, RunError, RunSet, Section};
use proptest::prelude::*;

use crate::support::{counted_run, numbered, run_bytes};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn a_cache_never_holds_more_than_its_budget_and_a_block(
        budget in 0u64..40_000,
        asked in proptest::collection::vec((0usize..3, 0u64..1200), 1..200),
    ) {
        // Guards against a cache growing past its budget while runs of
        // many blocks are read through it in any order.
        let runs: Vec<Run> = (0..3u64)
            .map(|n| Run::open(run_bytes(&numbered(n * 400..n * 400 + 400, 60 + 40 * n as usize)), n).unwrap())
            .collect();
        let cache = BlockCache::new(budget);
        for (run, number) in asked {
            let name = format!("key-{number}");
            let found = runs[run].get(&cache, name.as_bytes()).unwrap();
            prop_assert_eq!(found.is_some(), (run as u64 * 400..run as u64 * 400 + 400).contains(&number));
            prop_assert!(cache.used_bytes() <= budget + BLOCK_TARGET_LEN as u64);
            prop_assert!(cache.used_bytes() <= budget, "the cache keeps within its budget itself");
        }
    }
}

#[test]
fn a_small_cache_evicts_and_still_answers() {
    // Guards against eviction dropping a block a lookup then needs
    // without reading it again.
    let records = numbered(0..3000, 80);
    let (run, source) = counted_run(&records, 1);
    let cache = BlockCache::new(3 * BLOCK_TARGET_LEN as u64);
    for record in records.iter().rev().step_by(7) {
        let found = run.get(&cache, &record.primary).unwrap().unwrap();
        assert_eq!(found.payload(), record.payload);
    }
    let stats = cache.stats();
    assert!(stats.evictions > 0 && stats.blocks <= 3, "{stats:?}");
    assert!(
        stats.bytes_read > 0 && source.reads() > stats.misses,
        "{stats:?}"
    );
}

#[test]
fn prefetched_lookups_read_nothing_whatever_the_cache_evicts() {
    // Guards against a lookup after a prefetch reading (under the
    // caller's lock) because the cache let a prefetched block go.
    let older = numbered(0..2000, 100);
    let newer = numbered(2000..2500, 100);
    let (older_run, older_source) = counted_run(&older, 1);
    let (newer_run, newer_source) = counted_run(&newer, 2);
    let set = RunSet::new(vec![Arc::new(newer_run), Arc::new(older_run)]).unwrap();
    let cache = BlockCache::new(0);
    let names = [
        Name::Primary(b"key-5"),
        Name::Secondary(b"withdrawal-2100"),
        Name::Primary(b"key-99999"),
        Name::Secondary(b"withdrawal-1999"),
    ];
    let prefetched = set.prefetch(&cache, names).unwrap();
    assert!(prefetched.blocks() >= 3 && cache.used_bytes() == 0);
    let reads = (older_source.reads(), newer_source.reads());
    let found = set.get_prefetched(&prefetched, b"key-5").unwrap().unwrap();
    assert_eq!(found.secondary(), b"withdrawal-5");
    let found = set
        .get_by_secondary_prefetched(&prefetched, b"withdrawal-2100")
        .unwrap();
    assert_eq!(found.unwrap().primary(), b"key-2100");
    assert!(
        set.get_prefetched(&prefetched, b"key-99999")
            .unwrap()
            .is_none()
    );
    let found = set
        .get_by_secondary_prefetched(&prefetched, b"withdrawal-1999")
        .unwrap();
    assert_eq!(found.unwrap().run_number(), 1);
    assert_eq!((older_source.reads(), newer_source.reads()), reads);
    // A name not prefetched is refused, not read.
    let refused = set.get_prefetched(&prefetched, b"key-1500").unwrap_err();
    assert!(
        matches!(
            refused,
            RunError::NotPrefetched {
                run: 1,
                section: Section::Records,
                ..
            }
        ),
        "{refused}"
    );
    assert_eq!((older_source.reads(), newer_source.reads()), reads);
}

#[test]
fn forgetting_a_run_lets_its_blocks_go() {
    // Guards against a merged-away run's blocks holding the budget until
    // eviction happens to reach them.
    let (run, _) = counted_run(&numbered(0..500, 100), 7);
    let cache = BlockCache::new(1 << 20);
    for number in (0..500).step_by(5) {
        run.get(&cache, format!("key-{number}").as_bytes()).unwrap();
    }
    assert!(cache.used_bytes() > 0);
    cache.forget_run(7);
    assert_eq!((cache.used_bytes(), cache.stats().blocks), (0, 0));
}

#[test]
fn two_runs_numbered_alike_do_not_share_blocks() {
    // Guards against a cache answering a run's lookup with another run's
    // block because a caller gave both the same number.
    let first = Run::open(run_bytes(&numbered(0..300, 30)), 1).unwrap();
    let second = Run::open(run_bytes(&numbered(300..600, 30)), 1).unwrap();
    let cache = BlockCache::new(1 << 20);
    for number in (0..600).step_by(11) {
        let name = format!("key-{number}");
        let (holder, other) = if number < 300 {
            (&first, &second)
        } else {
            (&second, &first)
        };
        assert!(
            holder.get(&cache, name.as_bytes()).unwrap().is_some(),
            "{name}"
        );
        assert!(
            other.get(&cache, name.as_bytes()).unwrap().is_none(),
            "{name}"
        );
    }
}

#[test]
fn threads_sharing_a_cache_and_a_set_all_find_their_records() {
    // Guards against the cache's shards or its admission losing or mixing
    // blocks when lookups race, and against it passing its budget then.
    let records = numbered(0..4000, 100);
    let older = Run::open(Arc::<[u8]>::from(run_bytes(&records[..3000])), 1).unwrap();
    let newer = Run::open(Arc::<[u8]>::from(run_bytes(&records[3000..])), 2).unwrap();
    let set = RunSet::new(vec![Arc::new(newer), Arc::new(older)]).unwrap();
    let budget = 6 * BLOCK_TARGET_LEN as u64;
    let cache = BlockCache::new(budget);
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (set, cache, records) = (&set, &cache, &records);
            scope.spawn(move || {
                for record in records.iter().skip(thread).step_by(4) {
                    let found = set
                        .get_by_secondary(cache, &record.secondary)
                        .unwrap()
                        .unwrap();
                    assert_eq!(found.record(), record.record());
                    assert!(cache.used_bytes() <= budget);
                }
            });
        }
    });
    assert!(cache.stats().evictions > 0);
}
