//! Random operation sequences against a small reference model of the seed's
//! in-memory semantics: the ledger must give the same answers, survive
//! reopening with the same answers, and never call the rail twice for one
//! withdrawal unless an operator saw that nothing was sent.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};

use payonce::{RefusalKind, SendFailure, SubmitError};
use payonce_model::{Fingerprint, Reason, WithdrawalId, WithdrawalRequest, WithdrawalState};
use proptest::prelude::*;

use crate::{Fixture, sent};

const KEYS: &[&str] = &["k0", "k1", "k2", "k3", "k4"];

#[derive(Debug, Clone, Copy)]
enum Send {
    /// The rail moves the money and answers.
    Succeed,
    /// The rail moves the money, then the call times out.
    TimeoutAfterSending,
    /// The call fails before reaching the rail.
    FailBeforeSending,
    /// The rail refuses cleanly.
    Refuse,
    /// The rail client panics before sending.
    Panic,
    /// The rail client answers with the request it was given, approved:
    /// not an outcome.
    Unsettled,
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        amount: u8,
    },
    Submit {
        key: usize,
        withdrawal: usize,
        send: Send,
    },
    Record {
        key: usize,
        withdrawal: usize,
    },
    /// An operator looks at the rail and resolves or releases the key,
    /// according to what the rail really did.
    Operator {
        key: usize,
    },
    /// Anybody resolves a key with some state of a withdrawal, settled or
    /// not.
    Resolve {
        key: usize,
        withdrawal: usize,
        ending: u8,
    },
    /// A later report of the rail for a key's outcome: confirmed, failed,
    /// or bumped.
    Advance {
        key: usize,
        how: u8,
    },
    /// An operator corrects a key's outcome.
    Correct {
        key: usize,
        ending: u8,
    },
    Reopen,
    /// A snapshot of the projections is taken now.
    Snapshot,
    /// The ledger is reopened from the snapshot before the one its close
    /// took, if any, and the events after it.
    ReopenFromOlder,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let withdrawal = 0..6usize;
    let send = prop_oneof![
        4 => Just(Send::Succeed),
        2 => Just(Send::TimeoutAfterSending),
        1 => Just(Send::FailBeforeSending),
        2 => Just(Send::Refuse),
        1 => Just(Send::Panic),
        1 => Just(Send::Unsettled),
    ];
    prop_oneof![
        2 => (1..3u8).prop_map(|amount| Op::Create { amount }),
        6 => (key.clone(), withdrawal.clone(), send).prop_map(|(key, withdrawal, send)| Op::Submit { key, withdrawal, send }),
        1 => (key.clone(), withdrawal.clone()).prop_map(|(key, withdrawal)| Op::Record { key, withdrawal }),
        2 => key.clone().prop_map(|key| Op::Operator { key }),
        1 => (key.clone(), withdrawal, 0..4u8).prop_map(|(key, withdrawal, ending)| Op::Resolve { key, withdrawal, ending }),
        2 => (key.clone(), 0..4u8).prop_map(|(key, how)| Op::Advance { key, how }),
        1 => (key, 0..4u8).prop_map(|(key, ending)| Op::Correct { key, ending }),
        1 => Just(Op::Reopen),
        1 => Just(Op::Snapshot),
        1 => Just(Op::ReopenFromOlder),
    ]
}

/// What a call answered, reduced to what the model can predict.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Outcome(Box<WithdrawalRequest>),
    Done,
    Refused(RefusalKind),
    Rejected,
    SendFailed,
    Panicked,
    /// The send answered with a withdrawal that is not an outcome.
    Unsettled,
}

/// The seed's `Submissions`, plus holds, captured funds and minted ids, in
/// plain maps.
#[derive(Default)]
struct Model {
    records: HashMap<String, (Fingerprint, Option<WithdrawalRequest>)>,
    claims: HashMap<WithdrawalId, String>,
    holds: HashSet<WithdrawalId>,
    captured: HashSet<WithdrawalId>,
}

