//! Similar cases, one answer: what the audit commands say about a log is
//! what opening it for writing does with it, and arguments that point past
//! what a log holds are refused the same way.

use std::path::Path;
use std::sync::Arc;

use payonce::{Config, Ledger, ManualClock};
use payonce_log::{FsStorage, LogConfig, LogReader};

use crate::fixture::{START, arg, config, new_withdrawal, payonce, scenario, segment_name, sent};

/// A fast ledger whose segments roll every few events.
fn rolling(clock: Arc<ManualClock>) -> Config {
    let mut config = config(clock);
    config.log = LogConfig {
        record_max: 1024,
        segment_len_max: 2048,
        ..config.log
    };
    config
}

/// A closed ledger in `dir` over several segments; returns the newest.
fn rolled(dir: &Path) -> std::path::PathBuf {
    let clock = Arc::new(ManualClock::new(START));
    let ledger = Ledger::init_with(dir, rolling(clock)).unwrap();
    for n in 0..8 {
        let request = new_withdrawal(&ledger, "1");
        ledger
            .submit(&format!("k-{n}"), &request, |r| Ok(sent(r, "0x1")))
            .unwrap();
    }
    drop(ledger);
    let mut segments: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    segments.sort();
    assert!(segments.len() > 1, "the log rolled");
    segments.pop().unwrap()
}

// Guards against verify calling a log clean whose newest segment is empty
// (its header never reached the disk) while the next writer saves it aside
// as a torn tail: both report the same torn tail.
#[test]
fn an_empty_newest_segment_is_the_torn_tail_the_writer_repairs() {
    let single = tempfile::tempdir().unwrap();
    std::fs::write(single.path().join("00000000000000000001.log"), b"").unwrap();
    {
        let dir = single.path();
        let run = payonce(&["verify", &arg(dir), "--json"]);
        assert_eq!(run.code, 1, "{}", run.stdout);
        let report = run.json();
        assert_eq!(report["clean"], false);
        let torn = &report["torn_tail"];
        assert_eq!(
            (torn["offset"].as_u64(), torn["len"].as_u64()),
            (Some(0), Some(0))
        );
        let text = payonce(&["verify", &arg(dir)]);
        assert!(
            text.stdout
                .contains("a segment whose header never reached the disk"),
            "{}",
            text.stdout
        );
        let inflight = payonce(&["inflight", &arg(dir)]);
        assert_eq!(inflight.code, 1, "{}", inflight.stderr);
        let clock = Arc::new(ManualClock::new(START));
        let ledger = Ledger::open_with(dir, rolling(clock)).unwrap();
        let repaired = ledger.recovery().log.torn_tail.clone().unwrap();
        drop(ledger);
        assert_eq!(
            (repaired.offset, repaired.len),
            (0, 0),
            "the writer saw the same torn tail"
        );
        assert_eq!(torn["file"], arg(&dir.join(segment_name(repaired.segment))));
        assert_eq!(
            payonce(&["verify", &arg(dir)]).code,
            0,
            "the writer repaired it"
        );
    }
}

// Guards against verify calling a cleanly closed ledger whose newest
// segment was emptied (its events gone) a torn tail, or the writer opening
// it: both refuse it, naming the head the checkpoint holds.
#[test]
fn an_emptied_newest_segment_of_a_closed_ledger_is_refused_alike() {
    let dir = tempfile::tempdir().unwrap();
    let newest = rolled(dir.path());
    let reader = LogReader::open(Arc::new(FsStorage::new(dir.path())), LogConfig::default());
    let head = reader.unwrap().scan(|_| Ok::<(), ()>(())).unwrap().head;
    let head = head.to_string();
    std::fs::write(&newest, b"").unwrap();
    let before = crate::fixture::snapshot(dir.path());
    let run = payonce(&["verify", &arg(dir.path()), "--json"]);
    assert_eq!(run.code, 4, "{}", run.stdout);
    assert_eq!(run.json()["error"], "damaged");
    assert!(
        run.stderr
            .contains(&format!("before its checkpoint's head {head}")),
        "{}",
        run.stderr
    );
    assert_eq!(payonce(&["inflight", &arg(dir.path())]).code, 4);
    let clock = Arc::new(ManualClock::new(START));
    let error = Ledger::open_with(dir.path(), rolling(clock)).unwrap_err();
    assert!(error.to_string().contains(&head), "{error}");
    assert!(
        crate::fixture::snapshot(dir.path()) == before,
        "nothing was changed"
    );
}

// Guards against export --from past the end answering with nothing and
// exit 0 where state --at past the end is an error: both name the last
// event and exit 2.
#[test]
fn a_point_past_the_end_is_refused_alike_by_state_and_export() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let d = arg(dir.path());
    let state = payonce(&["state", &d, "--at", "99"]);
    let export = payonce(&["export", &d, "--from", "99"]);
    for (run, argument) in [(&state, "--at"), (&export, "--from")] {
        assert_eq!(run.code, 2, "{argument}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "{argument} 99 is past the end of the log, whose last event is 12"
            )),
            "{}",
            run.stderr
        );
        assert_eq!(run.stdout, "");
    }
    let last = payonce(&["export", &d, "--from", "12"]);
    assert_eq!((last.code, last.stdout.lines().count()), (0, 1));
    let beyond_to = payonce(&["export", &d, "--from", "11", "--to", "99"]);
    assert_eq!(
        beyond_to.stdout.lines().count(),
        2,
        "--to past the end is a bound"
    );
}

// Guards against export refusing the --json every other reporting command
// takes.
#[test]
fn export_accepts_json_and_prints_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let plain = payonce(&["export", &arg(dir.path())]);
    let json = payonce(&["export", &arg(dir.path()), "--json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    assert_eq!(json.stdout, plain.stdout);
    assert!(
        payonce(&["export", "--help"]).stdout.contains("JSON Lines"),
        "export's help says what it prints"
    );
}

// Guards against a well-formed time outside what a ledger can record being
// called malformed, or silently read as the start or end of the log.
#[test]
fn state_at_a_time_outside_the_range_names_the_range() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    for outside in [
        "1969-12-31T23:59:59Z",
        "2600-01-01T00:00:00Z",
        "1970-01-01T00:30:00+01:00",
    ] {
        let run = payonce(&["state", &arg(dir.path()), "--at", outside]);
        assert_eq!(run.code, 2, "{outside}");
        assert!(
            run.stderr.contains(
                "is outside the times a ledger records: from 1970-01-01T00:00:00Z to \
                 2554-07-21T23:34:33.709551615Z"
            ),
            "{outside}: {}",
            run.stderr
        );
    }
    let malformed = payonce(&["state", &arg(dir.path()), "--at", "2025-02-30T00:00:00Z"]);
    assert!(
        malformed.stderr.contains("is neither a sequence number"),
        "{}",
        malformed.stderr
    );
}
