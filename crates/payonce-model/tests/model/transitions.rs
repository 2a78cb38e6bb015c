//! The state machine: each rule of the withdrawal's life as a named test.

use payonce_model::{Transition, TransitionRefusal, WithdrawalState as S};

use crate::{make, reason, reference, sent};

#[test]
fn a_new_request_starts_as_requested() {
    let request = make("w-1");
    assert_eq!(request.state(), S::Requested);
    assert_eq!(request.reference(), None);
    assert_eq!(request.reason(), None);
    assert!(request.replaced().is_empty());
}

#[test]
fn the_happy_path_reaches_confirmed_with_its_reference() {
    let confirmed = make("w-1")
        .approve()
        .and_then(|w| w.start_sending())
        .and_then(|w| w.mark_sent(reference("0xdeadbeef")))
        .and_then(|w| w.confirm())
        .unwrap();
    assert_eq!(confirmed.state(), S::Confirmed);
    assert_eq!(confirmed.reference(), Some(&reference("0xdeadbeef")));
    assert!(confirmed.state().is_terminal());
}

#[test]
fn transitions_leave_the_original_untouched() {
    let requested = make("w-1");
    let before = requested.clone();
    let approved = requested.approve().unwrap();
    assert_eq!(requested, before);
    assert_eq!(approved.state(), S::Approved);
    let _sent = approved
        .start_sending()
        .unwrap()
        .mark_sent(reference("0xa"))
        .unwrap();
    assert_eq!(approved.state(), S::Approved);
    assert_eq!(approved.reference(), None);
}

#[test]
fn repeated_callbacks_are_free() {
    let requested = make("w-1");
    let approved = requested.approve().unwrap();
    assert_eq!(approved.approve().unwrap(), approved);
    let sending = approved.start_sending().unwrap();
    assert_eq!(sending.start_sending().unwrap(), sending);
    let sent = sending.mark_sent(reference("0xa")).unwrap();
    assert_eq!(sent.mark_sent(reference("0xa")).unwrap(), sent);
    let confirmed = sent.confirm().unwrap();
    assert_eq!(confirmed.confirm().unwrap(), confirmed);
    let rejected = requested.reject(reason("limits")).unwrap();
    assert_eq!(rejected.reject(reason("limits")).unwrap(), rejected);
    let failed = sent.fail(reason("reorg")).unwrap();
    assert_eq!(failed.fail(reason("reorg")).unwrap(), failed);
}

#[test]
fn a_second_reference_for_the_same_send_is_a_conflict() {
    let sent = sent("w-1", "0xa");
    let error = sent.mark_sent(reference("0xb")).unwrap_err();
    assert_eq!(error.id.as_str(), "w-1");
    assert_eq!(error.current, S::Sent);
    assert_eq!(error.requested, Transition::MarkSent);
    assert_eq!(
        error.refusal,
        TransitionRefusal::DifferentReference {
            current: reference("0xa"),
            requested: reference("0xb")
        }
    );
    assert!(error.to_string().contains("w-1"), "{error}");
}

#[test]
fn a_second_reason_for_the_same_rejection_is_a_conflict() {
    let rejected = make("w-1").reject(reason("limits")).unwrap();
    let error = rejected.reject(reason("fraud")).unwrap_err();
    assert_eq!(
        error.refusal,
        TransitionRefusal::DifferentReason {
            current: reason("limits"),
            requested: reason("fraud")
        }
    );
}

#[test]
fn rejection_only_until_sending_starts() {
    assert_eq!(
        make("w-1").reject(reason("r")).unwrap().state(),
        S::Rejected
    );
    let approved = make("w-1").approve().unwrap();
    assert_eq!(approved.reject(reason("r")).unwrap().state(), S::Rejected);

    let sending = approved.start_sending().unwrap();
    let error = sending.reject(reason("r")).unwrap_err();
    assert_eq!(
        (error.current, error.requested),
        (S::Sending, Transition::Reject)
    );
    assert_eq!(error.refusal, TransitionRefusal::NotAllowed);
    let error = sent("w-1", "0xa").reject(reason("r")).unwrap_err();
    assert_eq!(error.current, S::Sent);
}

#[test]
fn a_send_can_fail() {
    let approved = make("w-1").approve().unwrap();
    let sending = approved.start_sending().unwrap();
    let sent = sending.mark_sent(reference("0xa")).unwrap();
    for from in [&approved, &sending, &sent] {
        let failed = from.fail(reason("node down")).unwrap();
        assert_eq!(failed.state(), S::Failed);
        assert_eq!(failed.reason(), Some(&reason("node down")));
        assert_eq!(failed.reference(), from.reference());
    }
    let error = make("w-1").fail(reason("r")).unwrap_err();
    assert_eq!(
        (error.current, error.requested),
        (S::Requested, Transition::Fail)
    );
}

