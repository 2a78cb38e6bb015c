//! The seed's scenarios, each as a named test, each checked again after the
//! ledger is closed and reopened; each runs on the file log and on
//! PostgreSQL (`file::` and `postgres::`), the same body.

use payonce::{HolderState, Refusal, RefusalKind, SubmitError};
use payonce_model::{FingerprintField, WithdrawalState};

use crate::{Fixture, Rail, sent};

/// Withdrawals that did not come from the ledger under test.
mod payonce_tests_fixture {
    use payonce_model::{Actor, Amount, Currency, Destination, WithdrawalId, WithdrawalRequest};

    pub fn foreign(id: &str) -> WithdrawalRequest {
        WithdrawalRequest::new(
            WithdrawalId::new(id).unwrap(),
            Amount::parse("10").unwrap(),
            Currency::new("EUR").unwrap(),
            Destination::new("DE89370400440532013000").unwrap(),
            Actor::new("client").unwrap(),
        )
    }
}

crate::on_both_backends! {
fn the_first_submission_sends() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();

    let outcome = f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();

    assert_eq!(rail.sends(&w), 1);
    assert_eq!(outcome.state(), WithdrawalState::Sent);
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(outcome.clone()));
    assert_eq!(f.ledger().claimed_by(w.id()).unwrap().unwrap().as_str(), "req-1");
    assert_eq!(
        f.ledger().held(w.id()).unwrap(),
        None,
        "a sent withdrawal's hold is captured"
    );
    f.assert_same_after_reopen(&["req-1"], &[&w]);
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(outcome));
}

fn a_retry_replays_the_first_outcome() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    let first = f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();

    let second = f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();

    assert_eq!(second, first);
    assert_eq!(rail.sends(&w), 1);
    f.assert_same_after_reopen(&["req-1"], &[&w]);
    assert_eq!(
        f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap(),
        first
    );
    assert_eq!(rail.sends(&w), 1);
}

fn another_key_for_another_withdrawal_sends() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let (w1, w2) = (f.withdrawal(), f.withdrawal());
    assert_ne!(w1.id(), w2.id(), "minted ids are unique");

    f.ledger().submit("req-1", w1.clone(), rail.ok()).unwrap();
    f.ledger().submit("req-2", w2.clone(), rail.ok()).unwrap();

    assert_eq!((rail.sends(&w1), rail.sends(&w2)), (1, 1));
    assert_eq!(f.ledger().claimed_by(w2.id()).unwrap().unwrap().as_str(), "req-2");
    f.assert_same_after_reopen(&["req-1", "req-2"], &[&w1, &w2]);
}

fn a_key_is_recognised_through_surrounding_space() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    let first = f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();

    let again = f
        .ledger()
        .submit("  req-1\t", w.clone(), rail.ok())
        .unwrap();

    assert_eq!(again, first);
    assert_eq!(rail.sends(&w), 1);
    assert_eq!(f.ledger().outcome(" req-1 ").unwrap(), Some(first));
    f.assert_same_after_reopen(&["req-1", " req-1 "], &[&w]);
}

fn reusing_a_key_for_another_withdrawal_is_a_conflict_naming_the_differing_field() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let (w1, w2) = (f.withdrawal(), f.withdrawal_of("26.00"));
    f.ledger().submit("req-1", w1.clone(), rail.ok()).unwrap();

    let error = f
        .ledger()
        .submit("req-1", w2.clone(), rail.ok())
        .unwrap_err();

    let Some(Refusal::KeyReused { key, differences }) = error.refusal() else {
        panic!("{error}")
    };
    assert_eq!(key.as_str(), "req-1");
    let fields: Vec<_> = differences.iter().map(|d| d.field).collect();
    assert_eq!(fields, [FingerprintField::Id, FingerprintField::Amount]);
    assert_eq!(
        (differences[1].ours.as_str(), differences[1].theirs.as_str()),
        ("25", "26")
    );
    assert!(
        error.to_string().contains("amount differs: 25 vs 26"),
        "{error}"
    );
    assert_eq!(rail.sends(&w2), 0);
    assert_eq!(
        f.ledger().claimed_by(w2.id()).unwrap(),
        None,
        "the refused request left no trace"
    );
    f.assert_same_after_reopen(&["req-1"], &[&w1, &w2]);
}

