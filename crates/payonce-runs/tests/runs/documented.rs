//! docs/run-format.md, read as written: its worked example is the bytes
//! the writer produces, and its constants are the code's.

use std::sync::Arc;

use payonce_runs::{BlockCache, HashKey, Record, Run, RunSet, write_batch};

/// docs/run-format.md.
const RUN_FORMAT: &str = include_str!("../../../../docs/run-format.md");

/// The part of `document` under the heading `heading`, up to the next.
fn section<'d>(document: &'d str, heading: &str) -> &'d str {
    let rest = document
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("the document has a section {heading:?}"));
    rest.split("\n## ").next().unwrap_or(rest)
}

/// The bytes the worked example's table gives, in hex: the first cell of
/// each row, its `` `hex` `` groups in order, a group followed by `× n`
/// repeated n times.
fn worked_example_hex(document: &str) -> String {
    let mut hex = String::new();
    let table = section(document, "A worked example");
    for row in table.lines().filter(|line| line.starts_with("| `")) {
        let cell = row.split(" | ").next().unwrap_or_default();
        let mut parts = cell.trim_start_matches("| ").split('`').skip(1);
        while let (Some(group), rest) = (parts.next(), parts.next().unwrap_or_default()) {
            let times = rest
                .trim()
                .strip_prefix("× ")
                .map_or(1, |n| n.parse().unwrap_or_else(|e| panic!("{n:?}: {e}")));
            hex.push_str(&group.replace(' ', "").repeat(times));
        }
    }
    hex
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn a_worked_example_is_read_as_written() {
    // Guards against the reading of the table missing a row or a
    // repetition, which would let the document drift unseen.
    let table = "# Doc\n\n## A worked example\n\n| bytes (hex) | field |\n| --- | --- |\n\
                 | `01 02` | a |\n| `ab` × 3 `00` | b |\n| `ff` `ee` | c |\n\n## Next\n| `ff` | not read |\n";
    assert_eq!(worked_example_hex(table), "0102ababab00ffee");
}

#[test]
fn the_documented_run_is_the_bytes_the_document_gives() {
    // Guards against docs/run-format.md's worked example drifting from
    // what a writer writes, and against the example not reading back.
    let key = HashKey::new(1, 2);
    let mut records = [
        Record {
            primary: b"k-2",
            secondary: b"w-2",
            payload: b"failed",
        },
        Record {
            primary: b"k-1",
            secondary: b"w-1",
            payload: b"sent",
        },
    ];
    let mut bytes = Vec::new();
    let summary = write_batch(&mut bytes, key, &mut records).unwrap();
    assert_eq!(hex(&bytes), worked_example_hex(RUN_FORMAT));
    assert_eq!(summary.bytes, 358);
    assert_eq!(
        format!("{:#018x}", key.primary_hash(b"k-1")),
        "0x01a46cea55e809f9"
    );
    assert_eq!(
        format!("{:#018x}", key.secondary_hash(b"w-2")),
        "0xc7f1ac5b005f8a3e"
    );
    let set = RunSet::new(vec![Arc::new(Run::open(bytes, 1).unwrap())]).unwrap();
    let cache = BlockCache::new(1 << 16);
    assert_eq!(
        set.get_by_secondary(&cache, b"w-2")
            .unwrap()
            .unwrap()
            .payload(),
        b"failed"
    );
}

#[test]
fn the_documented_constants_are_the_codes() {
    // Guards against the document's limits and filter sizing drifting
    // from the ones the code enforces.
    let constants = [
        ("NAME_LEN_MAX", payonce_runs::NAME_LEN_MAX as u64),
        ("PAYLOAD_LEN_MAX", payonce_runs::PAYLOAD_LEN_MAX as u64),
        ("RECORD_LEN_MAX", payonce_runs::RECORD_LEN_MAX as u64),
        ("BLOCK_TARGET_LEN", payonce_runs::BLOCK_TARGET_LEN as u64),
        ("BLOCK_LEN_MAX", payonce_runs::BLOCK_LEN_MAX as u64),
        (
            "SECONDARY_PER_BLOCK",
            payonce_runs::SECONDARY_PER_BLOCK as u64,
        ),
        ("BITS_PER_NAME", payonce_runs::BITS_PER_NAME),
        ("BITS_PER_NAME_MIN", payonce_runs::BITS_PER_NAME_MIN),
        ("PROBES", u64::from(payonce_runs::PROBES)),
        (
            "FALSE_POSITIVE_PER_MILLION",
            payonce_runs::FALSE_POSITIVE_PER_MILLION,
        ),
        ("TRAILER_LEN", payonce_runs::TRAILER_LEN as u64),
        ("FORMAT_VERSION", u64::from(payonce_runs::FORMAT_VERSION)),
        ("RECORDS_MAX", payonce_runs::RECORDS_MAX),
        ("CHECK_READ_LEN", payonce_runs::CHECK_READ_LEN as u64),
    ];
    let table = section(RUN_FORMAT, "Constants");
    let documented: Vec<(&str, u64)> = (table.lines())
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name, cells.get(2)?.parse().ok()?))
        })
        .collect();
    assert_eq!(documented, constants);
    assert_eq!(payonce_runs::MAGIC, *b"PAYORUN\0");
}
