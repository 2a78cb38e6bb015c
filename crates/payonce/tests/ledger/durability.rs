//! What the ledger does when storage fails, when the log lies, and what it
//! writes: faults fail closed, divergences are caught, refusals are kept.

use std::sync::Arc;

use payonce::{
    Config, Event, EventKind, EventLog, Ledger, LedgerError, Refusal, SCHEMA_VERSION, SubmitError,
    Timestamp, verify_on,
};
use payonce_log::{Fault, Log, LogConfig, LogError, MemStorage, Storage};
use payonce_model::{Field, Rule, WithdrawalRequest};

use crate::{Fixture, Rail, START, records_end, sent};

pub(crate) fn events(storage: &MemStorage) -> Vec<Event> {
    let log = EventLog::open_on(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    let mut events = log.events_from(1).unwrap();
    let mut all = Vec::new();
    while let Some((event, _)) = events.next_event().unwrap() {
        all.push(event);
    }
    all
}

#[test]
fn events_carry_the_schema_their_sequence_number_and_the_clocks_time() {
    let f = Fixture::new();
    f.tick();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), Rail::default().ok())
        .unwrap();

    let events = events(&f.storage);
    let kinds: Vec<_> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds, ["opened", "created", "claimed", "completed"]);
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event.schema, SCHEMA_VERSION);
        assert_eq!(event.seq, index as u64 + 1);
    }
    assert_eq!(events[0].at, START);
    assert_eq!(events[1].at, START.plus(std::time::Duration::from_secs(1)));
}

#[test]
fn refusals_are_recorded_for_audit_and_change_nothing() {
    let f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();
    let before = f.ledger().state().unwrap();

    let refused = f
        .ledger()
        .submit("req-2", w.clone(), rail.ok())
        .unwrap_err();
    // Refusals are not synced before returning; the next sync carries them.
    f.ledger().sync().unwrap();

    let last = events(&f.storage).pop().unwrap();
    let EventKind::Refused {
        command,
        refusal,
        held,
    } = &last.kind
    else {
        panic!("{last:?}")
    };
    assert_eq!(Some(refusal), refused.refusal());
    assert_eq!(payonce::command_key(command).unwrap().as_str(), "req-2");
    // req-2 held nothing when it was refused.
    assert_eq!(held, &None);
    let after = f.ledger().state().unwrap();
    crate::assert_same_projections(&before, &after);
    assert_eq!(after.refusal_count(), 1);
}

#[test]
fn refusals_are_not_recorded_when_switched_off() {
    let f = Fixture::with(|config| config.log_refusals = false);
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();
    let count = events(&f.storage).len();

    f.ledger()
        .submit("req-2", w.clone(), rail.ok())
        .unwrap_err();
    f.ledger().sync().unwrap();

    assert_eq!(events(&f.storage).len(), count);
    assert_eq!(f.ledger().state().unwrap().refusal_count(), 0);
}

#[test]
fn invalid_input_is_a_typed_error_and_writes_nothing() {
    let f = Fixture::new();
    let w = f.withdrawal();
    let count = events(&f.storage).len();

    let error = f
        .ledger()
        .submit("  ", w.clone(), Rail::default().ok())
        .unwrap_err();
    let SubmitError::Ledger(LedgerError::Invalid(field)) = &error else {
        panic!("{error}")
    };
    assert_eq!(
        (field.field, &field.rule),
        (Field::RequestKey, &Rule::Empty)
    );
    let error = f.ledger().release("req-1", "", "ops").unwrap_err();
    assert!(
        matches!(&error, LedgerError::Invalid(e) if e.field == Field::Note),
        "{error}"
    );
    let error = f
        .ledger()
        .resolve("req\u{7}", sent(&w, "0x1"), "n", "ops")
        .unwrap_err();
    assert!(
        matches!(&error, LedgerError::Invalid(e) if e.field == Field::RequestKey),
        "{error}"
    );
    let error = f.ledger().release("req-1", "n", "\u{1b}[31m").unwrap_err();
    assert!(
        matches!(&error, LedgerError::Invalid(e) if e.field == Field::Operator),
        "{error}"
    );

    assert_eq!(events(&f.storage).len(), count);
}