fn without_a_send_the_request_is_recorded_as_it_stands() {
    let mut f = Fixture::new();
    let w = f.withdrawal();

    let recorded = f.ledger().record("req-1", w.clone()).unwrap();

    assert_eq!(recorded, w);
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(w.clone()));
    assert_eq!(f.ledger().claimed_by(w.id()).unwrap().unwrap().as_str(), "req-1");
    assert!(
        f.ledger().held(w.id()).unwrap().is_some(),
        "a request not yet sent keeps its funds held"
    );
    assert_eq!(
        f.ledger().record("req-1", w.clone()).unwrap(),
        w,
        "a repeat replays"
    );
    f.assert_same_after_reopen(&["req-1"], &[&w]);
}

fn a_send_that_fails_keeps_the_key_claimed() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();

    let error = f
        .ledger()
        .submit("req-1", w.clone(), rail.timeout())
        .unwrap_err();
    assert!(matches!(error, SubmitError::Send(_)), "{error}");

    for _ in 0..2 {
        let retry = f
            .ledger()
            .submit("req-1", w.clone(), rail.ok())
            .unwrap_err();
        assert_eq!(retry.refusal_kind(), Some(RefusalKind::InFlight), "{retry}");
        assert_eq!(rail.sends(&w), 1, "the retry did not send");
        assert_eq!(f.ledger().outcome("req-1").unwrap(), None);
        let in_flight = f.ledger().in_flight();
        assert_eq!(in_flight.len(), 1);
        assert_eq!(in_flight[0].key.as_str(), "req-1");
        assert_eq!(
            in_flight[0].last_error.as_ref().unwrap().as_str(),
            "rail timed out"
        );
        assert!(
            f.ledger().held(w.id()).unwrap().is_some(),
            "an unknown outcome keeps the hold"
        );
        f.assert_same_after_reopen(&["req-1"], &[&w]);
    }
}

fn a_claimed_key_closes_once_the_truth_is_known() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), rail.timeout())
        .unwrap_err();

    let found = sent(&w, "0xdeadbeef");
    f.ledger()
        .resolve("req-1", found.clone(), "found on chain", "ops-ana")
        .unwrap();

    assert_eq!(
        f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap(),
        found
    );
    assert_eq!(rail.sends(&w), 1);
    assert!(f.ledger().in_flight().is_empty());
    assert_eq!(f.ledger().held(w.id()).unwrap(), None, "the hold is captured");
    f.ledger()
        .resolve("req-1", found.clone(), "again", "ops-ana")
        .unwrap();
    f.assert_same_after_reopen(&["req-1"], &[&w]);
    assert_eq!(
        f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap(),
        found
    );
}

fn resolving_with_another_outcome_is_a_conflict() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    let outcome = f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();

    let error = f
        .ledger()
        .resolve("req-1", sent(&w, "0xother"), "webhook", "ops")
        .unwrap_err();

    assert!(matches!(
        error.refusal(),
        Some(Refusal::OutcomeDiffers {
            recorded_state: WithdrawalState::Sent,
            ..
        })
    ));
    assert_eq!(error.refusal_kind(), Some(RefusalKind::Conflict));
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(outcome));
    f.assert_same_after_reopen(&["req-1"], &[&w]);
}

fn releasing_a_claimed_key_allows_a_retry() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), rail.timeout())
        .unwrap_err();

    f.ledger()
        .release("req-1", "rail shows nothing", "ops-ana")
        .unwrap();

    assert_eq!(f.ledger().claimed_by(w.id()).unwrap(), None);
    assert_eq!(f.ledger().held(w.id()).unwrap(), None);
    f.assert_same_after_reopen(&["req-1"], &[&w]);
    let outcome = f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();
    assert_eq!(outcome.state(), WithdrawalState::Sent);
    assert_eq!(rail.sends(&w), 2);
    f.assert_same_after_reopen(&["req-1"], &[&w]);
}