impl Model {
    /// The claim checks shared by submit, record and resolve of a new key.
    fn take(&mut self, key: &str, fingerprint: &Fingerprint) -> Result<(), Answer> {
        let id = fingerprint.id();
        if self.claims.get(id).is_some_and(|holder| holder != key) {
            return Err(Answer::Refused(RefusalKind::Conflict));
        }
        self.claims.insert(id.clone(), key.to_owned());
        self.records
            .insert(key.to_owned(), (fingerprint.clone(), None));
        self.holds.insert(id.clone());
        Ok(())
    }

    /// Looks the key up first, as the seed's `_claim` does.
    fn lookup(&self, key: &str, fingerprint: &Fingerprint) -> Option<Answer> {
        let (recorded, outcome) = self.records.get(key)?;
        Some(if recorded != fingerprint {
            Answer::Refused(RefusalKind::Conflict)
        } else {
            match outcome {
                Some(outcome) => Answer::Outcome(Box::new(outcome.clone())),
                None => Answer::Refused(RefusalKind::InFlight),
            }
        })
    }

    fn settle(&mut self, key: &str, outcome: &WithdrawalRequest) {
        if let Some(record) = self.records.get_mut(key) {
            record.1 = Some(outcome.clone());
        }
        let id = outcome.id();
        match outcome.state() {
            WithdrawalState::Sent | WithdrawalState::Confirmed => {
                self.holds.remove(id);
                self.captured.insert(id.clone());
            }
            WithdrawalState::Failed | WithdrawalState::Rejected => {
                self.holds.remove(id);
                self.captured.remove(id);
            }
            _ => {}
        }
    }

    /// The recorded outcome of `key`, which a later report or a
    /// correction replaces.
    fn outcome(&self, key: &str) -> Option<WithdrawalRequest> {
        self.records.get(key)?.1.clone()
    }
}

