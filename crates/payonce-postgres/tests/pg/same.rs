//! The same commands on the file log and on PostgreSQL: the same
//! projections, and the same event bytes but for what sessions add.

use std::sync::Arc;

use payonce::{
    Config, CountingEpochs, Event, EventKind, Ledger, ManualClock, SendFailure, SharedLog, State,
};
use payonce_log::{LogConfig, LogReader, MemStorage};
use payonce_model::Reason;
use payonce_postgres::{PgLog, Role};

use crate::{START, database, new_withdrawal, sent};

fn config(epoch: u64) -> Config {
    Config {
        clock: Arc::new(ManualClock::new(START)),
        epochs: Arc::new(CountingEpochs::new(epoch)),
        ..Config::default()
    }
}

/// The commands: sends that succeed, time out and are refused by the rail;
/// a retry, a second key, an operator's resolve and release, a record, a
/// later report and a correction.
fn play(ledger: &Ledger) {
    let (w1, w2, w3) = (
        ledger.create(new_withdrawal("10")).unwrap(),
        ledger.create(new_withdrawal("20.5")).unwrap(),
        ledger.create(new_withdrawal("30")).unwrap(),
    );
    let paid = ledger.submit("k-1", &w1, |r| Ok(sent(r, "0x1"))).unwrap();
    assert_eq!(ledger.submit("k-1", &w1, |_| unreachable!()).unwrap(), paid);
    assert!(ledger.submit("k-2", &w1, |_| unreachable!()).is_err());
    assert!(
        ledger
            .submit("k-3", &w2, |_| Err(SendFailure::failed("timeout")))
            .is_err()
    );
    ledger
        .resolve("k-3", sent(&w2, "0x3"), "found it", "ops")
        .unwrap();
    let refused = ledger.submit("k-4", &w3, |_| {
        Err(SendFailure::Rejected(Reason::new("no funds").unwrap()))
    });
    assert!(refused.is_err());
    ledger.release("k-4", "nothing left", "ops").unwrap();
    ledger.record("k-5", w3.clone()).unwrap();
    ledger.advance("k-1", &paid.confirm().unwrap()).unwrap();
    ledger
        .correct("k-3", &sent(&w2, "0x33"), "wrong reference", "ops")
        .unwrap();
}

/// What a caller can ask, key by key and withdrawal by withdrawal.
fn answers(state: &State) -> String {
    let mut records: Vec<String> = state
        .records()
        .map(|(key, record)| {
            format!(
                "{key} {:?} {:?} {} {:?}",
                record.fingerprint(),
                record.outcome(),
                record.claimed_seq(),
                record.last_error()
            )
        })
        .collect();
    records.sort();
    let mut claims: Vec<String> = state.claims().map(|(w, k)| format!("{w} {k}")).collect();
    claims.sort();
    let mut holds: Vec<String> = state.holds().map(|(w, h)| format!("{w} {h:?}")).collect();
    holds.sort();
    format!(
        "{records:?}\n{claims:?}\n{holds:?}\n{:?}\n{:?}\n{}",
        state.held_totals(),
        state.captured_totals(),
        state.refusal_count()
    )
}

#[test]
fn the_same_commands_give_the_same_projections_and_the_same_event_bytes() {
    // Guards against the backends deciding differently, or writing events the other reads otherwise.
    let url = database!();
    // File: created (opened, epoch 7), then reopened (opened, epoch 8).
    let storage = MemStorage::new();
    drop(Ledger::init_on(Arc::new(storage.clone()), config(7)).unwrap());
    let file = Ledger::open_on(Arc::new(storage.clone()), config(8)).unwrap();
    // PostgreSQL: created (opened, epoch 7), then a worker's start (epoch 8).
    drop(payonce_postgres::init(&url, config(7)).unwrap());
    let shared = payonce_postgres::open(&url, "api-1", config(8)).unwrap();
    play(&file);
    play(&shared);
    assert_eq!(
        answers(&file.state().unwrap()),
        answers(&shared.state().unwrap())
    );
    drop(shared);

    let reader = LogReader::open(Arc::new(storage), LogConfig::default()).unwrap();
    let mut records = reader.records_from(1).unwrap();
    let mut file_bytes = Vec::new();
    while let Some(record) = records.next_record().unwrap() {
        file_bytes.push(record.payload.to_vec());
    }
    let log = PgLog::connect(&url, Role::Attached).unwrap();
    let mut pg_bytes: Vec<Vec<u8>> = Vec::new();
    log.scan(0, &mut |_, payload| {
        pg_bytes.push(payload.to_vec());
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(file_bytes.len(), pg_bytes.len());
    assert_eq!(file_bytes[0], pg_bytes[0], "the creation");
    let started = Event::decode(&pg_bytes[1]).unwrap();
    assert!(
        matches!(started.kind, EventKind::Started { epoch: 8, .. }),
        "{started:?}"
    );
    let mut claims = 0;
    for (seq, (file, pg)) in file_bytes.iter().zip(&pg_bytes).enumerate().skip(2) {
        match Event::decode(pg).unwrap().kind {
            // A worker's claim names it: the file's `00` (no worker) is
            // `01`, the name's length and the name.
            EventKind::Claimed {
                worker: Some(worker),
                ..
            } => {
                let mut expected = file[..file.len() - 1].to_vec();
                expected.push(1);
                expected.extend((worker.len() as u64).to_le_bytes());
                expected.extend(worker.as_bytes());
                assert_eq!(*pg, expected, "event {}", seq + 1);
                claims += 1;
            }
            _ => assert_eq!(file, pg, "event {}", seq + 1),
        }
    }
    assert_eq!(claims, 3);
}