fn a_released_withdrawal_can_be_claimed_by_another_key() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), rail.timeout())
        .unwrap_err();
    f.ledger()
        .release("req-1", "nothing on chain", "ops")
        .unwrap();

    f.ledger().submit("req-2", w.clone(), rail.ok()).unwrap();

    assert_eq!(f.ledger().claimed_by(w.id()).unwrap().unwrap().as_str(), "req-2");
    assert_eq!(f.ledger().outcome("req-1").unwrap(), None);
    f.assert_same_after_reopen(&["req-1", "req-2"], &[&w]);
}

fn releasing_a_key_that_produced_an_outcome_is_refused() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    let outcome = f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();

    let error = f.ledger().release("req-1", "oops", "ops").unwrap_err();

    assert!(matches!(
        error.refusal(),
        Some(Refusal::HasOutcome {
            state: WithdrawalState::Sent,
            ..
        })
    ));
    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(outcome));
    assert_eq!(f.ledger().claimed_by(w.id()).unwrap().unwrap().as_str(), "req-1");
    f.assert_same_after_reopen(&["req-1"], &[&w]);
}

fn releasing_an_unknown_key_is_a_no_op() {
    let mut f = Fixture::new();
    let before = f.ledger().state().unwrap().last_seq();
    f.ledger().release("never-seen", "cleanup", "ops").unwrap();
    assert_eq!(f.ledger().state().unwrap().last_seq(), before, "nothing was written");
    f.assert_same_after_reopen(&["never-seen"], &[]);
}

fn a_second_key_for_a_claimed_withdrawal_is_a_conflict_naming_the_holder() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger().submit("req-1", w.clone(), rail.ok()).unwrap();

    let error = f
        .ledger()
        .submit("req-2", w.clone(), rail.ok())
        .unwrap_err();

    let Some(Refusal::Claimed {
        key,
        holder,
        holder_state,
        ..
    }) = error.refusal()
    else {
        panic!("{error}")
    };
    assert_eq!((key.as_str(), holder.as_str()), ("req-2", "req-1"));
    assert!(matches!(
        holder_state,
        HolderState::Decided {
            state: WithdrawalState::Sent,
            ..
        }
    ));
    assert!(error.to_string().contains("req-1"), "{error}");
    assert_eq!(rail.sends(&w), 1);
    assert_eq!(f.ledger().outcome("req-2").unwrap(), None);
    f.assert_same_after_reopen(&["req-1", "req-2"], &[&w]);
    assert!(f.ledger().submit("req-2", w.clone(), rail.ok()).is_err());
    assert_eq!(rail.sends(&w), 1);
}

fn a_second_key_while_the_first_is_in_flight_names_the_holder_and_since_when() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), rail.timeout())
        .unwrap_err();
    f.tick();

    let error = f
        .ledger()
        .submit("req-2", w.clone(), rail.ok())
        .unwrap_err();

    let Some(Refusal::Claimed {
        holder,
        holder_state: HolderState::InFlight { since, .. },
        ..
    }) = error.refusal()
    else {
        panic!("{error}")
    };
    assert_eq!(holder.as_str(), "req-1");
    assert_eq!(*since, crate::START);
    assert!(
        error
            .to_string()
            .contains("in flight since 2026-11-30T12:00:00Z"),
        "{error}"
    );
    f.assert_same_after_reopen(&["req-1", "req-2"], &[&w]);
}

fn a_callback_under_a_fresh_key_cannot_resolve_a_withdrawal_another_key_holds() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), rail.timeout())
        .unwrap_err();

    let error = f
        .ledger()
        .resolve(
            "webhook-7",
            sent(&w, "0xfeed"),
            "provider callback",
            "webhook",
        )
        .unwrap_err();

    assert_eq!(
        error
            .refusal()
            .and_then(Refusal::holder)
            .map(|k| k.as_str()),
        Some("req-1")
    );
    assert_eq!(f.ledger().outcome("webhook-7").unwrap(), None);
    assert_eq!(
        f.ledger().outcome("req-1").unwrap(),
        None,
        "the holder is still in flight"
    );
    f.assert_same_after_reopen(&["req-1", "webhook-7"], &[&w]);
}

