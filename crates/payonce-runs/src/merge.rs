//! Merging runs into one: a k-way merge of their record blocks keeping the
//! newest copy of each primary name, and of their secondary sections
//! keeping one entry per (secondary hash, primary hash). One block per
//! input is held at a time, so memory is the fan-out times a block (and
//! the output's filters and fences), never the runs' sizes.

use crate::cache::BlockCache;
use crate::cursor::{EntryCursor, RecordCursor};
use crate::error::RunError;
use crate::hash::HashKey;
use crate::record::Record;
use crate::run::Run;
use crate::secondary::SecondaryEntry;
use crate::source::RunSink;
use crate::writer::{RunSummary, RunWriter};

/// Merges `inputs`, newest first, into one run written to `sink`, under
/// their shared hash key (mixed keys are refused). Of the records of one
/// primary name, the newest input's is kept; its secondary name must be
/// the same in every input ([`RunError::SecondaryConflict`]). Blocks the
/// cache holds are taken from it; others are read from the inputs'
/// sources, checked, and not kept (counted as misses). The output's
/// filters are built from what was read, sized for the inputs' records
/// together. A run written from memory ([`crate::write_batch`]) and
/// opened is merged with older runs by putting it first.
pub fn merge<S: RunSink>(
    inputs: &[&Run],
    cache: &BlockCache,
    sink: S,
) -> Result<RunSummary, RunError> {
    let Some(first) = inputs.first() else {
        return Err(RunError::NoInputs);
    };
    let key = first.hash_key();
    if let Some(other) = inputs.iter().find(|run| run.hash_key() != key) {
        return Err(RunError::MixedKeys {
            run: other.number(),
            expected: key,
            found: other.hash_key(),
        });
    }
    let expected = inputs
        .iter()
        .map(|run| run.records_len())
        .fold(0u64, u64::saturating_add);
    let mut writer = RunWriter::new(sink, key, expected)?;
    merge_records(inputs, cache, key, &mut writer)?;
    merge_entries(inputs, cache, &mut writer)?;
    writer.finish()
}

/// Writes the newest record of every primary name of `inputs`.
fn merge_records<S: RunSink>(
    inputs: &[&Run],
    cache: &BlockCache,
    key: HashKey,
    writer: &mut RunWriter<S>,
) -> Result<(), RunError> {
    let mut cursors: Vec<RecordCursor<'_>> = (inputs.iter())
        .map(|run| RecordCursor::new(run, Some(cache)))
        .collect();
    loop {
        // The least (hash, name); on a tie the newest input, met first.
        let mut newest: Option<(usize, u64)> = None;
        for index in 0..cursors.len() {
            if !cursors[index].fill()? {
                continue;
            }
            let Some((hash, block, span)) = cursors[index].current() else {
                continue;
            };
            let lower = newest.is_none_or(|(best, best_hash)| {
                let Some((_, best_block, best_span)) = cursors[best].current() else {
                    return true;
                };
                (hash, span.primary(block.bytes()))
                    < (best_hash, best_span.primary(best_block.bytes()))
            });
            if lower {
                newest = Some((index, hash));
            }
        }
        let Some((index, hash)) = newest else {
            return Ok(());
        };
        let Some((_, block, span)) = cursors[index].current() else {
            return Ok(());
        };
        let block = block.clone();
        let bytes = block.bytes();
        let record = Record {
            primary: span.primary(bytes),
            secondary: span.secondary(bytes),
            payload: span.payload(bytes),
        };
        writer.push_hashed(record, hash, key.secondary_hash(record.secondary))?;
        for (older, cursor) in cursors.iter_mut().enumerate().skip(index + 1) {
            skip_older_copy(cursor, &record, hash, (inputs[index], inputs[older]))?;
        }
        cursors[index].step();
    }
}

/// Steps `cursor`, of an input older than the one `record` (of primary
/// hash `hash`) was taken from, past its own copy of the record, if it is
/// there; refuses a copy with another secondary name.
fn skip_older_copy(
    cursor: &mut RecordCursor<'_>,
    record: &Record<'_>,
    hash: u64,
    (newer, older): (&Run, &Run),
) -> Result<(), RunError> {
    let Some((older_hash, block, span)) = cursor.current() else {
        return Ok(());
    };
    if (older_hash, span.primary(block.bytes())) != (hash, record.primary) {
        return Ok(());
    }
    if span.secondary(block.bytes()) != record.secondary {
        return Err(RunError::SecondaryConflict {
            primary: record.primary.to_vec(),
            newer_run: newer.number(),
            older_run: older.number(),
        });
    }
    cursor.step();
    Ok(())
}

/// Writes every distinct entry of `inputs`, in order.
fn merge_entries<S: RunSink>(
    inputs: &[&Run],
    cache: &BlockCache,
    writer: &mut RunWriter<S>,
) -> Result<(), RunError> {
    let mut cursors: Vec<EntryCursor<'_>> = (inputs.iter())
        .map(|run| EntryCursor::new(run, Some(cache)))
        .collect();
    loop {
        let mut least: Option<SecondaryEntry> = None;
        for cursor in &mut cursors {
            if let Some(entry) = cursor.current()? {
                least = Some(least.map_or(entry, |least| least.min(entry)));
            }
        }
        let Some(least) = least else {
            return Ok(());
        };
        writer.push_entry(least)?;
        for cursor in &mut cursors {
            if cursor.current()? == Some(least) {
                cursor.step();
            }
        }
    }
}
