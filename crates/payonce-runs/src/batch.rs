//! A batch of records held in memory, made a run: sorted into the order
//! a run holds them, its secondary entries derived, then written.

use crate::error::{RunError, Section};
use crate::hash::HashKey;
use crate::record::Record;
use crate::secondary::SecondaryEntry;
use crate::source::RunSink;
use crate::writer::{RunSummary, RunWriter};

/// Sorts `records` into the order a run holds them: by primary name's
/// hash under `key`, then by primary name.
pub fn sort_records(key: HashKey, records: &mut [Record<'_>]) {
    records.sort_by_cached_key(|record| (key.primary_hash(record.primary), record.primary));
}

/// The secondary entries `records` make under `key`, in order, one per
/// distinct (secondary hash, primary hash); refused if two records share
/// a secondary name.
pub fn secondary_entries(
    key: HashKey,
    records: &[Record<'_>],
) -> Result<Vec<SecondaryEntry>, RunError> {
    let mut named: Vec<(u64, &[u8], u64)> = (records.iter())
        .map(|record| {
            let secondary_hash = key.secondary_hash(record.secondary);
            (
                secondary_hash,
                record.secondary,
                key.primary_hash(record.primary),
            )
        })
        .collect();
    named.sort_unstable();
    if let Some(twice) = named.windows(2).find(|pair| pair[0].1 == pair[1].1) {
        return Err(RunError::DuplicateName {
            section: Section::Secondary,
            name: twice[0].1.to_vec(),
        });
    }
    let mut entries: Vec<SecondaryEntry> = (named.into_iter())
        .map(|(secondary_hash, _, primary_hash)| SecondaryEntry {
            secondary_hash,
            primary_hash,
        })
        .collect();
    entries.sort_unstable();
    entries.dedup();
    Ok(entries)
}

/// Writes `records`, a batch held in memory, as one run under `key` into
/// `sink`: sorts them ([`sort_records`]), refuses a primary or secondary
/// name twice, derives the entries ([`secondary_entries`]) and writes.
pub fn write_batch<S: RunSink>(
    sink: S,
    key: HashKey,
    records: &mut [Record<'_>],
) -> Result<RunSummary, RunError> {
    sort_records(key, records);
    if let Some(twice) = records
        .windows(2)
        .find(|pair| pair[0].primary == pair[1].primary)
    {
        return Err(RunError::DuplicateName {
            section: Section::Records,
            name: twice[0].primary.to_vec(),
        });
    }
    let entries = secondary_entries(key, records)?;
    let mut writer = RunWriter::new(sink, key, records.len() as u64)?;
    for record in records.iter() {
        writer.push_record(*record)?;
    }
    for entry in entries {
        writer.push_entry(entry)?;
    }
    writer.finish()
}