fn a_resolve_under_a_fresh_key_claims_an_unclaimed_withdrawal() {
    let mut f = Fixture::new();
    let w = f.withdrawal();
    let found = sent(&w, "0xfound");

    f.ledger()
        .resolve("ops-1", found.clone(), "sent by hand", "ops")
        .unwrap();

    assert_eq!(f.ledger().outcome("ops-1").unwrap(), Some(found));
    assert_eq!(f.ledger().claimed_by(w.id()).unwrap().unwrap().as_str(), "ops-1");
    assert_eq!(f.ledger().held(w.id()).unwrap(), None, "captured at once");
    f.assert_same_after_reopen(&["ops-1"], &[&w]);
}

fn a_late_release_does_not_evict_a_claim_that_has_moved_to_another_key() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    f.ledger()
        .submit("req-1", w.clone(), rail.timeout())
        .unwrap_err();
    f.ledger().release("req-1", "nothing sent", "ops").unwrap();
    f.ledger().submit("req-2", w.clone(), rail.ok()).unwrap();

    f.ledger()
        .release("req-1", "duplicate release from the queue", "ops")
        .unwrap();

    assert_eq!(f.ledger().claimed_by(w.id()).unwrap().unwrap().as_str(), "req-2");
    assert!(f.ledger().outcome("req-2").unwrap().is_some());
    f.assert_same_after_reopen(&["req-1", "req-2"], &[&w]);
}

fn a_rail_refusal_releases_the_hold_and_keeps_the_key_claimed() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();

    let error = f
        .ledger()
        .submit("req-1", w.clone(), rail.refuse())
        .unwrap_err();

    let SubmitError::Rejected {
        key,
        withdrawal,
        reason,
    } = &error
    else {
        panic!("{error}")
    };
    assert_eq!((key.as_str(), withdrawal), ("req-1", w.id()));
    assert_eq!(reason.as_str(), "insufficient hot wallet balance");
    assert_eq!(f.ledger().held(w.id()).unwrap(), None, "the funds are given back");
    assert!(f.ledger().held_totals().is_empty());
    assert_eq!(f.ledger().claimed_by(w.id()).unwrap().unwrap().as_str(), "req-1");
    let retry = f
        .ledger()
        .submit("req-1", w.clone(), rail.ok())
        .unwrap_err();
    assert_eq!(retry.refusal_kind(), Some(RefusalKind::InFlight));
    assert_eq!(rail.sends(&w), 1);
    let in_flight = f.ledger().in_flight();
    assert!(!in_flight[0].held);
    assert!(
        in_flight[0]
            .last_error
            .as_ref()
            .unwrap()
            .as_str()
            .contains("insufficient hot wallet balance")
    );
    f.assert_same_after_reopen(&["req-1"], &[&w]);
}

fn a_panicking_send_keeps_the_key_claimed() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = f
            .ledger()
            .submit("req-1", w.clone(), |_| -> Result<_, payonce::SendFailure> {
                panic!("rail client bug")
            });
    }));

    assert!(panicked.is_err(), "the panic propagates");
    let retry = f
        .ledger()
        .submit("req-1", w.clone(), rail.ok())
        .unwrap_err();
    assert_eq!(retry.refusal_kind(), Some(RefusalKind::InFlight));
    assert_eq!(rail.sends(&w), 0);
    assert_eq!(f.ledger().outcome("req-1").unwrap(), None);
    let in_flight = f.ledger().in_flight();
    assert!(
        in_flight[0]
            .last_error
            .as_ref()
            .unwrap()
            .as_str()
            .contains("rail client bug")
    );
    assert!(f.ledger().held(w.id()).unwrap().is_some());
    f.ledger()
        .release("req-1", "checked: never reached the rail", "ops")
        .unwrap();
    f.assert_same_after_reopen(&["req-1"], &[&w]);
}

