//! An outcome says what the rail did: only a settled withdrawal is one, it
//! moves forward and never back, and only an operator corrects it.

use payonce::{EventKind, LedgerError, Refusal, SubmitError};
use payonce_model::{Reason, Reference, WithdrawalRequest, WithdrawalState};

use crate::{Fixture, Rail, sent};

fn refusal(error: &LedgerError) -> &Refusal {
    error
        .refusal()
        .unwrap_or_else(|| panic!("not a refusal: {error}"))
}

fn last_event(f: &Fixture) -> EventKind {
    f.ledger().sync().unwrap();
    crate::durability::events(&f.storage).pop().unwrap().kind
}

/// A withdrawal submitted under `key` and sent.
fn sent_under(f: &Fixture, key: &str) -> (WithdrawalRequest, WithdrawalRequest) {
    let w = f.withdrawal();
    let outcome = f.ledger().submit(key, &w, Rail::default().ok()).unwrap();
    (w, outcome)
}

#[test]
fn a_send_answering_with_an_unsettled_withdrawal_leaves_the_key_in_flight_naming_the_state() {
    // Guards against a rail client that returns the request it was given closing the key for good.
    let f = Fixture::new();
    let w = f.withdrawal();
    let approved = w.approve().unwrap();
    let error = f
        .ledger()
        .submit("req-1", &w, |_| Ok(approved.clone()))
        .unwrap_err();
    let SubmitError::Ledger(error) = &error else {
        panic!("{error}")
    };
    assert_eq!(
        refusal(error),
        &Refusal::Unsettled {
            key: "req-1".parse().unwrap(),
            state: WithdrawalState::Approved
        }
    );
    assert!(f.ledger().outcome("req-1").unwrap().is_none());
    let in_flight = f.ledger().in_flight();
    assert_eq!(in_flight.len(), 1);
    assert!(in_flight[0].held, "the hold stays");
    assert!(
        in_flight[0]
            .last_error
            .as_ref()
            .unwrap()
            .contains("approved"),
        "the error names the state: {:?}",
        in_flight[0].last_error
    );
    // A retry is in flight, not replayed as an outcome.
    let retry = f
        .ledger()
        .submit("req-1", &w, |_| unreachable!())
        .unwrap_err();
    assert!(
        matches!(retry.refusal(), Some(Refusal::InFlight { .. })),
        "{retry}"
    );
}

#[test]
fn resolve_with_an_unsettled_outcome_is_refused_naming_the_state_and_writes_only_the_refusal() {
    // Guards against an operator closing a key with the request as it was claimed, which left it held forever.
    let f = Fixture::new();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", &w, Rail::default().timeout())
        .unwrap_err();
    for outcome in [
        w.clone(),
        w.approve().unwrap(),
        w.approve().unwrap().start_sending().unwrap(),
    ] {
        let before = f.ledger().last_seq();
        let error = f
            .ledger()
            .resolve("req-1", outcome.clone(), "looked", "ops")
            .unwrap_err();
        assert_eq!(
            refusal(&error),
            &Refusal::Unsettled {
                key: "req-1".parse().unwrap(),
                state: outcome.state()
            }
        );
        assert_eq!(
            f.ledger().last_seq(),
            before + 1,
            "only the refusal is written"
        );
        assert!(matches!(last_event(&f), EventKind::Refused { .. }));
    }
    assert_eq!(f.ledger().in_flight().len(), 1);
    assert!(f.ledger().held(w.id()).unwrap().is_some());
    // A settled outcome closes it.
    f.ledger()
        .resolve("req-1", sent(&w, "0x1"), "seen on chain", "ops")
        .unwrap();
    assert!(f.ledger().in_flight().is_empty());
}

#[test]
fn record_keeps_the_request_as_it_stands_whatever_its_state() {
    // Guards against the settled-outcome rule leaking into record, which records without a send.
    let f = Fixture::new();
    let w = f.withdrawal();
    let approved = w.approve().unwrap();
    assert_eq!(
        f.ledger().record("req-1", approved.clone()).unwrap(),
        approved
    );
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(approved));
}

