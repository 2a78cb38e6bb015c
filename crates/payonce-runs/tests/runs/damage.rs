//! Damage: every byte of a run damaged in turn is refused with an offset
//! at or before it (or, in a filter, the filter is ignored and lookups
//! answer right); every truncation is refused; counts that do not fit the
//! bytes are refused before anything is allocated by them.

use payonce_runs::{BlockCache, Run, RunError, Section};

use crate::support::{Owned, block_starts, numbered, reseal_trailer, run_bytes, sections};

/// Where the section or block holding byte `pos` of `bytes` starts: a
/// refusal of damage at `pos` must name an offset from there to `pos`.
/// The fences and the trailer are checked as one.
fn region_start(bytes: &[u8], pos: u64) -> u64 {
    let [
        secondary_at,
        primary_filter_at,
        secondary_filter_at,
        fences_at,
    ] = sections(bytes);
    if pos >= fences_at {
        return fences_at;
    }
    if pos >= secondary_filter_at {
        return secondary_filter_at;
    }
    if pos >= primary_filter_at {
        return primary_filter_at;
    }
    let _ = secondary_at;
    block_starts(bytes)
        .into_iter()
        .filter(|&start| start <= pos)
        .max()
        .unwrap_or(0)
}

/// Lookups of `sample`'s names, and of absent ones, answer right or
/// refuse: never a wrong answer.
fn never_wrong(run: &Run, sample: &[&Owned], pos: usize) {
    let cache = BlockCache::new(1 << 20);
    for record in sample {
        for found in [
            run.get(&cache, &record.primary),
            run.get_by_secondary(&cache, &record.secondary),
        ] {
            match found {
                Ok(found) => assert_eq!(found.unwrap().record(), record.record(), "byte {pos}"),
                Err(error) => assert!(error.is_corrupt(), "byte {pos}: {error}"),
            }
        }
    }
    for absent in numbered(900..905, 0) {
        for found in [
            run.get(&cache, &absent.primary),
            run.get_by_secondary(&cache, &absent.secondary),
        ] {
            assert!(!matches!(found, Ok(Some(_))), "byte {pos} found {absent:?}");
        }
    }
}

fn assert_names(error: &RunError, run_bytes: &[u8], pos: usize) {
    let RunError::Corrupt { run: 9, offset, .. } = error else {
        panic!("byte {pos}: {error}");
    };
    let start = region_start(run_bytes, pos as u64);
    assert!(
        (start..=pos as u64).contains(offset),
        "byte {pos} (from {start}): {error}"
    );
}

#[test]
fn every_damaged_byte_is_refused_at_its_place_or_its_filter_ignored() {
    // Guards against damage anywhere in a run being believed: a lookup
    // answering from it, or a filter saying "not here" wrongly.
    let records = numbered(0..300, 16);
    let bytes = run_bytes(&records);
    let [_, primary_filter_at, _, fences_at] = sections(&bytes);
    let sample: Vec<&Owned> = records.iter().step_by(37).collect();
    let all: Vec<&Owned> = records.iter().collect();
    for pos in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[pos] ^= 0xA5;
        let run = match Run::open(damaged, 9) {
            Err(error) => {
                assert!(
                    pos as u64 >= fences_at,
                    "byte {pos} refused the opening: {error}"
                );
                assert_names(&error, &bytes, pos);
                continue;
            }
            Ok(run) => run,
        };
        let in_filter = (primary_filter_at..fences_at).contains(&(pos as u64));
        assert_eq!(run.filter_ignored(), in_filter, "byte {pos}");
        match run.check_blocks() {
            Ok(()) => {
                assert!(in_filter, "byte {pos} passed every check");
                never_wrong(&run, if pos % 64 == 0 { &all } else { &sample }, pos);
            }
            Err(error) => {
                assert_names(&error, &bytes, pos);
                // Lookups read the same blocks whichever byte of them is
                // damaged: a sample of places keeps the test short.
                if pos % 16 == 0 {
                    never_wrong(&run, &sample, pos);
                }
            }
        }
    }
}

