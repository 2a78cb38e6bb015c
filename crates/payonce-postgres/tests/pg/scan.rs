//! Reading the log in one streamed scan: every batch's chain followed, each
//! way the tables can be damaged found with its place, and a scan that
//! starts at the end of a batch the log holds.

use std::ops::ControlFlow;

use payonce::{Appended, Event, EventKind, SCHEMA_VERSION, SharedLog, StoreError};
use payonce_postgres::{PgLog, Role};

use crate::{START, config, database, new_withdrawal};

/// A ledger whose last batch holds three events (`opened` again, as an
/// operator's tool could append them), after single-event batches:
/// returns the first event of that batch.
fn with_a_batch_of_three(url: &str) -> u64 {
    drop(payonce_postgres::init(url, config()).unwrap());
    let worker = payonce_postgres::open(url, "api-1", config()).unwrap();
    worker.create(new_withdrawal("10")).unwrap();
    let last = worker.last_seq();
    drop(worker);
    let log = PgLog::connect(url, Role::Attached).unwrap();
    log.scan(0, &mut |_, _| ControlFlow::Continue(())).unwrap();
    log.begin(last).unwrap();
    let batch: Vec<Appended> = (last + 1..=last + 3)
        .map(|seq| Appended {
            seq,
            payload: Event {
                schema: SCHEMA_VERSION,
                seq,
                at: START,
                kind: EventKind::Opened {
                    accept_foreign_ids: false,
                    epoch: Some(seq),
                },
            }
            .encode()
            .unwrap(),
            claim: None,
            keys: Vec::new(),
            withdrawal: None,
        })
        .collect();
    log.commit(&batch).unwrap();
    last + 1
}

/// Runs `sql` on the database of `url` with the append-only triggers off,
/// as someone who owns the tables can.
fn tamper(url: &str, sql: &str) {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "ALTER TABLE payonce.events DISABLE TRIGGER append_only; \
             ALTER TABLE payonce.batches DISABLE TRIGGER append_only; {sql}"
        ))
        .unwrap();
}

/// Every event a new connection's scan from `after` hands over.
fn scanned(url: &str, after: u64) -> Result<Vec<u64>, StoreError> {
    let log = PgLog::connect(url, Role::Attached).unwrap();
    let mut seen = Vec::new();
    log.scan(after, &mut |seq, _| {
        seen.push(seq);
        ControlFlow::Continue(())
    })?;
    Ok(seen)
}

#[test]
fn a_scan_starts_at_the_end_of_any_batch_the_log_holds_and_nowhere_else() {
    // Guards against a state loaded at some event caught up from a place the log does not vouch for.
    let url = database!();
    let first = with_a_batch_of_three(&url);
    let end = first + 2;
    assert_eq!(scanned(&url, 0).unwrap(), (1..=end).collect::<Vec<_>>());
    assert_eq!(
        scanned(&url, first - 1).unwrap(),
        (first..=end).collect::<Vec<_>>()
    );
    assert_eq!(scanned(&url, end).unwrap(), Vec::<u64>::new());
    let error = scanned(&url, first).unwrap_err();
    assert!(
        matches!(&error, StoreError::Damaged { seq, detail } if *seq == first && detail.contains("no batch of the log ends")),
        "{error}"
    );
    assert_eq!(payonce_postgres::head(&url).unwrap().seq, end);
}

/// A way to damage the tables: what, the SQL given the batch's first
/// event, the event the damage is found at, and what the error says.
type Damage = (
    &'static str,
    fn(u64) -> String,
    fn(u64) -> u64,
    &'static str,
);

#[test]
fn each_way_the_tables_can_be_damaged_is_found_by_every_scan_with_its_place() {
    // Guards against a reader that streams the log believing events the chain does not vouch for.
    let cases: [Damage; 6] = [
        (
            "the batch's digest rewritten",
            |first| {
                format!(
                    "UPDATE payonce.batches SET digest = sha256(digest) WHERE first_seq = {first}"
                )
            },
            |first| first,
            "does not chain",
        ),
        (
            // The store's scans say so; a replay stops at the event first,
            // which no longer decodes as the event at its place.
            "a payload rewritten",
            |first| {
                format!(
                    "UPDATE payonce.events SET payload = payload || '\\x00' WHERE seq = {}",
                    first + 1
                )
            },
            |first| first,
            "does not chain",
        ),
        (
            "the batch's last event taken away",
            |first| format!("DELETE FROM payonce.events WHERE seq = {}", first + 2),
            |first| first + 2,
            "the rest is missing",
        ),
        (
            "an event in the middle taken away",
            |first| format!("DELETE FROM payonce.events WHERE seq = {}", first + 1),
            |first| first + 1,
            "follows where",
        ),
        (
            "the batch's row taken away",
            |first| format!("DELETE FROM payonce.batches WHERE first_seq = {first}"),
            |first| first,
            "belongs to no batch",
        ),
        (
            "an event moved to the batch before",
            |first| {
                format!(
                    "UPDATE payonce.events SET batch = {} WHERE seq = {}",
                    first - 1,
                    first + 1
                )
            },
            |first| first + 1,
            "not whole",
        ),
    ];
    for (what, sql, at, says) in cases {
        let url = database!();
        let first = with_a_batch_of_three(&url);
        tamper(&url, &sql(first));
        let damaged = |error: &StoreError| matches!(error, StoreError::Damaged { seq, detail } if *seq == at(first) && detail.contains(says));
        let error = scanned(&url, 0).unwrap_err();
        assert!(damaged(&error), "{what}: the worker's scan: {error}");
        let error = payonce_postgres::head(&url).unwrap_err();
        assert!(damaged(&error), "{what}: the read view: {error}");
        if what == "a payload rewritten" {
            let error = payonce_postgres::verify(&url).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains(&format!("log record {}", first + 1)),
                "{what}: verify: {error}"
            );
            continue;
        }
        let error = payonce_postgres::verify(&url).unwrap_err();
        assert!(
            matches!(&error, payonce::LedgerError::Store(error) if damaged(error)),
            "{what}: verify: {error}"
        );
        let error = payonce_postgres::open(&url, "api-2", config()).unwrap_err();
        assert!(
            matches!(&error, payonce::LedgerError::Store(error) if damaged(error)),
            "{what}: a new worker: {error}"
        );
    }
}

#[test]
fn a_walk_that_stops_early_leaves_the_read_view_and_the_log_to_read_on() {
    // Guards against the rest of a stopped scan's stream read as the answer to the next statement.
    let url = database!();
    let first = with_a_batch_of_three(&url);
    let end = first + 2;
    let mut view = payonce_postgres::ReadView::open(&url).unwrap();
    let mut seen = Vec::new();
    view.walk(|seq, _| {
        seen.push(seq);
        Ok::<_, ()>(match seq == first + 1 {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        })
    })
    .unwrap();
    assert_eq!(seen, (1..=first + 1).collect::<Vec<_>>());
    let (head, through) = view.head_through(first - 1).unwrap();
    assert_eq!(head.seq, end);
    assert_eq!(through.map(|head| head.seq), Some(first - 1));

    // A worker's log stopped inside a batch goes on from there.
    let log = PgLog::connect(&url, Role::Attached).unwrap();
    let mut seen = Vec::new();
    log.scan(0, &mut |seq, _| {
        seen.push(seq);
        match seq == first + 1 {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        }
    })
    .unwrap();
    log.scan(first + 1, &mut |seq, _| {
        seen.push(seq);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(seen, (1..=end).collect::<Vec<_>>());
    assert_eq!(
        log.head().unwrap().seq,
        end,
        "the chain followed through the stop"
    );
}