#[test]
fn a_storage_error_while_claiming_means_the_send_never_runs() {
    let f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.storage.faults().arm(Fault::SyncFails { nth: 1 });

    let error = f
        .ledger()
        .submit("req-1", w.clone(), rail.ok())
        .unwrap_err();

    assert!(
        matches!(error, SubmitError::Ledger(LedgerError::Log(_))),
        "{error}"
    );
    assert_eq!(rail.total(), 0, "nothing was sent on an unsynced claim");
}

#[test]
fn a_poisoned_log_refuses_every_later_write_until_reopened() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let (w1, w2) = (f.withdrawal(), f.withdrawal());
    f.storage.faults().arm(Fault::SyncFails { nth: 1 });
    f.ledger()
        .submit("req-1", w1.clone(), rail.ok())
        .unwrap_err();
    f.storage.faults().disarm_all();

    for _ in 0..2 {
        let error = f
            .ledger()
            .submit("req-2", w2.clone(), rail.ok())
            .unwrap_err();
        let SubmitError::Ledger(LedgerError::Log(LogError::Poisoned { .. })) = &error else {
            panic!("{error}")
        };
    }
    assert!(matches!(
        f.ledger().release("req-1", "n", "ops"),
        Err(LedgerError::Log(LogError::Poisoned { .. }))
    ));
    assert_eq!(rail.total(), 0);

    f.reopen();
    f.ledger().submit("req-2", w2.clone(), rail.ok()).unwrap();
    assert_eq!(rail.total(), 1);
}

#[test]
fn an_outcome_that_cannot_be_recorded_is_handed_back_with_the_error() {
    let f = Fixture::new();
    let w = f.withdrawal();
    let storage = f.storage.clone();

    let error = f
        .ledger()
        .submit("req-1", w.clone(), |request| {
            // The claim is synced; now the disk goes.
            storage.faults().arm(Fault::SyncFails { nth: 1 });
            Rail::default().ok()(request)
        })
        .unwrap_err();

    let SubmitError::Unrecorded { key, outcome, .. } = &error else {
        panic!("{error}")
    };
    assert_eq!(key.as_str(), "req-1");
    assert_eq!(
        outcome.reference().unwrap().as_str(),
        format!("0x{}", w.id())
    );
    assert!(error.to_string().contains("resolve the key"), "{error}");
}

/// Appends hand-made events to a log, as a buggy or tampered writer would.
/// Returns the first one's sequence number.
pub(crate) fn forge(storage: &MemStorage, kinds: Vec<EventKind>) -> u64 {
    let (log, _) = Log::open(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    let first = log.last_seq() + 1;
    for (index, kind) in kinds.into_iter().enumerate() {
        let event = Event {
            schema: SCHEMA_VERSION,
            seq: first + index as u64,
            at: Timestamp::default(),
            kind,
        };
        log.append(&event.encode().unwrap()).unwrap();
    }
    log.sync().unwrap();
    first
}

/// A claim of w, already claimed by req-1, under req-2 (a decision the code
/// would not make), followed by `then` more events. Returns the storage,
/// the config and the claim's seq.
fn log_with_a_divergent_claim(then: Vec<EventKind>) -> (MemStorage, Config, u64) {
    let f = Fixture::new();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), Rail::default().ok())
        .unwrap();
    let storage = f.storage.clone();
    let config = f.config.clone();
    drop(f);
    // A second claim of a claimed withdrawal, as if a writer skipped the check.
    let mut kinds = vec![EventKind::Claimed {
        key: "req-2".parse().unwrap(),
        request: w,
        worker: None,
    }];
    kinds.extend(then);
    let divergent = forge(&storage, kinds);
    (storage, config, divergent)
}

/// `config` replaying on two threads whatever the log's length, then on
/// one: replay must answer alike both ways.
fn both_replays(config: &Config) -> [Config; 2] {
    [0, u64::MAX].map(|replay_thread_min_len| Config {
        replay_thread_min_len,
        ..config.clone()
    })
}