fn run(ops: Vec<Op>, set_apart_settled: bool) -> Result<(), TestCaseError> {
    let mut f = Fixture::with(|config| config.set_apart_settled = set_apart_settled);
    let mut model = Model::default();
    let mut withdrawals: Vec<WithdrawalRequest> = Vec::new();
    // The rail's truth: money movements per withdrawal, and which key moved it.
    let mut moved: HashMap<WithdrawalId, usize> = HashMap::new();
    let mut moved_by: HashMap<String, WithdrawalRequest> = HashMap::new();

    let mut steps = 0u32;
    for op in ops {
        match op {
            Op::Create { amount } => {
                let w = f.withdrawal_of(&amount.to_string());
                prop_assert!(
                    withdrawals.iter().all(|other| other.id() != w.id()),
                    "minted ids repeat"
                );
                withdrawals.push(w);
            }
            Op::Submit {
                key,
                withdrawal,
                send,
            } => {
                let Some(w) = withdrawals.get(withdrawal).cloned() else {
                    continue;
                };
                let key = KEYS[key];
                let fingerprint = w.fingerprint();
                let mut sends = false;
                let expected = match model.lookup(key, &fingerprint) {
                    Some(answer) => answer,
                    None => match model.take(key, &fingerprint) {
                        Err(answer) => answer,
                        Ok(()) => {
                            sends = true;
                            match send {
                                Send::Succeed => {
                                    let outcome = sent(&w, &format!("0x{}-{key}", w.id()));
                                    model.settle(key, &outcome);
                                    Answer::Outcome(Box::new(outcome))
                                }
                                Send::TimeoutAfterSending | Send::FailBeforeSending => {
                                    Answer::SendFailed
                                }
                                Send::Refuse => {
                                    model.holds.remove(w.id());
                                    Answer::Rejected
                                }
                                Send::Panic => Answer::Panicked,
                                Send::Unsettled => Answer::Unsettled,
                            }
                        }
                    },
                };
                let mut rail_calls = 0;
                let result = catch_unwind(AssertUnwindSafe(|| {
                    f.ledger().submit(key, w.clone(), |request| {
                        rail_calls += 1;
                        match send {
                            Send::Succeed | Send::TimeoutAfterSending => {
                                *moved.entry(request.id().clone()).or_default() += 1;
                                moved_by.insert(key.to_owned(), request.clone());
                            }
                            _ => {}
                        }
                        match send {
                            Send::Succeed => {
                                Ok(sent(request, &format!("0x{}-{key}", request.id())))
                            }
                            Send::TimeoutAfterSending | Send::FailBeforeSending => {
                                Err(SendFailure::failed("timed out"))
                            }
                            Send::Refuse => {
                                Err(SendFailure::Rejected(Reason::new("no funds").unwrap()))
                            }
                            Send::Panic => panic!("rail client bug"),
                            Send::Unsettled => Ok(request.approve().unwrap()),
                        }
                    })
                }));
                let answer = match result {
                    Err(_) => Answer::Panicked,
                    Ok(Ok(outcome)) => Answer::Outcome(Box::new(outcome)),
                    Ok(Err(SubmitError::Rejected { .. })) => Answer::Rejected,
                    Ok(Err(SubmitError::Send(_))) => Answer::SendFailed,
                    Ok(Err(error))
                        if matches!(error.refusal(), Some(payonce::Refusal::Unsettled { .. })) =>
                    {
                        Answer::Unsettled
                    }
                    Ok(Err(error)) => Answer::Refused(error.refusal_kind().expect("a refusal")),
                };
                prop_assert_eq!(&answer, &expected, "submit {} {}", key, w.id());
                prop_assert_eq!(
                    rail_calls,
                    usize::from(sends),
                    "send calls for {} {}",
                    key,
                    w.id()
                );
            }
            Op::Record { key, withdrawal } => {
                let Some(w) = withdrawals.get(withdrawal).cloned() else {
                    continue;
                };
                let key = KEYS[key];
                let fingerprint = w.fingerprint();
                let expected = match model.lookup(key, &fingerprint) {
                    Some(answer) => answer,
                    None => match model.take(key, &fingerprint) {
                        Err(answer) => answer,
                        Ok(()) => {
                            model.settle(key, &w);
                            Answer::Outcome(Box::new(w.clone()))
                        }
                    },
                };
                let answer = match f.ledger().record(key, w.clone()) {
                    Ok(outcome) => Answer::Outcome(Box::new(outcome)),
                    Err(error) => Answer::Refused(error.refusal_kind().expect("a refusal")),
                };
                prop_assert_eq!(answer, expected, "record {}", key);
            }
            Op::Operator { key } => {
                let key = KEYS[key];
                let Some((fingerprint, None)) = model.records.get(key).cloned() else {
                    continue;
                };
                let truth = moved_by
                    .get(key)
                    .filter(|w| w.id() == fingerprint.id())
                    .cloned();
                match truth {
                    Some(request) => {
                        let outcome = sent(&request, &format!("0x{}-{key}", request.id()));
                        f.ledger()
                            .resolve(key, outcome.clone(), "found on the rail", "ops")
                            .unwrap();
                        model.settle(key, &outcome);
                    }
                    None => {
                        f.ledger()
                            .release(key, "nothing on the rail", "ops")
                            .unwrap();
                        if model.claims.get(fingerprint.id()).map(String::as_str) == Some(key) {
                            model.claims.remove(fingerprint.id());
                            model.holds.remove(fingerprint.id());
                        }
                        model.records.remove(key);
                    }
                }
            }
            Op::Resolve {
                key,
                withdrawal,
                ending,
            } => {
                let Some(w) = withdrawals.get(withdrawal).cloned() else {
                    continue;
                };
                let key = KEYS[key];
                let outcome = ending_of(&w, ending);
                let fingerprint = w.fingerprint();
                let expected = match model.records.get(key).cloned() {
                    _ if !outcome.state().is_settled() => Answer::Refused(RefusalKind::Conflict),
                    None => match model.take(key, &fingerprint) {
                        Err(answer) => answer,
                        Ok(()) => {
                            model.settle(key, &outcome);
                            Answer::Done
                        }
                    },
                    Some((recorded, _)) if recorded != fingerprint => {
                        Answer::Refused(RefusalKind::Conflict)
                    }
                    Some((_, None)) => {
                        model.settle(key, &outcome);
                        Answer::Done
                    }
                    Some((_, Some(existing))) if existing == outcome => Answer::Done,
                    Some((_, Some(_))) => Answer::Refused(RefusalKind::Conflict),
                };
                let answer = match f.ledger().resolve(key, outcome, "callback", "webhook") {
                    Ok(()) => Answer::Done,
                    Err(error) => Answer::Refused(error.refusal_kind().expect("a refusal")),
                };
                prop_assert_eq!(answer, expected, "resolve {}", key);
            }
            Op::Advance { key, how } => {
                let key = KEYS[key];
                let Some(recorded) = model.outcome(key) else {
                    let answer = f.ledger().advance(key, &some_outcome(&withdrawals));
                    prop_assert!(answer.is_err(), "advance of {} without an outcome", key);
                    continue;
                };
                let later = match how {
                    0 => recorded.confirm().ok(),
                    1 => recorded
                        .fail(Reason::new("failed on the rail").unwrap())
                        .ok(),
                    2 => recorded
                        .bump(payonce_model::Reference::new(format!("0xb-{key}")).unwrap())
                        .ok(),
                    _ => Some(recorded.clone()),
                };
                let later = later.unwrap_or_else(|| ending_of(&recorded, 3));
                let expected = if !later.state().is_settled() {
                    Answer::Refused(RefusalKind::Conflict)
                } else if later == recorded {
                    Answer::Done
                } else if recorded.advance_to(&later).is_some() {
                    model.settle(key, &later);
                    Answer::Done
                } else {
                    Answer::Refused(RefusalKind::Conflict)
                };
                let answer = match f.ledger().advance(key, &later) {
                    Ok(()) => Answer::Done,
                    Err(error) => Answer::Refused(error.refusal_kind().expect("a refusal")),
                };
                prop_assert_eq!(answer, expected, "advance {}", key);
            }
            Op::Correct { key, ending } => {
                let key = KEYS[key];
                let Some(recorded) = model.outcome(key) else {
                    let answer = f
                        .ledger()
                        .correct(key, &some_outcome(&withdrawals), "n", "ops");
                    prop_assert!(answer.is_err(), "correct of {} without an outcome", key);
                    continue;
                };
                let right = ending_of(&recorded, ending);
                let expected = if !right.state().is_settled() {
                    Answer::Refused(RefusalKind::Conflict)
                } else {
                    model.settle(key, &right);
                    Answer::Done
                };
                let answer = match f.ledger().correct(key, &right, "recorded in error", "ops") {
                    Ok(()) => Answer::Done,
                    Err(error) => Answer::Refused(error.refusal_kind().expect("a refusal")),
                };
                prop_assert_eq!(answer, expected, "correct {}", key);
            }
            Op::Reopen => f.assert_same_after_reopen(KEYS, &withdrawals.iter().collect::<Vec<_>>()),
            Op::ReopenFromOlder => {
                let withdrawals = withdrawals.iter().collect::<Vec<_>>();
                f.assert_same_after_reopen_from_older(KEYS, &withdrawals)
            }
            Op::Snapshot => {
                if !f.is_shared() {
                    prop_assert!(f.ledger().snapshot().is_ok());
                }
            }
        }
        // With pairs set apart, every other step asks the ledger itself,
        // which brings back what it is asked about; the others ask a copy,
        // which leaves what the next decision reads set apart.
        steps += 1;
        let asked = f.asked_through(steps.is_multiple_of(2));
        for key in KEYS {
            let expected = model
                .records
                .get(*key)
                .and_then(|(_, outcome)| outcome.clone());
            prop_assert_eq!(asked.outcome(key), expected, "outcome of {}", key);
        }
        for w in &withdrawals {
            let holder = asked.claimed_by(w.id()).map(|k| k.to_string());
            prop_assert_eq!(
                holder.as_ref(),
                model.claims.get(w.id()),
                "holder of {}",
                w.id()
            );
            prop_assert_eq!(
                asked.held(w.id()).is_some(),
                model.holds.contains(w.id()),
                "hold of {}",
                w.id()
            );
            prop_assert_eq!(
                asked.captured(w.id()).is_some(),
                model.captured.contains(w.id()),
                "captured funds of {}",
                w.id()
            );
            prop_assert!(
                moved.get(w.id()).copied().unwrap_or(0) <= 1,
                "{} left custody twice",
                w.id()
            );
        }
    }
    if set_apart_settled {
        assert_settled_pairs_left_memory(&f, &model)?;
    }
    Ok(())
}

