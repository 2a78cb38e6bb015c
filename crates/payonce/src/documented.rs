//! The worked examples of docs/event-format.md and docs/snapshot-format.md
//! as the bytes their tables give, so a test compares what the ledger
//! writes with the document itself rather than with a copy of it.

/// docs/event-format.md.
pub(crate) const EVENT_FORMAT: &str = include_str!("../../../docs/event-format.md");

/// docs/snapshot-format.md.
pub(crate) const SNAPSHOT_FORMAT: &str = include_str!("../../../docs/snapshot-format.md");

/// The bytes the table of `document`'s worked example gives, in hex: the
/// first cell of each row, its `` `hex` `` groups in order, a group
/// followed by `× n` repeated n times.
pub(crate) fn worked_example_hex(document: &str) -> String {
    let section = document
        .split("## A worked example")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("the document has a worked example"));
    let mut hex = String::new();
    for row in section.lines().filter(|line| line.starts_with("| `")) {
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

/// The value a row of `document`'s header table gives `field`: the first
/// `` `code` `` of the rule cell of the row whose field cell is `field`.
pub(crate) fn header_value<'a>(document: &'a str, field: &str) -> Option<&'a str> {
    let section = document
        .split("\n## Header")
        .nth(1)?
        .split("\n## ")
        .next()?;
    section.lines().find_map(|row| {
        let cells: Vec<&str> = row.split(" | ").map(str::trim).collect();
        let rule = cells.get(3).filter(|_| cells.get(2) == Some(&field))?;
        rule.split('`').nth(1)
    })
}

#[test]
fn a_worked_example_is_read_as_written() {
    // Guards against the reading of a document's table missing a row or
    // a repetition, which would let the document drift unseen.
    let table = "## A worked example\n\n| bytes (hex) | field |\n| --- | --- |\n\
                 | `01 02` | a |\n| `ab` × 3 `00` | b |\n\n## Next\n| `ff` | not read |\n";
    assert_eq!(worked_example_hex(table), "0102ababab00");
}

#[test]
fn a_header_value_is_read_from_its_row() {
    // Guards against the reading of a header table finding another row's
    // value, which would let the document drift unseen.
    let table = "# T\n\n## Header\n\n| offset | size | field | rule |\n| --- | --- | --- | --- |\n\
                 | 0 | 4 | magic | `b\"X\"` |\n| 4 | 4 | version | `7` (`V`); else refused |\n\n\
                 ## Body\n| 8 | 4 | version | `9` |\n";
    assert_eq!(header_value(table, "version"), Some("7"));
    assert_eq!(header_value(table, "magic"), Some("b\"X\""));
    assert_eq!(header_value(table, "seq"), None);
}