#[test]
fn a_recorded_decision_the_code_would_not_make_is_a_divergence() {
    let (storage, config, divergent) = log_with_a_divergent_claim(Vec::new());

    for config in both_replays(&config) {
        let error = Ledger::open_on(Arc::new(storage.clone()), config).unwrap_err();

        let LedgerError::Divergence(divergence) = &error else {
            panic!("{error}")
        };
        assert_eq!(divergence.seq, divergent);
        assert!(matches!(divergence.recorded, EventKind::Claimed { .. }));
        assert!(
            matches!(&divergence.recomputed, Err(Refusal::Claimed { holder, .. }) if holder.as_str() == "req-1")
        );
    }
    let report = verify_on(Arc::new(storage), LogConfig::default()).unwrap();
    assert_eq!(report.divergences.len(), 1);
    assert_eq!(report.divergences[0].seq, divergent);
    assert!(!report.is_clean());
}

#[test]
fn a_divergence_in_a_batch_that_fills_is_reported_at_its_own_seq() {
    // Guards against a replay on one thread applying a full batch again
    // after an error inside it (which panicked, an event applied twice).
    let filler = (0..2100).map(|_| EventKind::Opened {
        accept_foreign_ids: false,
        epoch: None,
    });
    let (storage, config, divergent) = log_with_a_divergent_claim(filler.collect());
    // From the first event, so the batch holding the divergence applies
    // events before it.
    let from_the_start = Config {
        snapshot_store: None,
        ..config
    };

    for config in both_replays(&from_the_start) {
        let error = Ledger::open_on(Arc::new(storage.clone()), config).unwrap_err();

        assert!(
            matches!(&error, LedgerError::Divergence(divergence) if divergence.seq == divergent),
            "{error}"
        );
    }
}

#[test]
fn a_divergence_before_an_undecodable_record_is_the_error_reported() {
    // Guards against replay reporting what the scan reached first instead of the first fault in log order.
    let (storage, config, divergent) = log_with_a_divergent_claim(Vec::new());
    let (log, _) = Log::open(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    log.append_durable(b"\x01\x00not an event").unwrap();
    drop(log);

    for config in both_replays(&config) {
        let error = Ledger::open_on(Arc::new(storage.clone()), config).unwrap_err();

        assert!(
            matches!(&error, LedgerError::Divergence(divergence) if divergence.seq == divergent),
            "{error}"
        );
    }
}

#[test]
fn a_divergent_log_is_refused_before_its_torn_tail_is_cut() {
    // Guards against an open that refuses still repairing the directory, because replay ran behind the scan.
    let (storage, config, divergent) = log_with_a_divergent_claim(Vec::new());
    let segment = storage
        .list()
        .unwrap()
        .into_iter()
        .find(|name| name.ends_with(".log"))
        .unwrap();
    let mut torn = storage.file(&segment).unwrap();
    // Over the zeros written ahead of the records, where they end.
    let end = records_end(Arc::new(storage.clone()));
    torn[end..end + 9].fill(0xee);
    storage.put_file(&segment, &torn);
    let files = |storage: &MemStorage| {
        let mut names = storage.list().unwrap();
        names.sort();
        names
            .into_iter()
            .map(|name| (storage.file(&name), name))
            .collect::<Vec<_>>()
    };
    let before = files(&storage);

    for config in both_replays(&config) {
        let error = Ledger::open_on(Arc::new(storage.clone()), config).unwrap_err();

        assert!(
            matches!(&error, LedgerError::Divergence(divergence) if divergence.seq == divergent),
            "{error}"
        );
        assert!(
            files(&storage) == before,
            "the refused open changed the directory"
        );
    }
    // The bytes are a torn tail: an open that accepts the records cuts them.
    let (_, recovery) = Log::open(Arc::new(storage), LogConfig::default()).unwrap();
    assert_eq!(recovery.torn_tail.unwrap().len, 9);
}

#[test]
fn a_divergence_while_the_scan_is_far_ahead_is_reported_without_hanging() {
    // Guards against a deadlock between the threads of a replay when the applier stops while the scanner waits to hand over.
    let opened = EventKind::Opened {
        accept_foreign_ids: false,
        epoch: Some(7),
    };
    let (storage, config, divergent) = log_with_a_divergent_claim(vec![opened; 10_000]);
    let [config, _] = both_replays(&config);
    let (answer, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let error = Ledger::open_on(Arc::new(storage), config)
            .map(drop)
            .unwrap_err();
        answer.send(error).unwrap();
    });

    let error = answered
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the open returns");

    assert!(
        matches!(&error, LedgerError::Divergence(divergence) if divergence.seq == divergent),
        "{error}"
    );
}

