//! When to merge: which newest runs of a set to merge into one, so that a
//! set stays a few runs however many records it gathers, and each record
//! is rewritten a number of times that grows with the logarithm of the
//! set's size, never with the number of runs written.
//!
//! The rule is RocksDB's universal compaction, by records: from the newest
//! run, each older run joins while it holds no more records than the runs
//! before it together ("size ratio"), up to [`MERGE_FAN_OUT`] runs. A merge
//! of two or more is made once the set holds [`MERGE_TRIGGER`] runs. Should
//! the sizes grow too fast for that rule to find two (each run more than
//! all the newer ones together), the newest runs are merged all the same
//! once the set passes [`RUNS_MAX`] runs. Only a newest prefix is merged,
//! so the merged run takes its inputs' place and a newer run still hides
//! an older one's record of a name.

/// The most runs one merge reads: its memory is a block per input.
pub const MERGE_FAN_OUT: usize = 4;

/// Runs a set holds before a merge is looked for.
pub const MERGE_TRIGGER: usize = 4;

/// Runs a set holds before its newest are merged whatever their sizes.
pub const RUNS_MAX: usize = 12;

/// How many of the newest runs to merge, given each run's records newest
/// first: 0 for none, else from 2 to [`MERGE_FAN_OUT`].
pub fn merge_prefix(records: &[u64]) -> usize {
    if records.len() < MERGE_TRIGGER {
        return 0;
    }
    let mut newer = 0u64;
    let mut taken = 0;
    for &run in records.iter().take(MERGE_FAN_OUT) {
        if taken > 0 && run > newer {
            break;
        }
        newer = newer.saturating_add(run);
        taken += 1;
    }
    match taken {
        2.. => taken,
        _ if records.len() > RUNS_MAX => MERGE_FAN_OUT.min(records.len() - RUNS_MAX + 1).max(2),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_few_runs_are_left_alone() {
        assert_eq!(merge_prefix(&[]), 0);
        assert_eq!(merge_prefix(&[5, 5, 5]), 0);
    }

    #[test]
    fn equal_runs_merge_four_at_a_time() {
        assert_eq!(merge_prefix(&[5, 5, 5, 5]), 4);
        assert_eq!(merge_prefix(&[5, 5, 5, 5, 5, 5]), 4);
    }

    #[test]
    fn an_older_run_larger_than_the_newer_together_stays_out() {
        assert_eq!(merge_prefix(&[5, 5, 20, 100]), 2);
        assert_eq!(merge_prefix(&[5, 11, 100, 1000]), 0);
    }

    #[test]
    fn too_many_runs_merge_whatever_their_sizes() {
        let growing: Vec<u64> = (0..13).map(|at| 3u64.pow(at)).collect();
        assert_eq!(merge_prefix(&growing[..12]), 0);
        assert_eq!(merge_prefix(&growing), 2);
    }

    /// Runs of `records` each, written one after another into a set that
    /// merges as [`merge_prefix`] says: the largest number of runs the set
    /// held, and the records written by merges.
    fn simulate(written: &[u64]) -> (usize, u64) {
        let mut runs: Vec<u64> = Vec::new();
        let (mut most, mut rewritten) = (0, 0);
        for &records in written {
            runs.insert(0, records);
            loop {
                let merged = merge_prefix(&runs);
                if merged == 0 {
                    break;
                }
                let sum: u64 = runs.drain(..merged).sum();
                rewritten += sum;
                runs.insert(0, sum);
            }
            most = most.max(runs.len());
        }
        (most, rewritten)
    }

    proptest! {
        /// Whatever the runs written, the set stays at most RUNS_MAX runs
        /// once merged, and every merge takes between 2 and MERGE_FAN_OUT.
        #[test]
        fn the_set_stays_bounded(written in proptest::collection::vec(1u64..100_000, 1..300)) {
            let (most, _) = simulate(&written);
            prop_assert!(most <= RUNS_MAX, "{most} runs");
            let merged = merge_prefix(&written);
            prop_assert!(merged == 0 || (2..=MERGE_FAN_OUT).contains(&merged));
        }
    }

    /// Equal runs: each record is rewritten about log4 of the runs written
    /// times, not once per run written.
    #[test]
    fn records_are_rewritten_a_logarithmic_number_of_times() {
        let (most, rewritten) = simulate(&[1000; 4096]);
        let total = 1000 * 4096;
        assert!(most <= MERGE_TRIGGER + 3 * 6, "{most} runs");
        assert!(
            rewritten <= total * 7,
            "{rewritten} records rewritten of {total}"
        );
    }
}