#[test]
fn terminal_states_do_not_move() {
    let confirmed = sent("w-1", "0xa").confirm().unwrap();
    let rejected = make("w-1").reject(reason("r")).unwrap();
    let failed = sent("w-1", "0xa").fail(reason("r")).unwrap();
    for terminal in [&confirmed, &rejected, &failed] {
        assert!(terminal.state().is_terminal());
        let moves = [
            (terminal.approve(), Transition::Approve),
            (terminal.start_sending(), Transition::StartSending),
            (terminal.mark_sent(reference("0xz")), Transition::MarkSent),
            (terminal.bump(reference("0xz")), Transition::Bump),
        ];
        for (result, transition) in moves {
            let error = result.unwrap_err();
            assert_eq!(
                (error.current, error.requested),
                (terminal.state(), transition)
            );
        }
    }
    assert!(confirmed.fail(reason("r")).is_err());
    assert!(confirmed.reject(reason("r")).is_err());
    assert!(rejected.confirm().is_err());
    assert!(rejected.fail(reason("r")).is_err());
    assert!(failed.confirm().is_err());
    assert!(failed.reject(reason("r")).is_err());
}

#[test]
fn skipping_a_step_is_refused() {
    let requested = make("w-1");
    let error = requested.start_sending().unwrap_err();
    assert_eq!(error.id.as_str(), "w-1");
    assert_eq!(error.current, S::Requested);
    assert_eq!(error.requested.target(), S::Sending);
    assert_eq!(error.refusal, TransitionRefusal::NotAllowed);
    assert!(requested.mark_sent(reference("0xa")).is_err());
    assert!(requested.confirm().is_err());
    assert!(
        requested
            .approve()
            .unwrap()
            .mark_sent(reference("0xa"))
            .is_err()
    );
    assert!(requested.approve().unwrap().confirm().is_err());
    let message = requested.confirm().unwrap_err().to_string();
    assert!(
        message.contains("requested") && message.contains("confirmed"),
        "{message}"
    );
}

#[test]
fn a_bump_records_the_replaced_reference_and_a_replaced_one_cannot_come_back() {
    let sent = sent("w-1", "0xa");
    let bumped = sent.bump(reference("0xb")).unwrap();
    assert_eq!(bumped.reference(), Some(&reference("0xb")));
    assert_eq!(bumped.replaced(), [reference("0xa")]);
    assert_eq!(bumped.state(), S::Sent);

    assert_eq!(
        bumped.bump(reference("0xb")).unwrap(),
        bumped,
        "bumping to the current reference"
    );
    let error = bumped.bump(reference("0xa")).unwrap_err();
    assert_eq!(
        error.refusal,
        TransitionRefusal::ReplacedReference(reference("0xa"))
    );
    let error = bumped.mark_sent(reference("0xa")).unwrap_err();
    assert_eq!(
        error.refusal,
        TransitionRefusal::ReplacedReference(reference("0xa"))
    );

    let twice = bumped.bump(reference("0xc")).unwrap();
    assert_eq!(twice.replaced(), [reference("0xa"), reference("0xb")]);
    assert_eq!(twice.confirm().unwrap().replaced(), twice.replaced());
}

#[test]
fn only_a_sent_withdrawal_can_be_bumped() {
    let error = make("w-1")
        .approve()
        .unwrap()
        .start_sending()
        .unwrap()
        .bump(reference("0xb"))
        .unwrap_err();
    assert_eq!(
        (error.current, error.requested),
        (S::Sending, Transition::Bump)
    );
}

#[test]
fn bumps_are_bounded() {
    let mut withdrawal = sent("w-1", "0x0");
    for n in 1..=payonce_model::REPLACED_MAX {
        withdrawal = withdrawal.bump(reference(&format!("0x{n}"))).unwrap();
    }
    let error = withdrawal.bump(reference("0xfinal")).unwrap_err();
    assert_eq!(error.refusal, TransitionRefusal::TooManyBumps);
}

#[test]
fn no_transition_changes_the_fingerprint() {
    let request = make("w-1");
    let bumped = sent("w-1", "0xa").bump(reference("0xb")).unwrap();
    assert_eq!(bumped.fingerprint(), request.fingerprint());
    assert_eq!(
        bumped.confirm().unwrap().fingerprint(),
        request.fingerprint()
    );
}