#[test]
fn a_log_of_many_replay_batches_reopens_to_the_same_answers() {
    // Guards against events lost, reordered or applied twice where replay hands them between threads.
    let mut f = Fixture::with(|config| config.replay_thread_min_len = 0);
    let withdrawals: Vec<WithdrawalRequest> = (0..1200).map(|_| f.withdrawal()).collect();
    let keys: Vec<String> = (0..withdrawals.len()).map(|i| format!("req-{i}")).collect();
    let rail = Rail::default();
    for (index, (key, w)) in keys.iter().zip(&withdrawals).enumerate() {
        match index % 4 {
            0 => drop(f.ledger().submit(key, w.clone(), rail.ok()).unwrap()),
            1 => drop(
                f.ledger()
                    .submit(key, w.clone(), rail.timeout())
                    .unwrap_err(),
            ),
            2 => drop(
                f.ledger()
                    .submit(key, w.clone(), rail.refuse())
                    .unwrap_err(),
            ),
            _ => drop(f.ledger().record(key, w.clone()).unwrap()),
        }
    }
    assert!(
        f.ledger().last_seq() > 3000,
        "more than two batches of events"
    );
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let withdrawal_refs: Vec<&WithdrawalRequest> = withdrawals.iter().collect();

    f.assert_same_after_reopen(&key_refs, &withdrawal_refs);
    // And on one thread, the same again.
    f.config.replay_thread_min_len = u64::MAX;
    f.assert_same_after_reopen(&key_refs, &withdrawal_refs);
}