fn release_and_resolve_are_refused_while_the_keys_send_is_running() {
    let f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    let ledger = f.ledger().clone();

    let outcome = f
        .ledger()
        .submit("req-1", w.clone(), |request| {
            let release = ledger.release("req-1", "looks stuck", "ops").unwrap_err();
            let resolve = ledger
                .resolve("req-1", sent(request, "0xguess"), "guess", "ops")
                .unwrap_err();
            for error in [release, resolve] {
                assert!(
                    matches!(
                        error.refusal(),
                        Some(Refusal::InFlight {
                            send_running: true,
                            ..
                        })
                    ),
                    "{error}"
                );
                assert!(error.to_string().contains("send in progress"), "{error}");
            }
            rail.ok()(request)
        })
        .unwrap();

    assert_eq!(f.ledger().outcome("req-1").unwrap(), Some(outcome));
    assert_eq!(rail.sends(&w), 1);
}

fn an_id_the_ledger_did_not_mint_is_refused_by_default() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let foreign = crate::scenarios::payonce_tests_fixture::foreign("w-from-client");

    let error = f
        .ledger()
        .submit("req-1", foreign.clone(), rail.ok())
        .unwrap_err();
    assert!(
        matches!(error.refusal(), Some(Refusal::UnknownWithdrawal { withdrawal }) if withdrawal == foreign.id())
    );
    assert_eq!(error.refusal_kind(), Some(RefusalKind::UnknownWithdrawal));
    assert!(f.ledger().record("req-1", foreign.clone()).is_err());
    assert!(
        f.ledger()
            .resolve("req-1", foreign.clone(), "n", "ops")
            .is_err()
    );
    assert_eq!(rail.total(), 0);
    f.assert_same_after_reopen(&["req-1"], &[&foreign]);
}

fn ids_minted_elsewhere_are_accepted_when_configured() {
    let mut f = Fixture::with(|config| config.accept_foreign_ids = true);
    let rail = Rail::default();
    let foreign = crate::scenarios::payonce_tests_fixture::foreign("w-from-client");

    f.ledger()
        .submit("req-1", foreign.clone(), rail.ok())
        .unwrap();

    assert_eq!(rail.sends(&foreign), 1);
    f.assert_same_after_reopen(&["req-1"], &[&foreign]);
    // The switch is recorded in the log: a ledger reopened without it still
    // replays the old decisions, and refuses new foreign ids. A shared
    // ledger's policy is the one recorded at its creation: a worker with
    // another refuses to start.
    if f.is_shared() {
        f.config.accept_foreign_ids = false;
        let error = f.try_reopen().unwrap_err();
        assert!(matches!(error, payonce::LedgerError::PolicyMismatch { .. }), "{error}");
        return;
    }
    f.config.accept_foreign_ids = false;
    f.reopen();
    assert!(f.ledger().outcome("req-1").unwrap().is_some());
    let other = crate::scenarios::payonce_tests_fixture::foreign("w-other");
    assert!(f.ledger().submit("req-2", other, rail.ok()).is_err());
}

fn a_minted_id_with_other_fields_is_refused() {
    let f = Fixture::new();
    let rail = Rail::default();
    let w = f.withdrawal();
    let mut json = serde_json::to_value(&w).unwrap();
    json["amount"] = "2500".into();
    let altered: payonce_model::WithdrawalRequest = serde_json::from_value(json).unwrap();

    let error = f.ledger().submit("req-1", altered, rail.ok()).unwrap_err();

    assert!(
        matches!(error.refusal(), Some(Refusal::NotAsCreated { .. })),
        "{error}"
    );
    assert!(
        error.to_string().contains("amount differs: 25 vs 2500"),
        "{error}"
    );
    assert_eq!(rail.total(), 0);
}

