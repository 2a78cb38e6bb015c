//! The writer: what it refuses before writing, and records of every size.

use std::io;

use payonce_runs::{
    BlockCache, NAME_LEN_MAX, PAYLOAD_LEN_MAX, Record, Run, RunError, RunSink, RunWriter,
    SecondaryEntry, Section, secondary_entries, sort_records, write_batch,
};

use crate::support::{KEY, Owned, numbered, run_bytes};

/// `records` sorted, as a writer must be given them.
fn sorted(records: &[Owned]) -> Vec<Record<'_>> {
    let mut batch: Vec<Record<'_>> = records.iter().map(Owned::record).collect();
    sort_records(KEY, &mut batch);
    batch
}

#[test]
fn a_streamed_run_is_the_batch_written_whole() {
    // Guards against the two ways of writing a run disagreeing on a byte.
    let records = numbered(0..700, 30);
    let batch = sorted(&records);
    let mut streamed = Vec::new();
    let mut writer = RunWriter::new(&mut streamed, KEY, 700).unwrap();
    for record in &batch {
        writer.push_record(*record).unwrap();
    }
    for entry in secondary_entries(KEY, &batch).unwrap() {
        writer.push_entry(entry).unwrap();
    }
    let summary = writer.finish().unwrap();
    assert_eq!(streamed, run_bytes(&records));
    assert_eq!((summary.records, summary.secondary_entries), (700, 700));
    assert_eq!(summary.secondary_blocks, 3);
    assert_eq!(summary.bytes, streamed.len() as u64);
}

#[test]
fn records_out_of_order_or_twice_are_refused() {
    // Guards against a run whose records are not in hash order, where a
    // lookup would miss them, or that holds a name twice.
    let records = numbered(0..3, 1);
    let batch = sorted(&records);
    let mut writer = RunWriter::new(Vec::new(), KEY, 3).unwrap();
    writer.push_record(batch[1]).unwrap();
    let refused = writer.push_record(batch[0]).unwrap_err();
    assert!(
        matches!(
            refused,
            RunError::OutOfOrder {
                section: Section::Records,
                index: 1,
                ..
            }
        ),
        "{refused}"
    );
    let refused = writer.push_record(batch[1]).unwrap_err();
    assert!(
        matches!(refused, RunError::OutOfOrder { index: 1, .. }),
        "{refused}"
    );
    writer.push_record(batch[2]).unwrap();

    let mut twice = [
        records[0].record(),
        records[1].record(),
        records[0].record(),
    ];
    let refused = write_batch(Vec::new(), KEY, &mut twice).unwrap_err();
    assert!(
        matches!(&refused, RunError::DuplicateName { section: Section::Records, name } if name == b"key-0"),
        "{refused}"
    );
    let mut shared = [
        records[0].record(),
        Record {
            secondary: b"withdrawal-0",
            ..records[1].record()
        },
    ];
    let refused = write_batch(Vec::new(), KEY, &mut shared).unwrap_err();
    assert!(
        matches!(&refused, RunError::DuplicateName { section: Section::Secondary, name } if name == b"withdrawal-0"),
        "{refused}"
    );
}

#[test]
fn entries_out_of_order_missing_or_early_are_refused() {
    // Guards against a secondary section that does not index the records
    // it sits beside: lookups by secondary name would miss or misname.
    let records = numbered(0..3, 1);
    let batch = sorted(&records);
    let entries = secondary_entries(KEY, &batch).unwrap();
    let mut writer = RunWriter::new(Vec::new(), KEY, 3).unwrap();
    for record in &batch {
        writer.push_record(*record).unwrap();
    }
    writer.push_entry(entries[1]).unwrap();
    let refused = writer.push_entry(entries[0]).unwrap_err();
    assert!(
        matches!(
            refused,
            RunError::OutOfOrder {
                section: Section::Secondary,
                index: 1,
                ..
            }
        ),
        "{refused}"
    );
    let refused = writer.push_record(batch[2]).unwrap_err();
    assert!(
        matches!(
            refused,
            RunError::OutOfOrder {
                section: Section::Records,
                ..
            }
        ),
        "{refused}"
    );
    writer.push_entry(entries[2]).unwrap();
    let refused = writer.finish().unwrap_err();
    assert!(
        matches!(
            refused,
            RunError::EntriesMismatch {
                records: 3,
                entries: 2
            }
        ),
        "{refused}"
    );

    let mut writer = RunWriter::new(Vec::new(), KEY, 3).unwrap();
    for record in &batch {
        writer.push_record(*record).unwrap();
    }
    for entry in &entries[..2] {
        writer.push_entry(*entry).unwrap();
    }
    let wrong = SecondaryEntry {
        primary_hash: entries[2].primary_hash ^ 1,
        ..entries[2]
    };
    writer.push_entry(wrong).unwrap();
    assert!(matches!(
        writer.finish(),
        Err(RunError::EntriesMismatch {
            records: 3,
            entries: 3
        })
    ));
}

