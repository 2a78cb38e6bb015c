//! A report of a log with a problem: damage, a torn tail, a divergence.
//! The page is still written, says the problem at the top in words, and
//! shows nothing past damage.

use std::sync::Arc;

use payonce_log::{FRAME_HEADER_LEN, FsStorage, LogConfig, LogReader};

use super::{by_id, report};
use crate::fixture::{arg, diverged, first_segment, scenario, tear_last_record};

// Guards against a page that shows events read past damage, or hides
// where the damage is.
#[test]
fn damage_is_named_at_the_top_and_nothing_after_it_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    scenario(&log);
    let reader = LogReader::open(Arc::new(FsStorage::new(&log)), LogConfig::default()).unwrap();
    let record = reader.records_from(6).unwrap().next().unwrap().unwrap();
    assert_eq!(record.seq, 6);
    let offset = record.position.offset as usize;
    drop(reader);
    let segment = first_segment(&log);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[offset + FRAME_HEADER_LEN + 3] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();

    let out = dir.path().join("r.html");
    let (run, page) = report(&arg(&log), &out, &[]);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("report written to"), "{}", run.stdout);
    let page = page.expect("the page is written up to the damage");
    assert!(
        page.contains("Damage: the log in")
            && page.contains("00000000000000000001.log")
            && page.contains(&format!("at byte {offset}")),
        "the damage's place is named"
    );
    let verdict = &page[page.find("Damage: ").unwrap()..];
    let verdict = &verdict[..verdict.find("</p>").unwrap()];
    // The reader stops at the batch holding the damaged record: nothing
    // from it on is shown, and the page says from where.
    let from = verdict.split("nothing from seq ").nth(1).unwrap();
    let from: u64 = from[..from.find(' ').unwrap()].parse().unwrap();
    assert!((2..=6).contains(&from), "{verdict}");
    assert!(by_id(&page, "status").starts_with("Problems found"));
    for seq in 1..from {
        assert!(page.contains(&format!("id=\"e-{seq}\"")), "event {seq}");
    }
    for seq in from..=12 {
        assert!(!page.contains(&format!("id=\"e-{seq}\"")), "event {seq}");
        assert!(!page.contains(&format!("id=\"m-{seq}\"")), "mark {seq}");
    }
    assert_eq!(by_id(&page, "count-events"), (from - 1).to_string());
}

// Guards against a torn tail the page does not mention.
#[test]
fn a_torn_tail_is_said_as_such_and_the_page_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    scenario(&log);
    let good_len = tear_last_record(&log, &[0x5a; 11]);
    let out = dir.path().join("r.html");
    let (run, page) = report(&arg(&log), &out, &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let page = page.unwrap();
    assert!(page.contains(&format!(
        "The log ends in a torn tail: torn tail: 11 bytes at byte {good_len}"
    )));
    assert!(page.contains("Every checksum and chain link verified"));
    assert_eq!(by_id(&page, "count-events"), "12");
}

// Guards against a divergence shown only in a count, away from its event.
#[test]
fn a_divergence_is_shown_at_its_event() {
    let dir = tempfile::tempdir().unwrap();
    // A claim for a withdrawal the ledger never created: the code refuses it.
    diverged(dir.path());
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("r.html");
    let (run, page) = report(&arg(dir.path()), &out, &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let page = page.unwrap();
    assert!(page.contains("1 recorded decision(s) the code would not make again"));
    assert!(page.contains("first at seq 2"));
    assert!(page.contains("<tr id=\"e-2\" data-filter=\"req-x"));
    let row = &page[page.find("<tr id=\"e-2\"").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("class=\"divergence\""), "{row}");
    assert!(row.contains("Divergence: "), "{row}");
    let mark = &page[page.find("id=\"m-2\"").unwrap()..];
    assert!(mark[..mark.find("</a>").unwrap()].contains("class=\"diverged\""));
}
