//! Settled pairs set apart: every answer stays, and the events that name
//! a pair (a later report of the rail, a correction, a refusal) bring it
//! back and change it as they change a whole state.

use payonce_model::{Note, Reason};
use proptest::prelude::*;

use super::tests::{key, run, sent, withdrawal};
use super::tests_key_parts::{Fate, claimed_as};
use super::*;
use crate::command::Command;
use crate::decide::decide;
use crate::event::{Event, SCHEMA_VERSION};
use crate::refusal::Refusal;
use crate::snapshot_format::error::SnapshotError;

/// Applies the event `kind` makes to a state with pairs set apart, as the
/// ledger does: what it names brought back first.
fn run_apart(state: &mut State, kind: EventKind) {
    let event = Event {
        schema: SCHEMA_VERSION,
        seq: state.last_seq() + 1,
        at: Timestamp::from_unix_nanos((state.last_seq() + 1) * 1_000),
        kind,
    };
    let view = event.view();
    let names = state.names(&view.kind);
    state
        .fault_in_names(&names)
        .unwrap_or_else(|e| panic!("{e}"));
    apply_judged(state, &event);
}

/// Live key slots: what setting apart takes out.
fn live_keys(state: &State) -> usize {
    state.keys.len()
}

fn set_apart(state: &State) -> State {
    let mut apart = state.clone();
    apart.set_apart_settled();
    apart
}

/// The outcome key `k-{n}` recorded in `state` (sent with reference
/// `0xfeed{n - 1}`, as `claimed_as` sends it).
fn sent_as_claimed(n: usize) -> WithdrawalRequest {
    sent(&withdrawal(&format!("w-{n}")), &format!("0xfeed{}", n - 1))
}

#[test]
fn settled_pairs_set_apart_leave_the_live_slots_and_every_answer_as_it_was() {
    use Fate::*;
    let whole = claimed_as(&[Sent, InFlight, SendFailed, RunningFor, Unclaimed, Sent]);
    let apart = set_apart(&whole);
    // k-1 and k-6 are settled; the rest stay, as does unclaimed w-5.
    assert_eq!(live_keys(&whole) - live_keys(&apart), 2);
    assert_eq!(apart.withdrawals.len(), whole.withdrawals.len() - 2);
    assert_eq!(apart.key_count(), whole.key_count());
    assert_eq!(apart.in_flight(), whole.in_flight());
    assert_eq!(apart.held_totals(), whole.held_totals());
    assert_eq!(apart.captured_totals(), whole.captured_totals());
    assert_eq!(apart.difference(&whole), None);
    assert_eq!(format!("{apart:?}"), format!("{whole:?}"));
    // Not found live until brought back.
    assert!(apart.record("k-1").is_none());
    assert!(apart.captured("w-6").is_none());
}