#[test]
fn a_later_report_moves_a_sent_outcome_forward_and_the_funds_follow() {
    // Guards against a withdrawal that fails on the rail after being sent staying captured forever.
    let mut f = Fixture::new();
    let (w, outcome) = sent_under(&f, "req-1");
    assert!(f.ledger().held(w.id()).unwrap().is_none());
    assert_eq!(
        f.ledger().captured(w.id()).unwrap().unwrap().amount,
        w.amount()
    );
    // Bumped to another reference: still captured.
    let bumped = outcome.bump(Reference::new("0xbump").unwrap()).unwrap();
    f.ledger().advance("req-1", &bumped).unwrap();
    assert!(matches!(last_event(&f), EventKind::Advanced { .. }));
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(bumped.clone()));
    assert!(f.ledger().captured(w.id()).unwrap().is_some());
    // The same report twice changes nothing.
    let before = f.ledger().last_seq();
    f.ledger().advance("req-1", &bumped).unwrap();
    assert_eq!(f.ledger().last_seq(), before);
    // Failed on the rail: the funds are given back.
    let failed = bumped
        .fail(Reason::new("dropped from the mempool").unwrap())
        .unwrap();
    f.ledger().advance("req-1", &failed).unwrap();
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(failed.clone()));
    assert!(f.ledger().captured(w.id()).unwrap().is_none());
    assert!(f.ledger().held(w.id()).unwrap().is_none());
    assert!(f.ledger().state().unwrap().captured_totals().is_empty());
    // Never back: a failed withdrawal is not confirmed after.
    let error = f
        .ledger()
        .advance("req-1", &bumped.confirm().unwrap())
        .unwrap_err();
    assert_eq!(
        refusal(&error),
        &Refusal::ForbiddenMove {
            key: "req-1".parse().unwrap(),
            from: WithdrawalState::Failed,
            to: WithdrawalState::Confirmed
        }
    );
    f.assert_same_after_reopen(&["req-1"], &[&w]);
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(failed));
}

#[test]
fn a_confirmation_keeps_the_funds_captured_and_nothing_follows_it() {
    // Guards against a confirmed withdrawal being moved on or its capture being undone.
    let f = Fixture::new();
    let (w, outcome) = sent_under(&f, "req-1");
    let confirmed = outcome.confirm().unwrap();
    f.ledger().advance("req-1", &confirmed).unwrap();
    assert_eq!(
        f.ledger().captured(w.id()).unwrap().unwrap().amount,
        w.amount()
    );
    let failed = outcome.fail(Reason::new("late").unwrap()).unwrap();
    let error = f.ledger().advance("req-1", &failed).unwrap_err();
    assert!(
        matches!(refusal(&error), Refusal::ForbiddenMove { .. }),
        "{error}"
    );
    // Only a key with an outcome moves on, with the same withdrawal.
    let other = f.withdrawal();
    let error = f
        .ledger()
        .advance("req-9", &sent(&other, "0x9"))
        .unwrap_err();
    assert!(
        matches!(refusal(&error), Refusal::NoOutcome { .. }),
        "{error}"
    );
    let error = f
        .ledger()
        .advance("req-1", &sent(&other, "0x9").confirm().unwrap())
        .unwrap_err();
    assert!(
        matches!(refusal(&error), Refusal::OutcomeMismatch { .. }),
        "{error}"
    );
}