#[test]
fn records_beyond_their_limits_or_count_are_refused() {
    // Guards against a record the reader would refuse being written, and
    // against filters sized for fewer names than they hold.
    let long = vec![b'n'; NAME_LEN_MAX + 1];
    let payload = vec![0; PAYLOAD_LEN_MAX + 1];
    let mut writer = RunWriter::new(Vec::new(), KEY, 1).unwrap();
    let refused = writer.push_record(Record {
        primary: &long,
        secondary: b"w",
        payload: b"",
    });
    assert!(matches!(
        refused,
        Err(RunError::TooLarge {
            field: "primary name",
            ..
        })
    ));
    let refused = writer.push_record(Record {
        primary: b"k",
        secondary: &long,
        payload: b"",
    });
    assert!(matches!(
        refused,
        Err(RunError::TooLarge {
            field: "secondary name",
            ..
        })
    ));
    let refused = writer.push_record(Record {
        primary: b"k",
        secondary: b"w",
        payload: &payload,
    });
    assert!(matches!(
        refused,
        Err(RunError::TooLarge {
            field: "payload",
            ..
        })
    ));
    let records = numbered(0..2, 1);
    let batch = sorted(&records);
    writer.push_record(batch[0]).unwrap();
    let refused = writer.push_record(batch[1]).unwrap_err();
    assert!(
        matches!(
            refused,
            RunError::TooMany {
                section: Section::Records,
                expected: 1
            }
        ),
        "{refused}"
    );
}

#[test]
fn records_of_every_size_round_trip() {
    // Guards against a record larger than a block's target, or of the
    // largest size, being split, refused or misread.
    let records = vec![
        Owned::numbered(1, vec![1; 20_000]),
        Owned::numbered(2, vec![]),
        Owned::numbered(3, vec![3; PAYLOAD_LEN_MAX]),
        Owned {
            primary: vec![b'k'; NAME_LEN_MAX],
            secondary: vec![b'w'; NAME_LEN_MAX],
            payload: vec![4; 9000],
        },
        Owned {
            primary: vec![],
            secondary: vec![],
            payload: vec![5],
        },
    ];
    let run = Run::open(run_bytes(&records), 1).unwrap();
    run.check_blocks().unwrap();
    let cache = BlockCache::new(4 << 20);
    for record in &records {
        assert_eq!(
            run.get(&cache, &record.primary).unwrap().unwrap().record(),
            record.record()
        );
        assert_eq!(
            run.get_by_secondary(&cache, &record.secondary)
                .unwrap()
                .unwrap()
                .record(),
            record.record()
        );
    }
}

/// A sink whose appends fail once it holds `limit` bytes.
struct Failing {
    held: Vec<u8>,
    limit: usize,
}

impl RunSink for Failing {
    fn append(&mut self, bytes: &[u8]) -> Result<(), RunError> {
        if self.held.len() + bytes.len() > self.limit {
            let full = io::Error::new(io::ErrorKind::StorageFull, "full");
            return Err(RunError::append_failed(
                self.held.len() as u64,
                bytes.len() as u64,
                full,
            ));
        }
        self.held.extend_from_slice(bytes);
        Ok(())
    }
}

#[test]
fn a_failed_append_poisons_the_writer() {
    // Guards against a writer going on after a failed append, leaving a
    // sink that looks like a run but misses a block.
    let records = numbered(0..1000, 40);
    let batch = sorted(&records);
    let mut writer = RunWriter::new(
        Failing {
            held: Vec::new(),
            limit: 20_000,
        },
        KEY,
        1000,
    )
    .unwrap();
    let failed = batch
        .iter()
        .find_map(|record| writer.push_record(*record).err())
        .unwrap();
    assert!(
        matches!(failed, RunError::Io { op: "append", .. }),
        "{failed}"
    );
    assert!(matches!(writer.finish(), Err(RunError::Poisoned)));
}