#[test]
fn a_pair_is_brought_back_by_its_key_or_its_withdrawal_once() {
    use Fate::*;
    let whole = claimed_as(&[Sent, Sent]);
    let mut apart = set_apart(&whole);
    apart
        .fault_in(Some("k-1"), None)
        .unwrap_or_else(|e| panic!("{e}"));
    apart
        .fault_in(None, Some("w-2"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(live_keys(&apart), 2);
    assert_eq!(apart.outcome("k-1"), whole.outcome("k-1"));
    assert_eq!(apart.claimed_by("w-2"), whole.claimed_by("w-2"));
    assert_eq!(apart.captured("w-2"), whole.captured("w-2"));
    // Neither comes back twice, and the count stays.
    apart
        .fault_in(Some("k-2"), Some("w-1"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(live_keys(&apart), 2);
    assert_eq!(apart.key_count(), 2);
    assert_eq!(apart, whole);
}

#[test]
fn a_pair_whose_withdrawal_is_live_already_is_refused_and_nothing_is_brought_back() {
    use Fate::*;
    let mut apart = set_apart(&claimed_as(&[Sent]));
    // Only a damaged archive, or a bug, lists a pair beside a live slot of
    // its own: here the withdrawal is made again behind the archive's back.
    let event = Event {
        schema: SCHEMA_VERSION,
        seq: apart.last_seq() + 1,
        at: Timestamp::from_unix_nanos(1),
        kind: super::tests::created(&withdrawal("w-1")),
    };
    apply_judged(&mut apart, &event);
    let keys = live_keys(&apart);
    let refused = apart.fault_in(Some("k-1"), None);
    assert!(
        matches!(&refused, Err(SnapshotError::Invalid { field: "archived pair", found, .. }) if found.contains("w-1")),
        "{refused:?}"
    );
    assert_eq!(live_keys(&apart), keys);
    assert!(apart.record("k-1").is_none());
}

#[test]
fn a_retried_claim_of_a_settled_key_is_a_replay_once_brought_back() {
    use Fate::*;
    let whole = claimed_as(&[Sent]);
    let mut apart = set_apart(&whole);
    let retry = Command::Claim {
        key: key("k-1"),
        request: withdrawal("w-1"),
    };
    // Judged without the pair, the retry would meet a withdrawal it does
    // not know: what the ledger never lets happen.
    assert!(matches!(
        decide(&apart, &retry),
        Err(Refusal::UnknownWithdrawal { .. })
    ));
    apart
        .fault_in(Some("k-1"), Some("w-1"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(decide(&apart, &retry), decide(&whole, &retry));
}

/// What happens next to a settled key `k-{n}`.
#[derive(Debug, Clone, Copy)]
enum Later {
    Confirmed,
    Failed,
    Bumped,
    CorrectedToFailed,
    RetriedByAnotherKey,
}

fn later_event(n: usize, later: Later) -> EventKind {
    let recorded = sent_as_claimed(n);
    let text = |text: &str| Reason::new(text).unwrap_or_else(|e| panic!("{e}"));
    let failed = || {
        recorded
            .fail(text("returned by the bank"))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let key = key(&format!("k-{n}"));
    match later {
        Later::Confirmed => EventKind::Advanced {
            outcome: recorded.confirm().unwrap_or_else(|e| panic!("{e}")),
            key,
        },
        Later::Failed => EventKind::Advanced {
            outcome: failed(),
            key,
        },
        Later::Bumped => EventKind::Advanced {
            outcome: recorded
                .bump(payonce_model::Reference::new("0xbump").unwrap_or_else(|e| panic!("{e}")))
                .unwrap_or_else(|e| panic!("{e}")),
            key,
        },
        Later::CorrectedToFailed => EventKind::Corrected {
            key,
            old: recorded.clone(),
            new: failed(),
            note: Note::new("the bank returned it").unwrap_or_else(|e| panic!("{e}")),
            by: Actor::new("ops").unwrap_or_else(|e| panic!("{e}")),
        },
        Later::RetriedByAnotherKey => unreachable!("a claim is decided, not made up"),
    }
}

/// A claim of withdrawal `w-{n}` by a key of its own: judged with the
/// names it looks up brought back, as the ledger judges it, it is refused
/// alike, naming the holder.
fn claimed_by_another_key(whole: &mut State, apart: &mut State, n: usize) -> EventKind {
    let command = Command::Claim {
        key: key(&format!("other-{n}")),
        request: withdrawal(&format!("w-{n}")),
    };
    let [key, id] = crate::event::command_names(&command);
    apart.fault_in(key, id).unwrap_or_else(|e| panic!("{e}"));
    let refusal = match (decide(whole, &command), decide(apart, &command)) {
        (Err(refusal), Err(again)) if refusal == again => refusal,
        other => panic!("judged differently: {other:?}"),
    };
    assert!(matches!(refusal, Refusal::Claimed { .. }), "{refusal}");
    crate::decide::refused(whole, &command, &refusal)
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        4 => Just(Fate::Sent),
        1 => Just(Fate::InFlight),
        1 => Just(Fate::SendFailed),
        1 => Just(Fate::RunningFor),
        1 => Just(Fate::Unclaimed),
    ]
}

fn later() -> impl Strategy<Value = Later> {
    prop_oneof![
        Just(Later::Confirmed),
        Just(Later::Failed),
        Just(Later::Bumped),
        Just(Later::CorrectedToFailed),
        Just(Later::RetriedByAnotherKey),
    ]
}

proptest! {
    /// Events after a state's settled pairs were set apart leave it equal
    /// to the whole state they are applied to, and the pairs they name
    /// are live again.
    #[test]
    fn events_on_set_apart_pairs_change_them_as_on_a_whole_state(
        fates in prop::collection::vec(fate(), 1..12),
        laters in prop::collection::vec((0..12usize, later()), 0..8),
    ) {
        let mut whole = claimed_as(&fates);
        let mut apart = set_apart(&whole);
        let sent: Vec<usize> = (1..=fates.len())
            .filter(|&n| matches!(fates[n - 1], Fate::Sent))
            .collect();
        let mut brought_back = std::collections::BTreeSet::new();
        for (pick, later) in laters {
            let Some(&n) = sent.get(pick % sent.len().max(1)) else { continue };
            // Each settled key's later event follows its recorded outcome.
            if !brought_back.insert(n) {
                continue;
            }
            let event = match later {
                Later::RetriedByAnotherKey => claimed_by_another_key(&mut whole, &mut apart, n),
                later => later_event(n, later),
            };
            run(&mut whole, [event.clone()]);
            run_apart(&mut apart, event);
            let named = format!("k-{n}");
            prop_assert!(apart.find_key(&named).is_some(), "{} is not live", named);
        }
        prop_assert_eq!(apart.difference(&whole), None);
        prop_assert_eq!(apart.key_count(), whole.key_count());
        prop_assert_eq!(apart.refusal_count(), whole.refusal_count());
        prop_assert_eq!(apart.captured_totals(), whole.captured_totals());
        prop_assert_eq!(apart.in_flight(), whole.in_flight());
        // Set apart again, the pairs brought back go back too.
        let again = set_apart(&apart);
        prop_assert_eq!(live_keys(&again), live_keys(&set_apart(&whole)));
        prop_assert_eq!(again.difference(&whole), None);
    }
}