#[test]
fn an_operator_corrects_an_outcome_recorded_in_error_and_replay_re_derives_it() {
    // Guards against a wrong reference being permanent, or a correction replay does not check.
    let mut f = Fixture::new();
    let (w, outcome) = sent_under(&f, "req-1");
    let right = sent(&w, "0xright");
    f.ledger()
        .correct(
            "req-1",
            &right,
            "the rail client logged the wrong hash",
            "ops-ana",
        )
        .unwrap();
    match last_event(&f) {
        EventKind::Corrected {
            key,
            old,
            new,
            note,
            by,
        } => {
            assert_eq!(key.as_str(), "req-1");
            assert_eq!((old, new), (outcome.clone(), right.clone()));
            assert_eq!(note.as_str(), "the rail client logged the wrong hash");
            assert_eq!(by.as_str(), "ops-ana");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(right.clone()));
    // The same correction again changes nothing.
    let before = f.ledger().last_seq();
    f.ledger()
        .correct("req-1", &right, "again", "ops-ana")
        .unwrap();
    assert_eq!(f.ledger().last_seq(), before);
    // A correction to a failure gives the funds back.
    let failed = w
        .approve()
        .unwrap()
        .fail(Reason::new("never broadcast").unwrap())
        .unwrap();
    f.ledger()
        .correct("req-1", &failed, "the rail says it never left", "ops-ana")
        .unwrap();
    assert!(f.ledger().captured(w.id()).unwrap().is_none());
    f.assert_same_after_reopen(&["req-1"], &[&w]);
    assert!(Payonce::verify_clean(&f));
}

#[test]
fn a_correction_keeps_the_guards_of_resolve() {
    // Guards against a correction changing the withdrawal, closing an unsettled outcome or a key still in flight.
    let f = Fixture::new();
    let (w, _) = sent_under(&f, "req-1");
    let other = f.withdrawal();
    let error = f
        .ledger()
        .correct("req-1", &sent(&other, "0x2"), "n", "ops")
        .unwrap_err();
    assert!(
        matches!(refusal(&error), Refusal::OutcomeMismatch { .. }),
        "{error}"
    );
    let error = f
        .ledger()
        .correct("req-1", &w.approve().unwrap(), "n", "ops")
        .unwrap_err();
    assert!(
        matches!(refusal(&error), Refusal::Unsettled { .. }),
        "{error}"
    );
    f.ledger()
        .submit("req-2", &other, Rail::default().timeout())
        .unwrap_err();
    let error = f
        .ledger()
        .correct("req-2", &sent(&other, "0x2"), "n", "ops")
        .unwrap_err();
    assert!(
        matches!(refusal(&error), Refusal::NoOutcome { .. }),
        "{error}"
    );
    let error = f
        .ledger()
        .correct("req-1", &sent(&w, "0x3"), "", "ops")
        .unwrap_err();
    assert!(
        matches!(error, LedgerError::Invalid(_)),
        "a note is required: {error}"
    );
}

/// Verifying the fixture's log is clean.
struct Payonce;

impl Payonce {
    fn verify_clean(f: &Fixture) -> bool {
        f.ledger().sync().unwrap();
        let report = payonce::verify_on(
            std::sync::Arc::new(f.storage.clone()),
            payonce::LogConfig::default(),
        )
        .unwrap();
        report.is_clean()
    }
}

#[test]
fn a_correction_naming_another_old_outcome_than_the_recorded_one_is_a_divergence() {
    // Guards against replay accepting a correction whose old outcome it does not re-derive.
    let f = Fixture::new();
    let (w, _) = sent_under(&f, "req-1");
    let storage = f.storage.clone();
    drop(f);
    let seq = crate::durability::forge(
        &storage,
        vec![EventKind::Corrected {
            key: "req-1".parse().unwrap(),
            old: sent(&w, "0xnot-what-was-recorded"),
            new: sent(&w, "0xright"),
            note: payonce_model::Note::new("n").unwrap(),
            by: payonce_model::Actor::new("ops").unwrap(),
        }],
    );
    let report =
        payonce::verify_on(std::sync::Arc::new(storage), payonce::LogConfig::default()).unwrap();
    assert_eq!(report.divergences.len(), 1);
    assert_eq!(report.divergences[0].seq, seq);
}

#[test]
fn an_event_is_re_derived_under_the_rules_of_the_schema_it_was_written_in() {
    // Guards against a log written before the settled-outcome rule failing to replay under it.
    let f = Fixture::new();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", &w, Rail::default().timeout())
        .unwrap_err();
    let storage = f.storage.clone();
    drop(f);
    let resolve = |schema| {
        let copy = payonce_log::MemStorage::new();
        for name in payonce_log::Storage::list(&storage).unwrap() {
            copy.put_file(&name, &storage.file(&name).unwrap());
        }
        let (log, _) = payonce_log::Log::open(
            std::sync::Arc::new(copy.clone()),
            payonce::LogConfig::default(),
        )
        .unwrap();
        let event = payonce::Event {
            schema,
            seq: log.last_seq() + 1,
            at: payonce::Timestamp::default(),
            kind: EventKind::Resolved {
                key: "req-1".parse().unwrap(),
                outcome: w.approve().unwrap(),
                note: payonce_model::Note::new("as it was claimed").unwrap(),
                by: payonce_model::Actor::new("ops").unwrap(),
            },
        };
        log.append_durable(&event.encode().unwrap()).unwrap();
        drop(log);
        payonce::verify_on(std::sync::Arc::new(copy), payonce::LogConfig::default()).unwrap()
    };
    // Schema 2 allowed it; schema 3 refuses it.
    assert!(resolve(2).is_clean());
    let report = resolve(payonce::SCHEMA_VERSION);
    assert_eq!(report.divergences.len(), 1);
    assert!(
        matches!(
            report.divergences[0].recomputed,
            Err(Refusal::Unsettled { .. })
        ),
        "{:?}",
        report.divergences[0]
    );
}
