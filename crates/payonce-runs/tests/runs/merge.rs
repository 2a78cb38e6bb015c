//! Merging: the newest copy of every name, found by both names, from
//! inputs read a block at a time.

use std::collections::BTreeMap;

use payonce_runs::{BlockCache, HashKey, Record, Run, RunError, Section, merge, write_batch};
use proptest::prelude::*;

use crate::support::{Counting, KEY, Owned, numbered, run_bytes};

fn inputs_strategy() -> impl Strategy<Value = Vec<BTreeMap<u64, Vec<u8>>>> {
    let run = proptest::collection::btree_map(
        0u64..400,
        proptest::collection::vec(any::<u8>(), 0..300),
        0..300,
    );
    proptest::collection::vec(run, 1..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn a_merge_is_the_newest_wins_union(inputs in inputs_strategy()) {
        // Guards against a merge losing a record, keeping an older copy,
        // keeping two, or leaving an entry that finds nothing.
        let runs: Vec<Run> = (inputs.iter().enumerate())
            .map(|(number, records)| {
                let records: Vec<Owned> = (records.iter())
                    .map(|(&n, payload)| Owned::numbered(n, payload.clone()))
                    .collect();
                Run::open(run_bytes(&records), number as u64).unwrap()
            })
            .collect();
        let mut newest: BTreeMap<u64, &Vec<u8>> = BTreeMap::new();
        for records in inputs.iter().rev() {
            newest.extend(records.iter().map(|(&n, payload)| (n, payload)));
        }
        let cache = BlockCache::new(1 << 16);
        let mut merged = Vec::new();
        let inputs: Vec<&Run> = runs.iter().collect();
        let summary = merge(&inputs, &cache, &mut merged).unwrap();
        prop_assert_eq!(summary.records, newest.len() as u64);
        prop_assert_eq!(summary.bytes, merged.len() as u64);
        let merged = Run::open(merged, 100).unwrap();
        prop_assert_eq!(merged.trailer_crc(), summary.trailer_crc);
        merged.check_blocks().unwrap();
        prop_assert_eq!(merged.records().count() as u64, summary.records);
        for (&n, payload) in &newest {
            let expected = Owned::numbered(n, payload.to_vec());
            let found = merged.get(&cache, &expected.primary).unwrap().unwrap();
            prop_assert_eq!(found.record(), expected.record());
            let found = merged.get_by_secondary(&cache, &expected.secondary).unwrap().unwrap();
            prop_assert_eq!(found.record(), expected.record());
        }
        for absent in numbered(400..420, 0) {
            prop_assert!(merged.get(&cache, &absent.primary).unwrap().is_none());
            prop_assert!(merged.get_by_secondary(&cache, &absent.secondary).unwrap().is_none());
        }
    }
}

#[test]
fn a_merge_reads_each_input_block_once_and_keeps_none() {
    // Guards against a merge collecting its inputs, or filling the cache
    // with blocks no lookup asked for.
    let older = Counting::new(run_bytes(&numbered(0..3000, 150)));
    let newer = Counting::new(run_bytes(&numbered(2500..4000, 150)));
    let older_run = Run::open(older.clone(), 1).unwrap();
    let newer_run = Run::open(newer.clone(), 2).unwrap();
    let opened = (older.reads(), newer.reads());
    let cache = BlockCache::new(1 << 20);
    let summary = merge(&[&newer_run, &older_run], &cache, payonce_runs::DiscardSink).unwrap();
    assert_eq!(summary.records, 4000);
    let stats = cache.stats();
    assert_eq!(stats.used_bytes, 0, "{stats:?}");
    let record_blocks =
        |bytes: &[u8]| u64::from_le_bytes(bytes[bytes.len() - 96 + 44..][..8].try_into().unwrap());
    let secondary_blocks =
        |bytes: &[u8]| u64::from_le_bytes(bytes[bytes.len() - 96 + 52..][..8].try_into().unwrap());
    let read = |source: &Counting| record_blocks(&source.bytes) + secondary_blocks(&source.bytes);
    assert_eq!(older.reads() - opened.0, read(&older));
    assert_eq!(newer.reads() - opened.1, read(&newer));
    assert_eq!(stats.misses, read(&older) + read(&newer));
}

#[test]
fn a_merge_refuses_inputs_under_two_hash_keys() {
    // Guards against a merge writing names hashed under two keys into one
    // run, whose lookups would then miss half of them.
    let records = numbered(0..5, 3);
    let mut batch: Vec<Record<'_>> = records.iter().map(Owned::record).collect();
    let mut other = Vec::new();
    write_batch(&mut other, HashKey::new(9, 9), &mut batch).unwrap();
    let ours = Run::open(run_bytes(&records), 1).unwrap();
    let theirs = Run::open(other, 2).unwrap();
    let cache = BlockCache::new(0);
    let refused = merge(&[&ours, &theirs], &cache, Vec::new()).unwrap_err();
    assert!(
        matches!(refused, RunError::MixedKeys { run: 2, expected, .. } if expected == KEY),
        "{refused}"
    );
    assert!(matches!(
        merge(&[], &cache, Vec::new()),
        Err(RunError::NoInputs)
    ));
}

#[test]
fn a_merge_refuses_a_primary_name_bound_to_two_secondary_names() {
    // Guards against a merge keeping the newer record and both entries,
    // one naming a record whose secondary name is another.
    let older = Run::open(run_bytes(&numbered(0..10, 3)), 1).unwrap();
    let rebound = Owned {
        primary: b"key-4".to_vec(),
        secondary: b"withdrawal-40".to_vec(),
        payload: vec![],
    };
    let newer = Run::open(run_bytes(&[rebound]), 2).unwrap();
    let refused = merge(&[&newer, &older], &BlockCache::new(0), Vec::new()).unwrap_err();
    assert!(
        matches!(&refused, RunError::SecondaryConflict { primary, newer_run: 2, older_run: 1 } if primary == b"key-4"),
        "{refused}"
    );
}

#[test]
fn a_merge_refuses_a_damaged_input_naming_it() {
    // Guards against a merge carrying damaged bytes into a new run with a
    // fresh checksum.
    let mut bytes = run_bytes(&numbered(0..400, 50));
    bytes[100] ^= 0x10;
    let damaged = Run::open(bytes, 3).unwrap();
    let good = Run::open(run_bytes(&numbered(1000..1010, 5)), 4).unwrap();
    let refused = merge(&[&good, &damaged], &BlockCache::new(0), Vec::new()).unwrap_err();
    assert!(
        matches!(
            refused,
            RunError::Corrupt {
                run: 3,
                section: Section::Records,
                offset: 0,
                ..
            }
        ),
        "{refused}"
    );
}