#[test]
fn a_record_that_is_not_an_event_refuses_to_open_naming_its_sequence_number() {
    let storage = MemStorage::new();
    drop(Ledger::init_on(Arc::new(storage.clone()), Config::default()).unwrap());
    let (log, _) = Log::open(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    log.append_durable(b"\x01\x00not an event").unwrap();
    drop(log);

    for config in both_replays(&Config::default()) {
        let error = Ledger::open_on(Arc::new(storage.clone()), config).unwrap_err();

        assert!(
            matches!(error, LedgerError::BadEvent { seq: 2, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("log record 2"), "{error}");
    }
}

#[test]
fn an_event_numbered_for_another_place_in_the_log_refuses_to_open() {
    let storage = MemStorage::new();
    drop(Ledger::init_on(Arc::new(storage.clone()), Config::default()).unwrap());
    let (log, _) = Log::open(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    let event = Event {
        schema: SCHEMA_VERSION,
        seq: 7,
        at: Timestamp::default(),
        kind: EventKind::Opened {
            accept_foreign_ids: false,
            epoch: Some(7),
        },
    };
    log.append_durable(&event.encode().unwrap()).unwrap();
    drop(log);

    for config in both_replays(&Config::default()) {
        let error = Ledger::open_on(Arc::new(storage.clone()), config).unwrap_err();

        assert!(
            matches!(error, LedgerError::MisplacedEvent { seq: 2, found: 7 }),
            "{error}"
        );
    }
}

#[test]
fn the_ledger_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Ledger>();
    let f = Fixture::new();
    let clone = f.ledger().clone();
    let w = f.withdrawal();
    clone.record("req-1", w.clone()).unwrap();
    assert_eq!(
        f.ledger().outcome("req-1").unwrap(),
        Some(w),
        "a clone is the same ledger"
    );
}

#[test]
fn a_second_ledger_on_the_same_directory_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Ledger::init(dir.path()).unwrap();
    for config in both_replays(&Config::default()) {
        let error = Ledger::open_with(dir.path(), config).unwrap_err();
        assert!(
            matches!(error, LedgerError::Log(LogError::Locked { .. })),
            "{error}"
        );
        assert!(
            error.to_string().contains("locked by another writer"),
            "{error}"
        );
    }
}

#[test]
fn a_rail_refusal_that_cannot_be_recorded_is_a_storage_error_not_a_released_hold() {
    let f = Fixture::new();
    let w = f.withdrawal();
    let storage = f.storage.clone();

    let error = f
        .ledger()
        .submit("req-1", w.clone(), |request| {
            storage.faults().arm(Fault::SyncFails { nth: 1 });
            Rail::default().refuse()(request)
        })
        .unwrap_err();

    assert!(
        matches!(error, SubmitError::Ledger(LedgerError::Log(_))),
        "{error}"
    );
}

#[test]
fn verify_of_a_send_failure_recorded_after_an_outcome_keeps_the_outcome_and_the_error() {
    // Guards against the outcome's reason and a later send error sharing
    // one place in the state: the auditor's replay of such a log panicked.
    let f = Fixture::new();
    let w = f.withdrawal();
    let outcome = f
        .ledger()
        .submit("req-1", w.clone(), Rail::default().ok())
        .unwrap();
    let storage = f.storage.clone();
    drop(f);
    // A send failure after the outcome: a decision the code would not make.
    forge(
        &storage,
        vec![EventKind::SendFailed {
            key: "req-1".parse().unwrap(),
            withdrawal: Some(w.id().clone()),
            error: payonce_model::Reason::new("timeout").unwrap(),
            cause: payonce::FailureCause::Error,
        }],
    );
    let report = verify_on(Arc::new(storage.clone()), LogConfig::default()).unwrap();
    assert_eq!(report.divergences.len(), 1);
    let record = report.state.record("req-1").unwrap();
    assert_eq!(record.outcome(), Some(outcome));
    assert_eq!(record.last_error().as_deref(), Some("timeout"));
    assert!(report.state.in_flight().is_empty());

    // The same key claimed again: the claim replaces the record.
    forge(
        &storage,
        vec![EventKind::Claimed {
            key: "req-1".parse().unwrap(),
            request: w,
            worker: None,
        }],
    );
    let report = verify_on(Arc::new(storage), LogConfig::default()).unwrap();
    assert_eq!(report.divergences.len(), 2);
    let record = report.state.record("req-1").unwrap();
    assert_eq!(record.outcome(), None);
    assert_eq!(record.last_error(), None);
    assert_eq!(report.state.in_flight().len(), 1);
}

/// A ledger where req-1's send failed, holding w1, and w2 created; the
/// storage, w1 and w2.
fn a_key_in_flight() -> (MemStorage, WithdrawalRequest, WithdrawalRequest) {
    let f = Fixture::new();
    let (w1, w2) = (f.withdrawal(), f.withdrawal());
    f.ledger()
        .submit("req-1", w1.clone(), |_| {
            Err::<WithdrawalRequest, _>(payonce::SendFailure::failed("timeout".to_owned()))
        })
        .unwrap_err();
    (f.storage.clone(), w1, w2)
}

#[test]
fn a_key_only_event_naming_another_withdrawal_than_its_key_holds_is_a_divergence() {
    // Guards against replay accepting any value for what an event derives from the state rather than its command.
    let release = |withdrawal: Option<&WithdrawalRequest>| EventKind::Released {
        key: "req-1".parse().unwrap(),
        withdrawal: withdrawal.map(|w| w.id().clone()),
        note: payonce_model::Note::new("nothing was sent").unwrap(),
        by: payonce_model::Actor::new("ops").unwrap(),
    };
    for wrong in [true, false] {
        let (storage, w1, w2) = a_key_in_flight();
        let seq = forge(&storage, vec![release(wrong.then_some(&w2))]);
        let report = verify_on(Arc::new(storage), LogConfig::default()).unwrap();
        assert_eq!(report.divergences.len(), 1, "naming w2: {wrong}");
        assert_eq!(report.divergences[0].seq, seq);
        assert_eq!(
            report.divergences[0].recomputed,
            Ok(payonce::Decision::Append(release(Some(&w1))))
        );
    }
    let (storage, w1, _) = a_key_in_flight();
    forge(&storage, vec![release(Some(&w1))]);
    assert!(
        verify_on(Arc::new(storage), LogConfig::default())
            .unwrap()
            .is_clean()
    );
}