#[test]
fn every_truncation_and_extension_is_refused() {
    // Guards against a run cut short (a write that did not finish) or
    // with bytes after it being opened as a run.
    let bytes = run_bytes(&numbered(0..300, 16));
    for len in 0..bytes.len() {
        let refused = Run::open(bytes[..len].to_vec(), 9).unwrap_err();
        assert!(refused.is_corrupt(), "{len} bytes: {refused}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(Run::open(longer, 9).unwrap_err().is_corrupt());
}

/// `bytes` with the little-endian `value` at `at`.
fn with_word(bytes: &[u8], at: usize, value: &[u8]) -> Vec<u8> {
    let mut changed = bytes.to_vec();
    changed[at..at + value.len()].copy_from_slice(value);
    changed
}

#[test]
fn counts_that_do_not_fit_their_bytes_are_refused_before_allocating() {
    // Guards against a trailer, a fence or a block whose checksum holds
    // but whose counts are absurd making a reader allocate by them.
    let bytes = run_bytes(&numbered(0..300, 16));
    let trailer = bytes.len() - payonce_runs::TRAILER_LEN;
    let [_, _, _, fences_at] = sections(&bytes);
    let huge = u64::MAX / 3;
    for (field, at) in [
        ("records", 28),
        ("entries", 36),
        ("record blocks", 44),
        ("secondary blocks", 52),
    ] {
        let mut changed = with_word(&bytes, trailer + at, &huge.to_le_bytes());
        reseal_trailer(&mut changed);
        let refused = Run::open(changed, 9).unwrap_err();
        assert!(
            matches!(
                refused,
                RunError::Corrupt {
                    section: Section::Trailer,
                    ..
                }
            ),
            "{field}: {refused}"
        );
    }
    let mut changed = with_word(&bytes, fences_at as usize + 16, &u32::MAX.to_le_bytes());
    reseal_trailer(&mut changed);
    let refused = Run::open(changed, 9).unwrap_err();
    assert!(
        matches!(refused, RunError::Corrupt { section: Section::Fences, offset, .. } if offset == fences_at),
        "{refused}"
    );
}

#[test]
fn a_block_whose_count_lies_under_a_good_checksum_is_refused_by_lookups() {
    // Guards against a block's count being believed: a reader walking
    // records or entries that are not there.
    let records = numbered(0..300, 16);
    let bytes = run_bytes(&records);
    let [secondary_at, ..] = sections(&bytes);
    let starts = block_starts(&bytes);
    for block_at in [0, secondary_at as usize] {
        let end = starts
            .iter()
            .map(|&s| s as usize)
            .find(|&s| s > block_at)
            .unwrap();
        let mut changed = with_word(&bytes, block_at, &u32::MAX.to_le_bytes());
        let crc = crc32fast::hash(&changed[block_at..end - 4]);
        changed[end - 4..end].copy_from_slice(&crc.to_le_bytes());
        let run = Run::open(changed, 9).unwrap();
        run.check_blocks().unwrap();
        let cache = BlockCache::new(1 << 20);
        let refusals: Vec<RunError> = (records.iter())
            .flat_map(|r| {
                [
                    run.get(&cache, &r.primary),
                    run.get_by_secondary(&cache, &r.secondary),
                ]
            })
            .filter_map(Result::err)
            .collect();
        assert!(!refusals.is_empty());
        for refused in &refusals {
            assert!(
                matches!(refused, RunError::Corrupt { offset, .. } if *offset == block_at as u64),
                "{refused}"
            );
        }
        let whole: Result<Vec<_>, _> = if block_at == 0 {
            run.records().map(|r| r.map(|_| ())).collect()
        } else {
            run.secondary_entries().map(|e| e.map(|_| ())).collect()
        };
        assert!(whole.unwrap_err().is_corrupt());
    }
}
