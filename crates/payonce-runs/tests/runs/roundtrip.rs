//! A run hands back every record it was given, by either name, byte for
//! byte, and finds no name it was not given.

use std::collections::BTreeSet;

use payonce_runs::{BlockCache, Run, RunSet, secondary_entries};
use proptest::prelude::*;

use crate::support::{KEY, Owned, counted_run, numbered, run_bytes};

fn records_strategy() -> impl Strategy<Value = Vec<Owned>> {
    let record = (0u64..5000, proptest::collection::vec(any::<u8>(), 0..400));
    proptest::collection::vec(record, 0..500).prop_map(|records| {
        let mut seen = BTreeSet::new();
        (records.into_iter())
            .filter(|(number, _)| seen.insert(*number))
            .map(|(number, payload)| Owned::numbered(number, payload))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn every_record_is_found_by_both_names_and_no_other(
        records in records_strategy(),
        absent in proptest::collection::vec(5000u64..10_000, 1..50),
    ) {
        // Guards against a record lost, misplaced or changed by writing,
        // by the fences' search, or by a secondary entry's indirection,
        // and against a name never written being found.
        let run = Run::open(run_bytes(&records), 1).unwrap();
        let cache = BlockCache::new(1 << 20);
        prop_assert_eq!(run.records_len(), records.len() as u64);
        for record in &records {
            let by_primary = run.get(&cache, &record.primary).unwrap().unwrap();
            prop_assert_eq!(by_primary.record(), record.record());
            let by_secondary = run.get_by_secondary(&cache, &record.secondary).unwrap().unwrap();
            prop_assert_eq!(by_secondary.record(), record.record());
        }
        for absent in numbered(absent, 0) {
            prop_assert!(run.get(&cache, &absent.primary).unwrap().is_none());
            prop_assert!(run.get_by_secondary(&cache, &absent.secondary).unwrap().is_none());
            // A primary name asked as a secondary one is another name.
            prop_assert!(run.get_by_secondary(&cache, &absent.primary).unwrap().is_none());
        }
        // Read whole, it is the records in its order and their entries.
        let scanned: Vec<Owned> = run.records().map(|record| {
            let record = record.unwrap();
            Owned { primary: record.primary().to_vec(), secondary: record.secondary().to_vec(), payload: record.payload().to_vec() }
        }).collect();
        let mut sorted: Vec<_> = records.iter().map(Owned::record).collect();
        payonce_runs::sort_records(KEY, &mut sorted);
        prop_assert_eq!(scanned.iter().map(Owned::record).collect::<Vec<_>>(), sorted.clone());
        let entries: Vec<_> = run.secondary_entries().map(Result::unwrap).collect();
        prop_assert_eq!(entries, secondary_entries(KEY, &sorted).unwrap());
        run.check_blocks().unwrap();
    }
}

#[test]
fn an_empty_run_opens_and_holds_nothing() {
    // Guards against a run of no records being unwritable or unreadable:
    // a merge's caller may write one.
    let run = Run::open(run_bytes(&[]), 1).unwrap();
    let cache = BlockCache::new(1 << 20);
    assert_eq!(run.records_len(), 0);
    assert!(run.get(&cache, b"key-1").unwrap().is_none());
    assert!(
        run.get_by_secondary(&cache, b"withdrawal-1")
            .unwrap()
            .is_none()
    );
    assert_eq!(run.records().count(), 0);
    run.check_blocks().unwrap();
}

#[test]
fn a_record_found_twice_is_the_cached_block_not_a_copy() {
    // Guards against lookups copying records out of the cache: a record
    // found twice lies in the same bytes.
    let records = numbered(0..100, 50);
    let (run, source) = counted_run(&records, 1);
    let cache = BlockCache::new(1 << 20);
    let opened = source.reads();
    let first = run.get(&cache, b"key-7").unwrap().unwrap();
    let again = run.get(&cache, b"key-7").unwrap().unwrap();
    assert_eq!(first.payload().as_ptr(), again.payload().as_ptr());
    assert_eq!(source.reads(), opened + 1, "the second lookup read nothing");
    assert_eq!(cache.stats().hits, 1);
    assert_eq!(cache.stats().misses, 1);
}

#[test]
fn a_newer_run_hides_an_older_ones_record() {
    // Guards against a set answering from an older run when a newer one
    // holds the name, by either name.
    let older = Run::open(run_bytes(&numbered(0..10, 8)), 1).unwrap();
    let newer = Run::open(run_bytes(&[Owned::numbered(3, b"new".to_vec())]), 2).unwrap();
    let set = RunSet::new(vec![newer.into(), older.into()]).unwrap();
    let cache = BlockCache::new(1 << 20);
    let found = set.get(&cache, b"key-3").unwrap().unwrap();
    assert_eq!((found.payload(), found.run_number()), (&b"new"[..], 2));
    let found = set
        .get_by_secondary(&cache, b"withdrawal-3")
        .unwrap()
        .unwrap();
    assert_eq!(found.payload(), b"new");
    let found = set.get(&cache, b"key-4").unwrap().unwrap();
    assert_eq!(found.run_number(), 1);
    assert!(set.get(&cache, b"key-11").unwrap().is_none());
}

#[test]
fn a_set_refuses_runs_of_two_hash_keys() {
    // Guards against a set hashing a name under one key and looking it
    // up in a run written under another, missing it.
    let mut other = Vec::new();
    let records = numbered(0..3, 1);
    let mut batch: Vec<_> = records.iter().map(Owned::record).collect();
    payonce_runs::write_batch(&mut other, payonce_runs::HashKey::new(5, 6), &mut batch).unwrap();
    let ours = Run::open(run_bytes(&records), 1).unwrap();
    let theirs = Run::open(other, 2).unwrap();
    let refused = RunSet::new(vec![ours.into(), theirs.into()]).unwrap_err();
    assert!(
        matches!(refused, payonce_runs::RunError::MixedKeys { run: 2, .. }),
        "{refused}"
    );
}