fn a_failed_outcome_releases_the_hold_and_a_sent_one_captures_it() {
    let mut f = Fixture::new();
    let rail = Rail::default();
    let (failed, captured) = (f.withdrawal(), f.withdrawal_of("7"));
    f.ledger()
        .submit("req-1", failed.clone(), rail.timeout())
        .unwrap_err();
    f.ledger()
        .submit("req-2", captured.clone(), rail.timeout())
        .unwrap_err();
    assert_eq!(
        f.ledger()
            .held_totals()
            .values()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["32"]
    );

    let gone = failed
        .approve()
        .unwrap()
        .fail(payonce_model::Reason::new("node rejected the tx").unwrap())
        .unwrap();
    f.ledger()
        .resolve("req-1", gone, "the node says it never broadcast", "ops")
        .unwrap();
    assert_eq!(
        f.ledger().held(failed.id()).unwrap(),
        None,
        "a failed outcome releases the hold"
    );
    assert_eq!(
        f.ledger()
            .held_totals()
            .values()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["7"]
    );

    f.ledger()
        .resolve("req-2", sent(&captured, "0x7"), "on chain", "ops")
        .unwrap();
    assert_eq!(
        f.ledger().held(captured.id()).unwrap(),
        None,
        "a sent outcome captures the hold"
    );
    assert!(f.ledger().held_totals().is_empty());
    f.assert_same_after_reopen(&["req-1", "req-2"], &[&failed, &captured]);
}

fn after_a_crash_a_key_whose_send_was_running_can_be_closed() {
    let mut f = Fixture::new();
    let w = f.withdrawal();
    let payonce::Claim::Granted(ticket) = f.ledger().claim("req-1", w.clone()).unwrap() else {
        panic!("a new key is granted")
    };
    let refused = f.ledger().release("req-1", "stuck", "ops").unwrap_err();
    assert!(matches!(
        refused.refusal(),
        Some(Refusal::InFlight {
            send_running: true,
            ..
        })
    ));

    // The process dies with the send running: no completion, no drop.
    f.crash(ticket);
    let reopened = f.ledger();

    let in_flight = reopened.in_flight();
    assert_eq!(in_flight.len(), 1);
    assert!(!in_flight[0].send_running, "no send survives the process");
    reopened
        .release("req-1", "the rail never saw it", "ops")
        .unwrap();
    assert_eq!(reopened.claimed_by(w.id()).unwrap(), None);
}

fn a_dropped_ticket_leaves_the_key_in_flight_and_says_so() {
    let mut f = Fixture::new();
    let w = f.withdrawal();
    let claim = f.ledger().claim("req-1", w.clone()).unwrap();
    assert!(matches!(claim, payonce::Claim::Granted(_)));

    drop(claim);

    let in_flight = f.ledger().in_flight();
    assert_eq!(in_flight.len(), 1);
    assert!(!in_flight[0].send_running);
    assert!(
        in_flight[0]
            .last_error
            .as_ref()
            .unwrap()
            .as_str()
            .contains("dropped without being completed")
    );
    assert!(f.ledger().held(w.id()).unwrap().is_some());
    let retry = f
        .ledger()
        .submit("req-1", w.clone(), Rail::default().ok())
        .unwrap_err();
    assert_eq!(retry.refusal_kind(), Some(RefusalKind::InFlight));
    f.assert_same_after_reopen(&["req-1"], &[&w]);
}

fn the_two_phase_api_records_what_the_send_did() {
    let f = Fixture::new();
    let w = f.withdrawal();
    let payonce::Claim::Granted(ticket) = f.ledger().claim("req-1", w.clone()).unwrap() else {
        panic!()
    };
    assert_eq!(ticket.key().as_str(), "req-1");
    let outcome = sent(ticket.request(), "0xasync");

    let recorded = f.ledger().complete(ticket, Ok(outcome.clone())).unwrap();

    assert_eq!(recorded, outcome);
    let replay = f.ledger().claim("req-1", w).unwrap();
    assert!(matches!(replay, payonce::Claim::Replayed(o) if o == outcome));
}

