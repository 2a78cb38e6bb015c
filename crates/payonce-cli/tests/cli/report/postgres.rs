//! The same events on a file ledger and on PostgreSQL give the same page,
//! apart from the ledger's name (and the time it was made).

use std::sync::Arc;

use payonce::{Appended, Event, SharedLog, State, apply};
use payonce_log::{FsStorage, LogConfig, LogReader};
use payonce_postgres::{PgLog, Role};

use super::report;
use crate::fixture::{arg, scenario};

/// Copies the file ledger in `dir` into the empty, migrated PostgreSQL
/// ledger at `url`, batch for batch, so the chain heads are the same.
fn copy_to_postgres(dir: &std::path::Path, url: &str) {
    let reader = LogReader::open(Arc::new(FsStorage::new(dir)), LogConfig::default()).unwrap();
    let log = PgLog::connect(url, Role::Attached).unwrap();
    let mut state = State::new();
    let mut batch: Vec<Appended> = Vec::new();
    let mut last = 0;
    for record in reader.records_from(1).unwrap() {
        let record = record.unwrap();
        let event = Event::decode(&record.payload).unwrap();
        let event = Event {
            seq: record.seq,
            ..event
        };
        batch.push(Appended {
            seq: record.seq,
            payload: record.payload.to_vec(),
            claim: state.claim_change(&event.kind),
            keys: event.kind.keys_touched().into_iter().cloned().collect(),
            withdrawal: event.kind.withdrawal().cloned(),
        });
        apply(&mut state, &event);
        if reader.head_at(record.seq).unwrap().is_some() {
            assert!(log.begin(last).unwrap().is_empty());
            log.commit(&batch).unwrap();
            last = record.seq;
            batch.clear();
        }
    }
    assert!(batch.is_empty(), "the file log ends with a whole batch");
}

/// The scenario's file ledger in a temporary directory, and the same
/// events copied batch for batch into a migrated database of a throwaway
/// cluster: the database's URL, the directory and the ledger's path. `None` where no cluster can be
/// started outside CI.
fn scenario_on_both() -> Option<(String, tempfile::TempDir, std::path::PathBuf)> {
    let cluster = payonce_postgres::cluster::for_tests()?;
    let url = cluster.database().unwrap();
    payonce_postgres::migrate(&url).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    scenario(&log);
    copy_to_postgres(&log, &url);
    Some((url, dir, log))
}

/// `page` without what names the ledger or the moment it was made.
fn without_name(page: &str, ledger: &str) -> String {
    let page = page.replace(ledger, "LEDGER");
    let at = page.find("id=\"made\">").unwrap();
    let end = at + page[at..].find("</dd>").unwrap();
    format!("{}{}", &page[..at], &page[end..])
}

// Guards against the two backends' pages differing: other events, other
// heads, other words.
#[test]
fn the_same_events_on_postgresql_give_the_same_page() {
    let Some((url, dir, log)) = scenario_on_both() else {
        return;
    };

    for window in [
        vec![],
        vec!["--from", "3", "--to", "10"],
        vec!["--key", "req-3"],
    ] {
        let (file_run, file_page) = report(&arg(&log), &dir.path().join("file.html"), &window);
        let (pg_run, pg_page) = report(&url, &dir.path().join("pg.html"), &window);
        assert_eq!(file_run.code, 0, "{}", file_run.stderr);
        assert_eq!(pg_run.code, 0, "{}", pg_run.stderr);
        // As the page writes it: `&` as askama escapes it.
        let shown = payonce_postgres::redacted(&url).replace('&', "&#38;");
        let file_page = without_name(&file_page.unwrap(), &arg(&log));
        let pg_page = without_name(&pg_page.unwrap(), &shown);
        for (line, (file, pg)) in file_page.lines().zip(pg_page.lines()).enumerate() {
            assert_eq!(file, pg, "window {window:?}, line {}", line + 1);
        }
        assert_eq!(file_page.len(), pg_page.len(), "window {window:?}");
        assert!(file_page.contains("id=\"end-head\">12:") || !window.is_empty());
    }
    // The database's index refuses an unknown key, as the replay does
    // without it; neither writes a page.
    for flags in [
        vec!["--key", "nobody"],
        vec!["--key", "nobody", "--no-index"],
    ] {
        let out = dir.path().join("unknown.html");
        let (run, page) = report(&url, &out, &flags);
        assert_eq!(run.code, 2, "{flags:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("request key nobody appears in no event"),
            "{}",
            run.stderr
        );
        assert!(page.is_none());
    }
}

// Guards against a PostgreSQL report that shows events of a batch whose
// chain does not verify, or hides where the damage is.
#[test]
fn a_rewritten_event_on_postgresql_is_damage_and_nothing_from_its_batch_is_shown() {
    let Some((url, dir, _)) = scenario_on_both() else {
        return;
    };
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "ALTER TABLE payonce.events DISABLE TRIGGER append_only; \
             UPDATE payonce.events SET payload = payload || '\\x00' WHERE seq = 6;",
        )
        .unwrap();
    let out = dir.path().join("pg.html");
    let (run, page) = report(&url, &out, &[]);
    assert_eq!(
        run.code,
        payonce_cli::EXIT_DAMAGED,
        "{}{}",
        run.stdout,
        run.stderr
    );
    let page = page.expect("the page is written up to the damage");
    let verdict = &page[page.find("Damage: ").unwrap()..];
    let verdict = &verdict[..verdict.find("</p>").unwrap()];
    assert!(verdict.contains("does not chain"), "{verdict}");
    let from = verdict.split("nothing from seq ").nth(1).unwrap();
    let from: u64 = from[..from.find(' ').unwrap()].parse().unwrap();
    assert!((2..=6).contains(&from), "{verdict}");
    for seq in 1..from {
        assert!(page.contains(&format!("id=\"e-{seq}\"")), "event {seq}");
    }
    for seq in from..=12 {
        assert!(!page.contains(&format!("id=\"e-{seq}\"")), "event {seq}");
    }
}