/// Once the settled pairs no run holds are written into one, every
/// settled pair has left memory, and every key the model says is in
/// flight or holds funds is still there: what the model's answers were
/// checked against is the runs, and eviction dropped nothing live.
fn assert_settled_pairs_left_memory(f: &Fixture, model: &Model) -> Result<(), TestCaseError> {
    let ledger = f.ledger();
    prop_assert!(ledger.flush_settled().is_ok());
    let live = |(fingerprint, outcome): &(Fingerprint, Option<WithdrawalRequest>)| {
        let settled = outcome
            .as_ref()
            .is_some_and(|outcome| outcome.state().is_settled());
        !settled || model.holds.contains(fingerprint.id())
    };
    let least = model.records.values().filter(|record| live(record)).count() as u64;
    let memory = ledger.memory().unwrap();
    prop_assert!(
        memory.live_keys >= least,
        "{} keys live, {least} in flight or holding funds",
        memory.live_keys
    );
    let settled = model.records.len() as u64 - least;
    prop_assert!(
        settled == 0 || memory.live_keys < model.records.len() as u64,
        "{settled} settled pairs, none left memory: {memory:?}"
    );
    Ok(())
}

/// Withdrawal `w` (any state of it: only its fingerprint counts) ended
/// the way `ending` says: sent, confirmed, failed, or (3) approved, which is
/// not an outcome.
fn ending_of(w: &WithdrawalRequest, ending: u8) -> WithdrawalRequest {
    let requested = WithdrawalRequest::new(
        w.id().clone(),
        w.amount(),
        w.currency().clone(),
        w.destination().clone(),
        w.requested_by().clone(),
    );
    match ending {
        0 => sent(&requested, &format!("0xr-{}", w.id())),
        1 => sent(&requested, &format!("0xr-{}", w.id()))
            .confirm()
            .unwrap(),
        2 => requested
            .approve()
            .unwrap()
            .fail(Reason::new("rail says failed").unwrap())
            .unwrap(),
        _ => requested.approve().unwrap(),
    }
}

/// An outcome of some withdrawal, for asking about a key with none.
fn some_outcome(withdrawals: &[WithdrawalRequest]) -> WithdrawalRequest {
    match withdrawals.first() {
        Some(w) => ending_of(w, 0),
        None => ending_of(
            &WithdrawalRequest::new(
                "w-none".parse().unwrap(),
                "1".parse().unwrap(),
                "USDC".parse().unwrap(),
                "0xabc".parse().unwrap(),
                "alice".parse().unwrap(),
            ),
            0,
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_ledger_agrees_with_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        run(ops, false)?;
    }

    /// The same, with settled pairs set apart at every opening and brought
    /// back by the decisions and queries that name them.
    #[test]
    fn the_ledger_agrees_with_the_reference_model_with_settled_pairs_set_apart(
        ops in prop::collection::vec(op(), 1..40),
    ) {
        run(ops, true)?;
    }
}
