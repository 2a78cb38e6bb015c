//! The filters: absent names cost no read, present names are never said
//! absent, the measured false-positive rate is the designed one, and a
//! damaged filter is ignored, not believed.

use payonce_runs::{
    BITS_PER_NAME, BlockCache, FALSE_POSITIVE_PER_MILLION, Run, RunError, RunSet, Section,
};
use proptest::prelude::*;

use crate::support::{Counting, counted_run, numbered, run_bytes, sections};

#[test]
fn the_measured_false_positive_rate_is_within_the_designed_one() {
    // Guards against filters sized or probed so that far more absent
    // names than designed cost a read.
    let records = numbered(0..20_000, 0);
    let run = Run::open(run_bytes(&records), 1).unwrap();
    let absent = numbered(1_000_000..1_100_000, 0);
    let primary = absent
        .iter()
        .filter(|r| run.might_hold_primary(&r.primary))
        .count() as u64;
    let secondary = (absent.iter())
        .filter(|r| run.might_hold_secondary(&r.secondary))
        .count() as u64;
    // Generous: twice the designed rate (0.024%) on 100,000 names.
    let bound = FALSE_POSITIVE_PER_MILLION * 2 / 10;
    assert!(
        primary <= bound,
        "{primary} of 100,000 absent primary names passed"
    );
    assert!(
        secondary <= bound,
        "{secondary} of 100,000 absent secondary names passed"
    );
}

#[test]
fn an_absent_name_the_filter_refuses_reads_nothing() {
    // Guards against a lookup reading a block before asking the filter.
    let records = numbered(0..2000, 100);
    let (run, source) = counted_run(&records, 1);
    let cache = BlockCache::new(1 << 20);
    let opened = source.reads();
    let mut refused = 0;
    for absent in numbered(10_000..12_000, 0) {
        let before = source.reads();
        assert!(run.get(&cache, &absent.primary).unwrap().is_none());
        assert!(
            run.get_by_secondary(&cache, &absent.secondary)
                .unwrap()
                .is_none()
        );
        let said_no = !run.might_hold_primary(&absent.primary)
            && !run.might_hold_secondary(&absent.secondary);
        if said_no {
            assert_eq!(source.reads(), before, "{absent:?} was read");
            refused += 1;
        }
    }
    assert!(refused >= 1990, "only {refused} of 2000 refused");
    assert!(source.reads() - opened <= 20);
}

#[test]
fn filters_cost_what_their_constants_say() {
    // Guards against filter memory drifting from BITS_PER_NAME, which
    // callers split their budget by.
    let run = Run::open(run_bytes(&numbered(0..10_000, 0)), 1).unwrap();
    let per_filter = (10_000 * BITS_PER_NAME).div_ceil(512) * 64;
    assert_eq!(run.filter_bytes(), 2 * per_filter);
    let set = RunSet::new(vec![run.into()]).unwrap();
    assert_eq!(set.filter_bytes(), 2 * per_filter);
}

#[test]
fn a_damaged_filter_is_ignored_and_lookups_still_answer_right() {
    // Guards against a filter that fails its checksum being believed: it
    // could say "not here" for a name that is there.
    let records = numbered(0..500, 20);
    let mut bytes = run_bytes(&records);
    let [_, primary_filter_at, secondary_filter_at, _] = sections(&bytes);
    // Clearing every bit of both would make a believed filter refuse all.
    bytes[primary_filter_at as usize..secondary_filter_at as usize - 4].fill(0);
    let source = Counting::new(bytes);
    let run = Run::open(source.clone(), 4).unwrap();
    assert!(run.filter_ignored());
    let [refusal] = run.filter_refusals() else {
        panic!("{:?}", run.filter_refusals())
    };
    assert!(
        matches!(refusal, RunError::Corrupt { run: 4, section: Section::PrimaryFilter, offset, .. } if *offset == primary_filter_at),
        "{refusal}"
    );
    assert_eq!(run.filter_bytes(), (500 * BITS_PER_NAME).div_ceil(512) * 64);
    let cache = BlockCache::new(1 << 20);
    for record in &records {
        assert!(run.might_hold_primary(&record.primary));
        assert_eq!(
            run.get(&cache, &record.primary).unwrap().unwrap().record(),
            record.record()
        );
    }
    let before = source.reads();
    assert!(run.get(&cache, b"key-100000").unwrap().is_none());
    assert_eq!(
        source.reads(),
        before,
        "the block was cached by the lookups before"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn a_filter_never_says_absent_for_a_name_in_its_run(
        numbers in proptest::collection::btree_set(any::<u64>(), 0..3000),
    ) {
        // Guards against a false negative: a name written and then said
        // absent by its run's filter.
        let records = numbered(numbers, 0);
        let run = Run::open(run_bytes(&records), 1).unwrap();
        for record in &records {
            prop_assert!(run.might_hold_primary(&record.primary));
            prop_assert!(run.might_hold_secondary(&record.secondary));
        }
    }
}