fn a_send_that_returns_another_withdrawal_is_a_conflict_and_the_key_stays_in_flight() {
    let mut f = Fixture::new();
    let (w, other) = (f.withdrawal(), f.withdrawal_of("99"));

    let error = f
        .ledger()
        .submit("req-1", w.clone(), |_| {
            Ok::<_, payonce::SendFailure>(sent(&other, "0x9"))
        })
        .unwrap_err();

    let Some(Refusal::OutcomeMismatch { key, differences }) = error.refusal() else {
        panic!("{error}")
    };
    assert_eq!(key.as_str(), "req-1");
    assert!(
        differences
            .iter()
            .any(|d| d.field == FingerprintField::Amount)
    );
    assert_eq!(f.ledger().outcome("req-1").unwrap(), None);
    assert_eq!(f.ledger().in_flight().len(), 1);
    assert!(f.ledger().held(w.id()).unwrap().is_some());
    f.assert_same_after_reopen(&["req-1"], &[&w, &other]);
}

fn held_totals_print_the_same_however_they_were_reached() {
    let f = Fixture::new();
    let rail = Rail::default();
    let (a, b) = (f.withdrawal_of("10"), f.withdrawal_of("7.5"));
    f.ledger()
        .submit("req-a", a.clone(), rail.timeout())
        .unwrap_err();
    f.ledger()
        .submit("req-b", b.clone(), rail.refuse())
        .unwrap_err();

    let totals = f.ledger().held_totals();

    let shown: Vec<_> = totals
        .iter()
        .map(|(currency, total)| format!("{total} {currency}"))
        .collect();
    assert_eq!(shown, ["10 USDC"], "10 + 7.5 - 7.5 is shown as 10");
}

fn a_hold_that_would_pass_the_most_the_ledger_can_total_is_refused() {
    // Guards against the sum of holds overflowing inside `apply`, after the claim went to the log.
    let mut f = Fixture::new();
    let rail = Rail::default();
    let largest = "9999999999999999999999999999";
    let withdrawals: Vec<_> = (0..8).map(|_| f.withdrawal_of(largest)).collect();
    // Seven fit under HELD_TOTAL_MAX (about 7.9 × 10^28); an eighth would not.
    // Each send times out: the keys stay in flight and the funds held.
    for (n, withdrawal) in withdrawals[..7].iter().enumerate() {
        f.ledger()
            .submit(&format!("req-{n}"), withdrawal.clone(), rail.timeout())
            .unwrap_err();
    }
    let last = &withdrawals[7];
    let error = f.ledger().record("req-7", last.clone()).unwrap_err();
    assert!(
        matches!(
            error.refusal(),
            Some(Refusal::HeldTotalTooLarge { key, withdrawal, currency, amount })
                if key.as_str() == "req-7"
                    && withdrawal == last.id()
                    && currency == last.currency()
                    && *amount == last.amount()
        ),
        "{error}"
    );
    assert_eq!(error.refusal_kind(), Some(RefusalKind::Limit));
    let error = f
        .ledger()
        .submit("req-8", last.clone(), rail.ok())
        .unwrap_err();
    assert_eq!(error.refusal_kind(), Some(RefusalKind::Limit), "{error}");
    assert_eq!(rail.sends(last), 0);
    assert_eq!(f.ledger().outcome("req-7").unwrap(), None);
    assert!(f.ledger().held(last.id()).unwrap().is_none());
    assert_eq!(f.ledger().claimed_by(last.id()).unwrap(), None);

    // Once a hold ends there is room again.
    f.ledger()
        .release("req-0", "the rail has no such transfer", "ops")
        .unwrap();
    f.ledger().record("req-7", last.clone()).unwrap();
    assert!(f.ledger().held(last.id()).unwrap().is_some());
    let keys: Vec<String> = (0..9).map(|n| format!("req-{n}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let withdrawals: Vec<_> = withdrawals.iter().collect();
    f.assert_same_after_reopen(&keys, &withdrawals);
}
}
